// The sibling-contention estimate against hand-computed link loads on bundled fabrics.
#include "collectives/sibling_contention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "test_support.h"

namespace parallax {
namespace {

// GPU `gpu` of each node in `nodes`, in that order: a ring with one rank per node.
std::vector<DeviceId> rail_ring(const Topology& topo, int gpu, const std::vector<int>& nodes) {
  std::vector<DeviceId> ring;
  for (int n : nodes) ring.push_back(topo.gpus_of_node(n)[static_cast<size_t>(gpu)]);
  return ring;
}

std::vector<int> in_order(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

// The 8 sibling rings of an 8-GPU-per-node cluster: ring r over GPU r of nodes 0..nodes-1.
std::vector<std::vector<DeviceId>> every_rail(const Topology& topo, int nodes) {
  std::vector<std::vector<DeviceId>> rings;
  for (int r = 0; r < 8; ++r) rings.push_back(rail_ring(topo, r, in_order(nodes)));
  return rings;
}

TEST(SiblingContention, RailOptimizedNonBlockingFabricSeparatesTheRails) {
  // 64 DGX H100 nodes, 32 per leaf and rail, 1:1. Eight DP rings, ring r over GPU r of every
  // node in order. Each pair offers its NIC's 50 GB/s: every NIC uplink carries one pair
  // (load 1.0), the two pairs that cross leaves (31→32, 63→0) load rail r's leaf uplinks with
  // 50 of 32 × 50 GB/s, and the rails' leaves are distinct: with the siblings, load 1.0 — as
  // alone. Slowdown 1.
  Topology topo = test::load_preset("dgx-h100", 64);
  Router router(topo);
  const std::vector<std::vector<DeviceId>> rings = every_rail(topo, 64);
  SiblingContention contention(topo, router);
  EXPECT_TRUE(contention.non_blocking());  // one GPU per NIC, 1:1 leaves: known without routing
  for (size_t own : {0u, 5u}) EXPECT_DOUBLE_EQ(contention.slowdown(rings, own, rings[0], TrafficPattern::kRing), 1.0);
}

TEST(SiblingContention, APlacementAcrossAnOversubscribedSpineIsSlowerThanTheReference) {
  // Same fabric at 4:1: a leaf has 32 NIC downlinks and 32 / 4 = 8 spine uplinks of 50 GB/s,
  // 400 GB/s up. A ring that alternates leaves (nodes 0, 32, 1, 33, …) sends all 32 of its
  // leaf-0 ranks' pairs up: 32 × 50 = 1,600 GB/s on 400, load 4. The reference — the same
  // ring over nodes in order, where the collective was timed — crosses once per leaf: 50 on
  // 400, so its NICs (load 1) are its peak. Slowdown 4 / 1 = 4.
  Topology topo = test::load_preset_oversubscribed("dgx-h100", 64, "4:1");
  Router router(topo);
  std::vector<int> alternating;
  for (int i = 0; i < 32; ++i) {
    alternating.push_back(i);
    alternating.push_back(32 + i);
  }
  std::vector<std::vector<DeviceId>> groups{rail_ring(topo, 0, alternating)};
  SiblingContention contention(topo, router);
  EXPECT_FALSE(contention.non_blocking());
  EXPECT_NEAR(contention.slowdown(groups, 0, rail_ring(topo, 0, in_order(64)), TrafficPattern::kRing), 4.0, 1e-12);
  // In order it is its own reference: 1.
  groups[0] = rail_ring(topo, 0, in_order(64));
  EXPECT_DOUBLE_EQ(contention.slowdown(groups, 0, groups[0], TrafficPattern::kRing), 1.0);
}

TEST(SiblingContention, SiblingRingsShareTheUplinksOfALeafThatIsNotRailOptimized) {
  // AWS p5 preset: 8 NICs of 50 GB/s per node, all on the node's leaf, 2 nodes per leaf (16
  // downlinks, 800 GB/s). Eight nodes, four leaves; ring r over GPU r of nodes 0..7 crosses a
  // leaf boundary after nodes 1, 3, 5 and 7, so each leaf sends one pair of each ring up.
  // - 1:1 (16 uplinks, 800 GB/s): 8 rings × 50 = 400 GB/s, load 0.5; the NICs' 1.0 is the
  //   peak, with or without the siblings: slowdown 1.
  // - 4:1 (16 / 4 = 4 uplinks, 200 GB/s): alone 50 / 200 = 0.25 (the NICs' 1.0 dominates);
  //   with the 8 rings, 400 / 200 = 2. Slowdown 2.
  for (const auto& [ratio, expected] : {std::pair<std::string, double>{"1:1", 1.0}, {"4:1", 2.0}}) {
    SCOPED_TRACE(ratio);
    Topology topo = test::load_preset_oversubscribed("aws-p5", 8, ratio);
    Router router(topo);
    const std::vector<std::vector<DeviceId>> rings = every_rail(topo, 8);
    SiblingContention contention(topo, router);
    EXPECT_EQ(contention.non_blocking(), ratio == "1:1");
    EXPECT_NEAR(contention.slowdown(rings, 3, rings[3], TrafficPattern::kRing), expected, 1e-12);
  }
}

TEST(SiblingContention, AllToAllGroupsLoadTheSpineWithEveryPair) {
  // AWS p5 at 4:1, 8 nodes (leaves of 2 nodes, 200 GB/s up each). Eight all-to-all groups,
  // group r over GPU r of the 8 nodes. Each rank sends 7 pairs of 50 GB/s through its own NIC
  // (load 7 × 50 / 50 = 7; its 64 GB/s attach link: 350 / 64 ≈ 5.5), 6 of them to other
  // leaves, so a leaf sends 2 × 6 = 12 pairs per group up: 600 / 200 = 3. Alone, the NICs'
  // load 7 is the peak. With the 8 groups the leaf sends 96 pairs up: 4,800 / 200 = 24.
  // Slowdown 24 / 7.
  Topology topo = test::load_preset_oversubscribed("aws-p5", 8, "4:1");
  Router router(topo);
  const std::vector<std::vector<DeviceId>> groups = every_rail(topo, 8);
  SiblingContention contention(topo, router);
  EXPECT_NEAR(contention.slowdown(groups, 0, groups[0], TrafficPattern::kAllPairs), 24.0 / 7.0, 1e-12);
}

TEST(SiblingContention, GpusThatShareANicSlowEachOther) {
  // pcie-8gpu: 2 GPUs per PCIe switch (Gen4, 32 GB/s), one 200 Gb/s (25 GB/s) NIC per switch.
  // Two nodes; ring r is GPU r of both. Rings 0 and 1 both leave through NIC 0: its uplink
  // carries 2 × 25 GB/s on 25 (load 2; the switch → NIC link, 50 on 32, less). Alone, ring 0
  // loads it to 1. Slowdown 2. The node has PCIe switches, so nothing is assumed non-blocking.
  Topology topo = test::load_preset("pcie-8gpu", 2);
  Router router(topo);
  const std::vector<std::vector<DeviceId>> rings = every_rail(topo, 2);
  SiblingContention contention(topo, router);
  EXPECT_FALSE(contention.non_blocking());
  EXPECT_NEAR(contention.slowdown(rings, 0, rings[0], TrafficPattern::kRing), 2.0, 1e-12);
}

TEST(SiblingContention, RingsLeaveANodeThroughTheNicsOfAllTheirGpusThere) {
  // HGX A100 with 4 NICs (25 GB/s; GPUs 2k, 2k+1 on NIC k), 4 nodes; a ring runs both ways at
  // half its rate each, as NCCL's channels leave a node through each of its GPUs' NICs.
  // - Eight rings of one GPU per node (tp 8: ring r over GPU r): NIC k carries rings 2k and 2k+1,
  //   each 2 × 12.5 GB/s out: 50 on 25, load 2; ring 0 alone, 1. Slowdown 2.
  // - Four rings of two GPUs per node (tp 4 · dp 2 per node: ring j over GPUs j and j+4 of each
  //   node in turn): ring j leaves a node from GPU j+4 (NIC j/2 + 2) one way and from GPU j
  //   (NIC j/2) the other, 12.5 GB/s each; rings 0 and 1 share NICs 0 and 2, 25 GB/s on each,
  //   load 1. The reference, the same shape on GPUs 0 and 1 (both on NIC 0): 25 on NIC 0, load 1.
  //   Slowdown 1: each ring has a NIC's worth, as where the collective was timed.
  Topology topo = test::load_preset("hgx-a100-4hdr", 4);
  Router router(topo);
  SiblingContention contention(topo, router);
  EXPECT_FALSE(contention.non_blocking());
  const std::vector<std::vector<DeviceId>> rails = every_rail(topo, 4);
  EXPECT_NEAR(contention.slowdown(rails, 0, rails[0], TrafficPattern::kRing), 2.0, 1e-12);
  std::vector<std::vector<DeviceId>> pairs(4);
  std::vector<DeviceId> reference;
  for (int n = 0; n < 4; ++n) {
    const auto node = topo.gpus_of_node(n);
    for (size_t j = 0; j < 4; ++j) {
      pairs[j].push_back(node[j]);
      pairs[j].push_back(node[j + 4]);
    }
    reference.push_back(node[0]);
    reference.push_back(node[1]);
  }
  for (size_t own : {0u, 3u}) EXPECT_NEAR(contention.slowdown(pairs, own, reference, TrafficPattern::kRing), 1.0, 1e-12);
}

TEST(SiblingContention, SkippingFarPairsChangesNothing) {
  // Random partitions of the GPUs into groups (rings and all-to-alls) on two 4:1 fabrics: the
  // slowdown with the far sibling pairs skipped equals the one with every pair routed.
  for (const std::string preset : {"dgx-h100", "aws-p5"}) {
    Topology topo = test::load_preset_oversubscribed(preset, 8, "4:1");
    Router router(topo);
    SiblingContention skipping(topo, router), routing_all(topo, router, SiblingContention::Options{false});
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<DeviceId> gpus(topo.gpus().begin(), topo.gpus().end());
      std::shuffle(gpus.begin(), gpus.end(), rng);
      const size_t size = size_t{2} << (trial % 4);  // 2, 4, 8, 16
      std::vector<std::vector<DeviceId>> groups;
      for (size_t i = 0; i + size <= gpus.size(); i += size) groups.emplace_back(gpus.begin() + i, gpus.begin() + i + size);
      const auto pattern = trial % 2 ? TrafficPattern::kAllPairs : TrafficPattern::kRing;
      const size_t own = static_cast<size_t>(trial) % groups.size();
      SCOPED_TRACE(preset + " trial " + std::to_string(trial));
      EXPECT_DOUBLE_EQ(skipping.slowdown(groups, own, groups[own], pattern),
                       routing_all.slowdown(groups, own, groups[own], pattern));
    }
  }
}

TEST(SiblingContention, RefusesAGroupOutOfRange) {
  Topology topo = test::load_preset("dgx-h100", 2);
  Router router(topo);
  SiblingContention contention(topo, router);
  EXPECT_THROW(contention.slowdown({}, 0, {}, TrafficPattern::kRing), std::invalid_argument);
}

}  // namespace
}  // namespace parallax
