// What the compute sweeps of parallax-nccl-bench measure, and the JSON lines they write, kept
// apart from CUDA so that they can be tested on any machine: the GEMM shapes of transformer
// layers, the datasheet peaks the efficiency is taken against, and the memcpy sizes.
//
// GEMM shapes (m = tokens, FLOPs = 2·m·n·k) per hidden size h with its Llama-3 MLP width f
// (4096→14336, 8192→28672, 16384→53248) and tokens t ∈ {2048, 4096, 8192, 16384}:
//   qkv       m=t n=3h      k=h   (fused Q, K, V projections; multi-head, no GQA saving)
//   attn_out  m=t n=h       k=h
//   mlp_up    m=t n=2f      k=h   (gated MLP: up and gate projections fused)
//   mlp_down  m=t n=h       k=f
//   logits    m=t n=128256  k=h   (Llama-3 vocabulary)
// plus squares 512…16384 (×2). A shape met twice keeps one entry with both labels.
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
};

/// The shapes above, transformer layers first (by hidden size, then tokens), then squares.
std::vector<GemmShape> gemm_shapes();

/// Dense datasheet peak in TFLOP/s for a GPU name (as cudaGetDeviceProperties reports it) and a
/// GEMM dtype ("bf16", "fp8"), or nullopt when the harness does not know it:
/// H100 SXM and H200 bf16 989 / fp8 1979; A100 bf16 312; B200 bf16 2250 / fp8 4500.
std::optional<double> peak_tflops(const std::string& gpu_name, const std::string& dtype);

/// Memcpy sizes: 1 MiB, 2 MiB, … up to `max_bytes` (×2).
std::vector<int64_t> memcpy_sizes(int64_t max_bytes);

/// A `kind: gemm` line (FORMAT.md); tflops = 2mnk / mean time; peak_tflops only when known.
nlohmann::ordered_json gemm_line(const std::string& run_id, const std::string& dtype, const GemmShape& shape,
                                 int warmup, int iters, const TimeStats& t, std::optional<double> peak);

/// A `kind: memcpy` line; gbs = bytes read + bytes written (2 × size) / mean time, as STREAM
/// counts a copy.
nlohmann::ordered_json memcpy_line(const std::string& run_id, const std::string& what, int64_t size_bytes,
                                   int warmup, int iters, const TimeStats& t);

/// The identifying part of those lines (for resume look-ups before measuring).
nlohmann::json gemm_identity(const std::string& dtype, const GemmShape& shape);
nlohmann::json memcpy_identity(const std::string& what, int64_t size_bytes);

}  // namespace parallax::harness
