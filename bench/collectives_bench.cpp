// Collective simulation speed: ring all-reduce of 1 GiB on 1,024 GPUs (128 DGX H100 nodes,
// rail-optimized fat tree) and all-to-all with the flow model — 1 GiB over 256 GPUs, and issue
// 21's targets: 1 MiB over 512 GPUs under 1 s, 1 GiB over 1,024 GPUs under 5 s (a million
// concurrent flows); any single collective with the analytical (closed-form) model.
#include <benchmark/benchmark.h>

#include <map>

#include "collectives/collective_simulator.h"
#include "topology/topology_loader.h"

namespace parallax {
namespace {

const Topology& dgx_h100(int nodes) {
  static std::map<int, Topology> cache;
  auto it = cache.find(nodes);
  if (it == cache.end()) {
    it = cache.emplace(nodes, load_topology(std::string(PARALLAX_SOURCE_DIR) + "/topologies/dgx-h100.json",
                                            TopologyLoadOptions{nodes})).first;
  }
  return it->second;
}

void run(benchmark::State& state, int nodes, CollectiveOp op, CollectiveOptions options, Bytes size = gib(1)) {
  CollectiveSimulator sim(dgx_h100(nodes), nodes * 8);
  for (auto _ : state) {
    CollectiveResult r = sim.run(op, size, options);
    state.counters["busbw_GBs"] = r.busbw_gbs;
    state.counters["transfers"] = static_cast<double>(r.transfers);
    state.SetLabel(std::string(algorithm_name(r.algorithm)) + "/" + std::string(protocol_name(r.protocol)));
  }
}

void BM_RingAllReduce1GiB1024GpusFlow(benchmark::State& state) {
  CollectiveOptions o;
  o.algorithm = Algorithm::kRing;
  o.protocol = Protocol::kSimple;
  run(state, 128, CollectiveOp::kAllReduce, o);
}
void BM_AllToAll1GiB256GpusFlow(benchmark::State& state) {
  run(state, 32, CollectiveOp::kAllToAll, CollectiveOptions{});
}
void BM_AllToAll1MiB512GpusFlow(benchmark::State& state) {
  run(state, 64, CollectiveOp::kAllToAll, CollectiveOptions{}, mib(1));
}
void BM_AllToAll1GiB1024GpusFlow(benchmark::State& state) {
  run(state, 128, CollectiveOp::kAllToAll, CollectiveOptions{});
}
void BM_AllReduce1GiB1024GpusAnalytical(benchmark::State& state) {
  CollectiveOptions o;
  o.model = "analytical";
  run(state, 128, CollectiveOp::kAllReduce, o);
}
void BM_AllToAll1GiB256GpusAnalytical(benchmark::State& state) {
  CollectiveOptions o;
  o.model = "analytical";
  run(state, 32, CollectiveOp::kAllToAll, o);
}
BENCHMARK(BM_RingAllReduce1GiB1024GpusFlow)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_AllToAll1GiB256GpusFlow)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_AllToAll1MiB512GpusFlow)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_AllToAll1GiB1024GpusFlow)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_AllReduce1GiB1024GpusAnalytical)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AllToAll1GiB256GpusAnalytical)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace parallax
