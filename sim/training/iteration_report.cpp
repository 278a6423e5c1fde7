// The formats of one simulated training iteration (iteration_report.h).
#include "training/iteration_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "compute/gemm_efficiency.h"
#include "io/text_format.h"

namespace parallax {
namespace {

using TraceThreads = std::map<std::pair<int, std::string>, int>;  // (rank, stream) -> tid

// The stages' processes, their streams' threads and every task as a slice, a pass's kernels
// named by it ("F3", "B3", "W3"; with chunks "F3.1": micro-batch 3, chunk 1) as the schedule
// papers draw them and every task of a pass carrying it; the thread ids.
TraceThreads stage_events(const IterationResult& r, bool chunked, nlohmann::ordered_json& events) {
  TraceThreads threads;
  for (const TimelineSpan& span : r.timeline) {
    auto key = std::make_pair(span.rank, span.stream);
    if (threads.count(key)) continue;
    const int tid = static_cast<int>(threads.size()) + 1;
    threads[key] = tid;
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", span.rank}, {"tid", tid}, {"args", {{"name", span.stream}}}});
  }
  for (size_t s = 0; s < r.stages.size(); ++s) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", static_cast<int>(s)},
                      {"args", {{"name", format_text("pipeline stage %zu (%d layers)", s, r.stages[s].layers)}}}});
  }
  for (const TimelineSpan& span : r.timeline) {
    const std::string pass = span.pass ? to_string(*span.pass, chunked) : "";
    nlohmann::ordered_json slice{{"ph", "X"},
                                 {"name", span.pass && span.kind == WorkKind::kCompute ? pass : to_string(span.kind)},
                                 {"cat", span.stream},
                                 {"pid", span.rank},
                                 {"tid", threads.at(std::make_pair(span.rank, span.stream))},
                                 {"ts", span.start.seconds() * 1e6},
                                 {"dur", (span.finish - span.start).seconds() * 1e6}};
    if (span.pass) slice["args"] = {{"pass", pass}};
    events.push_back(std::move(slice));
  }
  return threads;
}

// Co-simulated: one process of the busiest links (one per link class). Each link has a
// utilisation counter (in %) and a thread with a slice per task that crossed it, spanning its
// transfers there, with a flow arrow from the task's own slice on its stream to it.
void link_events(const IterationResult& r, const TraceThreads& threads, nlohmann::ordered_json& events) {
  if (r.busiest_links.empty()) return;
  const int links_pid = static_cast<int>(r.stages.size());
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", links_pid}, {"args", {{"name", "busiest links"}}}});
  std::map<size_t, const TimelineSpan*> span_of;
  for (const TimelineSpan& span : r.timeline) span_of[span.task] = &span;
  int flow = 0;
  for (size_t n = 0; n < r.busiest_links.size(); ++n) {
    const LinkLoad& l = r.busiest_links[n];
    const std::string name = std::string(to_string(l.link_class)) + " " + l.from + " -> " + l.to;
    const int tid = static_cast<int>(n) + 1;
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", links_pid}, {"tid", tid}, {"args", {{"name", name}}}});
    for (const auto& [at, used] : l.timeline) {
      events.push_back({{"name", name}, {"ph", "C"}, {"pid", links_pid}, {"ts", at.seconds() * 1e6},
                        {"args", {{"utilisation %", 100 * used}}}});
    }
    for (const LinkUse& use : l.uses) {
      const auto found = span_of.find(use.task);
      if (found == span_of.end()) continue;
      const TimelineSpan& span = *found->second;
      const char* kind = to_string(span.kind);
      events.push_back({{"ph", "X"}, {"name", kind}, {"cat", "link"}, {"pid", links_pid}, {"tid", tid},
                        {"ts", use.start.seconds() * 1e6}, {"dur", (use.finish - use.start).seconds() * 1e6},
                        {"args", {{"stage", span.rank}, {"bytes", use.bytes.value()}}}});
      ++flow;
      events.push_back({{"ph", "s"}, {"name", kind}, {"cat", "link"}, {"id", flow}, {"pid", span.rank},
                        {"tid", threads.at(std::make_pair(span.rank, span.stream))}, {"ts", span.start.seconds() * 1e6}});
      events.push_back({{"ph", "f"}, {"bp", "e"}, {"name", kind}, {"cat", "link"}, {"id", flow}, {"pid", links_pid},
                        {"tid", tid}, {"ts", use.start.seconds() * 1e6}});
    }
  }
}

}  // namespace

std::string layout_description(const ParallelLayout& l) {
  std::string s = format_text("tp %d · pp %d · dp %d", l.tp, l.pp, l.dp);
  if (l.virtual_stages > 1) s += format_text(" · vpp %d", l.virtual_stages);
  if (l.microbatch_group > 0) s += format_text(" (micro-batch groups of %d)", l.microbatch_group);
  if (l.cp > 1) s += format_text(" · cp %d (%s)", l.cp, to_string(l.cp_comm));
  if (l.ep > 1) {
    s += format_text(" · ep %d%s%s%s", l.ep, l.moe_dispatcher == MoeDispatcher::kFlex ? " (flex)" : "",
                     l.moe_shared_expert_overlap ? " (shared experts overlapped)" : "",
                     l.moe_a2a_overlap ? " (all-to-alls overlapped)" : "");
  }
  if (l.expert_tensor_parallel() != l.tp) s += format_text(" · etp %d", l.expert_tensor_parallel());
  if (l.expert_gemms == ExpertGemms::kGrouped) s += " (grouped expert GEMMs)";
  if (l.expert_gemms == ExpertGemms::kSequential) s += " (experts one module each: SequentialMLP)";
  std::string dtype = to_string(l.dtype);
  if (l.dtype == DType::kFp8 && (l.fp8_recipe != Fp8Recipe::kDelayed || l.fp8_param_gather)) {
    dtype += format_text(" (%s scaling%s)", to_string(l.fp8_recipe), l.fp8_param_gather ? ", fp8 parameters" : "");
  }
  if (l.dtype == DType::kFp4) dtype += format_text(" (%s)", to_string(l.fp4_recipe));
  if (is_quantised(l.dtype) && l.bf16_layers_at_start + l.bf16_layers_at_end > 0) {
    dtype += format_text(", bf16 layers %d + %d", l.bf16_layers_at_start, l.bf16_layers_at_end);
  }
  if (l.module_precision.any()) dtype += ", " + to_string(l.module_precision);
  const std::string zero = l.hybrid_sharded() ? format_text("ZeRO-%d (HSDP: shards of %d, %d replicas)", static_cast<int>(l.zero_stage),
                                                            l.dp_shard, l.dp * l.cp / l.dp_shard)
                                              : format_text("ZeRO-%d", static_cast<int>(l.zero_stage));
  s += format_text(", %s, %s, mbs %lld, gbs %lld, seq %lld, %s%s", to_string(l.schedule), zero.c_str(),
                   static_cast<long long>(l.micro_batch), static_cast<long long>(l.global_batch),
                   static_cast<long long>(l.sequence_length), dtype.c_str(), l.sequence_parallel ? ", SP" : "");
  if (l.recompute == Recomputation::kSelective) s += ", selective recompute";
  if (l.recompute == Recomputation::kSelectiveOp) s += ", op-level selective checkpointing";
  if (l.recompute == Recomputation::kFull) {
    s += l.recompute_layers > 0 ? format_text(", full recompute of %d layers per stage", l.recompute_layers) : ", full recompute";
  }
  if (l.attention == AttentionKernel::kUnfused) s += ", unfused attention";
  if (!l.rope_fusion) s += ", unfused RoPE";
  if (l.moe_router_fusion) s += ", fused router";
  if (l.moe_load_balancing != LoadBalancingLoss::kAux) s += ", load balancing " + std::string(to_string(l.moe_load_balancing));
  if (!l.moe_expert_load.relative.empty()) s += ", router skew (given loads)";
  if (l.moe_expert_load.zipf_exponent != 0) s += format_text(", router skew (Zipf %g)", l.moe_expert_load.zipf_exponent);
  if (l.moe_capacity_factor) {
    s += format_text(", capacity factor %g%s", *l.moe_capacity_factor, l.moe_pad_to_capacity ? " (padded)" : "");
  }
  if (l.cuda_graphs != CudaGraphs::kNone) s += ", CUDA graphs (" + to_string(l.cuda_graphs, l.cuda_graph_scope) + ")";
  if (l.recompute_modules.any() && l.recompute != Recomputation::kFull) s += ", recompute " + to_string(l.recompute_modules);
  if (l.zero_stage == ZeroStage::kStage3 && l.dp * l.cp > 1 && (l.param_gather_per_tensor || !l.param_gather_prefetch)) {
    s += std::string(", ZeRO-3 gathers ") + (l.param_gather_per_tensor ? "per tensor" : "per layer") +
         (l.param_gather_prefetch ? "" : ", not prefetched");
  }
  if (l.optimizer == OptimizerKind::kMuon) s += ", Muon (Adam on the embedding and head)";
  if (l.precision_aware_optimizer) {
    s += format_text(", precision-aware Adam (%g B of state per parameter)", adam_state_bytes_per_parameter(l));
  }
  if (l.cpu_offloading_layers > 0) s += format_text(", activations of %d layers offloaded", l.cpu_offloading_layers);
  if (l.dp * l.cp > 1 && (l.grad_reduce_in_fp32 || !l.grad_reduce_overlap)) {
    s += format_text(", %s gradients reduced %s", l.grad_reduce_in_fp32 ? "fp32" : "bf16",
                   l.grad_reduce_overlap ? "during the backward" : "after the backward");
  }
  return s;
}

std::string gemm_model_description(const TrainingWorkload& job) { return job.gemm ? job.gemm->describe() : ShapeEfficiency().describe(); }

namespace {

// The offload kind is shown only where the layout offloads: every other report stays as it was.
bool kind_shown(const TrainingWorkload& job, int k) {
  return static_cast<WorkKind>(k) != WorkKind::kOffload || job.layout.cpu_offloading_layers > 0;
}

// {kind: value(kind)} over the communication kinds shown.
template <class Value>
nlohmann::ordered_json per_communication_kind(const TrainingWorkload& job, Value value) {
  nlohmann::ordered_json j;
  for (int k = 1; k < kWorkKinds; ++k) {
    if (kind_shown(job, k)) j[to_string(static_cast<WorkKind>(k))] = value(static_cast<size_t>(k));
  }
  return j;
}

nlohmann::ordered_json critical_path_json(const TrainingWorkload& job, const CriticalPath& c) {
  nlohmann::ordered_json path;
  for (int k = 0; k < kWorkKinds; ++k) {
    if (!kind_shown(job, k)) continue;
    path[std::string(to_string(static_cast<WorkKind>(k))) + "_s"] = c.by_kind[static_cast<size_t>(k)].seconds();
  }
  path["waiting_s"] = c.waiting.seconds();
  path["tasks"] = c.tasks;
  return path;
}

nlohmann::ordered_json memory_json(const MemoryBreakdown& m) {
  nlohmann::ordered_json mem;
  mem["parameters"] = m.parameters.value();
  mem["gradients"] = m.gradients.value();
  mem["optimizer_states"] = m.optimizer_states.value();
  mem["activations"] = m.activations.value();
  mem["communication_buffers"] = m.communication_buffers.value();
  mem["total"] = m.total().value();
  return mem;
}

// The links each kind's exposed time waited on, per kind that has any.
nlohmann::ordered_json exposed_by_link_json(const RankBreakdown& t) {
  nlohmann::ordered_json by_link;
  for (int k = 1; k < kWorkKinds; ++k) {
    nlohmann::ordered_json links = nlohmann::ordered_json::array();
    for (const auto& [name, time] : t.exposed_by_link[static_cast<size_t>(k)]) {
      links.push_back({{"link", name}, {"s", time.seconds()}});
    }
    if (!links.empty()) by_link[to_string(static_cast<WorkKind>(k))] = links;
  }
  return by_link;
}

nlohmann::ordered_json stage_json(const TrainingWorkload& job, const StageResult& s) {
  nlohmann::ordered_json st;
  st["stage"] = s.stage;
  st["layers"] = s.layers;
  st["compute_s"] = s.time.compute.seconds();
  st["compute_slowed_by_communication_s"] = s.compute_slowed_by_communication.seconds();
  st["exposed_communication_s"] = per_communication_kind(job, [&](size_t k) { return s.time.exposed[k].seconds(); });
  st["exposed_across_nodes_s"] =
      per_communication_kind(job, [&](size_t k) { return s.time.exposed_across_nodes[k].seconds(); });
  if (nlohmann::ordered_json by_link = exposed_by_link_json(s.time); !by_link.empty()) st["exposed_by_link"] = by_link;
  st["bubble_s"] = s.time.bubble.seconds();
  st["idle_s"] = s.time.idle.seconds();
  st["memory_bytes"] = memory_json(s.memory);
  st["bytes_sent"] = per_communication_kind(job, [&](size_t k) { return s.communication[k].sent.value(); });
  st["replica_slowdown"] = per_communication_kind(job, [&](size_t k) { return s.communication[k].replica_slowdown; });
  return st;
}

}  // namespace

nlohmann::ordered_json iteration_json(const TrainingWorkload& job, const IterationResult& r) {
  nlohmann::ordered_json j;
  j["model"] = job.model.name;
  j["topology"] = job.topology_file;
  j["gpus"] = r.gpus;
  j["layout"] = layout_description(job.layout);
  j["iteration_time_s"] = r.iteration_time.seconds();
  j["tokens_per_second"] = r.tokens_per_second;
  j["tokens_per_second_per_gpu"] = r.tokens_per_second_per_gpu;
  j["mfu"] = r.mfu;
  j["hfu"] = r.hfu;
  j["flop_convention"] = r.flop_convention;
  j["model_flops_per_token"] = r.model_flops_per_token.value();
  j["pipeline_bubble_fraction"] = r.pipeline_bubble_fraction;
  if (job.model.moe) {
    j["moe_expert_pace"] = r.moe_expert_pace;
    j["moe_dropped_fraction"] = r.moe_dropped_fraction;
    j["moe_dropped_token_slots"] = r.moe_dropped_token_slots;
  }
  j["peak_memory_bytes"] = r.peak_memory.value();
  j["gpu_memory_bytes"] = r.gpu_memory.value();
  j["out_of_memory"] = r.out_of_memory;
  j["simulated_ranks"] = r.simulated_ranks;
  j["symmetry"] = r.symmetry;
  if (!r.pipeline_split.empty()) j["pipeline_split"] = r.pipeline_split;
  j["network"] = r.network;
  j["critical_path"] = critical_path_json(job, r.critical_path);
  if (!r.busiest_links.empty()) {
    nlohmann::ordered_json links = nlohmann::ordered_json::array();
    for (const LinkLoad& l : r.busiest_links) {
      links.push_back({{"from", l.from}, {"to", l.to}, {"class", to_string(l.link_class)}, {"bytes", l.bytes.value()},
                       {"utilisation", l.utilisation}});
    }
    j["busiest_links"] = links;
  }
  j["compute"]["gemm_model"] = gemm_model_description(job);
  j["compute"]["sustained_fraction"] = job.compute.sustained_fraction;
  if (job.compute.attention_model != AttentionModel::kShape) {
    j["compute"]["attention_model"] = attention_model_name(job.compute.attention_model);
  }
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const StageResult& s : r.stages) stages.push_back(stage_json(job, s));
  j["stages"] = stages;
  return j;
}

// Chrome trace-event JSON (Perfetto, chrome://tracing): one process per simulated pipeline
// stage, one thread per stream; the gaps on the compute thread are the pipeline bubbles.
std::string iteration_trace_json(const TrainingWorkload& job, const IterationResult& r) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  const TraceThreads threads = stage_events(r, job.layout.virtual_stages > 1, events);
  link_events(r, threads, events);
  nlohmann::ordered_json doc;
  doc["displayTimeUnit"] = "ms";
  doc["otherData"]["model"] = job.model.name;
  doc["otherData"]["layout"] = layout_description(job.layout);
  doc["otherData"]["symmetry"] = r.symmetry;
  doc["traceEvents"] = events;
  return doc.dump() + "\n";
}

}  // namespace parallax
