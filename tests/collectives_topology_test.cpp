// Collectives on bundled topologies: NIC-limited hierarchical all-reduce, channels over spare
// NICs, and contention between concurrent collectives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "collectives/collective_simulator.h"
#include "collectives/scaling.h"
#include "network/flow_network.h"
#include "test_support.h"

namespace parallax {
namespace {

TEST(HierarchicalAllReduce, TwoDgxH100NodesAreLimitedByTheNics) {
  // Line rates as the preset says (no efficiency scaling): NVLink 450 GB/s per GPU and
  // direction, NIC 400 Gb/s = 50 GB/s, PCIe Gen5 GPU–NIC 64 GB/s. For S = 4 GiB on 16 ranks:
  //   intra reduce-scatter: 7/8 · S over each GPU's NVLink      = 7/8 · 4 GiB / 450 GB/s = 8.35 ms
  //   inter all-reduce of S/8 between 2 nodes (ring of 2: S/8 out, S/8 in over one NIC)
  //                                                              = 0.5 GiB / 50 GB/s     = 10.74 ms
  //   intra all-gather: as the reduce-scatter                   = 8.35 ms
  // 27.4 ms in all, the NIC phase the largest. Step latencies (Simple: 16 steps of ≤ 14 µs)
  // add < 1%.
  Topology topo = test::load_preset("dgx-h100", 2);
  CollectiveSimulator sim(topo, 16, std::nullopt, LinkEfficiency::none());
  CollectiveOptions o;
  o.algorithm = Algorithm::kHierarchical;
  o.protocol = Protocol::kSimple;
  const double s = 4.0 * (1 << 30);
  const double intra = 7.0 / 8 * s / 450e9, inter = s / 8 / 50e9;
  CollectiveResult r = sim.run(CollectiveOp::kAllReduce, Bytes(s), o);
  EXPECT_NEAR(r.time.seconds(), 2 * intra + inter, 0.015 * (2 * intra + inter));
  // And it is the NIC that sets the inter phase: halving the NIC rate adds one more inter phase.
  Topology slow = topo;
  slow.scale_link_bandwidth(LinkClass::kNetwork, 0.5);
  CollectiveSimulator slow_sim(slow, 16, std::nullopt, LinkEfficiency::none());
  EXPECT_NEAR(slow_sim.run(CollectiveOp::kAllReduce, Bytes(s), o).time.seconds(), 2 * intra + 2 * inter,
              0.015 * (2 * intra + 2 * inter));
}

TEST(DoubleBinaryTree, OddAndEvenNodeCountsAreEquallyFast) {
  // One GPU per node, tree/Simple, 1 GiB, line rates: each node sends and receives through one
  // 50 GB/s NIC, and NCCL's two trees (the second shifted for an odd count, mirrored for an
  // even one; ncclGetDtree) make every node an inner member of at most one, so the busbw is
  // about the same at every count. With the parities swapped the odd counts fell ~35% behind.
  std::vector<double> busbw;
  for (int nodes = 3; nodes <= 10; ++nodes) {
    Topology topo = test::load_preset("dgx-h100", nodes);
    CollectiveSimulator sim(topo, nodes, 1, LinkEfficiency::none());
    CollectiveOptions o;
    o.algorithm = Algorithm::kTree;
    o.protocol = Protocol::kSimple;
    busbw.push_back(sim.run(CollectiveOp::kAllReduce, gib(1), o).busbw_gbs);
  }
  const auto [lo, hi] = std::minmax_element(busbw.begin(), busbw.end());
  for (size_t i = 0; i < busbw.size(); ++i) std::printf("%zu nodes: %.1f GB/s\n", i + 3, busbw[i]);
  EXPECT_GT(*lo, 0.85 * *hi);
}

TEST(NvlsTree, EachLinkCarriesTheHandCount) {
  // 4 DGX H100 nodes, 32 ranks, 1 GiB, line rates. Inside a node every GPU sends its whole
  // buffer into the NVSwitch and its 1/8 share back out to be multicast: (S + S/8) up, each
  // divided by NVLS's 0.85; it gets its share and the whole result down, the same. Across
  // nodes the GPUs of one local index all-reduce their share over the double binary tree, each
  // tree half of it: with 4 nodes tree 0 is 0 ← 2 ← {1, 3} and tree 1 (mirrored) 3 ← 1 ←
  // {2, 0}, so in units of S/16 nodes 0..3 send 2, 4, 4, 2 over the network (each up to its
  // parent and down to each child) and receive the same.
  Topology topo = test::load_preset("dgx-h100", 4);
  CollectiveSimulator sim(topo, 32, std::nullopt, LinkEfficiency::none());
  CollectiveOptions o;
  o.algorithm = Algorithm::kNvlsTree;
  o.keep_graph = true;
  const double s = 1 << 30;
  const CollectiveResult r = sim.run(CollectiveOp::kAllReduce, Bytes(s), o);
  EXPECT_EQ(r.protocol, Protocol::kSimple);
  const Communicator& comm = sim.communicator();
  std::map<uint32_t, double> to_switch, from_switch, sent_across, got_across;
  for (size_t i = 0; i < r.graph.size(); ++i) {
    const Task& t = r.graph.task(static_cast<TaskId>(i));
    const bool src_gpu = topo.device(t.src).kind == DeviceKind::kGpu, dst_gpu = topo.device(t.dst).kind == DeviceKind::kGpu;
    if (src_gpu && !dst_gpu) to_switch[t.src.value] += t.bytes.value();
    if (!src_gpu && dst_gpu) from_switch[t.dst.value] += t.bytes.value();
    if (src_gpu && dst_gpu) {
      EXPECT_NE(topo.device(t.src).node, topo.device(t.dst).node);
      sent_across[t.src.value] += t.bytes.value();
      got_across[t.dst.value] += t.bytes.value();
    }
  }
  const double per_node[] = {2, 4, 4, 2};
  for (int rank = 0; rank < comm.size(); ++rank) {
    const uint32_t g = comm.device(rank).value;
    EXPECT_NEAR(to_switch[g], (s + s / 8) / 0.85, 1.0) << rank;
    EXPECT_NEAR(from_switch[g], (s + s / 8) / 0.85, 1.0) << rank;
    EXPECT_NEAR(sent_across[g], per_node[comm.node_of(rank)] * s / 16, 1.0) << rank;
    EXPECT_NEAR(got_across[g], per_node[comm.node_of(rank)] * s / 16, 1.0) << rank;
  }
}

TEST(Nvls, AllGatherAndReduceScatterMoveTheHandCountThroughTheSwitch) {
  // One DGX H100, 1 GiB in all: the all-gather multicasts each GPU's S/8 through the switch and
  // every GPU gets all of S back; the reduce-scatter sends all of S up from each GPU and its
  // S/8 share comes down reduced. Each byte over NVLS's 0.85.
  Topology topo = test::load_preset("dgx-h100", 1);
  CollectiveSimulator sim(topo, 8, std::nullopt, LinkEfficiency::none());
  const double s = 1 << 30;
  for (CollectiveOp op : {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter}) {
    CollectiveOptions o;
    o.algorithm = Algorithm::kNvls;
    o.keep_graph = true;
    const CollectiveResult r = sim.run(op, Bytes(s), o);
    std::map<uint32_t, double> up, down;
    for (size_t i = 0; i < r.graph.size(); ++i) {
      const Task& t = r.graph.task(static_cast<TaskId>(i));
      if (topo.device(t.src).kind == DeviceKind::kGpu) up[t.src.value] += t.bytes.value();
      if (topo.device(t.dst).kind == DeviceKind::kGpu) down[t.dst.value] += t.bytes.value();
    }
    const bool gather = op == CollectiveOp::kAllGather;
    ASSERT_EQ(up.size(), 8u);
    for (const auto& [gpu, bytes] : up) {
      EXPECT_NEAR(bytes, (gather ? s / 8 : s) / 0.85, 1.0);
      EXPECT_NEAR(down[gpu], (gather ? s : s / 8) / 0.85, 1.0);
    }
  }
  Topology two = test::load_preset("dgx-h100", 2);
  const Router two_router(two);
  EXPECT_TRUE(unsupported_reason(CollectiveOp::kAllGather, Algorithm::kNvls, place_ranks(two, 16), two_router));
}

TEST(CollNetChain, EachGpuChainsTwiceSevenEighthsAndItsShareThroughSharp) {
  // 2 DGX H100 nodes (SHARP fabric), 1 GiB, line rates. Each local index g heads one chain per
  // node carrying S/8: reduced up the other 7 GPUs into g, sent through the SHARP switch and
  // back, broadcast down again. A GPU is head of one chain (one hop down), first of one (one hop
  // up) and in the middle of six (one up, one down): 2·7 hops of S/8 over NVLink; and as head it
  // sends and gets its S/8 through the switch.
  Topology topo = test::load_preset("dgx-h100", 2);
  CollectiveSimulator sim(topo, 16, std::nullopt, LinkEfficiency::none());
  CollectiveOptions o;
  o.algorithm = Algorithm::kCollNetChain;
  o.keep_graph = true;
  const double s = 1 << 30;
  const CollectiveResult r = sim.run(CollectiveOp::kAllReduce, Bytes(s), o);
  std::map<uint32_t, double> over_nvlink, to_switch, from_switch;
  for (size_t i = 0; i < r.graph.size(); ++i) {
    const Task& t = r.graph.task(static_cast<TaskId>(i));
    const bool src_gpu = topo.device(t.src).kind == DeviceKind::kGpu, dst_gpu = topo.device(t.dst).kind == DeviceKind::kGpu;
    if (src_gpu && dst_gpu) over_nvlink[t.src.value] += t.bytes.value();
    if (src_gpu && !dst_gpu) to_switch[t.src.value] += t.bytes.value();
    if (!src_gpu && dst_gpu) from_switch[t.dst.value] += t.bytes.value();
  }
  ASSERT_EQ(over_nvlink.size(), 16u);
  for (const auto& [gpu, bytes] : over_nvlink) {
    EXPECT_NEAR(bytes, 2 * 7 * s / 8, 1.0);
    EXPECT_NEAR(to_switch[gpu], s / 8, 1.0);
    EXPECT_NEAR(from_switch[gpu], s / 8, 1.0);
  }
}

TEST(NvlsTree, AcrossSlowNicsItIsATreeOnOneEighthOfTheData) {
  // With the NICs 20x slower than their line rate the NVLink stages hide behind the tree
  // across nodes, which all-reduces S/8 among the 8 GPUs of each local index: the same time
  // as a tree over one GPU per node on S/8 (each of its GPUs has the same one NIC).
  for (int nodes : {2, 3, 4}) {
    Topology topo = test::load_preset("dgx-h100", nodes);
    topo.scale_link_bandwidth(LinkClass::kNetwork, 0.05);
    CollectiveSimulator all(topo, 8 * nodes, std::nullopt, LinkEfficiency::none());
    CollectiveSimulator one(topo, nodes, 1, LinkEfficiency::none());
    CollectiveOptions o;
    o.protocol = Protocol::kSimple;
    o.algorithm = Algorithm::kNvlsTree;
    const double nvls_tree = all.run(CollectiveOp::kAllReduce, gib(1), o).time.seconds();
    o.algorithm = Algorithm::kTree;
    o.channels = 1;
    const double tree = one.run(CollectiveOp::kAllReduce, Bytes((1 << 30) / 8.0), o).time.seconds();
    std::printf("%d nodes: nvls_tree %.3f ms, tree on S/8 %.3f ms\n", nodes, 1e3 * nvls_tree, 1e3 * tree);
    EXPECT_NEAR(nvls_tree / tree, 1.0, 0.08) << nodes;
  }
}

TEST(NvlsTree, RunsAcrossNodesWithAnNvlsSwitchAndNcclPicksItForLargeSizes) {
  Topology h100 = test::load_preset("dgx-h100", 2);
  const Router router(h100);
  const Communicator two_nodes = place_ranks(h100, 16);
  const Communicator one_node = place_ranks(h100, 8);
  const Communicator one_per_node = place_ranks(h100, 2, 1);
  EXPECT_FALSE(unsupported_reason(CollectiveOp::kAllReduce, Algorithm::kNvlsTree, two_nodes, router));
  EXPECT_TRUE(unsupported_reason(CollectiveOp::kAllReduce, Algorithm::kNvlsTree, one_node, router));
  EXPECT_TRUE(unsupported_reason(CollectiveOp::kAllReduce, Algorithm::kNvlsTree, one_per_node, router));
  EXPECT_TRUE(unsupported_reason(CollectiveOp::kAllGather, Algorithm::kNvlsTree, two_nodes, router));
  EXPECT_TRUE(unsupported_reason(CollectiveOp::kAllReduce, Algorithm::kNvls, two_nodes, router));
  // NCCL's model prefers it at 1 GiB over 16 H100s: 1/8 of the data crosses the NICs.
  CollectiveSimulator sim(h100, 16);
  const CollectiveResult r = sim.run(CollectiveOp::kAllReduce, gib(1), CollectiveOptions{});
  EXPECT_EQ(r.algorithm, Algorithm::kNvlsTree);
  EXPECT_GT(r.busbw_gbs, 400.0);
  // A100's NVSwitch has no NVLS: never.
  Topology a100 = test::load_preset("dgx-a100", 2);
  const Router a100_router(a100);
  EXPECT_TRUE(unsupported_reason(CollectiveOp::kAllReduce, Algorithm::kNvlsTree, place_ranks(a100, 16), a100_router));
  EXPECT_NE(CollectiveSimulator(a100, 16).run(CollectiveOp::kAllReduce, gib(1), CollectiveOptions{}).algorithm,
            Algorithm::kNvlsTree);
}

TEST(Pat, EachRankSendsARingsBytesToLogNPeersInLogNRounds) {
  // PAT as the Bruck exchange: in round d every rank passes min(2^d, n − 2^d) blocks of S/n to
  // the rank 2^d below it. Over all ⌈log2 n⌉ rounds a rank sends (n − 1)/n · S (as in a ring;
  // the wire carries 4/3 of it: PAT's kernels move data at NCCL's 3/4 of the ring rate), to
  // ⌈log2 n⌉ distinct peers; reduce-scatter the same. Odd and even counts.
  for (int n : {5, 8}) {
    Topology topo = test::load_preset("dgx-h100", n);
    CollectiveSimulator sim(topo, n, 1, LinkEfficiency::none());
    for (CollectiveOp op : {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter}) {
      CollectiveOptions o;
      o.algorithm = Algorithm::kPat;
      o.keep_graph = true;
      const double s = 64.0 * (1 << 20);
      const CollectiveResult r = sim.run(op, Bytes(s), o);
      std::map<uint32_t, double> sent;
      std::map<uint32_t, std::set<uint32_t>> peers;
      std::set<uint16_t> rounds;
      for (size_t i = 0; i < r.graph.size(); ++i) {
        const Task& t = r.graph.task(static_cast<TaskId>(i));
        sent[t.src.value] += t.bytes.value();
        peers[t.src.value].insert(t.dst.value);
        rounds.insert(t.phase);
      }
      const int log_n = 3;  // ⌈log2 5⌉ = ⌈log2 8⌉
      EXPECT_EQ(rounds.size(), static_cast<size_t>(log_n));
      ASSERT_EQ(sent.size(), static_cast<size_t>(n));
      for (const auto& [gpu, bytes] : sent) {
        EXPECT_NEAR(bytes, (n - 1.0) / n * s / 0.75, 1.0) << n;
        EXPECT_EQ(peers[gpu].size(), static_cast<size_t>(log_n)) << n;
      }
    }
  }
}

TEST(Pat, IsNcclsLatencyAtSmallSizesAndThreeQuartersOfTheRingAtLargeOnes) {
  // 16 nodes, one GPU each. A 1 KiB all-gather is NCCL's PAT latency, 8 + 2.8·16 µs plus
  // log2(16) rounds of 14/3.5 µs (the flow adds only its wires); at 1 GiB the ranks' NICs are
  // the limit and PAT moves 3/4 of what the ring does.
  Topology topo = test::load_preset("dgx-h100", 16);
  CollectiveSimulator sim(topo, 16, 1);
  CollectiveOptions o;
  o.protocol = Protocol::kSimple;
  o.algorithm = Algorithm::kPat;
  const double small = sim.run(CollectiveOp::kAllGather, Bytes(1024), o).time.seconds();
  EXPECT_NEAR(small * 1e6, 8 + 2.8 * 16 + 4 * 14 / 3.5, 3.0);
  const double pat = sim.run(CollectiveOp::kAllGather, gib(1), o).busbw_gbs;
  o.algorithm = Algorithm::kRing;
  const double ring = sim.run(CollectiveOp::kAllGather, gib(1), o).busbw_gbs;
  EXPECT_NEAR(pat / ring, 0.75, 0.03);
}

TEST(Pat, OnlyAllGatherAndReduceScatterWithOneGpuPerNodeAndNcclPicksItForMidSizes) {
  Topology topo = test::load_preset("dgx-h100", 16);
  const Router router(topo);
  EXPECT_FALSE(unsupported_reason(CollectiveOp::kAllGather, Algorithm::kPat, place_ranks(topo, 16, 1), router));
  EXPECT_TRUE(unsupported_reason(CollectiveOp::kAllReduce, Algorithm::kPat, place_ranks(topo, 16, 1), router));
  EXPECT_TRUE(unsupported_reason(CollectiveOp::kAllGather, Algorithm::kPat, place_ranks(topo, 32, 2), router));
  // The ZeRO gather of a TP-8 layout: one GPU per node. NCCL's model takes PAT where its log
  // rounds beat the ring's n − 1 steps, and the ring where bandwidth rules.
  CollectiveSimulator sim(topo, 16, 1);
  EXPECT_EQ(sim.run(CollectiveOp::kReduceScatter, Bytes(4 << 20), CollectiveOptions{}).algorithm, Algorithm::kPat);
  EXPECT_EQ(sim.run(CollectiveOp::kReduceScatter, gib(4), CollectiveOptions{}).algorithm, Algorithm::kRing);
  CollectiveSimulator two_per_node(topo, 32, 2);
  EXPECT_NE(two_per_node.run(CollectiveOp::kReduceScatter, Bytes(4 << 20), CollectiveOptions{}).algorithm,
            Algorithm::kPat);
}

TEST(Scaling, EachPointIsNcclsChoiceAndEveryAlgorithmThatRuns) {
  // all_reduce 1 GiB on 8 and 16 H100s: NCCL's choice equals that algorithm forced; NVLS runs on
  // one node only (this fabric has no multi-node NVLS); the ring runs everywhere.
  auto dgx = [](int nodes) { return test::load_preset("dgx-h100", nodes); };
  CollectiveOptions o;
  o.model = "analytical";
  const std::vector<ScalingPoint> points = scaling_curve(dgx, {8, 16}, std::nullopt, CollectiveOp::kAllReduce, gib(1), o);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].nodes, 1);
  EXPECT_EQ(points[1].nodes, 2);
  const auto& algos = scaling_algorithms();
  const auto at = [&](Algorithm a) { return static_cast<size_t>(std::find(algos.begin(), algos.end(), a) - algos.begin()); };
  for (const ScalingPoint& p : points) {
    ASSERT_EQ(p.forced.size(), algos.size());
    const auto& same = p.forced[at(p.chosen.algorithm)];
    ASSERT_TRUE(same.has_value()) << p.gpus;
    EXPECT_DOUBLE_EQ(same->busbw_gbs, p.chosen.busbw_gbs) << p.gpus;
    EXPECT_TRUE(p.forced[at(Algorithm::kRing)].has_value()) << p.gpus;
  }
  EXPECT_TRUE(points[0].forced[at(Algorithm::kNvls)].has_value());
  EXPECT_FALSE(points[1].forced[at(Algorithm::kNvls)].has_value());
  EXPECT_THROW(scaling_curve(dgx, {1}, std::nullopt, CollectiveOp::kAllReduce, gib(1), o), std::invalid_argument);
}

TEST(RingChannels, SpareNicsMakeTwoChannelsTwiceAsFast) {
  // 16 ranks on 2 DGX H100: one ring leaves each node through one 50 GB/s NIC; a second channel
  // leaves through another NIC (rails 7,0 vs 0,1), so the NIC-bound busbw doubles. NVLink
  // (450 GB/s per GPU) is far from saturated by either.
  Topology topo = test::load_preset("dgx-h100", 2);
  CollectiveSimulator sim(topo, 16, std::nullopt, LinkEfficiency::none());
  CollectiveOptions o;
  o.algorithm = Algorithm::kRing;
  o.protocol = Protocol::kSimple;
  o.channels = 1;
  double one = sim.run(CollectiveOp::kAllReduce, gib(1), o).busbw_gbs;
  o.channels = 2;
  double two = sim.run(CollectiveOp::kAllReduce, gib(1), o).busbw_gbs;
  EXPECT_NEAR(one, 50, 2.5);  // one NIC: 50 GB/s busbw, less a little step latency
  EXPECT_NEAR(two / one, 2.0, 0.05);
}

TEST(RingChannels, ManyNicsPerNodeStillPassEveryGpusNvlink) {
  // 64 ranks on two GB200 NVL72 racks, 32 per rack, one 50 GB/s NIC each: 32 NICs could carry
  // 32 channels × 40 GB/s = 1.3 TB/s across the racks, but every channel's ring also runs
  // through each GPU's NVLink (900 GB/s per direction), so an all-gather's busbw stays under
  // it, in NCCL's cost model as in the simulated rings. The model once gave 1,245 GB/s.
  Topology topo = test::load_preset("gb200-nvl72", 2);
  CollectiveSimulator sim(topo, 64, 32, LinkEfficiency::none());
  for (const char* model : {"analytical", "flow"}) {
    CollectiveOptions o;
    o.algorithm = Algorithm::kRing;
    o.protocol = Protocol::kSimple;
    o.model = model;
    const double busbw = sim.run(CollectiveOp::kAllGather, gib(2), o).busbw_gbs;
    EXPECT_LE(busbw, 900.0) << model;
    EXPECT_GT(busbw, 500.0) << model;  // and still far above the 50 GB/s of one GPU's NIC
  }
}

TEST(AllReduce, NeverBeatsTheInjectionLowerBound) {
  // 2(n−1)/n · S / B_injection, B the sum of every link out of a GPU: NVLink 450 GB/s plus its
  // PCIe Gen5 link to the NIC, 64 GB/s (a tree that sends through both can beat 450 alone).
  Topology topo = test::load_preset("dgx-h100", 2);
  double injection = 0;
  for (LinkId l : topo.out_links(topo.gpus()[0])) injection += topo.link(l).bandwidth.value();
  ASSERT_NEAR(injection, 514e9, 1e6);
  for (int gpus : {8, 16}) {
    CollectiveSimulator sim(topo, gpus, std::nullopt, LinkEfficiency::none());
    for (auto algo : {Algorithm::kRing, Algorithm::kTree, Algorithm::kHierarchical}) {
      CollectiveOptions o;
      o.algorithm = algo;
      o.protocol = Protocol::kSimple;
      Time t = sim.run(CollectiveOp::kAllReduce, gib(1), o).time;
      EXPECT_GE(t.seconds(), 2.0 * (gpus - 1) / gpus * gib(1).value() / injection) << algorithm_name(algo) << " " << gpus;
    }
  }
}

// Two 2-rank ring all-reduces between 2 PCIe servers run at once. In pcie-8gpu, GPUs 0 and 1
// share a PCIe switch and its one 200 Gb/s NIC; GPU 2 is behind another switch and NIC.
struct TwoAllReduces {
  Topology topo = test::load_preset("pcie-8gpu", 2);
  Router router{topo};
  Time alone(int local) {
    Engine engine;
    FlowNetwork net(engine, topo, router);
    TransferGraph g = graph(local);
    return run_transfer_graph(engine, net, g);
  }
  // Makespan of the first all-reduce while the second runs beside it.
  Time beside(int local, int other) {
    Engine engine;
    FlowNetwork net(engine, topo, router);
    TransferGraph a = graph(local), b = graph(other);
    GraphExecution ea(engine, net, a), eb(engine, net, b);
    ea.start();
    eb.start();
    engine.run();
    return ea.finish_time() - ea.start_time();
  }
  TransferGraph graph(int local) {
    Communicator comm(topo, {topo.gpus_of_node(0)[static_cast<size_t>(local)], topo.gpus_of_node(1)[static_cast<size_t>(local)]});
    CollectiveSpec spec;
    spec.size = gib(1);
    LoweringOptions o;
    return lower_collective(spec, comm, router, o);
  }
};

TEST(CalibratedFlow, AloneItTakesTheFittedTimeAndBesideAnotherItSharesTheNic) {
  // pcie-8gpu, 2 nodes, with a fit that says 2-rank ring all-reduces across the network move
  // 5 GB/s of bus bandwidth after 20 µs of launch and 10 µs per network step: alone, the flow
  // model gives exactly that time (its transfers' bytes scaled to the fitted bandwidth, its start
  // delayed by the fitted latency); two at once through one NIC share it, so each moves its bus
  // bytes at half the fitted rate; on disjoint NICs neither slows.
  Topology topo = test::load_preset("pcie-8gpu", 2);
  topo.info().calibration = {{"launch.simple", 20e-6}, {"alpha.network.simple", 10e-6},
                             {"inverse_bandwidth.network.simple", 1.0 / 5e9}};
  CollectiveSimulator sim(topo, 2, 1);
  CollectiveOptions o;
  o.algorithm = Algorithm::kRing;
  o.protocol = Protocol::kSimple;
  const double s = 1 << 30;
  const double latency = 20e-6 + 2 * 10e-6, bandwidth = s / 5e9;  // bus bytes 2(n-1)/n·S = S
  for (const char* model : {"analytical", "flow"}) {
    o.model = model;
    const CollectiveResult r = sim.run(CollectiveOp::kAllReduce, Bytes(s), o);
    EXPECT_TRUE(r.calibrated) << model;
    EXPECT_NEAR(r.time.seconds(), latency + bandwidth, 1e-6 * bandwidth) << model;
  }
  o.model = "flow";
  const Topology& links = sim.topology();
  auto pair = [&](int local) {
    return Communicator(links, {links.gpus_of_node(0)[static_cast<size_t>(local)], links.gpus_of_node(1)[static_cast<size_t>(local)]});
  };
  auto beside = [&](int other) {
    Engine engine;
    FlowNetwork net(engine, links, sim.router());
    TransferGraph a = sim.lower_on(CollectiveOp::kAllReduce, Bytes(s), o, pair(0), sim.router());
    TransferGraph b = sim.lower_on(CollectiveOp::kAllReduce, Bytes(s), o, pair(other), sim.router());
    GraphExecution ea(engine, net, a), eb(engine, net, b);
    ea.start();
    eb.start();
    engine.run();
    return (ea.finish_time() - ea.start_time()).seconds();
  };
  EXPECT_NEAR(beside(1), latency + 2 * bandwidth, 0.01 * bandwidth);  // GPUs 0 and 1 share a NIC
  EXPECT_NEAR(beside(2), latency + bandwidth, 1e-6 * bandwidth);      // GPU 2 has its own
}

TEST(Broadcast, AChainPaysOneNcclChunkPerHopToFillNotASixteenthOfTheData) {
  // Ring broadcast, one channel, 8 nodes of one GPU each (7 hops through 50 GB/s NICs), 1 GiB,
  // line rates: NCCL pipelines it in 512 KiB chunks, so the last GPU has it all at
  // S/B + 7 · (512 KiB/B + a hop's latency). With at most 16 chunks in the graph the fill was
  // 7/16 of the whole transfer (a 64-GPU broadcast fell from 248 to 137 GB/s).
  Topology topo = test::load_preset("dgx-h100", 8);
  CollectiveSimulator sim(topo, 8, 1, LinkEfficiency::none());
  CollectiveOptions o;
  o.algorithm = Algorithm::kRing;
  o.protocol = Protocol::kSimple;
  o.channels = 1;
  const double s = 1 << 30, b = 50e9, chunk = 512 * 1024;
  const double hop_latency = 14e-6;  // NCCL's NET Simple step; the wire's share is inside it
  const double expected = s / b + 7 * (chunk / b + hop_latency);
  const double t = sim.run(CollectiveOp::kBroadcast, Bytes(s), o).time.seconds();
  EXPECT_NEAR(t, expected, 0.02 * expected);
}

TEST(ConcurrentCollectives, SharingANicSlowsBothOnDisjointLinksNeither) {
  TwoAllReduces t;
  Time alone = t.alone(0);
  // Disjoint switches and NICs: unaffected.
  EXPECT_NEAR(t.beside(0, 2).seconds(), alone.seconds(), 1e-6 * alone.seconds());
  // One NIC for both: max-min halves each one's rate through it, so the all-reduce, NIC-bound
  // alone, takes twice as long.
  EXPECT_NEAR(t.beside(0, 1).seconds(), 2 * alone.seconds(), 0.01 * alone.seconds());
}

TEST(Protocols, LLAndLL128MoveNoFasterThanNcclsCapsForThemInTheSimulationToo) {
  // One DGX H100, ring, 256 MiB: LL is capped at Hopper's llMaxBw of 141 GB/s of bus bandwidth
  // (the links would give 0.5 · 360), LL128 at 12 channels × 36.7 (per channel) below its 0.92 ·
  // 360. The flow model plays the transfers at those caps, within its pipeline's fill of the
  // closed form.
  Topology topo = test::load_preset("dgx-h100", 1);
  CollectiveSimulator sim(topo, 8);
  for (Protocol p : {Protocol::kLL, Protocol::kLL128}) {
    CollectiveOptions o;
    o.algorithm = Algorithm::kRing;
    o.protocol = p;
    o.model = "analytical";
    const double closed = sim.run(CollectiveOp::kAllReduce, Bytes(256 << 20), o).busbw_gbs;
    o.model = "flow";
    const double played = sim.run(CollectiveOp::kAllReduce, Bytes(256 << 20), o).busbw_gbs;
    EXPECT_NEAR(played / closed, 1.0, 0.06) << protocol_name(p);
  }
  EXPECT_NEAR(sim.tuning().protocol_cap_ratio(CollectiveOp::kAllReduce, Algorithm::kRing, Protocol::kLL), 141.0 / 180.0,
              1e-9);
  EXPECT_EQ(sim.tuning().protocol_cap_ratio(CollectiveOp::kAllReduce, Algorithm::kRing, Protocol::kSimple), 1.0);
}

TEST(Selection, TheNicsReportedLatencyIsNcclsLatencyInter) {
  // aws-ofi-nccl reports 75 µs for p5's EFA devices; NCCL adds it to every network step. An 8 B
  // all-reduce on 2 × 8 GPUs is then Tree LL's 6.8 + 2 (7 · 0.6 + 1 · (5.0 + 75)) = 175.2 µs
  // (measured on p5 with NCCL 2.18.5: 175.5). InfiniBand's built-in transport reports 0.
  Topology p5 = test::load_preset("aws-p5", 2);
  CollectiveSimulator sim(p5, 16);
  EXPECT_EQ(sim.tuning().inputs().latency_inter_us, 75.0);
  CollectiveOptions o;
  o.model = "analytical";
  const CollectiveResult r = sim.run(CollectiveOp::kAllReduce, Bytes(8), o);
  EXPECT_EQ(r.algorithm, Algorithm::kTree);
  EXPECT_NEAR(r.time.seconds() * 1e6, 6.8 + 2 * (7 * 0.6 + 5.0 + 75), 0.01);
  EXPECT_EQ(CollectiveSimulator(test::load_preset("dgx-h100", 2), 16).tuning().inputs().latency_inter_us, 0.0);
}

TEST(Selection, OneNodeNvlsTakesTheBwInterNcclsSearchRaisesItTo) {
  // NCCL's search raises a one-node NVLS graph's bwInter one speed at a time while it is below
  // twice bwIntra, up to the top of the SM90 intra array: 40 → 50 → 60 on H100.
  Topology topo = test::load_preset("dgx-h100", 1);
  CollectiveSimulator sim(topo, 8);
  EXPECT_EQ(sim.tuning().inputs().nvls_bw_intra_gbs, 40.0);
  EXPECT_EQ(sim.tuning().inputs().nvls_bw_inter_gbs, 60.0);
}

TEST(Selection, AutoFollowsNcclsCostModelAndForcingWorks) {
  Topology topo = test::load_preset("dgx-h100", 1);
  CollectiveSimulator sim(topo, 8);
  CollectiveOptions o;
  // NCCL's model on 8×H100: LL for tiny messages (lowest latency), NVLS for huge ones.
  EXPECT_EQ(sim.run(CollectiveOp::kAllReduce, Bytes(8), o).protocol, Protocol::kLL);
  EXPECT_EQ(sim.run(CollectiveOp::kAllReduce, gib(1), o).algorithm, Algorithm::kNvls);
  o.algorithm = Algorithm::kRing;
  o.protocol = Protocol::kLL128;
  CollectiveResult forced = sim.run(CollectiveOp::kAllReduce, gib(1), o);
  EXPECT_EQ(forced.algorithm, Algorithm::kRing);
  EXPECT_EQ(forced.protocol, Protocol::kLL128);
  o.algorithm = Algorithm::kCollNetDirect;  // one node: no SHARP path
  EXPECT_THROW(sim.run(CollectiveOp::kAllReduce, gib(1), o), std::invalid_argument);
}

TEST(Analytical, AgreesWithSimulationOnAnIdleRing) {
  // Ring/Simple on one DGX H100: the analytical answer is NCCL's formula (lat + S/(1000·bw)),
  // the simulation plays the ring on the links. For 1 GiB both are bandwidth-bound at
  // 12 channels × 30 GB/s (NCCL) vs 450 · 20.6/25 = 370.8 GB/s (links): within 5%.
  Topology topo = test::load_preset("dgx-h100", 1);
  CollectiveSimulator sim(topo, 8);
  CollectiveOptions o;
  o.algorithm = Algorithm::kRing;
  o.protocol = Protocol::kSimple;
  double simulated = sim.run(CollectiveOp::kAllReduce, gib(1), o).time.seconds();
  o.model = "analytical";
  double analytical = sim.run(CollectiveOp::kAllReduce, gib(1), o).time.seconds();
  EXPECT_NEAR(analytical, simulated, 0.05 * simulated);
}

TEST(DirectAllToAll, AcrossNodesPxnKeepsTheNetworkOnRailsAndAggregatesTheLegs) {
  // 16 ranks on two DGX H100 nodes, 32 MiB per rank (2 MiB to each peer), no channels. With PXN
  // (NCCL >= 2.12, NCCL_P2P_PXN_LEVEL 2) rank a's bytes for rank b of the other node go over
  // NVLink to a's node peer on b's rail, which sends them and its own over its NIC: 16 · 7 NVLink
  // legs, each with a's 2 MiB for that peer and 2 MiB to relay, and 16 network legs, each with
  // the 8 · 2 MiB that a node sends to one rank of the other. No leg crosses rails. A leg stands
  // for the connections of its pairs (NCCL keeps one per pair through the relay): 2 and 8.
  Topology topo = test::load_preset("dgx-h100", 2);
  Router router(topo);
  Communicator comm = place_ranks(topo, 16);
  CollectiveSpec spec;
  spec.op = CollectiveOp::kAllToAll;
  spec.algorithm = Algorithm::kDirect;
  spec.size = mib(32);
  const TransferGraph graph = lower_collective(spec, comm, router, LoweringOptions{});
  int nvlink = 0, network = 0;
  for (TaskId i = 0; i < graph.size(); ++i) {
    const Task& t = graph.task(i);
    const Device& from = topo.device(t.src);
    const Device& to = topo.device(t.dst);
    if (from.node == to.node) {
      ++nvlink;
      EXPECT_DOUBLE_EQ(t.bytes.value(), 2.0 * mib(2).value());
      EXPECT_EQ(t.weight, 2);
    } else {
      ++network;
      EXPECT_EQ(from.local_index, to.local_index);
      EXPECT_DOUBLE_EQ(t.bytes.value(), 8.0 * mib(2).value());
      EXPECT_EQ(t.weight, 8);
    }
  }
  EXPECT_EQ(nvlink, 16 * 7);
  EXPECT_EQ(network, 16);
  // NCCL relays over NVLink only: between PCIe GPUs every rank sends each pair itself.
  Topology pcie = test::load_preset("pcie-8gpu", 2);
  Router pcie_router(pcie);
  EXPECT_EQ(lower_collective(spec, place_ranks(pcie, 16), pcie_router, LoweringOptions{}).size(), 16u * 15u);
}

TEST(DirectAllToAll, AcrossNodesTheAnalyticalFormIsTheSlowerOfNicAndNvlinkAsSimulated) {
  // p ranks, k per node, S per rank, line rates: the NICs carry (p − k)/p · S, the NVLink at the
  // same time (k − 1)/k · S (the node's own share and the relays), so the time is
  // max((p − k)/p · S / 50 GB/s, (k − 1)/k · S / 450 GB/s) — not (p − 1)/p · S at the NIC's rate,
  // which counted the NVLink bytes on the NIC (29% too slow on 4 nodes of 8). The flow model
  // plays the same legs: both agree with the closed form within 1% at 1 GiB.
  for (const auto& [nodes, per_node] : std::vector<std::pair<int, int>>{{4, 8}, {8, 4}, {2, 8}, {16, 1}}) {
    Topology topo = test::load_preset("dgx-h100", nodes);
    const int p = nodes * per_node;
    CollectiveSimulator sim(topo, p, per_node, LinkEfficiency::none());
    CollectiveOptions o;
    o.algorithm = Algorithm::kDirect;
    o.protocol = Protocol::kSimple;
    const double s = gib(1).value();
    const double expected = std::max(static_cast<double>(p - per_node) / p * s / 50e9,
                                     (per_node - 1.0) / per_node * s / 450e9);
    const double simulated = sim.run(CollectiveOp::kAllToAll, gib(1), o).time.seconds();
    o.model = "analytical";
    const double analytical = sim.run(CollectiveOp::kAllToAll, gib(1), o).time.seconds();
    EXPECT_NEAR(simulated, expected, 0.01 * expected) << nodes << " x " << per_node;
    EXPECT_NEAR(analytical, expected, 0.01 * expected) << nodes << " x " << per_node;
  }
}

}  // namespace
}  // namespace parallax
