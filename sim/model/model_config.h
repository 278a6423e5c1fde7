// The architecture of a decoder-only transformer, as far as cost and memory depend on it:
// sizes, attention variant (MHA, GQA/MQA, DeepSeek's MLA), MLP variant (SwiGLU or plain GELU),
// mixture-of-experts layout, embeddings, and hybrid models whose layers are single blocks
// (Mamba-2 mixers, attention, MLPs or MoEs: Megatron's hybrid layer pattern). Loaders (model_loader.h) fill it from a Hugging Face
// config.json or from the workloads' own model block; counting (parameter_count.h) and
// per-operator costs (layer_operators.h) read it. Nothing here knows about parallel layouts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace parallax {

/// Gated: SwiGLU-style, three matrices (gate, up, down) and act(gate)·up; plain: two matrices
/// and GELU (GPT-2/3, GPT-NeoX).
enum class MlpKind : uint8_t { kGated, kPlain };
/// RMSNorm has a gain vector; LayerNorm a gain and a bias.
enum class NormKind : uint8_t { kRmsNorm, kLayerNorm };
/// Rotary embeddings have no parameters; learned ones are a max_sequence × hidden table.
enum class PositionEmbedding : uint8_t { kRotary, kLearned };
/// How a MoE router scores experts from its logits (Megatron's moe_router_score_function):
/// softmax (Mixtral, Qwen3, GPT-OSS: the top-k of the logits, then a softmax over them) or an
/// element-wise sigmoid whose chosen scores are normalised (DeepSeek-V3, Kimi K2, Nemotron 3).
enum class RouterScore : uint8_t { kSoftmax, kSigmoid };

const char* to_string(MlpKind k);
const char* to_string(NormKind k);
const char* to_string(PositionEmbedding p);
const char* to_string(RouterScore s);
std::optional<RouterScore> router_score_from(const std::string& name);

/// Mixture of experts. A layer is a MoE layer when layer >= first_dense_layers, layer is a
/// multiple of layer_frequency, and layer is not listed in dense_layers (DeepSeek's rule, with
/// Qwen's explicit list); other layers have the dense MLP of ModelConfig::ffn.
struct MoeConfig {
  int experts = 0;                 ///< routed experts
  int top_k = 0;                   ///< routed experts per token
  int shared_experts = 0;          ///< experts every token passes through
  int64_t expert_ffn = 0;          ///< intermediate size of one routed expert
  int64_t shared_expert_ffn = 0;   ///< intermediate size of one shared expert
  int first_dense_layers = 0;
  int layer_frequency = 1;
  std::vector<int> dense_layers;
  /// A latent MoE (Nemotron 3 Super's, Megatron's moe_latent_size): the tokens are projected
  /// from h down to this width before the dispatch and back up after the combine, so the routed
  /// experts and their all-to-alls work in it (the shared experts on h). 0: no latent.
  int64_t latent = 0;
  /// The width the routed experts read and write: the latent, or the hidden size.
  int64_t expert_width(int64_t hidden) const { return latent > 0 ? latent : hidden; }
  RouterScore router_score = RouterScore::kSoftmax;
  /// A per-expert bias added to the scores that choose the experts, not to their weights
  /// (DeepSeek-V3's auxiliary-loss-free balancing, e_score_correction_bias).
  bool router_expert_bias = false;
  /// Group-limited routing (DeepSeek's n_group, topk_group): the experts in `router_groups`
  /// equal groups, the top-k taken within the `router_group_topk` groups whose best
  /// top_k / router_group_topk scores sum highest. 0: plain top-k.
  int router_groups = 0;
  int router_group_topk = 0;
};

/// DeepSeek-V2/V3 multi-head latent attention: queries through a rank-q_lora_rank bottleneck
/// (none when 0), keys and values through a shared rank-kv_lora_rank latent plus one shared
/// rotary key of qk_rope_head_dim. Per head, queries and keys have qk_nope + qk_rope dims and
/// values v_head_dim.
struct MlaConfig {
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

/// DeepSeek Sparse Attention (DSA: DeepSeek-V3.2, GLM-5) on MLA. A lightning indexer scores every
/// earlier key for each query, Σ over its `index_heads` heads of w·ReLU(q·k) in `index_head_dim`
/// dims (q from the MLA query latent, or the hidden state without one; one key a token; a weight
/// a head from the hidden state), and the MLA core attends only to the `topk` keys it scores
/// highest (every key while the context is shorter). The layers listed in `shared_index_layers`
/// have no indexer of their own and reuse the top-k of the last one that ran (GLM-5's "shared"
/// indexer_types).
struct SparseAttentionConfig {
  int index_heads = 0;
  int64_t index_head_dim = 0;
  int64_t topk = 0;
  std::vector<int> shared_index_layers;
};

/// The Mamba-2 mixer (Dao & Gu 2024, its state-space dual form), as Megatron-Core's MambaMixer
/// and the Nemotron-H family run it: inner width d_in = heads·head_dim; the input projection
/// gives z (d_in), x (d_in), B and C (groups·state each) and dt (heads); a causal depthwise
/// convolution of conv_kernel taps over x, B and C; the chunked scan in chunks of `chunk`
/// tokens; a gated RMSNorm of y by z; the output projection d_in → h.
struct MambaConfig {
  int heads = 0;
  int64_t head_dim = 0;
  int64_t state = 0;
  int groups = 1;
  int conv_kernel = 4;
  int64_t chunk = 128;

  int64_t inner() const { return heads * head_dim; }
  /// The input projection's output width: 2·d_in + 2·groups·state + heads.
  int64_t in_proj_width() const { return 2 * inner() + 2 * groups * state + heads; }
  /// The convolved channels: x, B and C.
  int64_t conv_channels() const { return inner() + 2 * groups * state; }
};

/// What one layer is. A Transformer layer is attention then an MLP (or MoE); a hybrid model's
/// layers are one block each (Megatron's hybrid_override_pattern: M, *, - and E).
enum class LayerKind : uint8_t { kTransformer, kMamba, kAttention, kMlp, kMoe };
/// "transformer", "mamba", "attention", "mlp", "moe".
const char* to_string(LayerKind k);

struct ModelConfig {
  std::string name;
  std::string source;  ///< file it was read from, if any (for messages)
  int layers = 0;
  int64_t hidden = 0;
  int heads = 0;
  int kv_heads = 0;      ///< = heads for MHA, 1 for MQA; unused with MLA
  int64_t head_dim = 0;  ///< query/key/value dim per head (not used by MLA, which has its own)
  int64_t ffn = 0;       ///< intermediate size of the dense MLP
  MlpKind mlp = MlpKind::kGated;
  int64_t vocab = 0;
  bool tied_embeddings = false;
  int64_t max_sequence = 0;
  NormKind norm = NormKind::kRmsNorm;
  PositionEmbedding position = PositionEmbedding::kRotary;
  bool qkv_bias = false;               ///< biases on the query/key/value projections
  bool attention_output_bias = false;  ///< bias on the attention output projection
  bool mlp_bias = false;               ///< biases on the MLP (and expert) matrices
  /// The gated activation's inputs clamped first (GPT-OSS's swiglu_limit: the gate at most L,
  /// the linear half within ±L), as Megatron-Core runs it for experts issued one by one: two
  /// clamps and a cat in eager PyTorch before the fused activation (OperatorList::mlp).
  bool glu_clamp = false;
  bool qk_norm = false;                ///< per-head RMSNorm of queries and keys (Qwen3)
  /// Gated attention (Qwen3-Next, Qwen3.5): the query projection also yields a gate per query
  /// element (heads·head_dim more outputs), and the attention's output is multiplied by its
  /// sigmoid before the output projection.
  bool attention_output_gate = false;
  /// Dropout probabilities in training, in [0, 1). Above 0 a mask is kept for the backward:
  /// one byte per attention score (a kernel of its own in the unfused core; inside
  /// FlashAttention's kernel it regenerates from the seed) and one per element after each
  /// residual branch (fused into the residual add, as Megatron's bias-dropout-add).
  double attention_dropout = 0;
  double hidden_dropout = 0;
  /// Sliding-window attention: each query attends to itself and the `sliding_window` − 1 keys
  /// before it (Mistral v0.1, MegaScale); 0 is full causal attention. On the share
  /// `sliding_window_layers` of the layers (1: all; Gemma-2's alternation: ½); the others full.
  int64_t sliding_window = 0;
  double sliding_window_layers = 1.0;
  /// Chunked attention (Llama 4's attention_chunk_size): the sequence is cut into blocks of
  /// `attention_chunk` tokens and each query attends causally within its own block only, so a
  /// query at position p sees p mod chunk + 1 keys; 0: none. On the share
  /// `attention_chunk_layers` of the layers (Llama 4: the three of every four with rotary
  /// embeddings), the others full. Not combined with a sliding window.
  int64_t attention_chunk = 0;
  double attention_chunk_layers = 1.0;
  /// Parallel attention and MLP (GPT-J, GPT-NeoX's parallel residual, PaLM, Falcon, MegaScale's
  /// parallel transformer block): both branches read one normalised input and are summed into
  /// one residual, so a TP group reduces once per block instead of twice.
  bool parallel_block = false;
  std::optional<MoeConfig> moe;
  std::optional<MlaConfig> mla;
  std::optional<SparseAttentionConfig> sparse_attention;
  int mtp_layers = 0;  ///< DeepSeek-V3 multi-token-prediction modules (counted apart)
  /// The MTP depths run one module's weights again (Megatron's mtp_use_repeated_layer):
  /// mtp_layers passes, one module's parameters.
  bool mtp_repeated = false;
  /// A hybrid model's layers, one character each (Megatron's hybrid_override_pattern): M a
  /// Mamba-2 mixer, * attention, - an MLP, E a MoE, each with its own pre-norm and residual.
  /// Empty: every layer is a Transformer layer.
  std::string hybrid_pattern;
  std::optional<MambaConfig> mamba;

  bool hybrid() const { return !hybrid_pattern.empty(); }
  LayerKind layer_kind(int layer) const;
  /// The layer's feed-forward block is a MoE (a Transformer layer's MLP, or a hybrid E layer).
  bool is_moe_layer(int layer) const;
  /// Has attention (a Transformer layer or a hybrid * layer).
  bool has_attention(int layer) const;
  int attention_layer_count() const;
  /// Has a dense MLP (a Transformer layer that is not MoE, or a hybrid - layer).
  bool has_dense_mlp(int layer) const;
  /// Some layer has a dense MLP (so ffn is used).
  bool any_dense_mlp() const;
  int moe_layer_count() const;
  /// Query/key dim per head: head_dim, or qk_nope + qk_rope with MLA.
  int64_t qk_head_dim() const;
  /// Value dim per head: head_dim, or v_head_dim with MLA.
  int64_t v_head_dim() const;
  /// Rotary dims per query/key head: head_dim, or qk_rope_head_dim with MLA; 0 if learned.
  int64_t rotary_dim() const;
  /// Key/value heads that are materialised for attention: kv_heads, or heads with MLA.
  int attention_kv_heads() const;
  /// The layer runs a DSA lightning indexer of its own (an attention layer of a sparse-attention
  /// model that is not one of its shared_index_layers; MTP layers have theirs).
  bool has_indexer(int layer) const;
  /// The most keys a query attends to: the sparse attention's top-k on every attention layer
  /// (0: no such cap; windows and chunks are bounded_attention's, on a share of the layers).
  int64_t attended_keys_cap() const { return sparse_attention ? sparse_attention->topk : 0; }
  /// The layers whose queries reach back over a bounded number of tokens: the share of the layers
  /// with a sliding window (the window's tokens) or with attention chunks (the chunk's); share 0
  /// where every layer attends to its whole context.
  struct BoundedAttention {
    double share = 0;
    int64_t tokens = 0;
  };
  BoundedAttention bounded_attention() const {
    if (sliding_window > 0) return {sliding_window_layers, sliding_window};
    if (attention_chunk > 0) return {attention_chunk_layers, attention_chunk};
    return {};
  }
  /// The fused query-key-value projection's outputs (not MLA): the queries, with a gated
  /// attention's gate beside them, and the keys and values.
  int64_t qkv_projection_width() const {
    return (int64_t{heads} * (attention_output_gate ? 2 : 1) + 2 * int64_t{kv_heads}) * head_dim;
  }

  /// Empty when consistent; otherwise the first problem, naming the fields (e.g. "heads=32 is
  /// not a multiple of kv_heads=5"). Loaders check the same things with JSON paths; this is
  /// the last guard for configs built in code.
  std::string problem() const;
};

}  // namespace parallax
