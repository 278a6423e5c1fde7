#include "compute/operator_cost.h"

#include <algorithm>

namespace parallax {
namespace {
constexpr double kNvfp4Bytes = 0.5 + 1.0 / 16.0;  // E2M1 values and an E4M3 scale per 16
constexpr double kMxfp4Bytes = 0.5 + 1.0 / 32.0;  // E2M1 values and an E8M0 scale per 32
}  // namespace

const char* to_string(DType d) {
  switch (d) {
    case DType::kFp32: return "fp32";
    case DType::kTf32: return "tf32";
    case DType::kBf16: return "bf16";
    case DType::kFp16: return "fp16";
    case DType::kFp8: return "fp8";
    case DType::kFp4: return "fp4";
  }
  return "?";
}

std::optional<DType> dtype_from_string(std::string_view s) {
  for (DType d : {DType::kFp32, DType::kTf32, DType::kBf16, DType::kFp16, DType::kFp8, DType::kFp4}) {
    if (s == to_string(d)) return d;
  }
  return std::nullopt;
}

double bytes_per_element(DType d) {
  switch (d) {
    case DType::kFp32:
    case DType::kTf32: return 4.0;
    case DType::kBf16:
    case DType::kFp16: return 2.0;
    case DType::kFp8: return 1.0;
    case DType::kFp4: return kNvfp4Bytes;
  }
  return 2.0;
}

const char* to_string(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::kDelayed: return "delayed";
    case Fp8Recipe::kCurrent: return "current";
    case Fp8Recipe::kMxfp8: return "mxfp8";
  }
  return "?";
}

std::optional<Fp8Recipe> fp8_recipe_from_string(std::string_view s) {
  for (Fp8Recipe r : {Fp8Recipe::kDelayed, Fp8Recipe::kCurrent, Fp8Recipe::kMxfp8}) {
    if (s == to_string(r)) return r;
  }
  return std::nullopt;
}

double fp8_cast_bytes_per_element(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::kDelayed: return 2.0 + 1.0 + 1.0;
    case Fp8Recipe::kCurrent: return 2.0 + 2.0 + 1.0 + 1.0;
    case Fp8Recipe::kMxfp8: return 2.0 + 1.0 + 1.0 + 2.0 / 32.0;
  }
  return 0.0;
}

const char* to_string(Fp4Recipe r) {
  switch (r) {
    case Fp4Recipe::kNvfp4: return "nvfp4";
    case Fp4Recipe::kMxfp4: return "mxfp4";
  }
  return "?";
}

std::optional<Fp4Recipe> fp4_recipe_from_string(std::string_view s) {
  for (Fp4Recipe r : {Fp4Recipe::kNvfp4, Fp4Recipe::kMxfp4}) {
    if (s == to_string(r)) return r;
  }
  return std::nullopt;
}

double fp4_cast_bytes_per_element(Fp4Recipe r) {
  switch (r) {
    case Fp4Recipe::kNvfp4: return 2.0 + 2.0 + 2.0 * kNvfp4Bytes;
    case Fp4Recipe::kMxfp4: return 2.0 + 2.0 * kMxfp4Bytes;
  }
  return 0.0;
}

std::optional<QuantisedOperands> training_quantisation(DType dtype, Fp8Recipe fp8, Fp4Recipe fp4) {
  if (dtype == DType::kFp8) {
    return QuantisedOperands{fp8_cast_bytes_per_element(fp8), fp8 == Fp8Recipe::kMxfp8 ? 1.0 + 1.0 / 32.0 : 1.0};
  }
  if (dtype == DType::kFp4) {
    return QuantisedOperands{fp4_cast_bytes_per_element(fp4), fp4 == Fp4Recipe::kNvfp4 ? kNvfp4Bytes : kMxfp4Bytes};
  }
  return std::nullopt;
}

bool is_quantised(DType d) { return d == DType::kFp8 || d == DType::kFp4; }

DType activation_dtype(DType gemm_dtype) { return is_quantised(gemm_dtype) ? DType::kBf16 : gemm_dtype; }

const char* to_string(OperatorKind k) {
  switch (k) {
    case OperatorKind::kGemm: return "gemm";
    case OperatorKind::kAttention: return "attention";
    case OperatorKind::kMemoryBound: return "memory_bound";
  }
  return "?";
}

double GemmShape::min_dim() const { return std::min({m, n, k}); }

OperatorCost gemm_cost(const GemmShape& shape, DType dtype) {
  OperatorCost c;
  c.kind = OperatorKind::kGemm;
  c.shape = shape;
  c.dtype = dtype;
  c.flops = shape.flops();
  c.bytes_read_written = Bytes(((shape.m * shape.k + shape.k * shape.n) * bytes_per_element(dtype) +
                                 shape.m * shape.n * bytes_per_element(activation_dtype(dtype))) *
                                shape.batch);
  return c;
}

OperatorCost memory_bound_cost(Bytes bytes, Flops flops, DType dtype) {
  OperatorCost c;
  c.kind = OperatorKind::kMemoryBound;
  c.dtype = dtype;
  c.flops = flops;
  c.bytes_read_written = bytes;
  return c;
}

}  // namespace parallax
