// The time of one operator on one GPU: a roofline with achieved efficiencies, plus a fixed
// launch overhead per kernel.
//
//   t = max(FLOPs / (peak(dtype) · η_compute),  bytes / (B_HBM · η_memory))  +  kernels · t_launch
//
// η_compute depends on the operator kind:
// - GEMM: the GemmEfficiency model (closed-form by shape, or a measured table);
// - attention: ShapeEfficiency's closed form with F = η_attention, on the per-head Q·Kᵀ shape
//   (W and d) and with ShapeEfficiency's default constants. η_attention = 0.55 by default:
//   FlashAttention-2 reaches 50–73 % of A100's dense peak forward and less backward (Dao 2023),
//   FlashAttention-3 up to 75 % of H100's bf16 peak forward (Shah et al. 2024), and backward
//   kernels sit well below their forward; 0.55 stands for a forward+backward mix on Hopper.
//   That is the GPU's own fused attention (FlashAttention-2 on Ampere, FlashAttention-3 or
//   cuDNN on Hopper and Blackwell). FlashAttention-2 itself (OperatorCost::warp_mma_only) uses
//   Ampere's warp-level mma.sync and neither wgmma nor TMA, so on GPUs with asynchronous tensor
//   cores it reaches ρ = (335 / 989.4) / (225 / 312) = 0.470 of the share it reaches on A100:
//   Dao 2023 (FlashAttention-2, arXiv:2307.08691) measures the same kernels at up to 225
//   TFLOP/s forward+backward on A100 (312 peak) and up to 335 on H100 SXM (989.4 peak).
// - memory-bound: the fp32 vector peak (such kernels are limited by bytes; the FLOP term only
//   matters for an unusually arithmetic-heavy elementwise kernel).
// η_memory = 0.90: copy benchmarks on H100/H200 reach about 90 % of the datasheet HBM bandwidth
// (e.g. ~3.0 of 3.35 TB/s on H100 SXM). t_launch = 2 µs: the usual gap between dependent kernels
// on one stream without CUDA graphs is a few microseconds; calibrate it for a given software stack.
// The roofline assumes compute and memory traffic overlap perfectly inside a kernel and that
// nothing else runs on the GPU; contention with communication kernels is the caller's business.
//
// σ, the sustained fraction: every kernel runs at σ times the speed above, which is what a
// kernel reaches alone in a benchmark. Inside a training step kernels lose speed to what no
// per-kernel benchmark shows: clocks held down by the power limit on real (not constant) data,
// caches and TLBs shared with their neighbours, the framework's small kernels, copies and
// synchronisations between the modelled ones. σ = 0.74 is fitted once, not per run, to the
// published runs of workloads/validation/dev-runs.json (A100, 2021–2024, Megatron-LM, DeepSpeed
// and PyTorch FSDP), with each GPU's GEMMs at its own measured matmul ceiling
// (gemm_efficiency.h): fitted on any two of its three sources it is 0.73–0.75, and the third
// source's error falls with it; the H100 and Blackwell runs outside that set were not used
// (docs/performance-and-accuracy.md, the sustained fraction). σ = 1 gives the stand-alone
// kernel model; a cluster's own measured iteration gives the figure for its software stack
// (fit_sustained_fraction in training/iteration.h, `parallax train --measured-step`).
#pragma once

#include <memory>

#include "compute/gemm_efficiency.h"
#include "compute/operator_cost.h"
#include "topology/topology.h"

namespace parallax {

struct ComputeModelOptions {
  double memory_efficiency = 0.90;     ///< η_memory, in (0, 1]
  double attention_efficiency = 0.55;  ///< η_attention, in (0, 1]
  Time kernel_launch_overhead = Time::us(2);
  double sustained_fraction = 0.74;    ///< σ, in (0, 1]
};

/// Where an operator's time went.
struct OperatorTiming {
  Time total;     ///< max(compute, memory) + launch
  Time compute;   ///< FLOPs at the achieved rate, σ included
  Time memory;    ///< bytes at the achievable HBM bandwidth, σ included
  Time launch;    ///< kernels × launch overhead
  FlopRate rate;  ///< the achieved compute rate used (stand-alone, before σ)
  bool memory_bound() const { return memory > compute; }
};

/// ρ of the header: FlashAttention-2's share of the peak on a GPU with asynchronous tensor cores
/// over its share on A100 (Dao 2023's measured maxima, forward+backward).
inline constexpr double kWarpMmaAttentionShare = (335.0 / 989.4) / (225.0 / 312.0);

class ComputeModel {
 public:
  /// `gemm` null means ShapeEfficiency{}. Throws std::invalid_argument when an efficiency is
  /// outside (0, 1], the launch overhead is negative, or the GPU has no bf16 peak or no HBM
  /// bandwidth.
  explicit ComputeModel(GpuSpec gpu, ComputeModelOptions options = {},
                        std::shared_ptr<const GemmEfficiency> gemm = nullptr);

  /// The operator's time on this GPU.
  Time time(const OperatorCost& op) const { return timing(op).total; }
  OperatorTiming timing(const OperatorCost& op) const;
  /// The compute rate an operator achieves alone (before the memory bound and σ).
  FlopRate compute_rate(const OperatorCost& op) const;
  /// The achievable HBM bandwidth alone, B_HBM · η_memory (before σ).
  Bandwidth memory_bandwidth() const;

  const GpuSpec& gpu() const { return gpu_; }
  const ComputeModelOptions& options() const { return options_; }
  const GemmEfficiency& gemm_efficiency() const { return *gemm_; }

 private:
  GpuSpec gpu_;
  ComputeModelOptions options_;
  std::shared_ptr<const GemmEfficiency> gemm_;
  ShapeEfficiencyParams attention_shape_;  // only its half-saturation constants are used
};

}  // namespace parallax
