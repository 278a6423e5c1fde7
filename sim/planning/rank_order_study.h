// `parallax scale --rank-orders`: one layout under different rank orders (which parallel
// dimensions are innermost, hence inside a node), each simulated, with where each dimension's
// groups fall — how many nodes the group of rank 0 spans, the bytes a GPU sends in it per
// iteration, and the time that traffic was exposed while crossing nodes — so that a user sees
// which traffic each order puts on the network and what it costs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_config.h"
#include "topology/topology.h"
#include "training/iteration.h"
#include "training/parallel_layout.h"

namespace parallax {

/// Every rank order that places the layout differently: the permutations of the dimensions
/// whose degree is above 1 (tp, cp, ep, dp, pp; ep by the expert grid), the others appended in
/// that canonical order. The layout's own order first, the rest in lexicographic order of
/// their permutation. One order ("tp-cp-ep-dp-pp" or the layout's) when at most one degree is
/// above 1.
std::vector<std::string> distinct_rank_orders(const ParallelLayout& layout);

struct DimensionPlacement {
  ParallelDim dim = ParallelDim::kTp;
  int degree = 1;
  int nodes_spanned = 1;  ///< nodes the group of rank 0 spans
  Bytes sent_per_gpu;     ///< per iteration, the busiest stage's
  Time exposed_across_nodes;  ///< the busiest stage's exposed time while its group crossed nodes
};

struct RankOrderCase {
  std::string order;
  std::optional<IterationResult> result;  ///< nullopt: could not run (problem says why)
  std::string problem;
  std::vector<DimensionPlacement> dims;  ///< the dimensions of degree above 1, in tp, cp, ep, dp, pp order
  /// Σ sent_per_gpu of the dimensions whose groups span more than one node.
  Bytes sent_across_nodes;
};

struct RankOrderStudy {
  int gpus = 0;
  int gpus_per_node = 0;
  std::vector<RankOrderCase> cases;  ///< in the order asked
};

/// Simulates `layout` under each of `orders` on `topology` (whose GPUs per node are its GPU
/// count over its node count, as the job is placed).
RankOrderStudy run_rank_order_study(const ModelConfig& model, const ParallelLayout& layout, const Topology& topology,
                                    const std::vector<std::string>& orders, const IterationOptions& options);

std::string rank_order_table(const RankOrderStudy& study);
nlohmann::ordered_json rank_order_json(const RankOrderStudy& study);

}  // namespace parallax
