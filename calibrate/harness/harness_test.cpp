// Tests of the harness code that needs neither a GPU nor MPI: size syntax, groups, resume and
// repair of the measurement file, the sweep driver on a fake backend (its lines, its resume,
// its time limit, and tables that parse back as nccl-tests logs), GEMM shapes and peaks.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "collectives/nccl_tests_log.h"
#include "harness/collective_sweep.h"
#include "harness/compute_plan.h"
#include "harness/measurement_log.h"
#include "harness/rank_groups.h"
#include "harness/sweep_options.h"

namespace parallax::harness {
namespace {

std::filesystem::path temp_dir() {
  return std::filesystem::temp_directory_path() / ("parallax_harness_test_" + std::to_string(getpid()));
}

// Removes the scratch files when the tests end.
class TempDirCleanup : public ::testing::Environment {
 public:
  void TearDown() override { std::filesystem::remove_all(temp_dir()); }
};
[[maybe_unused]] const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new TempDirCleanup);

std::string temp_path(const std::string& name) {
  const auto dir = temp_dir();
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::filesystem::remove(path);
  return path.string();
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_all(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

int count_kind(const std::string& text, const std::string& kind) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"kind\":\"" + kind + "\"") != std::string::npos) ++n;
  }
  return n;
}

TEST(HarnessOptions, SizesFollowNcclTestsSyntax) {
  EXPECT_EQ(parse_size("8", "-b"), 8);
  EXPECT_EQ(parse_size("64K", "-b"), 64 * 1024);
  EXPECT_EQ(parse_size("64M", "-b"), int64_t{64} << 20);
  EXPECT_EQ(parse_size("1G", "-e"), int64_t{1} << 30);
  EXPECT_EQ(parse_size("4g", "-e"), int64_t{4} << 30);
  EXPECT_EQ(parse_size("1 GiB", "-e"), int64_t{1} << 30);
  EXPECT_EQ(parse_size("512 kB", "-e"), 512000);  // a unit string is decimal where it says so
  for (const char* bad : {"", "1X", "-5", "G", "1.5 B", "99999999999999999G"}) {
    EXPECT_THROW(parse_size(bad, "-b"), std::invalid_argument) << bad;
  }
  try {
    parse_size("12Q", "-e");
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("-e"), std::string::npos) << e.what();
  }
}

TEST(HarnessOptions, SweepSizesStopAtTheLargest) {
  // 8·4^k ≤ 1 MiB for k = 0…8: 8, 32, …, 524288 (9 sizes; 8·4^9 = 2 MiB is past the end).
  const auto sizes = sweep_sizes(8, 1 << 20, 4);
  ASSERT_EQ(sizes.size(), 9u);
  EXPECT_EQ(sizes.front(), 8);
  EXPECT_EQ(sizes.back(), 524288);
  EXPECT_EQ(sweep_sizes(8, 8, 2), std::vector<int64_t>{8});
  // 8 B … 1 GiB ×2 is 28 sizes (2^3 … 2^30).
  EXPECT_EQ(sweep_sizes(8, int64_t{1} << 30, 2).size(), 28u);
  EXPECT_THROW(sweep_sizes(0, 8, 2), std::invalid_argument);
  EXPECT_THROW(sweep_sizes(16, 8, 2), std::invalid_argument);
  EXPECT_THROW(sweep_sizes(8, 16, 1), std::invalid_argument);
}

TEST(HarnessOptions, ResolveExpandsAndRejects) {
  SweepOptions o;
  o.ops = {"all"};
  o.groups = {"all,self"};
  resolve_sweep_options(o);
  EXPECT_EQ(o.collectives.size(), 7u);
  EXPECT_EQ(o.groups, (std::vector<std::string>{"all", "self"}));
  EXPECT_EQ(o.in_place_modes, (std::vector<bool>{false, true}));

  SweepOptions spelled;
  spelled.ops = {"allreduce", "alltoall_perf", "sendrecv"};
  spelled.placement = "in";
  resolve_sweep_options(spelled);
  EXPECT_EQ(spelled.collectives, (std::vector<CollectiveOp>{CollectiveOp::kAllReduce, CollectiveOp::kAllToAll,
                                                            CollectiveOp::kSendRecv}));
  EXPECT_EQ(spelled.in_place_modes, std::vector<bool>{true});

  auto rejects = [](auto change) {
    SweepOptions bad;
    change(bad);
    EXPECT_THROW(resolve_sweep_options(bad), std::invalid_argument);
  };
  rejects([](SweepOptions& b) { b.ops = {"allreduse"}; });
  rejects([](SweepOptions& b) { b.groups = {"pairs"}; });
  rejects([](SweepOptions& b) { b.dtype = "float16"; });
  rejects([](SweepOptions& b) { b.redops = {"mean"}; });
  rejects([](SweepOptions& b) { b.placement = "inplace"; });
  rejects([](SweepOptions& b) { b.iters = 0; });
  rejects([](SweepOptions& b) { b.time_limit_s = -1; });
}

std::vector<RankPlace> cluster(int nodes, int per_node) {
  std::vector<RankPlace> places;
  for (int n = 0; n < nodes; ++n) {
    for (int l = 0; l < per_node; ++l) places.push_back(RankPlace{"node" + std::to_string(n), l});
  }
  return places;
}

TEST(HarnessGroups, IsolateLinkClasses) {
  const auto places = cluster(2, 4);  // ranks 0-3 on node0, 4-7 on node1
  EXPECT_EQ(form_group("all", places).ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(form_group("node", places).ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(form_group("pair-intra", places).ranks, (std::vector<int>{0, 1}));
  // Rail 0: local rank 0 of each node; one-per-node: node k gives local rank k mod 4.
  EXPECT_EQ(form_group("rail", places).ranks, (std::vector<int>{0, 4}));
  EXPECT_EQ(form_group("one-per-node", places).ranks, (std::vector<int>{0, 5}));
  EXPECT_EQ(form_group("self", places).ranks, (std::vector<int>{0}));

  const RankGroup all = form_group("all", places);
  EXPECT_EQ(all.nodes, 2);
  EXPECT_EQ(all.ranks_per_node, 4);
  const RankGroup rail = form_group("rail", places);
  EXPECT_EQ(rail.nodes, 2);
  EXPECT_EQ(rail.ranks_per_node, 1);
  EXPECT_EQ(member_labels(rail, places), (std::vector<std::string>{"node0:0", "node1:0"}));
}

TEST(HarnessGroups, UnformableGroupsSayWhy) {
  const auto one_gpu = cluster(1, 1);
  EXPECT_FALSE(form_group("pair-intra", one_gpu).why_not.empty());
  EXPECT_FALSE(form_group("one-per-node", cluster(1, 8)).why_not.empty());
  EXPECT_FALSE(form_group("rail", cluster(1, 8)).why_not.empty());
  EXPECT_TRUE(form_group("self", one_gpu).why_not.empty());
  EXPECT_EQ(form_group("all", one_gpu).ranks, std::vector<int>{0});
  EXPECT_THROW(form_group("pairs", one_gpu), std::invalid_argument);
  // Hosts interleaved by the launcher: nodes are numbered by first appearance.
  const std::vector<RankPlace> interleaved = {{"a", 0}, {"b", 0}, {"a", 1}, {"b", 1}};
  EXPECT_EQ(form_group("node", interleaved).ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(form_group("pair-intra", interleaved).ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(form_group("one-per-node", interleaved).ranks, (std::vector<int>{0, 3}));
  EXPECT_EQ(node_count(interleaved), 2);
}

TEST(HarnessSweep, SizesRoundDownToWholeElementsPerRank) {
  // all_reduce: size is the per-rank buffer; 8 B of float = 2 elements.
  EXPECT_EQ(size_to_count(CollectiveOp::kAllReduce, 8, 4, 3).count, 2);
  EXPECT_EQ(size_to_count(CollectiveOp::kAllReduce, 8, 4, 3).size_bytes, 8);
  EXPECT_EQ(size_to_count(CollectiveOp::kAllReduce, 12, 4, 8).count, 3);  // no 16 B rounding
  // all_gather on 3 ranks: 8 B / 4 B / 3 = 0 elements per rank → skipped.
  EXPECT_EQ(size_to_count(CollectiveOp::kAllGather, 8, 4, 3).count, 0);
  // As nccl-tests: 1024 B / 4 / 3 = 85 floats per rank, rounded down to a multiple of 16 B
  // (4 floats): 84 → 84·4·3 = 1008 B moved.
  EXPECT_EQ(size_to_count(CollectiveOp::kAllGather, 1024, 4, 3).count, 84);
  EXPECT_EQ(size_to_count(CollectiveOp::kAllGather, 1024, 4, 3).size_bytes, 1008);
  // 32 B on 3 ranks: 2 floats per rank, less than 16 B → nothing.
  EXPECT_EQ(size_to_count(CollectiveOp::kAllGather, 32, 4, 3).count, 0);
  EXPECT_EQ(size_to_count(CollectiveOp::kAllToAll, 1024, 2, 2).count, 256);
  // bfloat16 reduce-scatter, 48 B on 2 ranks: 12 per rank → 8 (16 B) → 32 B.
  EXPECT_EQ(size_to_count(CollectiveOp::kReduceScatter, 48, 2, 2).count, 8);
  EXPECT_EQ(size_to_count(CollectiveOp::kReduceScatter, 48, 2, 2).size_bytes, 32);
  // double all-gather, 40 B on 2 ranks: 2 per rank, already 16 B.
  EXPECT_EQ(size_to_count(CollectiveOp::kAllGather, 40, 8, 2).count, 2);
}

TEST(HarnessSweep, InPlaceOnOneRankMeasuresNothing) {
  for (CollectiveOp op : {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter,
                          CollectiveOp::kBroadcast, CollectiveOp::kReduce}) {
    EXPECT_TRUE(measures_nothing(op, 1, true)) << op_name(op);
    EXPECT_FALSE(measures_nothing(op, 1, false)) << op_name(op);
    EXPECT_FALSE(measures_nothing(op, 2, true)) << op_name(op);
  }
  EXPECT_FALSE(measures_nothing(CollectiveOp::kAllToAll, 1, true));
  EXPECT_FALSE(measures_nothing(CollectiveOp::kSendRecv, 1, true));
}

// A coordinator of a run in which another process always fails.
class PeerAlwaysFails final : public Coordinator {
 public:
  bool is_root() const override { return true; }
  int64_t broadcast(int64_t value) override { return value; }
  std::string broadcast(const std::string& bytes) override { return bytes; }
  bool any(bool) override {
    ++agreements;
    return true;
  }
  std::vector<double> reduce_max(const std::vector<double>& local) override { return local; }
  std::vector<std::string> all_gather(const std::string& local) override { return {local}; }
  void barrier() override { ++barriers; }
  int agreements = 0, barriers = 0;
};

TEST(HarnessSweep, AFailedWarmUpIsAgreedOnByEveryProcess) {
  SingleProcess alone;
  int warmups = 0;
  warm_up_together(alone, {0}, [&] { ++warmups; });
  EXPECT_EQ(warmups, 1);
  // This process's own error comes back as it was; it still reached the agreement.
  PeerAlwaysFails world;
  try {
    warm_up_together(world, {3}, [] { throw std::runtime_error("ncclAllReduce failed: unhandled cuda error"); });
    FAIL() << "no error";
  } catch (const PeerFailure&) {
    FAIL() << "this process's own error must not read as a peer's";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "ncclAllReduce failed: unhandled cuda error");
  }
  EXPECT_EQ(world.agreements, 1);
  // Only another process failed: PeerFailure, after the same one agreement.
  EXPECT_THROW(warm_up_together(world, {3}, [] {}), PeerFailure);
  EXPECT_THROW(warm_up_together(world, {}, nullptr), PeerFailure);  // a process that drives no member
  EXPECT_EQ(world.agreements, 3);
  EXPECT_EQ(world.barriers, 0);

  // PARALLAX_BENCH_FAULT=warmup:R fails the warm-up of world rank R, and of no other.
  ASSERT_EQ(setenv("PARALLAX_BENCH_FAULT", "warmup:2", 1), 0);
  EXPECT_NO_THROW(warm_up_together(alone, {0, 1}, [] {}));
  try {
    warm_up_together(alone, {1, 2}, [] {});
    FAIL() << "no injected fault";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("fault injected by PARALLAX_BENCH_FAULT"), std::string::npos) << e.what();
  }
  unsetenv("PARALLAX_BENCH_FAULT");
  EXPECT_NO_THROW(warm_up_together(alone, {1, 2}, [] {}));
}

TEST(HarnessSweep, StatsTakeTheSlowestRank) {
  const TimeStats a = summarize({1.0, 2.0, 6.0});  // mean 3
  EXPECT_DOUBLE_EQ(a.mean_us, 3.0);
  EXPECT_DOUBLE_EQ(a.min_us, 1.0);
  EXPECT_DOUBLE_EQ(a.max_us, 6.0);
  EXPECT_DOUBLE_EQ(a.median_us, 2.0);
  EXPECT_DOUBLE_EQ(summarize({4.0, 1.0, 3.0, 2.0}).median_us, 2.5);
  const TimeStats s = slowest(a, summarize({2.0, 2.0}));
  EXPECT_DOUBLE_EQ(s.mean_us, 3.0);
  EXPECT_DOUBLE_EQ(s.min_us, 2.0);
  EXPECT_DOUBLE_EQ(s.max_us, 6.0);
  EXPECT_THROW(summarize({}), std::invalid_argument);
}

TEST(HarnessLog, ResumeDropsAPartialLastLine) {
  const std::string path = temp_path("partial.jsonl");
  const std::string good =
      "{\"kind\":\"meta\",\"run\":\"r\"}\n"
      "{\"kind\":\"collective\",\"op\":\"all_reduce\",\"group\":\"all\",\"ranks\":2,\"size_bytes\":8,"
      "\"dtype\":\"float\",\"redop\":\"sum\",\"algo\":\"auto\",\"proto\":\"auto\",\"in_place\":false,\"time_us\":5}\n"
      "\n";
  write_all(path, good + "{\"kind\":\"collective\",\"op\":\"all_re");
  std::ostringstream notes;
  {
    MeasurementLog log(path, notes);
    EXPECT_EQ(log.resumed(), 1u);
    EXPECT_NE(notes.str().find("partial last line"), std::string::npos) << notes.str();
    EXPECT_EQ(read_all(path), good);
    const nlohmann::json probe = {{"kind", "collective"}, {"op", "all_reduce"}, {"group", "all"},
                                  {"ranks", 2},           {"size_bytes", 8},    {"dtype", "float"},
                                  {"redop", "sum"},       {"algo", "auto"},     {"proto", "auto"},
                                  {"in_place", false}};
    ASSERT_NE(log.find(measurement_key(probe)), nullptr);
    EXPECT_EQ(log.find(measurement_key(probe))->value("time_us", 0.0), 5.0);
    nlohmann::ordered_json next = probe;
    next["in_place"] = true;
    log.append(next);
    EXPECT_NE(log.find(measurement_key(nlohmann::json(next))), nullptr);
  }
  EXPECT_EQ(count_kind(read_all(path), "collective"), 2);
  EXPECT_EQ(read_all(path).back(), '\n');
}

TEST(HarnessLog, ALastLineThatDoesNotParseIsDroppedAnEarlierOneRefused) {
  const std::string path = temp_path("bad.jsonl");
  write_all(path, "{\"kind\":\"meta\"}\n{\"kind\":\"gemm\",\"m\":\n");
  std::ostringstream notes;
  { MeasurementLog log(path, notes); }
  EXPECT_EQ(read_all(path), "{\"kind\":\"meta\"}\n");
  EXPECT_NE(notes.str().find(":2:"), std::string::npos) << notes.str();

  write_all(path, "{\"kind\":\"meta\"}\nnot json\n{\"kind\":\"meta\"}\n");
  try {
    MeasurementLog log(path, notes);
    FAIL() << "a bad line in the middle must be refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
}

TEST(HarnessLog, ASecondWriterOfTheSameFileIsRefusedUntilTheFirstCloses) {
  const std::string path = temp_path("locked.jsonl");
  write_all(path, "{\"kind\":\"meta\"}\n");
  std::ostringstream notes;
  {
    MeasurementLog first(path, notes);
    try {
      MeasurementLog second(path, notes);
      FAIL() << "two runs appending to one file would measure points twice";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("another run is still writing"), std::string::npos) << e.what();
    }
  }
  MeasurementLog again(path, notes);  // the lock went with the first log
  EXPECT_EQ(again.resumed(), 0u);
}

TEST(HarnessLog, KeysNameThePoint) {
  const nlohmann::json gemm = {{"kind", "gemm"}, {"dtype", "bf16"}, {"m", 1}, {"n", 2}, {"k", 3}, {"label", "x"}};
  nlohmann::json other = gemm;
  other["label"] = "y";
  other["time_us"] = 7;
  EXPECT_EQ(measurement_key(gemm), measurement_key(other));
  other["k"] = 4;
  EXPECT_NE(measurement_key(gemm), measurement_key(other));
  EXPECT_EQ(measurement_key({{"kind", "meta"}}), "");
  EXPECT_EQ(measurement_key(nlohmann::json::array()), "");
}

// A backend whose collectives take a fixed time per byte, so that lines are predictable.
class FakeBackend final : public CollectiveBackend {
 public:
  void open(const RankGroup& group, const Forcing&, int64_t max_bytes) override {
    ++opens;
    ranks = static_cast<int>(group.ranks.size());
    max = max_bytes;
  }
  std::optional<TimeStats> measure(const CollectivePoint& p) override {
    ++measures;
    if (fail_at >= 0 && measures == fail_at) throw std::runtime_error("fakeAllReduce: unhandled cuda error");
    const double t = 10.0 + static_cast<double>(p.count) * 1e-3;
    return TimeStats{t, t - 1, t + 1, t};
  }
  void close(bool failed) noexcept override { closed_failed += failed ? 1 : 0; }
  int opens = 0, measures = 0, ranks = 0, fail_at = -1, closed_failed = 0;
  int64_t max = 0;
};

struct SweepFixture {
  SweepOptions options;
  SingleProcess coordinator;
  FakeBackend backend;
  std::ostringstream table, progress;

  SweepFixture() {
    options.min_bytes = "8";
    options.max_bytes = "1K";
    options.step_factor = 4;  // 8, 32, 128, 512
    options.ops = {"all_reduce", "all_gather", "broadcast"};
    options.groups = {"all", "pair-intra", "one-per-node", "self"};
    resolve_sweep_options(options);
  }

  SweepSummary run(MeasurementLog* log, double limit_s = 0) {
    RunClock clock(limit_s);
    SweepContext c;
    c.harness = "test-bench";
    c.run_id = "run-1";
    c.options = &options;
    c.places = cluster(1, 3);
    c.coordinator = &coordinator;
    c.backend = &backend;
    c.log = log;
    c.clock = &clock;
    c.table = &table;
    c.progress = &progress;
    return run_collective_sweeps(c);
  }
};

TEST(HarnessSweep, WritesOneLinePerPointAndResumes) {
  const std::string path = temp_path("sweep.jsonl");
  SweepFixture f;
  std::ostringstream notes;
  {
    MeasurementLog log(path, notes);
    const SweepSummary s = f.run(&log);
    // Groups: all (3 ranks), pair-intra (2), self (1); one-per-node needs two nodes.
    // Points per group: 3 ops × 4 sizes × 2 placements = 24, less all_gather's sizes with less
    // than 16 B per rank (nccl-tests' rounding): 8 and 32 B on 3 ranks, 8 B on 2 and on 1; and
    // on one rank every in-place point (all three ops move nothing in place there).
    // all: 24 − 4 = 20; pair-intra: 24 − 2 = 22; self: 24 − 12 − 1 = 11. Total 53.
    EXPECT_EQ(s.measured, 53);
    EXPECT_EQ(s.resumed, 0);
    EXPECT_FALSE(s.stopped);
    EXPECT_EQ(f.backend.opens, 3);
  }
  EXPECT_NE(f.progress.str().find("skipping group one-per-node"), std::string::npos);
  const std::string text = read_all(path);
  EXPECT_EQ(count_kind(text, "collective"), 53);
  EXPECT_EQ(text.find("\"group\":\"self\",\"ranks\":1,\"nodes\":1,\"ranks_per_node\":1,\"members\":[\"node0:0\"],"
                      "\"size_bytes\":8,\"count\":2,\"dtype\":\"float\",\"redop\":\"sum\",\"root\":-1,\"algo\":\"auto\","
                      "\"proto\":\"auto\",\"in_place\":true"),
            std::string::npos);
  EXPECT_NE(f.progress.str().find("in place on one rank moves nothing"), std::string::npos);

  // The first line is all_reduce on all 3 ranks, 8 B out-of-place: count 2, time 10.002 µs.
  const auto first = nlohmann::json::parse(text.substr(0, text.find('\n')));
  EXPECT_EQ(first["op"], "all_reduce");
  EXPECT_EQ(first["group"], "all");
  EXPECT_EQ(first["ranks"], 3);
  EXPECT_EQ(first["members"], (nlohmann::json{"node0:0", "node0:1", "node0:2"}));
  EXPECT_EQ(first["count"], 2);
  EXPECT_EQ(first["root"], -1);
  EXPECT_EQ(first["in_place"], false);
  EXPECT_DOUBLE_EQ(first["time_us"].get<double>(), 10.002);
  // algbw = 8 B / 10.002 µs = 7.998e-4 GB/s; busbw ×2(3−1)/3.
  EXPECT_NEAR(first["algbw_gbs"].get<double>(), 8.0 / 10.002 / 1e3, 1e-6);
  EXPECT_NEAR(first["busbw_gbs"].get<double>(), 8.0 / 10.002 / 1e3 * 4.0 / 3.0, 1e-6);

  // The same sweep again measures nothing and opens no communicator.
  SweepFixture again;
  {
    MeasurementLog log(path, notes);
    const SweepSummary s = again.run(&log);
    EXPECT_EQ(s.measured, 0);
    EXPECT_EQ(s.resumed, 53);
    EXPECT_EQ(again.backend.opens, 0);
  }
  EXPECT_EQ(count_kind(read_all(path), "collective"), 53);
  // … and still prints the tables, from the file.
  EXPECT_EQ(again.table.str(), f.table.str());
}

TEST(HarnessSweep, TablesParseAsNcclTestsLogs) {
  SweepFixture f;
  f.options.ops = {"broadcast"};
  f.options.groups = {"all"};
  resolve_sweep_options(f.options);
  f.run(nullptr);
  const NcclTestsLog log = parse_nccl_tests_log(f.table.str(), "table");
  ASSERT_EQ(log.rows.size(), 4u);
  EXPECT_EQ(log.op, CollectiveOp::kBroadcast);
  EXPECT_EQ(log.rows[1].size_bytes, 32);
  ASSERT_TRUE(log.rows[1].in_place.has_value());
  EXPECT_NEAR(log.rows[1].out_of_place->time_us, 10.008, 0.01);
  EXPECT_NE(f.table.str().find("warmup iters: 5 iters: 20"), std::string::npos);
}

TEST(HarnessSweep, AFailingSweepIsReportedAndTheNextRuns) {
  SweepFixture f;
  f.backend.fail_at = 3;
  const SweepSummary s = f.run(nullptr);
  EXPECT_EQ(s.failed_sweeps, 1);
  EXPECT_EQ(f.backend.closed_failed, 1);
  EXPECT_EQ(f.backend.opens, 3);  // pair-intra and self still ran
  EXPECT_EQ(s.measured, 2 + 22 + 11);
}

TEST(HarnessSweep, TimeLimitStopsCleanly) {
  SweepFixture f;
  const SweepSummary s = f.run(nullptr, 1e-9);
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.stop_reason, "time limit");
  EXPECT_EQ(s.measured, 0);
  EXPECT_EQ(f.backend.measures, 0);
}

TEST(HarnessCompute, ShapesPeaksAndLines) {
  const auto shapes = gemm_shapes();
  // 3 hidden sizes × 4 token counts × 6 layers, 14 MoE expert shapes (4 + 3 token counts × up
  // and down) and 6 squares, less the 3 squares that equal an attention-output shape (t = h:
  // 4096³, 8192³, 16384³), which carry both labels.
  EXPECT_EQ(shapes.size(), 3u * 4u * 6u + 14u + 6u - 3u);
  bool qkv = false, gqa = false, merged = false, moe = false;
  for (const auto& s : shapes) {
    if (s.label == "h4096.qkv" && s.m == 2048) qkv = s.n == 12288 && s.k == 4096 && s.batch == 1;
    // Llama-3 70B: 64 query heads and 8 KV heads of 128: (64 + 16)·128 = 10240 = 1.25h.
    if (s.label == "h8192.qkv_gqa" && s.m == 4096) gqa = s.n == 10240 && s.k == 8192;
    if (s.m == 8192 && s.n == 8192 && s.k == 8192) merged = s.label == "h8192.attn_out+square";
    if (s.label == "dsv3.moe_up" && s.m == 128) moe = s.n == 4096 && s.k == 7168 && s.batch == 8;
  }
  EXPECT_TRUE(qkv);
  EXPECT_TRUE(gqa);
  EXPECT_TRUE(merged);
  EXPECT_TRUE(moe);
  const auto variants = gemm_variants({"bf16", "fp8"});
  ASSERT_EQ(variants.size(), 3u);
  EXPECT_FALSE(variants[0].fast_accum);
  EXPECT_TRUE(variants[1].fast_accum && variants[1].dtype == "fp8");
  EXPECT_FALSE(variants[2].fast_accum);

  EXPECT_EQ(peak_tflops("NVIDIA H200", "bf16"), 989.0);
  EXPECT_EQ(peak_tflops("NVIDIA H100 80GB HBM3", "fp8"), 1979.0);
  EXPECT_EQ(peak_tflops("NVIDIA B200", "fp8"), 4500.0);
  EXPECT_EQ(peak_tflops("NVIDIA A100-SXM4-80GB", "bf16"), 312.0);
  EXPECT_FALSE(peak_tflops("NVIDIA A100-SXM4-80GB", "fp8"));
  EXPECT_FALSE(peak_tflops("NVIDIA H100 PCIe", "bf16"));
  EXPECT_FALSE(peak_tflops("Tesla V100-SXM2-32GB", "bf16"));

  // FORMAT.md's examples: 2·8192³ FLOP in 1390 µs = 791.0 TFLOP/s; a 1 GiB copy in 500 µs
  // moves 2 GiB = 4294.967 GB/s.
  const GemmVariant bf16{"bf16", false}, fp8_fast{"fp8", true}, fp8{"fp8", false};
  const auto g = gemm_line("r", bf16, GemmShape{"square", 8192, 8192, 8192}, 5, 20, TimeStats{1390, 1385.2, 1401.7},
                           peak_tflops("NVIDIA H200", "bf16"));
  EXPECT_NEAR(g["tflops"].get<double>(), 791.0, 0.05);
  EXPECT_EQ(g["peak_tflops"], 989.0);
  EXPECT_FALSE(g.contains("batch"));
  EXPECT_FALSE(g.contains("fast_accum"));
  const auto none = gemm_line("r", bf16, GemmShape{"square", 8, 8, 8}, 5, 20, TimeStats{1, 1, 1}, std::nullopt);
  EXPECT_FALSE(none.contains("peak_tflops"));
  // 8 experts × 2·128·4096·7168 FLOP in 100 µs = 601.3 TFLOP/s.
  const GemmShape experts{"dsv3.moe_up", 128, 4096, 7168, 8};
  const auto grouped = gemm_line("r", fp8_fast, experts, 5, 20, TimeStats{100, 99, 101}, std::nullopt);
  EXPECT_NEAR(grouped["tflops"].get<double>(), 8 * 2.0 * 128 * 4096 * 7168 / 100.0 / 1e6, 1e-3);
  EXPECT_EQ(grouped["batch"], 8);
  EXPECT_EQ(grouped["fast_accum"], true);
  // The two fp8 variants of one shape are two points; the line's key is the identity's.
  EXPECT_NE(measurement_key(gemm_identity(fp8_fast, experts)), measurement_key(gemm_identity(fp8, experts)));
  EXPECT_EQ(measurement_key(nlohmann::json(grouped)), measurement_key(gemm_identity(fp8_fast, experts)));
  // A line written before batch and fast_accum existed is the single precise product.
  EXPECT_EQ(measurement_key({{"kind", "gemm"}, {"dtype", "fp8"}, {"m", 1}, {"n", 2}, {"k", 3}}),
            measurement_key(gemm_identity(fp8, GemmShape{"x", 1, 2, 3})));
  const auto m = memcpy_line("r", "d2d", int64_t{1} << 30, 3, 10, TimeStats{500, 490, 510});
  EXPECT_NEAR(m["gbs"].get<double>(), 4294.967, 1e-3);
  EXPECT_EQ(measurement_key(nlohmann::json(m)), measurement_key(memcpy_identity("d2d", int64_t{1} << 30)));
  // A host copy counts the bytes over the link once: 1 GiB in 20 ms = 53.687 GB/s.
  EXPECT_NEAR(memcpy_line("r", "h2d", int64_t{1} << 30, 3, 10, TimeStats{20000, 19900, 20100})["gbs"].get<double>(),
              53.687, 1e-3);
  EXPECT_NEAR(memcpy_line("r", "d2h", int64_t{1} << 30, 3, 10, TimeStats{20000, 19900, 20100})["gbs"].get<double>(),
              53.687, 1e-3);
  EXPECT_EQ(memcpy_sizes(int64_t{4} << 30).size(), 13u);  // 1 MiB … 4 GiB
}

}  // namespace
}  // namespace parallax::harness
