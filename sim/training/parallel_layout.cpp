// Validation of a parallel layout and the rank ↔ coordinates maps of its rank order.
#include "training/parallel_layout.h"
#include "training/pipeline_schedule.h"
#include "training/pipeline_split.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <stdexcept>

#include "io/input_error.h"
#include "model/layer_operators.h"

namespace parallax {
namespace {

constexpr std::array<ParallelDim, 5> kAllDims = {ParallelDim::kTp, ParallelDim::kCp, ParallelDim::kEp,
                                                 ParallelDim::kDp, ParallelDim::kPp};

size_t index(ParallelDim d) { return static_cast<size_t>(d); }

std::string num(int64_t v) { return std::to_string(v); }

// Where op-level checkpointing (torchtitan's policy, MicroBatch::op_checkpointing) is modelled:
// the dense Llama-style layers torchtitan checkpoints that way. Elsewhere the policy saves other
// tensors: a linear with a bias runs as addmm, which it does not count; grouped expert GEMMs
// and MLA's latents are other operators. With TP it is modelled as torchtitan's TP plan runs it,
// with the norms' sequence sharded (sequence parallelism).
std::string op_checkpointing_problem(const ModelConfig& model, const ParallelLayout& l) {
  if (l.tp > 1 && !l.sequence_parallel) {
    return "selective_op with tp > 1 needs sequence parallelism, as torchtitan's TP plan runs it (its norms shard the sequence)";
  }
  if (model.hybrid()) return "selective_op is modelled for Transformer layers; " + model.name + " is a hybrid model";
  if (model.moe || model.mla) return "selective_op is modelled for dense layers without MLA; " + model.name + " has " + (model.moe ? "experts" : "MLA");
  if (model.qkv_bias || model.attention_output_bias || model.mlp_bias) {
    return "selective_op is modelled for linear layers without biases (a biased linear runs as addmm, which the policy does not count)";
  }
  if (l.attention == AttentionKernel::kUnfused) return "selective_op needs a fused attention core (flash or flash2), not unfused";
  return {};
}

}  // namespace

const char* to_string(PipelineScheduleKind k) {
  switch (k) {
    case PipelineScheduleKind::kGpipe: return "gpipe";
    case PipelineScheduleKind::kOneFOneB: return "1f1b";
    case PipelineScheduleKind::kInterleavedOneFOneB: return "interleaved_1f1b";
    case PipelineScheduleKind::kZeroBubbleH1: return "zb_h1";
    case PipelineScheduleKind::kZeroBubbleH2: return "zb_h2";
    case PipelineScheduleKind::kZeroBubbleV: return "zb_v";
    case PipelineScheduleKind::kDualPipeV: return "dualpipe_v";
  }
  return "?";
}

bool splits_backward(PipelineScheduleKind k) {
  return k == PipelineScheduleKind::kZeroBubbleH1 || k == PipelineScheduleKind::kZeroBubbleH2 ||
         k == PipelineScheduleKind::kZeroBubbleV || k == PipelineScheduleKind::kDualPipeV;
}

bool v_shaped(PipelineScheduleKind k) {
  return k == PipelineScheduleKind::kZeroBubbleV || k == PipelineScheduleKind::kDualPipeV;
}

int virtual_stage_of(PipelineScheduleKind k, int p, int s, int c) {
  if (v_shaped(k)) return c == 0 ? s : 2 * p - 1 - s;
  return c * p + s;
}

StageChunk stage_chunk_of(PipelineScheduleKind k, int p, int vs) {
  if (v_shaped(k)) return vs < p ? StageChunk{vs, 0} : StageChunk{2 * p - 1 - vs, 1};
  return {vs % p, vs / p};
}

const char* to_string(ContextParallelComm c) { return c == ContextParallelComm::kUlysses ? "ulysses" : "ring"; }

std::optional<ContextParallelComm> context_parallel_comm_from(const std::string& name) {
  if (name == "ring" || name == "p2p") return ContextParallelComm::kRing;
  if (name == "ulysses" || name == "a2a") return ContextParallelComm::kUlysses;
  return std::nullopt;
}

const char* to_string(MoeDispatcher d) { return d == MoeDispatcher::kFlex ? "flex" : "alltoall"; }

std::optional<MoeDispatcher> moe_dispatcher_from(const std::string& name) {
  if (name == "alltoall") return MoeDispatcher::kAllToAll;
  if (name == "flex" || name == "deepep" || name == "hybridep") return MoeDispatcher::kFlex;
  return std::nullopt;
}

std::string to_string(CudaGraphs g, const CudaGraphScope& scope) {
  switch (g) {
    case CudaGraphs::kNone: return "none";
    case CudaGraphs::kLayers: return "layers";
    case CudaGraphs::kFullIteration: return "full_iteration";
    case CudaGraphs::kScoped: break;
  }
  std::string parts;
  for (auto [on, name] : {std::pair{scope.attn, "attn"}, std::pair{scope.mlp, "mlp"},
                          std::pair{scope.moe_router, "moe_router"}, std::pair{scope.moe_preprocess, "moe_preprocess"},
                          std::pair{scope.mamba, "mamba"}}) {
    if (on) parts += (parts.empty() ? "" : "/") + std::string(name);
  }
  return parts.empty() ? "none" : parts;
}

std::string set_module_precision(ModulePrecision& precision, const std::string& module, const std::string& dtype) {
  const std::optional<QuantModule> m = quant_module_from(module);
  if (!m) {
    return "unknown module \"" + module +
           "\" (expected attention, mlp, experts, shared_experts, moe_latent, mamba_in_proj, mamba_out_proj or mtp)";
  }
  const std::optional<DType> t = dtype_from_string(dtype);
  if (!t || !(*t == DType::kBf16 || *t == DType::kFp8 || *t == DType::kFp4)) {
    return "unknown GEMM type \"" + dtype + "\" for " + module + " (expected bf16, fp8 or fp4)";
  }
  if (*m == QuantModule::kMtp && *t != DType::kBf16) return "mtp layers can only be moved to bf16";
  precision.set(*m, *t);
  return {};
}

std::optional<std::pair<CudaGraphs, CudaGraphScope>> cuda_graphs_from(const std::string& name) {
  for (const CudaGraphs g : {CudaGraphs::kNone, CudaGraphs::kLayers, CudaGraphs::kFullIteration}) {
    if (name == to_string(g)) return std::pair{g, CudaGraphScope{}};
  }
  CudaGraphScope scope;
  size_t begin = 0;
  while (begin <= name.size()) {
    const size_t end = std::min(name.find_first_of("/,", begin), name.size());
    const std::string part = name.substr(begin, end - begin);
    if (part == "attn") scope.attn = true;
    else if (part == "mlp") scope.mlp = true;
    else if (part == "moe_router") scope.moe_router = true;
    else if (part == "moe_preprocess") scope.moe_preprocess = true;
    else if (part == "mamba") scope.mamba = true;
    else return std::nullopt;
    begin = end + 1;
  }
  return std::pair{CudaGraphs::kScoped, scope};
}

const char* to_string(OptimizerKind o) { return o == OptimizerKind::kMuon ? "muon" : "adam"; }

std::optional<OptimizerKind> optimizer_from(const std::string& name) {
  if (name == "adam" || name == "adamw") return OptimizerKind::kAdam;
  if (name == "muon") return OptimizerKind::kMuon;
  return std::nullopt;
}

double optimizer_state_bytes_per_parameter(const ParallelLayout& layout, double parameters, double adam_parameters) {
  const double adam = adam_state_bytes_per_parameter(layout);
  if (layout.optimizer != OptimizerKind::kMuon || !(parameters > 0)) return adam;
  const double muon = std::max(0.0, parameters - adam_parameters);
  return (kMuonStateBytesPerParameter * muon + adam * (parameters - muon)) / parameters;
}

double adam_state_bytes_per_parameter(const ParallelLayout& layout) {
  if (!layout.precision_aware_optimizer) return kAdamOptimizerBytesPerParameter;
  const bool fused_adam_owns_master = layout.dtype != DType::kFp8 || layout.fp8_recipe == Fp8Recipe::kDelayed;
  const bool bf16_parameters = !(layout.dtype == DType::kFp8 && layout.fp8_param_gather);
  const double master = fused_adam_owns_master && bf16_parameters ? 2.0 : 4.0;
  return master + layout.exp_avg_bytes + layout.exp_avg_sq_bytes;
}

std::optional<int> optimizer_state_dtype_bytes(std::string_view name) {
  if (name == "fp32" || name == "float32") return 4;
  if (name == "bf16" || name == "bfloat16" || name == "fp16" || name == "float16") return 2;
  if (name == "fp8" || name == "uint8") return 1;
  return std::nullopt;
}

const char* optimizer_state_dtype_name(int bytes) { return bytes == 4 ? "fp32" : bytes == 2 ? "bf16" : "fp8"; }

const char* to_string(ParallelDim d) {
  switch (d) {
    case ParallelDim::kTp: return "tp";
    case ParallelDim::kCp: return "cp";
    case ParallelDim::kEp: return "ep";
    case ParallelDim::kDp: return "dp";
    case ParallelDim::kPp: return "pp";
  }
  return "?";
}

std::vector<ParallelDim> parse_rank_order(const std::string& order) {
  std::vector<ParallelDim> dims;
  size_t begin = 0;
  while (begin <= order.size()) {
    size_t end = order.find('-', begin);
    if (end == std::string::npos) end = order.size();
    const std::string name = order.substr(begin, end - begin);
    auto it = std::find_if(kAllDims.begin(), kAllDims.end(), [&](ParallelDim d) { return name == to_string(d); });
    if (it == kAllDims.end()) {
      throw std::invalid_argument("unknown dimension \"" + name + "\" (expected tp, cp, ep, dp, pp joined by '-')");
    }
    if (std::find(dims.begin(), dims.end(), *it) != dims.end()) {
      throw std::invalid_argument("dimension " + name + " is listed twice");
    }
    dims.push_back(*it);
    begin = end + 1;
  }
  for (ParallelDim required : {ParallelDim::kTp, ParallelDim::kDp, ParallelDim::kPp}) {
    if (std::find(dims.begin(), dims.end(), required) == dims.end()) {
      throw std::invalid_argument(std::string("the order must list ") + to_string(required));
    }
  }
  return dims;
}

RankMapping::RankMapping(const ParallelLayout& layout) {
  std::vector<ParallelDim> listed = parse_rank_order(layout.rank_order);
  order_ = listed;
  for (ParallelDim d : kAllDims) {
    if (std::find(order_.begin(), order_.end(), d) == order_.end()) order_.push_back(d);
  }
  const int etp = layout.expert_tensor_parallel();
  if (layout.ep < 1 || etp < 1 || layout.tp * layout.cp * layout.dp % (etp * layout.ep) != 0) {
    throw std::invalid_argument("expert_tp·ep=" + num(etp) + "·" + num(layout.ep) +
                                " does not divide tp·cp·dp=" + num(layout.tp * layout.cp * layout.dp));
  }
  dense_ = {layout.tp, layout.cp, 1, layout.dp, layout.pp};
  expert_ = {etp, 1, layout.ep, layout.expert_data_parallel(), layout.pp};
  for (ParallelDim d : kAllDims) {
    const bool missing = std::find(listed.begin(), listed.end(), d) == listed.end();
    if (missing && (dense_[index(d)] > 1 || expert_[index(d)] > 1)) {
      throw std::invalid_argument(std::string("the order must list ") + to_string(d) + ", whose degree is above 1");
    }
  }
  world_ = layout.world_size();
}

int RankMapping::compose(const Grid& sizes, const Grid& coords) const {
  int rank = 0, stride = 1;
  for (ParallelDim d : order_) {
    const size_t i = index(d);
    if (coords[i] < 0 || coords[i] >= sizes[i]) {
      throw std::invalid_argument(std::string("coordinate ") + to_string(d) + "=" + num(coords[i]) +
                                  " is outside 0.." + num(sizes[i] - 1));
    }
    rank += coords[i] * stride;
    stride *= sizes[i];
  }
  return rank;
}

RankMapping::Grid RankMapping::decompose(const Grid& sizes, int rank) const {
  if (rank < 0 || rank >= world_) {
    throw std::invalid_argument("rank " + num(rank) + " is outside 0.." + num(world_ - 1));
  }
  Grid coords{};
  for (ParallelDim d : order_) {
    const size_t i = index(d);
    coords[i] = rank % sizes[i];
    rank /= sizes[i];
  }
  return coords;
}

int RankMapping::rank_of(const RankCoords& c) const { return compose(dense_, {c.tp, c.cp, 0, c.dp, c.pp}); }

RankCoords RankMapping::coords_of(int rank) const {
  Grid g = decompose(dense_, rank);
  return RankCoords{g[index(ParallelDim::kTp)], g[index(ParallelDim::kCp)], g[index(ParallelDim::kDp)],
                    g[index(ParallelDim::kPp)]};
}

int RankMapping::expert_rank_of(const ExpertRankCoords& c) const {
  return compose(expert_, {c.tp, 0, c.ep, c.expert_dp, c.pp});
}

ExpertRankCoords RankMapping::expert_coords_of(int rank) const {
  Grid g = decompose(expert_, rank);
  return ExpertRankCoords{g[index(ParallelDim::kTp)], g[index(ParallelDim::kEp)], g[index(ParallelDim::kDp)],
                          g[index(ParallelDim::kPp)]};
}

std::vector<int> RankMapping::group(ParallelDim dim, int rank) const {
  const Grid& sizes = dim == ParallelDim::kEp ? expert_ : dense_;
  Grid coords = decompose(sizes, rank);
  std::vector<int> ranks;
  ranks.reserve(static_cast<size_t>(sizes[index(dim)]));
  for (int k = 0; k < sizes[index(dim)]; ++k) {
    coords[index(dim)] = k;
    ranks.push_back(compose(sizes, coords));
  }
  return ranks;
}

std::vector<int> RankMapping::expert_tp_group(int rank) const {
  Grid coords = decompose(expert_, rank);
  std::vector<int> ranks;
  for (int k = 0; k < expert_[index(ParallelDim::kTp)]; ++k) {
    coords[index(ParallelDim::kTp)] = k;
    ranks.push_back(compose(expert_, coords));
  }
  return ranks;
}

int rank_of(const ParallelLayout& layout, const RankCoords& coords) { return RankMapping(layout).rank_of(coords); }
RankCoords coords_of(const ParallelLayout& layout, int rank) { return RankMapping(layout).coords_of(rank); }

int node_shard_ranks(const ParallelLayout& layout, int gpus_per_node) {
  return std::gcd(layout.dp * layout.cp, std::max(1, gpus_per_node / layout.tp));
}

std::vector<int> virtual_stage_layers(const ParallelLayout& layout, const ModelConfig& model) {
  return split_pipeline_layers(layout, model.layers).layers;
}

std::vector<int> cpu_offloading_sync_layers(int n, int layers) {
  std::vector<int> out;
  if (n <= 0 || layers <= 0) return out;
  const int w = layers / n, rest = layers % n;
  for (int j = 0; j < n; ++j) out.push_back((j + 1) * w - 1 + (j < rest ? j + 1 : rest));
  return out;
}

namespace {

// The router's skew and token dropping, as Megatron-Core allows them (its token drop needs the
// alltoall dispatcher: moe_utils / token_dispatcher.py, Megatron-Bridge's apply_moe_token_drop).
template <typename Fail>
void validate_moe_routing(const ParallelLayout& l, const ModelConfig& model, Fail& fail) {
  const ExpertLoad& load = l.moe_expert_load;
  const bool routed = !load.uniform() || l.moe_capacity_factor || l.moe_pad_to_capacity;
  if (routed && !model.moe) {
    fail(!load.uniform() ? "moe_expert_load" : l.moe_capacity_factor ? "moe_capacity_factor" : "moe_pad_to_capacity",
         "needs a mixture-of-experts model; " + model.name + " has no experts");
  }
  if (!load.relative.empty()) {
    if (static_cast<int64_t>(load.relative.size()) != model.moe->experts) {
      fail("moe_expert_load/relative", num(static_cast<int64_t>(load.relative.size())) + " loads for " +
                                           num(model.moe->experts) + " experts");
    }
    bool any = false;
    for (const double w : load.relative) {
      if (!std::isfinite(w) || w < 0) fail("moe_expert_load/relative", "loads must be finite and >= 0");
      any = any || w > 0;
    }
    if (!any) fail("moe_expert_load/relative", "the loads are all zero");
  }
  if (!std::isfinite(load.zipf_exponent) || load.zipf_exponent < 0) {
    fail("moe_expert_load/zipf", "the Zipf exponent must be finite and >= 0");
  }
  // Megatron refuses it (transformer_config.py: moe_act recomputation needs moe_grouped_gemm):
  // SequentialMLP's experts are plain MLP modules, which recompute no activation of their own.
  if (l.expert_gemms == ExpertGemms::kSequential && l.recompute_modules.moe_act) {
    fail("recompute_modules", "moe_act recomputation needs grouped expert MLPs (Megatron's moe_grouped_gemm): "
                              "not with expert_gemm sequential");
  }
  if (l.moe_capacity_factor) {
    if (!std::isfinite(*l.moe_capacity_factor) || *l.moe_capacity_factor <= 0) {
      fail("moe_capacity_factor", "must be > 0");
    }
    if (l.moe_dispatcher != MoeDispatcher::kAllToAll) {
      fail("moe_capacity_factor", "Megatron drops tokens only with the alltoall dispatcher, not " +
                                      std::string(to_string(l.moe_dispatcher)));
    }
  } else if (l.moe_pad_to_capacity) {
    fail("moe_pad_to_capacity", "needs a capacity factor (moe_capacity_factor) to pad to");
  }
}

// Where a layout field sits in a workload file (docs/workload-format.md), under `pointer` (the
// parallel block) unless it is a top-level key; most fields keep their name there.
std::string workload_pointer(const std::string& pointer, const std::string& field) {
  if (field.empty()) return pointer;
  if (field == "sequence_length") return "/sequence_length";
  static const std::map<std::string, std::string> renamed = {
      {"virtual_stages", "vpp"},
      {"first_stage_layers", "decoder_first_pipeline_num_layers"},
      {"last_stage_layers", "decoder_last_pipeline_num_layers"}};
  const auto it = renamed.find(field);
  return pointer + "/" + (it == renamed.end() ? field : it->second);
}

}  // namespace

void validate(const ParallelLayout& l, const ModelConfig& model, int gpus, const std::string& file,
              const std::string& pointer) {
  auto fail = [&](const std::string& field, const std::string& reason) {
    throw InputError(file, workload_pointer(pointer, field), reason);
  };
  if (std::string p = model.problem(); !p.empty()) fail("", "the model is inconsistent: " + p);
  const std::pair<const char*, int> degrees[] = {{"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp},
                                                 {"virtual_stages", l.virtual_stages}, {"cp", l.cp}, {"ep", l.ep}};
  for (const auto& [name, value] : degrees) {
    if (value < 1) fail(name, "must be at least 1, got " + num(value));
  }
  if (l.micro_batch < 1) fail("micro_batch", "must be at least 1, got " + num(l.micro_batch));
  if (l.module_precision.any() && !is_quantised(l.dtype)) {
    fail("module_precision", "needs a quantised run (dtype fp8 or fp4); this one is " + std::string(to_string(l.dtype)));
  }
  for (size_t i = 0; i < kQuantModules; ++i) {
    const std::optional<DType> t = l.module_precision.dtype[i];
    if (t && is_quantised(*t) && bytes_per_element(*t) <= bytes_per_element(l.dtype)) {
      fail("module_precision", std::string(to_string(static_cast<QuantModule>(i))) + " in " + to_string(*t) +
                                   " is not wider than the run's " + to_string(l.dtype) +
                                   " (a module moves to 16 bits, or to fp8 within fp4)");
    }
  }
  if (l.bf16_layers_at_start < 0 || l.bf16_layers_at_end < 0 ||
      l.bf16_layers_at_start + l.bf16_layers_at_end > model.layers) {
    fail("bf16_layers_at_start", "bf16 layers at the start (" + num(l.bf16_layers_at_start) + ") and end (" +
                                     num(l.bf16_layers_at_end) + ") must be at least 0 and at most the " +
                                     num(model.layers) + " layers together");
  }
  if (l.cpu_offloading_layers != 0) {
    // Megatron-Core's TransformerConfig refuses the same.
    if (l.cpu_offloading_layers < 0 || l.cpu_offloading_layers >= model.layers) {
      fail("cpu_offloading_layers", "must be at least 0 and less than the " + num(model.layers) + " layers, got " +
                                        num(l.cpu_offloading_layers));
    }
    if (!l.activation_offloading_possible()) {
      fail("cpu_offloading_layers", l.pp > 1 ? "activation offloading needs pp = 1 (Megatron-Core has no pipeline support for it)"
                                             : "activation offloading does not work with activation recomputation (recompute \"none\")");
    }
  }
  if (l.recompute_layers < 0) fail("recompute_layers", "must be at least 0, got " + num(l.recompute_layers));
  if (l.recompute_layers > 0 && l.recompute != Recomputation::kFull) {
    fail("recompute_layers", "needs full recomputation (recompute \"full\"): it chooses which layers are fully recomputed");
  }
  if (l.recompute == Recomputation::kSelectiveOp) {
    if (std::string why = op_checkpointing_problem(model, l); !why.empty()) fail("recompute", why);
  }
  if (l.global_batch < 1) fail("global_batch", "must be at least 1, got " + num(l.global_batch));
  if (l.sequence_length < 1) fail("sequence_length", "must be at least 1, got " + num(l.sequence_length));

  // Tensor parallelism splits heads, KV heads and the FFN.
  if (model.heads % l.tp != 0) fail("tp", num(l.tp) + " does not divide num_heads=" + num(model.heads));
  if (!model.mla && model.kv_heads % l.tp != 0 && l.tp % model.kv_heads != 0) {
    fail("tp", num(l.tp) + " and num_kv_heads=" + num(model.kv_heads) +
                   " do not divide one another (KV heads are split over tp, or replicated when fewer)");
  }
  if (model.any_dense_mlp() && model.ffn % l.tp != 0) fail("tp", num(l.tp) + " does not divide ffn=" + num(model.ffn));
  // Megatron's MambaMixer splits its heads by groups over TP.
  if (model.mamba && model.mamba->groups % l.tp != 0) {
    fail("tp", num(l.tp) + " does not divide the Mamba layers' groups=" + num(model.mamba->groups));
  }
  if (model.mamba && l.cp > 1) fail("cp", "context parallelism of Mamba layers is not modelled (cp=" + num(l.cp) + ")");
  if (l.expert_tp < 0) fail("expert_tp", num(l.expert_tp) + " must be at least 1 (or 0 for tp)");
  const int etp = l.expert_tensor_parallel();
  if (etp != l.tp && !model.moe) {
    fail("expert_tp", num(etp) + " needs a mixture-of-experts model; " + model.name + " has no experts");
  }
  if (model.moe && model.moe->expert_ffn % etp != 0) {
    fail(l.expert_tp > 0 ? "expert_tp" : "tp",
         num(etp) + " does not divide expert_ffn=" + num(model.moe->expert_ffn) +
             (l.expert_tp > 0 ? std::string(" (expert tensor parallelism)") : " (expert tensor parallelism equals tp)"));
  }
  if (etp != l.tp && l.tp > 1 && !l.sequence_parallel) {
    fail("expert_tp", num(etp) + " differs from tp=" + num(l.tp) +
                          ": MoE layers with tp > 1 need sequence_parallel (their tokens are split over tp)");
  }

  const int64_t world = int64_t{l.dp} * l.tp * l.pp * l.cp;
  if (world != gpus) {
    fail("", "dp·tp·pp·cp = " + num(l.dp) + "·" + num(l.tp) + "·" + num(l.pp) + "·" + num(l.cp) + " = " +
                 num(world) + " does not equal the " + num(gpus) + " GPUs");
  }

  if (l.ep > 1) {
    if (!model.moe) fail("ep", num(l.ep) + " needs a mixture-of-experts model; " + model.name + " has no experts");
    if (model.moe->experts % l.ep != 0) {
      fail("ep", num(l.ep) + " does not divide num_experts=" + num(model.moe->experts));
    }
  }
  if (l.ep > 1 || etp != l.tp) {
    if (etp == l.tp && (l.dp * l.cp) % l.ep != 0) {
      fail("ep", num(l.ep) + " does not divide dp·cp=" + num(l.dp * l.cp) +
                     " (expert-parallel groups are taken from the data- and context-parallel ranks)");
    }
    if (int64_t{l.tp} * l.cp * l.dp % (int64_t{etp} * l.ep) != 0) {
      fail(l.expert_tp > 0 ? "expert_tp" : "ep", "expert_tp·ep=" + num(etp) + "·" + num(l.ep) + " does not divide tp·cp·dp=" + num(l.tp) + "·" +
                     num(l.cp) + "·" + num(l.dp) + " (the expert grid folds the stage's ranks)");
    }
  }

  if (l.optimizer == OptimizerKind::kMuon && (l.zero_stage == ZeroStage::kStage2 || l.zero_stage == ZeroStage::kStage3)) {
    // Megatron-Core's Muon needs whole matrices: it runs beside its layer-wise distributed
    // optimizer (ZeRO-1's sharding of whole parameters), not a sharded gradient or parameter.
    fail("optimizer", "muon shards whole matrices over the data-parallel ranks (zero_stage 0 or 1), not zero_stage " +
                          num(static_cast<int>(l.zero_stage)));
  }
  if (l.moe_a2a_overlap) {
    // Megatron-Core's rules for --overlap-moe-expert-parallel-comm (transformer_config.py).
    if (l.ep < 2) fail("moe_a2a_overlap", "needs expert parallelism (ep > 1), got ep=" + num(l.ep));
    if (l.recompute == Recomputation::kFull) fail("moe_a2a_overlap", "does not run with full recomputation");
    // DualPipeV's overlapped forward-and-backward chunks are the same overlap (DeepSeek-V3 §3.2.1).
    if (!l.pairs_passes()) {
      fail("moe_a2a_overlap", "needs interleaved_1f1b or dualpipe_v with pp > 1 (or 1f1b on one stage), not " +
                                  std::string(to_string(l.schedule)) + " with pp=" + num(l.pp));
    }
  }

  validate_moe_routing(l, model, fail);
  if (l.dp_shard < 0) fail("dp_shard", "must be at least 0 (0: all dp·cp ranks), got " + num(l.dp_shard));
  if (l.dp_shard > 0) {
    if ((int64_t{l.dp} * l.cp) % l.dp_shard != 0) {
      fail("dp_shard", num(l.dp_shard) + " does not divide dp·cp=" + num(int64_t{l.dp} * l.cp));
    }
    if (l.hybrid_sharded() && l.zero_stage == ZeroStage::kStage0) {
      fail("dp_shard", "hybrid sharding needs sharded states (zero_stage 1, 2 or 3), not zero_stage 0");
    }
    if (l.hybrid_sharded() && l.optimizer == OptimizerKind::kMuon) {
      fail("dp_shard", "hybrid sharding is modelled for Adam's distributed optimizer, not muon's layer-wise one");
    }
  }

  if (l.global_batch % (int64_t{l.dp} * l.micro_batch) != 0) {
    fail("global_batch", num(l.global_batch) + " is not divisible by dp·micro_batch=" + num(l.dp) + "·" +
                             num(l.micro_batch) + "=" + num(int64_t{l.dp} * l.micro_batch));
  }
  const int64_t m = l.micro_batches();
  // Each micro-batch is simulated pass by pass: beyond this an iteration's graph outgrows memory.
  constexpr int64_t kMaxMicroBatches = 16384;
  if (m > kMaxMicroBatches) {
    fail("global_batch", num(m) + " micro-batches per iteration (global_batch / (dp·micro_batch)) exceed the " +
                             num(kMaxMicroBatches) + " that an iteration may have");
  }

  const bool interleaved = l.schedule == PipelineScheduleKind::kInterleavedOneFOneB;
  const bool v_shape = v_shaped(l.schedule);
  if (interleaved && l.virtual_stages < 2) {
    fail("virtual_stages", "interleaved_1f1b needs at least 2 model chunks per stage, got " + num(l.virtual_stages));
  }
  if (v_shape && l.virtual_stages != 2) {
    fail("virtual_stages", std::string(to_string(l.schedule)) + " places 2 model chunks per stage in a V, not " +
                               num(l.virtual_stages));
  }
  if (!interleaved && !v_shape && l.virtual_stages != 1) {
    fail("virtual_stages", num(l.virtual_stages) + " model chunks per stage need schedule interleaved_1f1b, not " +
                               to_string(l.schedule));
  }
  if (interleaved && l.pp < 2) fail("pp", "interleaved_1f1b needs pp ≥ 2, got " + num(l.pp));
  if (v_shape && l.pp < 2) fail("pp", std::string(to_string(l.schedule)) + " needs pp ≥ 2, got " + num(l.pp));
  if (l.schedule == PipelineScheduleKind::kDualPipeV && m < 2 * int64_t{l.pp}) {
    // DualPipeV's step asserts num_chunks >= 2·num_ranks: its warm-up alone runs 2p forwards.
    fail("global_batch", "dualpipe_v needs at least 2·pp=" + num(2 * int64_t{l.pp}) +
                             " micro-batches (global_batch / (dp·micro_batch)), got " + num(m));
  }
  if (!interleaved && l.microbatch_group > 0) {
    fail("microbatch_group", "a micro-batch group orders interleaved_1f1b's chunks, not " + std::string(to_string(l.schedule)));
  }
  if (interleaved) {
    if (const std::string why = interleaving_problem(l.pp, static_cast<int>(m), l.microbatch_group); !why.empty()) {
      fail(l.microbatch_group > 0 ? "microbatch_group" : "global_batch", why);
    }
  }

  if (const PipelineSplit split = split_pipeline_layers(l, model.layers); !split.problem.empty()) {
    fail(split.field, split.problem);
  } else if (model.sparse_attention) {
    // A layer that reuses the last indexer's top-k needs that indexer on its own (virtual)
    // stage: Megatron-Core refuses the split otherwise (the top-k is not sent between stages).
    int first = 0;
    for (const int layers : split.layers) {
      if (layers > 0 && model.has_attention(first) && !model.has_indexer(first)) {
        fail(l.pp > 1 ? "pp" : "virtual_stages",
             "a pipeline stage starts at layer " + num(first) + ", which reuses the top-k of a DSA indexer on the " +
                 "stage before it (Megatron-Core needs each stage to start on a layer that runs its own indexer)");
      }
      first += layers;
    }
  }
  if (l.cp > 1 && model.sparse_attention) {
    fail("cp", "context parallelism (cp=" + num(l.cp) + ") with sparse attention (DSA) is not modelled: Megatron-Core " +
                   "all-gathers the latents and the indexer's keys, neither ring nor Ulysses");
  }

  const int64_t chunks = l.cp > 1 ? 2 * int64_t{l.cp} : 1;  // causal load balancing: 2·cp chunks
  if (l.sequence_length % chunks != 0) {
    fail("sequence_length", num(l.sequence_length) + " is not a multiple of 2·cp=" + num(chunks) +
                                " (causal load balancing gives each CP rank two chunks)");
  }
  if (l.cp > 1 && l.attention == AttentionKernel::kUnfused) {
    fail("attention", "context parallelism (cp=" + num(l.cp) +
                          ") needs a blockwise FlashAttention-style kernel, not the unfused one");
  }
  if (l.cp > 1 && l.cp_comm == ContextParallelComm::kUlysses) {
    // The all-to-all hands each CP rank whole heads of the full sequence; KV heads fewer than
    // cp are replicated (each CP rank gets one), which needs cp to be a multiple of them.
    const int heads = model.heads / l.tp;
    const int kv_heads = model.mla ? heads : std::max(1, model.kv_heads / l.tp);
    if (heads % l.cp != 0 || (kv_heads % l.cp != 0 && l.cp % kv_heads != 0)) {
      fail("cp", "Ulysses needs cp=" + num(l.cp) + " to divide the " + num(heads) + " query heads of each TP rank" +
                     " and to divide or be a multiple of its " + num(kv_heads) + " KV heads; use cp_comm \"ring\"");
    }
  }
  if (l.sequence_parallel && (l.micro_batch * l.sequence_length / l.cp) % l.tp != 0) {
    fail("sequence_parallel", "needs the " + num(l.micro_batch * l.sequence_length / l.cp) +
                                  " tokens of a micro-batch per CP rank to be a multiple of tp=" + num(l.tp));
  }

  try {
    RankMapping mapping(l);
  } catch (const std::invalid_argument& e) {
    fail("rank_order", "\"" + l.rank_order + "\": " + e.what());
  }
}

}  // namespace parallax
