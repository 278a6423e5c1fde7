// Model architectures: the bundled configs' parameter counts against the published figures,
// every supported Hugging Face architecture's defaults, the workloads' model block, and the
// loader's errors (file, JSON pointer, reason).
#include <gtest/gtest.h>

#include <functional>

#include "io/input_error.h"
#include "model/model_block.h"
#include "model/model_loader.h"
#include "model/parameter_count.h"
#include "test_support.h"

namespace parallax {
namespace {

std::string models_dir() { return test::source_path("workloads/models"); }
ParameterCounts parameters_of(const std::string& name) { return count_parameters(load_bundled_model(models_dir(), name)); }

// Published totals are given to 3–4 significant digits; 1 % covers the rounding and nothing else.
void expect_within_percent(int64_t counted, double published, double percent) {
  EXPECT_NEAR(static_cast<double>(counted), published, published * percent / 100.0)
      << "counted " << static_cast<double>(counted) / 1e9 << " B, published " << published / 1e9 << " B";
}

TEST(BundledModels, AllTwentyTwoAreThere) {
  EXPECT_EQ(bundled_model_names(models_dir()),
            (std::vector<std::string>{"deepseek-v2", "deepseek-v3", "deepseek-v3.2", "gemma-3-27b", "glm-4.5", "gpt-oss-120b", "gpt3-175b",
                                      "kimi-k2", "llama2-13b", "llama2-70b", "llama2-7b", "llama3-405b", "llama3-70b",
                                      "llama3-8b", "llama3.2-1b", "llama4-maverick", "llama4-scout", "mixtral-8x7b",
                                      "nemotron-3-nano", "nemotron-3-super", "phi-4", "qwen3-next-80b-a3b"}));
}

TEST(BundledModels, Llama2) {
  // 7B: per layer 4·4096² (MHA) + 3·4096·11008 + 2·4096 = 202,383,360 × 32 = 6,476,267,520;
  // embeddings 2·32000·4096 = 262,144,000; norm 4,096: 6,738,415,616, Meta's "6.74B".
  EXPECT_EQ(parameters_of("llama2-7b").total, 6'738'415'616);
  // 13B: (4·5120² + 3·5120·13824 + 2·5120) × 40 + 2·32000·5120 + 5120 = 13,015,864,320.
  EXPECT_EQ(parameters_of("llama2-13b").total, 13'015'864'320);
  // 70B: (2·8192² + 2·8192·1024 + 3·8192·28672 + 2·8192) × 80 + 2·32000·8192 + 8192 = 68,976,648,192.
  EXPECT_EQ(parameters_of("llama2-70b").total, 68'976'648'192);
}

TEST(BundledModels, Llama3_8B) {
  // Per layer: attention 2·4096² + 2·4096·1024 (GQA, 8 KV heads of 128) = 41,943,040;
  // SwiGLU 3·4096·14336 = 176,160,768; two RMSNorms 8,192 → 218,112,000 × 32 = 6,979,584,000.
  // Untied embedding and head 2·128256·4096 = 1,050,673,152; final norm 4,096.
  // Total 8,030,261,248: Meta's "8.03B".
  ParameterCounts p = parameters_of("llama3-8b");
  EXPECT_EQ(p.total, 8'030'261'248);
  EXPECT_EQ(p.embedding, 525'336'576);
  EXPECT_EQ(p.output_head, 525'336'576);
  EXPECT_EQ(p.active, p.total);
  expect_within_percent(p.total, 8.03e9, 1);
}

TEST(BundledModels, Llama3_2_1B) {
  // Per layer: 2·2048² + 2·2048·512 (8 KV heads of 64) = 10,485,760; 3·2048·8192 = 50,331,648;
  // norms 4,096 → 60,821,504 × 16 = 973,144,064; one tied embedding 128256·2048 = 262,668,288;
  // norm 2,048. Total 1,235,814,400: Meta's "1.23B" (the draft model of the serving examples).
  ParameterCounts p = parameters_of("llama3.2-1b");
  EXPECT_EQ(p.total, 1'235'814'400);
  EXPECT_EQ(p.embedding, 262'668'288);
  expect_within_percent(p.total, 1.23e9, 1);
}

TEST(BundledModels, Llama3_70B) {
  // Per layer: 2·8192² + 2·8192·1024 = 150,994,944; 3·8192·28672 = 704,643,072; norms 16,384
  // → 855,654,400 × 80 = 68,452,352,000; embeddings 2·128256·8192 = 2,101,346,304; norm 8,192.
  // Total 70,553,706,496: the published 70.55 B.
  ParameterCounts p = parameters_of("llama3-70b");
  EXPECT_EQ(p.total, 70'553'706'496);
  expect_within_percent(p.total, 70.55e9, 1);
}

TEST(BundledModels, Llama3_405B) {
  // Per layer: 2·16384² + 2·16384·1024 = 570,425,344; 3·16384·53248 = 2,617,245,696;
  // norms 32,768 → 3,187,703,808 × 126 = 401,650,679,808; embeddings 2·128256·16384 =
  // 4,202,692,608; norm 16,384. Total 405,853,388,800: the published 405.8 B.
  ParameterCounts p = parameters_of("llama3-405b");
  EXPECT_EQ(p.total, 405'853'388'800);
  expect_within_percent(p.total, 405.8e9, 1);
}

TEST(BundledModels, Gpt3_175B) {
  // GPT-2 layout, h = 12288: per layer 12h² (QKV 3h², out h², MLP 8h²) + 13h (biases 9h, two
  // LayerNorms 4h) = 1,812,099,072 × 96 = 173,961,510,912; tied token embedding 50257·h =
  // 617,558,016; learned positions 2048·h = 25,165,824; final LayerNorm 2h = 24,576.
  // Total 174,604,259,328 ≈ 174.6 B (the "175B" of Brown et al.).
  ParameterCounts p = parameters_of("gpt3-175b");
  EXPECT_EQ(p.total, 174'604'259'328);
  EXPECT_EQ(p.output_head, 0);
  EXPECT_EQ(p.embedding, 617'558'016 + 25'165'824);
  expect_within_percent(p.total, 174.6e9, 1);
  // The dense closed form 12·L·h² + embeddings, without biases and norms: 174.60 B as well.
  const double closed = 12.0 * 96 * 12288.0 * 12288.0 + 617'558'016 + 25'165'824;
  EXPECT_NEAR(static_cast<double>(p.total), closed, 0.0001 * closed);
}

TEST(BundledModels, Mixtral8x7B) {
  // Per layer: attention 41,943,040 (as Llama-3 8B); 8 experts of 3·4096·14336 = 176,160,768
  // → 1,409,286,144; router 8·4096 = 32,768; norms 8,192 → 1,451,270,144 × 32 = 46,440,644,608.
  // Embeddings 2·32000·4096 = 262,144,000; final norm 4,096. Total 46,702,792,704 (46.7 B).
  // Active: 2 of 8 experts → per layer 41,943,040 + 352,321,536 + 32,768 + 8,192 = 394,305,536
  // × 32 = 12,617,777,152, + 262,148,096 = 12,879,925,248 (12.9 B, embeddings included).
  ParameterCounts p = parameters_of("mixtral-8x7b");
  EXPECT_EQ(p.total, 46'702'792'704);
  EXPECT_EQ(p.active, 12'879'925'248);
  EXPECT_EQ(p.routed_experts, 32 * int64_t{1'409'286'144});
  expect_within_percent(p.total, 46.7e9, 1);
  expect_within_percent(p.active, 12.9e9, 1);
}

TEST(BundledModels, GptOss120B) {
  // Per layer (h 2880, 64 query heads and 8 KV heads of 64): q and out 2880·4096 = 11,796,480
  // each, k and v 2880·512 = 1,474,560 each, their biases 4,096 + 512 + 512 + 2,880 = 8,000;
  // 128 experts of gate/up 2·2880·2880 and down 2880·2880 = 24,883,200 with biases 8,640;
  // router 128·2880 = 368,640; two norms 5,760 → 3,213,080,000 × 36 = 115,670,880,000.
  // Embedding and head (untied) 2·201088·2880 = 1,158,266,880; final norm 2,880.
  // Total 116,829,149,760: OpenAI's 116.83 B (gpt-oss model card; its per-head sinks and router
  // biases, 2,304 and 4,608 parameters, are left out here).
  // Active: 4 of 128 experts → 126,491,840 a layer, × 36 + embeddings 5,711,976,000; without the
  // input embedding 5,132,842,560: the card's 5.13 B.
  ParameterCounts p = parameters_of("gpt-oss-120b");
  EXPECT_EQ(p.total, 116'829'149'760);
  EXPECT_EQ(p.active, 5'711'976'000);
  expect_within_percent(p.total, 116.83e9, 0.1);
  expect_within_percent(p.active_without_embedding(), 5.13e9, 0.1);
  const ModelConfig m = load_bundled_model(models_dir(), "gpt-oss-120b");
  EXPECT_EQ(m.sliding_window, 128);
  EXPECT_DOUBLE_EQ(m.sliding_window_layers, 0.5);
  EXPECT_TRUE(m.qkv_bias && m.attention_output_bias && m.mlp_bias);
  EXPECT_EQ(m.head_dim, 64);
}

TEST(BundledModels, Gemma3_27B) {
  // google/gemma-3-27b-it, read through its text_config (the SigLIP vision tower is not the
  // language model): 62 layers, h 5376, 32 query heads and 16 KV heads of 128, GeGLU of 21504,
  // tied embedding of Gemma3TextConfig's 262,208 tokens. Per layer: q and out 5376·4096 =
  // 22,020,096 each, k and v 5376·2048 = 11,010,048 each; MLP 3·5376·21504 = 346,816,512; two
  // norms 10,752 and the per-head query/key norms 256 → 412,887,808 × 62 = 25,599,044,096, and
  // the final norm 5,376: the Gemma 3 report's 25,600 M non-embedding parameters (Table 1; its
  // count has two more norms a layer, after attention and after the MLP, which cost nothing here).
  // Embedding 262,208·5376 = 1,409,630,208 (the report: 1,416 M).
  const ParameterCounts p = parameters_of("gemma-3-27b");
  EXPECT_EQ(p.total - p.embedding, 25'599'049'472);
  EXPECT_EQ(p.embedding, 1'409'630'208);
  EXPECT_EQ(p.output_head, 0);
  expect_within_percent(p.total - p.embedding, 25.6e9, 0.1);
  const ModelConfig m = load_bundled_model(models_dir(), "gemma-3-27b");
  EXPECT_EQ(m.sliding_window, 1024);
  EXPECT_DOUBLE_EQ(m.sliding_window_layers, 52.0 / 62);  // five of every six: layers 5, 11, … 59 global
  EXPECT_TRUE(m.qk_norm && m.tied_embeddings);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.mlp, MlpKind::kGated);
}

TEST(BundledModels, Llama4ScoutAndMaverick) {
  // meta-llama/Llama-4-Scout-17B-16E's text_config: 48 layers, h 5120, 40 query heads and 8 KV
  // heads of 128; every layer 16 experts of 8192, top-1, and a shared expert of 8192. Per layer:
  // attention 2·5120² + 2·5120·1024 = 62,914,560; experts 16·3·5120·8192 = 2,013,265,920; shared
  // 125,829,120; router 81,920; norms 10,240 and query/key norms 256 (gains the model counts for
  // every query/key norm; Llama 4's are weightless L2 norms, so 12,288 of the total are not in the
  // checkpoint) → 2,202,102,016 × 48 =
  // 105,700,896,768; untied embedding and head 2·202048·5120 = 2,068,971,520; final norm 5,120.
  // Total 107.77 B (Meta's 109 B counts the vision encoder too); active: one expert and the shared
  // one, 314,665,216 a layer → 17.17 B: Meta's "17B active".
  const ParameterCounts scout = parameters_of("llama4-scout");
  EXPECT_EQ(scout.total, 107'769'873'408);
  EXPECT_EQ(scout.active, 17'172'907'008);
  expect_within_percent(scout.active, 17e9, 1.5);
  const ModelConfig s = load_bundled_model(models_dir(), "llama4-scout");
  EXPECT_EQ(s.attention_chunk, 8192);
  EXPECT_DOUBLE_EQ(s.attention_chunk_layers, 0.75);  // NoPE layers 3, 7, … 47 attend to everything
  EXPECT_EQ(s.moe_layer_count(), 48);
  EXPECT_EQ(s.moe->router_score, RouterScore::kSigmoid);
  EXPECT_TRUE(s.qk_norm);
  // Maverick: 128 experts on every second layer (interleave_moe_layer_step 2: layers 1, 3, … 47),
  // dense MLPs of 16384 on the others, no query/key norms. Attention and norms 62,924,800 × 48
  // = 3,020,390,400; dense 24·3·5120·16384 = 6,039,797,760; MoE 24·(128·125,829,120 +
  // 125,829,120 + 655,360) = 389,582,684,160; embeddings 2,068,971,520; final norm 5,120 →
  // 400.71 B: Meta's 400 B total; active 17.18 B: "17B active".
  const ParameterCounts maverick = parameters_of("llama4-maverick");
  EXPECT_EQ(maverick.total, 400'711'848'960);
  expect_within_percent(maverick.total, 400e9, 0.5);
  expect_within_percent(maverick.active, 17e9, 1.5);
  const ModelConfig mv = load_bundled_model(models_dir(), "llama4-maverick");
  EXPECT_EQ(mv.moe_layer_count(), 24);
  EXPECT_TRUE(mv.is_moe_layer(1) && !mv.is_moe_layer(0));
  EXPECT_EQ(mv.ffn, 16384);
  EXPECT_FALSE(mv.qk_norm);
}

TEST(BundledModels, Phi4) {
  // microsoft/phi-4 (Phi3ForCausalLM): 40 layers, h 5120, 40 query heads and 10 KV heads of 128,
  // SwiGLU of 17920, untied vocabulary of 100,352. Per layer 2·5120² + 2·5120·1280 +
  // 3·5120·17920 + 2·5120 = 340,797,440 × 40 = 13,631,897,600; embeddings 2·100352·5120 =
  // 1,027,604,480; final norm 5,120: 14,659,507,200, Microsoft's 14.7 B.
  const ParameterCounts p = parameters_of("phi-4");
  EXPECT_EQ(p.total, 14'659'507'200);
  expect_within_percent(p.total, 14.7e9, 0.5);
  EXPECT_EQ(load_bundled_model(models_dir(), "phi-4").sliding_window, 0);  // "sliding_window": null
}

TEST(BundledModels, KimiK2) {
  // DeepSeek-V3's layer with 64 heads: MLA q 7168·1536 + 1536·64·192 = 29,884,416, kv
  // 7168·576 + 512·64·256 = 12,517,376, out 64·128·7168 = 58,720,256 → 101,122,048 + 2,048 norm gains.
  // One dense layer (3·7168·18432), 60 MoE layers of 384 + 1 shared experts of 3·7168·2048 and a
  // router 384·7168; two norms 14,336 a layer; embedding and head 2·163840·7168.
  // Total 1,026,408,209,408; active (8 of 384) 32,861,477,888.
  ParameterCounts p = parameters_of("kimi-k2");
  EXPECT_EQ(p.total, 1'026'408'209'408);
  EXPECT_EQ(p.active, 32'861'477'888);
  EXPECT_EQ(p.mtp, 0);
}

TEST(BundledModels, DeepSeekV3) {
  // MLA per layer (h 7168, 128 heads, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128):
  //   q: 7168·1536 + 1536·128·192 = 48,758,784;  kv: 7168·576 + 512·128·256 = 20,905,984;
  //   out: 128·128·7168 = 117,440,512 → 187,105,280 matrices + 2,048 latent-norm gains.
  // Dense layers (3): SwiGLU 3·7168·18432 = 396,361,728. MoE layers (58): 256 routed + 1 shared
  // experts of 3·7168·2048 = 44,040,192, router 256·7168 = 1,835,008. Two norms 14,336 a layer.
  // Embedding and head 2·129280·7168 = 1,853,358,080; final norm 7,168.
  // Total 671,026,404,352: DeepSeek's 671 B (which leaves out the 11.5 B MTP module).
  // Active: 8 of 256 routed experts → 37,552,282,624; without the input embedding (926,679,040)
  // 36,625,603,584: DeepSeek's "36.6 B (including 0.9 B for the output head)", rounded to 37 B.
  ParameterCounts p = parameters_of("deepseek-v3");
  EXPECT_EQ(p.total, 671'026'404'352);
  EXPECT_EQ(p.active, 37'552'282'624);
  expect_within_percent(p.total, 671e9, 1);
  expect_within_percent(p.active_without_embedding(), 36.6e9, 1);
  expect_within_percent(p.active, 37e9, 2);
  // MTP: 3 norms + 2h·h projection + one MoE layer (11,507,286,016) = 11,610,067,968; DeepSeek
  // says 11.5 B of unique MTP parameters — within 1 %, the remainder being how they round.
  EXPECT_EQ(p.mtp, 11'610'067'968);
  expect_within_percent(p.mtp, 11.5e9, 1.5);
}

TEST(BundledModels, DeepSeekV2) {
  // MLA per layer (h 5120, 128 heads, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128):
  //   q: 5120·1536 + 1536·128·192 = 45,613,056;  kv: 5120·576 + 512·128·256 = 19,726,336;
  //   out: 128·128·5120 = 83,886,080 → 149,225,472 + 2,048 latent-norm gains.
  // One dense layer (3·5120·12288 = 188,743,680); 59 MoE layers of 160 routed and 2 shared experts
  // of 3·5120·1536 = 23,592,960 and a router 160·5120. Two norms 10,240 a layer; embedding and
  // head 2·102400·5120; final norm 5,120. DeepSeek: 236 B total, 21 B active (6 of 160).
  const ModelConfig m = load_bundled_model(models_dir(), "deepseek-v2");
  ASSERT_TRUE(m.moe && m.mla);
  EXPECT_EQ(m.moe_layer_count(), 59);
  EXPECT_EQ(m.moe->shared_experts, 2);
  const ParameterCounts p = count_parameters(m);
  const int64_t attention = 149'225'472 + 2'048, expert = 23'592'960, norms = 10'240;
  const int64_t moe_layer_total = attention + 162 * expert + 160 * 5120 + norms;
  const int64_t dense_layer = attention + 188'743'680 + norms, outside = 2 * 102'400 * 5120 + 5120;
  EXPECT_EQ(p.total, dense_layer + 59 * moe_layer_total + outside);
  EXPECT_EQ(p.active, dense_layer + 59 * (moe_layer_total - 154 * expert) + outside);
  EXPECT_EQ(p.mtp, 0);
  expect_within_percent(p.total, 236e9, 1);
  expect_within_percent(p.active, 21e9, 2);  // 21.38 B with the embeddings
}

TEST(BundledModels, Glm45) {
  // GQA attention (h 5120, 96 heads and 8 KV heads of 128, q/k/v biases): 5120·12288 + 2·5120·1024
  // + 12288·5120 = 136,314,880 + 14,336 bias + 256 q/k norm gains. Three dense layers
  // (3·5120·12288); 89 MoE layers of 160 routed and one shared expert of 3·5120·1536 and a router
  // 160·5120. Embedding and head 2·151552·5120: 352.80 B, and 3.99 B in the MTP module (one more
  // MoE layer); 32.86 B active without the input embedding. Zhipu: 355 B total, 32 B active.
  const ModelConfig m = load_bundled_model(models_dir(), "glm-4.5");
  ASSERT_TRUE(m.moe);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.attention_output_bias);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_EQ(m.moe_layer_count(), 89);
  EXPECT_EQ(m.mtp_layers, 1);
  const ParameterCounts p = count_parameters(m);
  const int64_t attention = 136'314'880 + 14'336 + 256, expert = 3 * 5120 * 1536, norms = 10'240;
  const int64_t moe_layer_total = attention + 161 * expert + 160 * 5120 + norms;
  const int64_t dense_layer = attention + 3 * 5120 * 12288 + norms, outside = 2 * 151'552 * 5120 + 5120;
  EXPECT_EQ(p.total, 3 * dense_layer + 89 * moe_layer_total + outside);
  EXPECT_EQ(p.active, 3 * dense_layer + 89 * (moe_layer_total - 152 * expert) + outside);
  expect_within_percent(p.total + p.mtp, 355e9, 1);
  expect_within_percent(p.active_without_embedding(), 32e9, 3);
}

TEST(BundledModels, LayerKindsFollowTheConfig) {
  ModelConfig ds = load_bundled_model(models_dir(), "deepseek-v3");
  EXPECT_FALSE(ds.is_moe_layer(2));
  EXPECT_TRUE(ds.is_moe_layer(3));
  EXPECT_EQ(ds.moe_layer_count(), 58);
  ASSERT_TRUE(ds.mla.has_value());
  EXPECT_EQ(ds.qk_head_dim(), 192);
  EXPECT_EQ(ds.v_head_dim(), 128);
  ModelConfig mixtral = load_bundled_model(models_dir(), "mixtral-8x7b");
  EXPECT_EQ(mixtral.moe_layer_count(), 32);
  ModelConfig gpt3 = load_bundled_model(models_dir(), "gpt3-175b");
  EXPECT_EQ(gpt3.ffn, 4 * 12288);  // n_inner: null → 4·n_embd
  EXPECT_TRUE(gpt3.tied_embeddings);
  EXPECT_EQ(gpt3.mlp, MlpKind::kPlain);
  EXPECT_EQ(gpt3.name, "gpt3-175b");
}

// ---------------------------------------------------------------- other architectures

ModelConfig hf(const std::string& text) {
  return model_from_hf_config(parse_json_text(text, "config.json"), "config.json", "m");
}

TEST(HfConfig, Qwen3DefaultsHeadDimTo128AndHasQkNorms) {
  // Qwen3-8B's shape without head_dim: 4096 hidden, 32 heads → head_dim 128 by Qwen3Config's
  // default (not hidden/heads, which happens to agree here), q/k RMSNorms of 128 each.
  ModelConfig m = hf(R"({"architectures":["Qwen3ForCausalLM"],"hidden_size":4096,"num_hidden_layers":36,
    "num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":12288,"vocab_size":151936,
    "max_position_embeddings":40960,"tie_word_embeddings":false})");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_TRUE(m.qk_norm);
  // Qwen3-8B: per layer 2·4096·4096 + 2·4096·1024 + 3·4096·12288 + 2·4096 + 2·128 =
  // 41,943,040 + 150,994,944 + 8,192 + 256 = 192,946,432 × 36 = 6,946,071,552; embeddings
  // 2·151936·4096 = 1,244,659,712; norm 4,096 → 8,190,735,360 (Qwen's "8.2B").
  EXPECT_EQ(count_parameters(m).total, 8'190'735'360);
}

TEST(HfConfig, Qwen2HasQkvBiases) {
  // Qwen2.5-7B: 28 layers, 3584 hidden, 28 heads, 4 KV heads, 18944 ffn, vocab 152064.
  // Per layer: 2·3584² + 2·3584·512 + 3·3584·18944 + qkv bias (3584 + 2·512) + norms 7168
  // = 25,690,112 + 3,670,016 + 203,685,888 + 4,608 + 7,168 = 233,057,792 × 28 = 6,525,618,176;
  // embeddings 2·152064·3584 = 1,089,994,752; norm 3,584 → 7,615,616,512 (Qwen's "7.61B").
  ModelConfig m = hf(R"({"architectures":["Qwen2ForCausalLM"],"hidden_size":3584,"num_hidden_layers":28,
    "num_attention_heads":28,"num_key_value_heads":4,"intermediate_size":18944,"vocab_size":152064,
    "max_position_embeddings":131072,"tie_word_embeddings":false})");
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.attention_output_bias);
  EXPECT_EQ(count_parameters(m).total, 7'615'616'512);
}

TEST(HfConfig, MistralAndLlamaShareTheLayout) {
  // Mistral-7B-v0.1: 32 layers, 4096 hidden, 32 heads, 8 KV heads, 14336 ffn, vocab 32000.
  // 218,112,000 per layer (as Llama-3 8B) × 32 + 2·32000·4096 + 4096 = 7,241,732,096 ("7.24B").
  ModelConfig m = hf(R"({"architectures":["MistralForCausalLM"],"hidden_size":4096,"num_hidden_layers":32,
    "num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336,"vocab_size":32000,
    "max_position_embeddings":32768,"sliding_window":4096})");
  EXPECT_EQ(count_parameters(m).total, 7'241'732'096);
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(m.sliding_window_layers, 1.0);
}

TEST(HfConfig, SlidingWindowsAsTransformersReadsThem) {
  const std::string shape = R"("hidden_size":1024,"num_hidden_layers":8,"num_attention_heads":8,"intermediate_size":4096,
    "vocab_size":32000,"max_position_embeddings":32768)";
  // MistralConfig's default window is 4096; null is full attention (Mistral v0.2 on).
  EXPECT_EQ(hf(R"({"architectures":["MistralForCausalLM"],)" + shape + "}").sliding_window, 4096);
  EXPECT_EQ(hf(R"({"architectures":["MistralForCausalLM"],"sliding_window":null,)" + shape + "}").sliding_window, 0);
  EXPECT_EQ(hf(R"({"architectures":["LlamaForCausalLM"],)" + shape + "}").sliding_window, 0);
  // Qwen2 only with use_sliding_window, on the layers from max_window_layers on: 6 of 8.
  EXPECT_EQ(hf(R"({"architectures":["Qwen2ForCausalLM"],"sliding_window":4096,)" + shape + "}").sliding_window, 0);
  const ModelConfig q = hf(R"({"architectures":["Qwen2ForCausalLM"],"sliding_window":4096,"use_sliding_window":true,
    "max_window_layers":2,)" + shape + "}");
  EXPECT_EQ(q.sliding_window, 4096);
  EXPECT_DOUBLE_EQ(q.sliding_window_layers, 0.75);
  // layer_types: the share of sliding layers (Gemma-2-like alternation: a half).
  const ModelConfig alt = hf(R"({"architectures":["MistralForCausalLM"],"sliding_window":1024,"layer_types":
    ["sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention",
     "sliding_attention","full_attention"],)" + shape + "}");
  EXPECT_DOUBLE_EQ(alt.sliding_window_layers, 0.5);
  // GPT-NeoX's parallel residual is on unless the config turns it off.
  const std::string neox = R"({"architectures":["GPTNeoXForCausalLM"],"hidden_size":768,"num_hidden_layers":12,
    "num_attention_heads":12,"intermediate_size":3072,"vocab_size":50304,"max_position_embeddings":2048)";
  EXPECT_TRUE(hf(neox + "}").parallel_block);
  EXPECT_FALSE(hf(neox + R"(,"use_parallel_residual":false})").parallel_block);
}

TEST(HfConfig, GptOssAlternatesSlidingWindowsByDefaultAndBiasesItsAttention) {
  // gpt-oss-20b's shape without layer_types or attention_bias: GptOssConfig's defaults
  // alternate sliding and full layers and put biases on the attention projections.
  ModelConfig m = hf(R"({"model_type":"gpt_oss","hidden_size":2880,"num_hidden_layers":24,"num_attention_heads":64,
    "num_key_value_heads":8,"head_dim":64,"intermediate_size":2880,"num_local_experts":32,"num_experts_per_tok":4,
    "vocab_size":201088,"max_position_embeddings":131072,"sliding_window":128})");
  EXPECT_DOUBLE_EQ(m.sliding_window_layers, 0.5);
  EXPECT_EQ(m.sliding_window, 128);
  EXPECT_TRUE(m.qkv_bias && m.attention_output_bias && m.mlp_bias);
  EXPECT_TRUE(m.glu_clamp);  // GptOssConfig's default swiglu_limit, 7.0
  ASSERT_TRUE(m.moe.has_value());
  EXPECT_EQ(m.moe->experts, 32);
  EXPECT_EQ(m.moe->top_k, 4);
  EXPECT_EQ(m.moe_layer_count(), 24);
  // 20.9 B: OpenAI's gpt-oss-20b card says 20.91 B total, 3.61 B active.
  const ParameterCounts p = count_parameters(m);
  expect_within_percent(p.total, 20.91e9, 0.1);
  expect_within_percent(p.active_without_embedding(), 3.61e9, 0.5);
  // A null limit clamps nothing; the workloads' model block says glu_clamp and reads it back.
  EXPECT_FALSE(hf(R"({"model_type":"gpt_oss","hidden_size":2880,"num_hidden_layers":24,"num_attention_heads":64,
    "num_key_value_heads":8,"head_dim":64,"intermediate_size":2880,"num_local_experts":32,"num_experts_per_tok":4,
    "vocab_size":201088,"max_position_embeddings":131072,"swiglu_limit":null})").glu_clamp);
  const nlohmann::json doc = {{"model", model_block(m)}};
  EXPECT_EQ(doc.at("model").at("glu_clamp"), true);
  JsonReader root(doc, "w.json");
  EXPECT_TRUE(read_model(root.at("model"), models_dir()).glu_clamp);
}

// A multimodal wrapper's language model is read from its text_config: Kimi-K2.5's (model type
// kimi_k2, DeepSeek-V3's architecture with 384 experts and 64 heads).
TEST(HfConfig, TheLanguageModelOfAMultimodalWrapperIsItsTextConfig) {
  ModelConfig m = hf(R"({"architectures":["KimiK25ForConditionalGeneration"],"model_type":"kimi_k25",
    "vision_config":{"hidden_size":1152},
    "text_config":{"model_type":"kimi_k2","hidden_size":7168,"intermediate_size":18432,"moe_intermediate_size":2048,
      "num_hidden_layers":61,"num_attention_heads":64,"num_key_value_heads":64,"kv_lora_rank":512,"q_lora_rank":1536,
      "qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"n_routed_experts":384,"n_shared_experts":1,
      "num_experts_per_tok":8,"moe_layer_freq":1,"first_k_dense_replace":1,"max_position_embeddings":262144,
      "tie_word_embeddings":false,"vocab_size":163840}})");
  EXPECT_EQ(m.layers, 61);
  EXPECT_EQ(m.heads, 64);
  ASSERT_TRUE(m.mla.has_value());
  EXPECT_EQ(m.mla->kv_lora_rank, 512);
  ASSERT_TRUE(m.moe.has_value());
  EXPECT_EQ(m.moe->experts, 384);
  EXPECT_EQ(m.moe->top_k, 8);
  EXPECT_EQ(m.moe_layer_count(), 60);
  EXPECT_EQ(m.mtp_layers, 0);
  // A wrapper whose text_config names nothing we know points at the wrapper's own name.
  try {
    hf(R"({"architectures":["SomeVLForConditionalGeneration"],"text_config":{"model_type":"some_text"}})");
    ADD_FAILURE() << "an unknown wrapper was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/architectures/0: unknown architecture \"SomeVLForConditionalGeneration\""),
              std::string::npos)
        << e.what();
  }
}

TEST(HfConfig, GptNeoXHasBiasesEverywhereAndUntiedEmbeddings) {
  // Pythia-160M-like: 12 layers, 768 hidden, 12 heads, 3072 ffn, vocab 50304.
  // Per layer 12h² + 13h = 7,077,888 + 9,984 = 7,087,872 × 12 = 85,054,464; untied embeddings
  // 2·50304·768 = 77,266,944; final LayerNorm 1,536 → 162,322,944 (Pythia-160M's 162.3 M).
  ModelConfig m = hf(R"({"architectures":["GPTNeoXForCausalLM"],"hidden_size":768,"num_hidden_layers":12,
    "num_attention_heads":12,"intermediate_size":3072,"vocab_size":50304,"max_position_embeddings":2048})");
  EXPECT_EQ(m.position, PositionEmbedding::kRotary);
  EXPECT_EQ(count_parameters(m).total, 162'322'944);
}

TEST(HfConfig, Gpt2SmallMatchesItsPublishedCount) {
  // GPT-2 small: 12 layers of 12h² + 13h (h = 768) = 85,054,464; tied wte 50257·768 =
  // 38,597,376; wpe 1024·768 = 786,432; ln_f 1,536 → 124,439,808 (the well-known 124 M).
  ModelConfig m = hf(R"({"architectures":["GPT2LMHeadModel"],"n_embd":768,"n_layer":12,"n_head":12,
    "n_positions":1024,"vocab_size":50257})");
  EXPECT_EQ(count_parameters(m).total, 124'439'808);
  // GPT2Config's dropout defaults, 0.1 on the probabilities and the residual branches, unless
  // the file sets them.
  EXPECT_DOUBLE_EQ(m.attention_dropout, 0.1);
  EXPECT_DOUBLE_EQ(m.hidden_dropout, 0.1);
  m = hf(R"({"architectures":["GPT2LMHeadModel"],"n_embd":768,"n_layer":12,"n_head":12,
    "n_positions":1024,"vocab_size":50257,"attn_pdrop":0.0,"resid_pdrop":0.2})");
  EXPECT_DOUBLE_EQ(m.attention_dropout, 0.0);
  EXPECT_DOUBLE_EQ(m.hidden_dropout, 0.2);
}

TEST(HfConfig, DropoutKeysOfTheOtherFamilies) {
  // Llama-style configs carry attention_dropout (0.0 in the released models); GPT-NeoX both.
  ModelConfig llama = hf(R"({"architectures":["LlamaForCausalLM"],"hidden_size":256,"num_hidden_layers":2,
    "num_attention_heads":4,"intermediate_size":512,"vocab_size":100,"max_position_embeddings":64,
    "attention_dropout":0.05})");
  EXPECT_DOUBLE_EQ(llama.attention_dropout, 0.05);
  EXPECT_DOUBLE_EQ(llama.hidden_dropout, 0.0);
  ModelConfig neox = hf(R"({"architectures":["GPTNeoXForCausalLM"],"hidden_size":256,"num_hidden_layers":2,
    "num_attention_heads":4,"intermediate_size":512,"vocab_size":100,"max_position_embeddings":64,
    "attention_dropout":0.1,"hidden_dropout":0.1})");
  EXPECT_DOUBLE_EQ(neox.attention_dropout, 0.1);
  EXPECT_DOUBLE_EQ(neox.hidden_dropout, 0.1);
}

TEST(HfConfig, Qwen3MoeSparseStepAndDenseListBecomeDenseLayers) {
  // 6 layers, decoder_sparse_step 2: sparse where (i+1) % 2 == 0 → 1, 3, 5; mlp_only_layers [3]
  // makes 3 dense again → MoE layers 1 and 5.
  ModelConfig m = hf(R"({"model_type":"qwen3_moe","hidden_size":256,"num_hidden_layers":6,
    "num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"intermediate_size":512,"moe_intermediate_size":128,
    "num_experts":8,"num_experts_per_tok":2,"decoder_sparse_step":2,"mlp_only_layers":[3],"vocab_size":1000,
    "max_position_embeddings":512})");
  std::vector<int> moe_layers;
  for (int i = 0; i < m.layers; ++i) {
    if (m.is_moe_layer(i)) moe_layers.push_back(i);
  }
  EXPECT_EQ(moe_layers, (std::vector<int>{1, 5}));
}

TEST(HfConfig, Qwen2MoeHasASharedExpertOfItsOwnWidth) {
  // Qwen1.5-MoE-A2.7B's config.json (Qwen/Qwen1.5-MoE-A2.7B, the keys that shape its cost):
  // 60 routed experts of 1408, top-4, one shared expert of 5632, q/k/v biases. Qwen: 14.3 B
  // parameters, 2.7 B activated with the embeddings (Qwen1.5-MoE blog, 2024-03-28).
  const ModelConfig m = hf(R"({"architectures":["Qwen2MoeForCausalLM"],"decoder_sparse_step":1,"hidden_size":2048,
    "intermediate_size":5632,"max_position_embeddings":8192,"max_window_layers":21,"model_type":"qwen2_moe",
    "moe_intermediate_size":1408,"num_attention_heads":16,"num_experts":60,"num_experts_per_tok":4,"num_hidden_layers":24,
    "num_key_value_heads":16,"shared_expert_intermediate_size":5632,"sliding_window":32768,"tie_word_embeddings":false,
    "use_sliding_window":false,"vocab_size":151936})");
  ASSERT_TRUE(m.moe);
  EXPECT_EQ(m.moe->shared_experts, 1);
  EXPECT_EQ(m.moe->shared_expert_ffn, 5632);
  EXPECT_EQ(m.moe->expert_ffn, 1408);
  EXPECT_EQ(m.moe_layer_count(), 24);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_EQ(m.sliding_window, 0);
  const ParameterCounts p = count_parameters(m);
  expect_within_percent(p.total, 14.3e9, 1);
  expect_within_percent(p.active, 2.7e9, 1);
}

TEST(HfConfig, OlmoeIsEveryLayerAMoeOfIntermediateSizeExperts) {
  // OLMoE-1B-7B's config.json (allenai/OLMoE-1B-7B-0924): 64 experts of 1024, top-8, on every
  // layer, query/key norms. Muennighoff et al. 2024: 6.9 B total, 1.3 B active.
  const ModelConfig m = hf(R"({"architectures":["OlmoeForCausalLM"],"attention_bias":false,"clip_qkv":null,
    "hidden_size":2048,"intermediate_size":1024,"max_position_embeddings":4096,"model_type":"olmoe","norm_topk_prob":false,
    "num_attention_heads":16,"num_experts":64,"num_experts_per_tok":8,"num_hidden_layers":16,"num_key_value_heads":16,
    "tie_word_embeddings":false,"vocab_size":50304})");
  ASSERT_TRUE(m.moe);
  EXPECT_EQ(m.moe->experts, 64);
  EXPECT_EQ(m.moe->expert_ffn, 1024);
  EXPECT_EQ(m.moe->shared_experts, 0);
  EXPECT_EQ(m.moe_layer_count(), 16);
  EXPECT_TRUE(m.qk_norm);
  const ParameterCounts p = count_parameters(m);
  expect_within_percent(p.total, 6.9e9, 1);
  expect_within_percent(p.active, 1.3e9, 2);
}

TEST(HfConfig, Gemma2AlternatesWindowsAndCountsAsItsReport) {
  // google/gemma-2-9b's config.json (Gemma2ForCausalLM): 42 layers, h 3584, 16 query heads and 8
  // KV heads of 256, GeGLU of 14336, tied vocabulary of 256,000, a 4096-token window on alternate
  // layers. The Gemma 2 report (Table 1) counts 8,324,201,984 non-embedding parameters: ours are
  // those less its two extra norms a layer (42·2·3584 = 301,056), exactly.
  const ModelConfig m = hf(R"({"architectures":["Gemma2ForCausalLM"],"attention_bias":false,
    "attn_logit_softcapping":50.0,"final_logit_softcapping":30.0,"head_dim":256,"hidden_act":"gelu_pytorch_tanh",
    "hidden_activation":"gelu_pytorch_tanh","hidden_size":3584,"intermediate_size":14336,"max_position_embeddings":8192,
    "model_type":"gemma2","num_attention_heads":16,"num_hidden_layers":42,"num_key_value_heads":8,
    "query_pre_attn_scalar":256,"sliding_window":4096,"vocab_size":256000})");
  const ParameterCounts p = count_parameters(m);
  EXPECT_EQ(p.total - p.embedding, 8'324'201'984 - 301'056);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_FALSE(m.qk_norm);
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_DOUBLE_EQ(m.sliding_window_layers, 0.5);
  // Gemma 1 (GemmaForCausalLM): head_dim 256 by default, no window.
  const ModelConfig g1 = hf(R"({"architectures":["GemmaForCausalLM"],"hidden_size":3072,"intermediate_size":24576,
    "max_position_embeddings":8192,"num_attention_heads":16,"num_hidden_layers":28,"num_key_value_heads":16,
    "vocab_size":256000})");
  EXPECT_EQ(g1.head_dim, 256);
  EXPECT_EQ(g1.sliding_window, 0);
  // Gemma 3's defaults where its files leave keys out (Gemma3TextConfig), and layer_types where
  // a newer file lists them.
  const ModelConfig g3 = hf(R"({"model_type":"gemma3_text","hidden_size":2560,"intermediate_size":10240,
    "num_hidden_layers":34,"sliding_window":1024})");
  EXPECT_EQ(g3.heads, 8);  // Gemma3TextConfig's, as Gemma2Config's
  EXPECT_EQ(g3.kv_heads, 4);
  EXPECT_EQ(g3.head_dim, 256);
  EXPECT_EQ(g3.vocab, 262208);
  EXPECT_DOUBLE_EQ(g3.sliding_window_layers, 29.0 / 34);
  const ModelConfig listed = hf(R"({"model_type":"gemma3_text","hidden_size":256,"intermediate_size":512,
    "num_hidden_layers":4,"sliding_window":512,"layer_types":["sliding_attention","full_attention",
    "sliding_attention","sliding_attention"]})");
  EXPECT_DOUBLE_EQ(listed.sliding_window_layers, 0.75);
}

TEST(HfConfig, Llama4ChunksTheRopeLayersAndInterleavesItsExperts) {
  const std::string shape = R"("model_type":"llama4_text","hidden_size":256,"intermediate_size":128,
    "intermediate_size_mlp":512,"num_hidden_layers":8,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,
    "num_local_experts":4,"vocab_size":1000,"max_position_embeddings":4096)";
  // Explicit lists: rope (chunked) layers marked 1, MoE layers by index.
  const ModelConfig m = hf("{" + shape + R"(,"no_rope_layers":[1,0,1,1,1,0,1,1],"moe_layers":[0,3])" + "}");
  EXPECT_DOUBLE_EQ(m.attention_chunk_layers, 0.75);
  EXPECT_EQ(m.attention_chunk, 8192);
  EXPECT_EQ(m.moe_layer_count(), 2);
  EXPECT_TRUE(m.is_moe_layer(0) && m.is_moe_layer(3) && !m.is_moe_layer(1));
  EXPECT_EQ(m.ffn, 512);
  // Without chunks (attention_chunk_size null) every layer attends to its whole context.
  EXPECT_EQ(hf("{" + shape + R"(,"attention_chunk_size":null})").attention_chunk, 0);
  // An empty list (as Meta's Scout file writes it) is the default, every 4th layer NoPE, or every
  // no_rope_layer_interval-th.
  EXPECT_DOUBLE_EQ(hf("{" + shape + R"(,"no_rope_layers":[]})").attention_chunk_layers, 0.75);
  EXPECT_DOUBLE_EQ(hf("{" + shape + R"(,"no_rope_layers":[],"no_rope_layer_interval":2})").attention_chunk_layers, 0.5);
  EXPECT_DOUBLE_EQ(hf("{" + shape + R"(,"layer_types":["chunked_attention","full_attention","chunked_attention",
    "chunked_attention","chunked_attention","full_attention","chunked_attention","chunked_attention"]})")
                       .attention_chunk_layers,
                   0.75);
  EXPECT_THROW(hf("{" + shape + R"(,"layer_types":["chunked_attention","full_attention","sliding_attention",
    "chunked_attention","chunked_attention","full_attention","chunked_attention","chunked_attention"]})"),
               InputError);
  // No MoE layer listed: a dense model of intermediate_size_mlp.
  const ModelConfig dense = hf("{" + shape + R"(,"moe_layers":[]})");
  EXPECT_FALSE(dense.moe);
  EXPECT_EQ(dense.ffn, 512);
  // A no_rope_layers list of the wrong length is refused, naming the key.
  EXPECT_THROW(hf("{" + shape + R"(,"no_rope_layers":[1,0]})"), InputError);
}

TEST(HfConfig, OlmoAndPhiAreLlamaLike) {
  // OLMo 2 7B (allenai/OLMo-2-1124-7B): normalised query and key projections; 7.30 B.
  const ModelConfig olmo2 = hf(R"({"architectures":["Olmo2ForCausalLM"],"attention_bias":false,"hidden_size":4096,
    "intermediate_size":11008,"max_position_embeddings":4096,"model_type":"olmo2","num_attention_heads":32,
    "num_hidden_layers":32,"num_key_value_heads":32,"tie_word_embeddings":false,"vocab_size":100352})");
  EXPECT_TRUE(olmo2.qk_norm);
  expect_within_percent(count_parameters(olmo2).total, 7.30e9, 0.5);
  // OLMo 3: Olmo3Config's 4096-token window on three of every four layers, or the layers its
  // layer_types mark.
  const ModelConfig olmo3_default = hf(R"({"architectures":["Olmo3ForCausalLM"],"hidden_size":256,
    "intermediate_size":512,"max_position_embeddings":4096,"num_attention_heads":4,"num_hidden_layers":8,
    "vocab_size":1000})");
  EXPECT_EQ(olmo3_default.sliding_window, 4096);
  EXPECT_DOUBLE_EQ(olmo3_default.sliding_window_layers, 0.75);
  const ModelConfig olmo3 = hf(R"({"architectures":["Olmo3ForCausalLM"],"hidden_size":256,"intermediate_size":512,
    "max_position_embeddings":4096,"num_attention_heads":4,"num_hidden_layers":4,"vocab_size":1000,
    "sliding_window":4096,"layer_types":["sliding_attention","sliding_attention","sliding_attention","full_attention"]})");
  EXPECT_EQ(olmo3.sliding_window, 4096);
  EXPECT_DOUBLE_EQ(olmo3.sliding_window_layers, 0.75);
  // Phi-3-mini windows every layer (sliding_window 2047).
  const ModelConfig phi3 = hf(R"({"architectures":["Phi3ForCausalLM"],"hidden_size":3072,"intermediate_size":8192,
    "max_position_embeddings":4096,"num_attention_heads":32,"num_hidden_layers":32,"sliding_window":2047,
    "vocab_size":32064})");
  EXPECT_EQ(phi3.sliding_window, 2047);
  expect_within_percent(count_parameters(phi3).total, 3.82e9, 0.5);
}

TEST(HfConfig, Qwen3NextIsAHybridOfGatedDeltaNetAndGatedAttention) {
  // Qwen/Qwen3-Next-80B-A3B-Instruct's config.json (bundled): 48 decoder layers, three Gated
  // DeltaNet layers to one gated attention layer (full_attention_interval 4), each followed by a
  // MoE of 512 experts of 512, top-10, and a shared expert of 512. Qwen: 80 B total, 3 B activated.
  const ModelConfig m = load_bundled_model(models_dir(), "qwen3-next-80b-a3b");
  std::string twelve;
  for (int i = 0; i < 12; ++i) twelve += "MEMEME*E";
  EXPECT_EQ(m.hybrid_pattern, twelve);
  EXPECT_EQ(m.layers, 96);
  ASSERT_TRUE(m.mamba && m.moe);
  EXPECT_EQ(m.mamba->inner(), 4096);               // 32 value heads of 128
  EXPECT_EQ(m.mamba->groups * m.mamba->state, 2048);  // 16 query/key heads of 128
  EXPECT_EQ(m.mamba->chunk, 64);
  EXPECT_TRUE(m.attention_output_gate && m.qk_norm);
  EXPECT_EQ(m.moe->shared_experts, 1);
  const ParameterCounts p = count_parameters(m);
  expect_within_percent(p.total, 80e9, 0.5);
  expect_within_percent(p.active_without_embedding(), 3.56e9, 1);  // "3B activated" as Qwen rounds it
  // Qwen3.5 (a multimodal wrapper; the text model's layer_types listed), dense or MoE.
  const ModelConfig moe35 = hf(R"({"architectures":["Qwen3_5MoeForConditionalGeneration"],"model_type":"qwen3_5_moe",
    "text_config":{"model_type":"qwen3_5_moe_text","hidden_size":256,"num_hidden_layers":4,"num_attention_heads":4,
    "num_key_value_heads":1,"head_dim":64,"layer_types":["linear_attention","linear_attention","linear_attention",
    "full_attention"],"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":32,
    "linear_value_head_dim":32,"num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":64,
    "shared_expert_intermediate_size":64,"mtp_num_hidden_layers":1,"vocab_size":1000,"max_position_embeddings":4096}})");
  EXPECT_EQ(moe35.hybrid_pattern, "MEMEME*E");
  EXPECT_EQ(moe35.mtp_layers, 1);
  // The dense Qwen3.5 files carry an MTP module too: gated attention and the MLP.
  const ModelConfig dense35 = hf(R"({"model_type":"qwen3_5_text","hidden_size":256,"num_hidden_layers":4,
    "num_attention_heads":4,"num_key_value_heads":1,"intermediate_size":512,"vocab_size":1000,
    "max_position_embeddings":4096,"mtp_num_hidden_layers":1})");
  EXPECT_EQ(dense35.hybrid_pattern, "M-M-M-*-");
  EXPECT_EQ(dense35.ffn, 512);
  EXPECT_FALSE(dense35.moe);
  EXPECT_EQ(dense35.mtp_layers, 1);
  EXPECT_GT(count_parameters(dense35).mtp, 0);
}

// Gated attention: the query projection's gate is heads·head_dim more outputs, its parameters
// and its GEMM's FLOPs with it, and a sigmoid-and-multiply pass over the attention's output.
TEST(HfConfig, AGatedQueryProjectsItsGateToo) {
  ModelConfig m = hf(R"({"architectures":["LlamaForCausalLM"],"hidden_size":1024,"num_hidden_layers":2,
    "num_attention_heads":8,"num_key_value_heads":2,"intermediate_size":2048,"vocab_size":1000,
    "max_position_embeddings":4096})");
  const int64_t plain = count_parameters(m).attention;
  m.attention_output_gate = true;
  EXPECT_EQ(count_parameters(m).attention - plain, 2 * 1024 * 1024);  // two layers of h × heads·d
}

TEST(ModelBlock, Llama3_8BWrittenAsABlockCountsLikeItsConfigJson) {
  const nlohmann::json doc = parse_json_text(R"({"model":{"name":"llama3-8b-block","layers":32,"hidden":4096,
    "heads":32,"kv_heads":8,"ffn":14336,"mlp":"swiglu","vocab":128256,"max_sequence":8192}})", "w.json");
  JsonReader root(doc, "w.json");
  ModelConfig m = read_model(root.at("model"), models_dir());
  EXPECT_EQ(m.name, "llama3-8b-block");
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(count_parameters(m).total, parameters_of("llama3-8b").total);
}

// Every bundled model written as a workload's model block (what validate --emit-workload and
// the search's best layout write) reads back to the same parameters and layer kinds.
TEST(ModelBlock, EveryBundledModelRoundTripsThroughItsBlock) {
  for (const std::string& name : bundled_model_names(models_dir())) {
    const ModelConfig m = load_bundled_model(models_dir(), name);
    const nlohmann::json doc = {{"model", model_block(m)}};
    JsonReader root(doc, name + ".json");
    ModelConfig back;
    ASSERT_NO_THROW(back = read_model(root.at("model"), models_dir())) << name;
    EXPECT_EQ(count_parameters(back).total, count_parameters(m).total) << name;
    EXPECT_EQ(count_parameters(back).active, count_parameters(m).active) << name;
    EXPECT_EQ(back.moe_layer_count(), m.moe_layer_count()) << name;
    EXPECT_EQ(back.sliding_window, m.sliding_window) << name;
    EXPECT_DOUBLE_EQ(back.sliding_window_layers, m.sliding_window_layers) << name;
    if (m.moe) {
      EXPECT_EQ(back.moe->router_score, m.moe->router_score) << name;
      EXPECT_EQ(back.moe->router_expert_bias, m.moe->router_expert_bias) << name;
      EXPECT_EQ(back.moe->router_groups, m.moe->router_groups) << name;
      EXPECT_EQ(back.moe->router_group_topk, m.moe->router_group_topk) << name;
    }
  }
}

// The weight matrices an optimizer sees are the matrices the parameter counts add up, layer by
// layer, in every bundled model (MLA, experts, latent MoE and Mamba mixers among them).
TEST(ParameterCounts, WeightMatricesAddUpToEachLayersMatrices) {
  for (const std::string& name : bundled_model_names(models_dir())) {
    const ModelConfig m = load_bundled_model(models_dir(), name);
    for (int layer = 0; layer < m.layers; ++layer) {
      const LayerParameterCounts c = layer_parameters(m, layer);
      int64_t sum = 0, routed = 0;
      for (const WeightMatrix& w : layer_weight_matrices(m, layer)) {
        sum += w.rows * w.cols * w.count;
        if (w.routed_expert) routed += w.rows * w.cols * w.count;
      }
      EXPECT_EQ(sum, c.attention + c.mlp + c.routed_experts + c.router + c.latent_projections + c.indexer) << name << " " << layer;
      EXPECT_EQ(routed, c.routed_experts) << name << " " << layer;
    }
  }
}

TEST(HfConfig, RoutersAsTheirConfigsScoreAndGroupTheExperts) {
  // DeepSeek-V3: sigmoid scores, noaux_tc's expert bias, top-8 within 4 of 8 groups. Kimi K2:
  // the same with one group (topk_group 1: Megatron still runs the group-limited top-k).
  // Nemotron 3: transformers' NemotronHTopkRouter, sigmoid with its correction bias; Nano gives
  // n_group 1 and topk_group 1, Super neither. Mixtral and GPT-OSS: a softmax, no bias.
  const auto router = [](const std::string& name) { return *load_bundled_model(models_dir(), name).moe; };
  const MoeConfig ds = router("deepseek-v3"), kimi = router("kimi-k2"), nano = router("nemotron-3-nano"),
                  super = router("nemotron-3-super"), oss = router("gpt-oss-120b");
  EXPECT_EQ(ds.router_score, RouterScore::kSigmoid);
  EXPECT_TRUE(ds.router_expert_bias);
  EXPECT_EQ(ds.router_groups, 8);
  EXPECT_EQ(ds.router_group_topk, 4);
  EXPECT_EQ(kimi.router_score, RouterScore::kSigmoid);
  EXPECT_EQ(kimi.router_groups, 1);
  EXPECT_EQ(kimi.router_group_topk, 1);
  EXPECT_TRUE(nano.router_expert_bias && nano.router_score == RouterScore::kSigmoid);
  EXPECT_EQ(nano.router_group_topk, 1);
  EXPECT_TRUE(super.router_expert_bias && super.router_score == RouterScore::kSigmoid);
  EXPECT_EQ(super.router_group_topk, 0);
  EXPECT_EQ(oss.router_score, RouterScore::kSoftmax);
  EXPECT_FALSE(oss.router_expert_bias);
  EXPECT_EQ(router("mixtral-8x7b").router_score, RouterScore::kSoftmax);
  // DeepSeek-V2: a softmax, top-6 within 3 of 8 groups (group_limited_greedy), no bias. GLM-4.5:
  // sigmoid with its correction bias; n_group 1 is no grouping (Megatron-Bridge's GLM provider
  // sets no router groups).
  const MoeConfig v2 = router("deepseek-v2"), glm = router("glm-4.5");
  EXPECT_EQ(v2.router_score, RouterScore::kSoftmax);
  EXPECT_FALSE(v2.router_expert_bias);
  EXPECT_EQ(v2.router_groups, 8);
  EXPECT_EQ(v2.router_group_topk, 3);
  EXPECT_EQ(glm.router_score, RouterScore::kSigmoid);
  EXPECT_TRUE(glm.router_expert_bias);
  EXPECT_EQ(glm.router_group_topk, 0);
  // DeepseekV3Config's own keys: a softmax without the bias when the config says so.
  const MoeConfig soft = *hf(R"({"architectures":["DeepseekV3ForCausalLM"],"hidden_size":1024,"num_hidden_layers":2,
    "num_attention_heads":8,"kv_lora_rank":64,"qk_nope_head_dim":32,"qk_rope_head_dim":16,"v_head_dim":32,
    "vocab_size":1000,"max_position_embeddings":4096,"n_routed_experts":16,"num_experts_per_tok":2,
    "moe_intermediate_size":256,"scoring_func":"softmax","topk_method":"greedy"})").moe;
  EXPECT_EQ(soft.router_score, RouterScore::kSoftmax);
  EXPECT_FALSE(soft.router_expert_bias);
  EXPECT_EQ(soft.router_group_topk, 0);
  // DeepSeek-V2-Lite's keys: greedy top-k, whose n_group 1 and topk_group 1 choose nothing.
  const MoeConfig lite = *hf(R"({"architectures":["DeepseekV2ForCausalLM"],"hidden_size":2048,"num_hidden_layers":27,
    "num_attention_heads":16,"kv_lora_rank":512,"q_lora_rank":null,"qk_nope_head_dim":128,"qk_rope_head_dim":64,
    "v_head_dim":128,"vocab_size":102400,"max_position_embeddings":163840,"n_routed_experts":64,"n_shared_experts":2,
    "num_experts_per_tok":6,"moe_intermediate_size":1408,"intermediate_size":10944,"first_k_dense_replace":1,
    "n_group":1,"topk_group":1,"topk_method":"greedy","scoring_func":"softmax"})").moe;
  EXPECT_EQ(lite.router_score, RouterScore::kSoftmax);
  EXPECT_FALSE(lite.router_expert_bias);
  EXPECT_EQ(lite.router_group_topk, 0);
}

TEST(ModelBlock, InlineMoeBlockFromAFile) {
  // tiny-moe: 4 layers, h 512, 8 heads, 2 KV heads (head_dim 64), first layer dense (ffn 2048),
  // three MoE layers of 4 experts (top-2, f_e 256) and 1 shared expert of 256.
  // Attention 2·512² + 2·512·128 = 655,360; norms 1,024 per layer.
  //   dense layer: 3·512·2048 = 3,145,728 → 3,802,112
  //   MoE layer: routed 4·393,216 = 1,572,864, shared 393,216, router 2,048 → 2,624,512
  // Layers 3,802,112 + 3·2,624,512 = 11,675,648; embeddings 2·1000·512 = 1,024,000; norm 512
  // → 12,700,160. Active per MoE layer: 2 routed → 1,838,080; → 3,802,112 + 3·1,838,080 +
  // 1,024,512 = 10,340,864.
  const std::string path = test::source_path("tests/data/training/workload-inline-model.json");
  const nlohmann::json doc = load_json_file(path);
  JsonReader root(doc, path);
  ModelConfig m = read_model(root.at("model"), models_dir());
  ParameterCounts p = count_parameters(m);
  EXPECT_EQ(p.total, 12'700'160);
  EXPECT_EQ(p.active, 10'340'864);
}

// ---------------------------------------------------------------- errors

void expect_error(const std::function<void()>& load, const std::string& file, const std::string& pointer,
                  const std::string& reason_part) {
  try {
    load();
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), file) << e.what();
    EXPECT_EQ(e.pointer(), pointer) << e.what();
    EXPECT_NE(e.reason().find(reason_part), std::string::npos) << e.what();
  }
}

TEST(ModelLoaderErrors, UnknownArchitectureNamesTheFileAndPointer) {
  const std::string path = test::source_path("tests/data/training/unknown-architecture.json");
  expect_error([&] { load_model_file(path); }, path, "/architectures/0",
               "unknown architecture \"FalconForCausalLM\" (supported: LlamaForCausalLM,");
}

TEST(ModelLoaderErrors, MissingFieldNamesTheKey) {
  const std::string path = test::source_path("tests/data/training/missing-field.json");
  expect_error([&] { load_model_file(path); }, path, "", "missing required key \"num_hidden_layers\"");
}

TEST(ModelLoaderErrors, WrongTypeNamesThePointer) {
  const std::string path = test::source_path("tests/data/training/wrong-type.json");
  expect_error([&] { load_model_file(path); }, path, "/num_local_experts", "expected an integer, found string");
}

TEST(ModelLoaderErrors, ModelFileNamedByAWorkloadReportsItsOwnPath) {
  // The workload points at missing-field.json; the error names that file, where the bad key is.
  const std::string workload = test::source_path("tests/data/training/workload-model-path.json");
  const nlohmann::json doc = load_json_file(workload);
  JsonReader root(doc, workload);
  expect_error([&] { read_model(root.at("model"), models_dir()); },
               test::source_path("tests/data/training/missing-field.json"), "", "num_hidden_layers");
}

TEST(ModelLoaderErrors, BlockErrorsCarryTheirJsonPath) {
  auto block = [](const std::string& model) {
    return [model] {
      const nlohmann::json doc = parse_json_text("{\"model\":" + model + "}", "w.json");
      JsonReader root(doc, "w.json");
      read_model(root.at("model"), test::source_path("workloads/models"));
    };
  };
  const std::string base = R"("name":"x","layers":2,"hidden":256,"heads":4,"vocab":100,"max_sequence":64)";
  expect_error(block("{" + base + R"(,"ffn":512,"hiden":3})"), "w.json", "/model/hiden", "unknown key \"hiden\"");
  expect_error(block("{" + base + R"(,"ffn":512,"kv_heads":3})"), "w.json", "/model/kv_heads",
               "heads=4 is not a multiple of kv_heads=3");
  expect_error(block("{" + base + R"(,"ffn":"512"})"), "w.json", "/model/ffn", "expected an integer");
  expect_error(block("{" + base + "}"), "w.json", "/model", "missing required key \"ffn\"");
  expect_error(block("{" + base + R"(,"moe":{"experts":4,"top_k":5,"expert_ffn":64}})"), "w.json", "/model/moe/top_k",
               "top_k=5 is larger than experts=4");
  expect_error(block("{" + base + R"(,"moe":{"experts":8,"top_k":2,"expert_ffn":64,"router_groups":3,"router_group_topk":1}})"),
               "w.json", "/model/moe/router_groups", "router_groups=3 does not divide experts=8");
  expect_error(block("{" + base + R"(,"moe":{"experts":8,"top_k":2,"expert_ffn":64,"router_score":"relu"}})"), "w.json",
               "/model/moe/router_score", "unknown value \"relu\" (expected \"softmax\", \"sigmoid\")");
  expect_error(block("{" + base + R"(,"ffn":512,"mlp":"relu"})"), "w.json", "/model/mlp",
               "unknown value \"relu\" (expected \"swiglu\", \"gelu\", \"relu2\")");
  expect_error(block("{" + base + R"(,"ffn":512,"hidden_dropout":1.0})"), "w.json", "/model/hidden_dropout",
               "must be a probability in [0, 1), found 1.0");
  expect_error(block(R"("llama-9000")"), "w.json", "/model", "unknown model \"llama-9000\" (bundled: deepseek-v2, deepseek-v3,");
  expect_error(block("42"), "w.json", "/model", "expected a model name");
}

TEST(ModelLoaderErrors, HfConsistencyErrorsNameTheKey) {
  expect_error(
      [] {
        hf(R"({"architectures":["LlamaForCausalLM"],"hidden_size":4096,"num_hidden_layers":2,
               "num_attention_heads":32,"num_key_value_heads":5,"intermediate_size":1,"vocab_size":1,
               "max_position_embeddings":1})");
      },
      "config.json", "/num_attention_heads", "num_attention_heads=32 is not a multiple of num_key_value_heads=5");
  expect_error([] { hf(R"({"architectures":["LlamaForCausalLM"],"num_hidden_layers":2,"hidden_size":-1})"); },
               "config.json", "/hidden_size", "must be a positive integer");
  expect_error([] { hf(R"({"architectures":["LlamaForCausalLM"],"num_hidden_layers":1099511627776})"); },
               "config.json", "/num_hidden_layers", "is too large");
  expect_error([] { hf(R"({"hidden_size":1})"); }, "config.json", "", "neither \"architectures\" nor \"model_type\"");
  expect_error(
      [] {
        hf(R"({"architectures":["GPT2LMHeadModel"],"n_embd":768,"n_layer":12,"n_head":12,"n_positions":1024,
               "vocab_size":50257,"attn_pdrop":-0.1})");
      },
      "config.json", "/attn_pdrop", "must be a probability in [0, 1), found -0.1");
  expect_error([] { load_bundled_model(models_dir(), "gpt-5"); }, "", "", "unknown model \"gpt-5\"");
}

}  // namespace
}  // namespace parallax
