// The optimizer step's compute beyond moving its state: Muon's orthogonalisation of each weight
// matrix's momentum, as Megatron-Core's TensorParallelMuon runs it (megatron/core/optimizer/
// muon.py at d7288711, through Emerging-Optimizers' newton_schulz_tp): 5 quintic Newton–Schulz
// steps, X ← aX + (bA + cA²)X with A = XXᵀ on the matrix turned so that its rows are the fewer
// (m ≤ n): 4m²n + 2m³ FLOPs a step, in fp32 matmuls at PyTorch's "medium" precision, which run
// on the bf16 tensor cores. Tensor-parallel shards are gathered and each TP rank orthogonalises
// the whole matrix (its default "duplicated" mode); the layer-wise distributed optimizer gives
// each data-parallel rank whole matrices, a 1/dp share of the dense ones and a 1/expert-dp share
// of its EP rank's experts.
#pragma once

#include <vector>

#include "compute/compute_model.h"
#include "model/model_config.h"
#include "training/parallel_layout.h"
#include "units/units.h"

namespace parallax {

/// Muon's Newton–Schulz steps a momentum goes through.
inline constexpr int kMuonNewtonSchulzSteps = 5;

/// The GEMMs one rank runs to orthogonalise its share of layer `layer`'s weight matrices in an
/// optimizer step, each step's three as kernels over the rank's matrices of one shape (`batch`
/// the share, possibly fractional); none unless the layout runs Muon.
std::vector<GemmShape> muon_orthogonalisation_gemms(const ModelConfig& model, int layer, const ParallelLayout& layout);
/// Their time, in bf16.
Time muon_orthogonalisation_time(const ModelConfig& model, int layer, const ParallelLayout& layout, const ComputeModel& cm);

}  // namespace parallax
