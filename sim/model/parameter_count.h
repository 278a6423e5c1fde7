// Parameter counts of a ModelConfig, exact from its dimensions, split the way memory and FLOP
// accounting need them: matrices (which take part in GEMMs) apart from vectors (biases, norm
// gains), routed experts apart from the rest, embeddings and the output head apart.
//
// Per layer (h hidden, H heads, G kv heads, d head dim, f ffn, E experts, k top-k):
//   attention  h·(H + 2G)·d + H·d·h                       (+ (H+2G)·d, + h biases)
//   MLA        h·q_lora + q_lora·H·(nope+rope)            (or h·H·(nope+rope) without q_lora)
//              + h·(kv_lora + rope) + kv_lora·H·(nope+v) + H·v·h   (+ q_lora + kv_lora norm gains)
//   MLP        3·h·f gated, 2·h·f plain                    (+ 2f + h, or f + h, biases)
//   MoE        E·(3·h·f_e) routed, shared·3·h·f_s, router E·h; a latent MoE's experts on its
//              latent width l instead of h, and its two projections 2·h·l
//   norms      two per layer: h each (RMSNorm) or 2h (LayerNorm); Qwen3's q/k norms 2·d
//   Mamba-2    h·(2·d_in + 2·G·N + H_m) + d_in·h (matrices), and (d_in + 2·G·N)·(K + 1)
//              conv taps and biases, 3·H_m (dt bias, A, D), d_in (the gated norm) as vectors
//   DSA indexer q_in·I·d_I + h·(d_I + I) (q_in: q_lora, or h), + 2·d_I key-norm gain and bias,
//              on the layers with an indexer of their own (I index heads of d_I)
//   A hybrid model's layer has one block (attention, Mamba, MLP or MoE) and one norm.
// Model: token embedding V·h (+ learned positions max_sequence·h), output head V·h unless tied,
// final norm. DeepSeek-V3's multi-token-prediction modules are counted apart (mtp) and left
// out of total, as DeepSeek's own 671 B excludes them: each is two norms, a 2h×h projection,
// one more MoE layer and a norm; it shares the embedding and head. Repeated depths
// (ModelConfig::mtp_repeated) share one module's.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace parallax {

/// The parameters of one transformer layer.
struct LayerParameterCounts {
  int64_t attention = 0;         ///< attention matrices, or a Mamba mixer's two projections
  int64_t mlp = 0;               ///< dense MLP matrices, or the shared experts' in a MoE layer
  int64_t routed_experts = 0;    ///< matrices of all routed experts
  int64_t routed_per_token = 0;  ///< matrices of the top-k experts one token uses
  int64_t router = 0;            ///< router matrix
  int64_t latent_projections = 0;  ///< a latent MoE's down and up projections (whole on every TP rank)
  int64_t indexer = 0;           ///< a DSA lightning indexer's three projections (whole on every TP rank)
  int64_t vectors = 0;           ///< biases and norm gains, the routed experts' biases apart
  int64_t routed_vectors = 0;    ///< biases of all routed experts
  int64_t routed_vectors_per_token = 0;  ///< biases of the top-k experts one token uses

  int64_t total() const {
    return attention + mlp + routed_experts + router + latent_projections + indexer + vectors + routed_vectors;
  }
  /// What one token touches: the unselected routed experts (and their biases) left out.
  int64_t active() const {
    return attention + mlp + routed_per_token + router + latent_projections + indexer + vectors + routed_vectors_per_token;
  }
  /// Matrices one token is multiplied by (the N of 6N, per layer).
  int64_t matmul_active() const { return attention + mlp + routed_per_token + router + latent_projections + indexer; }
};

/// Parameters of layer `layer` (0-based) of `model`.
LayerParameterCounts layer_parameters(const ModelConfig& model, int layer);

struct ParameterCounts {
  int64_t embedding = 0;     ///< token embedding (and learned positions)
  int64_t output_head = 0;   ///< the unembedding matrix; 0 when tied to the embedding
  int64_t final_norm = 0;
  int64_t attention = 0;     ///< attention matrices, all layers
  int64_t dense_mlp = 0;     ///< MLP matrices of dense layers
  int64_t shared_experts = 0;
  int64_t routed_experts = 0;
  int64_t router = 0;
  int64_t latent_projections = 0;  ///< a latent MoE's projections, all layers
  int64_t indexer = 0;       ///< DSA lightning indexers' projections, all layers
  int64_t layer_vectors = 0; ///< biases and norm gains inside the layers
  int64_t total = 0;         ///< every parameter once, MTP modules excluded
  int64_t active = 0;        ///< touched by one token: total minus the unselected routed experts
  /// Matrices one token is multiplied by: the layers' matmul_active plus the output head (even
  /// when tied, since the logits GEMM runs either way); no input embedding (a lookup), no
  /// biases or norm gains. The N of "6·N" model FLOPs.
  int64_t matmul_active = 0;
  int64_t mtp = 0;           ///< DeepSeek-V3 multi-token-prediction modules, not in total

  /// active minus the input embedding: DeepSeek's "activated parameters" convention.
  int64_t active_without_embedding() const { return active - embedding; }
};

ParameterCounts count_parameters(const ModelConfig& model);

/// `count` weight matrices of `rows` × `cols` (out × in), whole (before any tensor-parallel
/// split), as Megatron stores them: the query, key and value projections as one, a gated MLP's
/// gate and up projections as one; a routed expert's apart.
struct WeightMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t count = 1;
  bool routed_expert = false;
};

/// The weight matrices of layer `layer`: the matrices layer_parameters counts (its attention or
/// Mamba projections, MLP or shared experts, routed experts, router and latent projections).
std::vector<WeightMatrix> layer_weight_matrices(const ModelConfig& model, int layer);

}  // namespace parallax
