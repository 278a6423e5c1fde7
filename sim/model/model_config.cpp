#include "model/model_config.h"

#include <algorithm>

namespace parallax {

const char* to_string(MlpKind k) { return k == MlpKind::kGated ? "swiglu" : "gelu"; }
const char* to_string(NormKind k) { return k == NormKind::kRmsNorm ? "rmsnorm" : "layernorm"; }
const char* to_string(PositionEmbedding p) { return p == PositionEmbedding::kRotary ? "rotary" : "learned"; }

bool ModelConfig::is_moe_layer(int layer) const {
  if (!moe || moe->experts <= 0) return false;
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

std::string ModelConfig::problem() const {
  auto s = [](int64_t v) { return std::to_string(v); };
  if (layers <= 0) return "layers must be positive";
  if (hidden <= 0) return "hidden must be positive";
  if (heads <= 0) return "heads must be positive";
  if (vocab <= 0) return "vocab must be positive";
  if (max_sequence <= 0) return "max_sequence must be positive";
  if (sliding_window < 0) return "sliding_window must be zero (full attention) or positive";
  if (!(sliding_window_layers >= 0 && sliding_window_layers <= 1)) return "sliding_window_layers must be in [0, 1]";
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
  bool any_dense = false;
  for (int i = 0; i < layers; ++i) any_dense = any_dense || !is_moe_layer(i);
  if (any_dense && ffn <= 0) return "ffn must be positive (some layers have a dense MLP)";
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
  }
  if (mtp_layers < 0) return "mtp_layers must be zero or more";
  if (!(attention_dropout >= 0 && attention_dropout < 1)) return "attention_dropout must be in [0, 1)";
  if (!(hidden_dropout >= 0 && hidden_dropout < 1)) return "hidden_dropout must be in [0, 1)";
  return {};
}

}  // namespace parallax
