// Network models: a lone flow takes the same time in every model; contention in the flow model
// follows max-min sharing (incast, shared links, disjoint rails); properties with fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "network/analytical_network.h"
#include "network/flow_list.h"
#include "network/flow_network.h"
#include "io/input_error.h"
#include "test_support.h"

namespace parallax {
namespace {

using test::load_preset;

struct RunResult {
  std::vector<Time> finish;
  uint64_t solves = 0;
  uint64_t solved_flows = 0;
  FlowNetwork::Audit audit;
};

// Runs `flows` (all starting at their start time) on a fresh engine with model `name`.
RunResult run(const Topology& t, std::string_view name, const std::vector<FlowSpec>& flows, bool audit = false,
              bool skip_redundant_links = true) {
  Engine engine;
  Router router(t);
  std::unique_ptr<NetworkModel> net;
  if (name == "flow") {
    net = std::make_unique<FlowNetwork>(engine, t, router, FlowNetwork::Options{audit, skip_redundant_links});
  }
  else {
    net = make_network_model(name, engine, t, router);
  }
  auto outcomes = run_flow_list(flows, engine, *net);
  RunResult r;
  for (const auto& o : outcomes) r.finish.push_back(o.finish);
  if (auto* f = dynamic_cast<FlowNetwork*>(net.get())) {
    r.solves = f->solves();
    r.solved_flows = f->solved_flow_count();
    r.audit = f->audit();
  }
  return r;
}

FlowSpec flow(const Topology& t, const char* src, const char* dst, Bytes size, Time start = Time::zero()) {
  return FlowSpec{"", *t.find_device(src), *t.find_device(dst), size, start};
}

TEST(Network, LoneFlowSameTimeInEveryModel) {
  // n0.gpu0 -> n1.gpu0 on DGX H100: GPU->NIC (PCIe, 0.3 us, 64 GB/s), NIC->leaf (0.6 us,
  // 50 GB/s), leaf->NIC (0.6 us), NIC->GPU (0.3 us). α = 1.8 us; β = 50 GB/s (the NIC line);
  // 1 GiB / 50e9 B/s = 21474836480 ps. Total 1.8e6 + 21474836480 ps.
  Topology t = load_preset("dgx-h100", 2);
  std::vector<FlowSpec> f{flow(t, "n0.gpu0", "n1.gpu0", gib(1))};
  Time expected = Time::ps(1'800'000 + 21'474'836'480);
  EXPECT_EQ(run(t, "analytical", f).finish[0], expected);
  EXPECT_EQ(run(t, "flow", f).finish[0], expected);
}

TEST(Network, TwoFlowsOnOneLinkShareIt) {
  // Two GPUs send 1 GiB to the same GPU through a star of 100 GB/s links, 1 us per hop: the
  // switch->receiver link is shared, each flow gets 50 GB/s, both finish at
  // α + 2·S/β = 2 us + 2 · 1073741824 / 1e11 s = 2e6 + 21474836480 ps.
  Topology t = test::star(3, gigabytes_per_second(100), Time::us(1));
  std::vector<FlowSpec> f{flow(t, "g1", "g0", gib(1)), flow(t, "g2", "g0", gib(1))};
  RunResult r = run(t, "flow", f);
  EXPECT_EQ(r.finish[0], Time::ps(2'000'000 + 21'474'836'480));
  EXPECT_EQ(r.finish[1], r.finish[0]);
  // Without contention (analytical) each would take α + S/β.
  EXPECT_EQ(run(t, "analytical", f).finish[0], Time::ps(2'000'000 + 10'737'418'240));
}

TEST(Network, LongPathsShareTheirLinksToo) {
  // Two GPUs at each end of a chain of 8 switches: 9 links a path, more than the flow record
  // holds inline. Both flows cross the 7 switch-to-switch links; the GPU links (100 GB/s) are
  // their own. With the chain at 200 GB/s each flow is held by its GPU link at 100 GB/s and
  // finishes as a lone flow would: α = 9 hops · 1 us, then 1 GiB / 100 GB/s. Make the chain's
  // last link — the ninth resource of the path's ten devices, past what fits inline — 150 GB/s
  // and the flows share it, 75 GB/s each.
  for (double last_gbps : {200.0, 150.0}) {
    SCOPED_TRACE(last_gbps);
    Topology t;
    const int spec = t.add_gpu_spec(test::toy_gpu());
    std::vector<DeviceId> sw;
    for (int i = 0; i < 8; ++i) {
      sw.push_back(t.add_device(Device{"sw" + std::to_string(i), DeviceKind::kSwitch, SwitchKind::kLeaf, 0, -1, -1, false, false, {}}));
      if (i == 0) continue;
      t.add_link(sw[static_cast<size_t>(i - 1)], sw.back(), LinkClass::kNetwork,
                 gigabytes_per_second(i == 7 ? last_gbps : 200.0), Time::us(1));
    }
    for (int g = 0; g < 4; ++g) {
      DeviceId d = t.add_device(Device{"g" + std::to_string(g), DeviceKind::kGpu, SwitchKind::kNone, 0, g, spec, false, false, {}});
      t.add_link(d, g < 2 ? sw.front() : sw.back(), LinkClass::kNVLink, gigabytes_per_second(100), Time::us(1));
    }
    t.finalize();
    std::vector<FlowSpec> f{flow(t, "g0", "g2", gib(1)), flow(t, "g1", "g3", gib(1))};
    const RunResult r = run(t, "flow", f);
    const Time expected = Time::us(9) + transfer_time(gib(1), gigabytes_per_second(last_gbps == 200.0 ? 100 : 75));
    EXPECT_EQ(r.finish[0], expected);
    EXPECT_EQ(r.finish[1], expected);
  }
}

TEST(Network, IncastTakesNTimesTheSingleFlowTime) {
  // N GPUs of a DGX H100 node send 256 MiB each to GPU 0: the NVSwitch->gpu0 link (450 GB/s)
  // is shared N ways, so all finish at α + N·S/β with α = 2 × 0.35 us.
  Topology t = load_preset("dgx-h100", 1);
  const Bytes size = mib(256);
  const Time alpha = Time::us(0.7);
  const Bandwidth beta = gigabytes_per_second(450);
  for (int n : {1, 2, 4, 7}) {
    std::vector<FlowSpec> f;
    for (int i = 1; i <= n; ++i) {
      f.push_back(FlowSpec{"", t.gpus()[static_cast<size_t>(i)], t.gpus()[0], size, Time::zero()});
    }
    RunResult r = run(t, "flow", f);
    for (Time fin : r.finish) {
      EXPECT_NEAR(static_cast<double>(fin.picoseconds()),
                  static_cast<double>((alpha + transfer_time(size * n, beta)).picoseconds()), 2.0)
          << "incast of " << n;
    }
  }
}

TEST(Network, CrossNodeIncastSharesTheReceiverNic) {
  // 8 GPUs of node 0 each send 64 MiB to n1.gpu0, through 8 different rails: they all meet on
  // n1.nic0's line (50 GB/s) and its PCIe attach (64 GB/s); the line is the bottleneck:
  // finish = α + 8 · 64 MiB / 50 GB/s. α of the cross-rail path: 0.3 + 0.6 + 0.6 + 0.6 + 0.6 +
  // 0.3 = 3.0 us; same rail (gpu0) has α = 1.8 us, but shares the same bottleneck.
  Topology t = load_preset("dgx-h100", 2);
  std::vector<FlowSpec> f;
  for (int i = 0; i < 8; ++i) f.push_back(FlowSpec{"", t.gpus()[static_cast<size_t>(i)], t.gpus()[8], mib(64), Time::zero()});
  RunResult r = run(t, "flow", f, true);
  // The same-rail flow enters at 1.8 us, 1.2 us before the others, and runs alone at 50 GB/s
  // meanwhile; from then on the NIC line is never idle, so the last flow ends at
  // 1.8 us + 8·S/β.
  Time last = *std::max_element(r.finish.begin(), r.finish.end());
  EXPECT_NEAR(static_cast<double>(last.picoseconds()),
              static_cast<double>((Time::us(1.8) + transfer_time(mib(64) * 8, gigabytes_per_second(50))).picoseconds()),
              1e3);
  EXPECT_LE(r.audit.worst_overload, 1e-9);
  EXPECT_EQ(r.audit.flows_without_bottleneck, 0u);
}

TEST(Network, DisjointRailsDoNotSlowEachOther) {
  // n0.gpu_i -> n1.gpu_i for all 8 rails at once: no link is shared, so each takes exactly the
  // lone-flow time 1.8 us + 1 GiB / 50 GB/s, and each solve covers one flow.
  Topology t = load_preset("dgx-h100", 2);
  std::vector<FlowSpec> f;
  for (int i = 0; i < 8; ++i) f.push_back(FlowSpec{"", t.gpus()[static_cast<size_t>(i)], t.gpus()[static_cast<size_t>(8 + i)], gib(1), Time::us(i)});
  RunResult r = run(t, "flow", f);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(r.finish[static_cast<size_t>(i)], Time::us(i) + Time::ps(1'800'000 + 21'474'836'480));
  }
  EXPECT_EQ(r.solved_flows, r.solves);  // every affected component held exactly one flow
}

TEST(Network, ZeroByteAndLocalFlows) {
  Topology t = load_preset("dgx-h100", 2);
  std::vector<FlowSpec> f{flow(t, "n0.gpu0", "n1.gpu0", bytes(0)), flow(t, "n0.gpu0", "n0.gpu0", gib(1))};
  for (const char* model : {"flow", "analytical"}) {
    RunResult r = run(t, model, f);
    EXPECT_EQ(r.finish[0], Time::us(1.8)) << model;  // the latency only
    EXPECT_EQ(r.finish[1], Time::zero()) << model;   // already there
  }
}

class RandomTraffic : public ::testing::TestWithParam<uint64_t> {};

std::vector<FlowSpec> random_flows(const Topology& t, uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> gpu(0, t.gpu_count() - 1);
  std::uniform_real_distribution<double> size(1e3, 64e6), start(0, 2e-3);
  std::vector<FlowSpec> f;
  while (static_cast<int>(f.size()) < count) {
    size_t a = gpu(rng), b = gpu(rng);
    if (a == b) continue;
    f.push_back(FlowSpec{"", t.gpus()[a], t.gpus()[b], Bytes(std::floor(size(rng))), Time::from_seconds(start(rng))});
  }
  return f;
}

TEST_P(RandomTraffic, CapacityBytesAndLowerBounds) {
  // Seeded random traffic on 4 DGX H100 nodes (2:1 not needed: ECMP collisions on spines and
  // shared NICs give contention). Properties: no link ever over capacity, every flow delivers
  // exactly its bytes, and no flow beats its lone (analytical) time.
  const uint64_t seed = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Topology t = load_preset("dgx-h100", 4);
  auto flows = random_flows(t, seed, 300);
  RunResult fluid = run(t, "flow", flows, true);
  RunResult alone = run(t, "analytical", flows);
  EXPECT_LE(fluid.audit.worst_overload, 1e-9);
  EXPECT_LE(fluid.audit.worst_bytes_error, 1e-6);
  EXPECT_EQ(fluid.audit.flows_without_bottleneck, 0u);  // max-min after every solve
  EXPECT_GT(fluid.audit.solves_checked, 0u);
  // The incremental solve trusts each flow's recorded bottleneck and each link's maintained
  // load and fastest rate; the audit recomputes all three from scratch after every solve.
  EXPECT_EQ(fluid.audit.wrong_recorded_bottlenecks, 0u);
  EXPECT_EQ(fluid.audit.stale_maxima, 0u);
  EXPECT_LE(fluid.audit.worst_aggregate_error, 1e-12);
  for (size_t i = 0; i < flows.size(); ++i) {
    EXPECT_GE(fluid.finish[i].picoseconds() + 2, alone.finish[i].picoseconds()) << "flow " << i;
  }
  // Determinism: the same inputs give the same completion times to the picosecond.
  EXPECT_EQ(run(t, "flow", flows).finish, fluid.finish);
}

TEST_P(RandomTraffic, CompletionTimeGrowsWithSize) {
  const uint64_t seed = GetParam();
  Topology t = load_preset("dgx-h100", 2);
  auto flows = random_flows(t, seed, 50);
  auto bigger = flows;
  bigger[0].size = flows[0].size * 2;
  EXPECT_GE(run(t, "flow", bigger).finish[0], run(t, "flow", flows).finish[0]);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomTraffic, ::testing::Values(7u, 8u, 2024u));

// Starts `flows` on the flow model, flow i standing for weights[i] equal flows (weight w: w
// flows of size/w each when `written_out`), every copy routed by key i as one connection's
// would be; returns when each flow's last byte arrived and what the audit saw.
RunResult run_weighted(const Topology& t, const std::vector<FlowSpec>& flows, const std::vector<uint32_t>& weights,
                       bool written_out) {
  struct Finishes final : FlowSink {
    Engine* engine = nullptr;
    std::vector<uint32_t> owner;  // tag → flow
    std::vector<Time> finish;
    void flow_finished(uint32_t tag) override {
      Time& f = finish[owner[tag]];
      f = std::max(f, engine->now());
    }
  } sink;
  Engine engine;
  Router router(t);
  FlowNetwork net(engine, t, router, FlowNetwork::Options{true, true});
  sink.engine = &engine;
  sink.finish.assign(flows.size(), Time::zero());
  for (uint32_t i = 0; i < flows.size(); ++i) {
    const uint32_t copies = written_out ? weights[i] : 1;
    const Bytes each = written_out ? Bytes(flows[i].size.value() / weights[i]) : flows[i].size;
    for (uint32_t c = 0; c < copies; ++c) {
      const auto tag = static_cast<uint32_t>(sink.owner.size());
      sink.owner.push_back(i);
      engine.schedule_at(flows[i].start, [&net, &sink, f = flows[i], each, tag, i, w = written_out ? 1 : weights[i]] {
        net.start_flow(f.src, f.dst, each, sink, tag, uint64_t{i}, w);
      });
    }
  }
  engine.run();
  return RunResult{sink.finish, net.solves(), net.solved_flow_count(), net.audit()};
}

TEST_P(RandomTraffic, AWeightedFlowFinishesWithTheEqualFlowsItStandsFor) {
  // Seeded random traffic on 4 DGX H100 nodes, each flow standing for 1–4 equal flows: played
  // as weighted flows, and again with each written out as that many flows of its bytes'
  // share on the same route. The finishes agree (to the rounding of the sums), and the weighted
  // run keeps every audited property of the max-min allocation.
  const uint64_t seed = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Topology t = load_preset("dgx-h100", 4);
  std::vector<FlowSpec> flows = random_flows(t, seed, 150);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> weight(1, 4);
  std::vector<uint32_t> weights;
  for (FlowSpec& f : flows) {
    weights.push_back(weight(rng));
    f.size = Bytes(std::floor(f.size.value() / weights.back()) * weights.back());  // splits evenly
  }
  const RunResult weighted = run_weighted(t, flows, weights, false);
  const RunResult copies = run_weighted(t, flows, weights, true);
  EXPECT_LE(weighted.audit.worst_overload, 1e-9);
  EXPECT_LE(weighted.audit.worst_bytes_error, 1e-6);
  EXPECT_EQ(weighted.audit.flows_without_bottleneck + weighted.audit.wrong_recorded_bottlenecks, 0u);
  EXPECT_EQ(weighted.audit.stale_maxima, 0u);
  EXPECT_LE(weighted.audit.worst_aggregate_error, 1e-12);
  for (size_t i = 0; i < flows.size(); ++i) {
    EXPECT_NEAR(static_cast<double>(weighted.finish[i].picoseconds()), static_cast<double>(copies.finish[i].picoseconds()),
                1e-9 * static_cast<double>(copies.finish[i].picoseconds()) + 2)
        << "flow " << i << " of weight " << weights[i];
  }
}

TEST(Network, AFlowOfWeightThreeTakesThreeSharesOfALink) {
  // Two GPUs send to a third through a star of 100 GB/s links, 1 us a hop: 3 GiB as one flow
  // standing for three, and 1 GiB. The receiver's link splits 3 : 1, 75 and 25 GB/s, so both
  // finish together at α + 4 GiB / 100 GB/s, as four flows of 1 GiB would.
  Topology t = test::star(3, gigabytes_per_second(100), Time::us(1));
  const std::vector<FlowSpec> f{flow(t, "g1", "g0", gib(3)), flow(t, "g2", "g0", gib(1))};
  const RunResult r = run_weighted(t, f, {3, 1}, false);
  EXPECT_EQ(r.finish[0], Time::us(2) + transfer_time(gib(4), gigabytes_per_second(100)));
  EXPECT_EQ(r.finish[1], r.finish[0]);
}

class RedundantLinks : public ::testing::TestWithParam<std::string> {};

TEST_P(RedundantLinks, LeavingThemOutChangesNoFinish) {
  // The flow model drops links that another link on every one of their flows' paths dominates
  // (a NIC's PCIe attach behind its line); the max-min rates must be exactly those of the full
  // problem. Seeded random traffic, solved with and without them: the finishes agree to the
  // rounding of the sums (the solver sees the links in another order), and both audits pass.
  Topology t = load_preset(GetParam(), 4);
  for (uint64_t seed : {11u, 12u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto flows = random_flows(t, seed, 200);
    RunResult reduced = run(t, "flow", flows, true, true);
    RunResult full = run(t, "flow", flows, true, false);
    EXPECT_EQ(reduced.audit.flows_without_bottleneck + full.audit.flows_without_bottleneck, 0u);
    EXPECT_LE(std::max(reduced.audit.worst_overload, full.audit.worst_overload), 1e-9);
    for (size_t i = 0; i < flows.size(); ++i) {
      EXPECT_NEAR(static_cast<double>(reduced.finish[i].picoseconds()), static_cast<double>(full.finish[i].picoseconds()),
                  1e-9 * static_cast<double>(full.finish[i].picoseconds()) + 2)
          << "flow " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, RedundantLinks, ::testing::Values("dgx-h100", "aws-p5", "pcie-8gpu", "gb200-nvl72"));

TEST(Network, RedundantLinksAreTheNicAttachesBehindFasterLines) {
  // DGX H100: each GPU reaches its own NIC over PCIe Gen5 (64 GB/s per direction) and the NIC
  // reaches its leaf at 400 Gb/s = 50 GB/s. Both attach directions are dominated by the line
  // (up: every flow goes on to the leaf; down: every flow came from it): 2 per GPU, and
  // nothing else (the line itself is the tighter link; leaves and NVSwitches have many ports).
  Topology t = load_preset("dgx-h100", 2);
  Engine engine;
  Router router(t);
  EXPECT_EQ(FlowNetwork(engine, t, router).redundant_resource_count(), 2 * t.gpu_count());
  FlowNetwork::Options keep;
  keep.skip_redundant_links = false;
  EXPECT_EQ(FlowNetwork(engine, t, router, keep).redundant_resource_count(), 0u);
}

TEST(Network, FlowsCannotEndAtANic) {
  // NICs only forward; the redundant-link rule relies on no flow ending there.
  Topology t = load_preset("dgx-h100", 2);
  Engine engine;
  Router router(t);
  FlowNetwork net(engine, t, router);
  EXPECT_THROW(net.start_flow(*t.find_device("n0.gpu0"), *t.find_device("n1.nic0"), mib(1), nullptr), std::invalid_argument);
  nlohmann::json doc = {{"flows", {{{"src", "n0.gpu0"}, {"dst", "n1.nic0"}, {"bytes", "1 MiB"}}}}};
  try {
    flow_list_from_json(doc, "flows.json", router);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("flows.json: /flows/0/dst"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is a NIC"), std::string::npos) << e.what();
  }
}

TEST(Network, UnknownModelNameListsTheKnownOnes) {
  Topology t = load_preset("dgx-h100", 1);
  Engine e;
  Router r(t);
  try {
    make_network_model("ns3", e, t, r);
    FAIL();
  } catch (const std::invalid_argument& ex) {
    EXPECT_NE(std::string(ex.what()).find("analytical, flow, packet"), std::string::npos) << ex.what();
  }
}

}  // namespace
}  // namespace parallax
