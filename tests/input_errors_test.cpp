// Bad input through the CLI, as a user meets it: each mistake gives one line naming the file,
// the JSON path and the reason, exit code 2, and no output file.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_support.h"

namespace parallax {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int exit_code = -1;
  std::string stderr_text;
};

class InputErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("parallax_input_errors_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }

  CliResult cli(const std::string& args) {
    std::string err = (dir_ / "stderr.txt").string();
    std::string cmd = std::string(PARALLAX_CLI) + " " + args + " >/dev/null 2>" + err;
    int status = std::system(cmd.c_str());
    CliResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream in(err);
    std::ostringstream text;
    text << in.rdbuf();
    r.stderr_text = text.str();
    return r;
  }

  // Runs `topo show` on a topology text; expects exit 2, one line containing `expected`, and
  // no --json file.
  void expect_topology_error(const std::string& text, const std::string& expected) {
    std::string file = write("topo.json", text);
    std::string out = (dir_ / "out.json").string();
    CliResult r = cli("topo show " + file + " --json " + out);
    EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
    EXPECT_NE(r.stderr_text.find(file + ": "), std::string::npos) << r.stderr_text;
    EXPECT_NE(r.stderr_text.find(expected), std::string::npos) << r.stderr_text;
    EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
    EXPECT_FALSE(fs::exists(out));
  }

  fs::path dir_;
};

// A valid compact topology; tests replace one piece of it.
const std::string kCompact = R"({
  "name": "t", "nodes": 2,
  "node": { "gpus": 2,
    "gpu": { "name": "g", "peak": { "fp32": "1 TFLOP/s", "bf16": "2 TFLOP/s" }, "memory": "1 GiB",
             "memory_bandwidth": "100 GB/s" },
    "scale_up": { "kind": "nvswitch", "bandwidth_per_direction": "100 GB/s", "latency": "1 us" },
    "nics": { "count": 2, "bandwidth_per_direction": "400 Gb/s", "latency": "1 us",
              "attach": { "bandwidth_per_direction": "64 GB/s", "latency": "1 us" } } },
  "network": { "kind": "fat_tree", "tiers": 2, "link_latency": "1 us" } })";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  return s.replace(p, from.size(), to);
}

TEST_F(InputErrors, TheBaseTopologyIsValid) {
  std::string file = write("topo.json", kCompact);
  std::string out = (dir_ / "out.json").string();
  EXPECT_EQ(cli("topo show " + file + " --json " + out).exit_code, 0);
  EXPECT_TRUE(fs::exists(out));
}

TEST_F(InputErrors, MalformedJson) {
  expect_topology_error(replace(kCompact, "\"nodes\": 2,", "\"nodes\": 2"), "malformed JSON at line 3, column 8");  // where the parser meets "node"
}

TEST_F(InputErrors, UnknownKey) {
  expect_topology_error(replace(kCompact, "\"latency\": \"1 us\" },", "\"latency\": \"1 us\", \"bandwith\": \"1 GB/s\" },"),
                        "/node/scale_up/bandwith: unknown key");
}

TEST_F(InputErrors, MissingField) {
  expect_topology_error(replace(kCompact, "\"gpus\": 2,", ""), "/node: missing required key \"gpus\"");
}

TEST_F(InputErrors, NegativeBandwidth) {
  expect_topology_error(replace(kCompact, "\"400 Gb/s\"", "\"-400 Gb/s\""),
                        "/node/nics/bandwidth_per_direction: \"-400 Gb/s\" is negative");
}

TEST_F(InputErrors, ZeroBandwidth) {
  expect_topology_error(replace(kCompact, "\"400 Gb/s\"", "\"0 Gb/s\""),
                        "/node/nics/bandwidth_per_direction: must be greater than zero");
}

TEST_F(InputErrors, AmbiguousUnit) {
  expect_topology_error(replace(kCompact, "\"400 Gb/s\"", "\"400 Gbs\""),
                        "/node/nics/bandwidth_per_direction: \"400 Gbs\" is not a bandwidth");
}

TEST_F(InputErrors, BareNumberForABandwidth) {
  expect_topology_error(replace(kCompact, "\"400 Gb/s\"", "400"), "a bare number 400");
}

const std::string kExplicit = R"({
  "name": "e",
  "gpu_specs": { "g": { "name": "g", "peak": { "fp32": "1 TFLOP/s", "bf16": "2 TFLOP/s" }, "memory": "1 GiB",
                        "memory_bandwidth": "100 GB/s" } },
  "devices": [ { "name": "a", "kind": "gpu", "spec": "g", "node": 0, "local": 0 },
               { "name": "b", "kind": "gpu", "spec": "g", "node": 0, "local": 1 },
               { "name": "sw", "kind": "switch", "switch": "nvswitch" } ],
  "links": [ { "between": ["a", "sw"], "class": "nvlink", "bandwidth_per_direction": "10 GB/s", "latency": "1 us" },
             { "between": ["b", "sw"], "class": "nvlink", "bandwidth_per_direction": "10 GB/s", "latency": "1 us" } ] })";

TEST_F(InputErrors, DanglingLinkEndpoint) {
  expect_topology_error(replace(kExplicit, "[\"b\", \"sw\"]", "[\"b\", \"sw9\"]"),
                        "/links/1/between/1: no device named \"sw9\"");
}

TEST_F(InputErrors, DisconnectedGraph) {
  expect_topology_error(replace(kExplicit, "{ \"name\": \"sw\", \"kind\": \"switch\", \"switch\": \"nvswitch\" } ]",
                                "{ \"name\": \"sw\", \"kind\": \"switch\", \"switch\": \"nvswitch\" },"
                                " { \"name\": \"lonely\", \"kind\": \"switch\", \"switch\": \"leaf\" } ]"),
                        "/links: the graph is not connected: \"lonely\"");
}

TEST_F(InputErrors, NodesOverrideOnAnExplicitTopology) {
  std::string file = write("topo.json", kExplicit);
  CliResult r = cli("topo show " + file + " --nodes 4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("--nodes applies only to compact topologies"), std::string::npos) << r.stderr_text;
}

TEST_F(InputErrors, BadFlowList) {
  std::string topo = write("topo.json", kCompact);
  std::string flows = write("flows.json", R"({ "flows": [ { "src": "n0.gpu0", "dst": "n7.gpu0", "bytes": "1 MiB" } ] })");
  std::string out = (dir_ / "out.json").string();
  CliResult r = cli("flows --topology " + topo + " --flows " + flows + " --json " + out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find(flows + ": /flows/0/dst: no device named \"n7.gpu0\""), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(fs::exists(out));
  // A NIC only forwards data; a flow cannot start or end there.
  flows = write("nic-flows.json", R"({ "flows": [ { "src": "n0.gpu0", "dst": "n1.nic0", "bytes": "1 MiB" } ] })");
  r = cli("flows --topology " + topo + " --flows " + flows + " --json " + out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find(flows + ": /flows/0/dst: \"n1.nic0\" is a NIC"), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(InputErrors, UnknownNetworkModel) {
  std::string topo = write("topo.json", kCompact);
  std::string flows = write("flows.json", R"({ "flows": [ { "src": 0, "dst": 3, "bytes": "1 MiB" } ] })");
  CliResult r = cli("flows --topology " + topo + " --flows " + flows + " --model ns3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("unknown network model \"ns3\""), std::string::npos) << r.stderr_text;
}

TEST_F(InputErrors, MissingFile) {
  CliResult r = cli("topo show " + (dir_ / "nope.json").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("cannot open file"), std::string::npos) << r.stderr_text;
}

TEST_F(InputErrors, CollectiveCommandRefusesBadArgumentsWithExit2) {
  const std::string topo = test::source_path("topologies/dgx-h100.json");
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {"--op allsum", "unknown collective"},
      {"--algo spiral", "unknown algorithm"},
      {"--proto LL64", "unknown protocol"},
      {"--gpus 999", "room for 16 ranks"},
      {"--gpus 8 --algo collnet_direct", "collnet_direct needs ranks on at least 2 nodes"},
      {"--op all_gather --algo tree", "tree does not implement all_gather"},
      {"-b 1G -e 8", "larger than the largest"},
      {"-e 12parsecs", "expected a size"},
      {"--model ns3", "unknown model"},
      {"--compare " + test::source_path("tests/data/nccl-tests/missing.txt"), "missing.txt"},
  };
  for (const Case& c : cases) {
    std::string json = (dir_ / "out.json").string();
    CliResult r = cli("collective --topology " + topo + " --nodes 2 " + c.args + " --json " + json);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.stderr_text;
    EXPECT_NE(r.stderr_text.find(c.expected), std::string::npos) << c.args << ": " << r.stderr_text;
    EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
    EXPECT_FALSE(fs::exists(json)) << c.args;
  }
}

}  // namespace
}  // namespace parallax
