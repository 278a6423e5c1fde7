// Topologies: every bundled preset loads and its bisection bandwidth matches a hand
// computation; compact generation, routing (no GPU transit, rails, ECMP) and the explicit form.
#include <gtest/gtest.h>

#include <fstream>

#include <set>

#include "io/input_error.h"
#include "test_support.h"
#include "topology/router.h"
#include "topology/topology_metrics.h"

namespace parallax {
namespace {

using test::load_preset;

struct BisectionCase {
  const char* preset;
  int nodes;
  double expected_gbps;  // GB/s per direction
  const char* derivation;
};

// Bisection = max flow from the first half of the GPUs to the second (topology_metrics.h).
// Multi-node: the cut runs through the NIC line rates of the first half's nodes (the fat trees
// are non-blocking, rail-optimized with one leaf group at these sizes, so no leaf or spine link
// is narrower). One node: the GPU↔switch links of half the GPUs (NVSwitch), or the PCIe tree.
const BisectionCase kBisection[] = {
    {"dgx-a100", 2, 200, "1 node x 8 NICs x 200 Gb/s (25 GB/s)"},
    {"dgx-a100", 4, 400, "2 nodes x 8 NICs x 25 GB/s"},
    {"dgx-a100", 1, 1200, "4 GPUs x 300 GB/s NVLink (600 GB/s bidirectional)"},
    {"dgx-a100-40gb", 2, 200, "8 NICs x 25 GB/s"},
    {"dgx-a100-40gb", 4, 400, "16 NICs x 25 GB/s"},
    {"dgx-h100", 2, 400, "8 NICs x 400 Gb/s (50 GB/s)"},
    {"dgx-h100", 4, 800, "16 NICs x 50 GB/s"},
    {"dgx-h100", 1, 1800, "4 GPUs x 450 GB/s NVLink (900 GB/s bidirectional)"},
    {"hgx-h200", 2, 400, "8 NICs x 50 GB/s"},
    {"hgx-h200", 4, 800, "16 NICs x 50 GB/s"},
    {"hgx-h800", 2, 400, "8 NICs x 50 GB/s"},
    {"hgx-h800", 4, 800, "16 NICs x 50 GB/s"},
    {"hgx-h800", 1, 800, "4 GPUs x 200 GB/s NVLink (400 GB/s bidirectional)"},
    {"dgx-b200", 2, 400, "8 NICs x 50 GB/s"},
    {"dgx-b200", 4, 800, "16 NICs x 50 GB/s"},
    {"dgx-b300", 2, 800, "8 NICs x 800 Gb/s (100 GB/s)"},
    {"dgx-b300", 4, 1600, "16 NICs x 100 GB/s"},
    {"gb200-nvl72", 1, 32400, "36 GPUs x 900 GB/s NVLink (1.8 TB/s bidirectional)"},
    {"gb200-nvl72", 2, 3600, "72 NICs x 50 GB/s"},
    {"gb300-nvl72", 1, 32400, "36 GPUs x 900 GB/s"},
    {"gb300-nvl72", 2, 7200, "72 NICs x 100 GB/s"},
    {"pcie-8gpu", 2, 100, "4 NICs x 200 Gb/s (25 GB/s)"},
    {"pcie-8gpu", 4, 200, "8 NICs x 25 GB/s"},
    {"pcie-8gpu", 1, 64, "2 PCIe switch uplinks x 32 GB/s from GPUs 0-3 to the CPU; the inter-socket link (128 GB/s) is wider"},
    // aws-p5: 8 multi-rail EFA devices of 400 Gb/s (50 GB/s; each 4 EFAs of 100 Gb/s striped by
    // aws-ofi-nccl) per node, one per GPU, attached at 64 GB/s (> 50, so the line rate binds);
    // not rail-optimized, 2 nodes per leaf, 1:1, so a leaf has 16 ports down and 16 spines x
    // 50 GB/s up.
    // 2 nodes: both on one leaf; node 0's GPUs leave only through their own devices:
    //   8 x 50 GB/s = 400 GB/s (node 1's 8 downlinks also take 400).
    // 4 nodes: nodes 0-1 on leaf 0, 2-3 on leaf 1; the first half's 16 device links (16 x 50 =
    //   800 GB/s) and leaf 0's 16 spine uplinks (16 x 50 = 800 GB/s) both give 800 GB/s.
    // 1 node: no NICs; GPUs 0-3's NVSwitch links, 4 x 450 GB/s (900 GB/s bidirectional).
    {"aws-p5", 2, 400, "8 multi-rail EFA devices x 400 Gb/s (50 GB/s), one per GPU"},
    {"aws-p5", 4, 800, "16 EFA devices x 50 GB/s = leaf 0's 16 spine uplinks x 50 GB/s"},
    {"aws-p5", 1, 1800, "4 GPUs x 450 GB/s NVLink (900 GB/s bidirectional)"},
};

class PresetBisection : public ::testing::TestWithParam<BisectionCase> {};

TEST_P(PresetBisection, MatchesHandComputation) {
  const auto& c = GetParam();
  SCOPED_TRACE(std::string(c.preset) + " at " + std::to_string(c.nodes) + " nodes: " + c.derivation);
  Topology t = load_preset(c.preset, c.nodes);
  EXPECT_EQ(t.node_count(), c.nodes);
  EXPECT_NEAR(bisection_bandwidth(t).value() / 1e9, c.expected_gbps, 1e-6 * c.expected_gbps);
}

INSTANTIATE_TEST_SUITE_P(Presets, PresetBisection, ::testing::ValuesIn(kBisection),
                         [](const auto& param_info) {
                           std::string n = std::string(param_info.param.preset) + "_" + std::to_string(param_info.param.nodes);
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

// pcie-2gpu-rtx2080ti is in the explicit form (a fixed machine; --nodes is refused), so it cannot
// go through PresetBisection, which always passes a node count. Hand computation: P2P is not
// supported there, so each GPU joins only the CPU (host memory), by an shm link of 5.7 GB/s per
// direction (the measured non-P2P copy rate). The first half is GPU 0; its only route to GPU 1
// is GPU 0 -> CPU (5.7) -> GPU 1 (5.7), so the max flow is min(5.7, 5.7) = 5.7 GB/s.
TEST(ExplicitPresetBisection, Pcie2GpuRtx2080Ti) {
  Topology t = load_preset("pcie-2gpu-rtx2080ti");
  EXPECT_EQ(t.node_count(), 1);
  EXPECT_EQ(t.gpu_count(), 2u);
  EXPECT_NEAR(bisection_bandwidth(t).value() / 1e9, 5.7, 1e-6 * 5.7);
  // Every GPU-to-GPU byte crosses the CPU: GPU 0 -> CPU -> GPU 1, over host-memory links.
  Router r(t);
  DeviceId g0 = *t.find_device("n0.gpu0"), g1 = *t.find_device("n0.gpu1"), cpu = *t.find_device("n0.cpu0");
  auto path = r.route(g0, g1);
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(t.link(path[0]).to, cpu);
  for (LinkId l : path) EXPECT_EQ(t.link(l).link_class, LinkClass::kShm);
  EXPECT_THROW(load_preset("pcie-2gpu-rtx2080ti", 1), InputError);
}

TEST(Topology, DgxH100CompactGeneration) {
  // 2 nodes of 8 GPUs: 16 GPUs, 16 NICs, 2 NVSwitches; rail-optimized with 32 nodes per leaf:
  // 8 rails x 1 group = 8 leaves; spines = 32 ports down / 1 = 32.
  Topology t = load_preset("dgx-h100", 2);
  int gpus = 0, nics = 0, leaves = 0, spines = 0, nvswitches = 0;
  for (uint32_t i = 0; i < t.device_count(); ++i) {
    const Device& d = t.device(DeviceId{i});
    gpus += d.kind == DeviceKind::kGpu;
    nics += d.kind == DeviceKind::kNic;
    leaves += d.switch_kind == SwitchKind::kLeaf;
    spines += d.switch_kind == SwitchKind::kSpine;
    nvswitches += d.switch_kind == SwitchKind::kNVSwitch;
  }
  EXPECT_EQ(gpus, 16);
  EXPECT_EQ(nics, 16);
  EXPECT_EQ(nvswitches, 2);
  EXPECT_EQ(leaves, 8);
  EXPECT_EQ(spines, 32);
  EXPECT_EQ(t.gpu_count(), 16u);
  EXPECT_EQ(t.device(t.gpus()[9]).name, "n1.gpu1");
  auto inj = injection_bandwidth(t);
  EXPECT_DOUBLE_EQ(inj.scale_up.value(), 450e9);  // 900 GB/s bidirectional / 2
  EXPECT_DOUBLE_EQ(inj.scale_out.value(), 50e9);  // 8 x 400 Gb/s / 8 GPUs
}

TEST(Topology, OversubscriptionCutsTheSpine) {
  // 64 nodes, 32 per leaf, 2:1: each leaf has 32 x 50 GB/s down and 800 GB/s up. A cut between
  // the two leaf groups crosses the uplinks of 8 leaves (one per rail): 8 x 800 GB/s = 6.4 TB/s,
  // half of the 32 nodes x 8 NICs x 50 GB/s = 12.8 TB/s that the NICs could inject.
  nlohmann::json doc = nlohmann::json::parse(R"({
    "name": "oversubscribed", "nodes": 64,
    "node": { "gpus": 8,
      "gpu": { "name": "x", "peak": { "fp32": "1 TFLOP/s", "bf16": "2 TFLOP/s" }, "memory": "80 GiB",
               "memory_bandwidth": "3 TB/s" },
      "scale_up": { "kind": "nvswitch", "bandwidth_bidirectional": "900 GB/s", "latency": "0.35 us" },
      "nics": { "count": 8, "bandwidth_per_direction": "400 Gb/s", "latency": "0.6 us",
                "attach": { "bandwidth_per_direction": "64 GB/s", "latency": "0.3 us" } } },
    "network": { "kind": "fat_tree", "tiers": 2, "rail_optimized": true, "nodes_per_leaf": 32,
                 "oversubscription": "2:1", "link_latency": "0.6 us" } })");
  Topology t = topology_from_json(doc, "inline");
  EXPECT_NEAR(bisection_bandwidth(t).value(), 6.4e12, 1.0);
}

TEST(Routing, PathsFollowRailsAndNeverTransitAGpu) {
  Topology t = load_preset("dgx-h100", 2);
  Router r(t);
  auto id = [&](const char* n) { return *t.find_device(n); };
  // Same node: GPU -> NVSwitch -> GPU.
  EXPECT_EQ(r.hops(id("n0.gpu0"), id("n0.gpu5")), 2);
  // Same rail across nodes: GPU -> NIC -> rail-0 leaf -> NIC -> GPU.
  auto same_rail = r.route(id("n0.gpu3"), id("n1.gpu3"));
  ASSERT_EQ(same_rail.size(), 4u);
  EXPECT_EQ(t.device(t.link(same_rail[1]).to).name, "leaf.r3.g0");
  // Cross rail: up to a spine and down the other rail's leaf.
  auto cross = r.route(id("n0.gpu0"), id("n1.gpu1"));
  ASSERT_EQ(cross.size(), 6u);
  EXPECT_EQ(t.device(t.link(cross[2]).to).switch_kind, SwitchKind::kSpine);
  for (size_t i = 0; i + 1 < cross.size(); ++i) {
    EXPECT_NE(t.device(t.link(cross[i]).to).kind, DeviceKind::kGpu);
  }
}

TEST(Routing, GpusThatShareANicTalkOverTheirOwnFabric) {
  // HGX A100 with 4 NICs: as on the board, each PCIe switch holds two neighbouring GPUs and one
  // NIC, so GPUs 2k and 2k+1 share NIC k. Between those two GPUs the NIC is as short a way
  // (2 hops) as the NVSwitch, but a NIC joins its node to the network and relays nothing inside
  // it: every flow goes over the NVSwitch. Across nodes the NIC is the way out and in.
  Topology t = load_preset("hgx-a100-4hdr", 2);
  Router r(t);
  auto id = [&](const std::string& n) { return *t.find_device(n); };
  for (int g = 0; g < 8; ++g) {
    const DeviceId gpu = id("n0.gpu" + std::to_string(g));
    int nics = 0;
    for (LinkId l : t.out_links(gpu)) {
      if (t.device(t.link(l).to).kind != DeviceKind::kNic) continue;
      EXPECT_EQ(t.device(t.link(l).to).name, "n0.nic" + std::to_string(g / 2));
      ++nics;
    }
    EXPECT_EQ(nics, 1) << g;
  }
  for (uint64_t key = 0; key < 64; ++key) {
    const std::vector<LinkId> inside = r.route(id("n0.gpu0"), id("n0.gpu1"), key);
    ASSERT_EQ(inside.size(), 2u);
    EXPECT_EQ(t.device(t.link(inside[0]).to).switch_kind, SwitchKind::kNVSwitch) << key;
  }
  const std::vector<LinkId> across = r.route(id("n0.gpu1"), id("n1.gpu1"));
  EXPECT_EQ(t.device(t.link(across.front()).to).name, "n0.nic0");
  EXPECT_EQ(t.device(t.link(across.back()).from).name, "n1.nic0");
}

TEST(Routing, EcmpIsDeterministicAndSpreadsOverSpines) {
  // 32 equal spines between the rail-0 and rail-1 leaves; 512 flow keys should use most of
  // them (a uniform hash leaves a given spine unused with probability (31/32)^512 ≈ 1e-7),
  // and the same key must always take the same path.
  Topology t = load_preset("dgx-h100", 2);
  Router r(t);
  DeviceId a = *t.find_device("n0.gpu0"), b = *t.find_device("n1.gpu1");
  std::set<uint32_t> spines;
  for (uint64_t key = 0; key < 512; ++key) {
    auto p = r.route(a, b, key);
    EXPECT_EQ(p, r.route(a, b, key));
    spines.insert(t.link(p[2]).to.value);
  }
  EXPECT_EQ(spines.size(), 32u);
}

TEST(Routing, LatencyTreesEqualEveryRoutesOwnSum) {
  // path_latencies_to walks the key-0 routes toward one destination as a tree; each source's
  // latency must be the sum over its own route (path_latency), across nodes, spines and NVLink.
  Topology t = load_preset("dgx-h100", 4);
  Router r(t);
  const std::vector<DeviceId> gpus(t.gpus().begin(), t.gpus().end());
  for (DeviceId dst : {gpus.front(), gpus[13], gpus.back()}) {
    const std::vector<Time> tree = r.path_latencies_to(dst, gpus);
    ASSERT_EQ(tree.size(), gpus.size());
    for (size_t i = 0; i < gpus.size(); ++i) EXPECT_EQ(tree[i], r.path_latency(gpus[i], dst)) << i;
    EXPECT_EQ(tree[static_cast<size_t>(std::find(gpus.begin(), gpus.end(), dst) - gpus.begin())], Time::zero());
  }
}

TEST(Topology, ExplicitFormWithHalfDuplexLink) {
  nlohmann::json doc = nlohmann::json::parse(R"({
    "name": "pair",
    "gpu_specs": { "toy": { "name": "toy", "peak": { "fp32": "1 TFLOP/s", "bf16": "2 TFLOP/s" },
                            "memory": "1 GiB", "memory_bandwidth": "100 GB/s" } },
    "devices": [ { "name": "a", "kind": "gpu", "spec": "toy", "node": 0, "local": 0 },
                 { "name": "b", "kind": "gpu", "spec": "toy", "node": 0, "local": 1 } ],
    "links": [ { "between": ["a", "b"], "class": "pcie", "bandwidth_per_direction": "10 GB/s",
                 "latency": "1 us", "duplex": "half" } ] })");
  Topology t = topology_from_json(doc, "inline");
  ASSERT_EQ(t.link_count(), 2u);
  EXPECT_EQ(t.resource_count(), 1u);  // both directions share one capacity
  EXPECT_EQ(t.link(LinkId{0}).resource, t.link(LinkId{1}).resource);
  EXPECT_DOUBLE_EQ(bisection_bandwidth(t).value(), 10e9);
}

TEST(Topology, NicsCarryTheLatencyTheirStackReports) {
  // The compact form's nics.reported_latency lands on every NIC (AWS p5: 75 µs); a negative
  // one is refused with its JSON pointer.
  Topology p5 = test::load_preset("aws-p5");
  size_t nics = 0;
  for (uint32_t d = 0; d < p5.device_count(); ++d) {
    const Device& dev = p5.device(DeviceId{d});
    if (dev.kind != DeviceKind::kNic) continue;
    ++nics;
    EXPECT_EQ(dev.reported_latency, Time::us(75)) << dev.name;
  }
  EXPECT_EQ(nics, 16u);
  nlohmann::json doc = nlohmann::json::parse(R"({
    "name": "nic", "devices": [ { "name": "n", "kind": "nic", "reported_latency": "-1 us" } ], "links": [] })");
  try {
    topology_from_json(doc, "inline");
    ADD_FAILURE() << "a negative reported latency was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/devices/0/reported_latency"), std::string::npos) << e.what();
  }
}

// Each preset names its GPU's tensor-core generation; an unknown one is refused with its pointer.
TEST(Topology, PresetsNameTheirTensorCoreGeneration) {
  const std::pair<const char*, const char*> presets[] = {
      {"dgx-a100", "ampere"},        {"dgx-h100", "hopper"},         {"hgx-h800", "hopper"},
      {"dgx-b200", "blackwell"},     {"gb300-nvl72", "blackwell"},   {"pcie-8gpu", "ada"},
      {"pcie-2gpu-rtx2080ti", "turing"}};
  for (const auto& [preset, arch] : presets) {
    const Topology t = test::load_preset(preset);
    EXPECT_EQ(t.gpu_specs().front().architecture, arch) << preset;
  }
  EXPECT_TRUE(has_async_tensor_cores(test::load_preset("dgx-h100", 1).gpu_specs().front()));
  EXPECT_FALSE(has_async_tensor_cores(test::load_preset("dgx-a100", 1).gpu_specs().front()));
  std::ifstream in(test::source_path("topologies/dgx-h100.json"));
  nlohmann::json doc = nlohmann::json::parse(in);
  doc["node"]["gpu"]["architecture"] = "lovelace";
  try {
    topology_from_json(doc, "h100.json", TopologyLoadOptions{1});
    ADD_FAILURE() << "an unknown architecture was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "h100.json: /node/gpu/architecture: expected volta, turing, ampere, ada, hopper or blackwell");
  }
}

// Every data-centre preset counts its GPU's SMs, so that collectives beside the compute take
// theirs from it on every generation (B200 148 of 160 on its two dies; B300 160).
TEST(Topology, DataCentrePresetsCountTheirGpusSms) {
  const std::pair<const char*, int> presets[] = {
      {"dgx-a100", 108},    {"dgx-a100-40gb", 108}, {"dgx-h100", 132},    {"hgx-h800", 132},
      {"hgx-h200", 132},    {"dgx-b200", 148},      {"gb200-nvl72", 148}, {"dgx-b300", 160},
      {"gb300-nvl72", 160}};
  for (const auto& [preset, sms] : presets) {
    EXPECT_EQ(test::load_preset(preset).gpu_specs().front().sms, sms) << preset;
  }
}

// Presets carry the measured matmul ceiling of their GPU (bf16, fp8) where one was published; a
// figure above the datasheet peak is refused with its pointer.
TEST(Topology, PresetsCarryTheirGpusMeasuredMatmulCeiling) {
  const GpuSpec gb200 = test::load_preset("gb200-nvl72").gpu_specs().front();
  EXPECT_DOUBLE_EQ(gb200.achievable_bf16.value(), 1822.0e12);
  EXPECT_DOUBLE_EQ(gb200.achievable_fp8.value(), 3615.6e12);
  const GpuSpec a100 = test::load_preset("dgx-a100", 1).gpu_specs().front();
  EXPECT_DOUBLE_EQ(a100.achievable_bf16.value(), 271.2e12);
  EXPECT_EQ(a100.achievable_fp8.value(), 0.0);  // no fp8 tensor cores, no figure
  EXPECT_EQ(test::load_preset("gb300-nvl72").gpu_specs().front().achievable_bf16.value(), 0.0);  // not measured
  std::ifstream in(test::source_path("topologies/dgx-h100.json"));
  nlohmann::json doc = nlohmann::json::parse(in);
  doc["node"]["gpu"]["achievable_matmul"]["fp8"] = "2000 TFLOP/s";
  try {
    topology_from_json(doc, "h100.json", TopologyLoadOptions{1});
    ADD_FAILURE() << "a ceiling above the peak was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "h100.json: /node/gpu/achievable_matmul/fp8: exceeds the datasheet peak (\"peak\": fp8)");
  }
}

TEST(Topology, GpusThatOnlyMeetThroughAnotherGpuAreRejected) {
  // a - sw1 - b - sw2 - c: a reaches c only through GPU b.
  nlohmann::json doc = nlohmann::json::parse(R"({
    "name": "chain",
    "gpu_specs": { "toy": { "name": "toy", "peak": { "fp32": "1 TFLOP/s", "bf16": "2 TFLOP/s" },
                            "memory": "1 GiB", "memory_bandwidth": "100 GB/s" } },
    "devices": [ { "name": "a", "kind": "gpu", "spec": "toy", "node": 0, "local": 0 },
                 { "name": "b", "kind": "gpu", "spec": "toy", "node": 0, "local": 1 },
                 { "name": "c", "kind": "gpu", "spec": "toy", "node": 0, "local": 2 },
                 { "name": "sw1", "kind": "switch", "switch": "pcie" },
                 { "name": "sw2", "kind": "switch", "switch": "pcie" } ],
    "links": [ { "between": ["a", "sw1"], "class": "pcie", "bandwidth_per_direction": "10 GB/s", "latency": "1 us" },
               { "between": ["b", "sw1"], "class": "pcie", "bandwidth_per_direction": "10 GB/s", "latency": "1 us" },
               { "between": ["b", "sw2"], "class": "pcie", "bandwidth_per_direction": "10 GB/s", "latency": "1 us" },
               { "between": ["c", "sw2"], "class": "pcie", "bandwidth_per_direction": "10 GB/s", "latency": "1 us" } ] })");
  try {
    topology_from_json(doc, "chain.json");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("only through another GPU"), std::string::npos) << e.what();
  }
}

TEST(Topology, JobsOnPartOfEachNodeArePlacedAsALauncherWould) {
  // The same GPUs on every node, the most that divide the job.
  auto placed = [](int gpus, int node) {
    const JobPlacement p = place_job(gpus, node);
    return std::make_pair(p.nodes, p.gpus_per_node);
  };
  EXPECT_EQ(placed(64, 72), std::make_pair(1, 64));    // 64 of one NVL72 rack
  EXPECT_EQ(placed(256, 72), std::make_pair(4, 64));   // 64 of each of 4 racks
  EXPECT_EQ(placed(144, 72), std::make_pair(2, 72));   // whole racks
  EXPECT_EQ(placed(4, 8), std::make_pair(1, 4));       // half a DGX
  EXPECT_EQ(placed(12, 8), std::make_pair(2, 6));
  EXPECT_EQ(placed(16, 8), std::make_pair(2, 8));
  // 256 GPUs of GB200 NVL72: 4 racks of 64 GPUs, each with the 64 NICs of its GPUs.
  const Topology racks = load_topology(test::source_path("topologies/gb200-nvl72.json"), load_options_for(256, 72));
  EXPECT_EQ(racks.gpu_count(), 256u);
  for (int n = 0; n < 4; ++n) EXPECT_EQ(racks.gpus_of_node(n).size(), 64u);
  size_t nics = 0;
  for (size_t d = 0; d < racks.device_count(); ++d) nics += racks.device(DeviceId{static_cast<uint32_t>(d)}).kind == DeviceKind::kNic;
  EXPECT_EQ(nics, 4u * 64u);
  // Half a DGX H100 alone: 4 GPUs on the NVSwitch, no network.
  EXPECT_EQ(load_topology(test::source_path("topologies/dgx-h100.json"), load_options_for(4, 8)).gpu_count(), 4u);
  // A PCIe tree is the whole node's, and a node holds no more GPUs than it has.
  TopologyLoadOptions too_many(1);
  too_many.gpus_per_node = 9;
  EXPECT_THROW(load_topology(test::source_path("topologies/dgx-h100.json"), too_many), InputError);
  TopologyLoadOptions pcie_half(1);
  pcie_half.gpus_per_node = 4;
  EXPECT_THROW(load_topology(test::source_path("topologies/pcie-8gpu.json"), pcie_half), InputError);
}

TEST(Topology, DiameterOfPresets) {
  // DGX H100, 2 nodes: cross-rail GPU->NIC->leaf->spine->leaf->NIC->GPU = 6 hops.
  EXPECT_EQ(gpu_diameter(load_preset("dgx-h100", 2)), 6);
  // One NVL72 rack: GPU->NVSwitch->GPU = 2 hops.
  EXPECT_EQ(gpu_diameter(load_preset("gb200-nvl72", 1)), 2);
  // PCIe server: GPU->switch->CPU->CPU->switch->GPU = 5 hops.
  EXPECT_EQ(gpu_diameter(load_preset("pcie-8gpu", 1)), 5);
}

TEST(Topology, DotRenderingNamesEveryDevice) {
  Topology t = load_preset("dgx-h100", 2);
  std::string dot = to_dot(t);
  EXPECT_EQ(dot.rfind("graph", 0), 0u);
  EXPECT_NE(dot.find("n1.gpu7"), std::string::npos);
  EXPECT_NE(dot.find("spine31"), std::string::npos);
}

}  // namespace
}  // namespace parallax

namespace parallax {
namespace {

// A cluster of two kinds of node (docs/topology-format.md, "node_groups").
TEST(Topology, NodeGroupsJoinTwoKindsOfNodeOnOneFabric) {
  const Topology mixed = load_topology(test::source_path("topologies/dgx-h100-a100-mixed.json"));
  ASSERT_EQ(mixed.node_count(), 2);
  EXPECT_EQ(mixed.gpu_spec_of(mixed.gpus_of_node(0)[0]).name, "H100-SXM5-80GB");
  EXPECT_EQ(mixed.gpu_spec_of(mixed.gpus_of_node(1)[7]).name, "A100-SXM4-80GB");
  // Each node's NICs at its own line rate: 400 Gb/s and 200 Gb/s.
  for (int n = 0; n < 2; ++n) {
    const DeviceId nic = *mixed.find_device("n" + std::to_string(n) + ".nic3");
    for (LinkId l : mixed.out_links(nic)) {
      if (mixed.link(l).link_class == LinkClass::kNetwork) {
        EXPECT_DOUBLE_EQ(mixed.link(l).bandwidth.value(), n == 0 ? 50e9 : 25e9);
      }
    }
  }
  // Each group alone is its preset's node: the same GPUs, NVLink and host link.
  const std::vector<NodeGroup>& groups = mixed.info().node_groups;
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(node_group_of(mixed.info(), 1), &groups[1]);
  EXPECT_EQ(groups[1].first_node, 1);
  for (const auto& [group, preset] : {std::pair{0, "dgx-h100"}, std::pair{1, "dgx-a100"}}) {
    const Topology& alone = *groups[static_cast<size_t>(group)].alone;
    const Topology node = load_preset(preset, 1);
    EXPECT_EQ(alone.gpu_count(), node.gpu_count());
    EXPECT_EQ(alone.link_count(), node.link_count());
    EXPECT_EQ(alone.gpu_spec_of(alone.gpus()[0]).name, node.gpu_spec_of(node.gpus()[0]).name);
    EXPECT_EQ(alone.info().gpu_host_link, node.info().gpu_host_link);
    EXPECT_TRUE(alone.info().node_groups.empty());
  }
  // The fabric joins them: every GPU reaches every other, none through a third GPU (finalize).
  EXPECT_EQ(gpu_diameter(mixed), 6);
}

TEST(Topology, NodeGroupsRefuseWhatTheyCannotHold) {
  const auto load = [](const std::string& text, TopologyLoadOptions o = {}) {
    return topology_from_json(nlohmann::json::parse(text), test::source_path("topologies/inline.json"), o);
  };
  const std::string groups = R"("node_groups": [{"name": "h", "nodes": 1, "node_from": "dgx-h100.json"},
                                                {"name": "a", "nodes": 1, "node_from": "dgx-a100.json"}],
      "network": {"kind": "fat_tree", "tiers": 1, "link_latency": "1 us"})";
  EXPECT_NO_THROW(load("{\"name\": \"x\", " + groups + "}"));
  EXPECT_THROW(load("{\"name\": \"x\", " + groups + "}", TopologyLoadOptions{4}), InputError);  // --nodes
  EXPECT_THROW(load("{\"name\": \"x\", \"nodes\": 2, " + groups + "}"), InputError);
  // A node of another GPU count (an NVL72 rack of 72 beside 8-GPU DGXs) is refused.
  EXPECT_THROW(load(R"({"name": "x", "node_groups": [{"name": "h", "nodes": 1, "node_from": "dgx-h100.json"},
                                                     {"name": "r", "nodes": 1, "node_from": "gb200-nvl72.json"}],
      "network": {"kind": "fat_tree", "tiers": 1, "link_latency": "1 us"}})"),
               InputError);
  EXPECT_THROW(load(R"({"name": "x", "node_groups": [{"name": "h", "nodes": 1, "node_from": "missing.json"}]})"),
               InputError);
  // A node without NICs cannot join a network, whichever group comes first.
  std::ifstream in(test::source_path("topologies/dgx-a100.json"));
  nlohmann::json no_nics = nlohmann::json::parse(in)["node"];
  no_nics.erase("nics");
  const std::string lone = R"({"name": "a", "nodes": 1, "node": )" + no_nics.dump() + "}";
  const std::string dgx = R"({"name": "h", "nodes": 1, "node_from": "dgx-h100.json"})";
  const std::string net = R"("network": {"kind": "fat_tree", "tiers": 1, "link_latency": "1 us"})";
  for (const std::string& order : {lone + ", " + dgx, dgx + ", " + lone}) {
    EXPECT_THROW(load(R"({"name": "x", "node_groups": [)" + order + "], " + net + "}"), InputError) << order;
  }
}

}  // namespace
}  // namespace parallax
