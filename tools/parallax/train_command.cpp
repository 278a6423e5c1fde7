// `parallax train WORKLOAD.json`: one iteration of a training job (time, MFU, breakdown,
// memory). Thin: the workload file is read by sim/training/workload_loader.h, the simulation is
// sim/training/iteration.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "compute/measured_gemm_table.h"
#include "io/atomic_file.h"
#include "io/input_error.h"
#include "io/json_reader.h"
#include "io/text_format.h"
#include "parallax/cli_support.h"
#include "parallax/commands.h"
#include "parallax/text_table.h"
#include "topology/topology_loader.h"
#include "training/iteration.h"
#include "model/model_loader.h"
#include "model/parameter_count.h"
#include "training/explain.h"
#include "training/iteration_plot.h"
#include "training/iteration_report.h"
#include "training/operator_breakdown.h"
#include "training/workload_loader.h"
#include "units/unit_parse.h"

namespace parallax::cli {
namespace {

namespace fs = std::filesystem;

const std::string& kModelsDir = bundled_models_dir();
const std::string& kTopologiesDir = topologies_dir();

struct TrainArgs {
  std::string workload;
  std::optional<int> tp, pp, dp, vpp, cp, ep, expert_tp, zero, nodes, cpu_offloading_layers, recompute_layers, dp_shard, microbatch_group;
  std::optional<int64_t> micro_batch, global_batch, sequence;
  std::string schedule, recompute, dtype, cp_comm, attention, moe_dispatcher, expert_gemm, cuda_graphs,
      moe_router_load_balancing, optimizer;
  std::string network = "flow";
  std::string json;
  std::string trace;
  std::string plot_dir;
  std::string gemm_table;
  std::optional<double> sustained_fraction, moe_capacity_factor, moe_expert_skew;
  std::string measured_step;  // a time string: fit σ to it
  std::string sequence_parallel, tp_comm_overlap, grad_reduce_overlap, param_gather_prefetch,
      param_gather_per_tensor, moe_shared_expert_overlap, moe_a2a_overlap, rope_fusion, moe_router_fusion,
      moe_pad_to_capacity, account_for_embedding, account_for_loss;  // "on" / "off"
  std::string rank_order;
  std::optional<std::string> recompute_modules, module_precision;
  bool explain = false;
  bool ops = false;
};

std::optional<bool> switch_of(const std::string& v) {
  if (v.empty()) return std::nullopt;
  return v == "on";
}

using Job = TrainingWorkload;

Job read_job(const TrainArgs& a) {
  WorkloadOverrides o;
  o.tp = a.tp;
  o.pp = a.pp;
  o.dp = a.dp;
  o.vpp = a.vpp;
  o.microbatch_group = a.microbatch_group;
  o.cp = a.cp;
  o.ep = a.ep;
  o.expert_tp = a.expert_tp;
  o.cpu_offloading_layers = a.cpu_offloading_layers;
  o.recompute_layers = a.recompute_layers;
  o.zero = a.zero;
  o.dp_shard = a.dp_shard;
  o.nodes = a.nodes;
  o.micro_batch = a.micro_batch;
  o.global_batch = a.global_batch;
  o.sequence = a.sequence;
  o.schedule = a.schedule;
  o.recompute = a.recompute;
  o.dtype = a.dtype;
  o.cp_comm = a.cp_comm;
  o.moe_dispatcher = a.moe_dispatcher;
  o.expert_gemm = a.expert_gemm;
  o.cuda_graphs = a.cuda_graphs;
  o.attention = a.attention;
  o.gemm_table = a.gemm_table;
  o.sustained_fraction = a.sustained_fraction;
  o.sequence_parallel = switch_of(a.sequence_parallel);
  o.tp_comm_overlap = switch_of(a.tp_comm_overlap);
  o.rope_fusion = switch_of(a.rope_fusion);
  o.moe_router_fusion = switch_of(a.moe_router_fusion);
  o.moe_router_load_balancing = a.moe_router_load_balancing;
  o.optimizer = a.optimizer;
  o.moe_shared_expert_overlap = switch_of(a.moe_shared_expert_overlap);
  o.moe_a2a_overlap = switch_of(a.moe_a2a_overlap);
  o.moe_capacity_factor = a.moe_capacity_factor;
  o.moe_pad_to_capacity = switch_of(a.moe_pad_to_capacity);
  o.moe_expert_skew = a.moe_expert_skew;
  o.grad_reduce_overlap = switch_of(a.grad_reduce_overlap);
  o.account_for_embedding = switch_of(a.account_for_embedding);
  o.account_for_loss = switch_of(a.account_for_loss);
  o.param_gather_prefetch = switch_of(a.param_gather_prefetch);
  o.param_gather_per_tensor = switch_of(a.param_gather_per_tensor);
  o.rank_order = a.rank_order;
  o.recompute_modules = a.recompute_modules;
  o.module_precision = a.module_precision;
  return load_training_workload(a.workload, kModelsDir, kTopologiesDir, o);
}

std::string seconds_text(Time t) {
  const double s = t.seconds();
  return s >= 1 ? strprintf("%.3f s", s) : strprintf("%.2f ms", s * 1e3);
}

void print_suggestions(const std::vector<Suggestion>& suggestions) {
  std::printf("\nwhat to try (each re-simulated alone; change = its iteration time - this one's):\n");
  TextTable t({"change", "iteration", "knob", "flags", "bubble"},
              {TextTable::Align::kRight, TextTable::Align::kRight, TextTable::Align::kLeft, TextTable::Align::kLeft,
               TextTable::Align::kRight});
  for (const Suggestion& s : suggestions) {
    t.add_row({strprintf("%+.3f s", s.delta.seconds()), seconds_text(s.iteration_time),
               s.knob + (s.fits ? "" : " (does not fit in memory)"), s.flags, strprintf("%.1f%%", 100 * s.bubble_fraction)});
  }
  std::printf("%s", suggestions.empty() ? "  (no knob of the list applies to this layout)\n" : t.render().c_str());
}

// One table per kind of unit: where a micro-batch's compute goes, operator by operator.
void print_operator_breakdown(const std::vector<UnitBreakdown>& units, double sustained_fraction) {
  std::printf("\ncompute per operator, one micro-batch on one GPU (kernels at %.2f of their stand-alone speed; "
              "recomputed: the forward run again in the backward):\n",
              sustained_fraction);
  for (const UnitBreakdown& u : units) {
    std::string pace;
    if (u.host_pace_forward > 1 || u.host_pace_backward > 1) {
      pace = strprintf(" (at the host's pace: forward %+.1f%%, backward %+.1f%%)", 100 * (u.host_pace_forward - 1),
                       100 * (u.host_pace_backward - 1));
    }
    std::printf("%s x%d: %s each%s\n", u.unit.c_str(), u.count, seconds_text(u.total()).c_str(), pace.c_str());
    TextTable t({"operator", "forward", "backward", "recomputed", "share", "TFLOP/s", "bound"},
                {TextTable::Align::kLeft, TextTable::Align::kRight, TextTable::Align::kRight, TextTable::Align::kRight,
                 TextTable::Align::kRight, TextTable::Align::kRight, TextTable::Align::kLeft});
    const double unit_s = u.total().seconds();
    for (const OperatorTime& op : u.operators) {
      const double s = op.total().seconds();
      t.add_row({op.name, seconds_text(op.forward), seconds_text(op.backward),
                 op.recomputed > Time::zero() ? seconds_text(op.recomputed) : "-",
                 strprintf("%.1f%%", unit_s > 0 ? 100 * s / unit_s : 0.0),
                 s > 0 && op.bound != "memory" ? strprintf("%.0f", op.flops.value() / s / 1e12) : "-", op.bound});
    }
    std::printf("%s", t.render().c_str());
  }
}

// --measured-step: σ for this stack from one timed step, so the report is at that σ.
void fit_measured_step(const std::string& text, Job& job, IterationOptions& options) {
  Time measured;
  try {
    measured = parse_time(text);
  } catch (const UnitError& e) {
    throw InputError("", "--measured-step", e.what());
  }
  if (measured <= Time::zero()) throw InputError("", "--measured-step", "must be greater than zero");
  try {
    options.compute.sustained_fraction = job.compute.sustained_fraction =
        fit_sustained_fraction(job.model, job.layout, job.topology, options, measured);
  } catch (const std::invalid_argument& e) {
    throw InputError("", "--measured-step", e.what());
  }
  std::printf("# sustained fraction fitted to the measured step of %s: %.4f (default %.2f); put it in the workload's\n"
              "# \"compute\" block as \"sustained_fraction\" to predict other layouts on this stack\n",
              seconds_text(measured).c_str(), job.compute.sustained_fraction, ComputeModelOptions{}.sustained_fraction);
}

void print_iteration_summary(const Job& job, const IterationResult& r) {
  const auto params = count_parameters(job.model);
  std::printf("# Parallax train: %s (%.1f B parameters) on %s, %d GPUs\n", job.model.name.c_str(),
              static_cast<double>(params.total) / 1e9, job.topology.info().name.c_str(), r.gpus);
  std::printf("# layout: %s\n\n", layout_description(job.layout).c_str());
  std::printf("  iteration time       %s\n", seconds_text(r.iteration_time).c_str());
  std::printf("  tokens/s             %.0f (%.1f per GPU)\n", r.tokens_per_second, r.tokens_per_second_per_gpu);
  std::printf("  MFU / HFU            %.1f%% / %.1f%%\n", 100 * r.mfu, 100 * r.hfu);
  std::printf("  pipeline bubble      %.1f%%\n", 100 * r.pipeline_bubble_fraction);
  const ParallelLayout& l = job.layout;
  if (job.model.moe && (!l.moe_expert_load.uniform() || l.moe_capacity_factor)) {
    // Padded to capacity, every expert computes its capacity: that is the pace.
    std::printf("  MoE routing          %s %.2fx its even share of tokens; %.1f%% of token-slots dropped\n",
                l.moe_pad_to_capacity ? "every expert padded to" : "busiest expert", r.moe_expert_pace,
                100 * r.moe_dropped_fraction);
  }
  std::printf("  peak memory per GPU  %s of %s: %s\n\n", gib(r.peak_memory).c_str(), gib(r.gpu_memory).c_str(),
              r.out_of_memory ? "OUT OF MEMORY" : "fits");
}

// The offload column only where the layout offloads activations.
void print_stage_table(const Job& job, const IterationResult& r) {
  const bool offloading = job.layout.cpu_offloading_layers > 0;
  std::vector<std::string> header{"stage", "layers", "compute", "TP", "CP", "EP", "DP", "PP"};
  if (offloading) header.push_back("offload");
  for (const char* h : {"bubble", "idle", "params+grads+optim", "activations", "memory"}) header.push_back(h);
  TextTable t(header);
  for (const StageResult& s : r.stages) {
    auto exposed = [&](WorkKind k) { return seconds_text(s.time.exposed[static_cast<size_t>(k)]); };
    std::vector<std::string> row{std::to_string(s.stage),      std::to_string(s.layers),     seconds_text(s.time.compute),
                                 exposed(WorkKind::kTpComm),   exposed(WorkKind::kCpComm),   exposed(WorkKind::kEpComm),
                                 exposed(WorkKind::kDpComm),   exposed(WorkKind::kPpComm)};
    if (offloading) row.push_back(exposed(WorkKind::kOffload));
    for (std::string cell : {seconds_text(s.time.bubble), seconds_text(s.time.idle),
                             gib(s.memory.parameters + s.memory.gradients + s.memory.optimizer_states),
                             gib(s.memory.activations), gib(s.memory.total())}) {
      row.push_back(std::move(cell));
    }
    t.add_row(row);
  }
  std::printf("per pipeline stage (time columns: exposed, per iteration):\n%s\n", t.render().c_str());
}

// How the report names the co-simulation: "co-simulated", or "co-simulated in packets".
const char* cosimulated(const IterationResult& r) {
  return r.network.rfind("packet", 0) == 0 ? "co-simulated in packets" : "co-simulated";
}

// Which of the exposed communication went across nodes (NICs and the network), and,
// co-simulated, the link that bound most of each kind's exposed time.
void print_exposed_links(const IterationResult& r) {
  std::string across;
  std::string bound;
  for (const StageResult& s : r.stages) {
    for (int k = 1; k < kWorkKinds; ++k) {
      const char* kind = to_string(static_cast<WorkKind>(k));
      const Time part = s.time.exposed_across_nodes[static_cast<size_t>(k)];
      if (part > Time::zero()) {
        across += strprintf("%sstage %d %s %s", across.empty() ? "" : ", ", s.stage, kind, seconds_text(part).c_str());
      }
      const auto& links = s.time.exposed_by_link[static_cast<size_t>(k)];
      if (links.empty()) continue;
      bound += strprintf("  stage %d %-3s %-32s %s of %s\n", s.stage, kind, links.front().first.c_str(),
                         seconds_text(links.front().second).c_str(),
                         seconds_text(s.time.exposed[static_cast<size_t>(k)]).c_str());
    }
  }
  if (!across.empty()) std::printf("of it across nodes (NICs and network): %s\n\n", across.c_str());
  if (!bound.empty()) std::printf("the link that bound most of each exposed kind (%s):\n%s\n", cosimulated(r), bound.c_str());
}

// Where the other replicas' traffic on shared links slowed a kind of collective: one entry per
// kind when every stage has the same factor, else one per stage; and the compute stretched by
// the SMs that overlapped collectives held (part of the compute column).
void print_slowdowns(const IterationResult& r) {
  std::string slowed;
  for (int k = 1; k < kWorkKinds; ++k) {
    const char* kind = to_string(static_cast<WorkKind>(k));
    std::vector<std::pair<int, double>> factors;
    for (const StageResult& s : r.stages) {
      const double f = s.communication[static_cast<size_t>(k)].replica_slowdown;
      if (f > 1.0) factors.emplace_back(s.stage, f);
    }
    if (factors.empty()) continue;
    const bool uniform = factors.size() == r.stages.size() &&
                         std::all_of(factors.begin(), factors.end(), [&](const auto& e) { return e.second == factors[0].second; });
    if (uniform && r.stages.size() > 1) {
      slowed += strprintf("%s%s x%.2f (every stage)", slowed.empty() ? "" : ", ", kind, factors[0].second);
      continue;
    }
    for (const auto& [stage, f] : factors) slowed += strprintf("%sstage %d %s x%.2f", slowed.empty() ? "" : ", ", stage, kind, f);
  }
  if (!slowed.empty()) std::printf("slowed by the other replicas' traffic on shared links: %s\n\n", slowed.c_str());
  std::string stretched;
  for (const StageResult& s : r.stages) {
    if (s.compute_slowed_by_communication <= Time::zero()) continue;
    stretched += strprintf("%sstage %d +%s", stretched.empty() ? "" : ", ", s.stage,
                           seconds_text(s.compute_slowed_by_communication).c_str());
  }
  if (!stretched.empty()) {
    std::printf("compute slowed by the SMs of the collectives beside it (in the compute column): %s\n\n",
                stretched.c_str());
  }
}

void print_critical_path_and_links(const Job& job, const IterationResult& r) {
  std::string path;
  for (int k = 0; k < kWorkKinds; ++k) {
    const Time part = r.critical_path.by_kind[static_cast<size_t>(k)];
    if (part > Time::zero()) path += strprintf("%s %s, ", to_string(static_cast<WorkKind>(k)), seconds_text(part).c_str());
  }
  std::printf("critical path (%zu tasks): %swaiting %s\n\n", r.critical_path.tasks, path.c_str(),
              seconds_text(r.critical_path.waiting).c_str());
  std::printf("%s\n%s\n", r.flop_convention.c_str(), r.symmetry.c_str());
  if (!r.pipeline_split.empty()) std::printf("pipeline split (layers per virtual stage): %s\n", r.pipeline_split.c_str());
  if (!r.busiest_links.empty()) {
    std::printf("\nbusiest link of each class (%s; bytes over what it could carry in the iteration):\n", cosimulated(r));
    for (const LinkLoad& l : r.busiest_links) {
      std::printf("  %-30s %-8s %6.1f%%  %s\n", (l.from + " -> " + l.to).c_str(), to_string(l.link_class),
                  100 * l.utilisation, gib(l.bytes).c_str());
    }
  }
  const bool cudnn = job.compute.attention_model == AttentionModel::kCudnn && !job.compute.attention_efficiency;
  const std::string attention = cudnn ? std::string(" ") + cli::kCudnnAttentionNote + ";" : "";
  std::printf("compute: GEMMs by the %s;%s kernels at %.2f of their stand-alone speed (sustained fraction)\n",
              gemm_model_description(job).c_str(), attention.c_str(), job.compute.sustained_fraction);
}

// --plot: each stage's time and memory as stacked bars, and the schedule as it ran
// (iteration_plot.h).
void plot_iteration(const std::string& dir, const Job& job, const IterationResult& r) {
  std::filesystem::create_directories(dir);
  write_file_atomically(dir + "/train.dat", iteration_breakdown_data(r));
  const std::vector<std::string> title{job.model.name + " on " + std::to_string(job.topology.gpu_count()) + " GPUs",
                                       layout_description(job.layout)};
  cli::run_gnuplot(dir + "/train.gp", iteration_breakdown_script(r, dir + "/train.dat", dir + "/train.png", title));
  write_file_atomically(dir + "/pipeline.dat", pipeline_timeline_data(r, job.layout.virtual_stages));
  char bubble[96];
  std::snprintf(bubble, sizeof bubble, "each stage's compute stream: %.3f s, pipeline bubble %.1f%%",
                r.iteration_time.seconds(), 100 * r.pipeline_bubble_fraction);
  std::vector<std::string> schedule_title = title;
  schedule_title.emplace_back(bubble);
  cli::run_gnuplot(dir + "/pipeline.gp",
                   pipeline_timeline_script(r, dir + "/pipeline.dat", dir + "/pipeline.png", schedule_title));
  std::printf("# plot: %s/train.png, %s/pipeline.png\n", dir.c_str(), dir.c_str());
}

void run_train(const TrainArgs& a) {
  if (!a.plot_dir.empty()) cli::require_gnuplot();
  Job job = read_job(a);
  IterationOptions options;
  // flow: the co-simulation, every collective as flows on one shared network (the closed forms
  // still give each task's stand-alone duration, for reports).
  options.cosimulate = a.network != "analytical";
  if (options.cosimulate) options.cosimulation_network = a.network;
  options.keep_timeline = !a.trace.empty() || !a.plot_dir.empty();  // --plot draws the passes as they ran
  options.keep_link_loads = !a.trace.empty();
  options.compute = job.compute;
  options.gemm_efficiency = job.gemm;
  if (!a.measured_step.empty()) fit_measured_step(a.measured_step, job, options);
  if (options.cosimulate) options.progress = cli::progress_bar("tasks co-simulated");
  IterationResult r;
  try {
    r = simulate_iteration(job.model, job.layout, job.topology, options);
  } catch (const InputError& e) {
    if (!e.file().empty()) throw;
    throw InputError(a.workload, e.pointer(), e.reason());  // the layout came from this file
  }
  options.progress = {};  // --explain's re-simulations count suggestions instead
  options.keep_timeline = false;  // and keep no timeline of their own
  print_iteration_summary(job, r);
  print_stage_table(job, r);
  print_exposed_links(r);
  print_slowdowns(r);
  print_critical_path_and_links(job, r);
  std::vector<UnitBreakdown> units;
  if (a.ops) {
    units = operator_breakdown(job.model, job.layout, job.topology.gpu_spec_of(job.topology.gpus()[0]), options);
    print_operator_breakdown(units, job.compute.sustained_fraction);
  }
  if (a.explain) {
    print_suggestions(explain_layout(job.model, job.layout, job.topology, options, r,
                                     cli::progress_bar("suggestions simulated")));
  }
  if (!a.json.empty()) {
    nlohmann::ordered_json j = iteration_json(job, r);
    if (a.ops) j["operator_breakdown"] = operator_breakdown_json(units);
    write_file_atomically(a.json, j.dump(2) + "\n");
  }
  if (!a.trace.empty()) write_file_atomically(a.trace, iteration_trace_json(job, r));
  if (!a.plot_dir.empty()) plot_iteration(a.plot_dir, job, r);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train", "simulate one training iteration: time, MFU, breakdown, memory per GPU");
  cmd->add_option("workload", args->workload, "workload JSON (model, topology, parallel layout)")->required();
  cmd->add_option("--tp", args->tp, "override the tensor-parallel size");
  cmd->add_option("--pp", args->pp, "override the pipeline-parallel size");
  cmd->add_option("--dp", args->dp, "override the data-parallel size (default: what the cluster leaves)");
  cmd->add_option("--vpp", args->vpp, "virtual stages per pipeline stage (interleaved 1F1B)");
  cmd->add_option("--microbatch-group", args->microbatch_group,
                  "interleaved 1F1B: micro-batches per group, each run chunk by chunk (Megatron's "
                  "--microbatch-group-size-per-virtual-pipeline-stage; default pp)");
  cmd->add_option("--cp", args->cp, "context-parallel size");
  cmd->add_option("--cp-comm", args->cp_comm, "context-parallel attention: ring (K/V blocks passed around) or ulysses (all-to-all)");
  cmd->add_option("--moe-dispatcher", args->moe_dispatcher,
                  "MoE token dispatch: alltoall, or flex (DeepEP / HybridEP: a token sent once to each node and GPU holding its "
                  "experts)");
  cmd->add_option("--ep", args->ep, "expert-parallel size");
  cmd->add_option("--optimizer", args->optimizer,
                  "adam, or muon (Megatron-Core's: Newton-Schulz steps on the hidden layers' matrices, one fp32 "
                  "momentum instead of Adam's two moments; Adam on the embedding and head)");
  cmd->add_option("--moe-router-load-balancing", args->moe_router_load_balancing,
                  "the MoE load-balancing loss trained with: none, aux_loss, seq_aux_loss or global_aux_loss");
  cmd->add_option("--expert-gemm", args->expert_gemm,
                  "MoE experts' GEMMs: per_expert (the host issues one per local expert after reading their rows back: "
                  "TEGroupedMLP), sequential (Megatron-Core's default SequentialMLP: each expert its own module, its activation "
                  "a kernel of its own too) or grouped (one device-side grouped kernel, or a CUDA graph)");
  cmd->add_option("--cuda-graphs", args->cuda_graphs,
                  "kernels replayed from CUDA graphs, which the host issues without its per-kernel dispatch: none, layers "
                  "(every Transformer layer's passes), full_iteration, or Megatron's scopes joined by / "
                  "(attn/mlp/moe_router/moe_preprocess/mamba)");
  cmd->add_option("--recompute-modules", args->recompute_modules,
                  "Megatron's recompute_modules, comma-separated: mla_up_proj, moe_act, mlp, moe, layernorm, core_attn");
  cmd->add_option("--module-precision", args->module_precision,
                  "a per-module quantisation recipe, module=type pairs comma-separated (attention, mlp, experts, "
                  "shared_experts, moe_latent, mamba_in_proj, mamba_out_proj, mtp = bf16, or fp8 within fp4)");
  cmd->add_option("--cpu-offloading-layers", args->cpu_offloading_layers,
                  "activations of the first N Transformer layers offloaded to host memory (Megatron's --cpu-offloading)");
  cmd->add_option("--expert-tp", args->expert_tp, "expert tensor-parallel size (MoE parallel folding; default: tp)");
  cmd->add_option("--zero", args->zero, "ZeRO stage 0-3 (3 = FSDP)");
  cmd->add_option("--dp-shard", args->dp_shard,
                  "hybrid sharding (HSDP): the model states sharded over groups of this many data-parallel ranks, "
                  "replicated across the groups (their gradient shards all-reduced); 0: all ranks");
  cmd->add_option("--mbs,--micro-batch", args->micro_batch, "micro-batch size (sequences)");
  cmd->add_option("--gbs,--global-batch", args->global_batch, "global batch size (sequences)");
  cmd->add_option("--seq", args->sequence, "sequence length (tokens)");
  cmd->add_option("--nodes", args->nodes, "node count of the topology");
  cmd->add_option("--schedule", args->schedule, "gpipe, 1f1b, interleaved_1f1b, zb_h1, zb_h2, zb_v or dualpipe_v (zero bubble at 1F1B's memory, with up to 2p-1 micro-batches in flight, or two chunks a stage in a V at 1F1B's memory; DualPipeV: DeepSeek's order on that V, forward and backward chunks overlapped in pairs (with --moe-a2a-overlap, their all-to-alls), 2p+1 chunks a stage, m >= 2p)");
  cmd->add_option("--attention", args->attention,
                  "attention core: flash (the GPU's own fused kernel), flash2 (FlashAttention-2: on Hopper and Blackwell it leaves "
                  "the asynchronous tensor cores unused) or unfused (scores, softmax and context materialised)");
  cmd->add_option("--recompute", args->recompute, "none, selective, full or selective_op");
  cmd->add_option("--recompute-layers", args->recompute_layers,
                  "with --recompute full: only the first N Transformer layers of each (virtual) pipeline stage "
                  "(Megatron's --recompute-method block --recompute-num-layers N); 0: every layer");
  cmd->add_option("--dtype", args->dtype, "bf16 or fp8");
  for (auto [flag, field, what] : {std::tuple{"--sequence-parallel", &args->sequence_parallel, "Megatron sequence parallelism"},
                                   std::tuple{"--tp-comm-overlap", &args->tp_comm_overlap, "TP collectives pipelined with the GEMMs"},
                                   std::tuple{"--rope-fusion", &args->rope_fusion,
                                              "the rotary embedding as one fused kernel (off: eager PyTorch ops, as Megatron runs YaRN)"},
                                   std::tuple{"--moe-router-fusion", &args->moe_router_fusion,
                                              "the MoE router's top-k and load-balancing loss as Transformer Engine's fused "
                                              "kernels (Megatron's moe_router_fusion; off: PyTorch ops)"},
                                   std::tuple{"--moe-shared-expert-overlap", &args->moe_shared_expert_overlap,
                                              "MoE shared experts beside the EP dispatch and combine"},
                                   std::tuple{"--moe-a2a-overlap", &args->moe_a2a_overlap,
                                              "MoE dispatch and combine of one micro-batch beside another's kernels "
                                              "(Megatron's --overlap-moe-expert-parallel-comm)"},
                                   std::tuple{"--moe-pad-to-capacity", &args->moe_pad_to_capacity,
                                              "with --moe-capacity-factor: every expert's rows padded to its capacity "
                                              "(Megatron's --moe-pad-expert-input-to-capacity: fixed shapes the host need not read back)"},
                                   std::tuple{"--grad-reduce-overlap", &args->grad_reduce_overlap,
                                              "gradient buckets reduced during the backward"},
                                   std::tuple{"--account-for-embedding-in-pipeline-split", &args->account_for_embedding,
                                              "the embedding counted as a layer of the first virtual stage when the "
                                              "layers are split (Megatron's flag of that name)"},
                                   std::tuple{"--account-for-loss-in-pipeline-split", &args->account_for_loss,
                                              "the output layer and loss counted as a layer of the last virtual stage"},
                                   std::tuple{"--param-gather-prefetch", &args->param_gather_prefetch,
                                              "ZeRO parameter gathers one layer ahead"},
                                   std::tuple{"--param-gather-per-tensor", &args->param_gather_per_tensor,
                                              "ZeRO-3 gathers one all-gather per parameter tensor (DeepSpeed before late 2021)"}}) {
    cmd->add_option(flag, *field, std::string(what) + ": on or off")->check(CLI::IsMember({"on", "off"}));
  }
  cmd->add_option("--rank-order", args->rank_order, "rank order, innermost first (e.g. tp-cp-ep-dp-pp)");
  cmd->add_option("--moe-capacity-factor", args->moe_capacity_factor,
                  "MoE token dropping (Megatron's --moe-expert-capacity-factor): each expert computes at most this many "
                  "times its even share of the routed tokens and drops the rest (alltoall dispatcher)");
  cmd->add_option("--moe-expert-skew", args->moe_expert_skew,
                  "MoE router skew: expert i gets a share proportional to (i+1)^-s (Zipf; 0, the default, is uniform); "
                  "the busiest expert sets the pace");
  cmd->add_flag("--ops", args->ops,
                "after the report, where a micro-batch's compute goes: each operator of each kind of layer, forward, "
                "backward and recomputed, its rate and what bounds it (with --json, also in the file)");
  cmd->add_flag("--explain", args->explain,
                "after the report, what to try: a fixed list of knobs, each re-simulated alone, ranked by the time it saves");
  cmd->add_option("--network", args->network,
                  "how collectives are timed: flow (the default: co-simulated, every collective as flows on one "
                  "shared network), packet (the same flows as packets through queues with lossless flow "
                  "control: head-of-line blocking; slow, for small jobs) or analytical (each alone, closed forms; "
                  "the fast option for sweeps)")
      ->check(CLI::IsMember({"analytical", "flow", "packet"}));
  cmd->add_option("--json", args->json, "write the full result as JSON");
  cmd->add_option("--trace", args->trace, "write a Chrome/Perfetto trace: one process per pipeline stage, one thread per stream; co-simulated, "
                  "the busiest links with their load and an arrow from each task to the links it crossed");
  cmd->add_option("--plot", args->plot_dir,
                  "write train.png (gnuplot) into this directory: each pipeline stage's iteration time (compute, exposed "
                  "communication by kind, bubble) and memory per GPU as stacked bars; and pipeline.png: each stage's "
                  "passes (F, B, W and their micro-batches) over the iteration as they ran");
  cmd->add_option("--gemm-table", args->gemm_table,
                  "GEMM rates measured by the calibration harness (its JSON-lines file), and the attention kernels' where "
                  "the file has them (calibrate/scripts/attention-bench.py), instead of the closed forms");
  cmd->add_option("--sustained-fraction", args->sustained_fraction,
                  sustained_fraction_help());
  cmd->add_option("--measured-step", args->measured_step,
                  "a step time measured on your cluster (\"9.5 s\"): fit the sustained fraction to it, then report at that fraction");
  cmd->callback([args] { run_train(*args); });
}

}  // namespace parallax::cli
