// How fast a GEMM of a given shape runs on a GPU: the achieved-efficiency model.
//
// The default, ShapeEfficiency, is a closed form of the shape. A product runs at a fraction
// F·u of the datasheet dense peak, u being the tile utilisation of its smallest dimension, and
// pays on top a fixed cost worth W½ multiply-accumulates at the full rate (tile prologue and
// epilogue, the last partial wave):
//
//   time = 2W / (peak · F · u) + 2W½ / (peak · F)
//   efficiency = 2W / (peak · time) = F · u / (1 + u · W½ / W)
//   W = m·n·k·batch (multiply-accumulates of the kernel), u = d / (d + d½), d = min(m, n, k)
//   achieved FLOP/s = peak(dtype) · efficiency
//
// - F, the fraction of the datasheet dense peak that cuBLASLt reaches on a large product: the
//   GPU's measured maximum achievable matmul FLOPS over its peak where the topology's GPU spec
//   gives it (`achievable_matmul`; the bundled presets take Bekman's table, "Machine Learning
//   Engineering", compute/accelerator: bf16 A100 SXM 271.2 of 312, 86.9 %; H100 SXM 794.5 of
//   989, 80.3 %; B200 1745 of 2250, 77.6 %; GB200 1822 of 2500, 72.9 %; fp8 H100 70.9 %, B200
//   76.3 %, GB200 72.3 %), else 0.80, the Hopper bf16 figure. The datasheets put GB200 11 %
//   above B200; the table, 4 % (1,822 against 1,745 TFLOP/s bf16). A measured table of shapes
//   (MeasuredGemmTable) replaces the whole form for a real cluster.
// - W½ = 2³⁰ (a 1024³ product, 2.7 µs at 0.8 × 989 TFLOP/s). A 1024³ bf16 GEMM has 64 output
//   tiles of 128×128 for 132 SMs, under half a wave, and measures at roughly half the
//   large-GEMM rate; the form gives 0.49 of F there, 0.977 at 4096³ and 0.994 at 8192³.
// - d½ = 32. Tensor-core tiles are 64–256 wide; a dimension of 32 leaves about half of each
//   tile idle (u = 0.5), one of 128 a fifth (0.8), one of 8192 almost none (0.996). Because the
//   fixed cost is not scaled by u, a skinny product (decode GEMMs, small expert groups) keeps
//   a compute rate well above what its bytes allow, and the roofline in ComputeModel finds it
//   memory-bound, as it is on real GPUs.
// Together: 8192³ bf16 on a 989.4 TFLOP/s H100 → 0.80 · 0.99611 / (1 + 0.99611 · 2⁻⁹) = 0.7953,
// 786.9 TFLOP/s.
//
// fp8 on Hopper: the measured ceilings (Bekman's table: torch._scaled_mm, whose use_fast_accum
// defaults to False) accumulate with periodic promotion to fp32. Transformer Engine's
// tensor-scaled recipes (delayed and current scaling) run the forward GEMM with cuBLASLt's fast
// accumulation (recipe fp8_gemm_fprop use_split_accumulator=False, dgrad and wgrad True;
// transformer_engine/common/recipe/__init__.py, pytorch/module/base.py _2X_ACC_*), which Hopper
// runs g = 1.08 times faster: torch._scaled_mm on one H100 at 2048³, 1.538 against 1.420 times
// bf16 with and without (V. Kuzo, gist 2f09182b of 2024-08-13); FBGEMM's fast-accumulating
// row-wise fp8 GEMM at 8192³ is 1.92 times bf16 on a 500 W H100 (pytorch/FBGEMM#2546), against
// the 1.77 of the two ceilings (1.085). As the measured table does (MeasuredGemmTable), every
// fp8 GEMM on Hopper takes the rate of a training step's three: 3 / (1/g + 2) = 1.0256 times the
// ceiling. Blackwell has no such mode (its tensor cores accumulate in fp32 throughout).
//
// A grouped GEMM (batch > 1) fills the GPU with all its groups at once, so W counts every
// group, while d is the per-group minimum.
#pragma once

#include <optional>
#include <string>

#include "compute/operator_cost.h"
#include "topology/topology.h"

namespace parallax {

/// The datasheet dense peak of `gpu` for `dtype`. A type the GPU has no tensor-core figure for
/// falls back: tf32 → fp32, fp8 → bf16 (the kernel would run on that path instead).
FlopRate peak_rate(const GpuSpec& gpu, DType dtype);

/// The achieved rate of GEMMs by shape; implementations are immutable and thread-safe.
class GemmEfficiency {
 public:
  virtual ~GemmEfficiency() = default;
  /// Achieved FLOP/s of one GEMM kernel of `shape` in `dtype` on `gpu` (> 0).
  virtual FlopRate achieved_rate(const GemmShape& shape, DType dtype, const GpuSpec& gpu) const = 0;
  /// One line naming the model and its constants or data source, for reports.
  virtual std::string describe() const = 0;
  /// A measured rate for the attention core `op` (kAttention) on `gpu`, where the kernel rates
  /// come from a measurement file that has one (MeasuredGemmTable); nullopt: the compute
  /// model's closed form.
  virtual std::optional<FlopRate> attention_rate(const OperatorCost& op, const GpuSpec& gpu) const;
};

/// g of the header: Hopper's fp8 GEMM with fast accumulation over one without.
inline constexpr double kHopperFastAccumulationGain = 1.08;
/// A training step's fp8 rate on Hopper over the ceiling measured without fast accumulation:
/// one forward GEMM with it, two backward without (header).
inline constexpr double kHopperFp8TrainingBlend = 3.0 / (1.0 / kHopperFastAccumulationGain + 2.0);

/// The constants of the closed form above.
struct ShapeEfficiencyParams {
  double peak_fraction = 0.80;
  double half_volume = 1073741824.0;  ///< W½ = 2³⁰ multiply-accumulates
  double half_min_dim = 32.0;         ///< d½
};

/// F · u / (1 + u · W½ / W) for `shape` with peak fraction F = `fraction`: the closed form of the
/// file header, shared with the attention model (which has its own F).
double shape_efficiency(double fraction, const GemmShape& shape, const ShapeEfficiencyParams& params);

/// The closed-form efficiency of the file header.
class ShapeEfficiency : public GemmEfficiency {
 public:
  explicit ShapeEfficiency(ShapeEfficiencyParams params = {});
  /// The fraction of the dense peak reached by `shape`, in (0, peak_fraction).
  double efficiency(const GemmShape& shape) const;
  /// F for `dtype` on `gpu`: its measured matmul ceiling over its peak where the GPU spec has
  /// one (bf16 and fp16 from the bf16 measurement, fp8 from the fp8 one), else the default;
  /// fp8 on Hopper times kHopperFp8TrainingBlend (header).
  double peak_fraction(DType dtype, const GpuSpec& gpu) const;
  FlopRate achieved_rate(const GemmShape& shape, DType dtype, const GpuSpec& gpu) const override;
  std::string describe() const override;
  const ShapeEfficiencyParams& params() const { return params_; }

 private:
  ShapeEfficiencyParams params_;
};

}  // namespace parallax
