// The training co-simulation (training/cosimulation.h and stream_graph.h's transfer tasks):
// tasks that carry flows share the links they cross, as a hand computation says; with no
// contention the co-simulated iteration equals the analytical one; where two pipeline stages'
// gradient reductions leave through one NIC, only the co-simulation sees them collide. And
// --explain's suggestions (training/explain.h): re-simulated, and reproduced by their flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>
#include <memory>

#include "collectives/collective_simulator.h"
#include "model/model_loader.h"
#include "network/network_model.h"
#include "topology/router.h"
#include "topology/topology_loader.h"
#include "training/cosimulation.h"
#include "training/explain.h"
#include "training/workload_loader.h"
#include "training/iteration.h"
#include "training/iteration_report.h"
#include "training/stream_graph.h"
#include "training_test_support.h"

namespace parallax {
namespace {

// A transfer of `bytes` from GPU a to GPU b.
std::shared_ptr<const TransferGraph> one_flow(const Topology& topo, int a, int b, Bytes bytes) {
  auto g = std::make_shared<TransferGraph>();
  g->add_transfer(topo.gpus()[static_cast<size_t>(a)], topo.gpus()[static_cast<size_t>(b)], bytes, Time::zero(), {});
  return g;
}

TEST(CoSimulatedStreams, TransferTasksShareTheLinksTheyCross) {
  // A 4-GPU star of 100 GB/s links, 1 µs each. 1 GB from GPU 0 to 1 alone: 2 µs of latency
  // (two hops) + 10 ms. Two such flows from GPU 0 (to 1 and to 2) share GPU 0's uplink: each
  // gets 50 GB/s, both end at 20 ms + 2 µs. A flow from 2 to 3 meanwhile shares nothing.
  const Topology topo = test::toy_cluster(4);
  const Router router(topo);
  const Bytes gb(1e9);
  StreamGraph g;
  const StreamId a = g.add_stream(0, "dp"), b = g.add_stream(1, "pp"), c = g.add_stream(2, "dp");
  const WorkId x = g.add(a, Time::ms(1), WorkKind::kDpComm, {});
  const WorkId y = g.add(b, Time::ms(1), WorkKind::kPpComm, {});
  const WorkId z = g.add(c, Time::ms(1), WorkKind::kDpComm, {});
  g.set_transfers(x, one_flow(topo, 0, 1, gb));
  g.set_transfers(y, one_flow(topo, 0, 2, gb));
  g.set_transfers(z, one_flow(topo, 2, 3, gb));
  Engine engine;
  const std::unique_ptr<NetworkModel> network = make_network_model("flow", engine, topo, router);
  const std::vector<WorkTiming> t = run_stream_graph(engine, g, network.get());
  EXPECT_NEAR(t[x].finish.seconds(), 0.020 + 2e-6, 1e-9);
  EXPECT_NEAR(t[y].finish.seconds(), 0.020 + 2e-6, 1e-9);
  EXPECT_NEAR(t[z].finish.seconds(), 0.010 + 2e-6, 1e-9);
  // Without a network the same tasks take their durations.
  Engine plain;
  const std::vector<WorkTiming> d = run_stream_graph(plain, g);
  EXPECT_EQ(d[x].finish, Time::ms(1));
}

TEST(CoSimulatedStreams, ProgressCountsFinishedTasksUpToAllOfThem) {
  // 1,000 tasks on one stream: a report every 1,000 / 200 = 5 finished tasks, the last at 1,000.
  StreamGraph g;
  const StreamId s = g.add_stream(0, "compute");
  for (int i = 0; i < 1000; ++i) g.add(s, Time::us(1), WorkKind::kCompute, {});
  std::vector<std::pair<size_t, size_t>> reports;
  Engine engine;
  run_stream_graph(engine, g, nullptr, nullptr, [&](size_t done, size_t all) { reports.emplace_back(done, all); });
  ASSERT_EQ(reports.size(), 200u);
  for (size_t i = 0; i < reports.size(); ++i) EXPECT_EQ(reports[i], std::make_pair(5 * (i + 1), size_t{1000}));
}

TEST(CoSimulation, PhasesChainAndCallsOfAPhaseRunTogether) {
  // Two one-way passes at once (0→1 and 1→0 of 1 GB each, opposite directions: no sharing),
  // then one send 0→1: 10 ms + 10 ms plus the latencies of the lowered sends.
  const Topology topo = test::toy_cluster(2);
  CollectiveSimulatorCache simulators(topo, LinkEfficiency::none());
  CoSimulation cosim(simulators);
  const Bytes gb(1e9);
  const CallPhases phases{{CollectiveCall{CollectiveOp::kSendRecv, gb, {0, 1}, true},
                           CollectiveCall{CollectiveOp::kSendRecv, gb, {1, 0}, true}},
                          {CollectiveCall{CollectiveOp::kSendRecv, gb, {0, 1}, true}}};
  const std::shared_ptr<const TransferGraph> g = cosim.transfers(phases);
  EXPECT_EQ(cosim.transfers(phases), g);  // cached
  Engine engine;
  const std::unique_ptr<NetworkModel> network = make_network_model("flow", engine, cosim.topology(), cosim.router());
  const Time t = run_transfer_graph(engine, *network, *g);
  EXPECT_GT(t.seconds(), 0.020);
  EXPECT_LT(t.seconds(), 0.0201);
  // nccl-tests' send/recv of two ranks sends both ways: 2 transfers, one-way 1.
  EXPECT_EQ(cosim.transfers({{CollectiveCall{CollectiveOp::kSendRecv, gb, {0, 1}}}})->size(), 2u);
  EXPECT_EQ(cosim.transfers({{CollectiveCall{CollectiveOp::kSendRecv, gb, {0, 1}, true}}})->size(), 1u);
}

TEST(CoSimulation, APhaseWaitsOnOneJoinOfTheTransfersBeforeIt) {
  // Two all-to-alls of 8 GPUs in turn. The second one's first transfers wait on one zero-length
  // join of the first one's transfers, not each on all of them (an edge per pair: quadratic in
  // the ranks), and on an idle network the two take twice the time of one.
  const Topology topo = test::toy_cluster(8);
  CollectiveSimulatorCache simulators(topo, LinkEfficiency::none());
  CoSimulation cosim(simulators);
  const CollectiveCall a2a{CollectiveOp::kAllToAll, Bytes(64e6), {0, 1, 2, 3, 4, 5, 6, 7}};
  const std::shared_ptr<const TransferGraph> one = cosim.transfers({{a2a}});
  const std::shared_ptr<const TransferGraph> two = cosim.transfers({{a2a}, {a2a}});
  ASSERT_GT(one->size(), 8u);
  ASSERT_EQ(two->size(), 2 * one->size() + 1);
  auto edges = [](const TransferGraph& g, TaskId from, TaskId to) {
    size_t n = 0;
    for (TaskId i = from; i < to; ++i) n += g.dependency_count(i);
    return n;
  };
  const auto n = static_cast<TaskId>(one->size());
  size_t roots = 0;
  for (TaskId i = 0; i < n; ++i) roots += one->dependency_count(i) == 0 ? 1 : 0;
  EXPECT_EQ(edges(*two, n, n + 1), one->size());  // the join: on every transfer of the first
  EXPECT_EQ(edges(*two, n + 1, 2 * n + 1), edges(*one, 0, n) + roots);
  auto played = [&](const TransferGraph& g) {
    Engine engine;
    const std::unique_ptr<NetworkModel> network =
        make_network_model("flow", engine, cosim.topology(), cosim.router());
    return run_transfer_graph(engine, *network, g);
  };
  EXPECT_NEAR(played(*two).seconds(), 2 * played(*one).seconds(), 1e-12);
}

TEST(CoSimulation, ACollectiveInsideANodeTakesANvlinkShareForEachOfItsChannels) {
  // Two GB200 NVL72 racks. A ring over GPUs 0, 1 (rack 0) and 72, 73 (rack 1) passes GPU 0's
  // NVLink port on its edge 0 → 1, one flow per NCCL channel; a TP all-reduce of GPUs 0 and 2
  // crosses the same port. Inside a rack the all-reduce is one transfer per ring edge that
  // stands for its channels, so while both run it gets w / (w + c) of the port (w its channels,
  // c the ring's), not the 1 / (c + 1) of one flow among c: its time grows by (w + c) / w.
  const Topology topo = test::load_preset("gb200-nvl72", 2);
  CollectiveSimulatorCache simulators(topo, std::nullopt);
  CoSimulation cosim(simulators);
  const CollectiveCall tp{CollectiveOp::kAllReduce, Bytes(256.0 * (1 << 20)), {0, 2}};
  const CollectiveCall ring{CollectiveOp::kAllGather, Bytes(16.0 * (1 << 30)), {0, 1, 72, 73}};
  const std::shared_ptr<const TransferGraph> tp_graph = cosim.transfers({{tp}});
  CollectiveOptions analytical;
  analytical.model = "analytical";
  const CollectiveResult nccl = simulators.for_group(tp.group).run(tp.op, tp.size, analytical);
  const int w = std::min(nccl.channels, 255);
  ASSERT_GT(w, 1);
  size_t transfers = 0;
  for (TaskId i = 0; i < tp_graph->size(); ++i) {
    const Task& t = tp_graph->task(i);
    if (t.kind != Task::Kind::kTransfer) continue;
    ++transfers;
    EXPECT_EQ(t.weight, w) << "transfer " << i;
  }
  EXPECT_EQ(transfers, 2u);  // one per edge of the two-rank ring, not one per channel
  const std::shared_ptr<const TransferGraph> ring_graph = cosim.transfers({{ring}});
  std::set<uint16_t> ring_channels;
  for (TaskId i = 0; i < ring_graph->size(); ++i) {
    const Task& t = ring_graph->task(i);
    if (t.kind == Task::Kind::kTransfer && t.src == topo.gpus()[0] && t.dst == topo.gpus()[1]) {
      ring_channels.insert(t.channel);
    }
    if (t.kind == Task::Kind::kTransfer) {
      EXPECT_EQ(t.weight, 1);  // across racks: a flow per channel
    }
  }
  const auto c = static_cast<double>(ring_channels.size());
  ASSERT_GE(c, 1.0);
  auto tp_time = [&](bool with_ring) {
    StreamGraph g;
    const WorkId x = g.add(g.add_stream(0, "tp"), Time::zero(), WorkKind::kTpComm, {});
    g.set_transfers(x, tp_graph);
    if (with_ring) g.set_transfers(g.add(g.add_stream(1, "dp"), Time::zero(), WorkKind::kDpComm, {}), ring_graph);
    Engine engine;
    const std::unique_ptr<NetworkModel> network = make_network_model("flow", engine, cosim.topology(), cosim.router());
    return run_stream_graph(engine, g, network.get())[x].finish.seconds();
  };
  const double alone = tp_time(false), shared = tp_time(true);
  std::printf("all-reduce of GPUs 0, 2: %d channels, %.1f us alone; beside a ring of %.0f channels %.1f us (x%.3f, "
              "(w + c) / w = %.3f)\n",
              w, alone * 1e6, c, shared * 1e6, shared / alone, (w + c) / w);
  EXPECT_NEAR(shared / alone, (w + c) / w, 0.05 * (w + c) / w);
}

ParallelLayout llama_layout(int dp, int tp, int pp, int64_t global_batch) {
  ParallelLayout l;
  l.dp = dp;
  l.tp = tp;
  l.pp = pp;
  l.micro_batch = 1;
  l.global_batch = global_batch;
  l.sequence_length = 4096;
  l.sequence_parallel = tp > 1;
  l.zero_stage = ZeroStage::kStage1;
  return l;
}

TEST(CoSimulatedIteration, InPacketsTakesTheFlowModelsTimeWhereNothingCongests) {
  // Llama 3.2 1B at TP 8 on one DGX H100 (sequence 512, two micro-batches): every collective
  // is NVSwitch traffic of its own, so playing its flows as packets (cut-through, buffers that
  // never fill) ends where the fluid model does, to within 1%; the report names the model.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3.2-1b");
  const Topology topo = test::load_preset("dgx-h100", 1);
  ParallelLayout l = llama_layout(1, 8, 1, 2);
  l.sequence_length = 512;
  IterationOptions flow;
  flow.cosimulate = true;
  IterationOptions packets = flow;
  packets.cosimulation_network = "packet";
  const IterationResult f = simulate_iteration(model, l, topo, flow);
  const IterationResult p = simulate_iteration(model, l, topo, packets);
  EXPECT_EQ(p.network, "packet (co-simulated)");
  EXPECT_NEAR(p.iteration_time.seconds() / f.iteration_time.seconds(), 1.0, 0.01);
}

TEST(CoSimulatedIteration, EqualsTheAnalyticalOneWithoutContention) {
  // Llama-3 8B, TP 8 inside each of 2 DGX H100 nodes, DP 2 across them: every collective has
  // its links to itself, so the co-simulation may differ from the closed forms only by how
  // each collective is modelled (within 2%).
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  const Topology topo = test::load_preset("dgx-h100", 2);
  const ParallelLayout l = llama_layout(2, 8, 1, 16);
  IterationOptions analytical;
  IterationOptions flow;
  flow.cosimulate = true;
  const IterationResult a = simulate_iteration(model, l, topo, analytical);
  const IterationResult f = simulate_iteration(model, l, topo, flow);
  EXPECT_EQ(a.network, "analytical");
  EXPECT_EQ(f.network, "flow (co-simulated)");
  EXPECT_NEAR(f.iteration_time.seconds() / a.iteration_time.seconds(), 1.0, 0.02);
  test::expect_parts_add_up(f);
  // The busiest link of each class it used: NVLink (TP), the NIC's PCIe attachment and the
  // network (DP), each carrying at most what it could in the iteration.
  EXPECT_TRUE(a.busiest_links.empty());
  ASSERT_EQ(f.busiest_links.size(), 3u);
  for (const LinkLoad& link : f.busiest_links) {
    EXPECT_GT(link.utilisation, 0.0) << link.from;
    EXPECT_LE(link.utilisation, 1.0) << link.from;
  }
  EXPECT_GE(f.busiest_links[0].utilisation, f.busiest_links[1].utilisation);
  // With a timeline kept, each link's load over time carries exactly its bytes: the steps'
  // utilisation × duration adds up to its utilisation over the whole iteration.
  IterationOptions traced = flow;
  traced.keep_timeline = true;
  const IterationResult g = simulate_iteration(model, l, topo, traced);
  ASSERT_EQ(g.busiest_links.size(), 3u);
  for (const LinkLoad& link : g.busiest_links) {
    ASSERT_FALSE(link.timeline.empty()) << link.from;
    double area = 0;
    for (size_t i = 0; i + 1 < link.timeline.size(); ++i) {
      area += link.timeline[i].second * (link.timeline[i + 1].first - link.timeline[i].first).seconds();
    }
    EXPECT_NEAR(area, link.utilisation * g.iteration_time.seconds(), 1e-6 * area) << link.from;
    EXPECT_DOUBLE_EQ(link.timeline.back().second, 0.0) << link.from;
  }
  EXPECT_EQ(g.iteration_time, f.iteration_time);
}

TEST(CoSimulatedIteration, TwoStagesThroughOneNicCollide) {
  // Each node of this cluster has 2 GPUs and ONE 400 Gb/s NIC. PP 2 with the stages on the
  // two GPUs of a node (rank order tp-cp-ep-pp-dp), DP 4 across the 4 nodes: both stages'
  // gradient all-reduces leave through the same NIC. Analytically each is timed alone: R each,
  // stage 1's starting Δ before stage 0's (its backward ends first), the iteration ending at
  // t₁ + Δ + R. Co-simulated the NIC carries both, 2R of NIC-bound work from t₁ on, so the
  // iteration ends at t₁ + 2R: longer by R − Δ, between 0 and R (Δ is one backward pass, a
  // fraction of R here).
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  const Topology topo = load_topology(test::source_path("tests/data/topologies/two-gpus-one-nic.json"),
                                      TopologyLoadOptions{4});
  ParallelLayout l = llama_layout(4, 1, 2, 8);
  l.sequence_length = 1024;
  l.zero_stage = ZeroStage::kStage0;
  l.grad_reduce_overlap = false;  // every bucket after the last backward: the reductions overlap
  l.rank_order = "tp-cp-ep-pp-dp";
  IterationOptions analytical;
  IterationOptions flow;
  flow.cosimulate = true;
  const IterationResult a = simulate_iteration(model, l, topo, analytical);
  const IterationResult f = simulate_iteration(model, l, topo, flow);
  const auto dp = static_cast<size_t>(WorkKind::kDpComm);
  std::printf("analytical %.4f s (DP exposed %.4f, %.4f), co-simulated %.4f s (%.4f, %.4f)\n", a.iteration_time.seconds(),
              a.stages[0].time.exposed[dp].seconds(), a.stages[1].time.exposed[dp].seconds(), f.iteration_time.seconds(),
              f.stages[0].time.exposed[dp].seconds(), f.stages[1].time.exposed[dp].seconds());
  const double r = a.stages[0].time.exposed[dp].seconds();
  const double longer = f.iteration_time.seconds() - a.iteration_time.seconds();
  EXPECT_GT(longer, 0.5 * r);
  EXPECT_LE(longer, r * 1.001);
  EXPECT_GT(f.stages[1].time.exposed[dp].seconds(), a.stages[1].time.exposed[dp].seconds() * 1.5);
}

TEST(CoSimulatedTrace, TheSharedNicShowsBothStagesOnItWithArrowsFromTheirTasks) {
  // The case above, traced: the NIC both stages leave through is the busiest network-side
  // link; its uses are the DP tasks of both stages, overlapping in time, carrying exactly the
  // bytes it carried; the trace draws one arrow per use, from the task's own slice to the
  // link's slice.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  TrainingWorkload job;
  job.model = model;
  job.topology = load_topology(test::source_path("tests/data/topologies/two-gpus-one-nic.json"), TopologyLoadOptions{4});
  job.layout = llama_layout(4, 1, 2, 8);
  job.layout.sequence_length = 1024;
  job.layout.grad_reduce_overlap = false;
  job.layout.rank_order = "tp-cp-ep-pp-dp";
  IterationOptions flow;
  flow.cosimulate = true;
  flow.keep_timeline = true;
  const IterationResult r = simulate_iteration(job.model, job.layout, job.topology, flow);
  std::map<size_t, const TimelineSpan*> span_of;
  for (const TimelineSpan& s : r.timeline) span_of[s.task] = &s;
  const LinkLoad* nic = nullptr;
  for (const LinkLoad& l : r.busiest_links) {
    if (l.link_class == LinkClass::kNetwork) nic = &l;
  }
  ASSERT_NE(nic, nullptr);
  std::set<int> stages;
  Bytes carried;
  size_t uses = 0;
  for (const auto& l : r.busiest_links) uses += l.uses.size();
  for (const LinkUse& use : nic->uses) {
    ASSERT_TRUE(span_of.count(use.task));
    const TimelineSpan& span = *span_of[use.task];
    EXPECT_EQ(span.kind, WorkKind::kDpComm);
    EXPECT_GE(use.start, span.start);
    EXPECT_LE(use.finish, span.finish);
    stages.insert(span.rank);
    carried += use.bytes;
  }
  EXPECT_EQ(stages, (std::set<int>{0, 1}));
  EXPECT_NEAR(carried.value(), nic->bytes.value(), 1e-9 * nic->bytes.value());
  bool overlap = false;
  for (const LinkUse& a : nic->uses) {
    for (const LinkUse& b : nic->uses) {
      overlap |= span_of[a.task]->rank != span_of[b.task]->rank && a.start < b.finish && b.start < a.finish;
    }
  }
  EXPECT_TRUE(overlap);

  const nlohmann::json trace = nlohmann::json::parse(iteration_trace_json(job, r));
  std::map<int, nlohmann::json> starts, finishes;
  std::set<std::tuple<int, int, double>> slice_starts;  // (pid, tid, ts)
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") slice_starts.emplace(e["pid"].get<int>(), e["tid"].get<int>(), e["ts"].get<double>());
    if (e["ph"] == "s") starts[e["id"].get<int>()] = e;
    if (e["ph"] == "f") finishes[e["id"].get<int>()] = e;
  }
  EXPECT_EQ(starts.size(), uses);
  EXPECT_EQ(finishes.size(), uses);
  const int links_pid = static_cast<int>(r.stages.size());
  for (const auto& [id, s] : starts) {
    EXPECT_TRUE(slice_starts.count({s["pid"].get<int>(), s["tid"].get<int>(), s["ts"].get<double>()})) << id;
    const nlohmann::json& f = finishes[id];
    EXPECT_EQ(f["pid"].get<int>(), links_pid);
    EXPECT_TRUE(slice_starts.count({links_pid, f["tid"].get<int>(), f["ts"].get<double>()})) << id;
  }
}

TEST(CoSimulatedIteration, FoldedSiblingsMatchPlayingEveryReplica) {
  // 32 GPUs (4 DGX H100), Llama-3 8B: the folded co-simulation (one replica's flows, the
  // siblings as slowdowns) against playing every replica's communication, on layouts whose
  // groups sit alike (non-blocking rail-optimized fabric): the same iteration within 1%.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  const Topology topo = test::load_preset("dgx-h100", 4);
  for (const auto& [tp, pp] : {std::pair{8, 1}, std::pair{4, 2}, std::pair{2, 4}}) {
    ParallelLayout l = llama_layout(32 / (tp * pp), tp, pp, 32);
    l.sequence_length = 2048;
    IterationOptions folded;
    folded.cosimulate = true;
    IterationOptions every = folded;
    every.cosimulate_every_replica = true;
    const IterationResult a = simulate_iteration(model, l, topo, folded);
    const IterationResult b = simulate_iteration(model, l, topo, every);
    std::printf("tp %d pp %d: folded %.4f s, every replica %.4f s\n", tp, pp, a.iteration_time.seconds(),
                b.iteration_time.seconds());
    EXPECT_NEAR(b.iteration_time.seconds() / a.iteration_time.seconds(), 1.0, 0.01) << "tp " << tp << " pp " << pp;
  }
}

TEST(CoSimulatedIteration, DataParallelRingsAcrossA4To1SpineTakeTwiceAsLong) {
  // 4 DGX H100 nodes, 2 per leaf, a 4:1 spine; TP 8 in a node, DP 4 across nodes, the
  // reductions after the backward (exposed). Each rail's DP ring 0→1→2→3→0 crosses the spine
  // twice, once out of each leaf, and a leaf's uplinks on a rail carry 1/4 of its two nodes'
  // 2 × 50 GB/s: 25 GB/s for the one crossing flow that wants 50. Every rail's ring is halved
  // alike, so the bandwidth-bound reduction takes ~2× its time on a 1:1 spine. Playing every
  // replica shows it directly; the folding (SiblingContention) must agree.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  const Topology oversubscribed = load_topology(test::source_path("tests/data/topologies/dgx-h100-4to1-spine.json"));
  Topology full = oversubscribed;
  ParallelLayout l = llama_layout(4, 8, 1, 8);
  l.sequence_length = 2048;
  l.zero_stage = ZeroStage::kStage0;
  l.grad_reduce_overlap = false;
  const auto dp = static_cast<size_t>(WorkKind::kDpComm);
  auto exposed_dp = [&](const Topology& topo, bool every) {
    IterationOptions o;
    o.cosimulate = true;
    o.cosimulate_every_replica = every;
    return simulate_iteration(model, l, topo, o).stages[0].time.exposed[dp].seconds();
  };
  const Topology one_to_one = load_topology(test::source_path("topologies/dgx-h100.json"), TopologyLoadOptions{4});
  const double alone = exposed_dp(one_to_one, true);
  const double every = exposed_dp(oversubscribed, true);
  const double folded = exposed_dp(oversubscribed, false);
  std::printf("exposed DP: 1:1 %.4f s, 4:1 every replica %.4f s, 4:1 folded %.4f s\n", alone, every, folded);
  EXPECT_NEAR(every / alone, 2.0, 0.15);
  // Every DP ring crosses nodes, so all of its exposed time counts as across nodes.
  IterationOptions o;
  o.cosimulate = true;
  const IterationResult r = simulate_iteration(model, l, oversubscribed, o);
  EXPECT_EQ(r.stages[0].time.exposed_across_nodes[dp], r.stages[0].time.exposed[dp]);
  EXPECT_EQ(r.stages[0].time.exposed_across_nodes[static_cast<size_t>(WorkKind::kTpComm)], Time::zero());  // TP 8: one node
  EXPECT_GT(r.stages[0].time.exposed[static_cast<size_t>(WorkKind::kTpComm)], Time::zero());
  EXPECT_NEAR(folded / every, 1.0, 0.10);
}

TEST(CoSimulatedIteration, TpAcrossTwoPcieBoxesSharesTheirNics) {
  // Two PCIe boxes of 8 L40S (2 GPUs per PCIe switch, one 200 Gb/s NIC per switch). TP 2 with
  // DP innermost (rank order dp-tp-pp): TP group d is GPU d of box 0 and GPU d of box 1, so
  // every TP all-reduce crosses the network, and the two GPUs of a switch leave through the
  // same NIC: 12.5 GB/s each instead of 25. The 2-rank all-reduce is bandwidth-bound
  // (2·(n−1)/n·S/B = S/B), so with every replica played the exposed TP time is about twice what
  // one replica alone sees; the folding gives the same.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  const Topology topo = test::load_preset("pcie-8gpu", 2);
  ParallelLayout l = llama_layout(8, 2, 1, 8);
  l.sequence_length = 4096;
  l.sequence_parallel = false;
  l.rank_order = "dp-tp-pp";
  // The DP group is a whole box, over the same GPU PCIe links: no ZeRO parameter gathers during
  // the forward and the reductions after the backward, so that nothing but TP crosses them.
  // (With ZeRO-1's prefetched gathers the co-simulation shows them halving TP's rate too.)
  l.zero_stage = ZeroStage::kStage0;
  l.grad_reduce_overlap = false;
  const auto tp = static_cast<size_t>(WorkKind::kTpComm);
  auto exposed_tp = [&](bool every, bool folded) {
    IterationOptions o;
    o.cosimulate = true;
    o.cosimulate_every_replica = every;
    o.replica_contention = folded;
    const IterationResult r = simulate_iteration(model, l, topo, o);
    EXPECT_EQ(r.stages[0].time.exposed_across_nodes[tp], r.stages[0].time.exposed[tp]);  // all of it crosses
    return r.stages[0].time.exposed[tp].seconds();
  };
  const double alone = exposed_tp(false, false);
  const double every = exposed_tp(true, false);
  const double folded = exposed_tp(false, true);
  std::printf("exposed TP: one replica alone %.4f s, every replica %.4f s, folded %.4f s\n", alone, every, folded);
  EXPECT_NEAR(every / alone, 2.0, 0.15);
  EXPECT_NEAR(folded / every, 1.0, 0.10);
  // What bound that exposed TP time: the network link out of a box, for almost all of it.
  IterationOptions o;
  o.cosimulate = true;
  const IterationResult r = simulate_iteration(model, l, topo, o);
  const auto& links = r.stages[0].time.exposed_by_link[tp];
  ASSERT_FALSE(links.empty());
  Time sum;
  for (const auto& [name, time] : links) sum += time;
  EXPECT_LE(sum, r.stages[0].time.exposed[tp]);
  EXPECT_NE(links.front().first.find("nic"), std::string::npos) << links.front().first;
  EXPECT_GT(links.front().second.seconds(), 0.8 * r.stages[0].time.exposed[tp].seconds());
}

TEST(Explain, EverySuggestionIsASimulationAndItsFlagsReproduceIt) {
  // The bundled Llama-3 70B example: at least three knobs apply, each a re-simulation (the
  // progress hears 0 of n, then each one done); the top one, applied through its command-line
  // overrides, gives exactly its iteration time.
  const std::string workload = test::source_path("workloads/train/llama3-70b-64xdgx-h100.json");
  const std::string models = test::source_path("workloads/models"), topologies = test::source_path("topologies");
  const TrainingWorkload job = load_training_workload(workload, models, topologies);
  IterationOptions options;
  options.compute = job.compute;
  const IterationResult base = simulate_iteration(job.model, job.layout, job.topology, options);
  std::vector<std::pair<size_t, size_t>> heard;
  const std::vector<Suggestion> s = explain_layout(job.model, job.layout, job.topology, options, base,
                                                   [&](size_t done, size_t total) { heard.emplace_back(done, total); });
  ASSERT_GE(s.size(), 3u);
  ASSERT_EQ(heard.size(), s.size() + 1);
  for (size_t i = 0; i < heard.size(); ++i) EXPECT_EQ(heard[i], std::make_pair(i, s.size()));
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i].fits == s[i + 1].fits) {
      EXPECT_LE(s[i].delta, s[i + 1].delta);
    }
  }
  EXPECT_LT(s.front().delta, Time::zero());
  EXPECT_EQ(s.front().knob, "tp_comm_overlap on");
  const TrainingWorkload applied = load_training_workload(workload, models, topologies, s.front().overrides);
  EXPECT_EQ(simulate_iteration(applied.model, applied.layout, applied.topology, options).iteration_time,
            s.front().iteration_time);
  EXPECT_EQ(s.front().iteration_time - base.iteration_time, s.front().delta);
}

TEST(Explain, FullShardingAcrossNodesOffersHybridShardingWithinANode) {
  // GPT-3 175B on 1,024 A100s with ZeRO-3 at TP 4 (DP 32, two data-parallel ranks on each 8-GPU
  // node): shards of 2 inside the node, replicated across nodes, and its flag reproduces it.
  // At TP 8 a node holds one data-parallel rank: nothing to offer.
  const std::string workload = test::source_path("workloads/train/gpt3-175b-128xdgx-a100.json");
  const std::string models = test::source_path("workloads/models"), topologies = test::source_path("topologies");
  WorkloadOverrides fsdp;
  fsdp.zero = 3;
  fsdp.tp = 4;
  fsdp.dp = 32;
  const TrainingWorkload job = load_training_workload(workload, models, topologies, fsdp);
  IterationOptions options;
  options.compute = job.compute;
  const IterationResult base = simulate_iteration(job.model, job.layout, job.topology, options);
  const std::vector<Suggestion> s = explain_layout(job.model, job.layout, job.topology, options, base);
  const auto it = std::find_if(s.begin(), s.end(), [](const Suggestion& x) { return x.overrides.dp_shard.has_value(); });
  ASSERT_NE(it, s.end());
  EXPECT_EQ(it->flags, "--dp-shard 2");
  EXPECT_EQ(it->layout.dp_shard, 2);
  WorkloadOverrides both = fsdp;
  both.dp_shard = 2;
  const TrainingWorkload applied = load_training_workload(workload, models, topologies, both);
  EXPECT_EQ(simulate_iteration(applied.model, applied.layout, applied.topology, options).iteration_time, it->iteration_time);
  WorkloadOverrides tp8 = fsdp;
  tp8.tp = 8;
  tp8.dp = 16;
  const TrainingWorkload whole_node = load_training_workload(workload, models, topologies, tp8);
  const IterationResult r = simulate_iteration(whole_node.model, whole_node.layout, whole_node.topology, options);
  for (const Suggestion& x : explain_layout(whole_node.model, whole_node.layout, whole_node.topology, options, r)) {
    EXPECT_FALSE(x.overrides.dp_shard.has_value()) << x.knob;
  }
}

TEST(Explain, FullRecomputationWithMemoryToSpareOffersTheFewestLayersThatFit) {
  // GPT-3 175B on 1,024 A100s at micro-batch 2 recomputes all 12 layers of each stage and fits
  // with room to spare, while selective recomputation does not fit. The suggestion recomputes the
  // fewest N layers per stage that still fit: N fits, N − 1 does not, it is faster, and its flag
  // reproduces it.
  const std::string workload = test::source_path("workloads/train/gpt3-175b-128xdgx-a100.json");
  const std::string models = test::source_path("workloads/models"), topologies = test::source_path("topologies");
  WorkloadOverrides mbs2;
  mbs2.micro_batch = 2;
  const TrainingWorkload job = load_training_workload(workload, models, topologies, mbs2);
  IterationOptions options;
  options.compute = job.compute;
  const IterationResult base = simulate_iteration(job.model, job.layout, job.topology, options);
  ASSERT_FALSE(base.out_of_memory);
  const std::vector<Suggestion> s = explain_layout(job.model, job.layout, job.topology, options, base);
  const auto it = std::find_if(s.begin(), s.end(), [](const Suggestion& x) { return x.overrides.recompute_layers.has_value(); });
  ASSERT_NE(it, s.end());
  const int n = *it->overrides.recompute_layers;
  EXPECT_GT(n, 1);
  EXPECT_LT(n, 12);
  EXPECT_TRUE(it->fits);
  EXPECT_LT(it->delta, Time::zero());
  EXPECT_EQ(it->flags, "--recompute-layers " + std::to_string(n));
  ParallelLayout fewer = job.layout;
  fewer.recompute_layers = n - 1;
  EXPECT_TRUE(estimate_memory(job.model, fewer, job.topology.gpu_spec_of(job.topology.gpus()[0]), options).out_of_memory);
  WorkloadOverrides both = it->overrides;
  both.micro_batch = 2;
  const TrainingWorkload applied = load_training_workload(workload, models, topologies, both);
  EXPECT_EQ(simulate_iteration(applied.model, applied.layout, applied.topology, options).iteration_time, it->iteration_time);
}

}  // namespace
}  // namespace parallax
