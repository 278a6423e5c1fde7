// A MoE router's work after its GEMM in training, as Megatron-Core runs it: the top-k selection
// with the model's score function, and the load-balancing loss with its own scores. Either as
// PyTorch ops, Megatron's default, or as Transformer Engine's fused kernels (moe_router_fusion).
// What each pass moves, in score matrices, and how many kernels it takes.
#pragma once

#include <optional>
#include <string>

#include "model/model_config.h"

namespace parallax {

/// Megatron's moe_router_load_balancing_type, with a coefficient above zero. The three losses
/// read the same scores and routing map, so they cost alike.
enum class LoadBalancingLoss : uint8_t { kNone, kAux, kSeqAux, kGlobalAux };
const char* to_string(LoadBalancingLoss l);
/// "none", "aux_loss", "seq_aux_loss" or "global_aux_loss".
std::optional<LoadBalancingLoss> load_balancing_loss_from(const std::string& name);

/// How a training recipe runs the router.
struct RouterRecipe {
  bool fused = false;  ///< Transformer Engine's fused top-k and aux-loss kernels
  LoadBalancingLoss loss = LoadBalancingLoss::kAux;
};

/// One pass: its HBM traffic in score matrices (tokens × experts × 4 bytes: the scores in fp32,
/// as moe_router_dtype fp32 keeps them), its kernel launches, and the host's dispatches: one per
/// routine (the top-k, the loss's scores, the loss), its small PyTorch ops folded in as t_dispatch
/// folds a module's small kernels into its operator (compute_model.h).
struct RouterPass {
  double score_matrices = 0;
  int kernels = 0;
  int dispatches = 0;
};
struct RouterPasses {
  RouterPass forward, backward;
};

/// The top-k selection: the scores, the chosen experts and their weights, written out as the
/// dense probabilities and routing map the dispatcher reads; its backward, the gradient of the
/// chosen weights back to the logits.
RouterPasses router_topk_passes(const MoeConfig& moe, bool fused);
/// The load-balancing loss: its own scores over every expert, their top-k as a routing map,
/// the tokens per expert and the loss; its backward, the loss's gradient added to the logits'.
/// Nothing without a loss.
RouterPasses router_loss_passes(const MoeConfig& moe, const RouterRecipe& recipe);

}  // namespace parallax
