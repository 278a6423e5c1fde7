// How a training job is split over GPUs: the degrees of data, tensor, pipeline, context and
// expert parallelism, ZeRO sharding, batch sizes, recomputation, pipeline schedule, overlap
// switches and the rank order; its validation against a model and a GPU count; and the map
// between a global rank and its coordinates.
//
// Rank order (Megatron-core's RankGenerator): the order string lists the dimensions innermost
// first, e.g. "tp-cp-ep-dp-pp", and rank = Σ coordinate_d · stride_d with stride_d the product
// of the sizes of the dimensions listed before d. With TP innermost, a TP group is tp
// consecutive ranks, i.e. GPUs of one node when tp ≤ GPUs per node (global rank r is the
// topology's r-th GPU, node after node).
// Two decompositions share the order (as in Megatron-core):
//   dense layers    sizes {tp, cp, ep=1, dp, pp}           world = tp·cp·dp·pp
//   expert layers   sizes {etp, cp=1, ep, tp·cp·dp/(etp·ep), pp}   (etp: expert_tp, default tp)
// (Megatron-core's MoE parallel folding: the tp slot of the order holds the expert TP in the
// expert grid). With etp = tp an expert-parallel group is ep ranks taken from the dp·cp ranks
// of a stage that share a TP coordinate; the rule is Megatron's: etp·ep divides tp·cp·dp.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compute/operator_cost.h"
#include "model/layer_operators.h"
#include "training/memory_model.h"
#include "model/model_config.h"

namespace parallax {

enum class PipelineScheduleKind : uint8_t {
  kGpipe,
  kOneFOneB,
  kInterleavedOneFOneB,
  kZeroBubbleH1,
  kZeroBubbleH2,
  kZeroBubbleV,
  kDualPipeV
};
/// "gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_h2", "zb_v", "dualpipe_v".
const char* to_string(PipelineScheduleKind k);
/// Whether the schedule splits the backward into B (input gradients) and W (weight gradients).
bool splits_backward(PipelineScheduleKind k);
/// Whether a stage's two model chunks sit in a V (ZB-V, Qi et al. 2024; DualPipeV): chunk 0 of
/// stage s is virtual stage s, chunk 1 virtual stage 2p − 1 − s, so the model goes down the
/// stages and back up, and the first and last virtual stages (embedding, loss) share stage 0.
bool v_shaped(PipelineScheduleKind k);
/// The virtual stage that chunk c of stage s holds among p stages: c·p + s (Megatron-LM's
/// interleaving), or in a V as v_shaped says.
int virtual_stage_of(PipelineScheduleKind k, int p, int s, int c);
/// The stage and the chunk that hold virtual stage vs (virtual_stage_of's inverse).
struct StageChunk {
  int stage = 0;
  int chunk = 0;
};
StageChunk stage_chunk_of(PipelineScheduleKind k, int p, int vs);

/// How context parallelism exchanges what attention needs across the CP group: ring attention
/// (K/V blocks passed around the ring, overlapped with blockwise attention; Megatron's "p2p")
/// or Ulysses (all-to-all from sequence shards to head shards and back; Megatron's "a2a").
enum class ContextParallelComm : uint8_t { kRing, kUlysses };
/// "ring", "ulysses".
const char* to_string(ContextParallelComm c);
/// Parses "ring" (or "p2p") and "ulysses" (or "a2a"); nullopt otherwise.
std::optional<ContextParallelComm> context_parallel_comm_from(const std::string& name);

/// How MoE tokens reach their experts' GPUs: one all-to-all over the EP group (Megatron's
/// "alltoall" token dispatcher: a copy per routed slot), or DeepEP / HybridEP's dispatch
/// (Megatron's "flex"): a token goes once to each GPU holding one of its experts, crossing once
/// to each other node over the scale-out network and forwarded there over NVLink; the combine
/// retraces it. HybridEP first all-gathers the group's routing maps.
enum class MoeDispatcher : uint8_t { kAllToAll, kFlex };
/// The optimizer: Adam (AdamW), or Muon on the hidden layers' weight matrices (Megatron-Core's
/// TensorParallelMuon under its layer-wise distributed optimizer: each data-parallel rank owns
/// whole matrices, orthogonalises their momentum by 5 Newton–Schulz steps and all-gathers the
/// updates), Adam on the embedding, the output head and what sits beside them.
enum class OptimizerKind : uint8_t { kAdam, kMuon };
/// "adam", "muon".
const char* to_string(OptimizerKind o);
std::optional<OptimizerKind> optimizer_from(const std::string& name);
/// "alltoall", "flex".
const char* to_string(MoeDispatcher d);
/// Parses "alltoall" and "flex" (or "deepep", "hybridep"); nullopt otherwise.
std::optional<MoeDispatcher> moe_dispatcher_from(const std::string& name);

/// Which kernels the stack replays from CUDA graphs, so that the host issues them without its
/// per-kernel dispatch (ComputeModelOptions::host_dispatch): none; every Transformer layer's
/// passes (Megatron's and NeMo's per-layer graphs, TE's make_graphed_callables); the whole
/// iteration (`cuda_graph_impl full_iteration`); or parts of each layer (Megatron's
/// `cuda_graph_scope`, CudaGraphScope).
enum class CudaGraphs : uint8_t { kNone, kLayers, kFullIteration, kScoped };
/// Megatron's `cuda_graph_scope` parts of a layer: `attn` (the attention block: its norm, the
/// projections, the core and its residual add), `mlp` (a dense layer's MLP block), `moe_router`
/// (a MoE layer's norm, router and top-k, and the shared experts computed before routing unless
/// they overlap the dispatch) and `moe_preprocess` (the token permutation and a latent MoE's
/// down-projection). A MoE layer's experts and their all-to-alls stay eager, and so does a hybrid
/// model's MTP depth (iteration_units.cpp).
struct CudaGraphScope {
  bool attn = false, mlp = false, moe_router = false, moe_preprocess = false, mamba = false;
  bool operator==(const CudaGraphScope&) const = default;
};
/// "none", "layers", "full_iteration", or the scope's parts joined by '/' ("attn/moe_router";
/// Megatron's cuda_graph_scope: attn, mlp, moe_router, moe_preprocess, mamba).
std::string to_string(CudaGraphs g, const CudaGraphScope& scope = {});
/// Parses those names, a scope's parts separated by '/' or ','; nullopt otherwise.
std::optional<std::pair<CudaGraphs, CudaGraphScope>> cuda_graphs_from(const std::string& name);

/// Sets `module` ("attention", …, layer_operators.h's QuantModule names) to run its GEMMs in
/// `dtype` ("bf16", "fp8", "fp4"); the reason when either is unknown, else empty.
std::string set_module_precision(ModulePrecision& precision, const std::string& module, const std::string& dtype);

/// The dimensions of the rank grid, in the spelling of the order string.
enum class ParallelDim : uint8_t { kTp, kCp, kEp, kDp, kPp };
/// "tp", "cp", "ep", "dp", "pp".
const char* to_string(ParallelDim d);

/// How the router spreads token-slots over the routed experts: expert i gets the share
/// wᵢ/Σw, wᵢ = relative[i] when `relative` is given (one entry per expert, ≥ 0, not all 0),
/// else wᵢ = (i+1)^−zipf_exponent (Zipf; 0 is uniform). Expert i lives on EP rank
/// ⌊i/(E/ep)⌋, so a Zipf skew loads the first EP rank most.
struct ExpertLoad {
  std::vector<double> relative;
  double zipf_exponent = 0;
  bool uniform() const { return relative.empty() && zipf_exponent == 0; }
  bool operator==(const ExpertLoad&) const = default;
};

struct ParallelLayout {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int virtual_stages = 1;  ///< model chunks per pipeline stage (v); > 1 only interleaved, 2 in a V (zb_v, dualpipe_v)
  /// Interleaved 1F1B: micro-batches per group, each group run chunk by chunk (Megatron-Core's
  /// microbatch_group_size_per_vp_stage, N); 0: pp (Megatron's depth-first default).
  int microbatch_group = 0;
  int cp = 1;
  ContextParallelComm cp_comm = ContextParallelComm::kRing;
  int ep = 1;
  /// Expert tensor parallelism (Megatron's --expert-tensor-parallel-size): each routed expert's
  /// FFN split over this many ranks; 0 means tp. Its group is taken from the stage's tp·cp·dp
  /// ranks with ep (the expert grid above).
  int expert_tp = 0;
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  /// How the routed experts' GEMMs are issued (layer_operators.h): one GEMM per local expert,
  /// issued by the host, as Megatron-Core does by default (TEGroupedMLP without
  /// --moe-use-grouped-tensor), or device-side grouped kernels.
  ExpertGemms expert_gemms = ExpertGemms::kPerExpert;
  bool sequence_parallel = false;  ///< Megatron SP over the TP group
  ZeroStage zero_stage = ZeroStage::kStage0;  ///< kStage3 is FSDP
  /// Hybrid sharding (HSDP): the model states sharded over groups of this many of the dp·cp
  /// ranks (the nearest in rank order) and replicated across the dp·cp / dp_shard groups, whose
  /// gradient shards are all-reduced (torchtitan's data_parallel_shard_degree, Megatron's
  /// num_distributed_optimizer_instances = dp·cp / dp_shard); 0 shards over all dp·cp ranks.
  /// With ZeRO stages 1–3; the routed experts stay sharded over their expert-DP group.
  int dp_shard = 0;
  /// The ranks the dense model states are sharded over (ZeRO 1–3): dp_shard, or all dp·cp.
  int zero_shard_ranks() const { return dp_shard > 0 ? dp_shard : dp * cp; }
  /// Whether the states are sharded over part of the data-parallel ranks (HSDP).
  bool hybrid_sharded() const { return dp_shard > 0 && dp_shard < dp * cp; }
  int64_t micro_batch = 1;       ///< sequences per micro-batch
  int64_t global_batch = 1;      ///< sequences per iteration, over all DP replicas
  int64_t sequence_length = 0;   ///< tokens per sequence
  Recomputation recompute = Recomputation::kNone;
  /// With full recomputation: 0 recomputes every Transformer layer; N > 0 only the first N of
  /// each virtual stage (Megatron's --recompute-method block --recompute-num-layers N: the
  /// others keep their activations, for speed where memory allows).
  int recompute_layers = 0;
  /// Whether the layer at `index` within its virtual stage is fully recomputed.
  bool fully_recomputed(int index) const {
    return recompute == Recomputation::kFull && (recompute_layers == 0 || index < recompute_layers);
  }
  PipelineScheduleKind schedule = PipelineScheduleKind::kOneFOneB;
  DType dtype = DType::kBf16;    ///< GEMM inputs and activations
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;  ///< with fp8: how tensors are scaled (operator_cost.h)
  Fp4Recipe fp4_recipe = Fp4Recipe::kNvfp4;    ///< with fp4: how tensors are scaled (operator_cost.h)
  /// With fp8: the parameters kept and all-gathered in fp8 (Megatron's --fp8-param-gather).
  bool fp8_param_gather = false;
  /// With fp8 or fp4: the first and last Transformer layers kept in bf16 (Megatron's
  /// --first-last-layers-bf16 with --num-layers-at-start-in-bf16 / -at-end-in-bf16; its FP8
  /// current-scaling recipe keeps one at each end).
  int bf16_layers_at_start = 0;
  int bf16_layers_at_end = 0;
  /// Whether decoder layer `layer` of `layers` runs its GEMMs in bf16 under the above.
  bool bf16_layer(int layer, int layers) const {
    return layer < bf16_layers_at_start || layer >= layers - bf16_layers_at_end;
  }
  AttentionKernel attention = AttentionKernel::kFlash;  ///< how the attention core runs
  /// Megatron's recompute_modules beside the attention core's selective recomputation: MLA's
  /// up-projections, the experts' activation, dense MLPs, MoE blocks, norms (layer_operators.h).
  RecomputeModules recompute_modules{};
  /// A per-module quantisation recipe within a quantised run (layer_operators.h): modules whose
  /// GEMMs run in 16 bits, or in fp8 within an fp4 run; "mtp" in 16 bits puts the whole
  /// multi-token-prediction layers there.
  ModulePrecision module_precision{};
  /// Takes Megatron's module list; its "core_attn" is the attention core's selective
  /// recomputation, which it turns on unless the layout recomputes more.
  void adopt_recompute_modules(const RecomputeModules& modules) {
    recompute_modules = modules;
    if (modules.core_attn && recompute == Recomputation::kNone) recompute = Recomputation::kSelective;
  }
  /// Megatron's --use-precision-aware-optimizer: Transformer Engine's FusedAdam holds the Adam
  /// state, the moments in `exp_avg_bytes` / `exp_avg_sq_bytes` per element (its exp_avg_dtype,
  /// exp_avg_sq_dtype), and the fp32 master weight, where FusedAdam owns it, as the 16 bits
  /// that its bf16 parameter lacks (adam_state_bytes_per_parameter). Off: 12 B of fp32 state.
  bool precision_aware_optimizer = false;
  OptimizerKind optimizer = OptimizerKind::kAdam;
  int exp_avg_bytes = 4;
  int exp_avg_sq_bytes = 4;
  bool grad_reduce_overlap = true;    ///< gradient buckets reduced during the backward pass
  /// Gradients accumulated and reduced in fp32 (Megatron's main_grad buffers, its default with
  /// bf16 and NeMo's grad_reduce_in_fp32): 4 bytes per parameter kept and sent instead of 2.
  bool grad_reduce_in_fp32 = false;
  bool param_gather_prefetch = true;  ///< ZeRO parameter all-gathers issued one layer ahead
  /// ZeRO-3 gathers each parameter tensor of a transformer layer by its own all-gather (weights,
  /// biases and norm gains apart), as DeepSpeed's ZeRO-3 did before it batched them (DeepSpeed
  /// issue #1069, PR #1188, late 2021); false: one all-gather per layer (FSDP's flat parameter,
  /// DeepSpeed since). Each tensor's collective pays its own latency.
  bool param_gather_per_tensor = false;
  bool tp_comm_overlap = false;       ///< TP collectives run beside the GEMMs, not before/after
  /// The rotary embedding as one fused kernel (Megatron's apply_rope_fusion, its default for
  /// RoPE); false: eager PyTorch ops, 6× the bytes (Megatron-Bridge turns fusion off for any
  /// other position embedding, YaRN among them, and Megatron Core's fused RoPE refuses YaRN's mscale).
  bool rope_fusion = true;
  /// MoE layers: the router's top-k and load-balancing loss as Transformer Engine's fused
  /// kernels (Megatron's moe_router_fusion, default off: PyTorch ops, router_cost.h).
  bool moe_router_fusion = false;
  /// The load-balancing loss the recipe trains with (Megatron's moe_router_load_balancing_type
  /// with a coefficient above zero; its default type, aux_loss; none for GPT-OSS's recipes).
  LoadBalancingLoss moe_load_balancing = LoadBalancingLoss::kAux;
  /// MoE layers: router skew over the routed experts (uniform: Megatron's
  /// moe_router_force_load_balancing, or a well-balanced router).
  ExpertLoad moe_expert_load;
  /// MoE token dropping (Megatron's --moe-expert-capacity-factor c): each expert computes at
  /// most c times its even share of the slots routed in its EP group and drops the rest;
  /// nullopt: dropless.
  std::optional<double> moe_capacity_factor;
  /// With a capacity factor, every expert's rows padded to its capacity (Megatron's
  /// --moe-pad-expert-input-to-capacity): c times the even share computed and sent whatever the
  /// routing, in row counts the host knows without reading them back from the GPU.
  bool moe_pad_to_capacity = false;
  CudaGraphs cuda_graphs = CudaGraphs::kNone;
  CudaGraphScope cuda_graph_scope;  ///< with CudaGraphs::kScoped
  /// MoE layers with EP: the shared experts' kernels run on a stream of their own beside the
  /// token dispatch and combine (Megatron's --moe-shared-expert-overlap), not after them.
  bool moe_shared_expert_overlap = false;
  /// MoE layers with EP: Megatron's --overlap-moe-expert-parallel-comm (Megatron-Bridge's
  /// moe_a2a_overlap, combined 1F1B): in the steady state a forward and a backward pass of two
  /// micro-batches run as one, layer by layer, each one's dispatch and combine beside the other's
  /// kernels. Needs ep > 1, interleaved 1F1B when pp > 1 (or 1F1B on one stage), no full
  /// recomputation.
  bool moe_a2a_overlap = false;
  /// Activations of the first N Transformer layers moved to host memory after their forward
  /// and brought back before their backward, on copy streams beside the compute (Megatron's
  /// --cpu-offloading with --cpu-offloading-num-layers; activations only, not weights).
  int cpu_offloading_layers = 0;
  /// Whether Megatron-Core would offload this layout's activations: only without pipelining
  /// and without recomputation.
  bool activation_offloading_possible() const { return pp == 1 && recompute == Recomputation::kNone; }
  /// Whether the schedule runs a forward and a backward of different micro-batches as one pair:
  /// Megatron-Core's combined 1F1B (interleaved with a pipeline, 1F1B without) or DualPipeV's
  /// overlapped chunks.
  bool pairs_passes() const {
    return pp > 1 ? schedule == PipelineScheduleKind::kInterleavedOneFOneB || schedule == PipelineScheduleKind::kDualPipeV
                  : schedule == PipelineScheduleKind::kOneFOneB;
  }
  /// Whether this layout's all-to-alls can overlap across micro-batches (moe_a2a_overlap, as
  /// Megatron-Core allows it): ep > 1, no full recomputation, a schedule that pairs passes.
  bool moe_a2a_overlap_possible() const { return ep > 1 && recompute != Recomputation::kFull && pairs_passes(); }
  std::string rank_order = "tp-cp-ep-dp-pp";  ///< innermost first
  /// Layers of each virtual stage, pp·v entries in model order (virtual_stage(s, c) is chunk c
  /// of stage s); empty: layers / (pp·v) each.
  std::vector<int> stage_layers;
  /// Megatron's decoder_first/last_pipeline_num_layers: the first (last) pipeline stage's
  /// transformer layers, the middle stages sharing the rest; −1: not given.
  int first_stage_layers = -1, last_stage_layers = -1;
  /// Megatron's account_for_embedding/loss_in_pipeline_split: the embedding (the output layer
  /// and loss) counted as one layer of the first (last) virtual stage (pipeline_split.h).
  bool account_for_embedding = false, account_for_loss = false;

  /// Micro-batches per iteration on one pipeline: global_batch / (dp · micro_batch).
  int64_t micro_batches() const { return global_batch / (int64_t{dp} * micro_batch); }
  /// The virtual stage that chunk c of stage s holds (virtual_stage_of under this schedule).
  int virtual_stage(int s, int c) const { return virtual_stage_of(schedule, pp, s, c); }
  /// The stage that holds virtual stage vs.
  int stage_of(int vs) const { return stage_chunk_of(schedule, pp, vs).stage; }
  int world_size() const { return dp * tp * pp * cp; }
  /// The expert TP degree: expert_tp, or tp when it is 0.
  int expert_tensor_parallel() const { return expert_tp > 0 ? expert_tp : tp; }
  /// The DP degree of the expert layers: tp·cp·dp / (etp·ep) (dp·cp / ep when etp = tp).
  int expert_data_parallel() const { return tp * cp * dp / (expert_tensor_parallel() * ep); }
  bool operator==(const ParallelLayout&) const = default;
};

/// Megatron's (Transformer Engine's) offload windows for n offloaded layers of `layers`: entry j
/// is the layer at whose end the compute stream waits for layer j's copy to host memory (and
/// frees it): (j + 1)·w − 1 with w = layers / n, the remainder spread over the first windows. In
/// the backward, layer j is brought back from the start of that layer's backward.
std::vector<int> cpu_offloading_sync_layers(int n, int layers);

/// Throws InputError(file, pointer + "/field", reason) at the first problem, e.g.
/// "/parallel/tp: 6 does not divide num_heads=32". Checks: every degree ≥ 1; tp divides the
/// heads and the ffn, and tp and the KV heads divide one another (fewer KV heads than tp are
/// replicated, as layer_operators does); dp·tp·pp·cp = gpus; ep divides the experts, etp the
/// expert FFN, and etp·ep divides tp·cp·dp (ep > 1 or etp ≠ tp needs a MoE model, and etp ≠ tp
/// with tp > 1 needs sequence parallelism, as Megatron's MoE does); global_batch divisible by dp·micro_batch; pp·v divides the
/// layers as pipeline_split.h splits them (automatic when nothing is given and pp·v does not divide them); v > 1 exactly with interleaved_1f1b, which also
/// needs pp > 1 and micro-batches a multiple of pp; the sequence length splits over cp (2·cp
/// chunks when causal) and, with SP, the tokens over tp; Ulysses CP needs cp to divide the
/// heads of a TP rank and to divide, or be a multiple of, its KV heads; the rank order is a permutation of
/// tp, cp, ep, dp, pp (cp and ep may be left out when their degree is 1); activation offloading
/// (cpu_offloading_layers below the layers) needs pp = 1 and no recomputation, as Megatron-Core's;
/// with sparse attention (DSA) every (virtual) stage starts on a layer that runs its own indexer,
/// and cp is 1.
void validate(const ParallelLayout& layout, const ModelConfig& model, int gpus, const std::string& file = "",
              const std::string& pointer = "/parallel");

/// A rank's place in the dense grid.
struct RankCoords {
  int tp = 0;
  int cp = 0;
  int dp = 0;
  int pp = 0;
  auto operator<=>(const RankCoords&) const = default;
};

/// A rank's place in the expert grid: expert_dp runs over dp·cp/ep.
struct ExpertRankCoords {
  int tp = 0;
  int ep = 0;
  int expert_dp = 0;
  int pp = 0;
  auto operator<=>(const ExpertRankCoords&) const = default;
};

/// The rank ↔ coordinates maps of a layout, with its order string parsed once. Throws
/// std::invalid_argument on a bad order string (validate() reports it as an InputError).
class RankMapping {
 public:
  explicit RankMapping(const ParallelLayout& layout);

  int world_size() const { return world_; }
  int rank_of(const RankCoords& c) const;
  RankCoords coords_of(int rank) const;
  int expert_rank_of(const ExpertRankCoords& c) const;
  ExpertRankCoords expert_coords_of(int rank) const;
  /// The ranks of the group of `dim` that holds `rank`, in order of their coordinate along
  /// `dim` (kEp uses the expert grid; the others the dense grid).
  std::vector<int> group(ParallelDim dim, int rank) const;
  /// The expert-TP group of `rank`: the expert grid's ranks that differ only in their etp
  /// coordinate (the TP group when etp = tp).
  std::vector<int> expert_tp_group(int rank) const;

 private:
  // Sizes and strides indexed by ParallelDim.
  using Grid = std::array<int, 5>;
  int compose(const Grid& sizes, const Grid& coords) const;
  Grid decompose(const Grid& sizes, int rank) const;

  std::vector<ParallelDim> order_;  // innermost first, all five dims (missing ones appended)
  Grid dense_{};
  Grid expert_{};
  int world_ = 1;
};

/// The order string as dimensions, innermost first; missing dims are appended (size-1 dims
/// are anywhere). Throws std::invalid_argument naming an unknown or repeated name, or a
/// missing tp, dp or pp.
std::vector<ParallelDim> parse_rank_order(const std::string& order);

/// Convenience over RankMapping for one query.
int rank_of(const ParallelLayout& layout, const RankCoords& coords);
RankCoords coords_of(const ParallelLayout& layout, int rank);

/// Hybrid sharding within a node: the data-parallel ranks of one node of `gpus_per_node` GPUs
/// that divide the layout's dp·cp ranks (gcd(dp·cp, gpus_per_node / tp)).
int node_shard_ranks(const ParallelLayout& layout, int gpus_per_node);

/// Layers of each virtual stage (pp·v entries), by split_pipeline_layers (pipeline_split.h);
/// empty when the layout cannot be split (validate says why).
std::vector<int> virtual_stage_layers(const ParallelLayout& layout, const ModelConfig& model);

/// Adam's state bytes per parameter the optimizer shards keep. 12 (fp32 master, momentum,
/// variance) unless `precision_aware_optimizer`: then the moments take their own sizes, and the
/// master weight 2 bytes where Transformer Engine's FusedAdam owns it and the parameters are
/// bf16 (store_param_remainders, TE >= 2.1: the fp32 value is the bf16 parameter plus a 16-bit
/// remainder). FusedAdam owns it unless an fp8 recipe other than delayed scaling is in use
/// (Megatron-Core's use_precision_aware_optimizer_no_fp8_or_ds_fp8); with fp8 parameters there
/// are no bf16 bits to complete, so the master stays 4 bytes.
double adam_state_bytes_per_parameter(const ParallelLayout& layout);
/// Muon's state per matrix parameter: its fp32 master and fp32 momentum (one moment, not Adam's two).
inline constexpr double kMuonStateBytesPerParameter = 8.0;
/// Optimizer state per parameter of `parameters`, of which `adam_parameters` stay with Adam
/// (everything under Adam unless the layout runs Muon).
double optimizer_state_bytes_per_parameter(const ParallelLayout& layout, double parameters, double adam_parameters);

/// Bytes per element of an optimizer-state dtype name (fp32/float32 4, bf16/bfloat16 and
/// fp16/float16 2, fp8/uint8 1), or nullopt.
std::optional<int> optimizer_state_dtype_bytes(std::string_view name);
/// The name a workload gives an optimizer-state type of `bytes` (4 fp32, 2 bf16, 1 fp8).
const char* optimizer_state_dtype_name(int bytes);

}  // namespace parallax
