// `parallax collective --scale`: one collective of one size on a growing number of GPUs, by
// NCCL's own choice and by each algorithm forced that can run it there — the busbw-vs-GPUs
// curve a cluster's acceptance tests are compared with.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "collectives/collective_simulator.h"
#include "topology/topology.h"

namespace parallax {

struct ScalingPoint {
  int gpus = 0;
  int nodes = 0;
  CollectiveResult chosen;  ///< NCCL's choice of algorithm and protocol
  /// Per algorithm of `scaling_algorithms()`, in that order: its result forced, or nullopt
  /// where it cannot run the operation on these GPUs.
  std::vector<std::optional<CollectiveResult>> forced;
};

/// The algorithms a scaling curve tries: ring, tree, nvls, nvls_tree, collnet_direct,
/// collnet_chain, pat, hierarchical.
const std::vector<Algorithm>& scaling_algorithms();

/// For each count in `gpus` (ascending or not), the topology `topology_for(nodes)` with enough
/// nodes for that many GPUs at `per_node` per node (default: the node's GPU count), and the
/// collective run there by NCCL's choice and by every algorithm. `options.algorithm` is ignored.
/// Throws std::invalid_argument for a count below 2 or one the topology cannot place.
std::vector<ScalingPoint> scaling_curve(const std::function<Topology(int nodes)>& topology_for, const std::vector<int>& gpus,
                                        std::optional<int> per_node, CollectiveOp op, Bytes size,
                                        const CollectiveOptions& options);

}  // namespace parallax
