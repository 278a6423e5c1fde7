#include "model/layer_operators.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/parameter_count.h"

namespace parallax {
namespace {

// Arithmetic per element of the memory-bound kernels. They only matter if a GPU's vector rate
// were unusually low; bytes bound these kernels.
constexpr double kRmsNormFlops = 4;    // square, accumulate, scale, gain
constexpr double kLayerNormFlops = 7;  // mean, variance (2), normalise (2), gain, bias
constexpr double kSwigluFlops = 5;     // sigmoid (~3), x·σ, ·up
constexpr double kGeluFlops = 8;       // tanh approximation
constexpr double kRotaryFlops = 3;     // two multiplies and an add per rotated element
constexpr double kSoftmaxFlops = 5;    // max, subtract, exp, sum, divide
constexpr double kSiluFlops = 4;       // sigmoid (~3), x·σ
constexpr double kSigmoidGateFlops = 4;  // sigmoid (~3) of the gate, ·O
constexpr int kSsdForwardKernels = 5;  // chunk cumsum, chunk states, state passing, C·Bᵀ, chunk scan
constexpr int kSsdBackwardKernels = 14;
// The bytes one SM moves a second in mamba_ssm's Triton SSD kernels (ssd_scan below). vLLM PR
// 27299 timed their forward (mamba_chunk_scan_combined) on one H100 SXM at 10.7-12.9 M tokens/s
// for 128 heads of 64, state 128, one group, chunks of 128, 4k-256k tokens (median 11.8 M): by
// ssd_scan's count, 185,600 bytes a token, 2.19 TB/s, 0.65 of the H100's HBM where streaming
// kernels reach 0.9. The kernels wait on their loads (Nsight Compute on H100 shows neither
// compute nor memory throughput near peak: foundation-model-stack/bamba issue 3), so what bounds
// them is the bytes each SM keeps in flight: 2.19 TB/s over 132 SMs. On a GPU with more HBM
// bandwidth per SM (Blackwell: 8 TB/s over 148-160 SMs) they are no faster than their SMs allow.
constexpr Bandwidth kSsdPerSmBandwidth = gigabytes_per_second(16.6);
constexpr double kFp32Bytes = 4;
constexpr double kActivationBytes = 2;  // saved activations are kept in 16 bits
constexpr double kMaskBytes = 1;        // a dropout mask, one byte per element

// The chunked scan's forward FLOPs a token over `heads` heads in `groups` groups (ssd_scan below).
double ssd_forward_flops_per_token(const MambaConfig& a, double heads, double groups) {
  const double q = static_cast<double>(a.chunk), n = static_cast<double>(a.state), p = static_cast<double>(a.head_dim);
  return 2.0 * q * n * groups + heads * (2.0 * q * p + 4.0 * n * p);
}

// The share of a GEMM's rows that its quantisation kernels cast. With sequence parallelism a
// column-parallel GEMM's input and a row-parallel GEMM's output gradient are all-gathered from
// the sequence shards; Transformer Engine quantises the shard before the all-gather (and
// gathers fp8), so those casts cover T_sp = T/t rows, not T.
struct CastRows {
  double input = 1;
  double output_gradient = 1;
};

class OperatorList {
 public:
  // GEMMs run in `dtype`; everything else on activations in activation_dtype(dtype).
  // `cast`: training's fp8 or fp4 recipe (training_quantisation): the quantisation kernel each
  // such GEMM adds, and the quantised copy of its input it keeps.
  explicit OperatorList(DType dtype, std::optional<QuantisedOperands> cast = std::nullopt)
      : dtype_(dtype), activation_(activation_dtype(dtype)), element_(bytes_per_element(activation_)),
        cast_(is_quantised(dtype) ? cast : std::nullopt) {}

  double element_bytes() const { return element_; }
  // A per-module quantisation recipe (ModulePrecision): a module's GEMMs in another type than the
  // run's, quantised (in training) by the run's recipe for that type.
  void use_module_precision(const ModulePrecision& precision, Fp8Recipe fp8, Fp4Recipe fp4) {
    precision_ = precision;
    fp8_ = fp8;
    fp4_ = fp4;
  }
  // The module the GEMMs added from now on belong to (nullopt: none that a recipe names).
  void in_module(std::optional<QuantModule> module) { module_ = module; }
  // The operators from `first` on are a shared expert's.
  void mark_shared_expert(size_t first) {
    for (size_t i = first; i < ops_.size(); ++i) ops_[i].shared_expert = true;
  }

  // From now on, GEMMs of several groups are issued by the host one group at a time (ExpertGemms).
  // `rows_known`: the host knows each group's rows without reading them back (padded experts).
  void issue_groups_from_host(bool on, bool rows_known = false) {
    host_issued_groups_ = on;
    group_rows_known_ = rows_known;
  }
  // The gated MLPs added next clamp their activation's inputs in eager PyTorch first.
  void clamp_glu(bool on) { clamp_glu_ = on; }
  // Projections that read one input run as separate GEMMs (torchtitan's wq, wk, wv; w1, w3), not
  // as one of their concatenated outputs. The input is quantised once: torch.compile merges
  // the identical casts.
  void separate_projections(bool on) { separate_projections_ = on; }
  bool separate_projections() const { return separate_projections_; }

  // y[m×n] = x[m×k]·W[k×n], `groups` times in one kernel. The backward is the data gradient
  // and the weight gradient: two kernels, each with the forward's volume and bytes.
  // `cast_rows`: the share of the m rows that its quantisation kernels cast (below).
  void gemm(const std::string& name, double m, double n, double k, double groups = 1, CastRows cast_rows = {}) {
    std::optional<DType> own = module_ ? precision_.of(*module_) : std::nullopt;
    // A layer kept in 16 bits (the ends of a quantised run) keeps every module there.
    if (own && is_quantised(*own) && !is_quantised(dtype_)) own.reset();
    gemm_in(own.value_or(dtype_), name, m, n, k, groups, cast_rows);
  }
  // A product of two activations (the unfused attention's): in the activation type.
  void activation_gemm(const std::string& name, double m, double n, double k, double groups) {
    gemm_in(activation_, name, m, n, k, groups, {});
  }
  void gemm_in(DType type, const std::string& name, double m, double n, double k, double groups, CastRows cast_rows) {
    OperatorCost forward = gemm_cost(GemmShape{m, n, k, groups}, type);
    OperatorCost backward = forward;
    backward.flops = forward.flops * 2.0;
    backward.bytes_read_written = forward.bytes_read_written * 2.0;
    backward.kernels = 2;
    if (host_issued_groups_) {
      forward.kernels = forward.host_issued_kernels = static_cast<int>(std::ceil(groups));
      backward.kernels = backward.host_issued_kernels = 2 * forward.host_issued_kernels;
      forward.host_reads_back = backward.host_reads_back = !group_rows_known_;
    }
    ops_.push_back({name, forward, backward, false, Bytes(), Bytes()});
    last_cast_ = cast_for(type);
    if (last_cast_) {
      const double per_element = last_cast_->cast_bytes_per_element;
      const double in = groups * m * cast_rows.input * k, out = groups * m * cast_rows.output_gradient * n;
      ops_.push_back({name + "_" + to_string(type) + "_cast",
                      memory_bound_cost(Bytes(in * per_element), Flops(in), activation_),
                      memory_bound_cost(Bytes(out * per_element), Flops(out), activation_), false, Bytes(), Bytes()});
    }
  }

  // A kernel moving `bytes` with `flops` of vector arithmetic; its backward moves and computes
  // `backward_factor` times as much.
  void memory(const std::string& name, double bytes, double flops, double backward_factor = 2.0) {
    OperatorCost forward = memory_bound_cost(Bytes(bytes), Flops(flops), activation_);
    OperatorCost backward =
        memory_bound_cost(Bytes(bytes * backward_factor), Flops(flops * backward_factor), activation_);
    ops_.push_back({name, forward, backward, false, Bytes(), Bytes()});
  }

  // Megatron Core's SequentialMLP: the operators added from `first` on that are not host-issued
  // GEMMs (the activation, a clamp, the quantisation of each GEMM's input) run once per module,
  // `modules` times, each module issuing its own kernels each way; then the modules' `elements`
  // outputs are concatenated (read and written once; the gradient's split is a view).
  void one_module_per_group(size_t first, int modules, double elements) {
    const auto per_module = [modules](OperatorCost& c) {
      if (c.host_issued_kernels > 0 || c.kernels == 0) return;
      c.kernels *= modules;
      if (c.host_dispatches > 0) c.host_dispatches *= modules;
    };
    for (size_t i = first; i < ops_.size(); ++i) {
      per_module(ops_[i].forward);
      per_module(ops_[i].backward);
    }
    OperatorCost cat = memory_bound_cost(Bytes(2.0 * elements * element_), Flops(0.0), activation_);
    OperatorCost split;  // a view: no kernel
    split.kernels = 0;
    ops_.push_back({"expert_output_cat", cat, split, false, Bytes(), Bytes()});
  }

  // Megatron Core's TEGroupedMLP with per-expert GEMMs adds the second projection's bias
  // outside the GEMM, in eager PyTorch, weighted by each row's routing probability
  // (TEGroupedMLP._apply_bias: per local expert t + b·p, then one torch.cat of all the rows).
  // Forward, an element of the `slots` × `width` output: b·p written, then t and b·p read and
  // the sum written, then copied by the cat: 6 element sizes. Backward: the gradients of b (g·p,
  // summed over the rows) and of p (g·b, summed over the width), each a product written and
  // read back: 6 element sizes. Issued as one operator per expert each way (its two or four
  // small kernels folded, as t_dispatch counts them), and the cat.
  // With fp32 routing weights (MicroBatch::fp32_routing_weights) PyTorch promotes b·p, the sum
  // and the cat to fp32, and `.to()` casts the rows back: forward b·p (4 B), t and b·p read and
  // the sum written (e + 8), the cat (8), the cast (4 + e): 2e + 24 bytes; backward the incoming
  // gradient cast up (e + 4), t's gradient cast down (4 + e), b's and p's products written and
  // read back from the fp32 gradient (2 · 12): 2e + 32 bytes; a cast kernel more each way.
  void expert_output_bias(double slots, double width, double experts, bool fp32_weights) {
    const double elements = slots * width;
    const int per_expert = static_cast<int>(std::ceil(experts));
    const double forward_bytes = fp32_weights ? 2.0 * element_ + 6.0 * kFp32Bytes : 6.0 * element_;
    const double backward_bytes = fp32_weights ? 2.0 * element_ + 8.0 * kFp32Bytes : 6.0 * element_;
    const int casts = fp32_weights ? 1 : 0;
    OperatorCost forward = memory_bound_cost(Bytes(forward_bytes * elements), Flops(2.0 * elements), activation_);
    forward.kernels = per_expert + 1 + casts;
    OperatorCost backward = memory_bound_cost(Bytes(backward_bytes * elements), Flops(4.0 * elements), activation_);
    backward.kernels = per_expert + 2 * casts;
    ops_.push_back({"expert_output_bias", forward, backward, false, Bytes(), Bytes()});
  }

  // The rotary embedding on `elements` query and key elements. Fused (Transformer Engine's
  // kernel, Megatron's apply_rope_fusion): read and written once. Unfused, as Megatron's
  // _apply_rotary_pos_emb_bshd runs it in eager PyTorch (its path with apply_rope_fusion off,
  // and for YaRN's mscale, which the fused kernel refuses): t·cos written, the rotated half (a
  // negated half and a cat) written, its product with sin written, the sum written, and a
  // final cat with the unrotated dims: 12 element sizes; its backward, the two products'
  // gradients, the negation's, their sum and the slices', as many. One call for the queries
  // and one for the keys.
  void rotary(double elements) {
    if (rope_fused_) {
      memory("rotary", 2.0 * elements * element_, kRotaryFlops * elements);
      return;
    }
    OperatorCost pass = memory_bound_cost(Bytes(12.0 * elements * element_), Flops(kRotaryFlops * elements), activation_);
    pass.kernels = 2;
    ops_.push_back({"rotary", pass, pass, false, Bytes(), Bytes()});
  }
  void fuse_rope(bool on) { rope_fused_ = on; }

  // A router operator (router_cost.h): `matrix_bytes` per score matrix, a vector operation
  // per element moved.
  void router_passes(const std::string& name, const RouterPasses& passes, double matrix_bytes) {
    auto cost = [&](const RouterPass& p) {
      const double bytes = p.score_matrices * matrix_bytes;
      OperatorCost c = memory_bound_cost(Bytes(bytes), Flops(bytes / kFp32Bytes), activation_);
      c.kernels = p.kernels;
      c.host_dispatches = p.dispatches;
      return c;
    };
    ops_.push_back({name, cost(passes.forward), cost(passes.backward), false, Bytes(), Bytes()});
  }

  // Keeps its input for the backward.
  void norm(const std::string& name, const ModelConfig& model, double tokens, double width) {
    const double per_element = model.norm == NormKind::kLayerNorm ? kLayerNormFlops : kRmsNormFlops;
    memory(name, 2.0 * tokens * width * element_, per_element * tokens * width);
    keep(tokens * width);
  }

  // A residual add reads both branches and writes the sum; its gradient is a pass-through
  // that costs about the same traffic once. With dropout on the branch, fused in: the mask is
  // written too, kept, and read by the backward.
  void residual(const std::string& name, double tokens, double width, bool dropout) {
    const double mask = dropout ? kMaskBytes : 0.0;
    memory(name, (3.0 * element_ + mask) * tokens * width, tokens * width, 1.0);
    if (dropout) keep(tokens * width, kMaskBytes);
  }

  // Mamba-2's chunked scan (the SSD algorithm, Dao & Gu 2024) over `tokens` tokens of H local
  // heads of P in G local groups, state N, chunks of q, as mamba_ssm's Triton kernels run it
  // (ssd_combined.py: five kernels forward, fourteen backward, each reading its operands from
  // HBM and writing its result there). FLOPs a token: forward, per chunk and group C·Bᵀ
  // (q×q×N), per head the masked scores times x (q×q×P), the chunk's state Bᵀ·x and the output
  // from the states C·h (N×P each): 2qN·G + H·(2qP + 4NP); backward, the states and C·Bᵀ again
  // and the gradients of x, B, C, the states and C·Bᵀ: 6qN·G + H·(6qP + 10NP). On the tensor
  // cores in 16 bits, at the efficiency of a batch of q×P×N products; in practice bound by the
  // bytes. Bytes a token, e the element size and S = H·P·N/q the fp32 state elements a token:
  //   forward  3e·HP (x read twice, y written) + 4e·GN (B and C read twice each)
  //            + 8·Gq (C·Bᵀ written and read in fp32) + 16·S (the chunk states written, read and
  //            written by the state passing, read by the scan) + (e + 24)·H (dt and its sums)
  //   backward 11e·HP + 15e·GN + 24·Gq + (44 + 4e)·S + 56·H: the forward's states and C·Bᵀ
  //            recomputed, then dstates, the state passing's backward, dx, dB, dC (with the
  //            states cast to 16 bits), d(C·Bᵀ), its two products back to dB and dC, d(dA).
  // Both passes move their bytes no faster than kSsdPerSmBandwidth per SM (the backward's
  // kernels are the same Triton code; no measurement of them alone was found).
  void ssd_scan(const MambaConfig& a, double tokens, double heads, double groups) {
    const double q = static_cast<double>(a.chunk), n = static_cast<double>(a.state), p = static_cast<double>(a.head_dim);
    const double hp = heads * p, gn = groups * n, gq = groups * q, states = heads * p * n / q, e = element_;
    const double chunks = std::ceil(tokens / q);
    OperatorCost forward = gemm_cost(GemmShape{q, p, n, chunks * heads}, activation_);
    forward.flops = Flops(tokens * ssd_forward_flops_per_token(a, heads, groups));
    forward.bytes_read_written =
        Bytes(tokens * (3 * e * hp + 4 * e * gn + 8 * gq + 16 * states + (e + 24) * heads));
    forward.kernels = kSsdForwardKernels;
    forward.per_sm_bandwidth = kSsdPerSmBandwidth;
    OperatorCost backward = forward;
    backward.backward_pass = true;
    backward.flops = Flops(tokens * (6.0 * q * n * groups + heads * (6.0 * q * p + 10.0 * n * p)));
    backward.bytes_read_written =
        Bytes(tokens * (11 * e * hp + 15 * e * gn + 24 * gq + (44 + 4 * e) * states + 56 * heads));
    backward.kernels = kSsdBackwardKernels;
    ops_.push_back({"mamba_ssd_scan", forward, backward, false, Bytes(), Bytes()});
  }

  // FlashAttention over the batch's attention work `w`: `heads` query heads, `kv_heads`
  // key/value heads (GQA shares them), per-head dims d_qk and d_v.
  // `warp_mma_only`: FlashAttention-2's kernels (OperatorCost::warp_mma_only).
  // `kv_element`: the bytes a cached key or value element is read at (0: the activations').
  void attention(const AttentionWork& w, double heads, double kv_heads, double d_qk, double d_v, bool keep_qkv,
                 bool warp_mma_only, double kv_element = 0) {
    const double flops = 2.0 * w.score_pairs * heads * (d_qk + d_v);
    const double q = w.query_tokens * heads * d_qk;
    const double kv = w.key_tokens * kv_heads * (d_qk + d_v);
    const double kv_read = (w.read_key_tokens > 0 ? w.read_key_tokens : w.key_tokens) * kv_heads * (d_qk + d_v);
    const double o = w.query_tokens * heads * d_v;
    const double row_stats = w.query_tokens * heads * kFp32Bytes;  // log-sum-exp per query row
    OperatorCost forward;
    forward.kind = OperatorKind::kAttention;
    forward.warp_mma_only = warp_mma_only;
    forward.dtype = activation_;
    forward.shape = GemmShape{w.s_q, w.s_kv, d_qk, w.sequences * heads};
    forward.flops = Flops(flops);
    forward.keys_per_query = w.keys_per_query() / w.key_blocks;  // in each kernel
    forward.flops_per_exponential = 2.0 * (d_qk + d_v);
    forward.bytes_read_written = Bytes((q + o) * element_ + kv_read * (kv_element > 0 ? kv_element : element_) + row_stats);
    OperatorCost backward = forward;
    backward.backward_pass = true;
    backward.flops = Flops(2.5 * flops);
    backward.flops_per_exponential = 2.5 * forward.flops_per_exponential;
    // Reads Q, K, V, O, dO and the row statistics; writes dQ, dK, dV (and the dO·O row sums).
    backward.bytes_read_written = Bytes((2 * q + 2 * kv + 2 * o) * element_ + 2 * row_stats);
    ops_.push_back({"attention", forward, backward, true, Bytes(), Bytes()});
    attention_output_ = Bytes(o * element_ + row_stats);
    // Q, K and V of this GPU's tokens (context parallelism passes the others' blocks again in
    // the backward) and the row statistics; O is kept by the output projection.
    if (keep_qkv) keep(q + w.query_tokens * kv_heads * (d_qk + d_v));
    keep(row_stats, 1.0);
  }

  // MLA's attention over the cached latents themselves (FlashMLA, FlashInfer's MLA): every query
  // head, its key part absorbed into the latent (d_latent) plus its rope part (d_rope), against
  // one shared key per token of d_latent + d_rope whose first d_latent are also its value. The
  // heads share the keys, so the kernel packs them into the rows of one product a sequence.
  // `training`: Megatron-Core's AbsorbedMLASelfAttention (DSA's core): a backward of 2.5× the
  // forward as FlashAttention's, and the absorbed queries, the latents and the row statistics kept.
  // `row_bytes`: one cached latent and rope key as the kernel reads it (0: in the activation type).
  void mla_latent_attention(const AttentionWork& w, double heads, double d_latent, double d_rope, bool warp_mma_only,
                            double row_bytes, bool training = false) {
    const double d_key = d_latent + d_rope;
    OperatorCost forward;
    forward.kind = OperatorKind::kAttention;
    forward.warp_mma_only = warp_mma_only;
    forward.dtype = activation_;
    forward.shape = GemmShape{w.s_q * heads, w.s_kv, d_key, w.sequences};
    forward.flops = Flops(2.0 * w.score_pairs * heads * (d_key + d_latent));
    forward.keys_per_query = w.keys_per_query();
    forward.flops_per_exponential = 2.0 * (d_key + d_latent);
    const double q = w.query_tokens * heads * d_key, o = w.query_tokens * heads * d_latent;
    const double read = w.read_key_tokens > 0 ? w.read_key_tokens : w.key_tokens;
    forward.bytes_read_written =
        Bytes((q + o) * element_ + read * (row_bytes > 0 ? row_bytes : d_key * element_) + w.query_tokens * heads * kFp32Bytes);
    OperatorCost backward = forward;  // serving runs it forward only
    backward.backward_pass = true;
    const double row_stats = w.query_tokens * heads * kFp32Bytes, latents = w.key_tokens * d_key;
    if (training) {
      backward.flops = forward.flops * 2.5;
      backward.flops_per_exponential = 2.5 * forward.flops_per_exponential;
      backward.bytes_read_written = Bytes((2 * q + 2 * latents + 2 * o) * element_ + 2 * row_stats);
    }
    ops_.push_back({"mla_latent_attention", forward, backward, true, Bytes(), Bytes()});
    if (!training) return;
    attention_output_ = Bytes(o * element_ + row_stats);
    keep(q + latents);
    keep(row_stats, 1.0);
  }

  // A DSA lightning indexer's scores and top-k (DeepGEMM's mqa_logits kernels in serving, the
  // fused indexer kernels of Megatron-Core's DSA in training): every query's `index_heads` heads
  // of `index_dim` against one shared key a token over `all` (the causal pairs, every earlier
  // key), then ReLU, the heads' weights and their sum (3 FLOPs a pair and head), the fp32 logits
  // written and read by the top-k, and an int32 index written for each key a query keeps (the
  // pairs of `sparse`). The heads share the key, so the kernel packs them into the rows of one
  // product a sequence (as MLA's latent attention). `serving`: in fp8 (q quantised, the cached keys fp8 with an fp32 scale per 128),
  // forward only; training in the activation type, whose backward trains the indexer on its
  // selected keys (`sparse`: the pairs the attention computes) by the KL loss against the
  // attention's distribution there: the `main_heads` attention probabilities again (q·k of
  // `main_qk`), the index scores again and their gradients to q, k and the weights.
  void lightning_indexer(const AttentionWork& all, const AttentionWork& sparse, double index_heads, double index_dim,
                         double main_heads, double main_qk, bool serving) {
    const DType type = serving ? DType::kFp8 : activation_;
    const double key_bytes = serving ? index_dim + kFp32Bytes * std::ceil(index_dim / 128) : index_dim * element_;
    const double q_bytes = all.query_tokens * index_heads * index_dim * bytes_per_element(type);
    const double weights_bytes = all.query_tokens * index_heads * kFp32Bytes;
    const double indices_bytes = sparse.score_pairs * kFp32Bytes;  // one a key attended to
    OperatorCost forward = gemm_cost(GemmShape{all.s_q * index_heads, all.s_kv, index_dim, all.sequences}, type);
    forward.flops = Flops(all.score_pairs * index_heads * (2.0 * index_dim + 3.0));
    forward.bytes_read_written =
        Bytes(q_bytes + weights_bytes + all.key_tokens * key_bytes + 2.0 * all.score_pairs * kFp32Bytes + indices_bytes);
    forward.kernels = 2;  // the scores, the top-k
    OperatorCost backward = forward;
    backward.backward_pass = true;
    backward.flops = Flops(2.0 * sparse.score_pairs * (main_heads * main_qk + 3.0 * index_heads * index_dim));
    backward.bytes_read_written = Bytes(2.0 * (q_bytes + weights_bytes + all.key_tokens * key_bytes) + indices_bytes);
    // Part of the attention core: not a weight GEMM (no W pass of its own).
    ops_.push_back({"indexer_scores_topk", forward, backward, true, Bytes(), Bytes()});
    if (!serving) keep(indices_bytes, 1.0);  // the indices the sparse attention's backward reads
  }

  // PyTorch's selective checkpointing by operator (MicroBatch::op_checkpointing) over the
  // operators from `first` on, one Transformer layer whose input has `input_elements`: what they
  // kept is replaced by the layer's input, the `reduced_elements` of its TP reduce-scatters'
  // outputs, the attention core's output and row statistics, and the outputs of the
  // odd-numbered weight GEMMs (torchtitan's policy saves aten.mm's output except every second
  // one, FlashAttention's output and reduce_scatter_tensor's); every other operator runs again
  // in the backward. What the list kept and the policy does not is re-created there.
  void checkpoint_by_operator(size_t first, double input_elements, double reduced_elements) {
    const Bytes always((input_elements + reduced_elements) * kActivationBytes);
    Bytes listed, kept = always;
    int matmuls = 0;
    // The core's output goes to its last operator (a DSA indexer before it keeps its indices).
    size_t core = ops_.size();
    for (size_t i = first; i < ops_.size(); ++i) core = ops_[i].attention_core ? i : core;
    for (size_t i = first; i < ops_.size(); ++i) {
      ModelOperator& op = ops_[i];
      const Bytes own = op.saved;
      listed += op.saved + op.saved_scores;
      op.saved = op.saved_scores = Bytes();
      const bool weight_gemm = op.forward.kind == OperatorKind::kGemm && !op.attention_core;
      const bool saved = op.attention_core || (weight_gemm && ++matmuls % 2 == 1);
      const GemmShape& y = op.forward.shape;  // a GEMM's output: m×n, `batch` times, 16-bit
      if (saved) op.saved = i == core ? attention_output_ : op.attention_core ? own : Bytes(y.m * y.n * y.batch * element_);
      op.recomputed = !saved;
      kept += op.saved;
    }
    ops_[first].saved += always;
    ops_[first].regenerated = std::max(Bytes(), listed - kept);
  }

  // Marks the operators from `first` on as a recomputed module's.
  void recompute_from(size_t first) {
    for (size_t i = first; i < ops_.size(); ++i) ops_[i].recomputed = true;
  }
  // The operators from `first` on are a module checkpointed whole: recomputed, and keeping only
  // the module's input, `input_elements` in 16 bits.
  void checkpoint_module(size_t first, double input_elements) {
    recompute_from(first);
    for (size_t i = first; i < ops_.size(); ++i) ops_[i].saved = ops_[i].saved_scores = Bytes();
    ops_[first].saved = Bytes(input_elements * kActivationBytes);
  }
  // A pre-block norm of `elements` outputs just added, with `layernorm` recomputation: it runs
  // again in the backward, its output copied back (recompute_copy).
  void recompute_norm(bool layernorm, double elements) {
    if (!layernorm) return;
    ops_.back().recomputed = true;
    recompute_copy(ops_.back().name + "_recompute_copy", elements);
  }
  // Megatron-Core's CheckpointWithoutOutput (the moe_act, layernorm and mla_up_proj modules)
  // frees a module's output after the forward; the backward runs the module again and copies
  // the new output into the freed storage (tensor_parallel/random.py, "restore the recomputed
  // memory"): `elements` read and written once more, in the backward only.
  void recompute_copy(const std::string& name, double elements) {
    OperatorCost forward = memory_bound_cost(Bytes(), Flops(), activation_);
    forward.kernels = 0;
    const OperatorCost backward = memory_bound_cost(Bytes(2.0 * elements * element_), Flops(), activation_);
    ops_.push_back({name, forward, backward, false, Bytes(), Bytes()});
  }
  size_t size() const { return ops_.size(); }

  // The unfused core of the header: scores, softmax and context, every score materialised.
  // Keys and values are expanded to every query head (GQA) before the products.
  void unfused_attention(double b, double s_q, double s_kv, double heads, double d_qk, double d_v, bool dropout) {
    const size_t first = ops_.size();
    const double groups = b * heads;
    activation_gemm("attention_scores", s_q, s_kv, d_qk, groups);
    keep(groups * (s_q + s_kv) * d_qk);  // Q and K
    const double scores = groups * s_q * s_kv;
    if (megatron_fused_softmax_runs(groups, s_q, s_kv)) {
      memory("attention_softmax", 2.0 * scores * element_, kSoftmaxFlops * scores, 1.5);
    } else {
      torch_softmax(scores);
    }
    keep_scores(scores * kActivationBytes);  // its output, which its backward reads
    if (dropout) {
      memory("attention_dropout", (2.0 * element_ + kMaskBytes) * scores, scores, 1.0);
      keep_scores(scores * (kMaskBytes + kActivationBytes));  // the mask and the product's input
    }
    activation_gemm("attention_context", s_q, d_v, s_kv, groups);
    keep(groups * s_kv * d_v);  // V
    for (size_t i = first; i < ops_.size(); ++i) ops_[i].attention_core = true;
  }

  // Megatron's FusedScaleMaskSoftmax runs its one fused kernel (scale, causal mask, softmax)
  // only on 16-bit scores of shapes the kernel was written for: 16 < s_kv ≤ 4,096, s_q and s_kv
  // multiples of 4, and the rows' batches b·heads (this rank's heads) a multiple of the
  // kernel's batches per block, 4 (8 where s_kv ≤ 128, two rows to a warp): is_kernel_available
  // in Megatron's fused_softmax.py from 2021 (s_kv ≤ 2,048 then) through the Megatron-Core of
  // 2024. So 16 heads over TP 8 at micro-batch 1 (2 batches), or 112 over TP 8 (14), miss it.
  bool megatron_fused_softmax_runs(double batches, double s_q, double s_kv) const {
    auto multiple_of = [](double v, double k) { return std::fmod(v, k) == 0; };
    const double per_block = s_kv <= 128 ? 8 : 4;
    return element_ == 2 && s_kv > 16 && s_kv <= 4096 && multiple_of(s_q, 4) && multiple_of(s_kv, 4) &&
           multiple_of(batches, per_block);
  }

  // Elsewhere it runs PyTorch's softmax_in_fp32 path, five kernels each way on every score:
  // forward the cast to fp32, the scale, masked_fill, softmax and the cast back (reads and
  // writes of 2e + 24 bytes); backward autograd's five (2e + 36: softmax's reads its fp32
  // output beside the gradient). It keeps that fp32 output for its backward.
  void torch_softmax(double scores) {
    constexpr int kKernels = 5;
    OperatorCost forward =
        memory_bound_cost(Bytes((2 * element_ + 6 * kFp32Bytes) * scores), Flops(kSoftmaxFlops * scores), activation_);
    OperatorCost backward =
        memory_bound_cost(Bytes((2 * element_ + 9 * kFp32Bytes) * scores), Flops(kSoftmaxFlops * scores), activation_);
    forward.kernels = backward.kernels = kKernels;
    ops_.push_back({"attention_softmax", forward, backward, false, Bytes(), Bytes()});
    keep_scores(scores * kFp32Bytes);
  }

  // An MLP of intermediate size f_local on `rows` rows per group (`groups` experts at once).
  // `kept_input`: the elements of its input that it keeps (0 when another operator keeps the
  // same tensor).
  // `recompute_activation`: the activation runs again in the backward from the kept first
  // linear's output, so the down projection's input is not kept; `recompute_all`: the whole
  // MLP runs again from its input, the only tensor kept.
  // `sp_share`: T_sp/T when its input is gathered from, and its output scattered to, sequence
  // shards (a TP-split MLP under SP); 1 for routed experts, whose tokens the dispatch brings.
  void mlp(const std::string& prefix, const ModelConfig& model, double rows, double f_local, double hidden,
           double kept_input, double groups = 1, bool recompute_activation = false, bool recompute_all = false,
           double sp_share = 1) {
    const double tokens = rows * groups;
    const size_t first = ops_.size();
    const bool gated = model.mlp == MlpKind::kGated;
    if (gated && separate_projections_) {
      gemm(prefix + "gate_proj", rows, f_local, hidden, groups, {sp_share, 1});
      keep_gemm_input(kept_input);
      gemm(prefix + "up_proj", rows, f_local, hidden, groups, {0, 1});
    } else {
      // A gated MLP's gate and up projections are one GEMM of 2f outputs on one quantised input
      // (Megatron-Core's linear_fc1, vLLM's gate_up_proj).
      gemm(prefix + (gated ? "gate_up_proj" : "up_proj"), rows, (gated ? 2.0 : 1.0) * f_local, hidden, groups,
           {sp_share, 1});
      keep_gemm_input(kept_input);
    }
    const bool clamped = gated && clamp_glu_;
    if (clamped) glu_clamp(prefix, tokens * f_local, !recompute_all && !recompute_activation);
    const size_t activation = ops_.size();
    memory(prefix + "activation", (gated ? 3.0 : 2.0) * tokens * f_local * element_,
           (gated ? kSwigluFlops : kGeluFlops) * tokens * f_local);
    if (!recompute_all) keep((gated ? 2.0 : 1.0) * tokens * f_local);  // gate and up outputs; the GELU's input
    gemm(prefix + "down_proj", rows, hidden, f_local, groups, {1, sp_share});
    if (!recompute_all && !recompute_activation) keep_gemm_input(tokens * f_local);  // the activation's output
    if (recompute_all) recompute_from(first);
    if (recompute_activation && !recompute_all) {
      ops_[activation].recomputed = true;
      if (clamped) ops_[activation - 1].recomputed = true;
      recompute_copy(prefix + "activation_recompute_copy", tokens * f_local);
    }
  }

  // Megatron-Core's clamped gated activation (fused_bias_geglu.py, weighted_bias_quick_geglu_impl
  // with a clamp value: GPT-OSS's experts issued one by one) clamps the fc1 output's two halves
  // and concatenates them in eager PyTorch before the fused activation. Forward, per element of
  // one half: each clamp reads and writes it (4), the cat reads and writes both halves (4): 8
  // element sizes, 3 kernels. Backward: each clamp's gradient is a mask of its kept input (le;
  // ge, le, logical_and on the two-sided half) and a where over the incoming gradient (about 3.5
  // and 7 element sizes), and the chunk's gradient a cat of the two (4): 15, 7 kernels. One
  // Python routine each pass: the host dispatches it once (router_cost.h's reading of t_dispatch,
  // which folds a module's small kernels into its operator). The clamps keep the fc1 output, the
  // activation the cat: one more copy of both halves, unless the activation is recomputed
  // (Megatron's CheckpointWithoutOutput keeps only its input).
  void glu_clamp(const std::string& prefix, double half_elements, bool kept) {
    OperatorCost forward = memory_bound_cost(Bytes(8.0 * half_elements * element_), Flops(2.0 * half_elements), activation_);
    forward.kernels = 3;
    OperatorCost backward = memory_bound_cost(Bytes(15.0 * half_elements * element_), Flops(4.0 * half_elements), activation_);
    backward.kernels = 7;
    forward.host_dispatches = backward.host_dispatches = 1;
    ops_.push_back({prefix + "activation_clamp", forward, backward, false, Bytes(), Bytes()});
    if (kept) keep(2.0 * half_elements);
  }

  // Activations the operator just added keeps for its backward (see the header).
  void keep(double elements, double bytes_per_element = kActivationBytes) {
    ops_.back().saved += Bytes(elements * bytes_per_element);
  }
  // The input of the GEMM just added, kept for its weight gradient: quantised in fp8/fp4
  // training, where the module saves its quantised copy instead of the 16-bit tensor.
  void keep_gemm_input(double elements) {
    keep(elements, last_cast_ ? last_cast_->stored_bytes_per_element : kActivationBytes);
  }
  // A quantised copy of a GEMM input that another operator keeps in 16 bits for itself (the
  // attention output, which the attention backward reads as well): nothing in 16-bit training.
  void keep_quantised_copy(double elements) {
    if (last_cast_) keep(elements, last_cast_->stored_bytes_per_element);
  }
  void keep_scores(double bytes) { ops_.back().saved_scores += Bytes(bytes); }

  std::vector<ModelOperator> take() { return std::move(ops_); }

 private:
  DType dtype_;
  DType activation_;
  double element_;
  std::optional<QuantisedOperands> cast_;
  ModulePrecision precision_{};
  Fp8Recipe fp8_ = Fp8Recipe::kDelayed;
  Fp4Recipe fp4_ = Fp4Recipe::kNvfp4;
  std::optional<QuantModule> module_;
  std::optional<QuantisedOperands> last_cast_;  // the quantisation of the last GEMM added

  // How a GEMM of `type` is quantised in training: the run's recipe, or (a module in another
  // quantised type) the recipe for that type; nothing for 16 bits or outside training.
  std::optional<QuantisedOperands> cast_for(DType type) const {
    if (!is_quantised(type) || !cast_) return std::nullopt;
    return type == dtype_ ? cast_ : training_quantisation(type, fp8_, fp4_);
  }
  bool host_issued_groups_ = false;
  bool group_rows_known_ = false;
  bool clamp_glu_ = false;
  bool separate_projections_ = false;
  bool rope_fused_ = true;
  std::vector<ModelOperator> ops_;
  Bytes attention_output_;  // the fused attention core's output and row statistics (the last one added)
};

// The share of a causal sequence's s²/2 query-key pairs that the model's attention computes:
// 1; with a window w on the share f of the layers (1 − f) + f·(s·w − w²/2)/(s²/2) for s > w
// (each query past the first w sees w keys); with chunks of c on the share f,
// (1 − f) + f·(k·c² + r²)/s², s = k·c + r (each whole chunk is a causal square of its own); with
// sparse attention's top-k, a window of k on every layer (each query past the first k sees k).
double causal_pairs_share(const ModelConfig& m, double s) {
  if (const double k = static_cast<double>(m.attended_keys_cap()); k > 0) {
    return s <= k ? 1.0 : (s * k - k * k / 2) / (s * s / 2);
  }
  const double c = static_cast<double>(m.attention_chunk);
  if (c > 0 && s > c) {
    const double k = std::floor(s / c), r = s - k * c;
    return (1.0 - m.attention_chunk_layers) + m.attention_chunk_layers * (k * c * c + r * r) / (s * s);
  }
  const double w = static_cast<double>(m.sliding_window);
  if (w <= 0 || s <= w) return 1.0;
  return (1.0 - m.sliding_window_layers) + m.sliding_window_layers * (s * w - w * w / 2) / (s * s / 2);
}

// A ragged batch's attention work under the model's bounds on the keys a query sees: a window or
// chunks on a share of the layers, or sparse attention's top-k on all of them.
AttentionWork bounded_ragged_work(const ModelConfig& m, const RaggedBatch& batch) {
  if (const int64_t k = m.attended_keys_cap(); k > 0) {
    // The sparse kernels gather each query's own top-k rows: the pairs, not a window's union.
    AttentionWork w = ragged_attention_work(batch, k, 1.0);
    w.read_key_tokens = w.score_pairs;
    return w;
  }
  return ragged_attention_work(batch, m.sliding_window, m.sliding_window_layers, m.attention_chunk, m.attention_chunk_layers);
}

// The per-GPU sizes of the file header, for a uniform micro-batch or a ragged batch.
struct LocalSizes {
  double tokens = 0, sp_tokens = 0, hidden = 0, heads = 0, kv_heads = 0;
  AttentionWork work;
  // A Mamba layer's work: the tokens of chunks scanned whole (a training micro-batch, a serving
  // step's prompt chunks of 2+ tokens), the serving sequences whose chunk starts from a cached
  // state, and the sequences of one new token, which update their state instead.
  double scan_tokens = 0, scan_sequences = 0, continued_sequences = 0, decode_sequences = 0;
  // A serving step's batch, split as MLA's serving backends split it: the chunks of a prompt
  // (2+ new tokens) and the sequences decoding (one token, or one and its drafts).
  bool ragged = false;
  AttentionWork prefill_work, decode_work;
  // A DSA indexer's work: every causal pair, whatever the top-k leaves to the attention.
  AttentionWork index_work;
  double cache_bytes = 0;  ///< a serving batch's KV-cache element (0: the activations')
  double mla_row_bytes = 0;  ///< a serving batch's cached MLA token on one layer (mla_cache_token_bytes)

  LocalSizes(const ModelConfig& m, const ShardingFactors& sh)
      : hidden(static_cast<double>(m.hidden)),
        heads(static_cast<double>(m.heads) / sh.tp),
        // Fewer KV heads than TP ranks: each rank keeps (replicates) the one its queries use.
        kv_heads(m.attention_kv_heads() >= sh.tp ? static_cast<double>(m.attention_kv_heads()) / sh.tp : 1.0) {}

  LocalSizes(const ModelConfig& m, const MicroBatch& batch, const ShardingFactors& sh) : LocalSizes(m, sh) {
    const double b = static_cast<double>(batch.sequences);
    const double s = static_cast<double>(batch.sequence_length);
    tokens = b * s / sh.cp;
    sp_tokens = sh.sp ? tokens / sh.tp : tokens;
    // Each rank's s/c queries against all s keys; the load-balanced causal split gives every
    // rank the same half of the triangle.
    const double pairs_per_query = s * (batch.causal ? 0.5 * causal_pairs_share(m, s) : 1.0);
    work = AttentionWork{b, tokens, b * s, b * (tokens / b) * pairs_per_query, tokens / b, s};
    index_work = AttentionWork{b, tokens, b * s, b * (tokens / b) * s * (batch.causal ? 0.5 : 1.0), tokens / b, s};
    if (sh.cp_ring) work.key_blocks = sh.cp;
    scan_tokens = tokens;
  }

  LocalSizes(const ModelConfig& m, const RaggedBatch& batch, const ShardingFactors& sh) : LocalSizes(m, sh) {
    ragged = true;
    cache_bytes = bytes_per_element(batch.kv_cache);
    if (m.mla) mla_row_bytes = mla_cache_token_bytes(m, batch.kv_cache);
    work = bounded_ragged_work(m, batch);
    index_work = ragged_attention_work(batch);
    tokens = work.query_tokens;
    sp_tokens = sh.sp ? tokens / sh.tp : tokens;
    RaggedBatch prompts = batch, decodes = batch;
    prompts.sequences.clear();
    decodes.sequences.clear();
    for (const SequenceChunk& c : batch.sequences) {
      // A speculating sequence's verification is a decode of 1 + drafts tokens (vLLM's MLA
      // backends take queries up to that length as decodes).
      (c.q_len == 1 + c.drafts ? decodes : prompts).sequences.push_back(c);
      if (c.q_len == 1) {
        decode_sequences += 1;
        continue;
      }
      scan_tokens += static_cast<double>(c.q_len);
      scan_sequences += 1;
      continued_sequences += c.kv_len > c.q_len ? 1 : 0;
    }
    prefill_work = bounded_ragged_work(m, prompts);
    decode_work = bounded_ragged_work(m, decodes);
  }
};

template <typename Batch>
void require_valid(const ModelConfig& model, const Batch& batch, const ShardingFactors& sharding) {
  if (std::string p = sharding_problem(model, batch, sharding); !p.empty()) throw std::invalid_argument(p);
}

// The attention's output projection and residual add.
void add_attention_output(OperatorList& ops, const ModelConfig& m, const LocalSizes& z) {
  if (m.attention_output_gate && !m.mla) {
    // O · sigmoid(gate): reads both, writes O; the backward reads O, the gate and the gradient,
    // writes two. The ungated O (FlashAttention's backward reads it) and the gate are kept.
    const double elements = z.tokens * z.heads * static_cast<double>(m.head_dim);
    ops.memory("attention_output_gate", 3.0 * elements * ops.element_bytes(), kSigmoidGateFlops * elements, 5.0 / 3.0);
    ops.keep(2.0 * elements);
  }
  ops.gemm("attention_out_proj", z.tokens, z.hidden, z.heads * static_cast<double>(m.v_head_dim()), 1,
           {1, z.sp_tokens / z.tokens});
  const double attention_output = z.tokens * z.heads * static_cast<double>(m.v_head_dim());
  ops.keep(attention_output);  // 16-bit: the attention's backward reads it too
  ops.keep_quantised_copy(attention_output);
  ops.in_module(std::nullopt);
  // A parallel block adds both branches to the residual once, after the MLP.
  if (!m.parallel_block) ops.residual("attention_residual", z.sp_tokens, z.hidden, m.hidden_dropout > 0);
}

// MLA in a serving step, as vLLM's and SGLang's MLA backends run it: the cache holds each
// token's latent and rope key (kv_capacity.h). A prompt chunk up-projects its whole context's
// latents, the cached prefix's too, to per-head keys and values and runs FlashAttention over
// them; a decoding sequence absorbs the key up-projection into its query (q_nope·W_UK, per head
// into the latent), attends over the latents themselves and up-projects the result per head
// (o·W_UV), so no per-head key or value is ever built for its context.
void add_mla_serving_core(OperatorList& ops, const ModelConfig& m, AttentionKernel attention, const LocalSizes& z) {
  const MlaConfig& a = *m.mla;
  const double nope = static_cast<double>(a.qk_nope_head_dim), rope = static_cast<double>(a.qk_rope_head_dim);
  const double latent = static_cast<double>(a.kv_lora_rank), v = static_cast<double>(a.v_head_dim);
  const bool flash2 = attention == AttentionKernel::kFlash2;
  if (rope > 0) ops.rotary(z.tokens * (z.heads + 1) * rope);
  if (m.sparse_attention) {
    // Sparse attention runs every token absorbed (vLLM's and SGLang's sparse FlashMLA kernels
    // gather each query's top-k latents, prompt chunks too).
    ops.gemm("q_absorb_key_up_proj", z.tokens, latent, nope, z.heads);
    ops.mla_latent_attention(z.work, z.heads, latent, rope, flash2, z.mla_row_bytes);
    ops.gemm("value_up_proj", z.tokens, v, latent, z.heads);
    return;
  }
  const AttentionWork& prompt = z.prefill_work;
  if (prompt.sequences > 0) {
    ops.gemm("kv_up_proj", prompt.key_tokens, z.heads * (nope + v), latent);
    ops.attention(prompt, z.heads, z.heads, nope + rope, v, false, flash2);  // on up-projected K and V
  }
  const AttentionWork& decode = z.decode_work;
  if (decode.sequences > 0) {
    ops.gemm("q_absorb_key_up_proj", decode.query_tokens, latent, nope, z.heads);
    ops.mla_latent_attention(decode, z.heads, latent, rope, flash2, z.mla_row_bytes);
    ops.gemm("value_up_proj", decode.query_tokens, v, latent, z.heads);
  }
}

// DSA's core in training, as Megatron-Core's AbsorbedMLASelfAttention runs it: each head's query
// absorbs the key up-projection (q_nope·W_UK into the latent), the sparse kernel attends over the
// latents and rope keys themselves (one shared key of kv_lora + rope a token, its first kv_lora the
// value), and each head's output is up-projected (o·W_UV). No per-head keys or values are built.
void add_absorbed_training_core(OperatorList& ops, const ModelConfig& m, AttentionKernel attention, const LocalSizes& z) {
  const MlaConfig& a = *m.mla;
  const double nope = static_cast<double>(a.qk_nope_head_dim), rope = static_cast<double>(a.qk_rope_head_dim);
  const double latent = static_cast<double>(a.kv_lora_rank), v = static_cast<double>(a.v_head_dim);
  if (rope > 0) ops.rotary(z.tokens * (z.heads + 1) * rope);
  ops.gemm("q_absorb_key_up_proj", z.tokens, latent, nope, z.heads);
  ops.keep_gemm_input(z.tokens * z.heads * nope);
  ops.mla_latent_attention(z.work, z.heads, latent, rope, attention == AttentionKernel::kFlash2, 0.0, true);
  ops.gemm("value_up_proj", z.tokens, v, latent, z.heads);
  ops.keep_gemm_input(z.tokens * z.heads * latent);
}

// A DSA lightning indexer (ModelConfig::sparse_attention), whole on every TP rank as Megatron-Core
// and vLLM replicate it: its query from the MLA query latent (or the hidden state), its key and
// the heads' weights from the hidden state; the key's LayerNorm, the rotary embedding on both
// and their Hadamard rotation (two passes over q and k); then the scores and the top-k.
void add_indexer(OperatorList& ops, const ModelConfig& m, const LocalSizes& z) {
  const SparseAttentionConfig& a = *m.sparse_attention;
  const double heads = a.index_heads, d = static_cast<double>(a.index_head_dim);
  const double q_in = static_cast<double>(m.mla->q_lora_rank > 0 ? m.mla->q_lora_rank : m.hidden);
  // Their inputs are the query latent and the norm's output, which the MLA projections keep
  // already; under sequence parallelism the indexer's are gathered copies, kept too.
  const bool gathered = z.sp_tokens < z.tokens;
  ops.gemm("indexer_q_proj", z.tokens, heads * d, q_in);
  if (gathered) ops.keep_gemm_input(z.tokens * q_in);
  ops.gemm("indexer_k_proj", z.tokens, d, z.hidden);
  if (gathered) ops.keep_gemm_input(z.tokens * z.hidden);
  ops.gemm("indexer_weights_proj", z.tokens, heads, z.hidden);
  const double qk = z.tokens * (heads + 1) * d;
  ops.memory("indexer_qk_prep", 4.0 * qk * ops.element_bytes(), qk * (std::log2(d) + kLayerNormFlops));
  ops.keep(qk + z.tokens * heads);  // q, k and the weights, for the indexer's own backward
  // The KL target's attention scores are the absorbed core's: keys of kv_lora + rope.
  const double main_qk = static_cast<double>(m.mla->kv_lora_rank + m.mla->qk_rope_head_dim);
  ops.lightning_indexer(z.index_work, z.work, heads, d, z.heads, main_qk, z.ragged);
}

void add_attention(OperatorList& ops, const ModelConfig& m, AttentionKernel attention, const LocalSizes& z,
                   const RecomputeModules& recompute, bool indexer) {
  const double e = ops.element_bytes();
  ops.norm("attention_norm", m, z.sp_tokens, z.hidden);
  ops.recompute_norm(recompute.layernorm && m.mla, z.sp_tokens * z.hidden);  // else fused into the QKV projection
  ops.in_module(QuantModule::kAttention);
  const double rotary = static_cast<double>(m.rotary_dim());
  if (m.mla) {
    const MlaConfig& a = *m.mla;
    const double qk = static_cast<double>(a.qk_nope_head_dim + a.qk_rope_head_dim);
    const double q_lora = static_cast<double>(a.q_lora_rank);
    const double kv_lora = static_cast<double>(a.kv_lora_rank);
    if (a.q_lora_rank > 0) {
      ops.gemm("q_down_proj", z.sp_tokens, q_lora, z.hidden);
      ops.keep_gemm_input(z.sp_tokens * z.hidden);  // the norm's output, shared with kv_down_proj
      ops.norm("q_latent_norm", m, z.sp_tokens, q_lora);
      const size_t q_up = ops.size();
      ops.gemm("q_up_proj", z.tokens, z.heads * qk, q_lora, 1, {z.sp_tokens / z.tokens, 1});
      ops.keep_gemm_input(z.tokens * q_lora);
      if (recompute.mla_up_proj) ops.recompute_from(q_up);
    } else {
      ops.gemm("q_proj", z.tokens, z.heads * qk, z.hidden, 1, {z.sp_tokens / z.tokens, 1});
      ops.keep_gemm_input(z.sp_tokens * z.hidden);
    }
    ops.gemm("kv_down_proj", z.sp_tokens, kv_lora + static_cast<double>(a.qk_rope_head_dim), z.hidden);
    ops.norm("kv_latent_norm", m, z.sp_tokens, kv_lora);
    if (indexer) add_indexer(ops, m, z);
    if (z.ragged) {
      add_mla_serving_core(ops, m, attention, z);
      return add_attention_output(ops, m, z);
    }
    if (m.sparse_attention && attention != AttentionKernel::kUnfused) {
      add_absorbed_training_core(ops, m, attention, z);
      return add_attention_output(ops, m, z);
    }
    const size_t up = ops.size();
    ops.gemm("kv_up_proj", z.tokens, z.heads * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim), kv_lora, 1,
             {z.sp_tokens / z.tokens, 1});
    ops.keep_gemm_input(z.tokens * kv_lora);
    // Rotary on every query head's rope part and on the one shared rope key.
    const double rotated = z.tokens * (z.heads + 1) * rotary;
    if (rotary > 0) ops.rotary(rotated);
    // Megatron's mla_up_proj recomputation: the up-projections and rotary run again in the
    // backward from the kept latents, so the attention keeps no Q, K, V of its own; the new
    // Q, K and V are copied back into their freed storage.
    if (recompute.mla_up_proj) {
      ops.recompute_from(up);
      ops.recompute_copy("mla_up_proj_recompute_copy", z.tokens * z.heads * (2.0 * qk + static_cast<double>(a.v_head_dim)));
    }
  } else {
    const double d = static_cast<double>(m.head_dim);
    const double query_heads = z.heads * (m.attention_output_gate ? 2 : 1);  // a gated query projects its gate too
    if (ops.separate_projections()) {
      ops.gemm("q_proj", z.tokens, query_heads * d, z.hidden, 1, {z.sp_tokens / z.tokens, 1});
      ops.keep_gemm_input(z.sp_tokens * z.hidden);
      ops.gemm("k_proj", z.tokens, z.kv_heads * d, z.hidden, 1, {0, 1});
      ops.gemm("v_proj", z.tokens, z.kv_heads * d, z.hidden, 1, {0, 1});
    } else {
      ops.gemm("qkv_proj", z.tokens, (query_heads + 2 * z.kv_heads) * d, z.hidden, 1, {z.sp_tokens / z.tokens, 1});
      ops.keep_gemm_input(z.sp_tokens * z.hidden);
    }
    const double qk_elements = z.tokens * (z.heads + z.kv_heads) * d;
    if (m.qk_norm) {
      ops.memory("qk_norm", 2.0 * qk_elements * e, kRmsNormFlops * qk_elements);
      ops.keep(qk_elements);
    }
    if (rotary > 0) ops.rotary(qk_elements);
  }
  if (attention == AttentionKernel::kUnfused) {
    // A ragged batch runs it at its mean lengths (the kernels' shapes); training is uniform.
    ops.unfused_attention(z.work.sequences, z.work.s_q, z.work.s_kv, z.heads, static_cast<double>(m.qk_head_dim()),
                          static_cast<double>(m.v_head_dim()), m.attention_dropout > 0);
  } else {
    ops.attention(z.work, z.heads, z.kv_heads, static_cast<double>(m.qk_head_dim()), static_cast<double>(m.v_head_dim()),
                  !(m.mla && recompute.mla_up_proj), attention == AttentionKernel::kFlash2, z.cache_bytes);
  }
  add_attention_output(ops, m, z);
}

// Megatron-Core's MambaMixer over TP t, which splits its heads, groups and inner width t ways,
// in training through mamba_ssm's mamba_split_conv1d_scan_combined: the input projection
// column-parallel (on the gathered sequence under SP), the causal depthwise convolution with its
// SiLU over x, B and C, the chunked scan, the gated RMSNorm (norm(y)·SiLU(z)), the output
// projection row-parallel. Kept for the backward: the projections' inputs, the input
// projection's output (the fused scan's backward recomputes the convolution from it) and y.
// A serving step (vLLM's and SGLang's Mamba-2 layers) scans its prompt chunks, reading the
// cached state of a continued prompt and writing every prompt's final state, and advances each
// one-token sequence by the recurrence (mamba_state_update).
void add_mamba(OperatorList& ops, const ModelConfig& m, const ShardingFactors& sh, const LocalSizes& z) {
  const MambaConfig& a = *m.mamba;
  const double e = ops.element_bytes();
  const double t = sh.tp;
  const double inner = static_cast<double>(a.inner()) / t;
  const double width = static_cast<double>(a.in_proj_width()) / t;
  const double channels = static_cast<double>(a.conv_channels()) / t;
  const double heads = a.heads / t, groups = a.groups / t;
  ops.norm("mamba_norm", m, z.sp_tokens, z.hidden);
  ops.in_module(QuantModule::kMambaInProj);
  ops.gemm("mamba_in_proj", z.tokens, width, z.hidden, 1, {z.sp_tokens / z.tokens, 1});
  ops.keep_gemm_input(z.sp_tokens * z.hidden);
  ops.in_module(std::nullopt);
  ops.keep(z.tokens * width);
  // mamba_ssm's fused training path (mamba_split_conv1d_scan_combined) runs the convolution
  // again in the backward before its gradient: three times the forward's traffic. A one-token
  // sequence also reads and writes its K − 1 cached inputs.
  const double conv_elements = (z.tokens + 2.0 * z.decode_sequences * (a.conv_kernel - 1)) * channels;
  ops.memory("mamba_conv1d", 2.0 * conv_elements * e, (2.0 * a.conv_kernel + kSiluFlops) * z.tokens * channels, 3.0);
  if (z.scan_tokens > 0) ops.ssd_scan(a, z.scan_tokens, heads, groups);
  const double state_elements = heads * static_cast<double>(a.head_dim * a.state);  // one sequence's
  if (z.scan_sequences > 0) {
    // A serving step's prompt chunks: each final state written to the cache, a continued
    // prompt's first read from it.
    ops.memory("mamba_state_io", (z.scan_sequences + z.continued_sequences) * state_elements * kFp32Bytes, 0.0);
  }
  if (z.decode_sequences > 0) {
    // The recurrence h ← exp(dt·A)·h + dt·B·xᵀ, y = C·h + D·x: the fp32 state read and written,
    // x, B, C and dt read, y written; about 6 FLOPs a state element.
    const double io = (2.0 * inner + 2.0 * groups * static_cast<double>(a.state) + heads) * e;
    ops.memory("mamba_state_update", z.decode_sequences * (2.0 * state_elements * kFp32Bytes + io),
               6.0 * z.decode_sequences * state_elements);
  }
  ops.keep(z.tokens * inner);
  ops.memory("mamba_gated_norm", 3.0 * z.tokens * inner * e, (kRmsNormFlops + kSiluFlops + 1) * z.tokens * inner);
  ops.in_module(QuantModule::kMambaOutProj);
  ops.gemm("mamba_out_proj", z.tokens, z.hidden, inner, 1, {1, z.sp_tokens / z.tokens});
  ops.keep_gemm_input(z.tokens * inner);
  ops.in_module(std::nullopt);
  ops.residual("mamba_residual", z.sp_tokens, z.hidden, m.hidden_dropout > 0);
}

// How a layer's kernels run: a training micro-batch's recipe, or a serving step's (16-bit or
// weight-only quantised, forward only, nothing recomputed).
struct LayerRecipe {
  DType dtype = DType::kBf16;
  AttentionKernel attention = AttentionKernel::kFlash;
  std::optional<QuantisedOperands> cast;
  RecomputeModules recompute{};
  ExpertGemms expert_gemms = ExpertGemms::kGrouped;
  bool op_checkpointing = false;
  ModulePrecision precision{};
  Fp8Recipe fp8 = Fp8Recipe::kDelayed;
  Fp4Recipe fp4 = Fp4Recipe::kNvfp4;
  bool rope_fusion = true;
  bool sort_received_tokens = false;
  bool fp32_routing_weights = false;
  bool experts_padded = false;
  std::optional<RouterRecipe> router;  ///< training's; none in a serving step
};

// The router's selection and loss after its GEMM: in training as the recipe runs them
// (router_cost.h); a serving step's (`recipe` none) as one fused kernel that reads the scores in
// fp32 and writes the chosen experts and weights.
void add_router(OperatorList& ops, const MoeConfig& moe, const std::optional<RouterRecipe>& recipe, double tokens) {
  const double experts = moe.experts;
  if (!recipe) {
    ops.memory("router_topk", tokens * (experts * kFp32Bytes + moe.top_k * 2 * kFp32Bytes),
               kSoftmaxFlops * tokens * experts);
  } else {
    const double matrix = tokens * experts * kFp32Bytes;
    ops.router_passes("router_topk", router_topk_passes(moe, recipe->fused), matrix);
    if (recipe->loss != LoadBalancingLoss::kNone) {
      ops.router_passes("router_load_balancing_loss", router_loss_passes(moe, *recipe), matrix);
      ops.keep(tokens * experts, kFp32Bytes);  // its scores, for their gradient
    }
  }
  ops.keep(tokens * (experts + moe.top_k), kFp32Bytes);  // probabilities and chosen weights
}

void add_moe(OperatorList& ops, const ModelConfig& m, const ShardingFactors& sh, const LocalSizes& z,
             const RecomputeModules& recompute, const LayerRecipe& r) {
  const MoeConfig& moe = *m.moe;
  const double e = ops.element_bytes();
  const double experts = moe.experts;
  const double top_k = moe.top_k;
  const size_t first = ops.size();
  ops.gemm("router", z.sp_tokens, experts, z.hidden);
  ops.keep(z.sp_tokens * z.hidden);  // the norm's output, which the shared experts read too
  // A latent MoE's projections, whole on every TP rank, on the tokens it holds; the routed
  // experts and the permutations then work in the latent width.
  const double width = static_cast<double>(moe.expert_width(m.hidden));
  ops.in_module(QuantModule::kMoeLatent);
  if (moe.latent > 0) ops.gemm("moe_latent_down_proj", z.sp_tokens, width, z.hidden);
  ops.in_module(QuantModule::kExperts);
  add_router(ops, moe, r.router, z.sp_tokens);
  // Routed token-slots this GPU computes, on average, and its experts' FFN width.
  const int etp = sh.expert_tp > 0 ? sh.expert_tp : sh.tp;
  const double slots =
      sh.experts_in_tp_group ? z.tokens * top_k * sh.attention_dp / sh.ep : z.tokens * top_k * etp / sh.tp;
  const double expert_ffn = static_cast<double>(moe.expert_ffn) / (sh.experts_in_tp_group ? 1 : etp);
  ops.memory("moe_permute", (z.tokens + slots) * width * e, 0.0);
  const double local_experts = (experts + sh.redundant_experts) / sh.ep;
  // Megatron's alltoall dispatcher receives its rows grouped by source rank and regroups them
  // by local expert (sort_chunks_by_idxs: the rows and their routing weights read and written
  // once), and back before the combine; each gradient is the inverse regrouping.
  const bool sorted = r.sort_received_tokens && local_experts > 1;
  if (sorted) ops.memory("moe_sort_by_expert", 2.0 * slots * (width * e + kFp32Bytes), 0.0, 1.0);
  // Experts padded to their capacity all compute, in row counts the host knows.
  const double touched =
      r.experts_padded ? local_experts : local_experts * -std::expm1(slots * std::log1p(-1.0 / local_experts));
  const double groups = local_experts > 1 ? touched : 1.0;
  // SequentialMLP with one local expert is a plain MLP: no row counts read back, nothing issued
  // per expert.
  const bool sequential = r.expert_gemms == ExpertGemms::kSequential && local_experts > 1;
  const bool per_expert = r.expert_gemms == ExpertGemms::kPerExpert || sequential;
  ops.issue_groups_from_host(per_expert, r.experts_padded);
  ops.clamp_glu(m.glu_clamp && per_expert);
  const size_t expert_mlp = ops.size();
  ops.mlp("expert_", m, slots / groups, expert_ffn, width, slots * width, groups, recompute.moe_act);
  ops.clamp_glu(false);
  ops.issue_groups_from_host(false);
  // Every local expert's module runs, tokens or not.
  if (sequential) ops.one_module_per_group(expert_mlp, static_cast<int>(std::ceil(local_experts)), slots * width);
  if (m.mlp_bias && per_expert) ops.expert_output_bias(slots, width, groups, r.fp32_routing_weights);
  if (sorted) ops.memory("moe_unsort_by_expert", 2.0 * slots * width * e, 0.0, 1.0);
  ops.in_module(QuantModule::kMoeLatent);
  ops.memory("moe_unpermute", (slots + z.tokens) * width * e, 2.0 * slots * width);
  ops.keep(slots * width);  // the experts' outputs, for the gradient of the routing weights
  if (moe.latent > 0) {
    ops.gemm("moe_latent_up_proj", z.sp_tokens, z.hidden, width);
    ops.keep_gemm_input(z.sp_tokens * width);
  }
  ops.in_module(QuantModule::kSharedExperts);
  if (moe.shared_experts > 0) {
    const double f_shared = static_cast<double>(moe.shared_experts * moe.shared_expert_ffn) / sh.tp;
    const size_t shared = ops.size();
    ops.mlp("shared_expert_", m, z.tokens, f_shared, z.hidden, 0.0, 1, false, false, z.sp_tokens / z.tokens);
    ops.mark_shared_expert(shared);
  }
  ops.in_module(std::nullopt);
  if (recompute.moe) ops.checkpoint_module(first, z.sp_tokens * z.hidden);
}

}  // namespace

std::optional<RecomputeModules> add_recompute_module(RecomputeModules modules, const std::string& name) {
  if (name == "mla_up_proj") {
    modules.mla_up_proj = true;
  } else if (name == "moe_act") {
    modules.moe_act = true;
  } else if (name == "mlp") {
    modules.mlp = true;
  } else if (name == "moe") {
    modules.moe = true;
  } else if (name == "layernorm") {
    modules.layernorm = true;
  } else if (name == "core_attn") {
    modules.core_attn = true;
  } else {
    return std::nullopt;
  }
  return modules;
}

std::vector<std::string> module_names(const RecomputeModules& modules) {
  std::vector<std::string> names;
  for (auto [on, name] : {std::pair{modules.mla_up_proj, "mla_up_proj"}, std::pair{modules.moe_act, "moe_act"},
                          std::pair{modules.mlp, "mlp"}, std::pair{modules.moe, "moe"},
                          std::pair{modules.layernorm, "layernorm"}, std::pair{modules.core_attn, "core_attn"}}) {
    if (on) names.emplace_back(name);
  }
  return names;
}

std::string to_string(const RecomputeModules& modules) {
  std::string s;
  for (const std::string& name : module_names(modules)) s += (s.empty() ? "" : "+") + name;
  return s;
}

namespace {
constexpr const char* kQuantModuleNames[kQuantModules] = {
    "attention", "mlp", "experts", "shared_experts", "moe_latent", "mamba_in_proj", "mamba_out_proj", "mtp"};
}  // namespace

const char* to_string(QuantModule m) { return kQuantModuleNames[static_cast<size_t>(m)]; }

std::optional<QuantModule> quant_module_from(const std::string& name) {
  for (size_t i = 0; i < kQuantModules; ++i) {
    if (name == kQuantModuleNames[i]) return static_cast<QuantModule>(i);
  }
  return std::nullopt;
}

bool ModulePrecision::any() const {
  return std::any_of(dtype.begin(), dtype.end(), [](const std::optional<DType>& t) { return t.has_value(); });
}

std::string to_string(const ModulePrecision& p) {
  std::string s;
  for (size_t i = 0; i < kQuantModules; ++i) {
    if (p.dtype[i]) s += (s.empty() ? "" : ", ") + std::string(kQuantModuleNames[i]) + " " + to_string(*p.dtype[i]);
  }
  return s;
}

const char* to_string(ExpertGemms g) {
  switch (g) {
    case ExpertGemms::kGrouped: return "grouped";
    case ExpertGemms::kPerExpert: return "per_expert";
    case ExpertGemms::kSequential: return "sequential";
  }
  return "?";
}

std::optional<ExpertGemms> expert_gemms_from(const std::string& name) {
  for (ExpertGemms g : {ExpertGemms::kGrouped, ExpertGemms::kPerExpert, ExpertGemms::kSequential}) {
    if (name == to_string(g)) return g;
  }
  return std::nullopt;
}

const char* to_string(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kFlash: return "flash";
    case AttentionKernel::kFlash2: return "flash2";
    case AttentionKernel::kUnfused: return "unfused";
  }
  return "flash";
}

std::optional<AttentionKernel> attention_kernel_from(const std::string& name) {
  if (name == "flash") return AttentionKernel::kFlash;
  if (name == "flash2") return AttentionKernel::kFlash2;
  if (name == "unfused") return AttentionKernel::kUnfused;
  return std::nullopt;
}

std::string sharding_problem(const ModelConfig& m, const MicroBatch& batch, const ShardingFactors& sh) {
  auto n = [](int64_t v) { return std::to_string(v); };
  if (std::string p = m.problem(); !p.empty()) return p;
  if (batch.sequences <= 0) return "the micro-batch needs at least one sequence";
  if (batch.sequence_length <= 0) return "the sequence length must be positive";
  if (sh.tp <= 0 || sh.cp <= 0 || sh.ep <= 0 || sh.attention_dp <= 0) return "tp, cp, ep and dp must be positive";
  if (sh.attention_dp > 1 && !(m.moe && sh.experts_in_tp_group)) {
    return "data-parallel attention (dp=" + n(sh.attention_dp) + ") needs a MoE model with its experts spread over every rank";
  }
  if (m.sparse_attention && sh.cp > 1) {
    return "context parallelism (cp=" + n(sh.cp) + ") with sparse attention (DSA) is not modelled: Megatron-Core runs it by "
           "all-gathering the latents and the indexer's keys, neither ring nor Ulysses";
  }
  if (m.heads % sh.tp != 0) return "tp=" + n(sh.tp) + " does not divide heads=" + n(m.heads);
  if (!m.mla && m.kv_heads % sh.tp != 0 && sh.tp % m.kv_heads != 0) {
    return "tp=" + n(sh.tp) + " and kv_heads=" + n(m.kv_heads) + " do not divide one another";
  }
  if (m.mamba) {
    if (m.mamba->groups % sh.tp != 0) return "tp=" + n(sh.tp) + " does not divide mamba.groups=" + n(m.mamba->groups);
    if (sh.cp > 1) return "context parallelism of Mamba layers is not modelled (cp=" + n(sh.cp) + ")";
  }
  if (m.any_dense_mlp() && m.ffn % sh.tp != 0) return "tp=" + n(sh.tp) + " does not divide ffn=" + n(m.ffn);
  if (m.moe) {
    if ((m.moe->experts + sh.redundant_experts) % sh.ep != 0) {
      return "ep=" + n(sh.ep) + " does not divide experts=" + n(m.moe->experts) +
             (sh.redundant_experts > 0 ? " + " + n(sh.redundant_experts) + " redundant" : std::string());
    }
    if (sh.redundant_experts > 0 && !sh.experts_in_tp_group) {
      return "redundant experts are a serving instance's with its experts spread over its GPUs";
    }
    if (sh.experts_in_tp_group && sh.ep != sh.tp * sh.attention_dp) {
      return sh.attention_dp > 1 ? "ep=" + n(sh.ep) + " must equal tp·dp=" + n(sh.tp * sh.attention_dp)
                                 : "ep=" + n(sh.ep) + " must equal tp=" + n(sh.tp) + " (or be 1)";
    }
    const int etp = sh.expert_tp > 0 ? sh.expert_tp : sh.tp;
    if (!sh.experts_in_tp_group && m.moe->expert_ffn % etp != 0) {
      return (sh.expert_tp > 0 ? "expert_tp=" : "tp=") + n(etp) + " does not divide expert_ffn=" + n(m.moe->expert_ffn);
    }
    const int64_t shared = int64_t{m.moe->shared_experts} * m.moe->shared_expert_ffn;
    if (shared % sh.tp != 0) return "tp=" + n(sh.tp) + " does not divide the shared experts' ffn=" + n(shared);
  }
  // Causal context parallelism splits each sequence into 2·cp chunks (rank i takes chunks i and
  // 2cp−1−i) so that every rank gets the same share of the triangle.
  const int64_t chunks = batch.causal && sh.cp > 1 ? 2 * int64_t{sh.cp} : sh.cp;
  if (batch.sequence_length % chunks != 0) {
    return "the sequence length " + n(batch.sequence_length) + " is not a multiple of " + n(chunks) +
           (chunks == sh.cp ? " (cp)" : " (2·cp, for causal load balancing)");
  }
  if (sh.sp && (batch.sequences * batch.sequence_length / sh.cp) % sh.tp != 0) {
    return "sequence parallelism needs the " + n(batch.sequences * batch.sequence_length / sh.cp) +
           " tokens per GPU to be a multiple of tp=" + n(sh.tp);
  }
  return {};
}

namespace {

std::vector<ModelOperator> layer_ops(const ModelConfig& m, int layer, const LocalSizes& z, const LayerRecipe& r,
                                     const ShardingFactors& sh) {
  if (layer < 0 || layer >= m.layers + m.mtp_layers) {
    throw std::invalid_argument("layer " + std::to_string(layer) + " is outside the model");
  }
  OperatorList ops(r.dtype, r.cast);
  ops.use_module_precision(r.precision, r.fp8, r.fp4);
  ops.separate_projections(r.op_checkpointing);
  ops.fuse_rope(r.rope_fusion);
  const RecomputeModules recompute = r.op_checkpointing ? RecomputeModules{} : r.recompute;
  const LayerKind kind = m.layer_kind(layer);
  if (kind == LayerKind::kMamba) {
    add_mamba(ops, m, sh, z);
    return ops.take();
  }
  if (kind == LayerKind::kTransformer || kind == LayerKind::kAttention) {
    add_attention(ops, m, r.attention, z, recompute, m.has_indexer(layer));
  }
  if (kind == LayerKind::kAttention) return ops.take();
  // A parallel block's MLP reads the attention's normalised input, which that keeps already.
  const bool own_norm = !m.parallel_block || kind != LayerKind::kTransformer;
  if (own_norm) {
    ops.norm("mlp_norm", m, z.sp_tokens, z.hidden);
    ops.recompute_norm(recompute.layernorm && m.is_moe_layer(layer), z.sp_tokens * z.hidden);  // else fused into fc1
  }
  if (m.is_moe_layer(layer)) {
    add_moe(ops, m, sh, z, recompute, r);
  } else {
    ops.in_module(QuantModule::kMlp);
    ops.mlp("mlp_", m, z.tokens, static_cast<double>(m.ffn) / sh.tp, z.hidden, own_norm ? z.sp_tokens * z.hidden : 0.0,
            1, false, recompute.mlp, z.sp_tokens / z.tokens);
    ops.in_module(std::nullopt);
  }
  ops.residual("mlp_residual", z.sp_tokens, z.hidden, m.hidden_dropout > 0);
  if (r.op_checkpointing) {
    // With TP (and so sequence parallelism), each block's output shard as its reduce-scatter left it.
    const double reduced = sh.tp > 1 ? (m.parallel_block ? 1.0 : 2.0) * z.sp_tokens * z.hidden : 0.0;
    ops.checkpoint_by_operator(0, z.sp_tokens * z.hidden, reduced);
  }
  return ops.take();
}

std::vector<ModelOperator> embedding_ops(const ModelConfig& m, const LocalSizes& z, DType dtype,
                                         const ShardingFactors& sh) {
  OperatorList ops(dtype);
  const double e = ops.element_bytes();
  // Vocabulary-parallel lookup: each rank reads the rows in its slice (1/tp of the tokens on
  // average) and writes a full-size partial result for the reduction across ranks.
  ops.memory("embedding", z.tokens * z.hidden * e * (1.0 + 1.0 / sh.tp), 0.0);
  if (m.position == PositionEmbedding::kLearned) {
    ops.memory("position_embedding", 3.0 * z.sp_tokens * z.hidden * e, z.sp_tokens * z.hidden);
  }
  return ops.take();
}

double vocab_slice(const ModelConfig& m, const ShardingFactors& sh) {
  return static_cast<double>((m.vocab + sh.tp - 1) / sh.tp);
}

}  // namespace

std::vector<ModelOperator> layer_operators(const ModelConfig& m, int layer, const MicroBatch& batch,
                                           const ShardingFactors& sh) {
  require_valid(m, batch, sh);
  const LayerRecipe recipe{batch.dtype,
                           batch.attention,
                           training_quantisation(batch.dtype, batch.fp8_recipe, batch.fp4_recipe),
                           batch.recompute,
                           batch.expert_gemms,
                           batch.op_checkpointing,
                           batch.module_precision,
                           batch.fp8_recipe,
                           batch.fp4_recipe,
                           batch.rope_fusion,
                           batch.sort_received_tokens,
                           batch.fp32_routing_weights,
                           batch.experts_padded,
                           batch.router};
  return layer_ops(m, layer, LocalSizes(m, batch, sh), recipe, sh);
}

std::vector<ModelOperator> layer_operators(const ModelConfig& m, int layer, const RaggedBatch& batch,
                                           const ShardingFactors& sh, Validation v) {
  if (v == Validation::kCheck) require_valid(m, batch, sh);
  LayerRecipe recipe;
  recipe.dtype = batch.dtype;
  recipe.attention = batch.attention;
  return layer_ops(m, layer, LocalSizes(m, batch, sh), recipe, sh);
}

std::vector<ModelOperator> embedding_operators(const ModelConfig& m, const MicroBatch& batch,
                                               const ShardingFactors& sh) {
  require_valid(m, batch, sh);
  return embedding_ops(m, LocalSizes(m, batch, sh), batch.dtype, sh);
}

std::vector<ModelOperator> embedding_operators(const ModelConfig& m, const RaggedBatch& batch,
                                               const ShardingFactors& sh, Validation v) {
  if (v == Validation::kCheck) require_valid(m, batch, sh);
  return embedding_ops(m, LocalSizes(m, batch, sh), batch.dtype, sh);
}

std::vector<ModelOperator> mtp_input_operators(const ModelConfig& m, const MicroBatch& batch,
                                               const ShardingFactors& sh) {
  std::vector<ModelOperator> ops = embedding_operators(m, batch, sh);
  const LocalSizes z(m, batch, sh);
  OperatorList own(batch.dtype);
  own.norm("mtp_embedding_norm", m, z.sp_tokens, z.hidden);
  own.norm("mtp_hidden_norm", m, z.sp_tokens, z.hidden);
  own.activation_gemm("mtp_eh_proj", z.tokens, z.hidden / sh.tp, 2.0 * z.hidden, 1);
  own.keep(2.0 * z.sp_tokens * z.hidden);  // the concatenation, for the weight gradient
  for (ModelOperator& op : own.take()) ops.push_back(std::move(op));
  return ops;
}

std::vector<ModelOperator> output_operators(const ModelConfig& m, const MicroBatch& batch, const ShardingFactors& sh) {
  require_valid(m, batch, sh);
  const LocalSizes z(m, batch, sh);
  OperatorList ops(batch.dtype);
  const double e = ops.element_bytes();
  ops.norm("final_norm", m, z.sp_tokens, z.hidden);
  const double vocab = vocab_slice(m, sh);
  // The output head stays in 16 bits under fp8 recipes (Transformer Engine, TensorRT-LLM, vLLM).
  ops.activation_gemm("logits", z.tokens, vocab, z.hidden, 1);
  ops.keep(z.sp_tokens * z.hidden);
  // Softmax cross-entropy over the vocabulary slice: logits read, fp32 probabilities kept for
  // the backward, which reads them and writes the logits' gradient.
  ops.memory("cross_entropy", z.tokens * vocab * (e + kFp32Bytes), kSoftmaxFlops * z.tokens * vocab, 1.0);
  ops.keep(z.tokens * vocab, kFp32Bytes);
  return ops.take();
}

std::vector<ModelOperator> output_operators(const ModelConfig& m, const RaggedBatch& batch, const ShardingFactors& sh,
                                            Validation v) {
  if (v == Validation::kCheck) require_valid(m, batch, sh);
  const LocalSizes z(m, batch, sh);
  OperatorList ops(batch.dtype);
  const double e = ops.element_bytes();
  // The final norm runs on every token; the head only on the rows that sample a token (the last
  // position of a finished prompt, every decode step), as vLLM and SGLang select them first.
  ops.norm("final_norm", m, z.sp_tokens, z.hidden);
  const double rows = static_cast<double>(sampled_rows(batch));
  if (rows > 0) {
    const double vocab = vocab_slice(m, sh);
    ops.activation_gemm("logits", rows, vocab, z.hidden, 1);  // 16 bits under fp8 too
    // Softmax and sampling over the slice: logits read, fp32 probabilities written.
    ops.memory("sampling", rows * vocab * (e + kFp32Bytes), kSoftmaxFlops * rows * vocab, 1.0);
  }
  return ops.take();
}

std::vector<ModelOperator> scale_experts(std::vector<ModelOperator> ops, double factor) {
  for (ModelOperator& op : ops) {
    if (op.name.rfind("expert_", 0) != 0) continue;
    op.saved = op.saved * factor;
    if (op.forward.kind == OperatorKind::kGemm) {
      GemmShape shape = op.forward.shape;
      shape.m *= factor;
      // New sizes; the same kernels, issued the same way (by the host, or from a CUDA graph).
      const OperatorCost scaled = gemm_cost(shape, op.forward.dtype);
      op.forward.shape = op.backward.shape = shape;
      op.forward.flops = scaled.flops;
      op.forward.bytes_read_written = scaled.bytes_read_written;
      op.backward.flops = scaled.flops * 2.0;
      op.backward.bytes_read_written = scaled.bytes_read_written * 2.0;
    } else {
      for (OperatorCost* c : {&op.forward, &op.backward}) {
        c->flops = c->flops * factor;
        c->bytes_read_written = c->bytes_read_written * factor;
      }
    }
  }
  return ops;
}

double busiest_expert_group_load(int experts, int groups, double zipf, int redundant) {
  const int copies = experts + redundant;
  if (experts <= 0 || groups <= 0 || redundant < 0 || copies % groups != 0) {
    throw std::invalid_argument("experts and their replicas must split into equal groups");
  }
  std::vector<double> load(static_cast<size_t>(experts));
  double total = 0;
  for (int i = 0; i < experts; ++i) total += (load[static_cast<size_t>(i)] = std::pow(i + 1.0, -zipf));
  const int local = copies / groups;
  if (redundant == 0) {  // in order: group g holds experts g·local … (g+1)·local − 1
    double busiest = 0, group = 0;
    for (int i = 0; i < experts; ++i) {
      group += load[static_cast<size_t>(i)];
      if ((i + 1) % local == 0) {
        busiest = std::max(busiest, group);
        group = 0;
      }
    }
    return busiest / total * groups;
  }
  std::vector<int> replicas(static_cast<size_t>(experts), 1);
  for (int r = 0; r < redundant; ++r) {
    size_t hottest = 0;
    for (size_t e = 1; e < replicas.size(); ++e) {
      if (load[e] / replicas[e] > load[hottest] / replicas[hottest]) hottest = e;
    }
    ++replicas[hottest];
  }
  std::vector<double> units;
  for (size_t e = 0; e < replicas.size(); ++e) units.insert(units.end(), static_cast<size_t>(replicas[e]), load[e] / replicas[e]);
  std::stable_sort(units.begin(), units.end(), std::greater<>());
  std::vector<double> group(static_cast<size_t>(groups), 0.0);
  std::vector<int> held(static_cast<size_t>(groups), 0);
  for (const double u : units) {
    size_t g = group.size();
    for (size_t k = 0; k < group.size(); ++k) {
      if (held[k] < local && (g == group.size() || group[k] < group[g])) g = k;
    }
    group[g] += u;
    ++held[g];
  }
  return *std::max_element(group.begin(), group.end()) / total * groups;
}

namespace {
// Σ over positions p = 0 … n − 1 of the keys a chunked query sees, p mod c + 1: each whole chunk
// c(c + 1)/2, the partial one r(r + 1)/2.
double chunked_pairs_before(double n, double c) {
  const double k = std::floor(n / c), r = n - k * c;
  return k * c * (c + 1) / 2 + r * (r + 1) / 2;
}
}  // namespace

AttentionWork ragged_attention_work(const RaggedBatch& batch, int64_t window, double window_layers, int64_t chunk,
                                    double chunk_layers) {
  AttentionWork w;
  for (const SequenceChunk& c : batch.sequences) {
    const double q = static_cast<double>(c.q_len), kv = static_cast<double>(c.kv_len);
    w.sequences += 1;
    w.query_tokens += q;
    w.key_tokens += kv;
    // New token i (0-based) sees the kv − q cached keys and the new ones up to itself: a + i
    // keys, a = kv − q + 1; under a window at most `window` of them.
    const double full = q * (kv - q) + q * (q + 1) / 2;
    double pairs = full, read = kv;
    if (window > 0) {
      const double a = kv - q + 1, cap = static_cast<double>(window);
      const double below = std::clamp(cap - a + 1, 0.0, q);  // tokens that see fewer than the window
      const double windowed = below * a + below * (below - 1) / 2 + (q - below) * cap;
      pairs = (1.0 - window_layers) * full + window_layers * windowed;
      read = (1.0 - window_layers) * kv + window_layers * std::min(kv, q - 1 + cap);
    } else if (chunk > 0) {
      // The new tokens sit at positions kv − q … kv − 1; the first one's chunk starts the keys read.
      const double size = static_cast<double>(chunk);
      const double chunked = chunked_pairs_before(kv, size) - chunked_pairs_before(kv - q, size);
      pairs = (1.0 - chunk_layers) * full + chunk_layers * chunked;
      read = (1.0 - chunk_layers) * kv + chunk_layers * (kv - std::floor((kv - q) / size) * size);
    }
    w.score_pairs += pairs;
    w.read_key_tokens += read;
  }
  if (w.sequences > 0) {
    w.s_q = w.query_tokens / w.sequences;
    w.s_kv = w.key_tokens / w.sequences;
  }
  return w;
}

double mla_cache_token_bytes(const ModelConfig& m, DType cache) {
  const double latent = static_cast<double>(m.mla->kv_lora_rank), rope = static_cast<double>(m.mla->qk_rope_head_dim);
  if (m.sparse_attention && cache == DType::kFp8) return latent + kFp32Bytes * std::ceil(latent / 128) + rope * kActivationBytes;
  return (latent + rope) * bytes_per_element(cache);
}

int64_t sampled_rows(const RaggedBatch& batch) {
  int64_t rows = 0;
  for (const SequenceChunk& c : batch.sequences) rows += c.samples ? 1 : 0;
  return rows;
}

std::string sharding_problem(const ModelConfig& m, const RaggedBatch& batch, const ShardingFactors& sh) {
  if (std::string p = m.problem(); !p.empty()) return p;
  if (batch.sequences.empty()) return "the batch has no sequence";
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceChunk& c = batch.sequences[i];
    if (c.q_len < 1 || c.kv_len < c.q_len) {
      return "sequence " + std::to_string(i) + ": " + std::to_string(c.q_len) + " new tokens with " +
             std::to_string(c.kv_len) + " in its context (need 1 <= new <= context)";
    }
  }
  if (sh.cp != 1) return "a serving batch has no context parallelism (cp=" + std::to_string(sh.cp) + ")";
  MicroBatch probe;  // the divisibility rules of the model's split are the same
  probe.sequence_length = 1;
  ShardingFactors split = sh;
  split.sp = false;
  return sharding_problem(m, probe, split);
}

Bytes saved_activation_bytes(const std::vector<ModelOperator>& ops, bool selective) {
  Bytes sum;
  for (const ModelOperator& op : ops) {
    sum += op.saved;
    if (!selective) sum += op.saved_scores;
  }
  return sum;
}

Flops model_flops_per_token(const ModelConfig& m, int64_t sequence_length, bool causal) {
  const double n = static_cast<double>(count_parameters(m).matmul_active);
  const double s = static_cast<double>(sequence_length);
  const double mask = causal ? 0.5 * causal_pairs_share(m, s) : 1.0;
  const double attention_per_layer = 6.0 * static_cast<double>(sequence_length) * m.heads *
                                     static_cast<double>(m.qk_head_dim() + m.v_head_dim()) * mask;
  double flops = 6.0 * n + m.attention_layer_count() * attention_per_layer;
  if (m.mamba) {
    // The chunked scan's products, forward and backward.
    const double scan = ssd_forward_flops_per_token(*m.mamba, m.mamba->heads, m.mamba->groups);
    flops += 3.0 * scan * static_cast<double>(std::count(m.hybrid_pattern.begin(), m.hybrid_pattern.end(), 'M'));
  }
  return Flops(flops);
}

}  // namespace parallax
