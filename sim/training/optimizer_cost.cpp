#include "training/optimizer_cost.h"

#include <algorithm>

#include "model/parameter_count.h"

namespace parallax {

std::vector<GemmShape> muon_orthogonalisation_gemms(const ModelConfig& model, int layer, const ParallelLayout& layout) {
  std::vector<GemmShape> gemms;
  if (layout.optimizer != OptimizerKind::kMuon) return gemms;
  // The layer-wise distributed optimizer (ZeRO-1) gives each data-parallel rank whole matrices
  // to update; without it (ZeRO-0) every rank updates all it holds: every dense matrix, and its
  // EP rank's experts.
  const bool sharded = layout.zero_stage != ZeroStage::kStage0;
  const double dense_share = sharded ? 1.0 / (static_cast<double>(layout.dp) * layout.cp) : 1.0;
  const double expert_share = 1.0 / (static_cast<double>(layout.ep) * (sharded ? layout.expert_data_parallel() : 1));
  for (const WeightMatrix& w : layer_weight_matrices(model, layer)) {
    const double m = static_cast<double>(std::min(w.rows, w.cols));
    const double n = static_cast<double>(std::max(w.rows, w.cols));
    const double matrices = static_cast<double>(w.count) * (w.routed_expert ? expert_share : dense_share);
    for (int step = 0; step < kMuonNewtonSchulzSteps; ++step) {
      // A = X·Xᵀ (m × m over n), A·A (m × m over m), then (bA + cA²)·X (m × n over m).
      gemms.push_back(GemmShape{m, m, n, matrices});
      gemms.push_back(GemmShape{m, m, m, matrices});
      gemms.push_back(GemmShape{m, n, m, matrices});
    }
  }
  return gemms;
}

Time muon_orthogonalisation_time(const ModelConfig& model, int layer, const ParallelLayout& layout, const ComputeModel& cm) {
  Time total;
  for (const GemmShape& g : muon_orthogonalisation_gemms(model, layer, layout)) total += cm.time(gemm_cost(g, DType::kBf16));
  return total;
}

}  // namespace parallax
