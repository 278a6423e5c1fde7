#include "model/model_loader.h"

#include <algorithm>
#include <filesystem>
#include <optional>

namespace parallax {
namespace {

namespace fs = std::filesystem;

// Bounds that keep a corrupt file from asking for absurd loops or overflowing products.
// Beyond these no model exists, and products of them (FLOPs, bytes, times) would overflow.
constexpr int64_t kMaxCount = int64_t{1} << 16;  // layers, heads, experts
constexpr int64_t kMaxSize = int64_t{1} << 24;   // dimensions, vocabulary, sequence length

enum class HfFamily {
  kLlama, kMistral, kMixtral, kQwen2, kQwen3, kQwen2Moe, kQwen3Moe, kOlmoe, kDeepseekV2, kDeepseekV3, kGlm4Moe,
  kGptOss, kNemotronH, kGpt2, kGptNeoX, kGemma, kGemma2, kGemma3, kLlama4, kPhi3, kOlmo2, kOlmo3, kQwen3Next,
  kQwen35, kQwen35Moe, kDeepseekV32, kGlmMoeDsa
};

struct HfArchitecture {
  const char* architecture;
  const char* model_type;
  HfFamily family;
};

constexpr HfArchitecture kHfArchitectures[] = {
    {"LlamaForCausalLM", "llama", HfFamily::kLlama},
    {"MistralForCausalLM", "mistral", HfFamily::kMistral},
    {"MixtralForCausalLM", "mixtral", HfFamily::kMixtral},
    {"Qwen2ForCausalLM", "qwen2", HfFamily::kQwen2},
    {"Qwen3ForCausalLM", "qwen3", HfFamily::kQwen3},
    {"Qwen2MoeForCausalLM", "qwen2_moe", HfFamily::kQwen2Moe},
    {"Qwen3MoeForCausalLM", "qwen3_moe", HfFamily::kQwen3Moe},
    {"OlmoeForCausalLM", "olmoe", HfFamily::kOlmoe},
    {"DeepseekV2ForCausalLM", "deepseek_v2", HfFamily::kDeepseekV2},
    {"DeepseekV3ForCausalLM", "deepseek_v3", HfFamily::kDeepseekV3},
    {"DeepseekV32ForCausalLM", "deepseek_v32", HfFamily::kDeepseekV32},
    {"Glm4MoeForCausalLM", "glm4_moe", HfFamily::kGlm4Moe},
    {"GlmMoeDsaForCausalLM", "glm_moe_dsa", HfFamily::kGlmMoeDsa},
    {"GptOssForCausalLM", "gpt_oss", HfFamily::kGptOss},
    {"NemotronHForCausalLM", "nemotron_h", HfFamily::kNemotronH},
    {"GPT2LMHeadModel", "gpt2", HfFamily::kGpt2},
    {"GPTNeoXForCausalLM", "gpt_neox", HfFamily::kGptNeoX},
    {"GemmaForCausalLM", "gemma", HfFamily::kGemma},
    {"Gemma2ForCausalLM", "gemma2", HfFamily::kGemma2},
    {"Gemma3ForCausalLM", "gemma3_text", HfFamily::kGemma3},
    {"Llama4ForCausalLM", "llama4_text", HfFamily::kLlama4},
    {"Phi3ForCausalLM", "phi3", HfFamily::kPhi3},
    {"Olmo2ForCausalLM", "olmo2", HfFamily::kOlmo2},
    {"Olmo3ForCausalLM", "olmo3", HfFamily::kOlmo3},
    {"Qwen3NextForCausalLM", "qwen3_next", HfFamily::kQwen3Next},
    {"Qwen3_5ForCausalLM", "qwen3_5_text", HfFamily::kQwen35},
    {"Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", HfFamily::kQwen35Moe},
};

std::string supported_list() {
  std::string out;
  for (const auto& a : kHfArchitectures) out += (out.empty() ? "" : ", ") + std::string(a.architecture);
  return out;
}

// A dropout probability: a number in [0, 1).
double probability_value(const JsonReader& v) {
  const double x = v.as_number();
  if (!(x >= 0 && x < 1)) v.fail("must be a probability in [0, 1), found " + v.raw().dump());
  return x;
}

// Reading a config.json, where JSON null means "use the default" (transformers writes
// `"head_dim": null`, `"n_inner": null`, `"q_lora_rank": null`).
class HfFields {
 public:
  explicit HfFields(JsonReader& root) : root_(root) {}

  bool present(const std::string& key) const { return root_.has(key) && !root_.raw()[key].is_null(); }
  bool has(const std::string& key) const { return root_.has(key); }

  JsonReader at(const std::string& key) { return root_.at(key); }

  int64_t positive(const std::string& key, int64_t max = kMaxSize) {
    JsonReader v = root_.at(key);
    return positive_value(v, max);
  }
  int64_t positive_or(const std::string& key, int64_t fallback, int64_t max = kMaxSize) {
    if (!present(key)) return fallback;
    JsonReader v = root_.at(key);
    return positive_value(v, max);
  }
  int count(const std::string& key) { return static_cast<int>(positive(key, kMaxCount)); }
  int count_or(const std::string& key, int fallback) { return static_cast<int>(positive_or(key, fallback, kMaxCount)); }
  int64_t non_negative_or(const std::string& key, int64_t fallback, int64_t max = kMaxSize) {
    if (!present(key)) return fallback;
    JsonReader v = root_.at(key);
    int64_t x = v.as_int();
    if (x < 0) v.fail("must be zero or more, found " + std::to_string(x));
    if (x > max) v.fail("is too large (at most " + std::to_string(max) + "), found " + std::to_string(x));
    return x;
  }
  bool flag_or(const std::string& key, bool fallback) {
    if (!present(key)) return fallback;
    return root_.at(key).as_bool();
  }
  double probability_or(const std::string& key, double fallback) {
    return present(key) ? probability_value(root_.at(key)) : fallback;
  }
  [[noreturn]] void fail_at(const std::string& key, const std::string& reason) const { root_.fail_at(key, reason); }

 private:
  static int64_t positive_value(const JsonReader& v, int64_t max) {
    if (v.raw().is_null()) v.fail("expected a positive integer, found null");
    int64_t x = v.as_int();
    if (x <= 0) v.fail("must be a positive integer, found " + std::to_string(x));
    if (x > max) v.fail("is too large (at most " + std::to_string(max) + "), found " + std::to_string(x));
    return x;
  }
  JsonReader& root_;
};

void require_multiple(HfFields& f, const std::string& key, int64_t value, const std::string& of_key, int64_t of) {
  if (of == 0 || value % of != 0) {
    f.fail_at(key, key + "=" + std::to_string(value) + " is not a multiple of " + of_key + "=" + std::to_string(of));
  }
}

// The share of `layers` layers that a repeating pattern makes local: every `period`-th layer
// (1-based) full, the others windowed or chunked — (i + 1) % period != 0, as transformers
// derives Gemma's layer_types from sliding_window_pattern and Llama 4's from
// no_rope_layer_interval.
double local_share(int layers, int64_t period) {
  const int64_t full = period > 0 ? layers / period : 0;
  return static_cast<double>(layers - full) / static_cast<double>(layers);
}

// The share of a layer_types list's `layers` entries that name `kind`; every other entry must be
// "full_attention".
double layer_types_share(HfFields& f, int layers, const std::string& kind) {
  JsonReader types = f.at("layer_types");
  const auto entries = types.elements();
  if (entries.size() != static_cast<size_t>(layers)) types.fail("expected one entry per layer");
  double n = 0;
  for (const JsonReader& t : entries) {
    const std::string s = t.as_string();
    if (s != kind && s != "full_attention") t.fail("unknown layer type \"" + s + "\" (expected " + kind + " or full_attention)");
    n += s == kind ? 1 : 0;
  }
  return n / static_cast<double>(layers);
}

// Sliding-window attention as transformers reads it: `sliding_window` (MistralConfig's default
// 4096, null = full attention; Qwen2/3 only with `use_sliding_window`, on the layers from
// `max_window_layers` on), or the share of "sliding_attention" entries in `layer_types`.
void read_sliding_window(HfFields& f, HfFamily family, ModelConfig& m) {
  const bool qwen = family == HfFamily::kQwen2 || family == HfFamily::kQwen3 || family == HfFamily::kQwen2Moe ||
                    family == HfFamily::kQwen3Moe;
  if (qwen && !f.flag_or("use_sliding_window", false)) return;
  // MistralConfig's and Olmo3Config's default window.
  const int64_t fallback = family == HfFamily::kMistral || family == HfFamily::kOlmo3 ? 4096 : 0;
  m.sliding_window = f.present("sliding_window") ? f.positive("sliding_window") : (f.has("sliding_window") ? 0 : fallback);
  if (m.sliding_window == 0) return;
  if (f.present("layer_types")) {
    m.sliding_window_layers = layer_types_share(f, m.layers, "sliding_attention");
  } else if (family == HfFamily::kGptOss) {
    m.sliding_window_layers = 0.5;  // GptOssConfig's default layer_types: sliding, full, sliding, …
  } else if (family == HfFamily::kOlmo3) {
    m.sliding_window_layers = local_share(m.layers, 4);  // Olmo3Config's: full every 4th layer
  } else if (qwen) {
    const int64_t full = std::min<int64_t>(f.non_negative_or("max_window_layers", m.layers, kMaxCount), m.layers);
    m.sliding_window_layers = static_cast<double>(m.layers - full) / static_cast<double>(m.layers);
  }
}

// What Llama-like decoders share: sizes, GQA heads (head_dim as given, else the configuration
// class's default where it has one, else hidden / heads), vocabulary, context and tied
// embeddings, RMSNorm and rotary positions.
// `default_layers`: the count a family derives when the file leaves num_hidden_layers out.
void read_decoder_shape(HfFields& f, ModelConfig& m, std::optional<int64_t> default_head_dim = std::nullopt,
                        std::optional<int64_t> default_layers = std::nullopt) {
  m.layers = default_layers && !f.present("num_hidden_layers") ? *default_layers : f.count("num_hidden_layers");
  m.hidden = f.positive("hidden_size");
  m.heads = f.count("num_attention_heads");
  m.kv_heads = f.count_or("num_key_value_heads", m.heads);
  require_multiple(f, "num_attention_heads", m.heads, "num_key_value_heads", m.kv_heads);
  if (f.present("head_dim")) {
    m.head_dim = f.positive("head_dim");
  } else if (default_head_dim) {
    m.head_dim = *default_head_dim;
  } else {
    require_multiple(f, "hidden_size", m.hidden, "num_attention_heads", m.heads);
    m.head_dim = m.hidden / m.heads;
  }
  m.vocab = f.positive("vocab_size");
  m.max_sequence = f.positive("max_position_embeddings");
  m.tied_embeddings = f.flag_or("tie_word_embeddings", false);
  m.norm = NormKind::kRmsNorm;
  m.position = PositionEmbedding::kRotary;
}

// The Llama family: Llama, Mistral, Mixtral, Qwen2/3 (dense and MoE) and OLMoE share these keys.
void read_llama_like(HfFields& f, HfFamily family, ModelConfig& m) {
  // Qwen3Config's head_dim defaults to 128; the others derive it from the hidden size.
  read_decoder_shape(f, m, family == HfFamily::kQwen3 ? std::optional<int64_t>(128) : std::nullopt);
  m.mlp = MlpKind::kGated;
  if (family == HfFamily::kQwen2 || family == HfFamily::kQwen2Moe) {
    // Qwen2's q/k/v projections always carry biases; its output projection never does.
    m.qkv_bias = true;
  } else {
    m.qkv_bias = m.attention_output_bias = f.flag_or("attention_bias", false);
  }
  m.mlp_bias = f.flag_or("mlp_bias", false);
  // OLMoE and OLMo 2/3 normalise the whole query and key projections, Qwen3 each head: the same
  // elements to compute (their gains, one per element rather than per head dimension, are not
  // counted).
  m.qk_norm = family == HfFamily::kQwen3 || family == HfFamily::kQwen3Moe || family == HfFamily::kOlmoe ||
              family == HfFamily::kOlmo2 || family == HfFamily::kOlmo3;
  m.attention_dropout = f.probability_or("attention_dropout", 0.0);
  read_sliding_window(f, family, m);
}

// Every layer a MoE whose experts are intermediate_size wide (Mixtral, GPT-OSS: num_local_experts;
// OLMoE: num_experts).
void read_mixtral_moe(HfFields& f, ModelConfig& m, const std::string& experts_key = "num_local_experts") {
  MoeConfig moe;
  moe.experts = f.count(experts_key);
  moe.top_k = f.count("num_experts_per_tok");
  if (moe.top_k > moe.experts) f.fail_at("num_experts_per_tok", "is larger than " + experts_key);
  moe.expert_ffn = f.positive("intermediate_size");
  m.ffn = moe.expert_ffn;
  m.moe = moe;
}

// GPT-OSS: Llama-like attention with biases (attention_bias, GptOssConfig's default true) and
// learned per-head softmax offsets ("sinks": one scalar a head, no compute to speak of), sliding
// windows on alternate layers, and every layer a Mixtral-like MoE whose experts carry biases
// (gate_up_proj_bias, down_proj_bias); its gated activation clamps its inputs at swiglu_limit
// (GptOssConfig's default 7.0; null: no clamp).
void read_gpt_oss(HfFields& f, ModelConfig& m) {
  read_llama_like(f, HfFamily::kGptOss, m);
  m.qkv_bias = m.attention_output_bias = f.flag_or("attention_bias", true);
  read_mixtral_moe(f, m);
  m.mlp_bias = true;
  m.glu_clamp = !f.has("swiglu_limit") || f.present("swiglu_limit");
}

// Qwen's MoE keys (Qwen2-MoE, Qwen3-MoE). Qwen2-MoE adds one shared expert of
// shared_expert_intermediate_size beside the routed ones; its sigmoid gate (one h-wide dot
// product a token) is not modelled.
void read_qwen_moe(HfFields& f, ModelConfig& m) {
  MoeConfig moe;
  moe.experts = f.count("num_experts");
  moe.top_k = f.count("num_experts_per_tok");
  if (moe.top_k > moe.experts) f.fail_at("num_experts_per_tok", "is larger than num_experts");
  moe.expert_ffn = f.positive("moe_intermediate_size");
  // Qwen's rule: layer i is sparse when (i + 1) % decoder_sparse_step == 0 and i is not in
  // mlp_only_layers; both become the explicit dense list.
  int step = f.count_or("decoder_sparse_step", 1);
  for (int i = 0; i < m.layers; ++i) {
    if ((i + 1) % step != 0) moe.dense_layers.push_back(i);
  }
  if (f.present("mlp_only_layers")) {
    for (const JsonReader& e : f.at("mlp_only_layers").elements()) {
      int64_t i = e.as_int();
      if (i < 0 || i >= m.layers) {
        e.fail("layer " + std::to_string(i) + " is outside 0.." + std::to_string(m.layers - 1));
      }
      moe.dense_layers.push_back(static_cast<int>(i));
    }
  }
  if (f.present("shared_expert_intermediate_size")) {
    moe.shared_experts = 1;
    moe.shared_expert_ffn = f.positive("shared_expert_intermediate_size");
  }
  m.moe = moe;
  if (m.moe_layer_count() < m.layers) m.ffn = f.positive("intermediate_size");
}

// DeepSeek's group-limited routing keys (DeepSeek-V3, Nemotron-H): n_group groups, the top-k
// within topk_group of them wherever topk_group is given (as Megatron's `if group_topk` reads it).
void read_router_groups(HfFields& f, MoeConfig& moe) {
  moe.router_group_topk = static_cast<int>(f.non_negative_or("topk_group", 0, kMaxCount));
  if (moe.router_group_topk > 0) moe.router_groups = f.count("n_group");
}

// DeepSeek's names for the routed and shared experts (DeepSeek-V3, Nemotron-H, GLM): each shared
// expert as wide as a routed one unless the family says otherwise; `shared` when the file gives
// no n_shared_experts (the configuration class's default).
MoeConfig read_routed_experts(HfFields& f, int shared = 0) {
  MoeConfig moe;
  moe.experts = f.count("n_routed_experts");
  moe.top_k = f.count("num_experts_per_tok");
  if (moe.top_k > moe.experts) f.fail_at("num_experts_per_tok", "is larger than n_routed_experts");
  moe.expert_ffn = f.positive("moe_intermediate_size");
  moe.shared_experts = static_cast<int>(f.non_negative_or("n_shared_experts", shared, kMaxCount));
  moe.shared_expert_ffn = moe.expert_ffn;
  return moe;
}

// DeepSeek's router: scoring_func sigmoid or softmax; topk_method noaux_tc, the scores' bias
// that chooses the experts, with the groups wherever topk_group is given. DeepseekV3Config's
// defaults are sigmoid and noaux_tc; DeepSeek-V2's softmax and greedy, whose groups count only
// under group_limited_greedy (V2-Lite writes n_group 1 beside greedy).
void read_deepseek_router(HfFields& f, HfFamily family, MoeConfig& moe) {
  const bool v2 = family == HfFamily::kDeepseekV2;
  if (f.present("scoring_func")) {
    JsonReader v = f.at("scoring_func");
    const auto score = router_score_from(v.as_string());
    if (!score) v.fail("unknown scoring function \"" + v.as_string() + "\" (expected sigmoid or softmax)");
    moe.router_score = *score;
  } else {
    moe.router_score = v2 ? RouterScore::kSoftmax : RouterScore::kSigmoid;
  }
  const std::string method = f.present("topk_method") ? f.at("topk_method").as_string() : (v2 ? "greedy" : "noaux_tc");
  moe.router_expert_bias = method == "noaux_tc";
  if (!v2 || method == "group_limited_greedy") read_router_groups(f, moe);
}

// DeepSeek-V2 and V3 (and Kimi K2): MLA attention, a DeepSeek MoE after the first dense layers.
void read_deepseek(HfFields& f, HfFamily family, ModelConfig& m) {
  m.layers = f.count("num_hidden_layers");
  m.hidden = f.positive("hidden_size");
  m.heads = f.count("num_attention_heads");
  m.kv_heads = f.count_or("num_key_value_heads", m.heads);
  MlaConfig mla;
  mla.q_lora_rank = f.non_negative_or("q_lora_rank", 0);
  mla.kv_lora_rank = f.positive("kv_lora_rank");
  mla.qk_nope_head_dim = f.non_negative_or("qk_nope_head_dim", -1);
  if (mla.qk_nope_head_dim < 0) f.at("qk_nope_head_dim").fail("expected a non-negative integer, found null");
  mla.qk_rope_head_dim = f.positive("qk_rope_head_dim");
  mla.v_head_dim = f.positive("v_head_dim");
  m.mla = mla;
  m.head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
  m.vocab = f.positive("vocab_size");
  m.max_sequence = f.positive("max_position_embeddings");
  m.tied_embeddings = f.flag_or("tie_word_embeddings", false);
  m.mlp = MlpKind::kGated;
  m.norm = NormKind::kRmsNorm;
  m.position = PositionEmbedding::kRotary;
  m.qkv_bias = m.attention_output_bias = f.flag_or("attention_bias", false);
  m.mtp_layers = static_cast<int>(f.non_negative_or("num_nextn_predict_layers", 0, kMaxCount));
  m.attention_dropout = f.probability_or("attention_dropout", 0.0);
  if (f.present("n_routed_experts")) {
    MoeConfig moe = read_routed_experts(f);
    moe.first_dense_layers = static_cast<int>(f.non_negative_or("first_k_dense_replace", 0, kMaxCount));
    moe.layer_frequency = f.count_or("moe_layer_freq", 1);
    read_deepseek_router(f, family, moe);
    m.moe = moe;
  }
  if (m.moe_layer_count() < m.layers) m.ffn = f.positive("intermediate_size");
}

// DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5): index_n_heads heads
// (`default_heads` where absent: DeepseekV32Config's 64, GlmMoeDsaConfig's 32) of index_head_dim
// (128), the top index_topk (2048) keys a query. GLM-5's layers marked "shared" reuse the last
// full layer's top-k: by indexer_types, else index_topk_pattern (F and S), else, as
// GlmMoeDsaConfig derives them, layer i is full where max(i − offset + 1, 0) is a multiple of
// index_topk_freq (default 1: every layer) for offset index_skip_topk_offset (default 2).
void read_sparse_attention(HfFields& f, ModelConfig& m, int default_heads) {
  SparseAttentionConfig a;
  a.index_heads = f.count_or("index_n_heads", default_heads);
  a.index_head_dim = f.positive_or("index_head_dim", 128);
  a.topk = f.positive_or("index_topk", 2048);
  std::optional<JsonReader> first;  // what says whether layer 0 runs an indexer
  const auto shared_from = [&](const std::string& key) {
    JsonReader list = f.at(key);
    const auto entries = list.elements();
    if (entries.size() != static_cast<size_t>(m.layers)) list.fail("expected one entry per layer");
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string v = entries[i].as_string();
      if (v != "full" && v != "shared") entries[i].fail("unknown indexer type \"" + v + "\" (expected full or shared)");
      if (v == "shared") a.shared_index_layers.push_back(static_cast<int>(i));
    }
    first = entries.front();
  };
  if (f.present("indexer_types")) {
    shared_from("indexer_types");
  } else if (f.present("index_topk_pattern") && !f.at("index_topk_pattern").raw().is_string()) {
    shared_from("index_topk_pattern");
  } else if (f.present("index_topk_pattern")) {
    JsonReader pattern = f.at("index_topk_pattern");
    const std::string p = pattern.as_string();
    if (p.size() != static_cast<size_t>(m.layers)) pattern.fail("expected one letter per layer");
    const size_t odd = p.find_first_not_of("FS");
    if (odd != std::string::npos) pattern.fail(std::string("'") + p[odd] + "' is not F (full) or S (shared)");
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == 'S') a.shared_index_layers.push_back(static_cast<int>(i));
    }
    first = pattern;
  } else {
    // As GlmMoeDsaConfig: a frequency of 0 counts as 1, any offset is taken.
    const int64_t freq = std::max<int64_t>(f.non_negative_or("index_topk_freq", 1, kMaxCount), 1);
    int64_t offset = 2;
    if (f.present("index_skip_topk_offset")) {
      JsonReader v = f.at("index_skip_topk_offset");
      offset = v.as_int();
      if (offset < -kMaxCount || offset > kMaxCount) v.fail("is out of range");
      first = v;
    }
    for (int i = 0; i < m.layers; ++i) {
      if (std::max<int64_t>(i - offset + 1, 0) % freq != 0) a.shared_index_layers.push_back(i);
    }
  }
  if (!a.shared_index_layers.empty() && a.shared_index_layers.front() == 0) {
    const std::string reason = "makes layer 0 reuse a top-k, but no indexer runs before it (the first layer must be full)";
    if (first) first->fail(reason);
    f.fail_at("index_topk_freq", reason);
  }
  m.sparse_attention = a;
}

// GLM-5 (GlmMoeDsaForCausalLM): DeepSeek-V3.2's attention (MLA with the DSA indexer) and MoE,
// with GlmMoeDsaConfig's defaults where the file leaves a key out: three dense layers first
// (first_k_dense_replace), or the layers mlp_layer_types marks "dense"; 32 index heads.
void read_glm_moe_dsa(HfFields& f, ModelConfig& m) {
  read_deepseek(f, HfFamily::kDeepseekV3, m);
  if (m.moe) {
    if (!f.present("first_k_dense_replace")) m.moe->first_dense_layers = 3;
    if (f.present("mlp_layer_types")) {
      m.moe->first_dense_layers = 0;
      m.moe->layer_frequency = 1;
      JsonReader list = f.at("mlp_layer_types");
      const auto entries = list.elements();
      if (entries.size() != static_cast<size_t>(m.layers)) list.fail("expected one entry per layer");
      for (size_t i = 0; i < entries.size(); ++i) {
        const std::string v = entries[i].as_string();
        if (v != "dense" && v != "sparse") entries[i].fail("unknown MLP type \"" + v + "\" (expected dense or sparse)");
        if (v == "dense") m.moe->dense_layers.push_back(static_cast<int>(i));
      }
    }
    if (m.moe_layer_count() < m.layers) m.ffn = f.positive("intermediate_size");
  }
  read_sparse_attention(f, m, 32);
}

// GLM-4.5 and its successors (Glm4MoeForCausalLM): GQA attention whose q/k/v projections carry
// biases (attention_bias) and the output projection none, per-head query/key norms (use_qk_norm),
// then a DeepSeek-style MoE after first_k_dense_replace dense layers: routed and shared experts of
// moe_intermediate_size, a sigmoid router with the score bias that chooses the experts
// (Glm4MoeTopkRouter's e_score_correction_bias), groups only where n_group > 1, and
// num_nextn_predict_layers MTP modules. Defaults are Glm4MoeConfig's. Not modelled: that rotary
// embedding covers only partial_rotary_factor of each head (the rotary pass is a few µs).
void read_glm4_moe(HfFields& f, ModelConfig& m) {
  read_decoder_shape(f, m);
  m.mlp = MlpKind::kGated;
  m.qkv_bias = f.flag_or("attention_bias", false);
  m.qk_norm = f.flag_or("use_qk_norm", false);
  m.attention_dropout = f.probability_or("attention_dropout", 0.0);
  m.mtp_layers = static_cast<int>(f.non_negative_or("num_nextn_predict_layers", 0, kMaxCount));
  MoeConfig moe = read_routed_experts(f, 1);
  moe.first_dense_layers = static_cast<int>(f.non_negative_or("first_k_dense_replace", 1, kMaxCount));
  moe.router_score = RouterScore::kSigmoid;
  moe.router_expert_bias = true;
  if (f.non_negative_or("n_group", 1, kMaxCount) > 1) read_router_groups(f, moe);
  m.moe = moe;
  if (m.moe_layer_count() < m.layers) m.ffn = f.positive("intermediate_size");
}

// A list of layer types as newer transformers writes them ("mamba", "attention", "mlp", "moe"),
// as Megatron's pattern characters.
std::string read_block_types(const JsonReader& list) {
  std::string pattern;
  for (const JsonReader& e : list.elements()) {
    const std::string kind = e.as_string();
    if (kind == "mamba") pattern += 'M';
    else if (kind == "attention") pattern += '*';
    else if (kind == "mlp") pattern += '-';
    else if (kind == "moe") pattern += 'E';
    else e.fail("unknown layer type \"" + kind + "\" (expected mamba, attention, mlp or moe)");
  }
  return pattern;
}

// A hybrid layer pattern as Megatron writes it (hybrid_override_pattern: M, *, -, E), or as
// newer transformers lists it (layers_block_type).
std::string read_hybrid_pattern(HfFields& f) {
  if (f.present("hybrid_override_pattern")) return f.at("hybrid_override_pattern").as_string();
  if (!f.present("layers_block_type")) f.at("hybrid_override_pattern");  // fails: missing
  return read_block_types(f.at("layers_block_type"));
}

// Nemotron-H and Nemotron 3 (NemotronHForCausalLM): Megatron's hybrid layers — Mamba-2 mixers
// (mamba_num_heads × mamba_head_dim, ssm_state_size, n_groups, conv_kernel, chunk_size), GQA
// attention, and squared-ReLU MLPs (mlp_hidden_act relu2: two matrices, as a plain MLP) or
// MoEs of them with a shared expert, latent (moe_latent_size: Nemotron 3 Super) or not, and
// multi-token prediction modules of one attention and one MoE layer (num_nextn_predict_layers with
// mtp_hybrid_override_pattern "*E", what ModelConfig::mtp_layers models; another pattern is
// refused). Not modelled: that these attention layers have no rotary embedding (the rotary pass
// on a few layers is a few µs).
void read_nemotron_h(HfFields& f, ModelConfig& m) {
  // transformers 5 derives num_hidden_layers from layers_block_type and does not write it
  // (Nemotron 3 Ultra's config.json has none).
  m.hybrid_pattern = read_hybrid_pattern(f);
  read_decoder_shape(f, m, std::nullopt, static_cast<int64_t>(m.hybrid_pattern.size()));
  m.qkv_bias = m.attention_output_bias = f.flag_or("attention_bias", false);
  m.mlp_bias = f.flag_or("mlp_bias", false);
  m.attention_dropout = f.probability_or("attention_dropout", 0.0);
  if (f.present("mlp_hidden_act")) {
    const std::string act = f.at("mlp_hidden_act").as_string();
    if (act != "relu2") f.fail_at("mlp_hidden_act", "\"" + act + "\" is not modelled (expected relu2)");
  }
  m.mlp = MlpKind::kPlain;
  m.mtp_layers = static_cast<int>(f.non_negative_or("num_nextn_predict_layers", 0, kMaxCount));
  if (m.mtp_layers > 0) {
    // Megatron's pattern string, or the list newer transformers write (mtp_layers_block_type).
    std::string key = "num_nextn_predict_layers", mtp;
    if (f.present("mtp_hybrid_override_pattern")) {
      key = "mtp_hybrid_override_pattern";
      mtp = f.at(key).as_string();
    } else if (f.present("mtp_layers_block_type")) {
      key = "mtp_layers_block_type";
      mtp = read_block_types(f.at(key));
    }
    if (mtp != "*E") {
      f.fail_at(key, "a multi-token prediction module other than one attention and one MoE layer (\"*E\") is not modelled");
    }
  }
  MambaConfig mamba;
  mamba.heads = f.count("mamba_num_heads");
  mamba.head_dim = f.positive("mamba_head_dim");
  mamba.state = f.positive("ssm_state_size");
  mamba.groups = f.count_or("n_groups", 1);
  mamba.conv_kernel = f.count_or("conv_kernel", 4);
  mamba.chunk = f.positive_or("chunk_size", 128);
  m.mamba = mamba;
  if (m.hybrid_pattern.find('E') != std::string::npos) {
    MoeConfig moe = read_routed_experts(f);
    moe.shared_expert_ffn = f.positive_or("moe_shared_expert_intermediate_size", moe.expert_ffn);
    moe.latent = f.non_negative_or("moe_latent_size", 0);
    // transformers' NemotronHTopkRouter: sigmoid scores with e_score_correction_bias, as
    // Megatron-Bridge's NemotronH bridge sets them (moe_router_score_function sigmoid,
    // moe_router_enable_expert_bias).
    moe.router_score = RouterScore::kSigmoid;
    moe.router_expert_bias = true;
    read_router_groups(f, moe);
    m.moe = moe;
  }
  if (m.mtp_layers > 0 && !m.moe) f.fail_at("num_nextn_predict_layers", "its MoE layer needs n_routed_experts");
  if (m.hybrid_pattern.find('-') != std::string::npos) m.ffn = f.positive("intermediate_size");
}

void read_gpt2(HfFields& f, ModelConfig& m) {
  m.layers = f.count("n_layer");
  m.hidden = f.positive("n_embd");
  m.heads = f.count("n_head");
  m.kv_heads = m.heads;
  require_multiple(f, "n_embd", m.hidden, "n_head", m.heads);
  m.head_dim = m.hidden / m.heads;
  m.ffn = f.positive_or("n_inner", 4 * m.hidden);
  m.vocab = f.positive("vocab_size");
  m.max_sequence = f.positive("n_positions");
  m.tied_embeddings = f.flag_or("tie_word_embeddings", true);
  m.mlp = MlpKind::kPlain;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionEmbedding::kLearned;
  m.qkv_bias = m.attention_output_bias = m.mlp_bias = true;
  // GPT2Config's defaults: 0.1 on the attention probabilities and on each residual branch.
  m.attention_dropout = f.probability_or("attn_pdrop", 0.1);
  m.hidden_dropout = f.probability_or("resid_pdrop", 0.1);
}

void read_gpt_neox(HfFields& f, ModelConfig& m) {
  m.layers = f.count("num_hidden_layers");
  m.hidden = f.positive("hidden_size");
  m.heads = f.count("num_attention_heads");
  m.kv_heads = m.heads;
  require_multiple(f, "hidden_size", m.hidden, "num_attention_heads", m.heads);
  m.head_dim = m.hidden / m.heads;
  m.ffn = f.positive("intermediate_size");
  m.vocab = f.positive("vocab_size");
  m.max_sequence = f.positive("max_position_embeddings");
  m.tied_embeddings = f.flag_or("tie_word_embeddings", false);
  m.mlp = MlpKind::kPlain;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionEmbedding::kRotary;
  m.qkv_bias = m.attention_output_bias = f.flag_or("attention_bias", true);
  m.mlp_bias = true;
  m.attention_dropout = f.probability_or("attention_dropout", 0.0);
  m.hidden_dropout = f.probability_or("hidden_dropout", 0.0);
  m.parallel_block = f.flag_or("use_parallel_residual", true);  // GPTNeoXConfig's default
}

// Gemma 1, 2 and 3 (GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, and Gemma 3's
// multimodal wrapper through its text_config): Llama-like GQA with head_dim 256 unless given,
// a gated GELU MLP (GeGLU: three matrices, as SwiGLU), tied embeddings, no biases. Gemma 2
// windows alternate layers (sliding_window 4096), Gemma 3 five of every six
// (sliding_window_pattern 6, window 4096 unless given: the released checkpoints set 1024) and
// normalises each head's queries and keys. The keys the released Gemma 3 files leave out take
// Gemma3TextConfig's defaults (vocabulary 262,208, 131,072 positions, 8 heads and 4 KV heads).
// Not modelled: the extra RMSNorms after attention and after the MLP (two memory-bound passes a
// layer), Gemma 2's logit soft-capping (a tanh per attention score and per logit).
void read_gemma(HfFields& f, HfFamily family, ModelConfig& m) {
  const bool gemma3 = family == HfFamily::kGemma3;
  m.layers = f.count("num_hidden_layers");
  m.hidden = f.positive("hidden_size");
  // GemmaConfig's 16 heads and 16 KV heads, Gemma2Config's and Gemma3TextConfig's 8 and 4.
  const bool gemma1 = family == HfFamily::kGemma;
  m.heads = f.count_or("num_attention_heads", gemma1 ? 16 : 8);
  m.kv_heads = f.count_or("num_key_value_heads", gemma1 ? 16 : 4);
  require_multiple(f, "num_attention_heads", m.heads, "num_key_value_heads", m.kv_heads);
  m.head_dim = f.positive_or("head_dim", 256);
  m.ffn = f.positive("intermediate_size");
  m.vocab = f.positive_or("vocab_size", gemma3 ? 262208 : 256000);
  m.max_sequence = f.positive_or("max_position_embeddings", gemma3 ? 131072 : 8192);
  m.tied_embeddings = f.flag_or("tie_word_embeddings", true);
  m.mlp = MlpKind::kGated;
  m.norm = NormKind::kRmsNorm;
  m.position = PositionEmbedding::kRotary;
  m.qkv_bias = m.attention_output_bias = f.flag_or("attention_bias", false);
  m.qk_norm = gemma3;
  m.attention_dropout = f.probability_or("attention_dropout", 0.0);
  if (family == HfFamily::kGemma) return;
  m.sliding_window = f.present("sliding_window") ? f.positive("sliding_window") : (f.has("sliding_window") ? 0 : 4096);
  if (m.sliding_window == 0) return;
  if (f.present("layer_types")) {
    m.sliding_window_layers = layer_types_share(f, m.layers, "sliding_attention");
  } else {
    m.sliding_window_layers = local_share(m.layers, gemma3 ? f.positive_or("sliding_window_pattern", 6) : 2);
  }
}

// Llama 4 (Llama4ForCausalLM; Llama4ForConditionalGeneration through its text_config, model
// type llama4_text): GQA with query/key norms (use_qk_norm, default true: Llama 4's are weightless
// L2 norms on its rope layers, counted here as the per-head RMSNorm on every layer, 2·head_dim
// gains a layer too many), chunked attention (attention_chunk_size, default 8192) on the layers
// with rotary embeddings — those marked 1 in no_rope_layers, or where that list is absent or
// empty all but every no_rope_layer_interval-th (default 4); the rest are NoPE layers of full
// attention — and MoE layers of num_local_experts experts of intermediate_size, top
// num_experts_per_tok by a sigmoid router, each with one shared expert of the same width, on
// every interleave_moe_layer_step-th layer (or those listed in moe_layers); the other layers are
// dense MLPs of intermediate_size_mlp. Where the file leaves one of these keys out,
// Llama4TextConfig's default (head_dim 128); the sizes, vocabulary and context are required.
void read_llama4(HfFields& f, ModelConfig& m) {
  read_decoder_shape(f, m, 128);
  m.mlp = MlpKind::kGated;
  m.qkv_bias = m.attention_output_bias = f.flag_or("attention_bias", false);
  m.qk_norm = f.flag_or("use_qk_norm", true);
  m.attention_dropout = f.probability_or("attention_dropout", 0.0);
  m.attention_chunk = f.present("attention_chunk_size") ? f.positive("attention_chunk_size")
                                                         : (f.has("attention_chunk_size") ? 0 : 8192);
  if (m.attention_chunk > 0) {
    if (f.present("layer_types")) {
      m.attention_chunk_layers = layer_types_share(f, m.layers, "chunked_attention");
    } else if (f.present("no_rope_layers") && !f.at("no_rope_layers").elements().empty()) {
      JsonReader list = f.at("no_rope_layers");
      const auto entries = list.elements();
      if (entries.size() != static_cast<size_t>(m.layers)) list.fail("expected one entry per layer");
      double rope = 0;
      for (const JsonReader& e : entries) rope += e.as_int() != 0 ? 1 : 0;
      m.attention_chunk_layers = rope / static_cast<double>(m.layers);
    } else {
      // An absent or empty list: every no_rope_layer_interval-th layer NoPE (Llama4TextConfig).
      m.attention_chunk_layers = local_share(m.layers, f.positive_or("no_rope_layer_interval", 4));
    }
  }
  MoeConfig moe;
  moe.experts = f.count_or("num_local_experts", 16);
  moe.top_k = f.count_or("num_experts_per_tok", 1);
  if (moe.top_k > moe.experts) f.fail_at("num_experts_per_tok", "is larger than num_local_experts");
  moe.expert_ffn = f.positive_or("intermediate_size", 8192);
  moe.shared_experts = 1;
  moe.shared_expert_ffn = moe.expert_ffn;
  moe.router_score = RouterScore::kSigmoid;
  if (f.present("moe_layers")) {
    std::vector<bool> sparse(static_cast<size_t>(m.layers), false);
    for (const JsonReader& e : f.at("moe_layers").elements()) {
      const int64_t i = e.as_int();
      if (i < 0 || i >= m.layers) e.fail("layer " + std::to_string(i) + " is outside 0.." + std::to_string(m.layers - 1));
      sparse[static_cast<size_t>(i)] = true;
    }
    for (int i = 0; i < m.layers; ++i) {
      if (!sparse[static_cast<size_t>(i)]) moe.dense_layers.push_back(i);
    }
    if (moe.dense_layers.size() == static_cast<size_t>(m.layers)) {  // moe_layers []: a dense model
      m.ffn = f.positive_or("intermediate_size_mlp", 16384);
      return;
    }
  } else {
    const int step = f.count_or("interleave_moe_layer_step", 1);
    for (int i = 0; i < m.layers; ++i) {
      if ((i + 1) % step != 0) moe.dense_layers.push_back(i);
    }
  }
  m.moe = moe;
  if (m.moe_layer_count() < m.layers) m.ffn = f.positive_or("intermediate_size_mlp", 16384);
}

// Qwen3-Next and Qwen3.5 (Qwen3NextForCausalLM; Qwen3_5ForCausalLM and Qwen3_5MoeForCausalLM, and
// their multimodal wrappers through text_config): each decoder layer a token mixer — Gated
// DeltaNet linear attention, or every full_attention_interval-th layer (layer_types where given)
// gated GQA attention with per-head query/key norms — then a MoE (num_experts of
// moe_intermediate_size, top num_experts_per_tok by softmax, and a shared expert of
// shared_expert_intermediate_size) or, on Qwen's dense layers, an MLP of intermediate_size. The
// decoder layer becomes two blocks of the hybrid pattern (M or *, then E or -), as Nemotron-H's.
// Gated DeltaNet is costed as the Mamba-2 mixer of the same shape: linear_num_value_heads heads
// of linear_value_head_dim, a state of linear_key_head_dim per head, linear_num_key_heads groups
// (queries and keys as Mamba's C and B), the short convolution of linear_conv_kernel_dim over
// them and the values, a gated RMSNorm, the output projection; chunks of 64 (the flash-linear-
// attention kernels'). Not modelled: the delta rule's per-chunk triangular solve (C²·d_k a
// chunk and head, beside the scan's C·(d_k + d_v) per token), the queries' and keys' L2 norms,
// the partial rotary embedding, the shared expert's sigmoid gate. mtp_num_hidden_layers MTP
// modules of one attention block and the model's MoE or MLP. Qwen3_5ForCausalLM (qwen3_5_text)
// is dense; the others MoE. Defaults are Qwen3NextConfig's.
void read_qwen3_next(HfFields& f, HfFamily family, ModelConfig& m) {
  const int decoder_layers = f.count("num_hidden_layers");
  std::vector<bool> linear(static_cast<size_t>(decoder_layers));
  if (f.present("layer_types")) {
    JsonReader types = f.at("layer_types");
    const auto entries = types.elements();
    if (entries.size() != static_cast<size_t>(decoder_layers)) types.fail("expected one entry per layer");
    for (size_t i = 0; i < entries.size(); ++i) {
      // Qwen3.5's older names, as its config class remaps them: attention, mamba.
      const std::string t = entries[i].as_string();
      const bool is_linear = t == "linear_attention" || t == "mamba";
      if (!is_linear && t != "full_attention" && t != "attention") {
        entries[i].fail("unknown layer type \"" + t + "\" (expected linear_attention or full_attention)");
      }
      linear[i] = is_linear;
    }
  } else {
    const int64_t interval = f.positive_or("full_attention_interval", 4);
    for (int i = 0; i < decoder_layers; ++i) linear[static_cast<size_t>(i)] = (i + 1) % interval != 0;
  }
  const bool moe = family != HfFamily::kQwen35;
  std::vector<bool> sparse(static_cast<size_t>(decoder_layers), moe);
  if (moe) {
    const int step = f.count_or("decoder_sparse_step", 1);
    for (int i = 0; i < decoder_layers; ++i) sparse[static_cast<size_t>(i)] = (i + 1) % step == 0;
    if (f.present("mlp_only_layers")) {
      for (const JsonReader& e : f.at("mlp_only_layers").elements()) {
        const int64_t i = e.as_int();
        if (i < 0 || i >= decoder_layers) {
          e.fail("layer " + std::to_string(i) + " is outside 0.." + std::to_string(decoder_layers - 1));
        }
        sparse[static_cast<size_t>(i)] = false;
      }
    }
  }
  for (int i = 0; i < decoder_layers; ++i) {
    m.hybrid_pattern += linear[static_cast<size_t>(i)] ? 'M' : '*';
    m.hybrid_pattern += sparse[static_cast<size_t>(i)] ? 'E' : '-';
  }
  read_decoder_shape(f, m, 256, static_cast<int64_t>(m.hybrid_pattern.size()));
  m.layers = static_cast<int>(m.hybrid_pattern.size());
  m.mlp = MlpKind::kGated;
  m.qkv_bias = m.attention_output_bias = f.flag_or("attention_bias", false);
  m.qk_norm = true;
  m.attention_output_gate = true;
  m.attention_dropout = f.probability_or("attention_dropout", 0.0);
  MambaConfig mixer;
  mixer.heads = f.count_or("linear_num_value_heads", 32);
  mixer.head_dim = f.positive_or("linear_value_head_dim", 128);
  mixer.state = f.positive_or("linear_key_head_dim", 128);
  mixer.groups = f.count_or("linear_num_key_heads", 16);
  mixer.conv_kernel = f.count_or("linear_conv_kernel_dim", 4);
  mixer.chunk = 64;
  if (mixer.heads % mixer.groups != 0) {
    f.fail_at("linear_num_value_heads", "is not a multiple of linear_num_key_heads=" + std::to_string(mixer.groups));
  }
  m.mamba = mixer;
  if (moe) {
    MoeConfig e;
    e.experts = f.count("num_experts");
    e.top_k = f.count("num_experts_per_tok");
    if (e.top_k > e.experts) f.fail_at("num_experts_per_tok", "is larger than num_experts");
    e.expert_ffn = f.positive("moe_intermediate_size");
    e.shared_experts = 1;  // the sparse block always has one (Qwen3NextSparseMoeBlock)
    e.shared_expert_ffn = f.positive_or("shared_expert_intermediate_size", 512);
    m.moe = e;
  }
  if (m.hybrid_pattern.find('-') != std::string::npos) m.ffn = f.positive("intermediate_size");
  // An MTP module is a gated attention and the model's MLP or MoE, as the layers past the pattern
  // are (ModelConfig::layer_kind).
  m.mtp_layers = static_cast<int>(f.non_negative_or("mtp_num_hidden_layers", 0, kMaxCount));
}

std::optional<HfFamily> family_of_architecture(const std::string& a) {
  for (const auto& e : kHfArchitectures) {
    if (a == e.architecture) return e.family;
  }
  return std::nullopt;
}
std::optional<HfFamily> family_of_model_type(const std::string& t) {
  for (const auto& e : kHfArchitectures) {
    if (t == e.model_type) return e.family;
  }
  // Kimi K2 is DeepSeek-V3's architecture (its config.json names DeepseekV3ForCausalLM);
  // the multimodal K2.5 gives only this type in its text_config.
  if (t == "kimi_k2") return HfFamily::kDeepseekV3;
  return std::nullopt;
}

bool is_hf_config(const nlohmann::json& doc) {
  return doc.is_object() && (doc.contains("architectures") || doc.contains("model_type"));
}

// ------------------------------------------------------------------ the model block

int64_t positive_value(const JsonReader& v, int64_t max) {
  int64_t x = v.as_int();
  if (x <= 0) v.fail("must be a positive integer, found " + std::to_string(x));
  if (x > max) v.fail("is too large (at most " + std::to_string(max) + "), found " + std::to_string(x));
  return x;
}

int block_count(JsonReader& r, const std::string& key) {
  return static_cast<int>(positive_value(r.at(key), kMaxCount));
}
int64_t block_size(JsonReader& r, const std::string& key) { return positive_value(r.at(key), kMaxSize); }
// Optional keys go through find(), so that an unknown-key error lists them as accepted.
std::optional<int64_t> block_optional(JsonReader& r, const std::string& key, int64_t max) {
  auto v = r.find(key);
  if (!v) return std::nullopt;
  return positive_value(*v, max);
}
int64_t block_non_negative(JsonReader& r, const std::string& key, int64_t fallback, int64_t max = kMaxSize) {
  auto v = r.find(key);
  if (!v) return fallback;
  int64_t x = v->as_int();
  if (x < 0) v->fail("must be zero or more, found " + std::to_string(x));
  if (x > max) v->fail("is too large (at most " + std::to_string(max) + "), found " + std::to_string(x));
  return x;
}
bool block_flag(JsonReader& r, const std::string& key, bool fallback) {
  auto v = r.find(key);
  return v ? v->as_bool() : fallback;
}
double block_probability(JsonReader& r, const std::string& key) {
  auto v = r.find(key);
  return v ? probability_value(*v) : 0.0;
}
template <class E>
E block_choice(JsonReader& r, const std::string& key, E fallback,
               std::initializer_list<std::pair<const char*, E>> options) {
  auto v = r.find(key);
  if (!v) return fallback;
  std::string s = v->as_string();
  std::string names;
  for (const auto& [name, value] : options) {
    if (s == name) return value;
    names += (names.empty() ? "\"" : ", \"") + std::string(name) + "\"";
  }
  v->fail("unknown value \"" + s + "\" (expected " + names + ")");
}

MoeConfig read_moe_block(JsonReader r, int layers) {
  MoeConfig moe;
  moe.experts = block_count(r, "experts");
  moe.top_k = block_count(r, "top_k");
  if (moe.top_k > moe.experts) {
    r.fail_at("top_k", "top_k=" + std::to_string(moe.top_k) + " is larger than experts=" + std::to_string(moe.experts));
  }
  moe.expert_ffn = block_size(r, "expert_ffn");
  moe.shared_experts = static_cast<int>(block_non_negative(r, "shared_experts", 0, kMaxCount));
  moe.shared_expert_ffn = block_optional(r, "shared_expert_ffn", kMaxSize).value_or(moe.expert_ffn);
  moe.first_dense_layers = static_cast<int>(block_non_negative(r, "first_dense_layers", 0, kMaxCount));
  moe.layer_frequency = static_cast<int>(block_optional(r, "layer_frequency", kMaxCount).value_or(1));
  moe.latent = block_non_negative(r, "latent_size", 0);
  moe.router_score = block_choice(r, "router_score", RouterScore::kSoftmax,
                                  {{"softmax", RouterScore::kSoftmax}, {"sigmoid", RouterScore::kSigmoid}});
  moe.router_expert_bias = block_flag(r, "router_expert_bias", false);
  moe.router_groups = static_cast<int>(block_non_negative(r, "router_groups", 0, kMaxCount));
  moe.router_group_topk = static_cast<int>(block_non_negative(r, "router_group_topk", 0, kMaxCount));
  if (moe.router_group_topk > 0 && (moe.router_groups == 0 || moe.experts % moe.router_groups != 0)) {
    r.fail_at(r.find("router_groups") ? "router_groups" : "router_group_topk",
              "router_groups=" + std::to_string(moe.router_groups) + " does not divide experts=" + std::to_string(moe.experts));
  }
  if (auto list = r.find("dense_layers")) {
    for (const JsonReader& e : list->elements()) {
      int64_t i = e.as_int();
      if (i < 0 || i >= layers) e.fail("layer " + std::to_string(i) + " is outside 0.." + std::to_string(layers - 1));
      moe.dense_layers.push_back(static_cast<int>(i));
    }
  }
  r.finish();
  return moe;
}

MlaConfig read_mla_block(JsonReader r) {
  MlaConfig mla;
  mla.q_lora_rank = block_non_negative(r, "q_lora_rank", 0);
  mla.kv_lora_rank = block_size(r, "kv_lora_rank");
  r.at("qk_nope_head_dim");  // required, though zero is allowed
  mla.qk_nope_head_dim = block_non_negative(r, "qk_nope_head_dim", 0);
  mla.qk_rope_head_dim = block_size(r, "qk_rope_head_dim");
  mla.v_head_dim = block_size(r, "v_head_dim");
  r.finish();
  return mla;
}

SparseAttentionConfig read_sparse_attention_block(JsonReader r, int layers) {
  SparseAttentionConfig a;
  a.index_heads = block_count(r, "index_heads");
  a.index_head_dim = block_size(r, "index_head_dim");
  a.topk = block_size(r, "topk");
  if (auto list = r.find("shared_index_layers")) {
    for (const JsonReader& e : list->elements()) {
      const int64_t i = e.as_int();
      if (i < 0 || i >= layers) e.fail("layer " + std::to_string(i) + " is outside 0.." + std::to_string(layers - 1));
      if (std::find(a.shared_index_layers.begin(), a.shared_index_layers.end(), i) != a.shared_index_layers.end()) {
        e.fail("layer " + std::to_string(i) + " is listed twice");
      }
      if (i == 0) e.fail("layer 0 has no indexer before it whose top-k it could reuse");
      a.shared_index_layers.push_back(static_cast<int>(i));
    }
  }
  r.finish();
  return a;
}

MambaConfig read_mamba_block(JsonReader r) {
  MambaConfig a;
  a.heads = block_count(r, "heads");
  a.head_dim = block_size(r, "head_dim");
  a.state = block_size(r, "state");
  a.groups = static_cast<int>(block_optional(r, "groups", kMaxCount).value_or(1));
  a.conv_kernel = static_cast<int>(block_optional(r, "conv_kernel", kMaxCount).value_or(4));
  a.chunk = block_optional(r, "chunk", kMaxSize).value_or(128);
  r.finish();
  return a;
}

std::string stem_of(const std::string& path) { return fs::path(path).stem().string(); }

}  // namespace

namespace {

// The family a config names by `architectures[0]`, else by `model_type`; nullopt when neither
// is one we know (`unknown_at` then points at the name, if any, and `unknown_name` holds it).
std::optional<HfFamily> named_family(JsonReader& r, HfFields& f, std::optional<JsonReader>& unknown_at,
                                     std::string& unknown_name) {
  std::optional<HfFamily> family;
  if (f.present("architectures")) {
    JsonReader archs = r.at("architectures");
    auto list = archs.elements();
    if (list.empty()) archs.fail("is an empty list");
    unknown_name = list.front().as_string();
    family = family_of_architecture(unknown_name);
    if (!family) unknown_at = list.front();
  }
  if (!family && f.present("model_type")) {
    JsonReader type = r.at("model_type");
    family = family_of_model_type(type.as_string());
    if (!family && !unknown_at) {
      unknown_at = type;
      unknown_name = type.as_string();
    }
  }
  return family;
}

ModelConfig read_family(HfFamily family, JsonReader& r, HfFields& f, const std::string& file, const std::string& name) {
  ModelConfig m;
  m.name = name;
  m.source = file;
  switch (family) {
    case HfFamily::kLlama:
    case HfFamily::kMistral:
    case HfFamily::kQwen2:
    case HfFamily::kQwen3:
      read_llama_like(f, family, m);
      m.ffn = f.positive("intermediate_size");
      break;
    case HfFamily::kMixtral:
      read_llama_like(f, family, m);
      read_mixtral_moe(f, m);
      break;
    case HfFamily::kQwen2Moe:
    case HfFamily::kQwen3Moe:
      read_llama_like(f, family, m);
      read_qwen_moe(f, m);
      break;
    case HfFamily::kOlmoe:
      read_llama_like(f, family, m);
      read_mixtral_moe(f, m, "num_experts");
      break;
    case HfFamily::kDeepseekV2:
    case HfFamily::kDeepseekV3: read_deepseek(f, family, m); break;
    case HfFamily::kDeepseekV32:
      read_deepseek(f, HfFamily::kDeepseekV3, m);
      read_sparse_attention(f, m, 64);
      break;
    case HfFamily::kGlmMoeDsa: read_glm_moe_dsa(f, m); break;
    case HfFamily::kGlm4Moe: read_glm4_moe(f, m); break;
    case HfFamily::kGptOss: read_gpt_oss(f, m); break;
    case HfFamily::kNemotronH: read_nemotron_h(f, m); break;
    case HfFamily::kGpt2: read_gpt2(f, m); break;
    case HfFamily::kGptNeoX: read_gpt_neox(f, m); break;
    case HfFamily::kGemma:
    case HfFamily::kGemma2:
    case HfFamily::kGemma3: read_gemma(f, family, m); break;
    case HfFamily::kLlama4: read_llama4(f, m); break;
    case HfFamily::kQwen3Next:
    case HfFamily::kQwen35:
    case HfFamily::kQwen35Moe: read_qwen3_next(f, family, m); break;
    case HfFamily::kPhi3:
    case HfFamily::kOlmo2:
    case HfFamily::kOlmo3:
      read_llama_like(f, family, m);
      m.ffn = f.positive("intermediate_size");
      if (family == HfFamily::kPhi3) m.hidden_dropout = f.probability_or("resid_pdrop", 0.0);  // Phi3Config's
      break;
  }
  if (std::string p = m.problem(); !p.empty()) r.fail(p);
  return m;
}

}  // namespace

ModelConfig model_from_hf_config(const nlohmann::json& doc, const std::string& file, const std::string& name) {
  JsonReader root(doc, file);
  if (!doc.is_object()) root.fail(std::string("expected an object, found ") + doc.type_name());
  HfFields f(root);
  std::optional<JsonReader> unknown_at;  // where to point if nothing is recognised
  std::string unknown_name;
  if (auto family = named_family(root, f, unknown_at, unknown_name)) return read_family(*family, root, f, file, name);
  // A multimodal wrapper (Kimi-K2.5, the VL models) keeps its language model under text_config:
  // that is the model trained here, read from there.
  if (doc.contains("text_config") && doc["text_config"].is_object()) {
    JsonReader text = root.at("text_config");
    HfFields tf(text);
    std::optional<JsonReader> text_unknown_at;
    std::string text_unknown_name;
    if (auto family = named_family(text, tf, text_unknown_at, text_unknown_name)) {
      return read_family(*family, text, tf, file, name);
    }
  }
  if (!unknown_at) root.fail("neither \"architectures\" nor \"model_type\" says what model this is");
  unknown_at->fail("unknown architecture \"" + unknown_name + "\" (supported: " + supported_list() + ")");
}

ModelConfig model_from_block(JsonReader r) {
  ModelConfig m;
  m.source = r.file();
  m.name = r.at("name").as_string();
  if (auto d = r.find("description")) d->as_string();
  m.layers = block_count(r, "layers");
  m.hidden = block_size(r, "hidden");
  m.heads = block_count(r, "heads");
  m.kv_heads = static_cast<int>(block_optional(r, "kv_heads", kMaxCount).value_or(m.heads));
  if (m.heads % m.kv_heads != 0) {
    r.fail_at("kv_heads", "heads=" + std::to_string(m.heads) + " is not a multiple of kv_heads=" +
                              std::to_string(m.kv_heads));
  }
  if (auto head_dim = block_optional(r, "head_dim", kMaxSize)) {
    m.head_dim = *head_dim;
  } else {
    if (m.hidden % m.heads != 0) {
      r.fail_at("heads", "hidden=" + std::to_string(m.hidden) + " is not a multiple of heads=" +
                             std::to_string(m.heads) + " (give head_dim)");
    }
    m.head_dim = m.hidden / m.heads;
  }
  // relu2 (squared ReLU, Nemotron-H's) costs what a plain GELU MLP does: two matrices.
  m.mlp = block_choice(r, "mlp", MlpKind::kGated,
                       {{"swiglu", MlpKind::kGated}, {"gelu", MlpKind::kPlain}, {"relu2", MlpKind::kPlain}});
  m.vocab = block_size(r, "vocab");
  m.tied_embeddings = block_flag(r, "tied_embeddings", false);
  m.max_sequence = block_size(r, "max_sequence");
  m.norm = block_choice(r, "norm", NormKind::kRmsNorm,
                        {{"rmsnorm", NormKind::kRmsNorm}, {"layernorm", NormKind::kLayerNorm}});
  m.position = block_choice(r, "position_embedding", PositionEmbedding::kRotary,
                            {{"rotary", PositionEmbedding::kRotary}, {"learned", PositionEmbedding::kLearned}});
  m.qkv_bias = block_flag(r, "qkv_bias", false);
  m.attention_output_bias = block_flag(r, "attention_output_bias", false);
  m.mlp_bias = block_flag(r, "mlp_bias", false);
  m.glu_clamp = block_flag(r, "glu_clamp", false);
  m.qk_norm = block_flag(r, "qk_norm", false);
  m.attention_output_gate = block_flag(r, "attention_output_gate", false);
  m.attention_dropout = block_probability(r, "attention_dropout");
  m.hidden_dropout = block_probability(r, "hidden_dropout");
  m.sliding_window = block_non_negative(r, "sliding_window", 0, kMaxSize);
  if (auto v = r.find("sliding_window_layers")) {
    m.sliding_window_layers = v->as_number();
    if (!(m.sliding_window_layers >= 0 && m.sliding_window_layers <= 1)) v->fail("must be a share in [0, 1]");
  }
  m.attention_chunk = block_non_negative(r, "attention_chunk", 0, kMaxSize);
  if (auto v = r.find("attention_chunk_layers")) {
    m.attention_chunk_layers = v->as_number();
    if (!(m.attention_chunk_layers >= 0 && m.attention_chunk_layers <= 1)) v->fail("must be a share in [0, 1]");
  }
  m.parallel_block = block_flag(r, "parallel_block", false);
  if (auto moe = r.find("moe")) m.moe = read_moe_block(*moe, m.layers);
  if (auto mla = r.find("mla")) {
    m.mla = read_mla_block(*mla);
    m.head_dim = m.qk_head_dim();
    m.kv_heads = m.heads;
  }
  if (auto sparse = r.find("sparse_attention")) m.sparse_attention = read_sparse_attention_block(*sparse, m.layers);
  m.mtp_layers = static_cast<int>(block_non_negative(r, "mtp_layers", 0, kMaxCount));
  m.mtp_repeated = block_flag(r, "mtp_repeated", false);
  if (auto pattern = r.find("hybrid_pattern")) m.hybrid_pattern = pattern->as_string();
  if (auto mamba = r.find("mamba")) m.mamba = read_mamba_block(*mamba);
  if (auto ffn = block_optional(r, "ffn", kMaxSize)) {
    m.ffn = *ffn;
  } else if (m.any_dense_mlp()) {
    r.fail("missing required key \"ffn\" (some layers have a dense MLP)");
  }
  r.finish();
  if (std::string p = m.problem(); !p.empty()) r.fail(p);
  return m;
}

ModelConfig load_model_file(const std::string& path) {
  nlohmann::json doc = load_json_file(path);
  if (is_hf_config(doc)) return model_from_hf_config(doc, path, stem_of(path));
  return model_from_block(JsonReader(doc, path));
}

std::vector<std::string> bundled_model_names(const std::string& models_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(models_dir, ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string bundled_model_path(const std::string& models_dir, const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos) return {};
  fs::path p = fs::path(models_dir) / (name + ".json");
  std::error_code ec;
  return fs::is_regular_file(p, ec) ? p.string() : std::string();
}

namespace {
std::string bundled_list(const std::string& models_dir) {
  std::string out;
  for (const auto& n : bundled_model_names(models_dir)) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none in " + models_dir : out;
}
}  // namespace

ModelConfig load_bundled_model(const std::string& models_dir, const std::string& name) {
  std::string path = bundled_model_path(models_dir, name);
  if (path.empty()) {
    throw InputError("", "", "unknown model \"" + name + "\" (bundled: " + bundled_list(models_dir) + ")");
  }
  return load_model_file(path);
}

ModelConfig read_model(JsonReader value, const std::string& models_dir) {
  if (value.is_object()) return model_from_block(value);
  if (!value.is_string()) {
    value.fail(std::string("expected a model name, a model file path or a model object, found ") +
               value.raw().type_name());
  }
  std::string s = value.as_string();
  if (std::string path = bundled_model_path(models_dir, s); !path.empty()) return load_model_file(path);
  if (s.size() > 5 && s.compare(s.size() - 5, 5, ".json") == 0) {
    fs::path p(s);
    if (p.is_relative() && !value.file().empty()) p = fs::path(value.file()).parent_path() / p;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) value.fail("model file " + p.string() + " does not exist");
    return load_model_file(p.string());
  }
  value.fail("unknown model \"" + s + "\" (bundled: " + bundled_list(models_dir) + "; or give a path ending in .json)");
}

std::vector<std::string> supported_hf_architectures() {
  std::vector<std::string> out;
  for (const auto& a : kHfArchitectures) out.emplace_back(a.architecture);
  return out;
}

}  // namespace parallax
