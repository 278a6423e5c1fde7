// The workload model block from a ModelConfig (model_block.h).
#include "model/model_block.h"

namespace parallax {
namespace {

nlohmann::ordered_json moe_block(const MoeConfig& moe) {
  nlohmann::ordered_json j;
  j["experts"] = moe.experts;
  j["top_k"] = moe.top_k;
  j["expert_ffn"] = moe.expert_ffn;
  j["shared_experts"] = moe.shared_experts;
  // Without shared experts their width means nothing (a config.json loads it as 0, which a
  // block refuses): left out, the reader takes the experts' own.
  if (moe.shared_experts > 0) j["shared_expert_ffn"] = moe.shared_expert_ffn;
  j["first_dense_layers"] = moe.first_dense_layers;
  j["layer_frequency"] = moe.layer_frequency;
  j["dense_layers"] = moe.dense_layers;
  if (moe.latent > 0) j["latent_size"] = moe.latent;
  if (moe.router_score != RouterScore::kSoftmax) j["router_score"] = to_string(moe.router_score);
  if (moe.router_expert_bias) j["router_expert_bias"] = true;
  if (moe.router_group_topk > 0) {
    j["router_groups"] = moe.router_groups;
    j["router_group_topk"] = moe.router_group_topk;
  }
  return j;
}

nlohmann::ordered_json mla_block(const MlaConfig& mla) {
  return {{"q_lora_rank", mla.q_lora_rank},
          {"kv_lora_rank", mla.kv_lora_rank},
          {"qk_nope_head_dim", mla.qk_nope_head_dim},
          {"qk_rope_head_dim", mla.qk_rope_head_dim},
          {"v_head_dim", mla.v_head_dim}};
}

nlohmann::ordered_json sparse_attention_block(const SparseAttentionConfig& a) {
  nlohmann::ordered_json j = {{"index_heads", a.index_heads}, {"index_head_dim", a.index_head_dim}, {"topk", a.topk}};
  if (!a.shared_index_layers.empty()) j["shared_index_layers"] = a.shared_index_layers;
  return j;
}

nlohmann::ordered_json mamba_block(const MambaConfig& a) {
  return {{"heads", a.heads},           {"head_dim", a.head_dim},       {"state", a.state},
          {"groups", a.groups},         {"conv_kernel", a.conv_kernel}, {"chunk", a.chunk}};
}

}  // namespace

nlohmann::ordered_json model_block(const ModelConfig& m) {
  nlohmann::ordered_json j;
  j["name"] = m.name;
  j["layers"] = m.layers;
  j["hidden"] = m.hidden;
  j["heads"] = m.heads;
  j["kv_heads"] = m.kv_heads;
  j["head_dim"] = m.head_dim;
  if (m.ffn > 0) j["ffn"] = m.ffn;
  j["mlp"] = to_string(m.mlp);
  j["vocab"] = m.vocab;
  j["tied_embeddings"] = m.tied_embeddings;
  j["max_sequence"] = m.max_sequence;
  j["norm"] = to_string(m.norm);
  j["position_embedding"] = to_string(m.position);
  j["qkv_bias"] = m.qkv_bias;
  j["attention_output_bias"] = m.attention_output_bias;
  j["mlp_bias"] = m.mlp_bias;
  if (m.glu_clamp) j["glu_clamp"] = true;
  j["qk_norm"] = m.qk_norm;
  if (m.attention_output_gate) j["attention_output_gate"] = true;
  j["attention_dropout"] = m.attention_dropout;
  j["hidden_dropout"] = m.hidden_dropout;
  j["sliding_window"] = m.sliding_window;
  j["sliding_window_layers"] = m.sliding_window_layers;
  if (m.attention_chunk > 0) {
    j["attention_chunk"] = m.attention_chunk;
    j["attention_chunk_layers"] = m.attention_chunk_layers;
  }
  j["parallel_block"] = m.parallel_block;
  if (m.moe) j["moe"] = moe_block(*m.moe);
  if (m.mla) j["mla"] = mla_block(*m.mla);
  if (m.sparse_attention) j["sparse_attention"] = sparse_attention_block(*m.sparse_attention);
  j["mtp_layers"] = m.mtp_layers;
  if (m.mtp_repeated) j["mtp_repeated"] = true;
  if (m.hybrid()) j["hybrid_pattern"] = m.hybrid_pattern;
  if (m.mamba) j["mamba"] = mamba_block(*m.mamba);
  return j;
}

}  // namespace parallax
