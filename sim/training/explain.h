// `parallax train --explain`: what to try on a layout, each candidate re-simulated, never
// guessed. The candidates come from a fixed list of knobs, each applied alone to the layout
// (when it applies and the result is a valid layout):
//   tp_comm_overlap on          TP collectives pipelined with the GEMMs (tp > 1)
//   shared experts overlapped   MoE shared experts beside the dispatch (ep > 1, a model with them)
//   grad_reduce_overlap on      gradient buckets reduced during the backward (dp·cp > 1)
//   param_gather_prefetch on    ZeRO parameter gathers one layer ahead (ZeRO ≥ 1, dp·cp > 1)
//   sequence_parallel on        Megatron SP (tp > 1)
//   interleaved vpp 2           interleaved 1F1B with 2 chunks per stage (pp > 1, 1F1B)
//   zero-bubble schedule        ZB-H1 (pp > 1, 1F1B)
//   recompute one step lighter  full → selective, selective → none
//   micro-batch × 2             when the global batch still splits
//   DP innermost                rank order tp-cp-ep-dp-pp ↔ tp-cp-ep-pp-dp (pp > 1, dp > 1)
//   activation offloading       out of memory with pp 1 and no recomputation: the fewest layers
//                               whose activations in host memory let it fit (estimate_memory)
//   fewer recomputed layers     full recomputation that fits: the fewest layers per stage whose
//                               recomputation (Megatron's block method) still lets it fit
//   MoE blocks kept             Megatron's `moe` recompute module dropped from the layout's list
//   hybrid sharding             ZeRO-3 over more data-parallel ranks than a node holds (more than
//                               one of them): shards of the node's, replicated across nodes
// Each suggestion is the difference of two simulations with the same options; one that does
// not fit in GPU memory is kept, marked, after the ones that do.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "topology/topology.h"
#include "training/iteration.h"
#include "training/parallel_layout.h"
#include "training/workload_loader.h"

namespace parallax {

struct Suggestion {
  std::string knob;              ///< what changes, in words
  WorkloadOverrides overrides;   ///< the same change as command-line overrides
  std::string flags;             ///< … as they are typed ("--tp-comm-overlap on")
  ParallelLayout layout;
  Time iteration_time;
  Time delta;                    ///< iteration_time − the layout's own
  double bubble_fraction = 0;
  bool fits = true;
};

/// Every applicable knob, re-simulated; those that fit first, by delta (most negative first),
/// then those that do not fit. `base` is simulate_iteration's result for `layout`. `progress`,
/// when given, hears (simulations done, simulations in all) before the first and after each.
std::vector<Suggestion> explain_layout(const ModelConfig& model, const ParallelLayout& layout, const Topology& topology,
                                       const IterationOptions& options, const IterationResult& base,
                                       const std::function<void(size_t done, size_t total)>& progress = {});

}  // namespace parallax
