// Counted from Megatron-LM d7288711 (the same in 0d8e0714 and 55ac70825): moe_utils.py
// topk_routing_with_score_function, group_limited_topk, compute_routing_scores_for_aux_loss and
// switch_load_balancing_loss_func, and router.py's routing. U is one score matrix (T × E × 4 B);
// a bool routing map is U/4. Passes over T × k (the chosen experts) are kernels with no traffic
// to speak of. PyTorch's out-of-place scatter copies its input first: a zeros_like then
// .scatter is three passes (write, read and write).
#include "model/router_cost.h"

namespace parallax {

namespace {

// The dense outputs the dispatcher reads: routing_probs, zeros_like(logits).scatter(probs):
// 3U in 3 kernels; routing_map, zeros_like(logits).int().scatter(1).bool(): zeros (1U), to int32
// (2U), the scatter's copy (2U), to bool (1.25U): 6.25U in 5.
constexpr RouterPass kDenseProbsAndMap{9.25, 8};
// A routing map alone (the aux loss's): 6.25U in 5 kernels, plus its top-k over the scores (1U).
constexpr RouterPass kTopkRoutingMap{7.25, 6};

RouterPass unfused_topk_forward(const MoeConfig& moe) {
  RouterPass p = kDenseProbsAndMap;
  p.dispatches = 1;
  if (moe.router_score == RouterScore::kSoftmax) {
    // topk(logits) then a softmax over the k chosen (the pre-softmax variant is not modelled).
    p.score_matrices += 1.0;
    p.kernels += 2;
    return p;
  }
  // sigmoid(logits) (2U), + expert_bias (2U), the top-k over them, a gather of the unbiased
  // scores (T × k), their normalisation (sum, add, divide over T × k).
  p.score_matrices += 2.0 + (moe.router_expert_bias ? 2.0 : 0.0);
  p.kernels += 1 + (moe.router_expert_bias ? 2 : 0) + 3;
  if (moe.router_group_topk > 0) {
    // group_limited_topk: each group's top scores (1U), their sums and the top groups (small),
    // a zero group mask and its scatter (small), the mask expanded to T × E (1U written), to
    // bool and inverted (1.25U + 0.5U), masked_fill (2.25U), the top-k (1U): 7U in 10 kernels.
    p.score_matrices += 7.0;
    p.kernels += 10;
  } else {
    p.score_matrices += 1.0;
    p.kernels += 1;
  }
  return p;
}

RouterPass unfused_topk_backward(const MoeConfig& moe) {
  // The gradient of the chosen weights gathered from routing_probs' (T × k), back through the
  // softmax or the normalisation (small), and scattered into a zero T × E gradient (1U, 2 kernels).
  if (moe.router_score == RouterScore::kSoftmax) return {.score_matrices = 1.0, .kernels = 4, .dispatches = 1};
  // Then the sigmoid's backward: its gradient and kept output read, the logits' written (3U).
  return {.score_matrices = 4.0, .kernels = 8, .dispatches = 1};
}

}  // namespace

const char* to_string(LoadBalancingLoss l) {
  switch (l) {
    case LoadBalancingLoss::kNone: return "none";
    case LoadBalancingLoss::kAux: return "aux_loss";
    case LoadBalancingLoss::kSeqAux: return "seq_aux_loss";
    case LoadBalancingLoss::kGlobalAux: return "global_aux_loss";
  }
  return "aux_loss";
}

std::optional<LoadBalancingLoss> load_balancing_loss_from(const std::string& name) {
  for (LoadBalancingLoss l : {LoadBalancingLoss::kNone, LoadBalancingLoss::kAux, LoadBalancingLoss::kSeqAux,
                              LoadBalancingLoss::kGlobalAux}) {
    if (name == to_string(l)) return l;
  }
  return std::nullopt;
}

RouterPasses router_topk_passes(const MoeConfig& moe, bool fused) {
  // Transformer Engine's fused_topk_with_score_function: the logits read, the dense
  // probabilities, the map and the scores kept for the backward written (3.25U); its backward
  // reads the gradient, the map and the kept scores and writes the logits' gradient (3.25U).
  if (fused) return {{3.25, 1, 1}, {3.25, 1, 1}};
  return {unfused_topk_forward(moe), unfused_topk_backward(moe)};
}

RouterPasses router_loss_passes(const MoeConfig& moe, const RouterRecipe& recipe) {
  if (recipe.loss == LoadBalancingLoss::kNone) return {};
  // Both paths: the tokens per expert, routing_map.sum(0) (0.25U), and the loss's sum over the
  // tokens of the scores (1U), a few small kernels; its gradient broadcast back to T × E.
  if (recipe.fused) {
    // fused_compute_score_for_moe_aux_loss (as the top-k kernel: 3.25U, 1 kernel) and
    // fused_moe_aux_loss (1U); backward, both kernels (1U written, 3U), and the sum into the
    // logits' gradient (3U).
    return {{3.25 + 1.25, 3, 2}, {7.0, 3, 2}};
  }
  // The scores over every expert: softmax (2U); or sigmoid (2U) normalised over the experts
  // (the sum 1U, the division 2U). Then their top-k routing map, the counts and the loss sums
  // (1.25U, about 6 kernels). Backward: the softmax's (or sigmoid's, the division's and the
  // sum's) gradient from the broadcast loss gradient, and the sum into the logits' gradient (3U).
  const bool softmax = moe.router_score == RouterScore::kSoftmax;
  const RouterPass scores = softmax ? RouterPass{2.0, 1} : RouterPass{5.0, 4};
  return {{scores.score_matrices + kTopkRoutingMap.score_matrices + 1.25, scores.kernels + kTopkRoutingMap.kernels + 6, 2},
          softmax ? RouterPass{5.0, 3, 2} : RouterPass{12.0, 7, 2}};
}

}  // namespace parallax
