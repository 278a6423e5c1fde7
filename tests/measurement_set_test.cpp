// Measurement files: the JSON-lines fixtures under tests/data/calibration (a complete sweep, a
// sweep cut mid-line, a sweep with a bad line in the middle, skipped), the nccl-tests logs under
// tests/data/nccl-tests, bad values line by line, and merging several files.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/input_error.h"
#include "measurement_set.h"
#include "test_support.h"

namespace parallax {
namespace {

std::string calibration_fixture(const std::string& name) {
  return test::source_path("tests/data/calibration/" + name);
}
std::string nccl_log(const std::string& name) { return test::source_path("tests/data/nccl-tests/" + name); }

// A file in the system's temporary folder, removed when the test ends.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& text)
      : path_((std::filesystem::temp_directory_path() / ("parallax-measurement-test-" + name)).string()) {
    std::ofstream(path_, std::ios::binary) << text;
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(MeasurementSet, JsonLinesFixtureReadsEveryKind) {
  const std::string path = calibration_fixture("h200-node-sweep.jsonl");
  ReadOutcome out = read_measurements(path);
  ASSERT_TRUE(out.ok()) << out.problems.front().message();
  const MeasurementSet& s = out.set;
  // Line 1 meta, lines 2, 3, 5 collectives (line 4 blank), 6 gemm, 7 memcpy.
  ASSERT_EQ(s.runs.size(), 1u);
  ASSERT_EQ(s.collectives.size(), 3u);
  ASSERT_EQ(s.gemms.size(), 1u);
  ASSERT_EQ(s.memcpys.size(), 1u);
  ASSERT_EQ(s.files, std::vector<std::string>{path});

  const RunMetadata& meta = s.runs[0];
  EXPECT_EQ(meta.run, "2026-11-30T12:00:00Z-host1-4711");
  EXPECT_EQ(meta.harness, "parallax-nccl-bench");
  EXPECT_EQ(meta.gpu, "NVIDIA H200");
  EXPECT_EQ(meta.gpu_count, 8);
  EXPECT_EQ(meta.ranks, 8);
  EXPECT_EQ(meta.nodes, 1);
  EXPECT_EQ(meta.nccl, "2.28.3");
  EXPECT_EQ(meta.cuda_runtime, "13.0");
  EXPECT_EQ(meta.driver, "580.159.03");
  EXPECT_EQ(meta.mpi, "Open MPI 4.1.4");
  EXPECT_EQ(meta.hosts, std::vector<std::string>{"host1"});
  ASSERT_EQ(meta.env.size(), 3u);
  EXPECT_EQ(meta.env.at("NCCL_ALGO"), std::optional<std::string>("Ring"));
  EXPECT_EQ(meta.env.at("NCCL_PROTO"), std::nullopt);  // listed as null: looked at, unset
  EXPECT_EQ(meta.source.line, 1);

  const CollectiveMeasurement& small = s.collectives[0];
  EXPECT_EQ(small.op, CollectiveOp::kAllReduce);
  EXPECT_EQ(small.group, "all");
  EXPECT_EQ(small.ranks, 8);
  EXPECT_EQ(small.nodes, 1);
  EXPECT_EQ(small.ranks_per_node, 8);
  EXPECT_EQ(small.members.size(), 8u);
  EXPECT_EQ(small.members[7], "host1:7");
  EXPECT_EQ(small.size, bytes(8));
  EXPECT_EQ(small.count, 2);
  EXPECT_EQ(small.dtype, "float");
  EXPECT_EQ(small.redop, "sum");
  EXPECT_EQ(small.algo, "Ring");
  EXPECT_EQ(small.proto, "auto");
  EXPECT_FALSE(small.in_place);
  EXPECT_EQ(small.warmup, 5);
  EXPECT_EQ(small.iters, 20);
  EXPECT_EQ(small.time, Time::ps(12'500'000));  // 12.5 µs
  EXPECT_EQ(small.time_min, Time::us(11.9));
  EXPECT_EQ(small.time_max, Time::us(14.2));
  EXPECT_EQ(small.run, meta.run);
  EXPECT_EQ(small.source.file, path);
  EXPECT_EQ(small.source.line, 2);

  EXPECT_TRUE(s.collectives[1].in_place);
  EXPECT_TRUE(s.collectives[1].members.empty());
  EXPECT_EQ(s.collectives[1].size, mib(1));
  EXPECT_EQ(s.collectives[1].source.line, 3);

  const CollectiveMeasurement& pair = s.collectives[2];
  EXPECT_EQ(pair.op, CollectiveOp::kAllGather);
  EXPECT_EQ(pair.group, "pair-intra");
  EXPECT_EQ(pair.size, gib(1));
  EXPECT_EQ(pair.proto, "Simple");
  EXPECT_EQ(pair.time_min, std::nullopt);
  EXPECT_EQ(pair.source.line, 5);  // after the blank line 4

  const GemmMeasurement& g = s.gemms[0];
  EXPECT_EQ(g.dtype, "bf16");
  EXPECT_EQ(g.label, "mlp_up");
  // 2·8192³ = 1.0995e12 FLOP in 1390 µs = 791.0 TFLOP/s, as the line's own "tflops" says.
  EXPECT_DOUBLE_EQ(g.flops().value(), 2.0 * 8192.0 * 8192.0 * 8192.0);
  EXPECT_NEAR(g.achieved().value() / 1e12, 791.0, 0.05);
  ASSERT_TRUE(g.peak.has_value());
  EXPECT_DOUBLE_EQ(g.peak->value(), 989e12);
  EXPECT_EQ(g.source.line, 6);

  const MemcpyMeasurement& c = s.memcpys[0];
  EXPECT_EQ(c.what, "d2d");
  // Read + write: 2·2³⁰ B / 500 µs = 4294.97 GB/s, the line's "gbs" to its 5 digits.
  EXPECT_NEAR(c.achieved().value() / 1e9, 4294.9, 0.1);
  EXPECT_EQ(c.source.line, 7);
}

TEST(MeasurementSet, TruncatedLastLineKeepsTheLinesBeforeIt) {
  // Lines 1-3 of the complete sweep, then a collective line cut in the middle of a string.
  const std::string path = calibration_fixture("truncated-sweep.jsonl");
  ReadOutcome out = read_measurements(path);
  ASSERT_EQ(out.problems.size(), 1u);
  EXPECT_EQ(out.problems[0].file, path);
  EXPECT_EQ(out.problems[0].line, 4);
  EXPECT_TRUE(contains(out.problems[0].reason, "malformed JSON")) << out.problems[0].reason;
  EXPECT_EQ(out.problems[0].message().rfind(path + ":4: malformed JSON", 0), 0u) << out.problems[0].message();
  EXPECT_EQ(out.set.runs.size(), 1u);
  ASSERT_EQ(out.set.collectives.size(), 2u);
  EXPECT_EQ(out.set.collectives[1].size, mib(1));
}

TEST(MeasurementSet, BadLineInTheMiddleIsSkippedAndTheLinesAfterItKept) {
  // Line 4 has time_us -8.5; line 5 is good and comes after it: it is read too.
  const std::string path = calibration_fixture("bad-line-sweep.jsonl");
  ReadOutcome out = read_measurements(path);
  ASSERT_EQ(out.problems.size(), 1u);
  EXPECT_EQ(out.problems[0].line, 4);
  EXPECT_EQ(out.problems[0].message(),
            path + ":4: /time_us: must be a positive time in microseconds, found -8.5");
  ASSERT_EQ(out.set.collectives.size(), 3u);
  EXPECT_EQ(out.set.collectives[0].op, CollectiveOp::kSendRecv);
  EXPECT_EQ(out.set.collectives[0].group, "one-per-node");
  EXPECT_EQ(out.set.collectives[1].size, kib(1));
  EXPECT_EQ(out.set.collectives[2].size, mib(1));
  EXPECT_EQ(out.set.collectives[2].source.line, 5);
  // The collective lines give no "run": they belong to the meta line above them.
  EXPECT_EQ(out.set.collectives[1].run, "run-b");
  EXPECT_EQ(out.set.runs.at(0).cpu, "AMD EPYC 9654");
  EXPECT_TRUE(out.set.runs.at(0).gpu.empty());
}

// What a one-rank in-place point used to write (a 0 µs iteration: the host gap between two
// events at the timer's resolution), then the GEMM and memcpy lines of the same run: the bad
// line costs only itself.
TEST(MeasurementSet, AZeroTimeLineCostsOnlyItself) {
  const std::string text =
      R"({"kind":"meta","run":"r1","harness":"parallax-nccl-bench"})" "\n"
      R"({"kind":"collective","op":"all_reduce","group":"self","ranks":1,"nodes":1,"size_bytes":8,"in_place":false,"time_us":4.1,"time_us_min":3.9,"time_us_max":4.5})" "\n"
      R"({"kind":"collective","op":"all_reduce","group":"self","ranks":1,"nodes":1,"size_bytes":8,"in_place":true,"time_us":1.2,"time_us_min":0,"time_us_max":2.5})" "\n"
      R"({"kind":"gemm","dtype":"bf16","m":4096,"n":4096,"k":4096,"time_us":210,"tflops":654.5})" "\n"
      R"({"kind":"gemm","dtype":"fp8","m":4096,"n":4096,"k":4096,"fast_accum":true,"time_us":120,"tflops":1145.3})" "\n"
      R"({"kind":"gemm","dtype":"bf16","m":128,"n":4096,"k":7168,"batch":8,"time_us":100,"tflops":75.2})" "\n"
      R"({"kind":"memcpy","what":"h2d","size_bytes":1073741824,"time_us":20000})" "\n"
      R"({"kind":"memcpy","what":"d2d","size_bytes":1073741824,"time_us":500})" "\n";
  ReadOutcome out = parse_measurement_lines(text, "smoke.jsonl");
  ASSERT_EQ(out.problems.size(), 1u);
  EXPECT_EQ(out.problems[0].message(), "smoke.jsonl:3: /time_us_min: must be a positive time in microseconds, found 0");
  EXPECT_EQ(out.set.collectives.size(), 1u);
  ASSERT_EQ(out.set.gemms.size(), 3u);
  ASSERT_EQ(out.set.memcpys.size(), 2u);
  EXPECT_EQ(out.set.gemms[0].run, "r1");
  EXPECT_FALSE(out.set.gemms[0].fast_accum);
  EXPECT_TRUE(out.set.gemms[1].fast_accum);
  // 8 experts × 2·128·4096·7168 FLOP = 60.1 GFLOP in 100 µs = 601 TFLOP/s.
  EXPECT_EQ(out.set.gemms[2].batch, 8);
  EXPECT_NEAR(out.set.gemms[2].achieved().value() / 1e12, 8 * 2.0 * 128 * 4096 * 7168 / 100e-6 / 1e12, 1e-6);
  // A host copy is one way over the link: 1 GiB / 20 ms = 53.7 GB/s; a device copy reads and
  // writes: 2 GiB / 500 µs = 4295 GB/s.
  EXPECT_NEAR(out.set.memcpys[0].achieved().value() / 1e9, 1073741824.0 / 20000e-6 / 1e9, 1e-9);
  EXPECT_NEAR(out.set.memcpys[1].achieved().value() / 1e9, 2 * 1073741824.0 / 500e-6 / 1e9, 1e-9);
}

// Each bad line between two good lines: both good lines survive and the reason names the key.
TEST(MeasurementSet, BadValuesNameTheLineAndTheKey) {
  const std::string good =
      R"({"kind":"collective","op":"all_reduce","group":"all","ranks":4,"nodes":2,"size_bytes":64,"time_us":9.5})";
  struct Case {
    std::string line;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {R"({"kind":"collective","op":"all_reduce","group":"all","ranks":4,"nodes":2,"size_bytes":64})",
       "missing required key \"time_us\""},
      {R"({"kind":"collective","op":"all_sum","group":"all","ranks":4,"nodes":2,"size_bytes":64,"time_us":1})",
       "/op: unknown collective \"all_sum\""},
      {R"({"kind":"collective","op":"all_reduce","group":"all","ranks":4,"nodes":2,"size_bytes":-64,"time_us":1})",
       "/size_bytes: must be at least 0, found -64"},
      {R"({"kind":"collective","op":"all_reduce","group":"all","ranks":4,"nodes":2,"size_bytes":64,"time_us":0})",
       "/time_us: must be a positive time"},
      {R"({"kind":"collective","op":"all_reduce","group":"all","ranks":4,"nodes":2,"size_bytes":64,"time_us":"9 us"})",
       "/time_us: expected a number, found string"},
      {R"({"kind":"collective","op":"all_reduce","group":"all","ranks":2,"nodes":4,"size_bytes":64,"time_us":1})",
       "/nodes: more nodes than ranks (2)"},
      {R"({"kind":"collective","op":"all_reduce","group":"all","ranks":4,"nodes":2,"ranks_per_node":1,"size_bytes":64,"time_us":1})",
       "/ranks_per_node: 1 cannot hold 4 ranks on 2 node(s)"},
      {R"({"kind":"collective","op":"all_reduce","group":"all","ranks":4,"nodes":2,"members":["a:0"],"size_bytes":64,"time_us":1})",
       "/members: lists 1 members for 4 ranks"},
      {R"({"kind":"collective","op":"all_reduce","group":"all","ranks":4,"nodes":2,"size_bytes":64,"time_us":2,"time_us_min":3,"time_us_max":1})",
       "time_us_min is greater than time_us_max"},
      {R"({"kind":"gemm","dtype":"bf16","m":0,"n":1,"k":1,"time_us":1})", "/m: must be at least 1, found 0"},
      {R"({"kind":"p2p","time_us":1})", "/kind: unknown kind \"p2p\""},
      {R"({"time_us":1})", "missing required key \"kind\""},
      {R"([1, 2])", "expected a JSON object, found array"},
      {R"({"kind":"collective",)", "malformed JSON at column"},
  };
  for (const Case& c : cases) {
    ReadOutcome out = parse_measurement_lines(good + "\n\n" + c.line + "\n" + good + "\n", "inline.jsonl");
    ASSERT_EQ(out.problems.size(), 1u) << c.line;
    EXPECT_EQ(out.problems[0].line, 3) << c.line;
    EXPECT_TRUE(contains(out.problems[0].message(), "inline.jsonl:3: " + c.reason)) << out.problems[0].message();
    EXPECT_EQ(out.set.collectives.size(), 2u) << c.line;  // the good lines either side
    EXPECT_TRUE(out.set.gemms.empty()) << c.line;
  }
}

TEST(MeasurementSet, DefaultsOfOptionalFields) {
  ReadOutcome out = parse_measurement_lines(
      "{\"kind\":\"collective\",\"op\":\"allreduce\",\"group\":\"all\",\"ranks\":5,\"nodes\":2,"
      "\"size_bytes\":0,\"time_us\":3,\"future_field\":[1,2]}\r\n",
      "defaults.jsonl");
  ASSERT_TRUE(out.ok()) << out.problems[0].message();
  ASSERT_EQ(out.set.collectives.size(), 1u);
  const CollectiveMeasurement& c = out.set.collectives[0];
  EXPECT_EQ(c.op, CollectiveOp::kAllReduce);  // nccl-tests' spelling is accepted
  EXPECT_EQ(c.ranks_per_node, 3);             // ⌈5 / 2⌉, node after node
  EXPECT_EQ(c.algo, "auto");
  EXPECT_EQ(c.proto, "auto");
  EXPECT_FALSE(c.in_place);
  EXPECT_EQ(c.size, bytes(0));
  EXPECT_TRUE(c.run.empty());
}

TEST(MeasurementSet, AttentionLinesAreTheComputeModelsAndPassWithoutAProblem) {
  // attention-bench.py appends to the harness's file; `calibrate fit` reads it without a warning.
  ReadOutcome out = parse_measurement_lines(
      "{\"kind\":\"collective\",\"op\":\"all_reduce\",\"group\":\"all\",\"ranks\":2,\"nodes\":1,"
      "\"size_bytes\":64,\"time_us\":3}\n"
      "{\"kind\":\"attention\",\"kernel\":\"fused\",\"pass\":\"forward\",\"s_q\":4096,\"s_kv\":4096,"
      "\"d_qk\":128,\"tflops\":500}\n",
      "mixed.jsonl");
  EXPECT_TRUE(out.ok()) << (out.problems.empty() ? "" : out.problems[0].message());
  EXPECT_EQ(out.set.collectives.size(), 1u);
}

TEST(MeasurementSet, EmptyFileIsAnEmptySet) {
  TempFile empty("empty.jsonl", "\n  \n");
  ReadOutcome out = read_measurements(empty.path());
  EXPECT_TRUE(out.ok());
  EXPECT_TRUE(out.set.empty());
  EXPECT_EQ(out.set.files.size(), 1u);
}

// Rows per log, counted in the files (integer size then integer count): every row has both an
// out-of-place and an in-place block, so each row gives two measurements.
struct LogFixture {
  const char* file;
  CollectiveOp op;
  size_t rows;
  int ranks, nodes;
};

TEST(MeasurementSet, EveryNcclTestsLogGivesTwoMeasurementsPerRow) {
  const std::vector<LogFixture> logs = {
      {"aws-p5-h100-2node-16gpu-efa-allreduce-nccl2.18.5.txt", CollectiveOp::kAllReduce, 32, 16, 2},
      {"crusoe-a100-80gb-2node-16gpu-ib-allreduce.txt", CollectiveOp::kAllReduce, 29, 16, 2},
      {"dgx-h100-8gpu-1node-allreduce.txt", CollectiveOp::kAllReduce, 32, 8, 1},
      {"oci-a100-40gb-8gpu-1node-allreduce.txt", CollectiveOp::kAllReduce, 28, 8, 1},
      {"pcie-1node-2x-rtx2080ti-allgather.txt", CollectiveOp::kAllGather, 28, 2, 1},
      {"pcie-1node-2x-rtx2080ti-allreduce.txt", CollectiveOp::kAllReduce, 28, 2, 1},
      {"pcie-1node-2x-rtx2080ti-alltoall.txt", CollectiveOp::kAllToAll, 28, 2, 1},
      {"pcie-1node-2x-rtx2080ti-broadcast.txt", CollectiveOp::kBroadcast, 28, 2, 1},
      {"pcie-1node-2x-rtx2080ti-reduce.txt", CollectiveOp::kReduce, 28, 2, 1},
  };
  for (const LogFixture& f : logs) {
    const std::string path = nccl_log(f.file);
    ReadOutcome out = read_measurements(path);
    ASSERT_TRUE(out.ok()) << out.problems[0].message();
    const MeasurementSet& s = out.set;
    ASSERT_EQ(s.collectives.size(), 2 * f.rows) << f.file;
    ASSERT_EQ(s.runs.size(), 1u);
    EXPECT_EQ(s.runs[0].harness, "nccl-tests");
    EXPECT_EQ(s.runs[0].ranks, f.ranks);
    EXPECT_EQ(s.runs[0].nodes, f.nodes);
    for (size_t i = 0; i < s.collectives.size(); ++i) {
      const CollectiveMeasurement& c = s.collectives[i];
      EXPECT_EQ(c.op, f.op) << f.file;
      EXPECT_EQ(c.group, "all");
      EXPECT_EQ(c.ranks, f.ranks);
      EXPECT_EQ(c.nodes, f.nodes);
      EXPECT_EQ(c.ranks_per_node, f.ranks / f.nodes);
      EXPECT_EQ(c.algo, "auto");
      EXPECT_EQ(c.in_place, i % 2 == 1);  // out-of-place first, as printed
      EXPECT_EQ(c.run, path);
      EXPECT_GT(c.source.line, 0);
    }
  }
}

TEST(MeasurementSet, NcclTestsValuesMatchTheFile) {
  // crusoe…ib-allreduce.txt line 35:
  //   16777216  4194304  float  sum  -1   274.05  61.22  114.79  0   265.91  63.09  118.30  0
  const std::string crusoe = nccl_log("crusoe-a100-80gb-2node-16gpu-ib-allreduce.txt");
  ReadOutcome out = read_measurements(crusoe);
  ASSERT_TRUE(out.ok());
  auto at_line = [&](int line, bool in_place) -> const CollectiveMeasurement& {
    for (const CollectiveMeasurement& c : out.set.collectives) {
      if (c.source.line == line && c.in_place == in_place) return c;
    }
    throw std::runtime_error("no measurement at line " + std::to_string(line));
  };
  EXPECT_EQ(at_line(35, false).size, mib(16));
  EXPECT_EQ(at_line(35, false).count, 4194304);
  EXPECT_EQ(at_line(35, false).time, Time::us(274.05));
  EXPECT_EQ(at_line(35, true).time, Time::us(265.91));
  EXPECT_EQ(at_line(35, false).dtype, "float");
  EXPECT_EQ(at_line(35, false).redop, "sum");
  EXPECT_EQ(at_line(35, false).root, std::nullopt);  // -1: all-reduce has no root
  // Line 14, the first row: 8 B in 27.70 / 29.82 µs.
  EXPECT_EQ(at_line(14, false).size, bytes(8));
  EXPECT_EQ(at_line(14, true).time, Time::us(29.82));
  // Line 41, the last row: 1 GiB in 10472.2 µs out of place.
  EXPECT_EQ(at_line(41, false).size, gib(1));
  EXPECT_EQ(at_line(41, false).time, Time::us(10472.2));

  // pcie…alltoall.txt line 41: 1073741824 … 116573 (out of place) … 113591 (in place).
  ReadOutcome a2a = read_measurements(nccl_log("pcie-1node-2x-rtx2080ti-alltoall.txt"));
  ASSERT_TRUE(a2a.ok());
  const CollectiveMeasurement& last_out = a2a.set.collectives[a2a.set.collectives.size() - 2];
  const CollectiveMeasurement& last_in = a2a.set.collectives.back();
  EXPECT_EQ(last_out.source.line, 41);
  EXPECT_EQ(last_out.op, CollectiveOp::kAllToAll);
  EXPECT_EQ(last_out.size, gib(1));
  EXPECT_EQ(last_out.time, Time::us(116573));
  EXPECT_EQ(last_in.time, Time::us(113591));
  EXPECT_EQ(last_in.redop, "none");

  // The AWS log states its NCCL version and starts with two 0-byte rows (15.51 µs out of place).
  ReadOutcome aws = read_measurements(nccl_log("aws-p5-h100-2node-16gpu-efa-allreduce-nccl2.18.5.txt"));
  ASSERT_TRUE(aws.ok());
  EXPECT_EQ(aws.set.runs[0].nccl, "2.18.5");
  EXPECT_EQ(aws.set.collectives[0].size, bytes(0));
  EXPECT_EQ(aws.set.collectives[0].time, Time::us(15.51));
}

const std::string kLogHeader =
    "# Collective test starting: all_reduce_perf\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";
const std::string kRow1K =
    "        1024           256     float     sum      -1    12.10    0.08    0.08      0    11.64    0.09    0.09      0\n";
const std::string kRow2K =
    "        2048           512     float     sum      -1    11.83    0.17    0.17      0    12.40    0.17    0.17      0\n";

TEST(MeasurementSet, NcclTestsLogWithoutRanksNeedsTheCallersCounts) {
  TempFile log("no-ranks.log", kLogHeader + kRow1K + kRow2K);
  try {
    read_measurements(log.path());
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), log.path());
    EXPECT_TRUE(contains(e.reason(), "give --gpus")) << e.what();
  }
  try {
    read_measurements(log.path(), MeasurementReadOptions{4, std::nullopt, std::nullopt, std::nullopt});
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_TRUE(contains(e.reason(), "give --nodes")) << e.what();
  }
  ReadOutcome out = read_measurements(log.path(), MeasurementReadOptions{4, 2, std::nullopt, std::nullopt});
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out.set.collectives.size(), 4u);
  EXPECT_EQ(out.set.collectives[0].ranks, 4);
  EXPECT_EQ(out.set.collectives[0].nodes, 2);
  EXPECT_EQ(out.set.collectives[0].ranks_per_node, 2);
  EXPECT_EQ(out.set.collectives[3].time, Time::us(12.40));
}

TEST(MeasurementSet, NcclTestsLogRanksPerNodeFromTheCaller) {
  // Two servers of one GPU each (a TCP-sockets run): 2 ranks, 1 per node; the nodes follow.
  TempFile log("two-servers.log", kLogHeader + kRow1K);
  const MeasurementReadOptions o{2, std::nullopt, std::nullopt, 1};
  ReadOutcome out = read_measurements(log.path(), o);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out.set.collectives[0].nodes, 2);
  EXPECT_EQ(out.set.collectives[0].ranks_per_node, 1);
  // 4 ranks on 2 nodes with 1 per node is no placement; 0 per node is refused.
  MeasurementReadOptions bad{4, 2, std::nullopt, 1};
  EXPECT_THROW(read_measurements(log.path(), bad), InputError);
  bad.ranks_per_node = 0;
  EXPECT_THROW(read_measurements(log.path(), bad), InputError);
}

TEST(MeasurementSet, NcclTestsDeviceLinesWinOverContradictingCounts) {
  const std::string devices =
      "#  Rank  0 Group  0 Pid   1001 on      nodeA device  0 [0x19] NVIDIA H100 80GB HBM3\n"
      "#  Rank  1 Group  0 Pid   1002 on      nodeA device  1 [0x3b] NVIDIA H100 80GB HBM3\n"
      "#  Rank  2 Group  0 Pid   2001 on      nodeB device  0 [0x19] NVIDIA H100 80GB HBM3\n";
  TempFile log("devices.log", "# nThread 1 nGpus 1 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 5 iters: 20\n" +
                                  devices + kLogHeader + kRow1K);
  ReadOutcome out = read_measurements(log.path());
  ASSERT_TRUE(out.ok()) << out.problems[0].message();
  ASSERT_EQ(out.set.collectives.size(), 2u);
  EXPECT_EQ(out.set.collectives[0].ranks, 3);
  EXPECT_EQ(out.set.collectives[0].nodes, 2);
  EXPECT_EQ(out.set.collectives[0].ranks_per_node, 2);  // nodeA holds two
  const RunMetadata& meta = out.set.runs.at(0);
  EXPECT_EQ(meta.hosts, (std::vector<std::string>{"nodeA", "nodeB"}));
  EXPECT_EQ(meta.gpu, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(meta.devices.size(), 3u);
  EXPECT_THROW(read_measurements(log.path(), MeasurementReadOptions{8, std::nullopt, std::nullopt, std::nullopt}), InputError);
  EXPECT_THROW(read_measurements(log.path(), MeasurementReadOptions{std::nullopt, 1, std::nullopt, std::nullopt}), InputError);
  EXPECT_THROW(read_measurements(log.path(), MeasurementReadOptions{std::nullopt, std::nullopt, CollectiveOp::kAllGather, std::nullopt}),
               InputError);
  const MeasurementReadOptions per_node{std::nullopt, std::nullopt, std::nullopt, 1};  // nodeA holds two
  EXPECT_THROW(read_measurements(log.path(), per_node), InputError);
  // Agreeing overrides change nothing.
  EXPECT_TRUE(read_measurements(log.path(), MeasurementReadOptions{3, 2, CollectiveOp::kAllReduce, std::nullopt}).ok());
}

TEST(MeasurementSet, NcclTestsLogWithABadRowKeepsTheRowsBeforeIt) {
  // Line 3 good, line 4 a letter inside the in-place time, line 5 good but after it.
  const std::string bad =
      "        4096          1024     float     sum      -1    13.10    0.31    0.31      0    1x.40    0.33    0.33      0\n";
  TempFile log("bad-row.log", kLogHeader + kRow1K + bad + kRow2K);
  ReadOutcome out = read_measurements(log.path(), MeasurementReadOptions{2, 1, std::nullopt, std::nullopt});
  ASSERT_EQ(out.problems.size(), 1u);
  EXPECT_EQ(out.problems[0].line, 4);
  EXPECT_TRUE(contains(out.problems[0].message(), log.path() + ":4: ")) << out.problems[0].message();
  EXPECT_TRUE(contains(out.problems[0].reason, "'1x.40' is not a number")) << out.problems[0].reason;
  ASSERT_EQ(out.set.collectives.size(), 2u);
  EXPECT_EQ(out.set.collectives[0].size, kib(1));

  // A first row that is already bad leaves nothing.
  TempFile first_bad("first-bad.log", kLogHeader + bad);
  ReadOutcome none = read_measurements(first_bad.path(), MeasurementReadOptions{2, 1, std::nullopt, std::nullopt});
  ASSERT_EQ(none.problems.size(), 1u);
  EXPECT_EQ(none.problems[0].line, 3);
  EXPECT_TRUE(none.set.empty());
}

TEST(MeasurementSet, UnreadableInputIsAnInputError) {
  const std::string missing = calibration_fixture("does-not-exist.jsonl");
  try {
    read_measurements(missing);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), missing);
    EXPECT_TRUE(contains(e.reason(), "cannot open")) << e.what();
  }
  EXPECT_THROW(read_measurements(test::source_path("tests/data/calibration")), InputError);
  EXPECT_THROW(read_measurements(std::vector<std::string>{calibration_fixture("h200-node-sweep.jsonl"), missing}),
               InputError);
}

TEST(MeasurementSet, ManyFilesMergeInOrderAndCollectProblems) {
  const std::vector<std::string> paths = {calibration_fixture("h200-node-sweep.jsonl"),
                                          calibration_fixture("bad-line-sweep.jsonl"),
                                          nccl_log("dgx-h100-8gpu-1node-allreduce.txt"),
                                          calibration_fixture("truncated-sweep.jsonl")};
  ReadOutcome out = read_measurements(paths);
  EXPECT_EQ(out.set.files, paths);
  // 3 + 3 (the bad line 4 skipped) + 2·32 + 2 collectives; 1 + 1 + 1 + 1 runs.
  EXPECT_EQ(out.set.collectives.size(), 3u + 3u + 64u + 2u);
  EXPECT_EQ(out.set.runs.size(), 4u);
  EXPECT_EQ(out.set.gemms.size(), 1u);
  ASSERT_EQ(out.problems.size(), 2u);
  EXPECT_EQ(out.problems[0].file, paths[1]);
  EXPECT_EQ(out.problems[0].line, 4);
  EXPECT_EQ(out.problems[1].file, paths[3]);
  EXPECT_EQ(out.problems[1].line, 4);
  EXPECT_EQ(out.set.collectives[3].source.file, paths[1]);
  EXPECT_EQ(out.set.collectives[6].source.file, paths[2]);
}

}  // namespace
}  // namespace parallax
