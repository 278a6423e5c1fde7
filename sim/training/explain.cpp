// `parallax train --explain` (explain.h).
#include "training/explain.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "io/input_error.h"

namespace parallax {
namespace {

struct Knob {
  std::string name;
  std::string flags;
  std::function<bool(const ParallelLayout&)> applies;
  std::function<void(ParallelLayout&, WorkloadOverrides&)> apply;
};

constexpr PipelineScheduleKind kInterleaved = PipelineScheduleKind::kInterleavedOneFOneB;

// Whether a 1F1B pipeline can move to schedule `kind` (DualPipeV: 2p micro-batches), with
// `overlap` its all-to-alls overlapped across micro-batches too (where they can be).
std::function<bool(const ParallelLayout&)> from_1f1b(PipelineScheduleKind kind, bool overlap) {
  return [kind, overlap](const ParallelLayout& l) {
    if (l.pp < 2 || l.schedule != PipelineScheduleKind::kOneFOneB) return false;
    if (kind == PipelineScheduleKind::kDualPipeV && l.micro_batches() < 2 * int64_t{l.pp}) return false;
    ParallelLayout moved = l;
    moved.schedule = kind;
    return !overlap || (!l.moe_a2a_overlap && moved.moe_a2a_overlap_possible());
  };
}

// The move itself, in the layout and as flags: the schedule with its chunks (interleaved vpp 2,
// a V's two), and with `overlap` the all-to-alls overlapped.
std::function<void(ParallelLayout&, WorkloadOverrides&)> to_schedule(PipelineScheduleKind kind, bool overlap) {
  return [kind, overlap](ParallelLayout& l, WorkloadOverrides& o) {
    l.schedule = kind;
    l.virtual_stages = kind == kInterleaved || v_shaped(kind) ? 2 : 1;
    o.schedule = to_string(kind);
    if (kind == kInterleaved) o.vpp = 2;
    if (overlap) {
      l.moe_a2a_overlap = true;
      o.moe_a2a_overlap = true;
    }
  };
}

std::vector<Knob> knobs(const ModelConfig& model) {
  const bool shared_experts = model.moe && model.moe->shared_experts > 0;
  return {
      {"tp_comm_overlap on", "--tp-comm-overlap on", [](const ParallelLayout& l) { return l.tp > 1 && !l.tp_comm_overlap; },
       [](ParallelLayout& l, WorkloadOverrides& o) { l.tp_comm_overlap = true; o.tp_comm_overlap = true; }},
      {"shared experts overlapped", "--moe-shared-expert-overlap on",
       [shared_experts](const ParallelLayout& l) { return shared_experts && l.ep > 1 && !l.moe_shared_expert_overlap; },
       [](ParallelLayout& l, WorkloadOverrides& o) {
         l.moe_shared_expert_overlap = true;
         o.moe_shared_expert_overlap = true;
       }},
      {"all-to-alls beside the other micro-batch's kernels (combined 1F1B, DualPipeV's pairs)", "--moe-a2a-overlap on",
       [](const ParallelLayout& l) { return !l.moe_a2a_overlap && l.moe_a2a_overlap_possible(); },
       [](ParallelLayout& l, WorkloadOverrides& o) { l.moe_a2a_overlap = true; o.moe_a2a_overlap = true; }},
      {"grouped expert GEMMs (Megatron's moe_use_grouped_tensor)", "--expert-gemm grouped",
       [moe = model.moe.has_value()](const ParallelLayout& l) { return moe && l.expert_gemms != ExpertGemms::kGrouped; },
       [](ParallelLayout& l, WorkloadOverrides& o) {
         l.expert_gemms = ExpertGemms::kGrouped;
         o.expert_gemm = "grouped";
       }},
      {"fused router (Megatron's moe_router_fusion)", "--moe-router-fusion on",
       [moe = model.moe.has_value()](const ParallelLayout& l) { return moe && !l.moe_router_fusion; },
       [](ParallelLayout& l, WorkloadOverrides& o) { l.moe_router_fusion = true; o.moe_router_fusion = true; }},
      {"grad_reduce_overlap on", "--grad-reduce-overlap on",
       [](const ParallelLayout& l) { return l.dp * l.cp > 1 && !l.grad_reduce_overlap; },
       [](ParallelLayout& l, WorkloadOverrides& o) { l.grad_reduce_overlap = true; o.grad_reduce_overlap = true; }},
      {"param_gather_prefetch on", "--param-gather-prefetch on",
       [](const ParallelLayout& l) {
         return l.dp * l.cp > 1 && l.zero_stage != ZeroStage::kStage0 && !l.param_gather_prefetch;
       },
       [](ParallelLayout& l, WorkloadOverrides& o) { l.param_gather_prefetch = true; o.param_gather_prefetch = true; }},
      {"sequence_parallel on", "--sequence-parallel on", [](const ParallelLayout& l) { return l.tp > 1 && !l.sequence_parallel; },
       [](ParallelLayout& l, WorkloadOverrides& o) { l.sequence_parallel = true; o.sequence_parallel = true; }},
      {"interleaved 1F1B, vpp 2", "--schedule interleaved_1f1b --vpp 2", from_1f1b(kInterleaved, false),
       to_schedule(kInterleaved, false)},
      {"interleaved 1F1B, vpp 2, all-to-alls overlapped (combined 1F1B)",
       "--schedule interleaved_1f1b --vpp 2 --moe-a2a-overlap on", from_1f1b(kInterleaved, true),
       to_schedule(kInterleaved, true)},
      {"zero-bubble schedule (ZB-H1)", "--schedule zb_h1", from_1f1b(PipelineScheduleKind::kZeroBubbleH1, false),
       to_schedule(PipelineScheduleKind::kZeroBubbleH1, false)},
      {"zero-bubble V schedule (ZB-V)", "--schedule zb_v", from_1f1b(PipelineScheduleKind::kZeroBubbleV, false),
       to_schedule(PipelineScheduleKind::kZeroBubbleV, false)},
      {"DualPipeV (V-shaped, overlapped forward-and-backward chunks)", "--schedule dualpipe_v",
       from_1f1b(PipelineScheduleKind::kDualPipeV, false), to_schedule(PipelineScheduleKind::kDualPipeV, false)},
      // What its pairs are for (DeepSeek-V3 §3.2.1): each one's all-to-alls beside the other's kernels.
      {"DualPipeV, its pairs hiding the all-to-alls", "--schedule dualpipe_v --moe-a2a-overlap on",
       from_1f1b(PipelineScheduleKind::kDualPipeV, true), to_schedule(PipelineScheduleKind::kDualPipeV, true)},
      {"recompute selective instead of full", "--recompute selective",
       [](const ParallelLayout& l) { return l.recompute == Recomputation::kFull; },
       [](ParallelLayout& l, WorkloadOverrides& o) { l.recompute = Recomputation::kSelective; o.recompute = "selective"; }},
      {"no recomputation instead of selective", "--recompute none",
       [](const ParallelLayout& l) { return l.recompute == Recomputation::kSelective; },
       [](ParallelLayout& l, WorkloadOverrides& o) { l.recompute = Recomputation::kNone; o.recompute = "none"; }},
      {"no recomputation instead of op-level checkpointing", "--recompute none",
       [](const ParallelLayout& l) { return l.recompute == Recomputation::kSelectiveOp; },
       [](ParallelLayout& l, WorkloadOverrides& o) { l.recompute = Recomputation::kNone; o.recompute = "none"; }},
      {"micro-batch x2", "--mbs",
       [](const ParallelLayout& l) { return l.global_batch % (int64_t{l.dp} * l.micro_batch * 2) == 0; },
       [](ParallelLayout& l, WorkloadOverrides& o) {
         l.micro_batch *= 2;
         o.micro_batch = l.micro_batch;
       }},
      {"DP innermost below PP (rank order tp-cp-ep-dp-pp)", "--rank-order tp-cp-ep-dp-pp",
       [](const ParallelLayout& l) { return l.pp > 1 && l.dp > 1 && l.rank_order == "tp-cp-ep-pp-dp"; },
       [](ParallelLayout& l, WorkloadOverrides& o) { l.rank_order = o.rank_order = "tp-cp-ep-dp-pp"; }},
      {"PP innermost below DP (rank order tp-cp-ep-pp-dp)", "--rank-order tp-cp-ep-pp-dp",
       [](const ParallelLayout& l) { return l.pp > 1 && l.dp > 1 && l.rank_order == "tp-cp-ep-dp-pp"; },
       [](ParallelLayout& l, WorkloadOverrides& o) { l.rank_order = o.rank_order = "tp-cp-ep-pp-dp"; }},
  };
}

// The smallest value from 1 to below − 1 of a count of layers in the layout (`field`) with which
// it fits in memory (memory only: estimate_memory); 0 when none does.
int fewest_layers_that_fit(const ModelConfig& model, ParallelLayout l, int ParallelLayout::*field, int below,
                           const GpuSpec& gpu, const IterationOptions& options) {
  for (l.*field = 1; l.*field < below; ++(l.*field)) {
    if (!estimate_memory(model, l, gpu, options).out_of_memory) return l.*field;
  }
  return 0;
}

// Out of memory without pipelining or recomputation: the fewest layers whose activations, moved to
// host memory, let the layout fit; 0 when none does or cannot.
int fewest_offloaded_layers_that_fit(const ModelConfig& model, const ParallelLayout& layout, const GpuSpec& gpu,
                                     const IterationOptions& options) {
  if (!layout.activation_offloading_possible() || layout.cpu_offloading_layers > 0 || !(gpu.host_bandwidth.value() > 0)) {
    return 0;
  }
  return fewest_layers_that_fit(model, layout, &ParallelLayout::cpu_offloading_layers, model.layers, gpu, options);
}

// Full recomputation with memory to spare: the fewest layers per virtual stage that, recomputed
// (Megatron's block method), still let the layout fit; 0 when the layout does not fit as it is or
// no smaller block fits.
int fewest_recomputed_layers_that_fit(const ModelConfig& model, const ParallelLayout& layout, const GpuSpec& gpu,
                                      const IterationOptions& options) {
  if (layout.recompute != Recomputation::kFull) return 0;
  const std::vector<int> per_stage = virtual_stage_layers(layout, model);
  const int most = *std::max_element(per_stage.begin(), per_stage.end());
  const int now = layout.recompute_layers > 0 ? std::min(layout.recompute_layers, most) : most;
  return fewest_layers_that_fit(model, layout, &ParallelLayout::recompute_layers, now, gpu, options);
}

}  // namespace

std::vector<Suggestion> explain_layout(const ModelConfig& model, const ParallelLayout& layout, const Topology& topology,
                                       const IterationOptions& options, const IterationResult& base,
                                       const std::function<void(size_t done, size_t total)>& progress) {
  std::vector<Suggestion> out;
  std::vector<Knob> list = knobs(model);
  if (base.out_of_memory) {
    const int n = fewest_offloaded_layers_that_fit(model, layout, topology.gpu_spec_of(topology.gpus()[0]), options);
    if (n > 0) {
      list.push_back({"activations of " + std::to_string(n) + " layers offloaded", "--cpu-offloading-layers " + std::to_string(n),
                      [](const ParallelLayout&) { return true; },
                      [n](ParallelLayout& l, WorkloadOverrides& o) { l.cpu_offloading_layers = n; o.cpu_offloading_layers = n; }});
    }
  }
  if (!base.out_of_memory) {
    const int n = fewest_recomputed_layers_that_fit(model, layout, topology.gpu_spec_of(topology.gpus()[0]), options);
    if (n > 0) {
      list.push_back({"full recomputation of only " + std::to_string(n) + (n == 1 ? " layer" : " layers") + " per stage",
                      "--recompute-layers " + std::to_string(n), [](const ParallelLayout&) { return true; },
                      [n](ParallelLayout& l, WorkloadOverrides& o) { l.recompute_layers = n; o.recompute_layers = n; }});
    }
  }
  // Fully sharded over more data-parallel ranks than one node holds: shard within the node,
  // replicate across nodes (HSDP), where the node holds more than one of them.
  const int per_node = std::max(1, static_cast<int>(topology.gpu_count()) / std::max(1, topology.node_count()));
  if (const int shard = node_shard_ranks(layout, per_node);
      layout.zero_stage == ZeroStage::kStage3 && !layout.hybrid_sharded() && shard > 1 && shard < layout.dp * layout.cp) {
    list.push_back({"hybrid sharding within each node (HSDP, shards of " + std::to_string(shard) + ")",
                    "--dp-shard " + std::to_string(shard), [](const ParallelLayout&) { return true; },
                    [shard](ParallelLayout& l, WorkloadOverrides& o) { l.dp_shard = shard; o.dp_shard = shard; }});
  }
  if (layout.recompute_modules.moe && layout.recompute != Recomputation::kFull) {
    // Megatron's whole-MoE recomputation is the costliest module: the same list without it.
    RecomputeModules lighter = layout.recompute_modules;
    lighter.moe = false;
    const std::string names = to_string(lighter);
    std::string listed = names;
    std::replace(listed.begin(), listed.end(), '+', ',');
    list.push_back({"MoE blocks kept instead of recomputed", "--recompute-modules \"" + listed + "\"",
                    [](const ParallelLayout&) { return true; },
                    [lighter, listed](ParallelLayout& l, WorkloadOverrides& o) {
                      l.recompute_modules = lighter;
                      o.recompute_modules = listed;
                    }});
  }
  for (const Knob& k : list) {
    if (!k.applies(layout)) continue;
    Suggestion s;
    s.knob = k.name;
    s.layout = layout;
    k.apply(s.layout, s.overrides);
    s.flags = k.flags;
    if (s.overrides.micro_batch) s.flags = "--mbs " + std::to_string(*s.overrides.micro_batch);
    try {
      validate(s.layout, model, static_cast<int>(topology.gpu_count()));
    } catch (const InputError&) {
      continue;  // e.g. micro-batches not a multiple of pp for the interleaved schedule
    }
    out.push_back(std::move(s));
  }
  if (progress) progress(0, out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    Suggestion& s = out[i];
    const IterationResult r = simulate_iteration(model, s.layout, topology, options);
    s.iteration_time = r.iteration_time;
    s.delta = r.iteration_time - base.iteration_time;
    s.bubble_fraction = r.pipeline_bubble_fraction;
    s.fits = !r.out_of_memory;
    if (progress) progress(i + 1, out.size());
  }
  std::stable_sort(out.begin(), out.end(), [](const Suggestion& a, const Suggestion& b) {
    if (a.fits != b.fits) return a.fits;
    return a.delta < b.delta;
  });
  return out;
}

}  // namespace parallax
