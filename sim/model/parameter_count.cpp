#include "model/parameter_count.h"

namespace parallax {
namespace {

int64_t norm_size(const ModelConfig& m, int64_t width) { return m.norm == NormKind::kLayerNorm ? 2 * width : width; }

// Matrices and bias vector of an MLP of intermediate size f that reads and writes `width`.
int64_t mlp_matrices(const ModelConfig& m, int64_t f, int64_t width) { return (m.mlp == MlpKind::kGated ? 3 : 2) * width * f; }
int64_t mlp_matrices(const ModelConfig& m, int64_t f) { return mlp_matrices(m, f, m.hidden); }
int64_t mlp_biases(const ModelConfig& m, int64_t f, int64_t width) {
  if (!m.mlp_bias) return 0;
  return (m.mlp == MlpKind::kGated ? 2 * f : f) + width;
}
int64_t mlp_biases(const ModelConfig& m, int64_t f) { return mlp_biases(m, f, m.hidden); }

void count_attention(const ModelConfig& m, LayerParameterCounts& c) {
  const int64_t h = m.hidden;
  const int64_t heads = m.heads;
  if (m.mla) {
    const MlaConfig& a = *m.mla;
    const int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    if (a.q_lora_rank > 0) {
      c.attention += h * a.q_lora_rank + a.q_lora_rank * heads * qk;
      c.vectors += a.q_lora_rank;  // q_a_layernorm
    } else {
      c.attention += h * heads * qk;
    }
    c.attention += h * (a.kv_lora_rank + a.qk_rope_head_dim) +
                   a.kv_lora_rank * heads * (a.qk_nope_head_dim + a.v_head_dim);
    c.vectors += a.kv_lora_rank;  // kv_a_layernorm
    c.attention += heads * a.v_head_dim * h;
    if (m.qkv_bias) c.vectors += heads * qk + a.kv_lora_rank + a.qk_rope_head_dim;
    if (m.attention_output_bias) c.vectors += h;
    return;
  }
  const int64_t qkv_width = m.qkv_projection_width();
  c.attention += h * qkv_width + heads * m.head_dim * h;
  if (m.qkv_bias) c.vectors += qkv_width;
  if (m.attention_output_bias) c.vectors += h;
  if (m.qk_norm) c.vectors += 2 * m.head_dim;
}

// A DSA lightning indexer: its query projection from the MLA query latent (the hidden state
// without one), its key projection and the per-head weights from the hidden state, and the
// key's LayerNorm (gain and bias).
int64_t indexer_query_input(const ModelConfig& m) { return m.mla->q_lora_rank > 0 ? m.mla->q_lora_rank : m.hidden; }
void count_indexer(const ModelConfig& m, LayerParameterCounts& c) {
  const SparseAttentionConfig& a = *m.sparse_attention;
  c.indexer = indexer_query_input(m) * a.index_heads * a.index_head_dim + m.hidden * (a.index_head_dim + a.index_heads);
  c.vectors += 2 * a.index_head_dim;
}

// The projections split over TP count as the attention's: they shard the same way.
void count_mamba(const ModelConfig& m, LayerParameterCounts& c) {
  const MambaConfig& a = *m.mamba;
  c.attention += m.hidden * a.in_proj_width() + a.inner() * m.hidden;
  c.vectors += a.conv_channels() * (a.conv_kernel + 1) + 3 * int64_t{a.heads} + a.inner();
}

void attention_matrices(const ModelConfig& m, std::vector<WeightMatrix>& out) {
  const int64_t h = m.hidden, heads = m.heads;
  if (m.mla) {
    const MlaConfig& a = *m.mla;
    const int64_t qk = heads * (a.qk_nope_head_dim + a.qk_rope_head_dim);
    if (a.q_lora_rank > 0) {
      out.push_back({a.q_lora_rank, h});
      out.push_back({qk, a.q_lora_rank});
    } else {
      out.push_back({qk, h});
    }
    out.push_back({a.kv_lora_rank + a.qk_rope_head_dim, h});
    out.push_back({heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank});
    out.push_back({h, heads * a.v_head_dim});
    return;
  }
  out.push_back({m.qkv_projection_width(), h});
  out.push_back({h, heads * m.head_dim});
}

// An MLP of intermediate size f on `width`: fc1 (the gate and up projections together when gated)
// and fc2, `count` of them.
void mlp_weight_matrices(const ModelConfig& m, int64_t f, int64_t width, int64_t count, bool routed,
                         std::vector<WeightMatrix>& out) {
  out.push_back({(m.mlp == MlpKind::kGated ? 2 : 1) * f, width, count, routed});
  out.push_back({width, f, count, routed});
}

}  // namespace

std::vector<WeightMatrix> layer_weight_matrices(const ModelConfig& m, int layer) {
  std::vector<WeightMatrix> out;
  const LayerKind kind = m.layer_kind(layer);
  if (m.has_attention(layer)) attention_matrices(m, out);
  if (m.has_indexer(layer)) {
    const SparseAttentionConfig& a = *m.sparse_attention;
    out.push_back({a.index_heads * a.index_head_dim, indexer_query_input(m)});
    out.push_back({a.index_head_dim, m.hidden});
    out.push_back({a.index_heads, m.hidden});
  }
  if (kind == LayerKind::kMamba) {
    const MambaConfig& a = *m.mamba;
    out.push_back({a.in_proj_width(), m.hidden});
    out.push_back({m.hidden, a.inner()});
  }
  if (kind == LayerKind::kAttention || kind == LayerKind::kMamba) return out;
  if (!m.is_moe_layer(layer)) {
    mlp_weight_matrices(m, m.ffn, m.hidden, 1, false, out);
    return out;
  }
  const MoeConfig& moe = *m.moe;
  out.push_back({moe.experts, m.hidden});
  if (moe.latent > 0) {
    out.push_back({moe.latent, m.hidden});
    out.push_back({m.hidden, moe.latent});
  }
  mlp_weight_matrices(m, moe.expert_ffn, moe.expert_width(m.hidden), moe.experts, true, out);
  if (moe.shared_experts > 0) mlp_weight_matrices(m, moe.shared_experts * moe.shared_expert_ffn, m.hidden, 1, false, out);
  return out;
}

LayerParameterCounts layer_parameters(const ModelConfig& m, int layer) {
  LayerParameterCounts c;
  // A Transformer layer: attention, then an MLP or MoE, two norms; a hybrid layer one block, one.
  const LayerKind kind = m.layer_kind(layer);
  c.vectors += (kind == LayerKind::kTransformer ? 2 : 1) * norm_size(m, m.hidden);
  if (m.has_attention(layer)) count_attention(m, c);
  if (m.has_indexer(layer)) count_indexer(m, c);
  if (kind == LayerKind::kMamba) count_mamba(m, c);
  if (kind == LayerKind::kAttention || kind == LayerKind::kMamba) return c;
  if (m.is_moe_layer(layer)) {
    const MoeConfig& moe = *m.moe;
    const int64_t width = moe.expert_width(m.hidden);
    const int64_t expert = mlp_matrices(m, moe.expert_ffn, width);
    c.routed_experts = moe.experts * expert;
    c.routed_per_token = moe.top_k * expert;
    c.routed_vectors = moe.experts * mlp_biases(m, moe.expert_ffn, width);
    c.routed_vectors_per_token = moe.top_k * mlp_biases(m, moe.expert_ffn, width);
    c.router = moe.experts * m.hidden;
    c.latent_projections = 2 * m.hidden * moe.latent;
    if (moe.shared_experts > 0) {
      // Shared experts act as one MLP of shared_experts·f_s intermediate size.
      const int64_t f_shared = moe.shared_experts * moe.shared_expert_ffn;
      c.mlp = mlp_matrices(m, f_shared);
      c.vectors += mlp_biases(m, f_shared);
    }
  } else {
    c.mlp = mlp_matrices(m, m.ffn);
    c.vectors += mlp_biases(m, m.ffn);
  }
  return c;
}

ParameterCounts count_parameters(const ModelConfig& m) {
  ParameterCounts p;
  p.embedding = m.vocab * m.hidden;
  if (m.position == PositionEmbedding::kLearned) p.embedding += m.max_sequence * m.hidden;
  const int64_t head = m.vocab * m.hidden;
  p.output_head = m.tied_embeddings ? 0 : head;
  p.final_norm = norm_size(m, m.hidden);
  int64_t layers_active = 0;
  int64_t layers_matmul = 0;
  for (int i = 0; i < m.layers; ++i) {
    LayerParameterCounts c = layer_parameters(m, i);
    p.attention += c.attention;
    (m.is_moe_layer(i) ? p.shared_experts : p.dense_mlp) += c.mlp;
    p.routed_experts += c.routed_experts;
    p.router += c.router;
    p.latent_projections += c.latent_projections;
    p.indexer += c.indexer;
    p.layer_vectors += c.vectors + c.routed_vectors;
    layers_active += c.active();
    layers_matmul += c.matmul_active();
  }
  const int64_t outside = p.embedding + p.output_head + p.final_norm;
  p.total = outside + p.attention + p.dense_mlp + p.shared_experts + p.routed_experts + p.router +
            p.latent_projections + p.indexer + p.layer_vectors;
  p.active = outside + layers_active;
  p.matmul_active = layers_matmul + head;
  if (m.mtp_layers > 0) {
    // DeepSeek-V3 MTP module: enorm + hnorm, eh_proj (2h → h), one layer of the model's last
    // kind (MoE for V3), and the shared head's norm.
    const LayerParameterCounts mtp_layer = layer_parameters(m, m.layers);
    p.mtp = (m.mtp_repeated ? 1 : m.mtp_layers) * (3 * norm_size(m, m.hidden) + 2 * m.hidden * m.hidden + mtp_layer.total());
  }
  return p;
}

}  // namespace parallax
