#include "model/model_config.h"

#include <algorithm>

namespace parallax {

const char* to_string(MlpKind k) { return k == MlpKind::kGated ? "swiglu" : "gelu"; }
const char* to_string(NormKind k) { return k == NormKind::kRmsNorm ? "rmsnorm" : "layernorm"; }
const char* to_string(PositionEmbedding p) { return p == PositionEmbedding::kRotary ? "rotary" : "learned"; }
const char* to_string(RouterScore s) { return s == RouterScore::kSigmoid ? "sigmoid" : "softmax"; }
std::optional<RouterScore> router_score_from(const std::string& name) {
  if (name == "softmax") return RouterScore::kSoftmax;
  if (name == "sigmoid") return RouterScore::kSigmoid;
  return std::nullopt;
}

const char* to_string(LayerKind k) {
  switch (k) {
    case LayerKind::kTransformer: return "transformer";
    case LayerKind::kMamba: return "mamba";
    case LayerKind::kAttention: return "attention";
    case LayerKind::kMlp: return "mlp";
    case LayerKind::kMoe: return "moe";
  }
  return "transformer";
}

LayerKind ModelConfig::layer_kind(int layer) const {
  // A hybrid model's MTP layers (past `layers`) are not modelled; they read as Transformer layers.
  if (!hybrid() || layer < 0 || layer >= static_cast<int>(hybrid_pattern.size())) return LayerKind::kTransformer;
  switch (hybrid_pattern[static_cast<size_t>(layer)]) {
    case 'M': return LayerKind::kMamba;
    case '*': return LayerKind::kAttention;
    case '-': return LayerKind::kMlp;
    case 'E': return LayerKind::kMoe;
    default: return LayerKind::kTransformer;
  }
}

bool ModelConfig::has_attention(int layer) const {
  const LayerKind k = layer_kind(layer);
  return k == LayerKind::kTransformer || k == LayerKind::kAttention;
}

int ModelConfig::attention_layer_count() const {
  int n = 0;
  for (int i = 0; i < layers; ++i) n += has_attention(i) ? 1 : 0;
  return n;
}

bool ModelConfig::has_dense_mlp(int layer) const {
  const LayerKind k = layer_kind(layer);
  return k == LayerKind::kMlp || (k == LayerKind::kTransformer && !is_moe_layer(layer));
}

bool ModelConfig::any_dense_mlp() const {
  for (int i = 0; i < layers; ++i) {
    if (has_dense_mlp(i)) return true;
  }
  return false;
}

bool ModelConfig::is_moe_layer(int layer) const {
  if (!moe || moe->experts <= 0) return false;
  if (hybrid() && layer < layers) return layer_kind(layer) == LayerKind::kMoe;
  if (layer < moe->first_dense_layers) return false;
  if (moe->layer_frequency > 1 && layer % moe->layer_frequency != 0) return false;
  return std::find(moe->dense_layers.begin(), moe->dense_layers.end(), layer) == moe->dense_layers.end();
}

int ModelConfig::moe_layer_count() const {
  int n = 0;
  for (int i = 0; i < layers; ++i) n += is_moe_layer(i) ? 1 : 0;
  return n;
}

int64_t ModelConfig::qk_head_dim() const { return mla ? mla->qk_nope_head_dim + mla->qk_rope_head_dim : head_dim; }
int64_t ModelConfig::v_head_dim() const { return mla ? mla->v_head_dim : head_dim; }
int64_t ModelConfig::rotary_dim() const {
  if (position != PositionEmbedding::kRotary) return 0;
  return mla ? mla->qk_rope_head_dim : head_dim;
}
int ModelConfig::attention_kv_heads() const { return mla ? heads : kv_heads; }
bool ModelConfig::has_indexer(int layer) const {
  if (!sparse_attention || !has_attention(layer)) return false;
  const std::vector<int>& shared = sparse_attention->shared_index_layers;
  return std::find(shared.begin(), shared.end(), layer) == shared.end();
}

std::string ModelConfig::problem() const {
  auto s = [](int64_t v) { return std::to_string(v); };
  if (layers <= 0) return "layers must be positive";
  if (hidden <= 0) return "hidden must be positive";
  if (heads <= 0) return "heads must be positive";
  if (vocab <= 0) return "vocab must be positive";
  if (max_sequence <= 0) return "max_sequence must be positive";
  if (sliding_window < 0) return "sliding_window must be zero (full attention) or positive";
  if (!(sliding_window_layers >= 0 && sliding_window_layers <= 1)) return "sliding_window_layers must be in [0, 1]";
  if (attention_chunk < 0) return "attention_chunk must be zero (no chunks) or positive";
  if (!(attention_chunk_layers >= 0 && attention_chunk_layers <= 1)) return "attention_chunk_layers must be in [0, 1]";
  if (attention_chunk > 0 && sliding_window > 0) return "a model has either a sliding window or attention chunks, not both";
  if (mla) {
    if (mla->kv_lora_rank <= 0 || mla->qk_nope_head_dim < 0 || mla->qk_rope_head_dim < 0 ||
        mla->qk_nope_head_dim + mla->qk_rope_head_dim <= 0 || mla->v_head_dim <= 0 || mla->q_lora_rank < 0) {
      return "MLA needs kv_lora_rank, qk_nope_head_dim + qk_rope_head_dim and v_head_dim positive";
    }
  } else {
    if (head_dim <= 0) return "head_dim must be positive";
    if (kv_heads <= 0) return "kv_heads must be positive";
    if (heads % kv_heads != 0) return "heads=" + s(heads) + " is not a multiple of kv_heads=" + s(kv_heads);
  }
  if (sparse_attention) {
    const SparseAttentionConfig& a = *sparse_attention;
    if (!mla) return "sparse_attention (DSA) is modelled on MLA attention: the model has no mla block";
    if (a.index_heads <= 0 || a.index_head_dim <= 0 || a.topk <= 0) {
      return "sparse_attention: index_heads, index_head_dim and topk must be positive";
    }
    if (sliding_window > 0 || attention_chunk > 0) return "sparse attention does not combine with a sliding window or chunks";
    for (int l : a.shared_index_layers) {
      if (l < 0 || l >= layers) return "sparse_attention.shared_index_layers: layer " + s(l) + " is outside 0.." + s(layers - 1);
    }
    int first = 0;
    while (first < layers && !has_attention(first)) ++first;
    if (first < layers && !has_indexer(first)) {
      return "sparse_attention: the first attention layer (" + s(first) + ") must run an indexer of its own";
    }
  }
  if (hybrid()) {
    if (static_cast<int64_t>(hybrid_pattern.size()) != layers) {
      return "hybrid_pattern has " + s(static_cast<int64_t>(hybrid_pattern.size())) + " layers, not layers=" + s(layers);
    }
    const size_t odd = hybrid_pattern.find_first_not_of("M*-E");
    if (odd != std::string::npos) {
      return std::string("hybrid_pattern: '") + hybrid_pattern[odd] + "' at layer " + s(static_cast<int64_t>(odd)) +
             " is not M (Mamba), * (attention), - (MLP) or E (MoE)";
    }
    if (hybrid_pattern.find('M') != std::string::npos && !mamba) return "hybrid_pattern has M layers but no mamba block";
    if (hybrid_pattern.find('E') != std::string::npos && !moe) return "hybrid_pattern has E layers but no moe block";
  }
  if (mamba) {
    if (mamba->heads <= 0 || mamba->head_dim <= 0 || mamba->state <= 0 || mamba->groups <= 0 ||
        mamba->conv_kernel <= 0 || mamba->chunk <= 0) {
      return "mamba: heads, head_dim, state, groups, conv_kernel and chunk must be positive";
    }
    if (mamba->heads % mamba->groups != 0) {
      return "mamba.heads=" + s(mamba->heads) + " is not a multiple of mamba.groups=" + s(mamba->groups);
    }
  }
  if (any_dense_mlp() && ffn <= 0) return "ffn must be positive (some layers have a dense MLP)";
  if (moe) {
    if (moe->experts <= 0) return "moe.experts must be positive";
    if (moe->top_k <= 0 || moe->top_k > moe->experts) {
      return "moe.top_k=" + s(moe->top_k) + " must be between 1 and experts=" + s(moe->experts);
    }
    if (moe->expert_ffn <= 0) return "moe.expert_ffn must be positive";
    if (moe->shared_experts < 0) return "moe.shared_experts must be zero or more";
    if (moe->shared_experts > 0 && moe->shared_expert_ffn <= 0) return "moe.shared_expert_ffn must be positive";
    if (moe->first_dense_layers < 0) return "moe.first_dense_layers must be zero or more";
    if (moe->layer_frequency <= 0) return "moe.layer_frequency must be positive";
    if (moe->latent < 0) return "moe.latent_size must be zero (none) or positive";
    if (moe->router_groups < 0 || moe->router_group_topk < 0) return "moe.router_groups and router_group_topk must be zero or more";
    if (moe->router_group_topk > 0) {
      // Megatron's group_limited_topk: equal groups, top_k / group_topk experts from each chosen group.
      if (moe->router_groups <= 0 || moe->experts % moe->router_groups != 0) {
        return "moe.router_groups=" + s(moe->router_groups) + " must divide experts=" + s(moe->experts);
      }
      if (moe->router_group_topk > moe->router_groups || moe->top_k % moe->router_group_topk != 0) {
        return "moe.router_group_topk=" + s(moe->router_group_topk) + " must be at most router_groups=" +
               s(moe->router_groups) + " and divide top_k=" + s(moe->top_k);
      }
    }
  }
  if (mtp_layers < 0) return "mtp_layers must be zero or more";
  if (!(attention_dropout >= 0 && attention_dropout < 1)) return "attention_dropout must be in [0, 1)";
  if (!(hidden_dropout >= 0 && hidden_dropout < 1)) return "hidden_dropout must be in [0, 1)";
  return {};
}

}  // namespace parallax
