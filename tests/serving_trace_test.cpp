// Request traces (serving/trace_reader.h) read from the real files under
// tests/data/serving-traces (Azure 2023 code and conversation, Mooncake conversation and
// synthetic; sources in that folder's README) and from small BurstGPT and broken texts.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "io/input_error.h"
#include "serving/fleet_loader.h"
#include "serving/trace_reader.h"
#include "serving/traffic.h"
#include "test_support.h"

namespace parallax {
namespace {

std::string trace_file(const std::string& name) { return test::source_path("tests/data/serving-traces/" + name); }

TEST(ServingTrace, AzureCsvRelativeToTheFirstRow) {
  const Trace t = read_trace(trace_file("azure-llm-2023-code.csv"));
  EXPECT_EQ(t.format, TraceFormat::kAzure);
  ASSERT_EQ(t.requests.size(), 8819u);  // 8,820 lines less the header (the last has no newline)
  // Rows 1 and 2: 18:17:03.9799600 (4808 → 10 tokens) and 18:17:04.0319600, 52 ms later.
  EXPECT_EQ(t.requests[0].arrival, Time::zero());
  EXPECT_EQ(t.requests[0].prompt_tokens, 4808);
  EXPECT_EQ(t.requests[0].output_tokens, 10);
  EXPECT_EQ(t.requests[1].arrival, Time::ms(52));
  EXPECT_EQ(read_trace(trace_file("azure-llm-2023-conv.csv")).requests.size(), 19366u);
  // Twice as fast: every arrival halved.
  const Trace fast = read_trace(trace_file("azure-llm-2023-code.csv"), 2.0);
  EXPECT_EQ(fast.requests[1].arrival, Time::ms(26));
  EXPECT_EQ(fast.requests.back().arrival.picoseconds(), (t.requests.back().arrival.picoseconds() + 1) / 2);
}

TEST(ServingTrace, MooncakeKeepsItsPrefixBlocks) {
  const Trace t = read_trace(trace_file("mooncake-conversation.jsonl"));
  EXPECT_EQ(t.format, TraceFormat::kMooncake);
  ASSERT_EQ(t.requests.size(), 12031u);
  // First line: timestamp 0, 6758 input and 500 output tokens, hash ids 0…13 (⌈6758/512⌉ = 14).
  EXPECT_EQ(t.requests[0].prompt_tokens, 6758);
  EXPECT_EQ(t.requests[0].output_tokens, 500);
  EXPECT_EQ(t.requests[0].prefix_blocks.size(), 14u);
  EXPECT_EQ(t.requests[0].prefix_block_tokens, 512);
  for (const Request& r : t.requests) {
    ASSERT_EQ(static_cast<int64_t>(r.prefix_blocks.size()), (r.prompt_tokens + 511) / 512) << r.id;
  }
  // Timestamps are milliseconds: the last request arrives 3,536,999 ms in.
  EXPECT_EQ(t.requests.back().arrival, Time::ps(int64_t{3536999} * 1000000000));
  EXPECT_EQ(read_trace(trace_file("mooncake-synthetic.jsonl")).requests.size(), 3993u);
}

TEST(ServingTrace, BurstGptSkipsFailedRequests) {
  const std::string text =
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
      "5,ChatGPT,472,18,490,Conversation log\n"
      "45,ChatGPT,1087,0,1087,Conversation log\n"
      "2,GPT-4,388,247,635,API log\n";
  const Trace t = parse_trace(text, "burst.csv");
  EXPECT_EQ(t.format, TraceFormat::kBurstGpt);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.skipped, 1);
  // Sorted by time, ids after sorting: the GPT-4 row at 2 s comes first.
  EXPECT_EQ(t.requests[0].arrival, Time::from_seconds(2));
  EXPECT_EQ(t.requests[0].prompt_tokens, 388);
  EXPECT_EQ(t.requests[0].id, 0);
  EXPECT_EQ(t.requests[1].arrival, Time::from_seconds(5));
}

TEST(ServingTrace, BadLinesNameTheLine) {
  auto reason = [](const std::string& text) {
    try {
      parse_trace(text, "t");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n";
  EXPECT_NE(reason(azure + "2023-11-16 18:17:04,12x,5\n").find("t:3"), std::string::npos);
  EXPECT_NE(reason(azure + "2023-13-16 18:17:04,12,5\n").find("TIMESTAMP"), std::string::npos);
  EXPECT_NE(reason("{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n{\"timestamp\": \n").find("t:2"),
            std::string::npos);
  EXPECT_NE(reason("{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"extra\": 1}\n").find("extra"),
            std::string::npos);
  EXPECT_NE(reason("when,what\n1,2\n").find("not a known trace"), std::string::npos);
  EXPECT_NE(reason("").find("empty"), std::string::npos);
}

TEST(ServingTrace, RepeatedTracesFollowOneAnother) {
  const Trace t = parse_trace("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:00,10,1\n2023-11-16 00:00:02,20,2\n"
                              "2023-11-16 00:00:04,30,3\n", "t");
  // Span 4 s over 2 gaps: a copy starts 2 s after the previous copy's last request.
  const auto r = repeat_trace(t.requests, 7);
  ASSERT_EQ(r.size(), 7u);
  EXPECT_EQ(r[3].arrival, Time::from_seconds(6));
  EXPECT_EQ(r[3].prompt_tokens, 10);
  EXPECT_EQ(r[6].arrival, Time::from_seconds(12));
  EXPECT_EQ(r[6].id, 6);
  EXPECT_EQ(repeat_trace(t.requests, 2).size(), 2u);
}

TEST(ServingTrace, AzureDatetimes) {
  EXPECT_EQ(parse_azure_ticks("1970-01-01 00:00:00"), 0);
  EXPECT_EQ(parse_azure_ticks("1970-01-02 00:00:01.5"), 864010000000 + 5000000);
  // 2023-11-16 is day 19,677 after 1970-01-01.
  EXPECT_EQ(parse_azure_ticks("2023-11-16 18:17:03.9799600"),
            (int64_t{19677} * 86400 + 18 * 3600 + 17 * 60 + 3) * 10000000 + 9799600);
  EXPECT_LT(parse_azure_ticks("2023-11-16"), 0);
  EXPECT_LT(parse_azure_ticks("2023-11-16 25:00:00"), 0);
  EXPECT_LT(parse_azure_ticks("2023-11-16 18:17:03.12345678"), 0);  // 8 fractional digits
}

TEST(ServingTraffic, LengthsDrawnFromATraceKeepItsRowsPairs) {
  // A fleet whose traffic takes its lengths from the Azure conversation trace: every request's
  // (prompt, output) is one of the trace's rows, and over many draws the mean prompt is the
  // trace's (within 3 standard errors).
  const FleetFile f = load_fleet(test::source_path("tests/data/serve/lengths-from-trace.json"),
                                 test::source_path("workloads/models"), test::source_path("topologies"));
  const Trace trace = read_trace(test::source_path("tests/data/serving-traces/azure-llm-2023-conv.csv"));
  std::set<std::pair<int64_t, int64_t>> rows;
  double mean = 0, square = 0;
  for (const Request& r : trace.requests) {
    rows.emplace(r.prompt_tokens, r.output_tokens);
    mean += static_cast<double>(r.prompt_tokens);
    square += static_cast<double>(r.prompt_tokens) * static_cast<double>(r.prompt_tokens);
  }
  const double n = static_cast<double>(trace.requests.size());
  mean /= n;
  const double sd = std::sqrt(square / n - mean * mean);
  TrafficSpec spec = f.config.traffic;
  spec.requests = 20000;
  Rng rng(5);
  double drawn = 0;
  for (const Request& r : open_loop_requests(spec, rng)) {
    ASSERT_TRUE(rows.contains({r.prompt_tokens, r.output_tokens})) << r.prompt_tokens << ", " << r.output_tokens;
    drawn += static_cast<double>(r.prompt_tokens);
  }
  EXPECT_NEAR(drawn / 20000, mean, 3 * sd / std::sqrt(20000.0));
  EXPECT_NE(spec.describe().find("lengths of the"), std::string::npos) << spec.describe();
}

}  // namespace
}  // namespace parallax
