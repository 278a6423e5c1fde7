// Collective algorithms simulated on idle topologies against their closed forms, lower
// bounds, channel and contention behaviour.
#include <gtest/gtest.h>

#include <map>

#include "collectives/algorithms.h"
#include "collectives/closed_forms.h"
#include "network/flow_network.h"
#include "test_support.h"

namespace parallax {
namespace {

// n GPUs on one switch, 100 GB/s per direction, 1 µs per link. A step's latency is 4 µs, of
// which the two links are 2 µs (the software waits the other 2). A step between two GPUs then
// costs α = 4 µs plus its bytes over 100 GB/s.
constexpr double kLinkGBs = 100;
const Time kLinkLatency = Time::us(1);
const Time kStepLatency = Time::us(4);
const Time kAlpha = kStepLatency;

struct Star {
  explicit Star(int n) : topo(test::star(n, gigabytes_per_second(kLinkGBs), kLinkLatency)), router(topo) {}
  Time run(const CollectiveSpec& spec, int gpus, LoweringOptions opt = default_options()) {
    Communicator comm = place_ranks(topo, gpus);
    TransferGraph graph = lower_collective(spec, comm, router, opt);
    Engine engine;
    FlowNetwork net(engine, topo, router);
    return run_transfer_graph(engine, net, graph);
  }
  static LoweringOptions default_options() {
    LoweringOptions o;
    o.step_latency_intra = o.step_latency_inter = kStepLatency;
    o.granularity = LoweringOptions::Granularity::kSteps;
    return o;
  }
  Topology topo;
  Router router;
};

CollectiveSpec spec(CollectiveOp op, Algorithm algo, Bytes size) {
  CollectiveSpec s;
  s.op = op;
  s.algorithm = algo;
  s.size = size;
  return s;
}

void expect_within(Time simulated, Time expected, double tolerance) {
  EXPECT_NEAR(simulated.seconds(), expected.seconds(), expected.seconds() * tolerance)
      << "simulated " << simulated.seconds() * 1e6 << " us, expected " << expected.seconds() * 1e6 << " us";
}

TEST(RingOnIdleStar, AllReduceMatchesClosedFormForEveryGranularity) {
  for (int n : {2, 3, 8, 16}) {
    Star star(n);
    for (auto g : {LoweringOptions::Granularity::kSteps, LoweringOptions::Granularity::kPipelined}) {
      LoweringOptions o = Star::default_options();
      o.granularity = g;
      Bytes s = mib(64);
      // 2(n−1)(α + S/(nB)).
      expect_within(star.run(spec(CollectiveOp::kAllReduce, Algorithm::kRing, s), n, o),
                    closed_form::ring_all_reduce(n, s, kAlpha, gigabytes_per_second(kLinkGBs)), 0.01);
    }
  }
}

TEST(RingOnIdleStar, ReduceScatterAndAllGatherMatchClosedForm) {
  Star star(8);
  Bytes total = mib(256);
  // (n−1)(α + S/(nB)) with S the total buffer.
  Time expected = closed_form::ring_gather_scatter(8, total, kAlpha, gigabytes_per_second(kLinkGBs));
  expect_within(star.run(spec(CollectiveOp::kReduceScatter, Algorithm::kRing, total), 8), expected, 0.01);
  expect_within(star.run(spec(CollectiveOp::kAllGather, Algorithm::kRing, total), 8), expected, 0.01);
}

TEST(RingOnIdleStar, ChannelsOnOneLinkDoNotHelp) {
  // Every channel's ring crosses the same GPU–switch links, so C channels share them: each
  // moves S/C at B/C, the same time as one channel.
  Star star(8);
  LoweringOptions one = Star::default_options();
  LoweringOptions four = one;
  four.channels = 4;
  Time t1 = star.run(spec(CollectiveOp::kAllReduce, Algorithm::kRing, mib(64)), 8, one);
  Time t4 = star.run(spec(CollectiveOp::kAllReduce, Algorithm::kRing, mib(64)), 8, four);
  expect_within(t4, t1, 0.01);
}

TEST(RhdOnIdleStar, AllReduceMatchesRabenseifner) {
  for (int n : {2, 4, 8, 16, 6, 12}) {
    Star star(n);
    Bytes s = mib(32);
    // Power of two: 2 lg n α + 2(n−1)/n S/B; otherwise two extra full-vector steps (fold, unfold).
    expect_within(star.run(spec(CollectiveOp::kAllReduce, Algorithm::kRecursiveHalvingDoubling, s), n),
                  closed_form::rhd_all_reduce(n, s, kAlpha, gigabytes_per_second(kLinkGBs)), 0.01);
  }
}

TEST(RhdOnIdleStar, ReduceScatterAndAllGatherMatchRecursiveForms) {
  Star star(16);
  Bytes total = mib(64);
  // lg n α + (n−1)/n S/B.
  Time expected = closed_form::recursive_gather_scatter(16, total, kAlpha, gigabytes_per_second(kLinkGBs));
  expect_within(star.run(spec(CollectiveOp::kReduceScatter, Algorithm::kRecursiveHalvingDoubling, total), 16), expected, 0.01);
  expect_within(star.run(spec(CollectiveOp::kAllGather, Algorithm::kRecursiveDoubling, total), 16), expected, 0.01);
}

TEST(RecursiveDoublingOnIdleStar, AllReduceExchangesWholeVectorLgNTimes) {
  Star star(8);
  Bytes s = mib(16);
  // lg n (α + S/B).
  expect_within(star.run(spec(CollectiveOp::kAllReduce, Algorithm::kRecursiveDoubling, s), 8),
                closed_form::recursive_doubling_all_reduce(8, s, kAlpha, gigabytes_per_second(kLinkGBs)), 0.01);
}

TEST(AllToAllOnIdleStar, PairwiseAndDirectMatchClosedForms) {
  Star star(8);
  Bytes s = mib(64);
  // Pairwise: (n−1)(α + S/(nB)); direct: α + (n−1)/n S/B (all n−1 flows share the uplink).
  expect_within(star.run(spec(CollectiveOp::kAllToAll, Algorithm::kPairwise, s), 8),
                closed_form::pairwise_all_to_all(8, s, kAlpha, gigabytes_per_second(kLinkGBs)), 0.01);
  expect_within(star.run(spec(CollectiveOp::kAllToAll, Algorithm::kDirect, s), 8),
                closed_form::direct_all_to_all(8, s, kAlpha, gigabytes_per_second(kLinkGBs)), 0.01);
}

TEST(ChainOnIdleStar, BroadcastIsPipelined) {
  Star star(8);
  LoweringOptions o = Star::default_options();
  o.pipeline_chunk = mib(1);
  o.max_pipeline_chunks = 8;
  Bytes s = mib(8);
  // 8 chunks of 1 MiB over a chain of 8; the first chunk waits the 2 µs software part of every
  // hop, every chunk pays the 2 µs of wire: 7·2 µs + (8+8−2)(2 µs + 1 MiB / 100 GB/s).
  expect_within(star.run(spec(CollectiveOp::kBroadcast, Algorithm::kRing, s), 8, o),
                closed_form::chain(8, s, 8, kStepLatency - kLinkLatency * 2, kLinkLatency * 2,
                                   gigabytes_per_second(kLinkGBs)), 0.01);
}

TEST(AllReduceLowerBound, NoAlgorithmBeatsIt) {
  Star star(8);
  Bytes s = mib(128);
  // Each rank must send and receive 2(n−1)/n S through its one 100 GB/s port.
  Time bound = closed_form::all_reduce_lower_bound(8, s, gigabytes_per_second(kLinkGBs));
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRecursiveHalvingDoubling,
                      Algorithm::kRecursiveDoubling}) {
    EXPECT_GE(star.run(spec(CollectiveOp::kAllReduce, a, s), 8), bound) << algorithm_name(a);
  }
}

TEST(Lowering, RefusesWhatAnAlgorithmCannotDo) {
  Star star(6);
  Communicator comm = place_ranks(star.topo, 6);
  EXPECT_TRUE(unsupported_reason(CollectiveOp::kAllGather, Algorithm::kRecursiveDoubling, comm, star.router));  // 6 is not 2^k
  EXPECT_TRUE(unsupported_reason(CollectiveOp::kAllGather, Algorithm::kTree, comm, star.router));
  EXPECT_TRUE(unsupported_reason(CollectiveOp::kAllReduce, Algorithm::kNvls, comm, star.router));  // the toy switch has no NVLS
  EXPECT_FALSE(unsupported_reason(CollectiveOp::kAllReduce, Algorithm::kRing, comm, star.router));
  EXPECT_THROW(lower_collective(spec(CollectiveOp::kAllToAll, Algorithm::kRing, mib(1)), comm, star.router,
                                Star::default_options()),
               std::invalid_argument);
}

TEST(Placement, FillsNodesInOrderAndHonoursPerNodeCap) {
  Topology topo = test::load_preset("dgx-h100", 4);
  Communicator all = place_ranks(topo, 16);
  EXPECT_EQ(all.node_count(), 2);
  Communicator spread = place_ranks(topo, 8, 2);  // 2 per node over 4 nodes
  EXPECT_EQ(spread.node_count(), 4);
  EXPECT_TRUE(spread.uniform());
  EXPECT_THROW(place_ranks(topo, 33), std::invalid_argument);
}

TEST(RingOrder, LeavesAndEntersNodesOnTheSameRail) {
  Topology topo = test::load_preset("dgx-h100", 4);
  Communicator comm = place_ranks(topo, 32);
  for (int c = 0; c < 8; ++c) {
    std::vector<int> order = ring_order(comm, c);
    ASSERT_EQ(order.size(), 32u);
    for (size_t i = 0; i < order.size(); ++i) {
      int a = order[i], b = order[(i + 1) % order.size()];
      if (comm.node_of(a) != comm.node_of(b)) {
        // An even node count closes the ring on the same rail too.
        EXPECT_EQ(topo.device(comm.device(a)).local_index, topo.device(comm.device(b)).local_index) << "channel " << c;
      }
    }
  }
}

TEST(RingOrder, ChannelsTakeTurnsOnNicsThatGpusShare) {
  // HGX A100 with 4 NICs, GPUs 2k and 2k+1 on NIC k. A channel rotated by one GPU would leave
  // and enter node 0 through GPUs c−1 and c, so channels 1 and 3 would use NICs 0 and 1 only;
  // rotated by the two GPUs of a NIC, channel c leaves through GPU 2c−1 (NIC c−1) and comes back
  // through GPU 2c (NIC c): over four channels each NIC carries two crossings.
  Topology topo = test::load_preset("hgx-a100-4hdr", 2);
  Communicator comm = place_ranks(topo, 16);
  std::map<std::string, int> crossings;
  for (int c = 0; c < 4; ++c) {
    const std::vector<int> order = ring_order(comm, c);
    for (size_t i = 0; i < order.size(); ++i) {
      const int a = order[i], b = order[(i + 1) % order.size()];
      if (comm.node_of(a) == comm.node_of(b)) continue;
      const int local = comm.node_of(a) == 0 ? a : b;  // node 0's end of the crossing
      for (LinkId l : topo.out_links(comm.device(local))) {
        if (topo.device(topo.link(l).to).kind == DeviceKind::kNic) ++crossings[topo.device(topo.link(l).to).name];
      }
    }
  }
  EXPECT_EQ(crossings, (std::map<std::string, int>{{"n0.nic0", 2}, {"n0.nic1", 2}, {"n0.nic2", 2}, {"n0.nic3", 2}}));
}

}  // namespace
}  // namespace parallax
