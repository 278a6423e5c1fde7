// What the compute sweeps of parallax-nccl-bench measure, and the JSON lines they write, kept
// apart from CUDA so that they can be tested on any machine: the GEMM shapes of transformer
// layers, the datasheet peaks the efficiency is taken against, and the memcpy sizes.
//
// GEMM shapes (m = tokens, FLOPs = 2·m·n·k·batch) per Llama-3 size — hidden h, MLP width f,
// query heads H and KV heads kv of head size d = 128 (8B: 4096, 14336, 32, 8; 70B: 8192, 28672,
// 64, 8; 405B: 16384, 53248, 128, 8) — and tokens t ∈ {2048, 4096, 8192, 16384}:
//   qkv       m=t n=3h          k=h   (fused Q, K, V projections of multi-head attention)
//   qkv_gqa   m=t n=(H+2·kv)·d  k=h   (grouped-query: 1.5h, 1.25h, 1.125h)
//   attn_out  m=t n=h           k=h
//   mlp_up    m=t n=2f          k=h   (gated MLP: up and gate projections fused)
//   mlp_down  m=t n=h           k=f
//   logits    m=t n=128256      k=h   (Llama-3 vocabulary)
// then squares 512…16384 (×2), then MoE experts as grouped GEMMs at small M: `batch` experts on one GPU, each with m tokens
// (a balanced routing: tokens·top-k / experts), run as one strided-batched product:
//   DeepSeek-V3-like (h 7168, expert width 2048, 8 experts per GPU at EP 32),
//     m ∈ {128, 256, 512, 1024}: moe_up n=4096 k=7168, moe_down n=7168 k=2048;
//   Mixtral-8x7B-like (h 4096, width 14336, 2 experts per GPU at EP 4),
//     m ∈ {1024, 2048, 4096}: moe_up n=28672 k=4096, moe_down n=4096 k=14336.
// A shape met twice keeps one entry with both labels.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/collective_sweep.h"

namespace parallax::harness {

struct GemmShape {
  std::string label;  ///< "h4096.qkv", "square", or both joined by '+'
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;  ///< products of m×n×k run as one (strided-batched) call
};

/// A GEMM sweep's variant of a dtype: fp8 is measured twice, with cuBLASLt's fast (split)
/// accumulation as TransformerEngine's forward GEMMs use it, and without, as its backward ones.
struct GemmVariant {
  std::string dtype;        ///< "bf16", "fp8"
  bool fast_accum = false;  ///< CUBLASLT_MATMUL_DESC_FAST_ACCUM
};

/// The variants of `dtypes`, in order: bf16 → {bf16}; fp8 → {fp8 fast, fp8 precise}.
std::vector<GemmVariant> gemm_variants(const std::vector<std::string>& dtypes);

/// The shapes above, transformer layers first (by hidden size, then tokens), then squares, then
/// MoE experts.
std::vector<GemmShape> gemm_shapes();

/// Dense datasheet peak in TFLOP/s for a GPU name (as cudaGetDeviceProperties reports it) and a
/// GEMM dtype ("bf16", "fp8"), or nullopt when the harness does not know it:
/// H100 SXM and H200 bf16 989 / fp8 1979; A100 bf16 312; B200 bf16 2250 / fp8 4500.
std::optional<double> peak_tflops(const std::string& gpu_name, const std::string& dtype);

/// Memcpy sizes: 1 MiB, 2 MiB, … up to `max_bytes` (×2).
std::vector<int64_t> memcpy_sizes(int64_t max_bytes);

/// A `kind: gemm` line (FORMAT.md); tflops = 2·m·n·k·batch / mean time; peak_tflops only when
/// known; batch and fast_accum written only when they differ from 1 and false.
nlohmann::ordered_json gemm_line(const std::string& run_id, const GemmVariant& variant, const GemmShape& shape,
                                 int warmup, int iters, const TimeStats& t, std::optional<double> peak);

/// A `kind: memcpy` line. gbs: for d2d, bytes read + bytes written (2 × size) / mean time, as
/// STREAM counts a copy inside one memory; for h2d and d2h, size / mean time, the bytes that
/// cross the link one way (nvbandwidth's convention).
nlohmann::ordered_json memcpy_line(const std::string& run_id, const std::string& what, int64_t size_bytes,
                                   int warmup, int iters, const TimeStats& t);

/// The identifying part of those lines (for resume look-ups before measuring).
nlohmann::json gemm_identity(const GemmVariant& variant, const GemmShape& shape);
nlohmann::json memcpy_identity(const std::string& what, int64_t size_bytes);

}  // namespace parallax::harness
