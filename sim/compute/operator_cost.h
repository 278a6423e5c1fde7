// The vocabulary of operator costs: data types, operator kinds, GEMM shapes and the
// device-independent cost of one operator (its FLOPs, the bytes it moves to and from device
// memory, and the shape the efficiency model looks at). Who produces these (the training and
// serving layers) knows the model; who times them (ComputeModel) knows the device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

#include "units/units.h"

namespace parallax {

/// Element type of an operator's inputs (tensor-core path for GEMMs).
enum class DType : uint8_t { kFp32, kTf32, kBf16, kFp16, kFp8, kFp4 };

/// "fp32", "tf32", "bf16", "fp16", "fp8", "fp4".
const char* to_string(DType d);
/// Parses the names of to_string(DType); nullopt for anything else.
std::optional<DType> dtype_from_string(std::string_view s);
/// Bytes per element in memory: 4 for fp32 and tf32 (tf32 is stored as fp32), 2, 2, 1, and for
/// fp4 half a byte plus NVFP4's E4M3 scale per 16 elements: 0.5625.
double bytes_per_element(DType d);
/// The type activations are kept in between kernels when GEMMs run in `gemm_dtype`: fp8 and
/// fp4 GEMMs (Transformer Engine, TensorRT-LLM, vLLM W8A8) read quantised inputs and weights but
/// write bf16, and the attention core, the norms, the activations and the collectives work on
/// bf16; any other type is its own activation type.
DType activation_dtype(DType gemm_dtype);
/// fp8 or fp4: GEMM inputs quantised from 16-bit tensors by kernels of their own.
bool is_quantised(DType d);

/// How an fp8 training recipe scales its tensors (Transformer Engine's recipes): kDelayed,
/// per-tensor scales from the amax history of earlier steps (DelayedScaling); kCurrent,
/// per-tensor scales from the tensor itself, an amax pass before the cast
/// (Float8CurrentScaling); kMxfp8, one E8M0 scale per 32 elements computed in the cast
/// (MXFP8BlockScaling, Blackwell).
enum class Fp8Recipe : uint8_t { kDelayed, kCurrent, kMxfp8 };
/// "delayed", "current", "mxfp8".
const char* to_string(Fp8Recipe r);
std::optional<Fp8Recipe> fp8_recipe_from_string(std::string_view s);
/// HBM bytes per element of quantising a 16-bit GEMM operand for training, both of its fp8
/// copies written (the row-wise one this GEMM reads and the transposed or column-wise one the
/// backward's other GEMM reads): delayed 2 read + 1 + 1 written = 4; current scaling reads the
/// tensor once more for its amax: 6; MXFP8 writes a scale byte per 32 elements of each copy:
/// 4 + 2/32.
double fp8_cast_bytes_per_element(Fp8Recipe r);

/// How an fp4 training recipe quantises its tensors to E2M1: kNvfp4, Transformer Engine's
/// NVFP4BlockScaling (an E4M3 scale per 16 elements and an fp32 scale per tensor from its amax;
/// 16×16 blocks for weights, random Hadamard transforms on the weight-gradient GEMM's inputs,
/// stochastic rounding of gradients; fprop, dgrad and wgrad all in fp4); kMxfp4, OCP MXFP4 (an
/// E8M0 scale per 32 elements, no per-tensor scale).
enum class Fp4Recipe : uint8_t { kNvfp4, kMxfp4 };
/// "nvfp4", "mxfp4".
const char* to_string(Fp4Recipe r);
std::optional<Fp4Recipe> fp4_recipe_from_string(std::string_view s);
/// HBM bytes per element of quantising a 16-bit GEMM operand for fp4 training, both copies
/// written (the row-wise one for this GEMM, the column-wise one, Hadamard-transformed under
/// NVFP4, for the weight gradient): NVFP4 reads the tensor for its amax, then again for the
/// cast, and writes two copies of 0.5 + 1/16 bytes: 2 + 2 + 2·0.5625 = 5.125; MXFP4 needs no
/// amax pass: 2 + 2·(0.5 + 1/32) = 3.0625.
double fp4_cast_bytes_per_element(Fp4Recipe r);
/// What training with `dtype` GEMMs does to a 16-bit GEMM operand under the recipe of that type:
/// the HBM bytes per element of the kernel that quantises it (fp8/fp4_cast_bytes_per_element),
/// and the bytes per element of the quantised copy the GEMM keeps for the weight gradient in
/// place of the 16-bit input (Transformer Engine's modules save their quantised inputs: fp8 1,
/// MXFP8 1 + 1/32, NVFP4 0.5 + 1/16, MXFP4 0.5 + 1/32). nullopt for a GEMM that reads its inputs
/// as they are.
struct QuantisedOperands {
  double cast_bytes_per_element = 0;
  double stored_bytes_per_element = 0;
};
std::optional<QuantisedOperands> training_quantisation(DType dtype, Fp8Recipe fp8, Fp4Recipe fp4);

/// What bounds an operator and which efficiency applies to it.
enum class OperatorKind : uint8_t {
  kGemm,         ///< a (possibly grouped) matrix product on tensor cores
  kAttention,    ///< a fused FlashAttention-style kernel
  kMemoryBound,  ///< elementwise, normalisation, reductions, copies
};
const char* to_string(OperatorKind k);

/// C[m×n] = A[m×k]·B[k×n], repeated `batch` times in one kernel (a batched or grouped GEMM).
/// Dimensions are doubles because a grouped expert GEMM's rows per group are an average
/// (routed tokens ÷ local experts) that need not be whole.
struct GemmShape {
  double m = 0;
  double n = 0;
  double k = 0;
  double batch = 1;

  /// m·n·k·batch: the multiply-accumulates of the whole kernel.
  double volume() const { return m * n * k * batch; }
  /// 2·m·n·k·batch (a multiply-accumulate is two FLOPs).
  Flops flops() const { return Flops(2.0 * volume()); }
  /// The smallest of m, n, k: what a tensor-core tile wastes on a skinny product.
  double min_dim() const;
};

/// The cost of one operator on one device, independent of the device.
struct OperatorCost {
  Flops flops;
  /// Bytes read from plus bytes written to device memory (HBM), assuming every operand is
  /// read once and every result written once (no cache reuse across kernels).
  Bytes bytes_read_written;
  OperatorKind kind = OperatorKind::kMemoryBound;
  /// For kGemm and kAttention: the shape that sets the achieved efficiency (for attention, the
  /// per-head Q·Kᵀ product: m = query tokens, n = key tokens, k = head dim, batch = b·heads).
  /// With several kernels (a GEMM's backward: data and weight gradients) it is the shape of
  /// each, and `flops` the sum over all of them.
  GemmShape shape;
  DType dtype = DType::kBf16;
  /// Kernel launches the operator takes; each pays the model's launch overhead.
  int kernels = 1;
  /// Of those, how many the host issues one by one only after it has read their shapes back
  /// from the GPU (a grouped MLP's per-expert GEMMs whose row counts the router computed on
  /// the device): the operator then takes at least that many host issue times
  /// (ComputeModelOptions::host_gemm_issue), whatever the GPU's speed.
  int host_issued_kernels = 0;
  /// Whether the host reads those shapes back from the GPU before it issues them (a device
  /// synchronisation); false where it knows them beforehand (experts padded to a fixed capacity),
  /// and issues them as it issues any kernel, ahead of the GPU.
  bool host_reads_back = true;
  /// The host's dispatches (t_dispatch each, compute_model.h) where they are fewer than its
  /// kernels: a run of small PyTorch ops folded into the routine that issues them, as t_dispatch
  /// was fitted with a module's small kernels folded into its operator. -1: one per kernel that
  /// is not host-issued.
  int host_dispatches = -1;
  /// Its kernels are replayed from a CUDA graph: the host issues them without its per-kernel
  /// dispatch (ComputeModelOptions::host_dispatch).
  bool graph_replayed = false;
  /// The GEMMs the host issues one by one: none when a graph replays them, which it can only
  /// where their shapes are fixed (host_reads_back false: padded experts).
  int host_issued() const { return graph_replayed && !host_reads_back ? 0 : std::max(0, host_issued_kernels); }
  /// For kAttention: a kernel written for Ampere's warp-level mma.sync (FlashAttention-2), which
  /// on GPUs with asynchronous tensor cores reaches only part of their peak (compute_model.h).
  bool warp_mma_only = false;
  /// The backward pass of its operator (a measured attention table has a rate per pass).
  bool backward_pass = false;
  /// For kAttention: the keys each query row is scored against in one of its kernels, on average
  /// (s/2 for a causal sequence of s, about w under a sliding window of w, over cp for ring
  /// attention's blockwise kernels), and the kernel's FLOPs per exponential
  /// (one a query-key pair: 2·(d_qk + d_v) forward, 2.5 times that backward). Zero: not given,
  /// and the compute model's older closed form applies (compute_model.h).
  double keys_per_query = 0;
  double flops_per_exponential = 0;
  /// For kernels bound by the latency of their loads rather than by HBM (too few bytes in
  /// flight per SM to fill the memory system): the bytes per second one SM moves. Their
  /// traffic then moves at most at SMs × this, on GPUs whose SM count is known (compute_model.h).
  /// Zero: HBM-bound only.
  Bandwidth per_sm_bandwidth;
};

/// A GEMM of `shape`: FLOPs 2·m·n·k·batch, bytes ((m·k + k·n)·element size + m·n·output
/// element size)·batch, the output in activation_dtype(dtype) (the quantisation of the input is
/// fused into the kernel before it, as TensorRT-LLM and Transformer Engine do).
OperatorCost gemm_cost(const GemmShape& shape, DType dtype);
/// A memory-bound kernel moving `bytes` and doing `flops` on the vector units.
OperatorCost memory_bound_cost(Bytes bytes, Flops flops = Flops(0), DType dtype = DType::kBf16);

}  // namespace parallax
