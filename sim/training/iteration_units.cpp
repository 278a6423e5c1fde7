// The units of a training iteration and their schedule (iteration_units.h).
#include "training/iteration_units.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <stdexcept>

#include "model/parameter_count.h"
#include "training/optimizer_cost.h"

namespace parallax::iteration_detail {

PassStretch host_stretch(const ComputeModel& cm, const std::vector<ModelOperator>& ops) {
  std::vector<const OperatorCost*> forward, backward;
  Time kernels_forward, kernels_backward;
  for (const ModelOperator& op : ops) {
    forward.push_back(&op.forward);
    kernels_forward += cm.time(op.forward);
    kernels_backward += cm.time(op.backward);
  }
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) backward.push_back(&it->backward);
  auto stretch = [&](const std::vector<const OperatorCost*>& pass, Time kernels) {
    const Time issued = issued_stream_time(cm, pass);
    return kernels > Time::zero() && issued > kernels && issued != Time::max() ? issued.seconds() / kernels.seconds()
                                                                                 : 1.0;
  };
  return {stretch(forward, kernels_forward), stretch(backward, kernels_backward)};
}

Time stretched(Time t, double factor) { return factor == 1.0 ? t : Time::from_seconds(t.seconds() * factor); }

OperatorSums sum_operators(const ComputeModel& cm, const std::vector<ModelOperator>& ops) {
  OperatorSums s;
  bool before = true;
  const PassStretch stretch = host_stretch(cm, ops);
  for (const ModelOperator& op : ops) {
    const Time forward = stretched(cm.time(op.forward), stretch.forward);
    const Time backward = stretched(cm.time(op.backward), stretch.backward);
    s.forward += forward;
    s.backward += backward;
    s.forward_flops += op.forward.flops;
    s.backward_flops += op.backward.flops;
    s.saved += op.saved;
    s.saved_scores += op.saved_scores;
    s.regenerated += op.regenerated;
    if (op.recomputed) {  // a recomputed module's forward runs again in the backward
      s.backward += forward;
      s.backward_flops += op.forward.flops;
      if (before) s.backward_before_attention += forward;
    }
    if (op.forward.kind == OperatorKind::kGemm && !op.attention_core) {
      (before ? s.weight_before_attention : s.weight_after_attention) += forward;
      s.weight_flops += op.forward.flops;
    }
    if (op.shared_expert) {
      s.shared_expert_forward += forward;
      s.shared_expert_backward += backward + (op.recomputed ? forward : Time::zero());
      if (op.forward.kind == OperatorKind::kGemm) s.shared_expert_weight += forward;
    }
    if (op.attention_core) {
      before = false;
      s.attention_forward += forward;
      s.attention_backward += backward;
      s.attention_forward_flops += op.forward.flops;
    } else if (before) {
      s.forward_before_attention += forward;
      s.backward_before_attention += backward;
    }
  }
  return s;
}

Unit unit_from(const OperatorSums& s, Recomputation recompute, bool transformer_layer, bool timed,
               bool split_attention) {
  Unit u;
  u.transformer_layer = transformer_layer;
  // Full recomputation keeps only the layer's input (set by the caller, who knows its size).
  u.activations = s.saved + (recompute == Recomputation::kSelective && transformer_layer ? Bytes() : s.saved_scores);
  if (recompute == Recomputation::kSelective && transformer_layer) u.recomputed_working_set = s.saved_scores;
  if (recompute == Recomputation::kSelectiveOp && transformer_layer) u.recomputed_working_set = s.regenerated;
  if (!timed) {
    u.forward_segments = u.backward_segments = u.input_gradient_segments = {{Time::zero()}};
    return u;
  }
  u.weight_gradient = s.weight_before_attention + s.weight_after_attention;
  u.weight_gradient_flops = s.weight_flops;
  u.forward = s.forward;
  u.backward = s.backward;
  u.forward_flops = s.forward_flops;
  u.backward_flops = s.backward_flops;
  u.shared_expert_forward = s.shared_expert_forward;
  u.shared_expert_backward = s.shared_expert_backward;
  u.shared_expert_weight_gradient = s.shared_expert_weight;
  if (transformer_layer && recompute == Recomputation::kFull) {
    u.backward += s.forward;
    u.backward_flops += s.forward_flops;
    u.shared_expert_backward += s.shared_expert_forward;
  } else if (transformer_layer && recompute == Recomputation::kSelective) {
    u.backward += s.attention_forward;
    u.backward_flops += s.attention_forward_flops;
  }
  if (!(split_attention && transformer_layer)) {
    u.forward_segments = {{u.forward}};
    u.backward_segments = {{u.backward}};
    u.input_gradient_segments = {{u.backward - u.weight_gradient}};
    return u;
  }
  u.forward_segments = {{s.forward_before_attention},
                        {s.attention_forward, AttentionPass::kForward},
                        {s.forward - s.forward_before_attention - s.attention_forward}};
  // Backward and its B part, side by side: B leaves out each side's weight gradients.
  for (const bool whole : {true, false}) {
    SegmentList& list = whole ? u.backward_segments : u.input_gradient_segments;
    if (recompute == Recomputation::kFull) list = u.forward_segments;
    list.push_back({s.backward - s.backward_before_attention - s.attention_backward -
                    (whole ? Time::zero() : s.weight_after_attention)});
    if (recompute == Recomputation::kSelective) list.push_back({s.attention_forward, AttentionPass::kForward});
    list.push_back({s.attention_backward, AttentionPass::kBackward});
    list.push_back({s.backward_before_attention - (whole ? Time::zero() : s.weight_before_attention)});
  }
  return u;
}

// Expert i's slots are uᵢ = E·wᵢ/Σw times the even share; it computes qᵢ = min(uᵢ, c) of them
// under a capacity factor c, or c padded to its capacity.
Routing route(const MoeConfig& moe, const ParallelLayout& layout) {
  const int experts = moe.experts, ep = layout.ep;
  const ExpertLoad& load = layout.moe_expert_load;
  if (!load.relative.empty() && static_cast<int>(load.relative.size()) != experts) {
    throw std::invalid_argument("expert_load has " + std::to_string(load.relative.size()) + " loads for " +
                                std::to_string(experts) + " experts");
  }
  if (!std::isfinite(load.zipf_exponent) || load.zipf_exponent < 0) {
    throw std::invalid_argument("expert_load's Zipf exponent must be finite and >= 0");
  }
  const std::optional<double> capacity = layout.moe_capacity_factor;
  if (capacity && !(std::isfinite(*capacity) && *capacity > 0)) {
    throw std::invalid_argument("moe_capacity_factor must be > 0");
  }
  const bool padded = capacity && layout.moe_pad_to_capacity;
  std::vector<double> w(static_cast<size_t>(experts));
  for (int i = 0; i < experts; ++i) {
    const double wi = load.relative.empty() ? std::pow(i + 1.0, -load.zipf_exponent) : load.relative[static_cast<size_t>(i)];
    if (!std::isfinite(wi) || wi < 0) throw std::invalid_argument("expert_load's loads must be finite and >= 0");
    w[static_cast<size_t>(i)] = wi;
  }
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  if (!(total > 0)) throw std::invalid_argument("expert_load's loads are all zero");
  Routing r;
  r.pace = r.busiest_rank = 0;
  double processed = 0, dropped = 0, rank_sum = 0;
  const int local = experts / ep;
  for (int i = 0; i < experts; ++i) {
    const double u = static_cast<double>(experts) * w[static_cast<size_t>(i)] / total;
    const double q = padded ? *capacity : capacity ? std::min(u, *capacity) : u;
    if (capacity) dropped += std::max(u - *capacity, 0.0);
    r.pace = std::max(r.pace, q);
    processed += q;
    rank_sum += q;
    if ((i + 1) % local == 0) {
      r.busiest_rank = std::max(r.busiest_rank, rank_sum / local);
      rank_sum = 0;
    }
  }
  r.processed = processed / experts;
  r.dropped = dropped / experts;
  return r;
}

MicroBatch micro_batch_of(const ParallelLayout& layout) {
  // Full recomputation re-runs every module anyway (Megatron ignores the modules with it).
  return MicroBatch{layout.micro_batch,
                    layout.sequence_length,
                    true,
                    layout.dtype,
                    layout.attention,
                    layout.fp8_recipe,
                    layout.fp4_recipe,
                    layout.recompute == Recomputation::kFull ? RecomputeModules{} : layout.recompute_modules,
                    layout.expert_gemms,
                    layout.recompute == Recomputation::kSelectiveOp,
                    layout.module_precision,
                    layout.rope_fusion,
                    layout.moe_dispatcher == MoeDispatcher::kAllToAll,
                    layout.ep > 1 && layout.moe_dispatcher == MoeDispatcher::kFlex,
                    layout.moe_capacity_factor.has_value() && layout.moe_pad_to_capacity,
                    RouterRecipe{layout.moe_router_fusion, layout.moe_load_balancing}};
}

ShardingFactors sharding_of(const ParallelLayout& layout) {
  ShardingFactors s{layout.tp, layout.cp, layout.ep, layout.sequence_parallel, false, layout.expert_tp};
  s.cp_ring = layout.cp_comm == ContextParallelComm::kRing;
  return s;
}

namespace {

void set_graph_replayed(ModelOperator& op, bool graphed) { op.forward.graph_replayed = op.backward.graph_replayed = graphed; }

// Whether a layer's operator is replayed from a CUDA graph under `layout`. Scoped graphs go by the
// operator's place: the attention block runs up to its residual add (or, in a parallel block, up
// to the MLP, whose operators are named mlp_*, or a MoE's router), the rest is the MLP block. A
// MoE layer's moe_router graph ends after the router, so it holds the shared experts Megatron-Core
// computes before routing (moe_layer.py, shared_experts_compute) unless they overlap the
// dispatch; moe_preprocess holds the permutation and a latent MoE's down-projection.
// `graphable`: false for a layer Megatron's per-layer capture skips (_layer_is_graphable: a hybrid
// model's MTP depth, whose inner layer is a hybrid stack), eager unless the whole iteration is.
void mark_graph_replayed(std::vector<ModelOperator>& ops, const ParallelLayout& layout, bool moe, bool graphable) {
  if (layout.cuda_graphs != CudaGraphs::kScoped || !graphable) {
    const bool graphed = layout.cuda_graphs == CudaGraphs::kFullIteration ||
                         (graphable && layout.cuda_graphs == CudaGraphs::kLayers);
    for (ModelOperator& op : ops) set_graph_replayed(op, graphed);
    return;
  }
  const CudaGraphScope& scope = layout.cuda_graph_scope;
  bool attention_block = true;
  for (ModelOperator& op : ops) {
    if (op.name == "router" || op.name.rfind("mlp_", 0) == 0) attention_block = false;
    if (op.name.rfind("mamba_", 0) == 0) {
      set_graph_replayed(op, scope.mamba);
    } else if (attention_block) {
      set_graph_replayed(op, scope.attn);
    } else if (!moe) {
      set_graph_replayed(op, scope.mlp);
    } else {
      const bool before_routing = op.name == "mlp_norm" || op.name.rfind("router", 0) == 0 ||
                                  (op.shared_expert && !layout.moe_shared_expert_overlap);
      const bool preprocess = op.name == "moe_permute" || op.name.rfind("moe_latent_down_proj", 0) == 0;
      set_graph_replayed(op, (scope.moe_router && before_routing) || (scope.moe_preprocess && preprocess));
    }
  }
}

}  // namespace

std::vector<ModelOperator> replayed_under_full_iteration(std::vector<ModelOperator> ops, const ParallelLayout& layout) {
  for (ModelOperator& op : ops) set_graph_replayed(op, layout.cuda_graphs == CudaGraphs::kFullIteration);
  return ops;
}

std::vector<ModelOperator> timed_layer_operators(const ModelConfig& model, const ParallelLayout& layout, int layer,
                                                 bool bf16, double expert_rows) {
  MicroBatch batch = micro_batch_of(layout);
  if (bf16) batch.dtype = DType::kBf16;
  std::vector<ModelOperator> ops = layer_operators(model, layer, batch, sharding_of(layout));
  const bool moe = model.is_moe_layer(layer);
  mark_graph_replayed(ops, layout, moe, !(model.hybrid() && layer >= model.layers));
  return moe ? scale_experts(std::move(ops), expert_rows) : ops;
}

MessageSizes message_sizes(const ModelConfig& model, const ParallelLayout& layout) {
  const int t = layout.tp, cp = layout.cp;
  const double element = bytes_per_element(activation_dtype(layout.dtype));
  MessageSizes m;
  m.activation = Bytes(static_cast<double>(layout.micro_batch) * static_cast<double>(layout.sequence_length / cp) *
                       static_cast<double>(model.hidden) * element);
  m.pp = layout.sequence_parallel ? m.activation / t : m.activation;
  m.pp_send = m.activation / t;
  const double cp_tokens = static_cast<double>(layout.micro_batch) * static_cast<double>(layout.sequence_length / cp);
  const double local_heads = static_cast<double>(model.heads / t);
  const double local_kv_heads = std::max(1.0, static_cast<double>(model.attention_kv_heads() / t));
  const double d_qk = static_cast<double>(model.qk_head_dim()), d_v = static_cast<double>(model.v_head_dim());
  m.kv_block = Bytes(cp_tokens * local_kv_heads * (d_qk + d_v) * element);
  m.ulysses_qkv = Bytes(cp_tokens * (local_heads * d_qk + std::max(local_kv_heads, static_cast<double>(cp)) * (d_qk + d_v)) *
                        element);
  m.ulysses_output = Bytes(cp_tokens * local_heads * d_v * element);
  return m;
}

namespace {

// Layers differ in cost only by kind (a hybrid model's blocks), dense vs MoE, by bf16 GEMMs at
// the ends of a quantised run, and by a DSA indexer of their own or a reused top-k:
// the operator sums of each kind, computed once. A MoE layer is timed at the busiest expert's
// pace, with the FLOPs of the slots actually processed.
class LayerSums {
 public:
  LayerSums(const ModelConfig& model, const ParallelLayout& layout, const ComputeModel& cm, const Routing& routing)
      : model_(model), layout_(layout), cm_(cm), routing_(routing) {}

  const OperatorSums& of(int l, bool moe, bool bf16) {
    auto [it, added] = sums_.try_emplace({model_.layer_kind(l), moe, bf16, model_.has_indexer(l)});
    if (added) it->second = compute(l, moe, bf16);
    return it->second;
  }

 private:
  OperatorSums compute(int l, bool moe, bool bf16) const {
    if (!moe) return sum_operators(cm_, timed_layer_operators(model_, layout_, l, bf16, 1.0));
    OperatorSums s = sum_operators(cm_, timed_layer_operators(model_, layout_, l, bf16, routing_.pace));
    const OperatorSums work = sum_operators(cm_, timed_layer_operators(model_, layout_, l, bf16, routing_.processed));
    s.forward_flops = work.forward_flops;
    s.backward_flops = work.backward_flops;
    s.attention_forward_flops = work.attention_forward_flops;
    return s;
  }

  const ModelConfig& model_;
  const ParallelLayout& layout_;
  const ComputeModel& cm_;
  const Routing& routing_;
  std::map<std::tuple<LayerKind, bool, bool, bool>, OperatorSums> sums_;
};

// Transformer layer l, the `index`-th of its virtual stage: its passes, what it keeps, and its
// parameters on this GPU.
Unit layer_unit(const ModelConfig& model, const ParallelLayout& layout, LayerSums& layer_sums, int l, int index) {
  const int t = layout.tp;
  const bool moe = model.is_moe_layer(l);
  // The first and last layers a recipe keeps in 16 bits, and the MTP layers a per-module recipe
  // puts there.
  const bool bf16 = is_quantised(layout.dtype) &&
                    (l < model.layers ? layout.bf16_layer(l, model.layers)
                                      : layout.module_precision.of(QuantModule::kMtp) == DType::kBf16);
  const OperatorSums& sums = layer_sums.of(l, moe, bf16);
  // Full recomputation may cover only the first layers of each virtual stage (block method).
  const bool recomputed = layout.fully_recomputed(index);
  const Recomputation recompute =
      layout.recompute == Recomputation::kFull && !recomputed ? Recomputation::kNone : layout.recompute;
  Unit u = unit_from(sums, recompute, true, true, layout.cp > 1);
  // Full recomputation keeps the layer's 16-bit input, 2sbh (Korthikanti et al.; s per CP rank).
  if (recomputed) {
    const double input_tokens =
        static_cast<double>(layout.micro_batch) * static_cast<double>(layout.sequence_length / layout.cp);
    u.activations = Bytes(2.0 * input_tokens * static_cast<double>(model.hidden));
    u.recomputed_working_set = std::max(Bytes(), sums.saved + sums.saved_scores - u.activations);
  }
  u.recomputed = recomputed;
  // Under full recomputation the modules give way (micro_batch_of).
  u.moe_recomputed = moe && layout.recompute != Recomputation::kFull && layout.recompute_modules.moe;
  u.moe_layer = moe;
  u.kind = model.layer_kind(l);
  u.layer = l;
  u.offloaded = l < layout.cpu_offloading_layers;
  const LayerParameterCounts lp = layer_parameters(model, l);
  const double experts =
      static_cast<double>(lp.routed_experts + lp.routed_vectors) / (layout.expert_tensor_parallel() * layout.ep);
  u.parameters =
      static_cast<double>(lp.attention + lp.mlp) / t + experts + static_cast<double>(lp.router + lp.latent_projections + lp.indexer + lp.vectors);
  u.expert_parameters = layout.ep > 1 || layout.expert_tensor_parallel() != t ? experts : 0.0;
  return u;
}

// The embedding (first virtual stage) and the output side (last): timed unless the options
// time transformer layers only.
Unit embedding_unit(const ModelConfig& model, const ParallelLayout& layout, const ComputeModel& cm,
                    const ParameterCounts& counts, bool timed) {
  Unit u = unit_from(sum_operators(cm, replayed_under_full_iteration(
                                             embedding_operators(model, micro_batch_of(layout), sharding_of(layout)), layout)),
                     layout.recompute, false, timed, false);
  u.parameters = static_cast<double>(counts.embedding) / layout.tp;
  u.embedding = timed;
  return u;
}

Unit output_unit(const ModelConfig& model, const ParallelLayout& layout, const ComputeModel& cm,
                 const ParameterCounts& counts, bool timed) {
  Unit u = unit_from(sum_operators(cm, replayed_under_full_iteration(
                                             output_operators(model, micro_batch_of(layout), sharding_of(layout)), layout)),
                     layout.recompute, false, timed, false);
  // A tied head is the embedding matrix; a last virtual stage on another stage than the first
  // keeps its own copy of it (in a V both are on stage 0).
  const int stages = layout.pp * layout.virtual_stages;
  const double head = model.tied_embeddings ? (layout.stage_of(stages - 1) != 0 ? static_cast<double>(counts.embedding) : 0.0)
                                            : static_cast<double>(counts.output_head);
  u.parameters = head / layout.tp + static_cast<double>(counts.final_norm);
  u.output_layer = timed;
  u.output_side = true;
  return u;
}

// DeepSeek's multi-token-prediction modules, after the model's layers on the last virtual stage
// (where Megatron places them with the loss): each its input (embedding lookup, two norms, the
// 2h → h projection), its Transformer layer (index layers + i; `index` its place in the stage,
// for block recomputation) and its head, the output head it shares with the model (so only the
// module's norms and projection are parameters of its own beside the layer's).
void append_mtp_modules(std::vector<Unit>& list, const ModelConfig& model, const ParallelLayout& layout,
                        const ComputeModel& cm, const ParameterCounts& counts, LayerSums& layer_sums, int index,
                        bool timed) {
  if (model.mtp_layers == 0) return;
  const double norm = static_cast<double>(counts.final_norm);  // one norm of the hidden width
  const double h = static_cast<double>(model.hidden);
  Unit input = unit_from(sum_operators(cm, replayed_under_full_iteration(
                                                 mtp_input_operators(model, micro_batch_of(layout), sharding_of(layout)), layout)),
                         layout.recompute, false, timed, false);
  input.parameters = 2.0 * h * h / layout.tp + 3.0 * norm;
  input.output_side = true;  // what it keeps is held as the head's is, on the last virtual stage
  Unit head = output_unit(model, layout, cm, counts, timed);
  head.parameters = 0;
  for (int i = 0; i < model.mtp_layers; ++i) {
    Unit layer = layer_unit(model, layout, layer_sums, model.layers + i, index + i);
    if (model.mtp_repeated && i > 0) {  // the first depth's weights again: nothing more to hold or reduce
      input.parameters = 0;
      layer.parameters = layer.expert_parameters = 0;
    }
    list.push_back(input);
    list.push_back(layer);
    list.push_back(head);
  }
}

}  // namespace

StagePlan plan_stages(const ModelConfig& model, const ParallelLayout& layout, const ComputeModel& cm,
                      const IterationOptions& options) {
  const int stages = layout.pp * layout.virtual_stages;
  const bool timed_ends = !options.transformer_layers_only;
  const ParameterCounts counts = count_parameters(model);
  StagePlan plan;
  plan.routing = model.moe ? route(*model.moe, layout) : Routing{};
  plan.virtual_stage_layers = virtual_stage_layers(layout, model);
  plan.units.resize(static_cast<size_t>(stages));
  LayerSums layer_sums(model, layout, cm, plan.routing);
  int first_layer = 0;
  for (int vs = 0; vs < stages; ++vs) {
    auto& list = plan.units[static_cast<size_t>(vs)];
    if (vs == 0) list.push_back(embedding_unit(model, layout, cm, counts, timed_ends));
    const int layers = plan.virtual_stage_layers[static_cast<size_t>(vs)];
    for (int l = first_layer; l < first_layer + layers; ++l) {
      list.push_back(layer_unit(model, layout, layer_sums, l, l - first_layer));
      plan.moe_layers += list.back().moe_layer ? 1 : 0;
    }
    first_layer += layers;
    if (vs == stages - 1) {
      append_mtp_modules(list, model, layout, cm, counts, layer_sums, layers, timed_ends);
      list.push_back(output_unit(model, layout, cm, counts, timed_ends));
    }
  }
  for (std::vector<Unit>& list : plan.units) {
    for (Unit& u : list) {
      // A repeated MTP depth holds no weights of its own: nothing to update.
      if (u.transformer_layer && u.parameters > 0) u.optimizer_compute = muon_orthogonalisation_time(model, u.layer, layout, cm);
    }
  }
  plan.schedule = pipeline_schedule_from(layout, compute_pass_times(plan.units));
  return plan;
}

std::vector<StagePassTimes> compute_pass_times(const std::vector<std::vector<Unit>>& units) {
  std::vector<StagePassTimes> pass_times(units.size());
  for (size_t vs = 0; vs < units.size(); ++vs) {
    StagePassTimes& times = pass_times[vs];
    for (const Unit& u : units[vs]) {
      times.forward += u.forward;
      times.input_backward += u.backward - u.weight_gradient;
      times.weight += u.weight_gradient;
    }
  }
  return pass_times;
}

std::shared_ptr<const PipelineSchedule> pipeline_schedule_from(const ParallelLayout& layout,
                                                               const std::vector<StagePassTimes>& vs_times) {
  return shared_pipeline_schedule(layout.schedule, layout.pp, static_cast<int>(layout.micro_batches()),
                                  layout.virtual_stages, vs_times, layout.microbatch_group);
}

Time compute_time_lower_bound(const StagePlan& plan, const ParallelLayout& layout) {
  const int p = layout.pp;
  const double m = static_cast<double>(std::max<int64_t>(1, layout.micro_batches()));
  const bool tail = !splits_backward(layout.schedule);
  std::vector<Time> work(static_cast<size_t>(p));
  for (size_t vs = 0; vs < plan.units.size(); ++vs) {
    for (const Unit& u : plan.units[vs]) work[static_cast<size_t>(layout.stage_of(static_cast<int>(vs)))] += u.forward + u.backward;
  }
  Time ahead, bound;  // ahead: the first virtual stages' passes of stages 0 … s − 1
  for (int s = 0; s < p; ++s) {
    bound = std::max(bound, ahead + Time::from_seconds(work[static_cast<size_t>(s)].seconds() * m));
    for (const Unit& u : plan.units[static_cast<size_t>(s)]) ahead += u.forward + (tail ? u.backward : Time::zero());
  }
  return bound;
}


}  // namespace parallax::iteration_detail
