// Flow-model throughput on a 1,024-GPU rail-optimized fat tree (128 DGX H100 nodes): every GPU
// keeps 8 flows in flight (8,192 concurrent) until 100,000 flows have completed. Patterns:
//  - rail shifts: GPU i's j-th flow goes to the same rail k nodes away (k cycling 1..127),
//    16 MiB each, as in the pairwise steps of a collective;
//  - random peers, 16 MiB: seeded uniform destinations over the whole fabric;
//  - random peers, 1-64 MiB: the same with spread sizes, so every completion has its own time.
#include <benchmark/benchmark.h>

#include <random>

#include "network/flow_network.h"
#include "topology/topology_loader.h"

namespace parallax {
namespace {

struct Workload {
  Engine engine;
  std::unique_ptr<FlowNetwork> network;
  std::mt19937_64 rng{42};
  uint64_t started = 0;
  uint64_t total = 0;
  bool equal_sizes = true;
  bool rail_shifts = false;
  std::vector<uint32_t> sent;
  const Topology* topo = nullptr;

  void start_one(size_t src) {
    if (started >= total) return;
    ++started;
    size_t dst = src;
    if (rail_shifts) {
      const size_t per_node = topo->gpus_of_node(0).size();
      const size_t nodes = static_cast<size_t>(topo->node_count());
      dst = (src + per_node * (1 + sent[src]++ % (nodes - 1))) % topo->gpu_count();
    } else {
      while (dst == src) dst = rng() % topo->gpu_count();
    }
    Bytes size = equal_sizes ? mib(16) : mib(1.0 + static_cast<double>(rng() % 63'000) / 1000.0);
    network->start_flow(topo->gpus()[src], topo->gpus()[dst], size, [this, src](const FlowCompletion&) { start_one(src); });
  }
};

void run_flows(benchmark::State& state, bool equal_sizes, bool rail_shifts) {
  Topology topo = load_topology(std::string(PARALLAX_SOURCE_DIR) + "/topologies/dgx-h100.json", TopologyLoadOptions{128});
  Router router(topo);
  const auto kTotal = static_cast<uint64_t>(state.range(0));
  constexpr int kPerGpu = 8;
  for (auto _ : state) {
    Workload w;
    w.network = std::make_unique<FlowNetwork>(w.engine, topo, router);
    w.total = kTotal;
    w.equal_sizes = equal_sizes;
    w.rail_shifts = rail_shifts;
    w.sent.assign(topo.gpu_count(), 0);
    w.topo = &topo;
    for (int k = 0; k < kPerGpu; ++k) {
      for (size_t g = 0; g < topo.gpu_count(); ++g) w.start_one(g);
    }
    w.engine.run();
    state.counters["flows/s"] = benchmark::Counter(static_cast<double>(w.network->flows_completed()), benchmark::Counter::kIsRate);
    state.counters["solves"] = static_cast<double>(w.network->solves());
    state.counters["flows/solve"] = static_cast<double>(w.network->solved_flow_count()) / static_cast<double>(w.network->solves());
    state.counters["sim_ms"] = w.engine.now().seconds() * 1e3;
    state.counters["repairs"] = static_cast<double>(w.network->repairs());
  }
}

void BM_FlowModel1024GpuRailShifts(benchmark::State& state) { run_flows(state, true, true); }
void BM_FlowModel1024GpuRandomPeers(benchmark::State& state) { run_flows(state, true, false); }
void BM_FlowModel1024GpuRandomPeersMixedSizes(benchmark::State& state) { run_flows(state, false, false); }
BENCHMARK(BM_FlowModel1024GpuRailShifts)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
// Random peers couple every flow to every other through shared NICs and spines; exact max-min
// then re-solves thousands of flows per completion, so these run a tenth of the flows.
BENCHMARK(BM_FlowModel1024GpuRandomPeers)->Arg(10'000)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_FlowModel1024GpuRandomPeersMixedSizes)->Arg(10'000)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace
}  // namespace parallax
