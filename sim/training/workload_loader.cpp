// The training workload file (workload_loader.h).
#include "training/workload_loader.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "compute/measured_gemm_table.h"
#include "io/input_error.h"
#include "io/json_reader.h"
#include "model/model_loader.h"
#include "topology/topology_loader.h"
#include "units/unit_parse.h"

namespace parallax {
namespace {

namespace fs = std::filesystem;

// One of a field's named values (`parse` knows them), or an error naming the field and the choices.
template <class Parse>
auto named_choice(Parse parse, const std::string& s, const std::string& file, const std::string& where,
                  const std::string& what, const std::string& expected) {
  if (auto v = parse(s)) return *v;
  throw InputError(file, where, "unknown " + what + " \"" + s + "\" (expected " + expected + ")");
}

ContextParallelComm cp_comm_from(const std::string& s, const std::string& file, const std::string& where) {
  return named_choice(context_parallel_comm_from, s, file, where, "context-parallel communication", "ring or ulysses");
}

OptimizerKind optimizer_of(const std::string& s, const std::string& file, const std::string& where) {
  return named_choice(optimizer_from, s, file, where, "optimizer", "adam or muon");
}

LoadBalancingLoss load_balancing_of(const std::string& s, const std::string& file, const std::string& where) {
  return named_choice(load_balancing_loss_from, s, file, where, "load-balancing loss",
                      "none, aux_loss, seq_aux_loss or global_aux_loss");
}

MoeDispatcher moe_dispatcher_of(const std::string& s, const std::string& file, const std::string& where) {
  return named_choice(moe_dispatcher_from, s, file, where, "MoE token dispatcher", "alltoall or flex");
}

ExpertGemms expert_gemms_of(const std::string& s, const std::string& file, const std::string& where) {
  return named_choice(expert_gemms_from, s, file, where, "expert GEMM issue", "per_expert, grouped or sequential");
}

// The non-empty parts of a comma-separated flag value.
std::vector<std::string> comma_list(const std::string& s) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (begin <= s.size()) {
    const size_t end = std::min(s.find(',', begin), s.size());
    if (end > begin) parts.push_back(s.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

void set_cuda_graphs(ParallelLayout& l, const std::string& s, const std::string& file, const std::string& where) {
  const auto g = cuda_graphs_from(s);
  if (!g) {
    throw InputError(file, where, "unknown CUDA graph scope \"" + s +
                                      "\" (expected none, layers, full_iteration, or parts of attn/mlp/moe_router/moe_preprocess/mamba)");
  }
  std::tie(l.cuda_graphs, l.cuda_graph_scope) = *g;
}

AttentionKernel attention_from(const std::string& s, const std::string& file, const std::string& where) {
  if (auto k = attention_kernel_from(s)) return *k;
  throw InputError(file, where, "unknown attention kernel \"" + s + "\" (expected flash, flash2 or unfused)");
}

Recomputation recompute_from(const std::string& s, const std::string& file, const std::string& where) {
  if (auto recompute = recomputation_from(s)) return *recompute;
  throw InputError(file, where, "unknown recomputation \"" + s + "\" (expected none, selective, full or selective_op)");
}

DType dtype_from(const std::string& s, const std::string& file, const std::string& where) {
  auto d = dtype_from_string(s);
  if (!d || (*d != DType::kBf16 && *d != DType::kFp8 && *d != DType::kFp16 && *d != DType::kFp4)) {
    throw InputError(file, where, "unknown or unsupported dtype \"" + s + "\" (expected bf16, fp16, fp8 or fp4)");
  }
  return *d;
}

ZeroStage zero_from(int64_t z, const std::string& file, const std::string& where) {
  if (z < 0 || z > 3) throw InputError(file, where, "ZeRO stage must be 0, 1, 2 or 3, found " + std::to_string(z));
  return static_cast<ZeroStage>(z);
}

// A path given in a workload: absolute, or relative to the workload's folder.
std::string beside_workload(const std::string& workload, const std::string& path) {
  fs::path p = path;
  return p.is_absolute() ? p.string() : (fs::path(workload).parent_path() / p).lexically_normal().string();
}

// A fraction in (0, 1] at `v`, or an error naming its path.
double unit_fraction(JsonReader& v) {
  const double x = v.as_number();
  if (!(x > 0 && x <= 1)) v.fail("must be in (0, 1], found " + v.raw().dump());
  return x;
}

// The compute model of a workload (all keys optional): {"sustained_fraction": σ,
// "memory_efficiency": η, "attention_efficiency": η, "attention_model": "shape" | "cudnn",
// "kernel_launch_overhead": "2 us",
// "host_gemm_issue": "55 us", "host_dispatch": "74 us", "gemm_table": harness JSON lines, relative to the
// workload}.
void read_compute(JsonReader c, const std::string& workload, TrainingWorkload& job) {
  if (auto v = c.find("sustained_fraction")) {
    job.compute.sustained_fraction = unit_fraction(*v);
    if (job.compute.sustained_fraction < 0.01) v->fail("must be at least 0.01, found " + v->raw().dump());
  }
  if (auto v = c.find("memory_efficiency")) job.compute.memory_efficiency = unit_fraction(*v);
  if (auto v = c.find("attention_efficiency")) job.compute.attention_efficiency = unit_fraction(*v);
  if (auto v = c.find("attention_model")) {
    const std::optional<AttentionModel> model = attention_model_named(v->as_string());
    if (!model) v->fail("expected \"shape\" or \"cudnn\", found " + v->raw().dump());
    job.compute.attention_model = *model;
  }
  if (auto v = c.find("kernel_launch_overhead")) {
    job.compute.kernel_launch_overhead = v->as_time();
    if (job.compute.kernel_launch_overhead < Time::zero()) v->fail("must not be negative");
  }
  if (auto v = c.find("host_gemm_issue")) job.compute.host_gemm_issue = v->as_time();
  if (auto v = c.find("host_dispatch")) job.compute.host_dispatch = v->as_time();
  if (auto v = c.find("gemm_table")) {
    job.gemm = std::make_shared<MeasuredGemmTable>(load_gemm_measurements(beside_workload(workload, v->as_string())));
  }
  c.finish();
}

// The topology of a workload: {"preset": name} (a bundled file) or {"file": path, relative to
// the workload}, with "nodes", or "gpus" (the job's GPUs, placed as a launcher would: the same
// count on every node, part of each when whole nodes do not divide them).
struct TopologySpec {
  std::string file;
  std::optional<int> nodes, gpus;
  std::string pointer;
};

TopologySpec read_topology_spec(JsonReader t, const std::string& workload, const std::string& topologies_dir) {
  TopologySpec spec;
  spec.pointer = t.pointer();
  if (t.is_string()) {
    spec.file = preset_file(topologies_dir, t);
  } else if (auto preset = t.find("preset")) {
    spec.file = preset_file(topologies_dir, *preset);
  } else {
    spec.file = beside_workload(workload, t.at("file").as_string());
  }
  std::error_code ec;
  if (!fs::exists(spec.file, ec)) throw InputError(workload, t.pointer(), "no topology file " + spec.file);
  if (!t.is_string()) {
    if (auto n = t.find("nodes")) {
      const int64_t v = n->as_int();
      if (v < 1 || v > (1 << 20)) n->fail("must be between 1 and 1048576 nodes");
      spec.nodes = static_cast<int>(v);
    }
    if (auto g = t.find("gpus")) {
      const int64_t v = g->as_int();
      if (v < 1 || v > (1 << 20)) g->fail("must be between 1 and 1048576 GPUs");
      if (spec.nodes) g->fail("give \"nodes\" or \"gpus\", not both");
      spec.gpus = static_cast<int>(v);
    }
    t.finish();
  }
  return spec;
}

// `job_gpus`: the GPUs the job's layout names, when it names them all (dp given); a topology
// given neither nodes nor GPUs is then sized to them.
Topology load_job_topology(const TopologySpec& spec, const std::string& workload, std::optional<int> nodes_flag,
                           std::optional<int> job_gpus) {
  const nlohmann::json doc = load_json_file(spec.file);
  if (doc.contains("node_groups")) {
    throw InputError(workload, spec.pointer, spec.file + " is a cluster of node groups (several kinds of GPU); training runs "
                                             "on one kind: name one group's own topology");
  }
  TopologyLoadOptions load;
  load.nodes = spec.nodes;
  std::optional<int> gpus = spec.gpus;
  // An explicit topology (a device list) is what it is: validate() compares the layout to it.
  if (!gpus && !spec.nodes && !nodes_flag && doc.contains("node")) gpus = job_gpus;
  if (nodes_flag) {
    load.nodes = nodes_flag;
    gpus.reset();
  }
  if (gpus) {
    const Topology one = load_topology(spec.file, TopologyLoadOptions{1});
    if (one.gpu_count() == 0) throw InputError(workload, spec.pointer, spec.file + " has no GPUs");
    const int node_gpus = static_cast<int>(one.gpus_of_node(0).size());
    const TopologyLoadOptions placed = load_options_for(*gpus, node_gpus);
    if (placed.nodes == 1 && !placed.gpus_per_node && *gpus == static_cast<int>(one.gpu_count())) return one;
    load = placed;
  }
  return load_topology(spec.file, load);
}

// The "parallel" block into `l`. Every count within its documented range (workload-format.md),
// so that no product of them overflows and no loop over them runs away.
// An integer key of the parallel block within [lo, hi], into `field` when present.
template <class Field>
void read_int(JsonReader& p, const char* key, Field& field, int64_t lo = 1, int64_t hi = kMaxDegree) {
  if (auto v = p.find(key)) {
    const int64_t n = v->as_int();
    if (n < lo || n > hi) v->fail("must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    field = static_cast<Field>(n);
  }
}

void read_bool(JsonReader& p, const char* key, bool& field) {
  if (auto v = p.find(key)) field = v->as_bool();
}

// The degrees, the MoE dispatch and the batch.
void read_degrees(JsonReader& p, const std::string& path, ParallelLayout& l, bool& dp_given) {
  read_int(p, "tp", l.tp);
  read_int(p, "pp", l.pp);
  read_int(p, "vpp", l.virtual_stages);
  read_int(p, "microbatch_group", l.microbatch_group, 0, int64_t{1} << 20);
  read_int(p, "cp", l.cp);
  if (auto v = p.find("cp_comm")) l.cp_comm = cp_comm_from(v->as_string(), path, v->pointer());
  read_int(p, "ep", l.ep);
  read_int(p, "expert_tp", l.expert_tp, 0);
  if (auto v = p.find("moe_dispatcher")) l.moe_dispatcher = moe_dispatcher_of(v->as_string(), path, v->pointer());
  if (auto v = p.find("expert_gemm")) l.expert_gemms = expert_gemms_of(v->as_string(), path, v->pointer());
  if (auto v = p.find("cuda_graphs")) set_cuda_graphs(l, v->as_string(), path, v->pointer());
  if (p.find("dp")) {
    read_int(p, "dp", l.dp);
    dp_given = true;
  }
  if (auto v = p.find("zero_stage")) l.zero_stage = zero_from(v->as_int(), path, v->pointer());
  read_int(p, "dp_shard", l.dp_shard, 0);
  read_int(p, "micro_batch", l.micro_batch, 1, kMaxBatch);
  read_int(p, "global_batch", l.global_batch, 1, kMaxBatch);
  read_bool(p, "sequence_parallel", l.sequence_parallel);
}

// Recomputation, the pipeline schedule and the numeric formats (the recipes, per-module ones).
void read_schedule_and_precision(JsonReader& p, const std::string& path, ParallelLayout& l) {
  if (auto v = p.find("recompute")) l.recompute = recompute_from(v->as_string(), path, v->pointer());
  if (auto v = p.find("schedule")) l.schedule = schedule_from(v->as_string(), path, v->pointer());
  if (auto v = p.find("dtype")) l.dtype = dtype_from(v->as_string(), path, v->pointer());
  if (auto v = p.find("fp8_recipe")) {
    const auto r = fp8_recipe_from_string(v->as_string());
    if (!r) v->fail("unknown fp8 recipe \"" + v->as_string() + "\" (expected delayed, current or mxfp8)");
    l.fp8_recipe = *r;
  }
  if (auto v = p.find("fp4_recipe")) {
    const auto r = fp4_recipe_from_string(v->as_string());
    if (!r) v->fail("unknown fp4 recipe \"" + v->as_string() + "\" (expected nvfp4 or mxfp4)");
    l.fp4_recipe = *r;
  }
  read_bool(p, "fp8_param_gather", l.fp8_param_gather);
  read_int(p, "bf16_layers_at_start", l.bf16_layers_at_start, 0);
  read_int(p, "bf16_layers_at_end", l.bf16_layers_at_end, 0);
  if (auto v = p.find("module_precision")) {
    for (const std::string& module : v->keys()) {
      JsonReader t = v->at(module);
      if (std::string why = set_module_precision(l.module_precision, module, t.as_string()); !why.empty()) t.fail(why);
    }
  }
}

// Offloading, the attention kernel, how gradients and parameters move and what overlaps.
void read_memory_and_overlap(JsonReader& p, const std::string& path, ParallelLayout& l) {
  read_int(p, "cpu_offloading_layers", l.cpu_offloading_layers, 0);
  read_int(p, "recompute_layers", l.recompute_layers, 0);
  if (auto v = p.find("attention")) l.attention = attention_from(v->as_string(), path, v->pointer());
  read_bool(p, "grad_reduce_overlap", l.grad_reduce_overlap);
  read_bool(p, "grad_reduce_in_fp32", l.grad_reduce_in_fp32);
  read_bool(p, "precision_aware_optimizer", l.precision_aware_optimizer);
  if (auto v = p.find("optimizer")) l.optimizer = optimizer_of(v->as_string(), path, v->pointer());
  for (auto [key, field] : {std::pair{"exp_avg_dtype", &l.exp_avg_bytes}, std::pair{"exp_avg_sq_dtype", &l.exp_avg_sq_bytes}}) {
    if (auto v = p.find(key)) {
      const auto bytes = optimizer_state_dtype_bytes(v->as_string());
      if (!bytes) v->fail("unknown optimizer state type \"" + v->as_string() + "\" (expected fp32, bf16, fp16 or fp8)");
      *field = *bytes;
    }
  }
  read_bool(p, "param_gather_prefetch", l.param_gather_prefetch);
  read_bool(p, "param_gather_per_tensor", l.param_gather_per_tensor);
  read_bool(p, "tp_comm_overlap", l.tp_comm_overlap);
  read_bool(p, "rope_fusion", l.rope_fusion);
  read_bool(p, "moe_router_fusion", l.moe_router_fusion);
  if (auto v = p.find("moe_router_load_balancing")) {
    l.moe_load_balancing = load_balancing_of(v->as_string(), path, v->pointer());
  }
  read_bool(p, "moe_shared_expert_overlap", l.moe_shared_expert_overlap);
  read_bool(p, "moe_a2a_overlap", l.moe_a2a_overlap);
  if (auto v = p.find("rank_order")) l.rank_order = v->as_string();
}

// The router's skew and Megatron's token dropping (capacity factor, padding to capacity).
void read_moe_routing(JsonReader& p, ParallelLayout& l) {
  if (auto v = p.find("moe_expert_load")) {
    auto zipf = v->find("zipf");
    auto relative = v->find("relative");
    if (zipf && relative) v->fail("give zipf or relative, not both");
    if (!zipf && !relative) v->fail("expected zipf (an exponent) or relative (one load per routed expert)");
    if (zipf) l.moe_expert_load.zipf_exponent = zipf->as_number();
    if (relative) {
      for (auto& e : relative->elements()) l.moe_expert_load.relative.push_back(e.as_number());
    }
    v->finish();
  }
  if (auto v = p.find("moe_capacity_factor")) l.moe_capacity_factor = v->as_number();
  read_bool(p, "moe_pad_to_capacity", l.moe_pad_to_capacity);
}

// The layers of each pipeline stage, given or Megatron's uneven splits, and the recomputed modules.
void read_stages(JsonReader& p, ParallelLayout& l) {
  if (auto v = p.find("stage_layers")) {
    for (auto& e : v->elements()) {
      const int64_t n = e.as_int();
      if (n < 1 || n > kMaxDegree) e.fail("must be between 1 and " + std::to_string(kMaxDegree) + " layers");
      l.stage_layers.push_back(static_cast<int>(n));
    }
  }
  if (auto v = p.find("recompute_modules")) {
    RecomputeModules modules;
    for (auto& e : v->elements()) {
      auto added = add_recompute_module(modules, e.as_string());
      if (!added) e.fail(std::string("unknown module (expected ") + kRecomputeModuleChoices + ")");
      modules = *added;
    }
    l.adopt_recompute_modules(modules);
  }
  // Megatron's names for its uneven splits.
  read_int(p, "decoder_first_pipeline_num_layers", l.first_stage_layers);
  read_int(p, "decoder_last_pipeline_num_layers", l.last_stage_layers);
  read_bool(p, "account_for_embedding_in_pipeline_split", l.account_for_embedding);
  read_bool(p, "account_for_loss_in_pipeline_split", l.account_for_loss);
}

void read_parallel(JsonReader p, const std::string& path, ParallelLayout& l, bool& dp_given) {
  read_degrees(p, path, l, dp_given);
  read_schedule_and_precision(p, path, l);
  read_memory_and_overlap(p, path, l);
  read_moe_routing(p, l);
  read_stages(p, l);
  p.finish();
}

// Command-line overrides, for what-if questions without editing the file; in the same ranges.
// The flags' ranges, those of the workload's keys, checked before any is applied.
void check_override_ranges(const WorkloadOverrides& a) {
  auto in_range = [](const char* flag, std::optional<int64_t> v, int64_t lo, int64_t hi) {
    if (v && (*v < lo || *v > hi)) {
      throw InputError("", flag, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    }
  };
  auto wide = [](std::optional<int> v) { return v ? std::optional<int64_t>(*v) : std::nullopt; };
  for (auto [flag, v] : {std::pair{"--tp", a.tp}, {"--pp", a.pp}, {"--dp", a.dp}, {"--vpp", a.vpp}, {"--cp", a.cp},
                         {"--ep", a.ep}}) {
    in_range(flag, wide(v), 1, kMaxDegree);
  }
  in_range("--expert-tp", wide(a.expert_tp), 0, kMaxDegree);
  in_range("--microbatch-group", wide(a.microbatch_group), 0, int64_t{1} << 20);
  in_range("--cpu-offloading-layers", wide(a.cpu_offloading_layers), 0, kMaxDegree);
  in_range("--recompute-layers", wide(a.recompute_layers), 0, kMaxDegree);
  in_range("--micro-batch", a.micro_batch, 1, kMaxBatch);
  in_range("--global-batch", a.global_batch, 1, kMaxBatch);
  in_range("--seq", a.sequence, 1, kMaxSequence);
}

// --recompute-modules a,b and --module-precision module=type,...: lists, each name checked.
void apply_module_flags(const WorkloadOverrides& a, ParallelLayout& l) {
  if (a.recompute_modules) {
    RecomputeModules modules;
    for (const std::string& name : comma_list(*a.recompute_modules)) {
      auto added = add_recompute_module(modules, name);
      if (!added) {
        throw InputError("", "--recompute-modules",
                         "unknown module \"" + name + "\" (expected " + kRecomputeModuleChoices + ")");
      }
      modules = *added;
    }
    l.adopt_recompute_modules(modules);
  }
  if (a.module_precision) {
    l.module_precision = ModulePrecision{};
    for (const std::string& pair : comma_list(*a.module_precision)) {
      const size_t eq = pair.find('=');
      const std::string why = eq == std::string::npos
                                  ? "expected module=type, found \"" + pair + "\""
                                  : set_module_precision(l.module_precision, pair.substr(0, eq), pair.substr(eq + 1));
      if (!why.empty()) throw InputError("", "--module-precision", why);
    }
  }
}

void apply_overrides(const WorkloadOverrides& a, ParallelLayout& l, bool& dp_given) {
  check_override_ranges(a);
  if (a.tp) l.tp = *a.tp;
  if (a.pp) l.pp = *a.pp;
  if (a.vpp) l.virtual_stages = *a.vpp;
  if (a.microbatch_group) l.microbatch_group = *a.microbatch_group;
  if (a.cp) l.cp = *a.cp;
  if (!a.cp_comm.empty()) l.cp_comm = cp_comm_from(a.cp_comm, "", "--cp-comm");
  if (a.ep) l.ep = *a.ep;
  if (!a.moe_dispatcher.empty()) l.moe_dispatcher = moe_dispatcher_of(a.moe_dispatcher, "", "--moe-dispatcher");
  if (!a.expert_gemm.empty()) l.expert_gemms = expert_gemms_of(a.expert_gemm, "", "--expert-gemm");
  if (!a.cuda_graphs.empty()) set_cuda_graphs(l, a.cuda_graphs, "", "--cuda-graphs");
  if (a.expert_tp) l.expert_tp = *a.expert_tp;
  if (a.dp) {
    l.dp = *a.dp;
    dp_given = true;
  }
  if (a.zero) l.zero_stage = zero_from(*a.zero, "", "--zero");
  if (a.dp_shard) l.dp_shard = *a.dp_shard;
  if (a.micro_batch) l.micro_batch = *a.micro_batch;
  if (a.global_batch) l.global_batch = *a.global_batch;
  if (a.sequence) l.sequence_length = *a.sequence;
  if (!a.schedule.empty()) {
    const bool was_v = v_shaped(l.schedule);
    l.schedule = schedule_from(a.schedule, "", "--schedule");
    // The chunks and the micro-batch group follow the schedule unless given with it: a V has two
    // chunks a stage, interleaving keeps the file's (a V's two; one is refused: give --vpp), the
    // other schedules have one; only interleaving groups micro-batches.
    const bool interleaved = l.schedule == PipelineScheduleKind::kInterleavedOneFOneB;
    if (!a.vpp && !interleaved) l.virtual_stages = v_shaped(l.schedule) ? 2 : 1;
    if (!a.vpp && interleaved && was_v) l.virtual_stages = 2;
    if (!a.microbatch_group && !interleaved) l.microbatch_group = 0;
  }
  if (!a.recompute.empty()) l.recompute = recompute_from(a.recompute, "", "--recompute");
  if (a.recompute_layers) l.recompute_layers = *a.recompute_layers;
  if (!a.dtype.empty()) l.dtype = dtype_from(a.dtype, "", "--dtype");
  if (!a.attention.empty()) l.attention = attention_from(a.attention, "", "--attention");
  if (a.sequence_parallel) l.sequence_parallel = *a.sequence_parallel;
  if (a.tp_comm_overlap) l.tp_comm_overlap = *a.tp_comm_overlap;
  if (a.rope_fusion) l.rope_fusion = *a.rope_fusion;
  if (a.moe_router_fusion) l.moe_router_fusion = *a.moe_router_fusion;
  if (!a.optimizer.empty()) l.optimizer = optimizer_of(a.optimizer, "", "--optimizer");
  if (!a.moe_router_load_balancing.empty()) {
    l.moe_load_balancing = load_balancing_of(a.moe_router_load_balancing, "", "--moe-router-load-balancing");
  }
  if (a.moe_shared_expert_overlap) l.moe_shared_expert_overlap = *a.moe_shared_expert_overlap;
  if (a.moe_capacity_factor) l.moe_capacity_factor = *a.moe_capacity_factor;
  if (a.moe_pad_to_capacity) l.moe_pad_to_capacity = *a.moe_pad_to_capacity;
  if (a.moe_expert_skew) l.moe_expert_load = ExpertLoad{{}, *a.moe_expert_skew};
  if (a.moe_a2a_overlap) l.moe_a2a_overlap = *a.moe_a2a_overlap;
  if (a.cpu_offloading_layers) l.cpu_offloading_layers = *a.cpu_offloading_layers;
  if (a.grad_reduce_overlap) l.grad_reduce_overlap = *a.grad_reduce_overlap;
  if (a.account_for_embedding) l.account_for_embedding = *a.account_for_embedding;
  if (a.account_for_loss) l.account_for_loss = *a.account_for_loss;
  if (a.param_gather_prefetch) l.param_gather_prefetch = *a.param_gather_prefetch;
  if (a.param_gather_per_tensor) l.param_gather_per_tensor = *a.param_gather_per_tensor;
  if (!a.rank_order.empty()) l.rank_order = a.rank_order;
  apply_module_flags(a, l);
}

}  // namespace

PipelineScheduleKind schedule_from(const std::string& s, const std::string& file, const std::string& where) {
  if (s == "gpipe") return PipelineScheduleKind::kGpipe;
  if (s == "1f1b") return PipelineScheduleKind::kOneFOneB;
  if (s == "interleaved_1f1b" || s == "interleaved") return PipelineScheduleKind::kInterleavedOneFOneB;
  if (s == "zb_h1" || s == "zero_bubble") return PipelineScheduleKind::kZeroBubbleH1;
  if (s == "zb_h2") return PipelineScheduleKind::kZeroBubbleH2;
  if (s == "zb_v") return PipelineScheduleKind::kZeroBubbleV;
  if (s == "dualpipe_v") return PipelineScheduleKind::kDualPipeV;
  throw InputError(file, where,
                   "unknown schedule \"" + s + "\" (expected gpipe, 1f1b, interleaved_1f1b, zb_h1, zb_h2, zb_v or dualpipe_v)");
}


TrainingWorkload load_training_workload(const std::string& path, const std::string& models_dir,
                                        const std::string& topologies_dir, const WorkloadOverrides& a) {
  nlohmann::json doc = load_json_file(path);
  JsonReader root(doc, path);
  if (auto d = root.find("description")) (void)d->as_string();
  TrainingWorkload job;
  job.model = read_model(root.at("model"), models_dir);
  const TopologySpec topology = read_topology_spec(root.at("topology"), path, topologies_dir);
  job.topology_file = topology.file;
  ParallelLayout& l = job.layout;
  read_parallel(root.at("parallel"), path, l, job.dp_given);
  l.sequence_length = job.model.max_sequence;
  if (auto v = root.find("sequence_length")) {
    l.sequence_length = v->as_int();
    if (l.sequence_length < 1 || l.sequence_length > kMaxSequence) {
      v->fail("must be between 1 and " + std::to_string(kMaxSequence) + " tokens");
    }
  }
  if (auto c = root.find("compute")) read_compute(*c, path, job);
  root.finish();
  if (!a.gemm_table.empty()) job.gemm = std::make_shared<MeasuredGemmTable>(load_gemm_measurements(a.gemm_table));
  if (a.sustained_fraction) {
    // Below 1% no kernel of any GPU in the presets would be modelled, and times overflow.
    if (!(*a.sustained_fraction >= 0.01 && *a.sustained_fraction <= 1)) {
      char found[32];
      std::snprintf(found, sizeof found, "%g", *a.sustained_fraction);
      throw InputError("", "--sustained-fraction", std::string("must be in [0.01, 1], found ") + found);
    }
    job.compute.sustained_fraction = *a.sustained_fraction;
  }
  apply_overrides(a, l, job.dp_given);
  // The layout naming every degree sizes a topology given no nodes; else dp is whatever the
  // other dimensions leave of the cluster.
  std::optional<int> job_gpus;
  if (job.dp_given) {
    const int64_t world = int64_t{l.dp} * l.tp * l.pp * l.cp;
    if (world >= 1 && world <= (1 << 20)) job_gpus = static_cast<int>(world);
  }
  TopologySpec sized = topology;
  if (a.gpus) {
    sized.gpus = a.gpus;
    sized.nodes.reset();
  }
  job.topology = load_job_topology(sized, path, a.gpus ? std::nullopt : a.nodes, job_gpus);
  const int gpus = static_cast<int>(job.topology.gpu_count());
  const int model_parallel = l.tp * l.pp * l.cp;
  // (When tp·pp·cp does not divide the GPUs, validate() names the first field at fault.)
  if (!job.dp_given) l.dp = std::max(1, gpus / model_parallel);
  if (v_shaped(l.schedule) && l.virtual_stages == 1 && !a.vpp) {
    l.virtual_stages = 2;  // a V is two chunks a stage (an explicit --vpp 1 is refused instead)
  } else if (a.schedule.empty() && l.virtual_stages > 1 && l.schedule != PipelineScheduleKind::kInterleavedOneFOneB &&
             !v_shaped(l.schedule)) {
    l.schedule = PipelineScheduleKind::kInterleavedOneFOneB;  // v chunks otherwise only exist interleaved
  }
  if (a.validate_layout) validate(l, job.model, gpus, path);
  return job;
}


}  // namespace parallax
