// The units of a training iteration (internal to iteration.cpp and iteration_memory.cpp):
// each virtual stage's embedding, transformer layers and output layer as one GPU runs them,
// their pass times on the compute model, the parameters they hold and the activations they
// keep, and the pipeline schedule those pass times give. Time and memory are both built on it.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <vector>

#include "compute/compute_model.h"
#include "model/layer_operators.h"
#include "model/model_config.h"
#include "training/iteration.h"
#include "training/parallel_layout.h"
#include "training/pipeline_schedule.h"

namespace parallax::iteration_detail {

// A stretch of one pass's compute; the attention core is its own segment under context
// parallelism, where communication interleaves with it.
enum class AttentionPass : uint8_t { kNone, kForward, kBackward };
struct Segment {
  Time compute;
  AttentionPass attention = AttentionPass::kNone;
};

// A pass's segments, held in place: a stage's units are copies of one layer's, and a search
// builds them for every layout, so copying one must not allocate. Six at most: full
// recomputation's backward replays the forward's three before its own three.
class SegmentList {
 public:
  static constexpr size_t kCapacity = 6;
  SegmentList() = default;
  SegmentList(std::initializer_list<Segment> segments) {
    for (const Segment& s : segments) push_back(s);
  }
  void push_back(const Segment& s) {
    if (size_ == kCapacity) throw std::logic_error("a pass has more than six segments");
    items_[size_++] = s;
  }
  const Segment* data() const { return items_.data(); }
  const Segment* begin() const { return items_.data(); }
  const Segment* end() const { return items_.data() + size_; }
  size_t size() const { return size_; }
  Segment& operator[](size_t i) { return items_[i]; }

 private:
  std::array<Segment, kCapacity> items_{};
  size_t size_ = 0;
};

// A layer, the embedding or the output layer of one virtual stage, on one GPU.
struct Unit {
  Time forward;
  Time backward;  // recomputation included
  SegmentList forward_segments;   // add up to forward
  SegmentList backward_segments;  // add up to backward
  // Zero-bubble schedules split the backward: B (input gradients) and W (the GEMMs' weight
  // gradients, each the volume of its forward, so timed as the forward GEMM).
  SegmentList input_gradient_segments;  // add up to backward − weight_gradient
  Time weight_gradient;
  // Of the passes above, a MoE layer's shared experts' kernels (a recomputed forward included),
  // and of the backward the weight gradients: moe_shared_expert_overlap runs them beside the
  // dispatch and combine.
  Time shared_expert_forward, shared_expert_backward, shared_expert_weight_gradient;
  Flops weight_gradient_flops;
  Flops forward_flops;
  Flops backward_flops;
  double parameters = 0;  // held by this GPU (TP and EP shards)
  // Of them, the routed experts' when ep > 1: reduced and sharded over the expert-DP group.
  // With ep = 1 that group is the DP group, so they stay with the rest (one bucket, as dense).
  double expert_parameters = 0;
  Time optimizer_compute;  // this GPU's Muon orthogonalisation of the layer's matrices (optimizer_cost.h)
  bool transformer_layer = false;  // any layer of the model (a hybrid model's single blocks too)
  LayerKind kind = LayerKind::kTransformer;
  bool moe_layer = false;
  int layer = -1;             // its transformer layer's index in the model, −1 for the ends
  bool offloaded = false;     // its activations go to host memory (ParallelLayout::cpu_offloading_layers)
  bool recomputed = false;    // fully recomputed: its backward re-runs its forward, communication included
  bool moe_recomputed = false;  // its MoE block recomputed (RecomputeModules::moe), all-to-alls and TP collectives included
  bool embedding = false;     // the input side of the first virtual stage
  bool output_layer = false;  // the output side of the last one (when timed)
  bool output_side = false;   // the output side, timed or not
  Bytes activations;          // kept from one micro-batch's forward for its backward
  // Re-created by its recomputation and alive during its backward, beyond `activations`: a
  // fully recomputed layer's whole set less the input it kept, the unfused core's s×s tensors
  // under selective recomputation, what op-level checkpointing re-creates (Megatron's
  // recompute_modules are not counted here).
  Bytes recomputed_working_set;
};

// How much longer than its kernels each pass of a unit takes because the GPU waits for the host
// to issue them (issued_stream_time): the forward in model order, the backward in reverse; 1 when
// the host keeps ahead. Every operator of the pass is stretched by it, so that its parts still
// add up to the pass.
struct PassStretch {
  double forward = 1, backward = 1;
};
PassStretch host_stretch(const ComputeModel& cm, const std::vector<ModelOperator>& ops);
/// t × factor, to the picosecond; t itself when the factor is 1.
Time stretched(Time t, double factor);
/// The embedding's, the output side's or an MTP input's operators, marked as replayed from a CUDA
/// graph when the layout graphs the whole iteration (a layer's are marked by
/// timed_layer_operators, by the layout's scope).
std::vector<ModelOperator> replayed_under_full_iteration(std::vector<ModelOperator> ops, const ParallelLayout& layout);

struct OperatorSums {
  Time forward, backward, attention_forward, attention_backward;
  Time forward_before_attention, backward_before_attention;  // the operators ahead of the core
  Time weight_before_attention, weight_after_attention;      // the GEMMs' weight gradients
  Time shared_expert_forward, shared_expert_backward, shared_expert_weight;  // ModelOperator::shared_expert
  Flops forward_flops, backward_flops, attention_forward_flops, weight_flops;
  Bytes saved, saved_scores;  // activations kept for the backward (layer_operators.h)
  Bytes regenerated;          // re-created by recomputation for the backward (ModelOperator::regenerated)
};

// The router's spread of a MoE layer's token-slots, in units of the uniform share: expert i
// gets uᵢ = E·wᵢ/Σw (1 each when uniform) and processes qᵢ = min(uᵢ, c) under capacity factor c.
struct Routing {
  double pace = 1;           // max qᵢ: the busiest expert sets the grouped GEMMs' rows
  double processed = 1;      // Σqᵢ/E: share of the slots computed (and sent), padding included
  double busiest_rank = 1;   // max over EP ranks of its experts' mean qᵢ: its all-to-all share
  double dropped = 0;        // Σ max(uᵢ − c, 0)/E: share of the routed slots dropped
};

/// Message sizes of one micro-batch on one GPU. S = b·(s/cp)·h activation elements; the PP
/// send carries S/tp: with SP each rank holds that slice; without SP the ranks scatter the
/// tensor and the receivers all-gather it (Megatron-LM's scatter_gather_tensors_in_pipeline,
/// DeepSpeed pipeline engine's partitioned activations and gradients). Context parallelism, per CP rank
/// of T_cp = b·s/cp tokens: ring attention passes K/V blocks of T_cp·kv·(d_qk + d_v) elements
/// (kv the KV heads of a TP rank); Ulysses sends Q, K and V (T_cp·(H/t·d_qk + kv·(d_qk + d_v)),
/// KV heads fewer than cp replicated so that each CP rank receives one) to their head owners
/// and the output (T_cp·H/t·d_v) back. In activation_dtype of the layout's dtype.
struct MessageSizes {
  Bytes activation;
  Bytes pp;       ///< the tokens a rank holds between layers: S, or S/tp with SP
  Bytes pp_send;  ///< what a rank sends to the next stage: S/tp (SP, or Megatron's and DeepSpeed's scatter-gather)
  Bytes kv_block;
  Bytes ulysses_qkv;
  Bytes ulysses_output;
};
MessageSizes message_sizes(const ModelConfig& model, const ParallelLayout& layout);

/// What every stage runs, before any communication is placed.
struct StagePlan {
  std::vector<std::vector<Unit>> units;   ///< per virtual stage, in forward order
  std::vector<int> virtual_stage_layers;  ///< transformer layers per virtual stage
  int moe_layers = 0;
  Routing routing;
  std::shared_ptr<const PipelineSchedule> schedule;  ///< shared_pipeline_schedule's
};

/// The operators' times, FLOPs and saved activations, summed.
OperatorSums sum_operators(const ComputeModel& cm, const std::vector<ModelOperator>& ops);

// With `split_attention` (context parallelism) a transformer layer's passes are cut around
// the attention core: forward = before, core, after; backward = after, core, before, in
// reverse, with selective recomputation re-running the core's forward ahead of its backward
// and full recomputation the whole forward ahead of the backward.
Unit unit_from(const OperatorSums& s, Recomputation recompute, bool transformer_layer, bool timed, bool split_attention);

Routing route(const MoeConfig& moe, const ParallelLayout& layout);

/// The micro-batch and the sharding that a layout gives every layer's operators.
MicroBatch micro_batch_of(const ParallelLayout& layout);
ShardingFactors sharding_of(const ParallelLayout& layout);

/// Layer `layer`'s operators under `layout` (`bf16`: its GEMMs in 16 bits, as the ends of a
/// quantised run may be), a MoE layer's routed experts at `expert_rows` times their average
/// rows (Routing's pace for time, its processed share for work).
std::vector<ModelOperator> timed_layer_operators(const ModelConfig& model, const ParallelLayout& layout, int layer,
                                                 bool bf16, double expert_rows);

/// Every virtual stage's units (the embedding on the first, the output layer on the last) and
/// the schedule their pass times give (zero-bubble orders follow them).
StagePlan plan_stages(const ModelConfig& model, const ParallelLayout& layout, const ComputeModel& cm,
                      const IterationOptions& options);

/// One micro-batch's forward, input-gradient (B: the backward less the weight gradients) and
/// weight-gradient (W) kernel times per virtual stage: what zero-bubble orders follow.
std::vector<StagePassTimes> compute_pass_times(const std::vector<std::vector<Unit>>& units);

/// The layout's schedule, its zero-bubble orders made with `vs_times` (one per virtual stage).
std::shared_ptr<const PipelineSchedule> pipeline_schedule_from(const ParallelLayout& layout,
                                                               const std::vector<StagePassTimes>& vs_times);

/// A lower bound on the iteration from the plan's compute alone. Each stage's stream runs its
/// passes of all m micro-batches one after another; it cannot start before the stages ahead of
/// it have run the first micro-batch's forward, and (except in the zero-bubble schedules, whose
/// deferred weight gradients may fill the tail) its last backward still has theirs to run.
Time compute_time_lower_bound(const StagePlan& plan, const ParallelLayout& layout);

}  // namespace parallax::iteration_detail
