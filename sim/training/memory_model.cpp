#include "training/memory_model.h"

#include <stdexcept>

namespace parallax {

Bytes zero_model_state_bytes(double psi, ZeroStage stage, int n, double k) {
  if (n < 1) throw std::invalid_argument("zero_model_state_bytes: data_parallel must be at least 1");
  if (!(psi >= 0) || !(k >= 0)) throw std::invalid_argument("zero_model_state_bytes: negative size");
  const double dp = n;
  switch (stage) {
    case ZeroStage::kStage0: return Bytes((2 + 2 + k) * psi);
    case ZeroStage::kStage1: return Bytes((2 + 2 + k / dp) * psi);
    case ZeroStage::kStage2: return Bytes((2 + (2 + k) / dp) * psi);
    case ZeroStage::kStage3: return Bytes((2 + 2 + k) * psi / dp);
  }
  return Bytes((2 + 2 + k) * psi);
}

const char* to_string(Recomputation r) {
  switch (r) {
    case Recomputation::kNone: return "none";
    case Recomputation::kSelective: return "selective";
    case Recomputation::kFull: return "full";
    case Recomputation::kSelectiveOp: return "selective_op";
  }
  return "none";
}

std::optional<Recomputation> recomputation_from(const std::string& name) {
  for (Recomputation r :
       {Recomputation::kNone, Recomputation::kSelective, Recomputation::kFull, Recomputation::kSelectiveOp}) {
    if (name == to_string(r)) return r;
  }
  return std::nullopt;
}

Bytes activation_bytes_per_layer(double s, double b, double h, double a, int t, bool sp, Recomputation r) {
  if (!(s > 0 && b > 0 && h > 0 && a > 0) || t < 1) {
    throw std::invalid_argument("activation_bytes_per_layer: sizes and t must be positive");
  }
  const double sbh = s * b * h;
  const double tp = t;
  const double scores = 5.0 * a * s / h;  // the as²b terms over sbh
  switch (r) {
    case Recomputation::kFull: return Bytes(2.0 * sbh);
    case Recomputation::kSelective: return Bytes(sp ? sbh * 34.0 / tp : sbh * (10.0 + 24.0 / tp));
    case Recomputation::kNone:
      return Bytes(sp ? sbh * (34.0 + scores) / tp : sbh * (10.0 + 24.0 / tp + scores / tp));
    case Recomputation::kSelectiveOp:
      throw std::invalid_argument("activation_bytes_per_layer: Korthikanti's forms do not cover op-level checkpointing");
  }
  return Bytes(sbh * (34.0 + scores));
}

Bytes flash_activation_bytes_per_layer(double s, double b, double h, double a, int t, bool sp, Recomputation r) {
  if (r == Recomputation::kFull || r == Recomputation::kSelectiveOp) return activation_bytes_per_layer(s, b, h, a, t, sp, r);
  const double statistics = 4.0 * a * s * b / t;
  return activation_bytes_per_layer(s, b, h, a, t, sp, Recomputation::kSelective) + Bytes(statistics);
}

}  // namespace parallax
