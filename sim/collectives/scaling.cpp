// The busbw-vs-GPUs curve of a collective (scaling.h).
#include "collectives/scaling.h"

#include <stdexcept>

namespace parallax {

const std::vector<Algorithm>& scaling_algorithms() {
  static const std::vector<Algorithm> kAll = {Algorithm::kRing,          Algorithm::kTree,         Algorithm::kNvls,
                                              Algorithm::kNvlsTree,      Algorithm::kCollNetDirect, Algorithm::kCollNetChain,
                                              Algorithm::kPat,           Algorithm::kHierarchical};
  return kAll;
}

std::vector<ScalingPoint> scaling_curve(const std::function<Topology(int nodes)>& topology_for, const std::vector<int>& gpus,
                                        std::optional<int> per_node, CollectiveOp op, Bytes size,
                                        const CollectiveOptions& options) {
  std::vector<ScalingPoint> out;
  for (const int n : gpus) {
    if (n < 2) throw std::invalid_argument("a scaling point needs at least 2 GPUs, found " + std::to_string(n));
    const int node_gpus = static_cast<int>(topology_for(1).gpus_of_node(0).size());
    const int ppn = std::min(per_node.value_or(node_gpus), node_gpus);
    const int nodes = (n + ppn - 1) / ppn;
    const Topology topo = topology_for(nodes);
    const CollectiveSimulator sim(topo, n, ppn);
    ScalingPoint p;
    p.gpus = n;
    p.nodes = sim.communicator().node_count();
    CollectiveOptions choose = options;
    choose.algorithm.reset();
    p.chosen = sim.run(op, size, choose);
    for (const Algorithm a : scaling_algorithms()) {
      if (unsupported_reason(op, a, sim.communicator(), sim.router())) {
        p.forced.emplace_back();
        continue;
      }
      CollectiveOptions forced = options;
      forced.algorithm = a;
      try {
        p.forced.emplace_back(sim.run(op, size, forced));
      } catch (const std::invalid_argument&) {
        p.forced.emplace_back();  // e.g. a protocol the algorithm does not take
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace parallax
