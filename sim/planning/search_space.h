// The space of a layout search (`parallax search`): the values each dimension of a training
// layout may take, by default or from a space file (docs/search-format.md), and the layouts
// they enumerate for a model, a GPU count and a global batch: dp·tp·pp·cp = GPUs, every other
// rule left to the layout's own validation (heads, KV heads, layers over pp·vpp, experts,
// micro-batches, sequence splits), whose rejections are counted, not simulated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "training/parallel_layout.h"

namespace parallax {

struct SearchSpace {
  std::vector<int> tp, pp, cp, ep;
  std::vector<int> expert_tp;                ///< MoE with tp > 1; 0 means tp
  std::vector<int> vpp;                      ///< chunks per stage for interleaved_1f1b
  std::vector<ZeroStage> zero;
  /// Hybrid sharding's shard groups tried beside full sharding, with ZeRO 1–3: each value that
  /// splits a layout's dp·cp ranks into two or more groups (ParallelLayout::dp_shard); none by default.
  std::vector<int> dp_shard;
  std::vector<int64_t> micro_batch;
  std::vector<Recomputation> recompute;
  /// With full recomputation: 0 every layer, N the first N of each virtual stage (block method).
  std::vector<int> recompute_layers;
  std::vector<PipelineScheduleKind> schedule;
  std::vector<ContextParallelComm> cp_comm;  ///< with cp > 1
  std::vector<MoeDispatcher> moe_dispatcher;  ///< with ep > 1
  std::vector<ExpertGemms> expert_gemms;     ///< MoE models
  std::vector<bool> moe_a2a_overlap;         ///< with ep > 1 where Megatron allows it
  std::vector<bool> sequence_parallel;       ///< with tp > 1
  std::vector<bool> tp_comm_overlap;         ///< with tp > 1
  std::vector<int> cpu_offloading_layers;    ///< with pp = 1 and no recomputation (else 0)
  std::vector<std::string> rank_order;       ///< innermost first
};

/// What a demanding user would try on `gpus` GPUs for `model`: power-of-two TP up to the node's
/// GPUs × 2 and up to 64, PP over the divisors of the GPUs up to the layers, CP 1 (and 2–8 for
/// sequences of 16k tokens or more), EP over the experts' divisors and expert TP = tp or 1 (MoE),
/// ZeRO 0–3, micro-batches
/// 1–8, recomputation none/selective/full (full of every layer, or of as many per stage as the base
/// layout's recompute_layers), 1F1B, interleaved (vpp 2, 4) and ZB-H1, SP on,
/// TP overlap as the base layout has it, rank orders with DP or PP innermost after TP, activation
/// offloading as the base layout has it where Megatron allows it (pp 1, no recomputation).
SearchSpace default_search_space(const ModelConfig& model, const ParallelLayout& base, int gpus, int gpus_per_node);

/// Reads a space file over `defaults` for `gpus` GPUs: each key given replaces that dimension's
/// values. Throws InputError naming the file and JSON pointer (an unknown key, an empty list, a
/// value out of range, a tp, pp, cp or ep that does not divide the GPUs).
SearchSpace read_search_space(const std::string& path, SearchSpace defaults, int gpus);

struct Enumeration {
  std::vector<ParallelLayout> valid;  ///< in enumeration order
  size_t enumerated = 0;              ///< combinations with dp·tp·pp·cp = GPUs
  size_t rejected_by_rule = 0;        ///< of them, refused by the layout's validation, or the same
                                      ///< layout as another (a block of every layer of a stage is 0)
};

/// Every combination of the space on `gpus` GPUs, from `base` (batch, sequence, dtype and the
/// switches the space does not vary). Deterministic order.
Enumeration enumerate_layouts(const SearchSpace& space, const ModelConfig& model, const ParallelLayout& base, int gpus);

}  // namespace parallax
