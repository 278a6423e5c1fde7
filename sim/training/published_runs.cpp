#include "training/published_runs.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "io/input_error.h"
#include "io/json_reader.h"
#include "model/layer_operators.h"
#include "model/model_loader.h"
#include "training/run_spellings.h"

namespace parallax {
namespace {

// A row field failed: carries the JSON pointer below the row.
struct RowError : std::runtime_error {
  RowError(const std::string& where, const std::string& why) : std::runtime_error(where + ": " + why) {}
};

const nlohmann::json& member(const nlohmann::json& obj, const std::string& key, const std::string& where) {
  if (!obj.is_object()) throw RowError(where, "expected an object");
  auto it = obj.find(key);
  if (it == obj.end()) throw RowError(where + "/" + key, "missing");
  return *it;
}

// Absent and null mean the same: unknown, take the format's default. `least` is the smallest
// value allowed: 1 for sizes and degrees, 0 for counts of layers.
std::optional<int64_t> opt_int(const nlohmann::json& obj, const std::string& key, const std::string& where,
                               int64_t least = 1) {
  if (!obj.is_object()) throw RowError(where, "expected an object");
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  const nlohmann::json& v = *it;
  if (!v.is_number_integer()) throw RowError(where + "/" + key, "expected an integer or null, found " + v.dump());
  if (v.get<int64_t>() < least) {
    throw RowError(where + "/" + key, "must be at least " + std::to_string(least) + ", found " + v.dump());
  }
  // No count of a published run comes near this; beyond it products of counts overflow.
  constexpr int64_t kLargest = int64_t{1} << 30;
  if (v.get<int64_t>() > kLargest) {
    throw RowError(where + "/" + key, "must be at most " + std::to_string(kLargest) + ", found " + v.dump());
  }
  return v.get<int64_t>();
}

int64_t req_int(const nlohmann::json& obj, const std::string& key, const std::string& where) {
  member(obj, key, where);  // missing is its own error
  auto v = opt_int(obj, key, where);
  if (!v) throw RowError(where + "/" + key, "must not be null");
  return *v;
}

std::optional<std::string> opt_string(const nlohmann::json& obj, const std::string& key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) throw RowError(where + "/" + key, "expected a string or null, found " + it->dump());
  return it->get<std::string>();
}

// `precision` and `fp8_recipe` of a row, in whichever spelling; a recipe named twice must agree.
void read_number_format(const nlohmann::json& row, const std::string& where, PublishedRun& run) {
  const std::string spelled = opt_string(row, "precision", where).value_or("bf16");
  const auto format = number_format(spelled);
  if (!format) {
    throw RowError(where + "/precision", "expected bf16, fp8 (or FP8-CS, FP8-MX, MXFP8), fp4 (nvfp4) or mxfp4, found \"" +
                                             spelled + "\"");
  }
  run.precision = format->precision;
  run.fp8_recipe = format->fp8_recipe.empty() ? "delayed" : format->fp8_recipe;
  if (auto recipe = opt_string(row, "fp8_recipe", where)) {
    const auto named = fp8_recipe_name(*recipe);
    if (!named) throw RowError(where + "/fp8_recipe", "expected delayed, current or mxfp8, found \"" + *recipe + "\"");
    if (!format->fp8_recipe.empty() && *named != format->fp8_recipe) {
      throw RowError(where + "/fp8_recipe", "\"" + *recipe + "\" contradicts the precision \"" + spelled + "\"");
    }
    run.fp8_recipe = *named;
  }
}

// One of a field's named choices (`known` accepts it); absent or null: `fallback`.
template <class Known>
std::string opt_choice(const nlohmann::json& obj, const std::string& key, const std::string& where,
                       const std::string& fallback, Known known, const std::string& what, const std::string& choices) {
  std::string v = opt_string(obj, key, where).value_or(fallback);
  if (!known(v)) throw RowError(where + "/" + key, "unknown " + what + " \"" + v + "\" (expected " + choices + " or null)");
  return v;
}

std::optional<bool> opt_bool(const nlohmann::json& obj, const std::string& key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) throw RowError(where + "/" + key, "expected true, false or null, found " + it->dump());
  return it->get<bool>();
}

ModelConfig model_of(const nlohmann::json& m, const std::string& where) {
  ModelConfig c;
  c.name = opt_string(m, "name", where).value_or("unnamed");
  c.layers = static_cast<int>(req_int(m, "num_layers", where));
  c.hidden = req_int(m, "hidden_size", where);
  c.heads = static_cast<int>(req_int(m, "num_attention_heads", where));
  c.kv_heads = static_cast<int>(opt_int(m, "num_kv_heads", where).value_or(c.heads));
  c.ffn = opt_int(m, "ffn_hidden_size", where).value_or(4 * c.hidden);
  c.vocab = req_int(m, "vocab_size", where);
  c.max_sequence = req_int(m, "seq_length", where);
  // head_dim (Hugging Face's name; Megatron's kv_channels) where heads · head_dim is not the
  // hidden size, as in Qwen3; otherwise derived.
  if (auto head_dim = opt_int(m, "head_dim", where)) {
    c.head_dim = *head_dim;
  } else {
    if (c.hidden % c.heads != 0) throw RowError(where + "/hidden_size", "not a multiple of num_attention_heads");
    c.head_dim = c.hidden / c.heads;
  }
  // The MLP decides the family: GELU/ReLU² models are GPT/Megatron style (LayerNorm with
  // biases, learned positions, tied embeddings, dropout 0.1 on the attention probabilities and
  // the residual branches: Megatron-LM's and GPT2Config's defaults); SwiGLU models are Llama
  // style (RMSNorm, no biases, rotary, separate output head, no dropout). The format has no
  // field for these; MPT, a GELU model without biases or dropout, takes the GPT defaults.
  const std::string mlp = opt_string(m, "mlp", where).value_or("gelu");
  if (mlp == "gelu" || mlp == "relu2") {
    c.mlp = MlpKind::kPlain;
    c.norm = NormKind::kLayerNorm;
    c.position = PositionEmbedding::kLearned;
    c.tied_embeddings = true;
    c.qkv_bias = c.attention_output_bias = c.mlp_bias = true;
    c.attention_dropout = c.hidden_dropout = 0.1;
  } else if (mlp == "swiglu") {
    c.mlp = MlpKind::kGated;
    c.norm = NormKind::kRmsNorm;
    c.position = PositionEmbedding::kRotary;
  } else {
    throw RowError(where + "/mlp", "unknown MLP \"" + mlp + "\" (expected gelu, swiglu, relu2 or null)");
  }
  // MegaScale's, Mistral's and GPT-J's architecture choices (ModelConfig): a sliding window
  // (on every layer) and the parallel attention + MLP block.
  c.sliding_window = opt_int(m, "sliding_window", where).value_or(0);
  c.parallel_block = opt_bool(m, "parallel_block", where).value_or(false);
  if (auto experts = opt_int(m, "num_experts", where)) {
    MoeConfig moe;
    moe.experts = static_cast<int>(*experts);
    moe.top_k = static_cast<int>(opt_int(m, "moe_top_k", where).value_or(1));
    moe.expert_ffn = opt_int(m, "moe_ffn_hidden_size", where).value_or(c.ffn);
    auto shared_it = m.find("num_shared_experts");
    if (shared_it != m.end() && shared_it->is_number_integer()) {
      const int64_t shared = shared_it->get<int64_t>();
      if (shared < 0 || shared > moe.experts) {
        throw RowError(where + "/num_shared_experts", "expected 0 to the experts' count, found " + shared_it->dump());
      }
      moe.shared_experts = static_cast<int>(shared);
    }
    moe.shared_expert_ffn = moe.expert_ffn;
    c.moe = moe;
  }
  if (std::string why = c.problem(); !why.empty()) throw RowError(where, why);
  return c;
}

// A bundled file's name, not a path: rows stay portable and cannot name other files.
std::string bundled_name(const std::string& name, const std::string& where, const std::string& folder) {
  const bool name_only = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
  if (!name_only) {
    throw RowError(where, "expected a bundled file's name (" + folder + "/NAME.json: lower-case letters, digits, '-')");
  }
  return name;
}

// A model the project bundles (workloads/models/NAME.json: MLA, dense first layers, shared
// experts and MTP that the row's fields cannot say), at the row's sequence length.
ModelConfig bundled_model_of(const nlohmann::json& m, const std::string& name, const std::string& models_dir,
                             const std::string& where) {
  const std::string file = models_dir.empty() ? std::string() : bundled_model_path(models_dir, name);
  if (file.empty()) throw RowError(where + "/bundled", "no bundled model \"" + name + "\"");
  ModelConfig c = load_model_file(file);
  c.name = opt_string(m, "name", where).value_or(name);
  c.max_sequence = req_int(m, "seq_length", where);
  if (auto mtp = m.find("mtp_layers"); mtp != m.end() && !mtp->is_null()) {  // a run without the model's MTP modules
    if (!mtp->is_number_integer() || mtp->get<int64_t>() < 0 || mtp->get<int64_t>() > 64) {
      throw RowError(where + "/mtp_layers", "expected 0 to 64, found " + mtp->dump());
    }
    c.mtp_layers = static_cast<int>(mtp->get<int64_t>());
  }
  if (auto repeated = m.find("mtp_repeated"); repeated != m.end() && !repeated->is_null()) {
    if (!repeated->is_boolean()) throw RowError(where + "/mtp_repeated", "expected true or false, found " + repeated->dump());
    c.mtp_repeated = repeated->get<bool>();
  }
  if (std::string why = c.problem(); !why.empty()) throw RowError(where, why);
  return c;
}

// tp, pp, cp, ep, vpp, and dp (null: what the GPUs leave).
void read_degrees(const nlohmann::json& l, int gpus, const std::string& where, PublishedLayout& p) {
  p.tp = static_cast<int>(opt_int(l, "tp", where).value_or(1));
  p.pp = static_cast<int>(opt_int(l, "pp", where).value_or(1));
  p.cp = static_cast<int>(opt_int(l, "cp", where).value_or(1));
  p.ep = static_cast<int>(opt_int(l, "ep", where).value_or(1));
  p.vpp = static_cast<int>(opt_int(l, "vpp", where).value_or(1));
  const int model_parallel = p.tp * p.pp * p.cp;
  if (auto dp = opt_int(l, "dp", where)) {
    p.dp = static_cast<int>(*dp);
    return;
  }
  if (gpus % model_parallel != 0) {
    throw RowError(where + "/dp", "null, and tp·pp·cp = " + std::to_string(model_parallel) + " does not divide " +
                                      std::to_string(gpus) + " GPUs");
  }
  p.dp = gpus / model_parallel;
}

// fsdp (absent or null: not fully sharded) and zero_stage; neither given is Megatron's own
// distributed optimizer setting.
void read_sharding(const nlohmann::json& l, const std::string& where, PublishedLayout& p) {
  auto fsdp = l.find("fsdp");
  p.fsdp = fsdp != l.end() && fsdp->is_boolean() && fsdp->get<bool>();
  auto zero = l.find("zero_stage");
  p.megatron_style = (zero == l.end() || zero->is_null()) && !p.fsdp;
  if (zero != l.end() && !zero->is_null()) {
    if (!zero->is_number_integer() || zero->get<int64_t>() < 0 || zero->get<int64_t>() > 3) {
      throw RowError(where + "/zero_stage", "expected 0–3 or null, found " + zero->dump());
    }
    p.zero_stage = static_cast<int>(zero->get<int64_t>());
  }
  if (p.fsdp) p.zero_stage = 3;
  if (auto shard = opt_int(l, "dp_shard", where)) p.dp_shard = static_cast<int>(*shard);
}

// The kernels and overlaps the run chose: dispatcher, expert GEMMs, CP communication, the
// boolean switches, the attention kernel.
void read_kernel_choices(const nlohmann::json& l, const std::string& where, PublishedLayout& p) {
  p.moe_dispatcher = opt_choice(l, "moe_dispatcher", where, "alltoall", moe_dispatcher_from, "MoE token dispatcher",
                                "alltoall, flex");
  p.optimizer = opt_choice(l, "optimizer", where, "adam", optimizer_from, "optimizer", "adam, muon");
  p.moe_router_load_balancing =
      opt_choice(l, "moe_router_load_balancing", where, "aux_loss", load_balancing_loss_from, "load-balancing loss",
                 "none, aux_loss, seq_aux_loss, global_aux_loss");
  p.expert_gemm = opt_choice(l, "expert_gemm", where, "per_expert", expert_gemms_from, "expert GEMM issue",
                             "per_expert, grouped, sequential");
  p.cp_comm = opt_choice(l, "cp_comm", where, "ring", context_parallel_comm_from, "context-parallel communication",
                         "ring, ulysses");
  p.cuda_graphs = opt_choice(l, "cuda_graphs", where, "none", cuda_graphs_from, "CUDA graph scope",
                             "none, layers, full_iteration, parts of attn/mlp/moe_router/moe_preprocess/mamba");
  for (auto [key, field] : {std::pair{"param_gather_prefetch", &p.param_gather_prefetch},
                            std::pair{"param_gather_per_tensor", &p.param_gather_per_tensor},
                            std::pair{"fp8_param_gather", &p.fp8_param_gather},
                            std::pair{"tp_comm_overlap", &p.tp_comm_overlap},
                            std::pair{"rope_fusion", &p.rope_fusion},
                            std::pair{"moe_router_fusion", &p.moe_router_fusion},
                            std::pair{"moe_shared_expert_overlap", &p.moe_shared_expert_overlap},
                            std::pair{"moe_a2a_overlap", &p.moe_a2a_overlap},
                            std::pair{"moe_pad_to_capacity", &p.moe_pad_to_capacity},
                            std::pair{"account_for_embedding_in_pipeline_split", &p.account_for_embedding},
                            std::pair{"account_for_loss_in_pipeline_split", &p.account_for_loss}}) {
    if (auto v = opt_bool(l, key, where)) *field = *v;
  }
  if (auto c = l.find("moe_capacity_factor"); c != l.end() && !c->is_null()) {
    if (!c->is_number() || !(c->get<double>() > 0) || !std::isfinite(c->get<double>())) {
      throw RowError(where + "/moe_capacity_factor", "expected a number > 0 or null, found " + c->dump());
    }
    p.moe_capacity_factor = c->get<double>();
  }
  if (auto spelled = opt_string(l, "attention", where)) {
    const auto kernel = attention_kernel_name(*spelled);
    if (!kernel) {
      throw RowError(where + "/attention", "expected flash (or cuDNN, FA3), flash2 (FA2), unfused or null, found \"" +
                                               *spelled + "\"");
    }
    p.attention = *kernel;
  }
}

// stage_layers (each stage's layer count) and recompute_modules (Megatron's module names).
void read_stage_lists(const nlohmann::json& l, const std::string& where, PublishedLayout& p) {
  if (auto layers = l.find("stage_layers"); layers != l.end() && !layers->is_null()) {
    if (!layers->is_array()) throw RowError(where + "/stage_layers", "expected an array of layer counts or null");
    for (size_t i = 0; i < layers->size(); ++i) {
      const nlohmann::json& n = (*layers)[i];
      if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > 1 << 20) {
        throw RowError(where + "/stage_layers/" + std::to_string(i), "expected 0 to 1048576 layers, found " + n.dump());
      }
      p.stage_layers.push_back(static_cast<int>(n.get<int64_t>()));
    }
  }
  if (auto modules = l.find("recompute_modules"); modules != l.end() && !modules->is_null()) {
    if (!modules->is_array()) throw RowError(where + "/recompute_modules", "expected an array of module names or null");
    for (size_t i = 0; i < modules->size(); ++i) {
      const nlohmann::json& name = (*modules)[i];
      auto added = name.is_string() ? add_recompute_module(p.recompute_modules, name.get<std::string>()) : std::nullopt;
      if (!added) {
        throw RowError(where + "/recompute_modules/" + std::to_string(i),
                       std::string("expected ") + kRecomputeModuleChoices + ", found " + name.dump());
      }
      p.recompute_modules = *added;
    }
  }
}

// The gradients' reduction, the optimizer's state types, and the layer counts (bf16 ends,
// offloaded, recomputed).
void read_gradients_optimizer_and_counts(const nlohmann::json& l, const std::string& where, PublishedLayout& p) {
  p.grad_reduce_overlap = opt_bool(l, "grad_reduce_overlap", where);
  p.grad_reduce_in_fp32 = opt_bool(l, "grad_reduce_in_fp32", where);
  p.precision_aware_optimizer = opt_bool(l, "precision_aware_optimizer", where).value_or(false);
  for (auto [key, field] : {std::pair{"exp_avg_dtype", &p.exp_avg_bytes}, std::pair{"exp_avg_sq_dtype", &p.exp_avg_sq_bytes}}) {
    const auto name = opt_string(l, key, where);
    if (!name) continue;
    const auto bytes = optimizer_state_dtype_bytes(*name);
    if (!bytes) throw RowError(where + "/" + key, "expected fp32, bf16, fp16, fp8 or null, found \"" + *name + "\"");
    *field = *bytes;
  }
  if (auto modules = l.find("module_precision"); modules != l.end() && !modules->is_null()) {
    if (!modules->is_object()) throw RowError(where + "/module_precision", "expected an object of module: GEMM type");
    for (const auto& [module, type] : modules->items()) {
      const std::string why = type.is_string() ? set_module_precision(p.module_precision, module, type.get<std::string>())
                                               : "expected a GEMM type string, found " + type.dump();
      if (!why.empty()) throw RowError(where + "/module_precision/" + module, why);
    }
  }
  for (auto [key, field] : {std::pair{"bf16_layers_at_start", &p.bf16_layers_at_start},
                            std::pair{"bf16_layers_at_end", &p.bf16_layers_at_end},
                            std::pair{"cpu_offloading_layers", &p.cpu_offloading_layers},
                            std::pair{"recompute_layers", &p.recompute_layers}}) {
    auto n = opt_int(l, key, where, 0);
    if (!n) continue;
    if (*n > 1 << 20) throw RowError(where + "/" + key, "expected 0 to 1048576, found " + std::to_string(*n));
    *field = static_cast<int>(*n);
  }
}

PublishedLayout layout_of(const nlohmann::json& l, int gpus, const std::string& where) {
  PublishedLayout p;
  read_degrees(l, gpus, where, p);
  read_sharding(l, where, p);
  auto mb = opt_int(l, "micro_batch_size", where);
  p.micro_batch = static_cast<int>(mb.value_or(1));
  p.micro_batch_assumed = !mb.has_value();
  p.global_batch = static_cast<int>(req_int(l, "global_batch_size", where));
  auto sp = l.find("sequence_parallel");
  p.sequence_parallel = (sp != l.end() && sp->is_boolean()) ? sp->get<bool>() : p.tp > 1;
  p.recompute = opt_string(l, "activation_recompute", where).value_or("none");
  p.expert_tp = static_cast<int>(opt_int(l, "expert_tp", where).value_or(0));
  read_kernel_choices(l, where, p);
  read_stage_lists(l, where, p);
  read_gradients_optimizer_and_counts(l, where, p);
  if (!recomputation_from(p.recompute)) {
    throw RowError(where + "/activation_recompute",
                   "expected none, selective, full, selective_op or null, found \"" + p.recompute + "\"");
  }
  return p;
}

}  // namespace

ParallelLayout parallel_layout_of(const PublishedRun& run) {
  ParallelLayout l;
  l.tp = run.layout.tp;
  l.pp = run.layout.pp;
  l.dp = run.layout.dp;
  l.cp = run.layout.cp;
  l.ep = run.layout.ep;
  l.virtual_stages = run.layout.vpp;
  l.schedule = run.layout.vpp > 1 ? PipelineScheduleKind::kInterleavedOneFOneB : PipelineScheduleKind::kOneFOneB;
  l.zero_stage = static_cast<ZeroStage>(run.layout.zero_stage);
  l.dp_shard = run.layout.dp_shard;
  l.micro_batch = run.layout.micro_batch;
  l.global_batch = run.layout.global_batch;
  l.sequence_parallel = run.layout.sequence_parallel;
  l.recompute = recomputation_from(run.layout.recompute).value_or(Recomputation::kNone);
  const bool fp4 = run.precision == "fp4" || run.precision == "nvfp4" || run.precision == "mxfp4";
  l.dtype = run.precision == "fp8" ? DType::kFp8 : fp4 ? DType::kFp4 : DType::kBf16;
  if (run.precision == "mxfp4") l.fp4_recipe = Fp4Recipe::kMxfp4;
  l.fp8_recipe = fp8_recipe_from_string(run.fp8_recipe).value_or(Fp8Recipe::kDelayed);
  l.sequence_length = run.sequence;
  if (l.recompute == Recomputation::kSelective) l.attention = AttentionKernel::kUnfused;
  if (!run.layout.attention.empty()) l.attention = *attention_kernel_from(run.layout.attention);
  l.param_gather_prefetch = run.layout.param_gather_prefetch;
  l.param_gather_per_tensor = run.layout.param_gather_per_tensor;
  l.fp8_param_gather = run.layout.fp8_param_gather;
  l.tp_comm_overlap = run.layout.tp_comm_overlap;
  l.rope_fusion = run.layout.rope_fusion;
  l.moe_router_fusion = run.layout.moe_router_fusion;
  l.optimizer = optimizer_from(run.layout.optimizer).value_or(OptimizerKind::kAdam);
  l.moe_load_balancing = load_balancing_loss_from(run.layout.moe_router_load_balancing).value_or(LoadBalancingLoss::kAux);
  l.moe_shared_expert_overlap = run.layout.moe_shared_expert_overlap;
  l.moe_a2a_overlap = run.layout.moe_a2a_overlap;
  l.moe_capacity_factor = run.layout.moe_capacity_factor;
  l.moe_pad_to_capacity = run.layout.moe_pad_to_capacity;
  l.cpu_offloading_layers = run.layout.cpu_offloading_layers;
  l.recompute_layers = run.layout.recompute_layers;
  l.expert_tp = run.layout.expert_tp;
  l.moe_dispatcher = moe_dispatcher_from(run.layout.moe_dispatcher).value_or(MoeDispatcher::kAllToAll);
  l.expert_gemms = expert_gemms_from(run.layout.expert_gemm).value_or(ExpertGemms::kPerExpert);
  std::tie(l.cuda_graphs, l.cuda_graph_scope) =
      cuda_graphs_from(run.layout.cuda_graphs).value_or(std::pair{CudaGraphs::kNone, CudaGraphScope{}});
  l.cp_comm = context_parallel_comm_from(run.layout.cp_comm).value_or(ContextParallelComm::kRing);
  l.bf16_layers_at_start = run.layout.bf16_layers_at_start;
  l.bf16_layers_at_end = run.layout.bf16_layers_at_end;
  l.module_precision = run.layout.module_precision;
  if (run.layout.megatron_style) {
    l.grad_reduce_in_fp32 = true;
    l.grad_reduce_overlap = false;
  }
  l.grad_reduce_in_fp32 = run.layout.grad_reduce_in_fp32.value_or(l.grad_reduce_in_fp32);
  l.grad_reduce_overlap = run.layout.grad_reduce_overlap.value_or(l.grad_reduce_overlap);
  l.precision_aware_optimizer = run.layout.precision_aware_optimizer;
  l.exp_avg_bytes = run.layout.exp_avg_bytes;
  l.exp_avg_sq_bytes = run.layout.exp_avg_sq_bytes;
  l.stage_layers = run.layout.stage_layers;
  l.adopt_recompute_modules(run.layout.recompute_modules);
  l.account_for_embedding = run.layout.account_for_embedding;
  l.account_for_loss = run.layout.account_for_loss;
  return l;
}

std::optional<std::string> preset_for_gpu(const std::string& gpu) {
  static const std::pair<const char*, const char*> kPresets[] = {
      {"A100-40GB", "dgx-a100-40gb"}, {"A100-80GB", "dgx-a100"}, {"H100-80GB", "dgx-h100"},
      {"H800-80GB", "hgx-h800"},      {"H200", "hgx-h200"},     {"B200", "dgx-b200"},      {"B300", "dgx-b300"},
      {"GB200", "gb200-nvl72"},       {"GB300", "gb300-nvl72"},
  };
  for (const auto& [name, preset] : kPresets) {
    if (gpu == name) return std::string(preset);
  }
  return std::nullopt;
}

std::vector<PublishedRun> read_published_runs(const std::string& path, const std::string& models_dir) {
  const nlohmann::json doc = load_json_file(path);  // line and column of a syntax error, depth limited
  if (!doc.is_array()) throw InputError(path, "", "expected an array of runs");
  std::vector<PublishedRun> runs;
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& row = doc[i];
    const std::string where = "/" + std::to_string(i);
    PublishedRun run;
    try {
      run.id = opt_string(row, "id", where).value_or("row " + std::to_string(i));
      run.source = opt_string(row, "source", where).value_or("");
      const nlohmann::json& cluster = member(row, "cluster", where);
      const std::string spelled = opt_string(cluster, "gpu", where + "/cluster").value_or("");
      run.gpu = canonical_gpu_name(spelled).value_or(spelled);
      auto preset = preset_for_gpu(run.gpu);
      if (!preset) throw RowError(where + "/cluster/gpu", unknown_gpu_message(spelled));
      run.preset = *preset;
      if (auto topology = opt_string(cluster, "topology", where + "/cluster")) {
        run.preset = bundled_name(*topology, where + "/cluster/topology", "topologies");
      }
      run.gpus = static_cast<int>(req_int(cluster, "num_gpus", where + "/cluster"));
      read_number_format(row, where, run);
      const nlohmann::json& model = member(row, "model", where);
      if (auto bundled = opt_string(model, "bundled", where + "/model")) {
        run.model = bundled_model_of(model, bundled_name(*bundled, where + "/model/bundled", "workloads/models"),
                                     models_dir, where + "/model");
      } else {
        run.model = model_of(model, where + "/model");
      }
      run.sequence = static_cast<int>(run.model.max_sequence);
      run.layout = layout_of(member(row, "layout", where), run.gpus, where + "/layout");
      const nlohmann::json& expected = member(row, "expected", where);
      run.expected_out_of_memory = opt_bool(expected, "out_of_memory", where + "/expected").value_or(false);
      auto tps = expected.find("tokens_per_sec_per_gpu");
      if (run.expected_out_of_memory) {
        if (tps != expected.end() && !tps->is_null()) {
          throw RowError(where + "/expected/tokens_per_sec_per_gpu", "must be null for a run that ran out of memory");
        }
      } else {
        if (tps == expected.end() || !tps->is_number() || tps->get<double>() <= 0) {
          throw RowError(where + "/expected/tokens_per_sec_per_gpu", "expected a positive number");
        }
        run.expected_tokens_per_sec_per_gpu = tps->get<double>();
      }
    } catch (const RowError& e) {
      run.error = e.what();
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace parallax
