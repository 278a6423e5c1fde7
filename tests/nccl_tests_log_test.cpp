// nccl-tests logs: the nine measured logs under tests/data/nccl-tests, hand-written logs of each
// layout generation, errors, number formatting, and the writer's round trip through the reader.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "collectives/nccl_tests_log.h"
#include "io/input_error.h"
#include "test_support.h"

namespace parallax {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Digits after the decimal point of a printed number ("1950.5" → 1, "15749" → 0).
int decimals(const std::string& printed) {
  auto dot = printed.find('.');
  return dot == std::string::npos ? 0 : static_cast<int>(printed.size() - dot - 1);
}

// Expects `fn` to throw InputError whose pointer is `pointer` and whose reason contains `part`.
template <typename Fn>
void expect_input_error(Fn fn, const std::string& pointer, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no InputError; expected " << pointer << ": …" << part << "…";
  } catch (const InputError& e) {
    EXPECT_EQ(e.pointer(), pointer) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(pointer), std::string::npos) << e.what();
  }
}

// What each measured log says about itself (its comment header), and its rows counted by hand.
struct Fixture {
  const char* file;
  CollectiveOp op;
  size_t rows;
  int ranks;
  int nodes;
  const char* nccl_version;
  int64_t first_size, last_size;
  NcclTestsNumberStyle style;  // how its nccl-tests build printed numbers
};

const std::vector<Fixture>& fixtures() {
  static const std::vector<Fixture> f = {
      // 0, 0, then 4 B … 2 GiB = 2^2 … 2^31: 2 + 30 = 32 rows. "2node" only in the file name.
      {"aws-p5-h100-2node-16gpu-efa-allreduce-nccl2.18.5.txt", CollectiveOp::kAllReduce, 32, 16, 2, "2.18.5", 0,
       2147483648, NcclTestsNumberStyle::kClassic},
      // 8 B … 2 GiB = 2^3 … 2^31: 29 rows; "2 nodes x 8x A100" in the system comment.
      {"crusoe-a100-80gb-2node-16gpu-ib-allreduce.txt", CollectiveOp::kAllReduce, 29, 16, 2, "", 8, 2147483648,
       NcclTestsNumberStyle::kCurrent},
      // 8 B … 16 GiB = 2^3 … 2^34: 32 rows.
      {"dgx-h100-8gpu-1node-allreduce.txt", CollectiveOp::kAllReduce, 32, 8, 1, "", 8, 17179869184,
       NcclTestsNumberStyle::kClassic},
      // 64 B … 8 GiB = 2^6 … 2^33: 28 rows.
      {"oci-a100-40gb-8gpu-1node-allreduce.txt", CollectiveOp::kAllReduce, 28, 8, 1, "", 64, 8589934592,
       NcclTestsNumberStyle::kClassic},
      // 0, 0, then 32 B … 1 GiB = 2^5 … 2^30: 2 + 26 = 28 rows.
      {"pcie-1node-2x-rtx2080ti-allgather.txt", CollectiveOp::kAllGather, 28, 2, 1, "", 0, 1073741824,
       NcclTestsNumberStyle::kClassic},
      // 8 B … 1 GiB = 2^3 … 2^30: 28 rows.
      {"pcie-1node-2x-rtx2080ti-allreduce.txt", CollectiveOp::kAllReduce, 28, 2, 1, "", 8, 1073741824,
       NcclTestsNumberStyle::kClassic},
      // 0, 0, then 32 B … 1 GiB: 28 rows.
      {"pcie-1node-2x-rtx2080ti-alltoall.txt", CollectiveOp::kAllToAll, 28, 2, 1, "", 0, 1073741824,
       NcclTestsNumberStyle::kClassic},
      // 8 B … 1 GiB: 28 rows.
      {"pcie-1node-2x-rtx2080ti-broadcast.txt", CollectiveOp::kBroadcast, 28, 2, 1, "", 8, 1073741824,
       NcclTestsNumberStyle::kClassic},
      {"pcie-1node-2x-rtx2080ti-reduce.txt", CollectiveOp::kReduce, 28, 2, 1, "", 8, 1073741824,
       NcclTestsNumberStyle::kClassic},
  };
  return f;
}

std::string fixture_path(const Fixture& f) { return test::source_path(std::string("tests/data/nccl-tests/") + f.file); }

TEST(NcclTestsLog, MeasuredLogsParseWithWhatTheirHeadersSay) {
  for (const auto& f : fixtures()) {
    SCOPED_TRACE(f.file);
    const NcclTestsLog log = read_nccl_tests_log(fixture_path(f));
    ASSERT_TRUE(log.op.has_value());
    EXPECT_EQ(*log.op, f.op);
    EXPECT_EQ(log.rows.size(), f.rows);
    EXPECT_EQ(log.ranks, f.ranks);   // from "# ranks: N": the transcriptions have no device lines
    EXPECT_EQ(log.nodes, f.nodes);
    EXPECT_TRUE(log.devices.empty());
    EXPECT_EQ(log.nccl_version, f.nccl_version);
    EXPECT_EQ(log.layout, NcclTestsLayout::kCurrent);
    EXPECT_TRUE(log.extra_columns.empty());
    ASSERT_FALSE(log.rows.empty());
    EXPECT_EQ(log.rows.front().size_bytes, f.first_size);
    EXPECT_EQ(log.rows.back().size_bytes, f.last_size);
    for (size_t i = 1; i < log.rows.size(); ++i) EXPECT_GE(log.rows[i].size_bytes, log.rows[i - 1].size_bytes);
    for (const auto& row : log.rows) {
      EXPECT_EQ(row.type, "float");
      EXPECT_EQ(row.redop, reduces(f.op) ? "sum" : "none");
      EXPECT_EQ(row.root, has_root(f.op) ? 0 : -1);  // the rooted runs used root 0
      ASSERT_TRUE(row.out_of_place && row.in_place);
      EXPECT_TRUE(row.extra.empty());
    }
  }
}

TEST(NcclTestsLog, KnownRowsReadExactly) {
  // DGX H100: "  8589934592    2147483648     float     sum      -1    31307  274.38  480.16      0    31328 …"
  const NcclTestsLog dgx = read_nccl_tests_log(fixture_path(fixtures()[2]));
  const NcclTestsRow& r = dgx.rows[30];  // 8 GiB = 2^33 is the 31st row (2^3 is the 1st)
  EXPECT_EQ(r.size_bytes, 8589934592);
  EXPECT_EQ(r.count, 2147483648);  // 2^33 B / 4 B per float
  EXPECT_DOUBLE_EQ(r.out_of_place->time_us, 31307);
  EXPECT_DOUBLE_EQ(r.out_of_place->algbw_gbs, 274.38);
  EXPECT_DOUBLE_EQ(r.out_of_place->busbw_gbs, 480.16);
  EXPECT_EQ(r.out_of_place->wrong, "0");
  EXPECT_DOUBLE_EQ(r.in_place->time_us, 31328);
  // The comment and column header hold 18 lines, so the first row is line 19 and this one 49.
  EXPECT_EQ(dgx.rows[0].line, 19);
  EXPECT_EQ(r.line, 49);

  // All-to-all: validation off for in-place only, printed "N/A".
  const NcclTestsLog a2a = read_nccl_tests_log(fixture_path(fixtures()[6]));
  EXPECT_EQ(a2a.rows[0].out_of_place->wrong, "0");
  EXPECT_EQ(a2a.rows[0].in_place->wrong, "N/A");
  // 32 B total over 2 ranks of 4-byte floats: 32 / 4 / 2 = 4 elements per peer.
  EXPECT_EQ(a2a.rows[2].size_bytes, 32);
  EXPECT_EQ(a2a.rows[2].count, 4);
}

// Every printed algbw is size / time and every busbw is algbw × busbw_factor(op, n), up to the
// rounding of the printed time (half its last digit) and of each bandwidth (0.005).
TEST(NcclTestsLog, EveryMeasuredRowObeysTheBandwidthDefinitions) {
  for (const auto& f : fixtures()) {
    SCOPED_TRACE(f.file);
    const std::vector<std::string> lines = split_lines(read_text(fixture_path(f)));
    const NcclTestsLog log = read_nccl_tests_log(fixture_path(f));
    const double factor = busbw_factor(f.op, f.ranks);
    for (const auto& row : log.rows) {
      const std::vector<std::string> printed = words(lines.at(static_cast<size_t>(row.line - 1)));
      ASSERT_EQ(printed.size(), 13u);
      const double size = static_cast<double>(row.size_bytes);
      int block_index = 0;
      for (const auto* block : {&row.out_of_place, &row.in_place}) {
        SCOPED_TRACE("line " + std::to_string(row.line) + (block_index == 0 ? " out-of-place" : " in-place"));
        const NcclTestsResult& r = **block;
        // The true time lies within half a unit of the last printed digit of the time.
        const double half_ulp = 0.5 * std::pow(10.0, -decimals(printed[block_index == 0 ? 5 : 9]));
        // algbw (GB/s) = size (B) / time (µs) / 1e3, over the time's range, then ± 0.005.
        const double algbw_lo = size / (r.time_us + half_ulp) / 1e3;
        const double algbw_hi = size / (r.time_us - half_ulp) / 1e3;
        const double eps = 0.005 + 1e-9;
        EXPECT_GE(r.algbw_gbs, algbw_lo - eps);
        EXPECT_LE(r.algbw_gbs, algbw_hi + eps);
        EXPECT_GE(r.busbw_gbs, factor * algbw_lo - eps);
        EXPECT_LE(r.busbw_gbs, factor * algbw_hi + eps);
        // And from the printed algbw alone: each is off by at most 0.005 before the factor.
        EXPECT_NEAR(r.busbw_gbs, factor * r.algbw_gbs, eps + factor * 0.005);
        ++block_index;
      }
    }
  }
}

// The writer prints every measured row exactly as the nccl-tests build that measured it did.
TEST(NcclTestsLog, WriterReprintsEveryMeasuredRowByteForByte) {
  for (const auto& f : fixtures()) {
    SCOPED_TRACE(f.file);
    const std::vector<std::string> lines = split_lines(read_text(fixture_path(f)));
    const NcclTestsLog log = read_nccl_tests_log(fixture_path(f));
    NcclTestsTableOptions o;
    o.op = f.op;
    o.ranks = f.ranks;
    o.numbers = f.style;
    const NcclTestsTableWriter writer(o);
    for (const auto& row : log.rows) {
      EXPECT_EQ(writer.row(row), lines.at(static_cast<size_t>(row.line - 1)) + "\n");
    }
  }
}

TEST(NcclTestsLog, ClassicWriterHeaderMatchesAMeasuredLog) {
  // The DGX log's three column-header lines (its lines 16–18), trailing blanks stripped as the
  // transcription did.
  const std::vector<std::string> lines = split_lines(read_text(fixture_path(fixtures()[2])));
  NcclTestsTableOptions o;
  o.ranks = 8;
  o.numbers = NcclTestsNumberStyle::kClassic;
  const std::vector<std::string> header = split_lines(NcclTestsTableWriter(o).header());
  ASSERT_GE(header.size(), 3u);
  auto rstrip = [](std::string s) { return s.erase(s.find_last_not_of(' ') + 1); };
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rstrip(header[header.size() - 3 + i]), lines.at(15 + i));
}

// A complete log as a 2023 nccl-tests build prints it for 16 ranks on two hosts, with NCCL's
// own output mixed in.
constexpr const char* kModernLog = R"(# nccl-tests version 2.13.8 nccl-headers=21805 nccl-library=21805
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41231 on  p5-node-a device  0 [0000:53:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41232 on  p5-node-a device  1 [0000:64:00] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  41233 on  p5-node-a device  2 [0000:75:00] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  41234 on  p5-node-a device  3 [0000:86:00] NVIDIA H100 80GB HBM3
#  Rank  4 Group  0 Pid  41235 on  p5-node-a device  4 [0000:97:00] NVIDIA H100 80GB HBM3
#  Rank  5 Group  0 Pid  41236 on  p5-node-a device  5 [0000:a8:00] NVIDIA H100 80GB HBM3
#  Rank  6 Group  0 Pid  41237 on  p5-node-a device  6 [0000:b9:00] NVIDIA H100 80GB HBM3
#  Rank  7 Group  0 Pid  41238 on  p5-node-a device  7 [0000:ca:00] NVIDIA H100 80GB HBM3
#  Rank  8 Group  0 Pid  17001 on  p5-node-b device  0 [0000:53:00] NVIDIA H100 80GB HBM3
#  Rank  9 Group  0 Pid  17002 on  p5-node-b device  1 [0000:64:00] NVIDIA H100 80GB HBM3
#  Rank 10 Group  0 Pid  17003 on  p5-node-b device  2 [0000:75:00] NVIDIA H100 80GB HBM3
#  Rank 11 Group  0 Pid  17004 on  p5-node-b device  3 [0000:86:00] NVIDIA H100 80GB HBM3
#  Rank 12 Group  0 Pid  17005 on  p5-node-b device  4 [0000:97:00] NVIDIA H100 80GB HBM3
#  Rank 13 Group  0 Pid  17006 on  p5-node-b device  5 [0000:a8:00] NVIDIA H100 80GB HBM3
#  Rank 14 Group  0 Pid  17007 on  p5-node-b device  6 [0000:b9:00] NVIDIA H100 80GB HBM3
#  Rank 15 Group  0 Pid  17008 on  p5-node-b device  7 [0000:ca:00] NVIDIA H100 80GB HBM3
p5-node-a:41231:41231 [0] NCCL INFO Bootstrap : Using eth0:10.0.1.17<0>
p5-node-a:41231:41231 [0] NCCL INFO NCCL version 2.18.5+cuda12.2
p5-node-a:41231:41290 [0] NCCL INFO comm 0x55d0c8b0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 53000 commId 0x1a2b - Init COMPLETE
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
     1048576        262144     float     sum      -1    239.3    4.38    8.22      0    245.5    4.27    8.01      0
p5-node-b:17001:17044 [0] NCCL INFO Channel 00/0 : 8[0] -> 9[1] via P2P/IPC
     2097152        524288     float     sum      -1    269.9    7.77   14.57      0    306.0    6.85   12.85      0
     4194304       1048576     float     sum      -1    305.7   13.72   25.72      0    302.2   13.88   26.02      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 15.8983 
#
# Collective test concluded: all_reduce_perf
)";

TEST(NcclTestsLog, CompleteModernLog) {
  const NcclTestsLog log = parse_nccl_tests_log(kModernLog, "p5.log");
  EXPECT_EQ(log.source, "p5.log");
  EXPECT_EQ(log.op, CollectiveOp::kAllReduce);  // "Collective test starting: all_reduce_perf"
  EXPECT_EQ(log.ranks, 16);                      // 16 device lines
  EXPECT_EQ(log.nodes, 2);                       // hosts p5-node-a and p5-node-b
  EXPECT_EQ(log.nccl_version, "2.18.5");         // nccl-library=21805 = 2·10000 + 18·100 + 5
  EXPECT_EQ(log.layout, NcclTestsLayout::kCurrent);
  ASSERT_EQ(log.devices.size(), 16u);
  const NcclTestsDevice& d = log.devices[9];
  EXPECT_EQ(d.rank, 9);
  EXPECT_EQ(d.host, "p5-node-b");
  EXPECT_EQ(d.device, 1);
  EXPECT_EQ(d.bus_id, "0000:64:00");
  EXPECT_EQ(d.name, "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(log.rows.size(), 3u);
  EXPECT_EQ(log.rows[0].line, 29);  // after 5 preamble, 16 device, 3 NCCL INFO and 4 header lines
  EXPECT_EQ(log.rows[1].line, 31);  // after the NCCL INFO line 30
  EXPECT_DOUBLE_EQ(log.rows[1].in_place->time_us, 306.0);
  EXPECT_DOUBLE_EQ(log.rows[1].in_place->busbw_gbs, 12.85);
  // The footer's average: (8.22 + 8.01 + 14.57 + 12.85 + 25.72 + 26.02) / 6 = 95.39 / 6.
  EXPECT_NEAR(average_busbw(log.rows), 95.39 / 6, 1e-12);
}

// A 2019 log (nccl-tests before its 2022 resync, NCCL 2.4): no root column, a max-delta "error"
// per block, device lines without "Group", and no "Collective test starting" line.
constexpr const char* kLegacyLog = R"(# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 validation: 1 
#
# Using devices
#   Rank  0 Pid  23810 on    dgx1-07 device  0 [0x06] Tesla V100-SXM2-32GB
#   Rank  1 Pid  23810 on    dgx1-07 device  1 [0x07] Tesla V100-SXM2-32GB
#   Rank  2 Pid  23810 on    dgx1-07 device  2 [0x0a] Tesla V100-SXM2-32GB
#   Rank  3 Pid  23810 on    dgx1-07 device  3 [0x0b] Tesla V100-SXM2-32GB
#   Rank  4 Pid  23810 on    dgx1-07 device  4 [0x85] Tesla V100-SXM2-32GB
#   Rank  5 Pid  23810 on    dgx1-07 device  5 [0x86] Tesla V100-SXM2-32GB
#   Rank  6 Pid  23810 on    dgx1-07 device  6 [0x89] Tesla V100-SXM2-32GB
#   Rank  7 Pid  23810 on    dgx1-07 device  7 [0x8a] Tesla V100-SXM2-32GB
dgx1-07:23810:23810 [0] NCCL INFO NCCL version 2.4.8+cuda10.1
#
#                                                    out-of-place                       in-place          
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
           8             2   float     sum    43.08    0.00    0.00  0e+00    42.67    0.00    0.00  0e+00
     1048576        262144   float     sum    59.28   17.69   30.95  2e-07    58.87   17.81   31.17  2e-07
   134217728      33554432   float     sum   1347.5   99.60  174.31  2e-07   1347.0   99.64  174.37  2e-07
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 68.4667 
#
)";

TEST(NcclTestsLog, Legacy2019Log) {
  const NcclTestsLog log = parse_nccl_tests_log(kLegacyLog, "/logs/2019/nccl-allreduce-dgx1.log");
  EXPECT_EQ(log.op, CollectiveOp::kAllReduce);  // no "Collective test starting": from the file name
  EXPECT_EQ(log.layout, NcclTestsLayout::kLegacy);
  EXPECT_EQ(log.ranks, 8);
  EXPECT_EQ(log.nodes, 1);
  EXPECT_EQ(log.nccl_version, "2.4.8");
  ASSERT_EQ(log.devices.size(), 8u);
  EXPECT_EQ(log.devices[3].bus_id, "0x0b");
  EXPECT_EQ(log.devices[3].name, "Tesla V100-SXM2-32GB");
  ASSERT_EQ(log.rows.size(), 3u);
  const NcclTestsRow& r = log.rows[1];
  EXPECT_EQ(r.redop, "sum");
  EXPECT_EQ(r.root, -1);
  EXPECT_DOUBLE_EQ(r.out_of_place->time_us, 59.28);
  // 1048576 B / 59.28 µs / 1e3 = 17.6885 GB/s, printed 17.69; × 2·7/8 = 30.955, printed 30.95.
  EXPECT_DOUBLE_EQ(r.out_of_place->algbw_gbs, 17.69);
  EXPECT_DOUBLE_EQ(r.out_of_place->busbw_gbs, 30.95);
  EXPECT_EQ(r.out_of_place->wrong, "2e-07");
  EXPECT_EQ(log.rows[0].in_place->wrong, "0e+00");
  EXPECT_DOUBLE_EQ(log.rows[2].in_place->time_us, 1347.0);
}

TEST(NcclTestsLog, LegacyBroadcastWithoutHeaderPrintsTheRootForTheRedop) {
  // Legacy broadcast_perf: "size count type root time algbw busbw error ×2", 12 fields.
  const NcclTestsLog log = parse_nccl_tests_log(
      "           8             2   float       0    10.72    0.00    0.00  0e+00    10.64    0.00    0.00  0e+00\n",
      "broadcast.log");
  EXPECT_EQ(log.op, CollectiveOp::kBroadcast);
  EXPECT_EQ(log.layout, NcclTestsLayout::kLegacy);
  ASSERT_EQ(log.rows.size(), 1u);
  EXPECT_EQ(log.rows[0].root, 0);
  EXPECT_EQ(log.rows[0].redop, "");
  EXPECT_DOUBLE_EQ(log.rows[0].in_place->time_us, 10.64);
  EXPECT_FALSE(log.ranks.has_value());
  EXPECT_FALSE(log.nodes.has_value());
}

// Current nccl-tests with `-I 1`: four per-iteration columns after each block's #wrong.
constexpr const char* kPerIterationLog = R"(# Collective test starting: all_reduce_perf
# Per-Iteration Report: CUDA event timing; i_* uses max over process rows 
#
#                                                                 out-of-place (+ per-iteration)                                in-place (+ per-iteration)
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv% 
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%) 
     1048576        262144     float     sum      -1    81.71   12.83   24.06       0    79.10    90.20    90.20     3.10    88.58   11.84   22.20       0    85.00    97.30    97.30     4.20
  1073741824     268435456     float     sum      -1  10472.2  102.53  192.25       0  10401.3  10620.9  10620.9     0.42  10485.6  102.40  192.00       0  10430.0  10601.7  10601.7     0.35
)";

TEST(NcclTestsLog, PerIterationColumns) {
  const NcclTestsLog log = parse_nccl_tests_log(kPerIterationLog, "i1.log");
  ASSERT_EQ(log.rows.size(), 2u);
  const NcclTestsRow& r = log.rows[1];
  EXPECT_DOUBLE_EQ(r.out_of_place->time_us, 10472.2);
  EXPECT_DOUBLE_EQ(r.out_of_place->busbw_gbs, 192.25);
  EXPECT_EQ(r.out_of_place->wrong, "0");
  // The in-place block starts after i_min i_max i_p99 i_cv%, not at the 10th field.
  EXPECT_DOUBLE_EQ(r.in_place->time_us, 10485.6);
  EXPECT_DOUBLE_EQ(r.in_place->algbw_gbs, 102.40);
  EXPECT_DOUBLE_EQ(log.rows[0].in_place->time_us, 88.58);

  // Without its header a 21-field row is still read as `-I 1`: 5 + 2 × (4 + 4).
  const auto rows_only = split_lines(kPerIterationLog);
  const NcclTestsLog bare = parse_nccl_tests_log(rows_only[6] + "\n", "all_reduce_perf.out");
  EXPECT_DOUBLE_EQ(bare.rows[0].in_place->time_us, 88.58);
}

TEST(NcclTestsLog, OtherShapesAndNumberForms) {
  const std::string text =
      "[1,0]<stdout>:# Collective test starting: alltoall_perf\n"
      // mpirun --tag-output and srun -l prefixes.
      "[1,0]<stdout>:        1024           128     float    none      -1    12.94    0.08    0.04      0    12.89    0.08    0.04    N/A\n"
      "0:         2048           256     float    none      -1    12.87    0.16    0.08      0    13.04    0.16    0.08    N/A\n"
      // %e size and time; a missing in-place block.
      "1.048576e+06        131072     float    none      -1  1.5e+02    6.92    3.46      0\n"
      // Only in place: the out-of-place block printed as 32 blanks.
      "     4194304        524288     float    none      -1                                  538.3    7.79    3.90    N/A\r\n";
  const NcclTestsLog log = parse_nccl_tests_log(text, "x");
  EXPECT_EQ(log.op, CollectiveOp::kAllToAll);
  ASSERT_EQ(log.rows.size(), 4u);
  EXPECT_EQ(log.rows[0].size_bytes, 1024);
  EXPECT_EQ(log.rows[1].size_bytes, 2048);
  EXPECT_EQ(log.rows[2].size_bytes, 1048576);
  EXPECT_DOUBLE_EQ(log.rows[2].out_of_place->time_us, 150.0);
  EXPECT_FALSE(log.rows[2].in_place.has_value());
  EXPECT_FALSE(log.rows[3].out_of_place.has_value());
  ASSERT_TRUE(log.rows[3].in_place.has_value());
  EXPECT_DOUBLE_EQ(log.rows[3].in_place->time_us, 538.3);
  EXPECT_EQ(log.rows[3].in_place->wrong, "N/A");
}

TEST(NcclTestsLog, OpFromFileNameWhenNothingElseSays) {
  const std::string row =
      "        1024           256     float     sum      -1    12.10    0.08    0.08      0    11.64    0.09    0.09      0\n";
  EXPECT_EQ(parse_nccl_tests_log(row, "/runs/reduce_scatter.txt").op, CollectiveOp::kReduceScatter);
  EXPECT_EQ(parse_nccl_tests_log(row, "a100-allreduce-run3.txt").op, CollectiveOp::kAllReduce);
  EXPECT_EQ(parse_nccl_tests_log(row, "alltoall_perf.log").op, CollectiveOp::kAllToAll);
  EXPECT_EQ(parse_nccl_tests_log(row, "reduce.txt").op, CollectiveOp::kReduce);
  EXPECT_EQ(parse_nccl_tests_log(row, "all_gather_perf.log").op, CollectiveOp::kAllGather);
  EXPECT_FALSE(parse_nccl_tests_log(row, "mystery.txt").op.has_value());
  // Node and rank hints in prose and in NCCL's own output.
  const NcclTestsLog hinted = parse_nccl_tests_log(
      "host:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 32 nNodes 4 localRanks 8 localRank 0 MNNVL 0\n" + row, "x");
  EXPECT_EQ(hinted.ranks, 32);
  EXPECT_EQ(hinted.nodes, 4);
}

TEST(NcclTestsLog, ErrorsNameTheLine) {
  const std::string header =
      "# Collective test starting: all_reduce_perf\n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";
  const std::string good =
      "        1024           256     float     sum      -1    12.10    0.08    0.08      0    11.64    0.09    0.09      0\n";
  // Line 4: a letter inside the in-place time.
  expect_input_error([&] {
    parse_nccl_tests_log(header + good +
                             "        2048           512     float     sum      -1    11.83    0.17    0.17      0    12.4x    0.16    0.16      0\n",
                         "bad.log");
  }, "line 4", "in-place time '12.4x' is not a number");
  // Line 3: the row was cut short.
  expect_input_error([&] {
    parse_nccl_tests_log(header + "        1024           256     float     sum      -1    12.10    0.08\n", "cut.log");
  }, "line 3", "has 7 fields; expected 13");
  // Line 3: #wrong must be a count or N/A.
  expect_input_error([&] {
    parse_nccl_tests_log(header +
                             "        1024           256     float     sum      -1    12.10    0.08    0.08      0    11.64    0.09    0.09    bad\n",
                         "w.log");
  }, "line 3", "'bad' is neither a number nor N/A");
  // Line 1: no header, and 10 fields fit no layout.
  expect_input_error([&] { parse_nccl_tests_log("  1024  256  float  sum  -1  1.0  1.0  1.0  0  1.0\n", "x"); },
                     "line 1", "no column header");
  // Three lines, none of them a row.
  expect_input_error([&] { parse_nccl_tests_log(header + "# Out of bounds values : 0 OK\n", "empty.log"); }, "line 3",
                     "no nccl-tests data rows");
  expect_input_error([&] { parse_nccl_tests_log("", "nothing.log"); }, "line 1", "no nccl-tests data rows");
  // Two runs in one file.
  expect_input_error([&] { parse_nccl_tests_log(header + good + header + good, "two.log"); }, "line 4",
                     "second nccl-tests run");
}

TEST(NcclTestsLog, UnreadableFile) {
  const std::string path = test::source_path("tests/data/nccl-tests/does-not-exist.txt");
  try {
    read_nccl_tests_log(path);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), path);
  }
}

TEST(NcclTestsFormat, NumberFallbacks) {
  using S = NcclTestsNumberStyle;
  // Classic: time "%7.0f" from 10000 µs, "%7.1f" from 100 µs, else "%7.2f".
  EXPECT_EQ(format_nccl_tests_time(31307.4, S::kClassic), "  31307");
  EXPECT_EQ(format_nccl_tests_time(1950.54, S::kClassic), " 1950.5");
  EXPECT_EQ(format_nccl_tests_time(13.666, S::kClassic), "  13.67");
  // Current: the first of %.2f, %.1f, %.0f, %.1e that fits 7 characters.
  // 31307.4: "31307.40" is 8 wide, "31307.4" fits.
  EXPECT_EQ(format_nccl_tests_time(31307.4, S::kCurrent), "31307.4");
  EXPECT_EQ(format_nccl_tests_time(1950.54, S::kCurrent), "1950.54");
  // 123456.7: "123456.7" is 8 wide, "123457" fits.
  EXPECT_EQ(format_nccl_tests_time(123456.7, S::kCurrent), " 123457");
  // 12345678.9: "12345679" is 8 wide, so "%7.1e".
  EXPECT_EQ(format_nccl_tests_time(12345678.9, S::kCurrent), "1.2e+07");
  // 9999.996 rounds up to "10000.00" (8 wide), so "%.1f".
  EXPECT_EQ(format_nccl_tests_time(9999.996, S::kCurrent), "10000.0");
  // Bandwidths, 6 wide: classic is always "%6.2f", even when wider.
  EXPECT_EQ(format_nccl_tests_bandwidth(274.384, S::kClassic), "274.38");
  EXPECT_EQ(format_nccl_tests_bandwidth(1234.56, S::kClassic), "1234.56");
  EXPECT_EQ(format_nccl_tests_bandwidth(1234.56, S::kCurrent), "1234.6");
  EXPECT_EQ(format_nccl_tests_bandwidth(0.001, S::kCurrent), "  0.00");
  // 1234567: "1234567" is 7 wide, so "%6.0e".
  EXPECT_EQ(format_nccl_tests_bandwidth(1234567, S::kCurrent), " 1e+06");
}

TEST(NcclTestsFormat, NamesAndResults) {
  EXPECT_EQ(nccl_tests_binary_name(CollectiveOp::kAllToAll), "alltoall_perf");
  EXPECT_EQ(nccl_tests_type_size("bfloat16"), 2);
  EXPECT_EQ(nccl_tests_type_size("double"), 8);
  EXPECT_FALSE(nccl_tests_type_size("quad").has_value());
  // All-gather, 16 ranks, 1 GiB total in 10 ms: 1073741824 B / 10000 µs / 1e3 = 107.3741824 GB/s;
  // busbw × 15/16 = 100.663296 GB/s.
  const NcclTestsResult ag = make_result(CollectiveOp::kAllGather, 16, 1073741824, 10000);
  EXPECT_DOUBLE_EQ(ag.algbw_gbs, 107.3741824);
  EXPECT_DOUBLE_EQ(ag.busbw_gbs, 100.663296);
  EXPECT_EQ(ag.wrong, "N/A");
  // All-reduce, 8 ranks, 8 GiB in 31307.4 µs: 8589934592 / 31307.4 / 1e3 = 274.37394 GB/s; × 1.75.
  const NcclTestsResult ar = make_result(CollectiveOp::kAllReduce, 8, 8589934592, 31307.4);
  EXPECT_NEAR(ar.algbw_gbs, 274.37394, 1e-5);
  EXPECT_DOUBLE_EQ(ar.busbw_gbs, ar.algbw_gbs * 1.75);
  EXPECT_DOUBLE_EQ(make_result(CollectiveOp::kBroadcast, 2, 0, 11.0).algbw_gbs, 0.0);
  EXPECT_THROW(make_result(CollectiveOp::kAllReduce, 8, 1024, 0.0), std::invalid_argument);
  EXPECT_THROW(make_result(CollectiveOp::kAllReduce, 0, 1024, 1.0), std::invalid_argument);
}

TEST(NcclTestsFormat, HeaderAndFooterText) {
  NcclTestsTableOptions o;
  o.ranks = 1;
  o.min_bytes = 8;
  o.max_bytes = 8589934592;
  o.devices = {{0, "pool0-01806", 0, "0000:19:00", "NVIDIA H100 80GB HBM3"}};
  o.title_comment = "predicted by Parallax\n# second line";
  const NcclTestsTableWriter w(o);
  const std::string expected =
      "# predicted by Parallax\n"
      "# second line\n"
      "# Collective test starting: all_reduce_perf\n"
      "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 0 iters: 1 agg iters: 1 "
      "validation: 0 graph: 0 unalign: 0\n"
      "#\n"
      "# Using devices\n"
      "#  Rank  0 Group  0 Pid      0 on pool0-01806 device  0 [0000:19:00] NVIDIA H100 80GB HBM3\n"
      "#\n"
      "#                                                              out-of-place                       in-place          \n"
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         \n";
  EXPECT_EQ(w.header(), expected);
  EXPECT_EQ(w.footer(159.151),
            "# Out of bounds values : 0 OK\n"
            "# Avg bus bandwidth    : 159.151 \n"
            "#\n"
            "# Collective test concluded: all_reduce_perf\n");
  NcclTestsTableOptions two_ranks_one_device = o;
  two_ranks_one_device.ranks = 2;
  EXPECT_THROW(NcclTestsTableWriter{two_ranks_one_device}, std::invalid_argument);
}

// Tolerance of a value read back from the writer: %.2f is 0.005 off, and the %.1f/%.0f
// fallbacks start no lower than 100 (classic times), where half their last digit is 5e-4 of it.
double printed_tolerance(double v) { return 0.005 + 5e-4 * std::abs(v); }

void expect_round_trip(const NcclTestsTableOptions& o, const std::vector<NcclTestsRow>& rows,
                       const std::vector<std::vector<std::string>>& extras) {
  const NcclTestsTableWriter w(o);
  std::string text = w.header();
  for (size_t i = 0; i < rows.size(); ++i) {
    text += w.row(rows[i], extras.empty() ? std::vector<std::string>{} : extras[i]);
  }
  text += w.footer(average_busbw(rows));
  SCOPED_TRACE(text);
  const NcclTestsLog log = parse_nccl_tests_log(text, "prediction.txt");
  EXPECT_EQ(log.op, o.op);
  EXPECT_EQ(log.ranks, o.ranks);
  EXPECT_EQ(log.layout, NcclTestsLayout::kCurrent);
  EXPECT_EQ(log.extra_columns, o.extra_columns);
  ASSERT_EQ(log.devices.size(), o.devices.size());
  for (size_t i = 0; i < o.devices.size(); ++i) {
    EXPECT_EQ(log.devices[i].rank, o.devices[i].rank);
    EXPECT_EQ(log.devices[i].host, o.devices[i].host);
    EXPECT_EQ(log.devices[i].device, o.devices[i].device);
    EXPECT_EQ(log.devices[i].bus_id, o.devices[i].bus_id);
    EXPECT_EQ(log.devices[i].name, o.devices[i].name);
  }
  ASSERT_EQ(log.rows.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const NcclTestsRow& got = log.rows[i];
    const NcclTestsRow& want = rows[i];
    EXPECT_EQ(got.size_bytes, want.size_bytes);
    EXPECT_EQ(got.count, want.count);
    EXPECT_EQ(got.type, o.dtype);
    EXPECT_EQ(got.redop, reduces(o.op) ? o.redop : "none");
    EXPECT_EQ(got.root, has_root(o.op) ? o.root : -1);
    EXPECT_EQ(got.extra, extras.empty() ? want.extra : extras[i]);
    for (auto block : {&NcclTestsRow::out_of_place, &NcclTestsRow::in_place}) {
      ASSERT_EQ((got.*block).has_value(), (want.*block).has_value());
      if (!(want.*block)) continue;
      const NcclTestsResult& g = *(got.*block);
      const NcclTestsResult& e = *(want.*block);
      EXPECT_NEAR(g.time_us, e.time_us, printed_tolerance(e.time_us));
      EXPECT_NEAR(g.algbw_gbs, e.algbw_gbs, printed_tolerance(e.algbw_gbs));
      EXPECT_NEAR(g.busbw_gbs, e.busbw_gbs, printed_tolerance(e.busbw_gbs));
      EXPECT_EQ(g.wrong, e.wrong);
    }
  }
}

TEST(NcclTestsWriter, RoundTripAllGatherOnTwoHostsWithExtraColumns) {
  for (auto style : {NcclTestsNumberStyle::kCurrent, NcclTestsNumberStyle::kClassic}) {
    NcclTestsTableOptions o;
    o.op = CollectiveOp::kAllGather;
    o.ranks = 16;
    for (int r = 0; r < 16; ++r) {
      o.devices.push_back({r, r < 8 ? "node-a" : "node-b", r % 8, "0000:1" + std::to_string(r % 8) + ":00",
                           "NVIDIA H100 80GB HBM3"});
    }
    o.min_bytes = 1024;
    o.max_bytes = int64_t{1} << 30;
    o.title_comment = "# predicted by Parallax (dgx-h100, 2 nodes)\n# nccl-version: 2.30.7 (tuning constants)";
    o.extra_columns = {"algo", "proto"};
    o.numbers = style;
    const NcclTestsTableWriter w(o);
    std::vector<NcclTestsRow> rows;
    std::vector<std::vector<std::string>> extras;
    // 1 KiB … 1 GiB by ×4; a time of 20 µs + size / (40 GB/s), i.e. 20 + size/4e4 µs, reaches
    // 26864 µs at 1 GiB so the %.1f/%.0f fallbacks are exercised.
    for (int64_t size = 1024; size <= o.max_bytes; size *= 4) {
      rows.push_back(w.predicted_row(size, 20.0 + static_cast<double>(size) / 4e4));
      extras.push_back({size < (1 << 20) ? "ring" : "pat", size < (1 << 16) ? "LL" : "Simple"});
    }
    // count = size / 4 B / 16 ranks for all-gather: 1024 B → 16 elements.
    EXPECT_EQ(rows[0].count, 16);
    expect_round_trip(o, rows, extras);
    const NcclTestsLog log = parse_nccl_tests_log(
        w.header() + w.row(rows[0], extras[0]) + w.footer(0), "prediction.txt");
    EXPECT_EQ(log.nodes, 2);
    EXPECT_EQ(log.nccl_version, "2.30.7");
  }
}

TEST(NcclTestsWriter, RoundTripRootedOpWithoutDevicesAndMissingBlocks) {
  NcclTestsTableOptions o;
  o.op = CollectiveOp::kBroadcast;
  o.root = 3;
  o.ranks = 4;
  o.dtype = "half";
  o.min_bytes = 8;
  o.max_bytes = 1 << 20;
  const NcclTestsTableWriter w(o);
  std::vector<NcclTestsRow> rows;
  // 8 B … 1 MiB by ×8, 5 µs + 1 ns per byte.
  for (int64_t size = 8; size <= o.max_bytes; size *= 8) {
    rows.push_back(w.predicted_row(size, 5.0 + 1e-3 * static_cast<double>(size)));
  }
  // half is 2 bytes and broadcast's size is one buffer: 8 B → 4 elements.
  EXPECT_EQ(rows[0].count, 4);
  rows[1].in_place.reset();      // printed without its in-place block
  rows[2].out_of_place.reset();  // printed with a blank out-of-place block
  expect_round_trip(o, rows, {});
  // The rooted row prints root 3 and redop none; ranks come from "#  ranks: 4".
  EXPECT_EQ(w.row(rows[0]).substr(0, 52), "           8             4      half    none       3");
}

}  // namespace
}  // namespace parallax
