// Per-operator compute of one micro-batch (operator_breakdown.h).
#include "training/operator_breakdown.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "compute/gemm_efficiency.h"
#include "io/input_error.h"
#include "training/iteration_units.h"

namespace parallax {
namespace {

using iteration_detail::micro_batch_of;
using iteration_detail::sharding_of;
using iteration_detail::timed_layer_operators;

// `host_paced`: its pass waits for the host to issue its kernels (iteration_detail::host_stretch);
// of such a pass, the operators whose own kernels the GPU runs faster than the host issues them
// are the ones it waits at.
std::string bound_of(const OperatorTiming& t, bool host_paced) {
  const Time work = std::max(t.compute, t.memory);
  if ((host_paced && t.issue > t.device) || t.host > work + t.launch) return "host";
  if (t.launch > work) return "launch";
  return t.memory_bound() ? "memory" : "compute";
}

// `recompute_all`: the unit's whole forward runs again in its backward; otherwise the attention
// core's under selective recomputation, and the recomputed modules'.
UnitBreakdown timed(std::string unit, int count, const ComputeModel& cm, const std::vector<ModelOperator>& ops,
                    bool recompute_all, bool selective) {
  const iteration_detail::PassStretch stretch = iteration_detail::host_stretch(cm, ops);
  UnitBreakdown u{std::move(unit), count, {}, stretch.forward, stretch.backward};
  for (const ModelOperator& op : ops) {
    const OperatorTiming f = cm.timing(op.forward), b = cm.timing(op.backward);
    const Time forward = iteration_detail::stretched(f.total, stretch.forward);
    const Time backward = iteration_detail::stretched(b.total, stretch.backward);
    const bool backward_slower = backward > forward;
    OperatorTime row{op.name, forward, backward, Time::zero(), op.forward.flops + op.backward.flops,
                     bound_of(backward_slower ? b : f, (backward_slower ? stretch.backward : stretch.forward) > 1)};
    if (recompute_all || op.recomputed || (selective && op.attention_core)) {
      row.recomputed = forward;
      row.flops = row.flops + op.forward.flops;
    }
    u.operators.push_back(row);
  }
  return u;
}

std::string layer_unit_name(LayerKind kind, bool moe, bool bf16, bool recomputed, bool reused_topk = false) {
  std::string name = moe ? "MoE layer" : "Transformer layer";
  if (kind == LayerKind::kMamba) name = "Mamba layer";
  if (kind == LayerKind::kAttention) name = "attention layer";
  if (kind == LayerKind::kMlp) name = "MLP layer";
  std::string notes;
  if (bf16) notes = "bf16 GEMMs";
  if (recomputed) notes += std::string(notes.empty() ? "" : ", ") + "recomputed";
  if (reused_topk) notes += std::string(notes.empty() ? "" : ", ") + "the last indexer's top-k";
  return notes.empty() ? name : name + " (" + notes + ")";
}

// The multi-token-prediction depths, as the iteration appends them to the last virtual stage
// after its `last_stage_layers` layers (iteration_units' append_mtp_modules): each depth's input
// projection, its layer (16-bit GEMMs where the recipe keeps MTP there) and the output head again.
void append_mtp(std::vector<UnitBreakdown>& units, const ModelConfig& model, const ParallelLayout& layout,
                const ComputeModel& cm, double pace, int last_stage_layers) {
  using iteration_detail::replayed_under_full_iteration;
  const MicroBatch batch = micro_batch_of(layout);
  const ShardingFactors sharding = sharding_of(layout);
  units.push_back(timed("MTP input", model.mtp_layers, cm,
                        replayed_under_full_iteration(mtp_input_operators(model, batch, sharding), layout), false, false));
  const bool bf16 = is_quantised(layout.dtype) && layout.module_precision.of(QuantModule::kMtp) == DType::kBf16;
  const bool selective = layout.recompute == Recomputation::kSelective;
  std::map<bool, size_t> index;  // recomputed or not (block method)
  for (int i = 0; i < model.mtp_layers; ++i) {
    const int l = model.layers + i;
    const bool moe = model.is_moe_layer(l);
    const bool recomputed = layout.fully_recomputed(last_stage_layers + i);
    const auto [it, added] = index.try_emplace(recomputed, units.size());
    if (added) {
      units.push_back(timed("MTP " + layer_unit_name(model.layer_kind(l), moe, bf16, recomputed), 0, cm,
                            timed_layer_operators(model, layout, l, bf16, moe ? pace : 1.0), recomputed, selective));
    }
    ++units[it->second].count;
  }
  units.push_back(timed("MTP output head", model.mtp_layers, cm,
                        replayed_under_full_iteration(output_operators(model, batch, sharding), layout), false, false));
}

}  // namespace

Time UnitBreakdown::total() const {
  Time t;
  for (const OperatorTime& op : operators) t += op.total();
  return t;
}

std::vector<UnitBreakdown> operator_breakdown(const ModelConfig& model, const ParallelLayout& layout, const GpuSpec& gpu,
                                              const IterationOptions& options) {
  validate(layout, model, layout.world_size());
  if (!(peak_rate(gpu, layout.dtype).value() > 0)) {
    throw InputError("", "/parallel/dtype", gpu.name + " has no " + std::string(to_string(layout.dtype)) + " peak");
  }
  const ComputeModel cm(gpu, options.compute, options.gemm_efficiency);
  const double pace = model.moe ? iteration_detail::route(*model.moe, layout).pace : 1.0;
  const bool selective = layout.recompute == Recomputation::kSelective;
  // Layers differ only by kind, dense vs MoE, 16-bit ends, (block method) full recomputation and
  // a DSA indexer's top-k reused.
  std::map<std::tuple<LayerKind, bool, bool, bool, bool>, size_t> index;
  std::vector<UnitBreakdown> units;
  int first = 0, last_stage_layers = 0;
  for (const int stage_layers : virtual_stage_layers(layout, model)) {
    last_stage_layers = stage_layers;
    for (int l = first; l < first + stage_layers; ++l) {
      const bool moe = model.is_moe_layer(l);
      const bool bf16 = is_quantised(layout.dtype) && layout.bf16_layer(l, model.layers);
      const bool recomputed = layout.fully_recomputed(l - first);
      const LayerKind kind = model.layer_kind(l);
      const bool reused_topk = model.sparse_attention && model.has_attention(l) && !model.has_indexer(l);
      const auto [it, added] = index.try_emplace({kind, moe, bf16, recomputed, reused_topk}, units.size());
      if (added) {
        units.push_back(timed(layer_unit_name(kind, moe, bf16, recomputed, reused_topk), 0, cm,
                              timed_layer_operators(model, layout, l, bf16, moe ? pace : 1.0), recomputed, selective));
      }
      ++units[it->second].count;
    }
    first += stage_layers;
  }
  if (options.transformer_layers_only) return units;
  const MicroBatch batch = micro_batch_of(layout);
  const ShardingFactors sharding = sharding_of(layout);
  using iteration_detail::replayed_under_full_iteration;
  units.insert(units.begin(), timed("embedding", 1, cm,
                                    replayed_under_full_iteration(embedding_operators(model, batch, sharding), layout),
                                    false, false));
  if (model.mtp_layers > 0) append_mtp(units, model, layout, cm, pace, last_stage_layers);
  units.push_back(timed("output layer", 1, cm,
                        replayed_under_full_iteration(output_operators(model, batch, sharding), layout), false, false));
  return units;
}

nlohmann::ordered_json operator_breakdown_json(const std::vector<UnitBreakdown>& units) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const UnitBreakdown& u : units) {
    nlohmann::ordered_json ops = nlohmann::ordered_json::array();
    for (const OperatorTime& op : u.operators) {
      ops.push_back({{"name", op.name},
                     {"forward_s", op.forward.seconds()},
                     {"backward_s", op.backward.seconds()},
                     {"recomputed_s", op.recomputed.seconds()},
                     {"flops", op.flops.value()},
                     {"bound", op.bound}});
    }
    out.push_back({{"unit", u.unit},
                   {"count", u.count},
                   {"total_s", u.total().seconds()},
                   {"host_pace_forward", u.host_pace_forward},
                   {"host_pace_backward", u.host_pace_backward},
                   {"operators", std::move(ops)}});
  }
  return out;
}

}  // namespace parallax
