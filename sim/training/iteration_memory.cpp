// Memory per GPU of a training iteration's ranks (iteration_memory.h).
#include "training/iteration_memory.h"

#include <algorithm>
#include <cmath>

#include "engine/invariant.h"
#include "training/memory_model.h"

namespace parallax::iteration_detail {

namespace {

// With activation offloading (pp = 1: one micro-batch in flight) the forward's peak: at the end of
// each layer, the kept layers so far and the offloaded ones whose window is still open.
Bytes offloading_forward_peak(const ParallelLayout& layout, const std::vector<Unit>& units) {
  std::vector<Bytes> offloaded(static_cast<size_t>(layout.cpu_offloading_layers));
  int layers = 0;
  for (const Unit& u : units) {
    if (u.offloaded) offloaded[static_cast<size_t>(u.layer)] = u.activations;
    layers += u.transformer_layer ? 1 : 0;
  }
  const std::vector<int> sync = cpu_offloading_sync_layers(layout.cpu_offloading_layers, layers);
  Bytes kept, peak;
  for (const Unit& u : units) {
    if (!u.transformer_layer) continue;
    if (!u.offloaded) kept += u.activations;
    Bytes open;
    for (size_t j = 0; j < sync.size() && static_cast<int>(j) <= u.layer; ++j) {
      if (sync[j] >= u.layer) open += offloaded[j];
    }
    peak = std::max(peak, kept + open);
  }
  return peak;
}

// Parameters, gradients and optimizer states of a stage holding psi dense and psi_experts expert
// parameters, sharded by the ZeRO stage over the ranks that share each; psi_ends of the dense
// ones are the embedding's and the output side's, which stay with Adam under Muon.
void model_states(const ParallelLayout& layout, double psi, double psi_experts, double psi_ends, MemoryBreakdown& mem) {
  const int data_parallel = layout.zero_shard_ranks();  // ranks sharing the model states
  const int expert_dp = layout.expert_data_parallel();
  const ZeroStage zero = layout.zero_stage;
  const bool zero3 = zero == ZeroStage::kStage3;
  const double gradient_bytes = iteration_detail::gradient_bytes(layout);
  const double adam_bytes = optimizer_state_bytes_per_parameter(layout, psi, psi_ends);
  const double expert_bytes = optimizer_state_bytes_per_parameter(layout, psi_experts, 0.0);
  const double n = data_parallel, ne = expert_dp;
  const double held = psi / (zero3 ? n : 1.0) + psi_experts / (zero3 ? ne : 1.0);
  const Bytes quantised_extra((parameter_bytes(layout) - kParameterBytes) * held +
                              quantised_weight_cache_bytes(layout) * (psi + psi_experts));
  mem.parameters = Bytes(kParameterBytes * held) + quantised_extra;
  const bool sharded_gradients = zero == ZeroStage::kStage2 || zero3;
  mem.gradients = Bytes(gradient_bytes * (psi / (sharded_gradients ? n : 1.0) + psi_experts / (sharded_gradients ? ne : 1.0)));
  const bool zero0 = zero == ZeroStage::kStage0;
  mem.optimizer_states = Bytes(adam_bytes * psi / (zero0 ? 1.0 : n) + expert_bytes * psi_experts / (zero0 ? 1.0 : ne));
  // The same total as the ZeRO paper's formula (2-byte gradients), split by what it holds.
  const Bytes states = zero_model_state_bytes(psi, zero, data_parallel, adam_bytes) +
                       zero_model_state_bytes(psi_experts, zero, expert_dp, expert_bytes) +
                       mem.gradients * ((gradient_bytes - kGradientBytes) / gradient_bytes) + quantised_extra;
  PARALLAX_INVARIANT(std::abs((mem.parameters + mem.gradients + mem.optimizer_states - states).value()) <=
                         1e-6 * states.value() + 1.0,
                     "training/iteration", Time::zero(), "model-state split disagrees with the ZeRO formula");
}

// Activations: what each operator keeps for its backward (layer_operators.h; for a GPT layer
// Korthikanti et al.'s sbh·(34 + 5as/h) form), per micro-batch in flight. A stage's layers are
// counted at their mean (dense and MoE layers differ); the output side's (the fp32 softmax of the
// cross-entropy, above all) at the peak number of micro-batches in flight in the last virtual
// stage until their B, 1 in 1F1B and the zero-bubble schedules, m in GPipe. Sets the stage's
// in_flight_micro_batches.
Bytes stage_activations(const ParallelLayout& layout, const StagePlan& plan, int s, StageMemory& stage) {
  const int v = layout.virtual_stages;
  const std::vector<std::vector<Unit>>& units = plan.units;
  std::vector<double> chunk_layers;
  for (int c = 0; c < v; ++c) chunk_layers.push_back(plan.virtual_stage_layers[static_cast<size_t>(layout.virtual_stage(s, c))]);
  const double held_layers = peak_in_flight(*plan.schedule, s, chunk_layers);
  stage.in_flight_micro_batches = stage.layers > 0 ? held_layers / stage.layers : 0.0;
  Bytes layer_activations, output_activations, working_set;
  for (int c = 0; c < v; ++c) {
    for (const Unit& u : units[static_cast<size_t>(layout.virtual_stage(s, c))]) {
      if (u.transformer_layer) layer_activations += u.activations;
      if (u.output_side) output_activations += u.activations;
      working_set = std::max(working_set, u.recomputed_working_set);
    }
  }
  // The peak falls in a backward (1F1B's first, GPipe's): what is held plus what the
  // recomputation of the layer being back-propagated re-creates, one layer at a time.
  Bytes activations = stage.layers > 0 ? layer_activations * (held_layers / stage.layers) + working_set : Bytes();
  if (layout.cpu_offloading_layers > 0) activations = offloading_forward_peak(layout, units.front());
  if (output_activations > Bytes()) {
    std::vector<double> last_chunk(static_cast<size_t>(v), 0.0);
    last_chunk.back() = 1.0;
    // Its bulk, the softmax, is read by the logits' input gradient (B), not by W.
    activations += output_activations * peak_in_flight(*plan.schedule, s, last_chunk, true);
  }
  return activations;
}

// Communication buffers in flight: a pipeline send and receive, the largest gradient bucket,
// ZeRO-3's gathered parameters, context parallelism's K/V blocks or Ulysses' Q, K, V.
Bytes communication_buffers(const ParallelLayout& layout, const MessageSizes& sizes, double largest_unit) {
  const bool dp_comm = layout.dp * layout.cp > 1;
  const bool ring_attention = layout.cp > 1 && layout.cp_comm == ContextParallelComm::kRing;
  Bytes buffers;
  if (layout.pp > 1) buffers += sizes.pp * 2.0;  // one send and one receive in flight
  if (dp_comm) buffers += Bytes(largest_unit * iteration_detail::gradient_bytes(layout));
  if (layout.zero_stage == ZeroStage::kStage3 && dp_comm) {
    buffers += Bytes(largest_unit * parameter_bytes(layout) * (layout.param_gather_prefetch ? 2.0 : 1.0));
  }
  // The K/V block being sent and the one arriving; Ulysses' head-sharded Q, K, V.
  if (ring_attention) buffers += sizes.kv_block * 2.0;
  if (layout.cp > 1 && !ring_attention) buffers += sizes.ulysses_qkv;
  return buffers;
}

}  // namespace

std::vector<StageMemory> stage_memory(const ModelConfig& model, const ParallelLayout& layout, const StagePlan& plan) {
  const int p = layout.pp, v = layout.virtual_stages;
  const MessageSizes sizes = message_sizes(model, layout);
  std::vector<StageMemory> out(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    StageMemory& stage = out[static_cast<size_t>(s)];
    double largest_unit = 0;
    for (int c = 0; c < v; ++c) {
      const size_t vs = static_cast<size_t>(layout.virtual_stage(s, c));
      stage.layers += plan.virtual_stage_layers[vs];
      for (const Unit& u : plan.units[vs]) {
        stage.parameters += u.parameters;
        stage.expert_parameters += u.expert_parameters;
        if (!u.transformer_layer) stage.end_parameters += u.parameters;
        largest_unit = std::max(largest_unit, u.parameters);
      }
    }
    model_states(layout, stage.parameters - stage.expert_parameters, stage.expert_parameters, stage.end_parameters,
                 stage.memory);
    stage.memory.activations = stage_activations(layout, plan, s, stage);
    stage.memory.communication_buffers = communication_buffers(layout, sizes, largest_unit);
  }
  return out;
}

}  // namespace parallax::iteration_detail

namespace parallax {

namespace {

IterationMemory memory_of(const ModelConfig& model, const ParallelLayout& layout, const GpuSpec& gpu,
                          const iteration_detail::StagePlan& plan) {
  IterationMemory out;
  for (const iteration_detail::StageMemory& m : iteration_detail::stage_memory(model, layout, plan)) {
    out.stages.push_back(m.memory);
    out.in_flight_micro_batches.push_back(m.in_flight_micro_batches);
    out.peak_memory = std::max(out.peak_memory, m.memory.total());
  }
  out.gpu_memory = gpu.memory;
  out.out_of_memory = out.peak_memory > gpu.memory;
  return out;
}

}  // namespace

IterationEstimate estimate_iteration(const ModelConfig& model, const ParallelLayout& layout, const GpuSpec& gpu,
                                     const IterationOptions& options) {
  validate(layout, model, layout.world_size());
  const ComputeModel cm(gpu, options.compute, options.gemm_efficiency);  // pass times set zero-bubble orders
  const iteration_detail::StagePlan plan = iteration_detail::plan_stages(model, layout, cm, options);
  return IterationEstimate{memory_of(model, layout, gpu, plan), iteration_detail::compute_time_lower_bound(plan, layout)};
}

IterationMemory estimate_memory(const ModelConfig& model, const ParallelLayout& layout, const GpuSpec& gpu,
                                const IterationOptions& options) {
  return estimate_iteration(model, layout, gpu, options).memory;
}

}  // namespace parallax
