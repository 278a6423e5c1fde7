// The packet-level network against closed forms: a lone flow's α + S/β (cut-through), an
// incast's shared link kept busy to the end, head-of-line blocking that the fluid model does not
// have (and that a large buffer lifts), buffers never overfilled, every flow delivered, reruns
// identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "collectives/collective_simulator.h"
#include "network/flow_list.h"
#include "network/flow_network.h"
#include "network/packet_network.h"
#include "io/input_error.h"
#include "topology/topology_loader.h"
#include "test_support.h"

namespace parallax {
namespace {

FlowSpec between(const Topology& t, const char* src, const char* dst, Bytes size, Time start = Time::zero()) {
  return FlowSpec{"", *t.find_device(src), *t.find_device(dst), size, start};
}

// Runs `flows` on the packet model; checks that every flow ended and gave back every byte of
// buffer it took.
std::vector<Time> run_packets(const Topology& t, const std::vector<FlowSpec>& flows,
                              PacketNetwork::Options options = {}) {
  Engine engine;
  Router router(t);
  PacketNetwork net(engine, t, router, options);
  std::vector<Time> finish;
  for (const auto& o : run_flow_list(flows, engine, net)) finish.push_back(o.finish);
  EXPECT_EQ(net.flows_completed(), flows.size());
  for (uint32_t l = 0; l < t.link_count(); ++l) EXPECT_EQ(net.held(LinkId{l}).value(), 0.0) << "link " << l;
  return finish;
}

std::vector<Time> run_named(const Topology& t, std::string_view model, const std::vector<FlowSpec>& flows) {
  Engine engine;
  Router router(t);
  auto net = make_network_model(model, engine, t, router);
  std::vector<Time> finish;
  for (const auto& o : run_flow_list(flows, engine, *net)) finish.push_back(o.finish);
  return finish;
}

// Two switches joined by one cable: s1 holds a, v; s2 holds g0, g3, c1, c2, c3. 100 GB/s and
// 1 µs on every link.
Topology two_switches() {
  Topology t;
  const int spec = t.add_gpu_spec(test::toy_gpu());
  auto sw = [&](const char* name) {
    return t.add_device(Device{name, DeviceKind::kSwitch, SwitchKind::kLeaf, 0, -1, -1, false, false, {}});
  };
  DeviceId s1 = sw("s1"), s2 = sw("s2");
  int index = 0;
  auto gpu = [&](const char* name, DeviceId to) {
    DeviceId g = t.add_device(Device{name, DeviceKind::kGpu, SwitchKind::kNone, 0, index++, spec, false, false, {}});
    t.add_link(g, to, LinkClass::kNetwork, gigabytes_per_second(100), Time::us(1));
  };
  gpu("a", s1);
  gpu("v", s1);
  for (const char* name : {"g0", "g3", "c1", "c2", "c3"}) gpu(name, s2);
  t.add_link(s1, s2, LinkClass::kNetwork, gigabytes_per_second(100), Time::us(1));
  t.finalize();
  return t;
}

// Two leaves under two spines: l1 holds a, b; l2 holds c, d. GPU links 200 GB/s, leaf-spine
// links 100 GB/s, 1 µs each.
Topology two_spines() {
  Topology t;
  const int spec = t.add_gpu_spec(test::toy_gpu());
  auto sw = [&](const char* name, SwitchKind kind) {
    return t.add_device(Device{name, DeviceKind::kSwitch, kind, 0, -1, -1, false, false, {}});
  };
  DeviceId l1 = sw("l1", SwitchKind::kLeaf), l2 = sw("l2", SwitchKind::kLeaf);
  DeviceId s1 = sw("s1", SwitchKind::kSpine), s2 = sw("s2", SwitchKind::kSpine);
  int index = 0;
  for (auto [name, leaf] : {std::pair{"a", l1}, {"b", l1}, {"c", l2}, {"d", l2}}) {
    DeviceId g = t.add_device(Device{name, DeviceKind::kGpu, SwitchKind::kNone, 0, index++, spec, false, false, {}});
    t.add_link(g, leaf, LinkClass::kNetwork, gigabytes_per_second(200), Time::us(1));
  }
  for (DeviceId spine : {s1, s2}) {
    for (DeviceId leaf : {l1, l2}) t.add_link(leaf, spine, LinkClass::kNetwork, gigabytes_per_second(100), Time::us(1));
  }
  t.finalize();
  return t;
}

TEST(PacketNetwork, ALoneFlowTakesAlphaPlusSizeOverBeta) {
  // g1 -> g0 through a switch, 100 GB/s and 1 µs a hop: 1 MiB is 256 packets of 4,096 B, each
  // 40,960 ps on a link. Cut-through, the last tail arrives at α + S/β = 2e6 + 256 · 40,960 ps,
  // the analytical model's time exactly; the default buffer (2 · 1e11 B/s · 2 µs = 400 kB)
  // never holds the flow back.
  Topology t = test::star(2, gigabytes_per_second(100), Time::us(1));
  std::vector<FlowSpec> f{between(t, "g1", "g0", mib(1))};
  EXPECT_EQ(run_packets(t, f)[0], Time::ps(2'000'000 + 10'485'760));
  EXPECT_EQ(run_named(t, "analytical", f)[0], Time::ps(2'000'000 + 10'485'760));
}

TEST(PacketNetwork, ALoneFlowThroughASlowerLinkTakesTheAnalyticalTimeToo) {
  // n0.gpu0 -> n1.gpu0 on DGX H100: PCIe 64 GB/s and 0.3 µs, then the NIC's 50 GB/s and 0.6 µs
  // twice, then PCIe. The NIC link sends back to back from the first packet's head (0.3 µs):
  // 64 MiB / 50e9 B/s = 1,342,177,280 ps, then 1.5 µs of latency behind it: α = 1.8 µs.
  Topology t = test::load_preset("dgx-h100", 2);
  std::vector<FlowSpec> f{between(t, "n0.gpu0", "n1.gpu0", mib(64))};
  EXPECT_EQ(run_packets(t, f)[0], Time::ps(1'800'000 + 1'342'177'280));
  EXPECT_EQ(run_named(t, "analytical", f)[0], run_packets(t, f)[0]);
}

TEST(PacketNetwork, AnIncastKeepsTheSharedLinkBusyToTheEnd) {
  // g1 and g2 send 1 MiB each to g0: the switch -> g0 link carries 2 MiB back to back from the
  // first head (1 µs), so the last tail arrives at α + 2S/β = 2e6 + 20,971,520 ps, as in the
  // flow model; first come first served interleaves the two, so the other ends at most a few
  // packets (40,960 ps each) earlier.
  Topology t = test::star(3, gigabytes_per_second(100), Time::us(1));
  std::vector<FlowSpec> f{between(t, "g1", "g0", mib(1)), between(t, "g2", "g0", mib(1))};
  std::vector<Time> finish = run_packets(t, f);
  const Time last = std::max(finish[0], finish[1]);
  EXPECT_EQ(last, Time::ps(2'000'000 + 20'971'520));
  EXPECT_LE((last - std::min(finish[0], finish[1])).picoseconds(), 4 * 40'960);
  EXPECT_EQ(run_named(t, "flow", f)[0], last);
}

TEST(PacketNetwork, ACongestedFlowHoldsBackAVictimThatSharesItsLink) {
  // a -> g0 shares g0's link with c1, c2, c3 -> g0 (25 GB/s each, max-min), and the s1 -> s2
  // link with v -> g3, whose way on is free. Max-min gives v the rest of s1 -> s2, 75 GB/s:
  // 4 MiB in α + S/75e9 = 3 µs + 55.9 µs. In the packet model a's packets fill s2's buffer for
  // the s1 -> s2 link, which then moves only as fast as a's packets leave: v's packets, queued
  // among a's at s1, go at a's 25 GB/s, ~4 S/β = 168 µs (head-of-line blocking).
  Topology t = two_switches();
  const Bytes s = mib(4);
  std::vector<FlowSpec> f{between(t, "v", "g3", s), between(t, "a", "g0", s), between(t, "c1", "g0", s),
                          between(t, "c2", "g0", s), between(t, "c3", "g0", s)};
  const double s_over_beta_ps = 4.0 * 1024 * 1024 / 1e11 * 1e12;  // 41,943,040 ps
  const Time fluid = run_named(t, "flow", f)[0];
  EXPECT_NEAR(static_cast<double>(fluid.picoseconds()), 3e6 + s_over_beta_ps * 4.0 / 3.0, 1e3);
  const Time blocked = run_packets(t, f)[0];
  EXPECT_GT(static_cast<double>(blocked.picoseconds()), 3.0 * s_over_beta_ps);
  // With buffers that hold every flow whole, s1 -> s2 never stops: first come first served
  // alternates a's and v's packets there, v gets at least half the link, 2 S/β and latency.
  PacketNetwork::Options deep;
  deep.buffer = mib(64);
  const Time unblocked = run_packets(t, f, deep)[0];
  EXPECT_LT(static_cast<double>(unblocked.picoseconds()), 3e6 + 2.0 * s_over_beta_ps + 1e5);
  EXPECT_LT(unblocked, blocked);
}

TEST(PacketNetwork, RandomTrafficOnAFatTreeDeliversEveryFlowNoFasterThanAlone) {
  // 200 flows among the 32 GPUs of 4 DGX H100s, random sizes (4 KiB - 8 MiB) and starts
  // (0 - 20 µs), seed 7. Each ends no earlier than it could alone (its start + α + S/β, the
  // analytical time), every buffer is given back whole (run_packets), and a rerun is identical.
  Topology t = test::load_preset("dgx-h100", 4);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> gpu(0, 31);
  std::uniform_real_distribution<double> log_size(12.0, 23.0);
  std::uniform_int_distribution<int64_t> start_ps(0, 20'000'000);
  std::vector<FlowSpec> flows;
  for (int i = 0; i < 200; ++i) {
    int a = gpu(rng), b = gpu(rng);
    if (a == b) b = (b + 1) % 32;
    std::string src = "n" + std::to_string(a / 8) + ".gpu" + std::to_string(a % 8);
    std::string dst = "n" + std::to_string(b / 8) + ".gpu" + std::to_string(b % 8);
    flows.push_back(FlowSpec{"", *t.find_device(src), *t.find_device(dst),
                             Bytes(std::floor(std::exp2(log_size(rng)))), Time::ps(start_ps(rng))});
  }
  std::vector<Time> packets = run_packets(t, flows);
  std::vector<Time> alone;
  for (const FlowSpec& f : flows) {
    FlowSpec one = f;
    one.start = Time::zero();
    alone.push_back(run_named(t, "analytical", {one})[0]);
  }
  for (size_t i = 0; i < flows.size(); ++i) EXPECT_GE(packets[i], flows[i].start + alone[i]) << "flow " << i;
  EXPECT_EQ(run_packets(t, flows), packets);
}

TEST(PacketNetwork, ARingAllReduceRunsAtTheFluidModelsBandwidth) {
  // 16 H100s on two DGX nodes, NCCL's ring with the Simple protocol, 32 MiB: each step's flows
  // keep the NICs' 50 GB/s busy whether the bytes move as a fluid or as pipelined packets, so
  // the two bus bandwidths agree to within 2% (the packets pay one pipeline fill a step).
  Topology topo = test::load_preset("dgx-h100", 2);
  CollectiveSimulator sim(topo, 16);
  CollectiveOptions o;
  o.algorithm = Algorithm::kRing;
  o.protocol = Protocol::kSimple;
  const double fluid = sim.run(CollectiveOp::kAllReduce, mib(32), o).busbw_gbs;
  o.model = "packet";
  const double packets = sim.run(CollectiveOp::kAllReduce, mib(32), o).busbw_gbs;
  EXPECT_NEAR(packets / fluid, 1.0, 0.02) << fluid << " GB/s fluid, " << packets << " GB/s in packets";
}

TEST(PacketNetwork, FractionalSizesLeaveNoCreditBehind) {
  // Buffers of one MTU, and three packets of fractional sizes (a collective's shares) through
  // the switch's link into g0: counted in fractional bytes, adding and then subtracting them
  // leaves 2.3e-13 B held (1358.3566 + 782.7461 + 1068.5435, less the same, in doubles), and
  // the 4,096 B packets after them would wait forever. Whole-byte credits: every flow ends,
  // every buffer is empty again.
  Topology t = test::star(4, gigabytes_per_second(100), Time::us(1));
  PacketNetwork::Options one_packet;
  one_packet.buffer = Bytes(4096);
  std::vector<FlowSpec> f{between(t, "g1", "g0", Bytes(1358.3566)), between(t, "g2", "g0", Bytes(782.7461)),
                          between(t, "g3", "g0", Bytes(1068.5435)), between(t, "g1", "g0", Bytes(65536), Time::us(5))};
  EXPECT_EQ(run_packets(t, f, one_packet).size(), 4u);
}

TEST(PacketNetwork, AFlowOfWeightWTakesWTurnsOnItsFirstLink) {
  // g1 sends 1 MiB to g0 at weight 3 and 1 MiB to g2 at weight 1: its link takes 3 packets of
  // the first for one of the second, 75 GB/s against 25. The first ends when 1 MiB has gone at
  // 75 GB/s (and a third of 1 MiB of the other with it): α + (4/3) S/β = 2 µs + 13.98 µs; the
  // second then has its link alone: α + 2 S/β, 2 µs + 20.97 µs.
  Topology t = test::star(3, gigabytes_per_second(100), Time::us(1));
  Engine engine;
  Router router(t);
  PacketNetwork net(engine, t, router);
  struct Sink final : FlowSink {
    std::vector<Time> finish{Time::zero(), Time::zero()};
    const Engine* engine = nullptr;
    void flow_finished(uint32_t tag) override { finish[tag] = engine->now(); }
  } sink;
  sink.engine = &engine;
  net.start_flow(*t.find_device("g1"), *t.find_device("g0"), mib(1), sink, 0, std::nullopt, 3);
  net.start_flow(*t.find_device("g1"), *t.find_device("g2"), mib(1), sink, 1, std::nullopt, 1);
  engine.run();
  const double s_over_beta_ps = 1048576.0 / 1e11 * 1e12;  // 10,485,760 ps
  EXPECT_NEAR(static_cast<double>(sink.finish[0].picoseconds()), 2e6 + 4.0 / 3.0 * s_over_beta_ps, 2 * 40'960);
  EXPECT_NEAR(static_cast<double>(sink.finish[1].picoseconds()), 2e6 + 2.0 * s_over_beta_ps, 2 * 40'960);
}

TEST(PacketNetwork, ALoneFlowOnNvlinkIsAnalyticalToAPicosecondAPacket) {
  // 450 GB/s: a 4,096 B packet takes 9,102.2 ps, rounded up to 9,103 on each link. 1 MiB from
  // n0.gpu0 to n0.gpu1 through the NVSwitch is 256 packets, so it ends at most 256 ps after
  // the analytical α + S/β, which rounds once.
  Topology t = test::load_preset("dgx-h100", 1);
  std::vector<FlowSpec> f{between(t, "n0.gpu0", "n0.gpu1", mib(1))};
  const Time analytical = run_named(t, "analytical", f)[0];
  const Time packets = run_packets(t, f)[0];
  EXPECT_GE(packets, analytical);
  EXPECT_LE((packets - analytical).picoseconds(), 256);
}

TEST(PacketNetwork, AdaptiveRoutingSpreadsAFlowOverBothSpines) {
  // a -> c, 4 MiB, over two spines of 100 GB/s each from 200 GB/s GPU links. On its hashed
  // path (ECMP) the flow has one spine: α + S/1e11 = 4 µs + 41.94 µs. Adaptive, l1 sends each
  // packet to the spine with fewer bytes waiting, both spines carry half: α + S/2e11, 4 µs +
  // 20.97 µs, plus at most a few packets' time (40,960 ps each on a spine link).
  Topology t = two_spines();
  std::vector<FlowSpec> f{between(t, "a", "c", mib(4))};
  const double s_ps = 4.0 * 1024 * 1024 / 1e11 * 1e12;  // S/1e11: 41,943,040 ps
  EXPECT_EQ(run_packets(t, f)[0], Time::ps(4'000'000 + static_cast<int64_t>(s_ps)));
  PacketNetwork::Options adaptive;
  adaptive.adaptive_routing = true;
  const double sprayed = static_cast<double>(run_packets(t, f, adaptive)[0].picoseconds());
  EXPECT_GE(sprayed, 4e6 + s_ps / 2);
  EXPECT_LE(sprayed, 4e6 + s_ps / 2 + 4 * 40'960);
}

TEST(PacketNetwork, AdaptiveRoutingDeliversRandomTrafficOnAFatTree) {
  // The random traffic of the test above on 4 DGX H100s, switches choosing each packet's spine:
  // every flow ends (out of order or not), no faster than alone, buffers empty, reruns equal.
  Topology t = test::load_preset("dgx-h100", 4);
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> gpu(0, 31);
  std::vector<FlowSpec> flows;
  for (int i = 0; i < 64; ++i) {
    int a = gpu(rng), b = gpu(rng);
    if (a / 8 == b / 8) b = (b + 8) % 32;
    std::string src = "n" + std::to_string(a / 8) + ".gpu" + std::to_string(a % 8);
    std::string dst = "n" + std::to_string(b / 8) + ".gpu" + std::to_string(b % 8);
    flows.push_back(FlowSpec{"", *t.find_device(src), *t.find_device(dst), mib(1), Time::zero()});
  }
  PacketNetwork::Options adaptive;
  adaptive.adaptive_routing = true;
  std::vector<Time> packets = run_packets(t, flows, adaptive);
  for (size_t i = 0; i < flows.size(); ++i) EXPECT_GE(packets[i], run_named(t, "analytical", {flows[i]})[0]) << i;
  EXPECT_EQ(run_packets(t, flows, adaptive), packets);
}

TEST(PacketNetwork, AZeroByteFlowTakesThePathLatency) {
  Topology t = test::star(2, gigabytes_per_second(100), Time::us(1));
  EXPECT_EQ(run_packets(t, {between(t, "g1", "g0", Bytes(0))})[0], Time::us(2));
}

TEST(PacketNetwork, RefusesAnMtuOrBufferThatCannotHoldAPacket) {
  Topology t = test::star(2, gigabytes_per_second(100), Time::us(1));
  Engine engine;
  Router router(t);
  PacketNetwork::Options zero_mtu;
  zero_mtu.mtu = Bytes(0);
  EXPECT_THROW(PacketNetwork(engine, t, router, zero_mtu), std::invalid_argument);
  PacketNetwork::Options small;
  small.buffer = Bytes(1024);
  EXPECT_THROW(PacketNetwork(engine, t, router, small), std::invalid_argument);
}

// The topology's `packets` block sets the model's MTU and buffers; out-of-range values are
// refused with their JSON pointer.
TEST(PacketNetwork, TheTopologysPacketsBlockSetsMtuAndBuffer) {
  std::ifstream in(test::source_path("topologies/dgx-h100.json"));
  nlohmann::json doc = nlohmann::json::parse(in);
  doc["packets"] = {{"mtu", "2 KiB"}, {"link_buffer", "16 KiB"}, {"routing", "ecmp"}};
  Topology t = topology_from_json(doc, "h100.json", TopologyLoadOptions{2});
  Engine engine;
  Router router(t);
  auto net = make_network_model("packet", engine, t, router);
  const auto& packets = dynamic_cast<const PacketNetwork&>(*net);
  EXPECT_EQ(packets.buffer_of(LinkId{0}), Bytes(16384));
  // 1 MiB between nodes in 2 KiB packets: 512 packets over the path's 4 links.
  net->start_flow(*t.find_device("n0.gpu0"), *t.find_device("n1.gpu0"), mib(1), [](const FlowCompletion&) {});
  engine.run();
  EXPECT_EQ(packets.packet_hops(), 512u * 4u);
  const std::pair<nlohmann::json, std::string> refused[] = {
      {{{"mtu", "32 B"}}, "h100.json: /packets/mtu: an MTU of 64 B to 64 KiB"},
      {{{"link_buffer", "1 KiB"}}, "h100.json: /packets/link_buffer: a buffer of one MTU (4096 B) to 1 GiB"},
      {{{"mtu", "8 KiB"}, {"link_buffer", "4 KiB"}}, "h100.json: /packets/link_buffer: a buffer of one MTU (8192 B) to 1 GiB"},
      {{{"buffer", "4 KiB"}}, "h100.json: /packets/buffer: unknown key"},
      {{{"routing", "spray"}}, "h100.json: /packets/routing: expected ecmp or adaptive"}};
  for (const auto& [block, message] : refused) {
    doc["packets"] = block;
    try {
      topology_from_json(doc, "h100.json", TopologyLoadOptions{2});
      ADD_FAILURE() << block.dump() << " was accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).substr(0, message.size()), message) << e.what();
    }
  }
}

}  // namespace
}  // namespace parallax
