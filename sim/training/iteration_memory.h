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

/// Bytes per reduced gradient element under `layout`.
inline double gradient_bytes(const ParallelLayout& layout) { return layout.grad_reduce_in_fp32 ? 4.0 : kGradientBytes; }

struct StageMemory {
  MemoryBreakdown memory;
  int layers = 0;                  ///< transformer layers over its chunks
  double parameters = 0;           ///< held before ZeRO sharding
  double expert_parameters = 0;    ///< of them, routed experts' (expert parallelism)
  double in_flight_micro_batches = 0;
};

/// Each pipeline stage's rank.
std::vector<StageMemory> stage_memory(const ModelConfig& model, const ParallelLayout& layout, const StagePlan& plan);

}  // namespace parallax::iteration_detail
