// Where one micro-batch's compute goes on one GPU: every operator of each kind of Transformer
// layer the job has (dense, MoE, 16-bit at the ends of a quantised run), of the embedding, of
// the multi-token-prediction depths (input projection, layer, output head) and of the output
// layer, with its forward and backward times on the compute model (the sustained fraction
// included), its FLOPs, the rate it reaches and what bounds it. The iteration adds these per
// layer and micro-batch; this is the same arithmetic, kept per operator, for a user who asks
// why a layer takes what it takes (`parallax train --ops`).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/compute_model.h"
#include "model/model_config.h"
#include "training/iteration.h"
#include "training/parallel_layout.h"

namespace parallax {

/// One operator of one micro-batch on one GPU.
struct OperatorTime {
  std::string name;   ///< layer_operators' name ("qkv_proj", "attention", "mlp_down_proj_fp8_cast")
  Time forward;
  Time backward;      ///< data and weight gradients, without recomputation
  Time recomputed;    ///< the forward run again in the backward (full or selective recomputation, modules)
  Flops flops;        ///< forward + backward + recomputed
  /// What bounds the slower of its passes: "compute", "memory", "launch" (kernel launches
  /// longer than the work) or "host" (host-issued GEMMs; or, in a pass that waits for the host,
  /// an operator whose own kernels the GPU runs faster than the host issues them).
  std::string bound;
  Time total() const { return forward + backward + recomputed; }
};

/// The operators of one kind of unit, and how many of them the model has.
struct UnitBreakdown {
  std::string unit;   ///< "Transformer layer", "MoE layer", "Transformer layer (bf16 GEMMs)", "embedding", "MTP input", "output layer"
  int count = 0;      ///< units of this kind in the model (each pipeline rank runs its share)
  std::vector<OperatorTime> operators;  ///< in forward order
  /// Each pass's time at the host's pace over its kernels' own (iteration_detail::host_stretch):
  /// 1 where the GPU never waits for the host; every operator time above includes it.
  double host_pace_forward = 1;
  double host_pace_backward = 1;
  Time total() const;
};

/// The breakdown of `layout` on `gpu` under `options` (its compute model, GEMM table and MoE
/// routing: the routed experts at the busiest expert's rows, which set their time), for one
/// micro-batch. Fully recomputed layers are a kind of their own, as only some are under
/// ParallelLayout::recompute_layers. Throws what estimate_memory throws for a bad layout, and
/// InputError at /parallel/dtype when the GPU has no peak for the layout's dtype.
std::vector<UnitBreakdown> operator_breakdown(const ModelConfig& model, const ParallelLayout& layout, const GpuSpec& gpu,
                                              const IterationOptions& options = {});

/// The breakdown as JSON: one object per unit kind (unit, count, total_s, host_pace_forward,
/// host_pace_backward) with its operators
/// (name, forward_s, backward_s, recomputed_s, flops, bound).
nlohmann::ordered_json operator_breakdown_json(const std::vector<UnitBreakdown>& units);

}  // namespace parallax
