// The operators of one batch on one GPU, layer by layer, with their forward and backward costs
// (FLOPs, HBM bytes, GEMM shape) for the compute model; and the model FLOPs per token used for
// MFU. Training and serving both use them.
//
// Two kinds of batch. A training micro-batch (MicroBatch) is b sequences of s tokens. A serving
// step's ragged batch (RaggedBatch) is a list of sequences, each with q new tokens (a prefill
// chunk, or 1 for a decode step) after kv − q tokens already in its KV cache: its GEMMs run on
// T = Σq rows, its attention reads Σkv keys' K and V, and causal attention computes
// Σ q·(kv − q) + q·(q + 1)/2 query-key pairs (new token i sees the cached keys and the new ones
// up to itself); only the sequences that sample a token run the output head.
//
// For a micro-batch: On one GPU, with tensor parallelism t, context
// parallelism c, expert parallelism e and optional sequence parallelism:
//   T    = b·s/c                tokens whose activations this GPU computes
//   T_sp = T/t with SP, else T  tokens of the norms, residuals and other elementwise work
//   heads H/t (KV heads G/t, or one replicated head when G < t), FFN f/t, vocab ⌈V/t⌉,
//   routed experts E/e, expert FFN f_e/etp (expert tensor parallelism, Megatron's default etp = t)
// GEMM y[m×n] = x[m×k]·W[k×n], FLOPs 2mnk:
//   qkv_proj           m=T, k=h, n=(H+2G)·d/t
//   attention_out_proj m=T, k=H·d_v/t, n=h
//   mlp gate_up/down   m=T, h → 2f/t gated (gate and up in one GEMM on one input, as
//                      Megatron-Core, vLLM and TurboMind run them) or h → f/t plain, then f/t → h
//   router             m=T_sp, k=h, n=E  (not split)
//   experts            grouped: the touched ones of E/e local experts (below), on the GPU's
//                      T·k_top·etp/t routed token-slots on average, whatever e is, h → f_e/etp → h;
//                      with experts_in_tp_group, T·k_top/e slots and whole experts, h → f_e → h
//                      Touched experts: n slots routed uniformly over E_l local experts reach
//                      E_l·(1 − (1 − 1/E_l)ⁿ) of them on average; only those are computed and
//                      have their weights read (a decode step of a few tokens reads a few
//                      experts), each on n / touched rows. With thousands of slots (training)
//                      every expert is touched.
//   logits             m=T, k=h, n=⌈V/t⌉
// Attention core, FlashAttention style (never materialises s×s; Dao 2022):
//   forward  2·b·s_q·s_kv·(H/t)·(d_qk + d_v) · (½ if causal), s_q = s/c, s_kv = s
//            = 4·b·s²·h_attn (·½) for d_qk = d_v = d, h_attn = H·d
//            (with context parallelism each rank holds s/c queries against all s keys; the
//             load-balanced causal split gives every rank the same half)
//   backward 2.5 × forward (FlashAttention-2: five s×s products against two, the extra one
//            being the recomputation of Q·Kᵀ)
// Attention core, unfused (Megatron-LM before FlashAttention; "eager" attention elsewhere): the
// scores are materialised per head, so a causal mask saves nothing —
//   attention_scores   batched GEMM Q·Kᵀ, b·H/t groups of m=s_q, n=s_kv, k=d_qk
//   attention_softmax  scale, mask and softmax fused in one kernel (Megatron's
//                      scaled_masked_softmax): reads and writes the b·(H/t)·s_q·s_kv scores;
//                      its backward reads the probabilities and their gradient and writes the
//                      scores' gradient (1.5 × the forward bytes)
//   attention_context  batched GEMM P·V, b·H/t groups of m=s_q, n=d_v, k=s_kv
// with GEMM backwards as above; dropout, when the model has it, as below.
// GEMM backward: 2 × forward (data and weight gradients, each a product of the same volume).
// Memory-bound operators (norms, activations, residual adds, rotary, routing permutations,
// embedding lookup, cross-entropy): bytes of every tensor read and written once, in the
// activation dtype; backward moves twice the forward bytes (it reads the saved input and the
// output gradient and writes the input gradient), except residual adds (gradients pass through).
// Biased experts issued per expert (ExpertGemms::kPerExpert: Megatron Core's TEGroupedMLP) add
// the down projection's bias in eager PyTorch, per local expert, weighted by the routing
// probability, then concatenate the rows (expert_output_bias: 6 element sizes a slot element
// each way, E + 1 operators issued forward and E backward for E local experts; with fp32
// routing weights, 2e + 24 and 2e + 32 bytes and a cast kernel more each way).
// MLA (DeepSeek-V3): the down projections (q_down, kv_down) are replicated across TP ranks and
// run on the T_sp tokens, the up projections are split by heads; the attention core uses the
// materialised per-head dims (d_qk = nope + rope = 192, d_v = 128), as training does — the
// absorbed-weight form of MLA only pays off in decoding, and under DeepSeek Sparse Attention.
// DSA (ModelConfig::sparse_attention: DeepSeek-V3.2, GLM-5), with I index heads of d_I and top-k:
//   indexer_q_proj     m=T, k=q_lora (or h), n=I·d_I    whole on every TP rank (not split)
//   indexer_k_proj     m=T, k=h, n=d_I;  indexer_weights_proj m=T, k=h, n=I
//   indexer_qk_prep    the key's LayerNorm, rotary and the Hadamard rotation of q and k
//   indexer_scores_topk  P·I·(2·d_I + 3) FLOPs over the P causal pairs (every earlier key), the
//                      fp32 logits written and read by the top-k, an int32 index per pair kept;
//                      in serving in fp8 over the cached fp8 index keys; its backward the KL loss
//                      on the P_k selected pairs (DeepSeek's sparse stage), 2·P_k·(H·d_key + 3·I·d_I)
//   the core           each query attends to min(p + 1, k) keys, (s·k − k²/2)/(s²/2) of the causal
//                      pairs; in training and serving alike the absorbed form (Megatron-Core's
//                      AbsorbedMLASelfAttention, sparse FlashMLA): q_nope·W_UK per head into the
//                      latent, MQA over the latents and rope keys (d_key = kv_lora + rope, values
//                      kv_lora), o·W_UV per head; a serving step reads each query's top-k latents.
//   Its TP collectives (the KL target's fp32 all-reduce, the sequence-parallel gathers of the
//   hidden state and the query latent) are training/iteration_comm's. Not modelled: Megatron's
//   dense KL loss (its default), context parallelism (refused).
// Dropout (ModelConfig::attention_dropout, hidden_dropout > 0): in the unfused core a kernel of
// its own on the probabilities (reads them, writes the output and a 1-byte mask; its backward
// reads the gradient and the mask and writes the gradient); in FlashAttention it runs inside
// the kernel and its random-number cost is not modelled; after each residual branch it is
// fused into the residual add, which then also writes (and its backward reads) a 1-byte mask.
// Saved activations (for the memory model), 16-bit whatever the GEMM dtype, per GPU:
//   each norm its input; the first projection of a block its input (the norm's output: T_sp
//   rows, as Megatron keeps the sequence-parallel shard and gathers it again); q/k/v the
//   attention core (FlashAttention: Q, K, V and the fp32 row statistics; unfused: Q, K and V
//   expanded to every head, the softmax output, the dropout mask and output); the output
//   projection its input; each residual add its dropout mask; a plain MLP the GELU's input and
//   output, a gated one the gate and up outputs and the product; a MoE layer the router's
//   fp32 probabilities and chosen weights, the routed token-slots' inputs and outputs and the
//   experts' MLP tensors (shared experts as a dense MLP on the same input); MLA its latent
//   vectors (before and after their norms). The output side: the final norm's input, the
//   logits' input and the fp32 softmax of the cross-entropy. For a GPT layer (MLP 4h, GELU,
//   dropout, unfused) this is Korthikanti et al.'s sbh·(10 + 24/t + 5as/(ht)) exactly (see
//   memory_model.h); without dropout the masks go (2sbh, and 3as²b of the 5).
// Precision: `dtype` is the GEMMs' type. With fp8 the weight GEMMs read fp8 inputs and weights
// and write bf16 (activation_dtype in compute/operator_cost.h); the attention core, the
// memory-bound kernels, the output head and the products of two activations stay in bf16, as in
// Transformer Engine's and TensorRT-LLM's fp8 recipes.
// Hybrid models (ModelConfig::hybrid_pattern): each layer is one block with its own norm and
// residual — attention or an MLP/MoE as above, or a Mamba-2 mixer (Megatron-Core's MambaMixer,
// heads, groups and inner width d_in split by TP):
//   mamba_in_proj      m=T, k=h, n=(2·d_in + 2·G·N + H_m)/t
//   mamba_conv1d       causal depthwise convolution + SiLU over (d_in + 2·G·N)/t channels
//   mamba_ssd_scan     the chunked scan, chunks of q: 2qN·G/t + (H_m/t)·(2qP + 4NP) FLOPs a token,
//                      as mamba_ssm's Triton kernels run it (their HBM traffic: layer_operators.cpp)
//   mamba_gated_norm   RMSNorm(y)·SiLU(z) over d_in/t
//   mamba_out_proj     m=T, k=d_in/t, n=h
// Not modelled: embedding dropout, sliding windows, padding of the vocabulary beyond ⌈V/t⌉,
// load imbalance between experts (the average is used), context parallelism of Mamba layers.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "compute/operator_cost.h"
#include "units/units.h"
#include "model/model_config.h"
#include "model/router_cost.h"

namespace parallax {

/// How the attention core runs: one fused kernel — kFlash the GPU's own (FlashAttention-2 on
/// Ampere, FlashAttention-3 or cuDNN on Hopper and Blackwell), kFlash2 FlashAttention-2 (or
/// the Triton kernels of 2023) on any GPU, which leaves Hopper's and Blackwell's asynchronous
/// tensor cores unused (compute_model.h) — or the unfused scores, softmax and context of the
/// file header.
enum class AttentionKernel : uint8_t { kFlash, kFlash2, kUnfused };
/// "flash", "flash2" or "unfused".
const char* to_string(AttentionKernel k);
/// Parses "flash", "flash2" and "unfused"; nullopt otherwise.
std::optional<AttentionKernel> attention_kernel_from(const std::string& name);

/// Megatron's recompute_modules (selective granularity): modules whose forward runs again in
/// the backward instead of keeping what they compute. The attention core's recomputation is
/// the training layout's own (Recomputation::kSelective).
struct RecomputeModules {
  bool mla_up_proj = false;  ///< MLA's up-projections and rotary: Q, K, V not kept, the latents are
  bool moe_act = false;      ///< the routed experts' activation: its output, the down projection's input, not kept
  bool mlp = false;          ///< a dense layer's MLP: only its input kept
  /// A MoE layer's whole MoE block (router, dispatch, experts, combine, shared experts): only its
  /// input kept; its forward, all-to-alls included, runs again in the backward.
  bool moe = false;
  /// The layers' pre-attention and pre-MLP norms that are modules of their own: their outputs
  /// are not kept (the GEMMs after them keep their own copies under fp8); they run again in the
  /// backward. Megatron-Core's Transformer Engine layer spec fuses the pre-attention norm into the
  /// QKV projection and a dense MLP's norm into its first projection, so this reaches MLA's input
  /// norm and the norm before a MoE block only (transformer_layer.py skips IdentityOp norms).
  bool layernorm = false;
  /// The attention core: the training layout's selective recomputation (Recomputation::kSelective),
  /// named as Megatron names it; ParallelLayout::adopt_recompute_modules turns it on.
  bool core_attn = false;
  bool any() const { return mla_up_proj || moe_act || mlp || moe || layernorm || core_attn; }
  bool operator==(const RecomputeModules&) const = default;
};
/// Parses Megatron's module names "mla_up_proj", "moe_act", "mlp", "moe", "layernorm",
/// "core_attn"; nullopt for another.
std::optional<RecomputeModules> add_recompute_module(RecomputeModules modules, const std::string& name);
/// Those names, as messages list them.
inline constexpr const char* kRecomputeModuleChoices = "mla_up_proj, moe_act, mlp, moe, layernorm or core_attn";
/// Megatron's names of the modules set, in the order above.
std::vector<std::string> module_names(const RecomputeModules& modules);
/// "mla_up_proj+moe_act" ("" for none).
std::string to_string(const RecomputeModules& modules);

/// How a MoE layer's routed experts run their GEMMs. kGrouped: one device-side grouped kernel
/// per GEMM that reads the experts' row counts on the GPU (cuBLASLt's grouped GEMM through
/// Transformer Engine's grouped tensors, a CuTe DSL fused grouped MLP, DeepGEMM, vLLM's and
/// SGLang's fused MoE kernels), or any experts under a CUDA graph of static shapes. kPerExpert:
/// the host reads the row counts back from the GPU and issues one GEMM per local expert
/// (Transformer Engine's GroupedLinear with host-side m_splits: `m_splits.tolist()`, then a
/// cuBLASLt matmul, with its descriptors and heuristic query, per expert on 4 streams; Megatron
/// Core's TEGroupedMLP). Each such GEMM is host-issued (OperatorCost::host_issued_kernels): its
/// forward one per expert, its backward two. kSequential: Megatron Core's SequentialMLP (its
/// default, moe_grouped_gemm off): every local expert its own MLP module, called whether or not
/// tokens reached it, its GEMMs issued one by one as kPerExpert and its other kernels (the fused
/// activation, a clamp, its own input quantisation) each its own each way, the experts' outputs
/// then concatenated (torch.cat; the gradient's split is a view); with one local expert a plain
/// MLP. Not modelled: the fp8/fp4 padding of each expert's rows to a multiple of 16 or 32.
enum class ExpertGemms : uint8_t { kGrouped, kPerExpert, kSequential };
/// "grouped", "per_expert" or "sequential".
const char* to_string(ExpertGemms g);
/// Parses "grouped", "per_expert" and "sequential"; nullopt otherwise.
std::optional<ExpertGemms> expert_gemms_from(const std::string& name);

/// The modules a per-module quantisation recipe moves off the run's GEMM type (Megatron's
/// quant_recipe, Transformer Engine's per-module recipes: Megatron-Bridge's te_quant.cfg keeps
/// Nemotron 3 Super's attention and latent projections in 16 bits and Mamba's output projection
/// in MXFP8 within an NVFP4 run): the attention projections (MLA's too), a dense MLP, the routed
/// experts, the shared experts, a latent MoE's two projections, Mamba's input and output
/// projections, and the multi-token-prediction layers (whole).
enum class QuantModule : uint8_t {
  kAttention, kMlp, kExperts, kSharedExperts, kMoeLatent, kMambaInProj, kMambaOutProj, kMtp
};
inline constexpr size_t kQuantModules = 8;
/// "attention", "mlp", "experts", "shared_experts", "moe_latent", "mamba_in_proj",
/// "mamba_out_proj", "mtp".
const char* to_string(QuantModule m);
std::optional<QuantModule> quant_module_from(const std::string& name);

/// Each module's GEMM type where it is not the run's (nullopt: the run's). A quantised type takes
/// the run's recipe for it (MicroBatch::fp8_recipe, fp4_recipe).
struct ModulePrecision {
  std::array<std::optional<DType>, kQuantModules> dtype{};
  std::optional<DType> of(QuantModule m) const { return dtype[static_cast<size_t>(m)]; }
  void set(QuantModule m, DType t) { dtype[static_cast<size_t>(m)] = t; }
  bool any() const;
  bool operator==(const ModulePrecision&) const = default;
};
/// "attention bf16, mamba_out_proj fp8" ("" for none).
std::string to_string(const ModulePrecision& p);

/// b sequences of s tokens; `dtype` the GEMMs' type (activations: activation_dtype of it).
struct MicroBatch {
  int64_t sequences = 1;
  int64_t sequence_length = 0;
  bool causal = true;
  DType dtype = DType::kBf16;
  AttentionKernel attention = AttentionKernel::kFlash;
  /// Training with fp8 (fp4) GEMMs: how their 16-bit inputs and output gradients are quantised;
  /// each such GEMM then has a "…_fp8_cast" ("…_fp4_cast") operator (forward: its input, m·k
  /// elements; backward: its output gradient, m·n) at training_quantisation's cast bytes, and
  /// keeps its input for the weight gradient as the quantised copy (the attention output also
  /// in 16 bits, which the attention's backward reads). Weights are quantised once per
  /// iteration (Transformer Engine caches them across micro-batches): not counted per pass.
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;
  Fp4Recipe fp4_recipe = Fp4Recipe::kNvfp4;
  RecomputeModules recompute{};
  ExpertGemms expert_gemms = ExpertGemms::kGrouped;
  /// PyTorch's selective activation checkpointing by operator, as torchtitan applies it to every
  /// Transformer layer (activation_checkpoint mode "selective", selective_ac_option "op"): the
  /// layer runs its projections as separate GEMMs (Q, K, V; gate, up), and keeps only its input,
  /// the attention core's output and the outputs of its odd-numbered matmuls in forward order;
  /// the even-numbered matmuls and every other operator run again in the backward (the casts
  /// of an fp8 layer too: nothing quantised is kept, so each weight gradient casts its input
  /// anew). Dense layers without MLA, linear biases or the unfused attention core only
  /// (ParallelLayout::validate refuses the others). `recompute` is ignored with it.
  bool op_checkpointing = false;
  /// Modules whose GEMMs run in another type than `dtype` (training only).
  ModulePrecision module_precision{};
  /// The rotary embedding as one fused kernel (Transformer Engine's, Megatron's
  /// apply_rope_fusion); false: as eager PyTorch ops (OperatorList::rotary).
  bool rope_fusion = true;
  /// Tokens dispatched by Megatron's alltoall dispatcher: a GPU holding more than one expert
  /// regroups the rows it receives from by-source to by-expert after the dispatch, and back
  /// before the combine (sort_chunks_by_idxs); DeepEP and HybridEP receive them grouped.
  bool sort_received_tokens = false;
  /// The routing weights reach the experts in fp32: DeepEP and HybridEP take only fp32
  /// probabilities, so Megatron's flex dispatcher casts them up (token_dispatcher.py, both
  /// managers' dispatch), and TEGroupedMLP's eager bias then works in fp32 (expert_output_bias).
  /// The alltoall dispatcher passes the router's own type (16-bit unless moe_router_dtype fp32,
  /// which no layout knob sets).
  bool fp32_routing_weights = false;
  /// The routed experts' rows padded to a fixed capacity (Megatron's
  /// moe_pad_expert_input_to_capacity): every local expert computes, and the host issues
  /// per-expert GEMMs without reading their rows back from the GPU.
  bool experts_padded = false;
  /// The MoE router's top-k and load-balancing loss (router_cost.h): Megatron's defaults,
  /// unfused with an aux loss.
  RouterRecipe router{};
};

/// One sequence of a serving step: q_len new tokens after kv_len − q_len cached ones
/// (1 ≤ q_len ≤ kv_len). `samples`: this step ends its prompt or is a decode step, so the
/// output head runs on its last token.
struct SequenceChunk {
  int64_t q_len = 1;
  int64_t kv_len = 1;
  bool samples = true;
  /// Speculative decoding: of the q_len tokens, the draft tokens this step verifies (the last
  /// known token and `drafts` guesses after it; 0 without speculation).
  int64_t drafts = 0;
  /// Data-parallel attention: the rank whose scheduler holds the sequence (its KV lives there);
  /// −1: any, shared out by the step model.
  int rank = -1;
};

/// The sequences of one engine step (forward only); `dtype` as in MicroBatch.
struct RaggedBatch {
  std::vector<SequenceChunk> sequences;
  DType dtype = DType::kBf16;
  DType kv_cache = DType::kBf16;  ///< the cache the attention reads its keys and values from
  AttentionKernel attention = AttentionKernel::kFlash;
};

/// The attention core's work on one GPU, summed over a batch's sequences (before the split of
/// heads): sequences, query tokens (Σq), key tokens whose K and V are read (Σkv), query-key
/// pairs computed, and the mean lengths that give the kernel's shape.
struct AttentionWork {
  double sequences = 0;
  double query_tokens = 0;
  double key_tokens = 0;
  double score_pairs = 0;
  double s_q = 0;
  double s_kv = 0;
  /// The kernels each pass runs as, each over its share of every row's keys: ring attention's
  /// cp blockwise steps (1: one kernel).
  double key_blocks = 1;
  /// The key and value tokens the kernel reads: the union of the keys the new tokens attend to,
  /// fewer than key_tokens where a window or a chunk leaves older cached tokens unread (a decode
  /// step under a 128-token window reads 128 of them); under sparse attention in a serving step,
  /// each query's own top-k rows (the pairs: the kernel gathers them); 0: key_tokens.
  double read_key_tokens = 0;
  /// The keys each query row is scored against, on average.
  double keys_per_query() const { return query_tokens > 0 ? score_pairs / query_tokens : 0.0; }
};

/// A ragged batch's attention work (the pairs of the file header); with a sliding `window`
/// (ModelConfig::sliding_window) on the share `window_layers` of the layers, each new token's
/// keys capped at the window there; or with attention chunks (ModelConfig::attention_chunk) on
/// the share `chunk_layers`, a token at position p seeing the p mod chunk + 1 keys of its chunk.
AttentionWork ragged_attention_work(const RaggedBatch& batch, int64_t window = 0, double window_layers = 1.0,
                                    int64_t chunk = 0, double chunk_layers = 1.0);
/// The sequences of `batch` that sample a token.
int64_t sampled_rows(const RaggedBatch& batch);

/// How a layer's work is split over GPUs. sp is Megatron's sequence parallelism (degree tp).
struct ShardingFactors {
  int tp = 1;
  int cp = 1;
  int ep = 1;
  bool sp = false;
  /// The EP group is the TP group (a serving instance with expert parallelism, vLLM's and
  /// SGLang's TP + EP): every rank holds the same T tokens and computes its E/ep experts whole
  /// (FFN not split by TP) on the T·k_top/ep token-slots routed to them; the layer's TP
  /// all-reduce sums the outputs. ep must then equal tp. Otherwise EP spans other ranks
  /// (Megatron's data-parallel EP, each expert split by TP).
  bool experts_in_tp_group = false;
  /// Expert tensor parallelism (Megatron's MoE parallel folding); 0 means tp. Each routed
  /// expert's FFN is split etp ways, and a GPU computes the token-slots of etp/tp of its TP
  /// group's tokens: T·k_top·etp/t slots on h → f_e/etp → h (T·k_top on f_e/t when etp = t).
  int expert_tp = 0;
  /// Data-parallel attention (serving: SGLang's DP attention, vLLM's data-parallel ranks with
  /// expert parallelism): this many ranks of tp GPUs each run the attention and dense layers on
  /// their own sequences, and the experts, spread whole over all of them (experts_in_tp_group,
  /// ep = tp·attention_dp), receive as many tokens from every rank as this one holds:
  /// T·k_top·attention_dp/ep token-slots a GPU.
  int attention_dp = 1;
  /// Redundant experts (serving's expert-parallel load balancer, DeepSeek's EPLB): replicas of
  /// the most chosen experts beside the E routed ones, E + r spread over the ep GPUs.
  int redundant_experts = 0;
  /// Context parallelism by ring attention: each rank's attention runs as cp blockwise kernels
  /// (AttentionWork::key_blocks); false: Ulysses' one kernel over the whole sequence.
  bool cp_ring = true;
};

/// One operator of the list, with its forward and backward cost on one GPU.
struct ModelOperator;

/// The routed experts' operators ("expert_…" of layer_operators) with `factor` times their
/// average rows (a skewed router's busiest GPU): the GEMMs re-shaped (backward as
/// layer_operators builds it: data and weight gradients, each the forward's volume), the
/// activation's bytes and FLOPs scaled, and so the activations they keep. Each GEMM keeps its
/// own type (a per-module recipe's).
std::vector<ModelOperator> scale_experts(std::vector<ModelOperator> ops, double factor);

/// With the router's share of token-slots for expert i ∝ (i+1)^−zipf and the experts laid out
/// in `groups` equal groups in order (EP ranks), the busiest group's slots over an even share
/// (1 for zipf 0). With `redundant` replicas, placed as an expert-parallel load balancer places
/// them (DeepSeek's EPLB): each replica to the expert with the most slots per copy, then every
/// copy (its expert's slots shared evenly) packed largest first onto the group with the fewest
/// slots that has room, (experts + redundant)/groups copies a group.
double busiest_expert_group_load(int experts, int groups, double zipf, int redundant = 0);
struct ModelOperator {
  std::string name;  ///< e.g. "qkv_proj", "attention", "expert_gate_up_proj"
  OperatorCost forward;
  OperatorCost backward;
  /// Part of the attention core (what selective recomputation re-runs and context parallelism
  /// splits around); its GEMMs have no weights.
  bool attention_core = false;
  /// Activation bytes kept from the forward for this operator's backward (one micro-batch, this
  /// GPU), unless the layer is fully recomputed: the tensors its backward reads, each counted
  /// once, at the first operator that needs it (see "Saved activations" above).
  Bytes saved;
  /// The unfused core's s×s tensors (softmax output, dropout mask and output), kept only
  /// without recomputation: selective recomputation re-creates them in the backward.
  Bytes saved_scores;
  /// Part of a recomputed module (RecomputeModules): its forward runs again in the backward.
  bool recomputed = false;
  /// A shared expert's kernel (MoE layers), which may run beside the token dispatch
  /// (ParallelLayout::moe_shared_expert_overlap).
  bool shared_expert = false;
  /// Activations that recomputation creates again for the backward beyond what is kept (op
  /// checkpointing, MicroBatch::op_checkpointing): held while this layer's backward runs.
  Bytes regenerated{};
};

/// The activation bytes one micro-batch of `ops` keeps on this GPU: every operator's `saved`,
/// plus `saved_scores` unless `selective` recomputation is on.
Bytes saved_activation_bytes(const std::vector<ModelOperator>& ops, bool selective);

/// Empty when `sharding` fits `model` and `batch`; otherwise the first reason, naming the
/// numbers ("tp=6 does not divide heads=32"). The operator functions throw
/// std::invalid_argument with it.
std::string sharding_problem(const ModelConfig& model, const MicroBatch& batch, const ShardingFactors& sharding);
/// The same for a serving batch: sequences with 1 ≤ q ≤ kv, no context parallelism.
std::string sharding_problem(const ModelConfig& model, const RaggedBatch& batch, const ShardingFactors& sharding);

/// Operators of layer `layer` in execution order of the forward pass. `layer` is 0-based and
/// below layers + mtp_layers (the indices from `layers` on are DeepSeek's MTP modules' layers,
/// without their small projection). Throws std::invalid_argument on a bad layer or sharding.
std::vector<ModelOperator> layer_operators(const ModelConfig& model, int layer, const MicroBatch& batch,
                                           const ShardingFactors& sharding);
/// The input side of the model (first pipeline stage): token (and position) embedding.
std::vector<ModelOperator> embedding_operators(const ModelConfig& model, const MicroBatch& batch,
                                               const ShardingFactors& sharding);
/// A DeepSeek multi-token-prediction module's own input, on the last pipeline stage before its
/// Transformer layer (layer_operators at index layers + i) and its head (output_operators: the
/// module's final norm, then the output head it shares with the model): the shifted tokens'
/// embedding lookup, RMSNorms of that embedding and of the previous depth's hidden state, and
/// the projection of their concatenation, 2h → h split over TP (`eh_proj`, in 16 bits).
std::vector<ModelOperator> mtp_input_operators(const ModelConfig& model, const MicroBatch& batch,
                                               const ShardingFactors& sharding);
/// The output side (last pipeline stage): final norm, logits, cross-entropy.
std::vector<ModelOperator> output_operators(const ModelConfig& model, const MicroBatch& batch,
                                            const ShardingFactors& sharding);

/// The bytes one cached MLA token (its latent and rope key) takes on one layer in a cache of
/// `cache`: (kv_lora + rope)·element; under sparse attention in fp8, the sparse FlashMLA kernels'
/// format instead: the latent in fp8 with an fp32 scale per 128 and the rope key in bf16
/// (512 + 16 + 128 = 656 B for DeepSeek-V3.2).
double mla_cache_token_bytes(const ModelConfig& model, DType cache);

/// kTrusted: the caller has already checked sharding_problem for this model, batch and
/// sharding (a serving step model checks the model and shape once and each batch's lengths
/// itself, rather than the whole model at every engine step).
enum class Validation : uint8_t { kCheck, kTrusted };

/// The same three for one serving step (forward costs are what serving reads; the backward
/// ones are filled but mean nothing there). The output side of a ragged batch is the final
/// norm on every token, then logits and sampling on the sampled rows only.
std::vector<ModelOperator> layer_operators(const ModelConfig& model, int layer, const RaggedBatch& batch,
                                           const ShardingFactors& sharding, Validation v = Validation::kCheck);
std::vector<ModelOperator> embedding_operators(const ModelConfig& model, const RaggedBatch& batch,
                                               const ShardingFactors& sharding, Validation v = Validation::kCheck);
std::vector<ModelOperator> output_operators(const ModelConfig& model, const RaggedBatch& batch,
                                            const ShardingFactors& sharding, Validation v = Validation::kCheck);

/// Model FLOPs per token of one training step (forward + backward), for MFU:
///   6·N + Σ_attention layers 6 · s · H · (d_qk + d_v) · (½ if causal) + Σ_Mamba layers 3 · scan
/// (scan: the chunked scan's forward FLOPs a token, 2qN·G + H_m·(2qP + 4NP), see below)
/// N = count_parameters().matmul_active (output head included, input embedding excluded). The
/// attention term: the forward score and value products cost 2·s·H·(d_qk + d_v) per token,
/// halved when causal; forward plus backward is three times that. This is the
/// hardware-independent convention: recomputation is excluded and the backward is 2× forward
/// (FlashAttention's own recomputation inside its backward, the 2.5× above, is not model work).
/// For d_qk = d_v = d it is 6N + 6·L·s·h_attn causal and 6N + 12·L·s·h_attn non-causal (PaLM's
/// 6N + 12·L·H·Q·T).
Flops model_flops_per_token(const ModelConfig& model, int64_t sequence_length, bool causal = true);

}  // namespace parallax
