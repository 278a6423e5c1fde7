// Memory per GPU of a training iteration's ranks (internal to the training layer; the public
// entry is estimate_memory in iteration.h): ZeRO-sharded model states, the activations each
// stage holds at its schedule's peak of micro-batches in flight, and communication buffers.
// A pure function of the stage plan: no time is simulated.
#pragma once

#include <vector>

#include "training/iteration_units.h"

namespace parallax::iteration_detail {

inline constexpr double kGradientBytes = 2.0;   // gradients reduced in bf16 (4 with grad_reduce_in_fp32)
inline constexpr double kParameterBytes = 2.0;  // bf16 working copy of the parameters

/// Bytes per parameter of the working copy and of its all-gathers: 1 when fp8 training keeps
/// the parameters in fp8 (Megatron's --fp8-param-gather), else 2.
inline double parameter_bytes(const ParallelLayout& layout) {
  return layout.dtype == DType::kFp8 && layout.fp8_param_gather ? 1.0 : kParameterBytes;
}
/// Quantised training's cached weights, per parameter, outside ZeRO-3 (whose gathered layers
/// are transient): the row-wise and transposed copies Transformer Engine keeps across
/// micro-batches — fp8 2 B, or only the transposed one when the parameters are fp8 already
/// (1 B); fp4 two copies of its elements and their block scales (NVFP4's 16×16 weight blocks:
/// an E4M3 scale per 256; MXFP4: an E8M0 scale per 32).
inline double quantised_weight_cache_bytes(const ParallelLayout& layout) {
  if (!is_quantised(layout.dtype) || layout.zero_stage == ZeroStage::kStage3) return 0.0;
  if (layout.dtype == DType::kFp4) return 2.0 * (0.5 + (layout.fp4_recipe == Fp4Recipe::kNvfp4 ? 1.0 / 256 : 1.0 / 32));
  return layout.fp8_param_gather ? 1.0 : 2.0;
}

/// Bytes per reduced gradient element under `layout`.
inline double gradient_bytes(const ParallelLayout& layout) { return layout.grad_reduce_in_fp32 ? 4.0 : kGradientBytes; }

struct StageMemory {
  MemoryBreakdown memory;
  int layers = 0;                  ///< transformer layers over its chunks
  double parameters = 0;           ///< held before ZeRO sharding
  double expert_parameters = 0;    ///< of them, routed experts' (expert parallelism)
  double end_parameters = 0;       ///< of them, the embedding's and the output side's
  double in_flight_micro_batches = 0;
};

/// Each pipeline stage's rank.
std::vector<StageMemory> stage_memory(const ModelConfig& model, const ParallelLayout& layout, const StagePlan& plan);

}  // namespace parallax::iteration_detail
