#include "compute/gemm_efficiency.h"

#include <cstdio>
#include <stdexcept>

namespace parallax {

FlopRate peak_rate(const GpuSpec& gpu, DType dtype) {
  switch (dtype) {
    case DType::kFp32: return gpu.fp32;
    case DType::kTf32: return gpu.tf32.value() > 0 ? gpu.tf32 : gpu.fp32;
    case DType::kBf16: return gpu.bf16;
    case DType::kFp16: return gpu.fp16.value() > 0 ? gpu.fp16 : gpu.bf16;
    case DType::kFp8: return gpu.fp8.value() > 0 ? gpu.fp8 : gpu.bf16;
    case DType::kFp4: return gpu.fp4;  // no fallback: without FP4 tensor cores there is no fp4 GEMM
  }
  return gpu.bf16;
}

double shape_efficiency(double fraction, const GemmShape& shape, const ShapeEfficiencyParams& params) {
  const double volume = shape.volume();
  const double d = shape.min_dim();
  if (!(volume > 0) || !(d > 0)) return 0.0;
  const double utilisation = d / (d + params.half_min_dim);
  return fraction * utilisation / (1.0 + utilisation * params.half_volume / volume);
}

ShapeEfficiency::ShapeEfficiency(ShapeEfficiencyParams params) : params_(params) {
  if (!(params_.peak_fraction > 0 && params_.peak_fraction <= 1)) {
    throw std::invalid_argument("ShapeEfficiency: peak_fraction must be in (0, 1]");
  }
  if (!(params_.half_volume >= 0) || !(params_.half_min_dim >= 0)) {
    throw std::invalid_argument("ShapeEfficiency: half-saturation constants must be >= 0");
  }
}

std::optional<FlopRate> GemmEfficiency::attention_rate(const OperatorCost&, const GpuSpec&) const { return std::nullopt; }

double ShapeEfficiency::efficiency(const GemmShape& shape) const {
  return shape_efficiency(params_.peak_fraction, shape, params_);
}

double ShapeEfficiency::peak_fraction(DType dtype, const GpuSpec& gpu) const {
  FlopRate measured;
  if (dtype == DType::kBf16 || dtype == DType::kFp16) measured = gpu.achievable_bf16;
  if (dtype == DType::kFp8 && gpu.fp8.value() > 0) measured = gpu.achievable_fp8;
  if (dtype == DType::kFp4) measured = gpu.achievable_fp4;
  const FlopRate peak = peak_rate(gpu, dtype);
  const double fraction = measured.value() > 0 && peak.value() > 0 ? measured.value() / peak.value() : params_.peak_fraction;
  return dtype == DType::kFp8 && gpu.architecture == "hopper" ? fraction * kHopperFp8TrainingBlend : fraction;
}

FlopRate ShapeEfficiency::achieved_rate(const GemmShape& shape, DType dtype, const GpuSpec& gpu) const {
  return peak_rate(gpu, dtype) * shape_efficiency(peak_fraction(dtype, gpu), shape, params_);
}

std::string ShapeEfficiency::describe() const {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "shape model: F x peak x u/(1+u*%.3g/W), u=d/(d+%.3g), F the GPU's measured matmul ceiling over its "
                "peak (else %.3g)",
                params_.half_volume, params_.half_min_dim, params_.peak_fraction);
  return buf;
}

}  // namespace parallax
