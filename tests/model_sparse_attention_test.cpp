// DeepSeek Sparse Attention (ModelConfig::sparse_attention: DeepSeek-V3.2, GLM-5) against its
// closed forms: the loader's fields and defaults, the indexer's parameters, the top-k's share of
// the causal pairs in training and in a serving step, the indexer's scores over every pair, the
// sparse MLA core run absorbed, and what a serving token keeps in the cache.
#include <gtest/gtest.h>

#include "io/input_error.h"
#include "model/layer_operators.h"
#include "model/model_block.h"
#include "model/model_loader.h"
#include "model/parameter_count.h"
#include "training/parallel_layout.h"
#include "test_support.h"

namespace parallax::sparse_attention_test {
namespace {

std::string models_dir() { return test::source_path("workloads/models"); }
ModelConfig bundled(const std::string& name) { return load_bundled_model(models_dir(), name); }
ModelConfig hf(const std::string& text) { return model_from_hf_config(parse_json_text(text, "config.json"), "config.json", "m"); }

const ModelOperator& op_named(const std::vector<ModelOperator>& ops, const std::string& name) {
  for (const ModelOperator& op : ops) {
    if (op.name == name) return op;
  }
  throw std::runtime_error("no operator " + name);
}
bool has_op(const std::vector<ModelOperator>& ops, const std::string& name) {
  for (const ModelOperator& op : ops) {
    if (op.name == name) return true;
  }
  return false;
}

MicroBatch micro_batch(int64_t b, int64_t s) {
  MicroBatch m;
  m.sequences = b;
  m.sequence_length = s;
  return m;
}
RaggedBatch batch_of(std::vector<SequenceChunk> chunks) {
  RaggedBatch b;
  b.sequences = std::move(chunks);
  return b;
}

// GlmMoeDsaConfig's defaults, which are GLM-5's sizes (zai-org/GLM-5: 744 B parameters, 40 B active).
const char* kGlm5 = R"({"architectures":["GlmMoeDsaForCausalLM"],"hidden_size":6144,"intermediate_size":12288,
  "moe_intermediate_size":2048,"num_attention_heads":64,"num_key_value_heads":64,
  "n_shared_experts":1,"n_routed_experts":256,"num_experts_per_tok":8,"kv_lora_rank":512,"q_lora_rank":2048,
  "qk_rope_head_dim":64,"v_head_dim":256,"qk_nope_head_dim":192,"n_group":1,"topk_group":1,
  "first_k_dense_replace":3,"vocab_size":154880,"max_position_embeddings":202752,"index_topk":2048,
  "index_head_dim":128,"index_n_heads":32)";

TEST(SparseAttention, DeepSeekV32IsV3WithAnIndexerOnEveryLayer) {
  const ModelConfig v32 = bundled("deepseek-v3.2"), v3 = bundled("deepseek-v3");
  ASSERT_TRUE(v32.sparse_attention);
  EXPECT_EQ(v32.sparse_attention->index_heads, 64);
  EXPECT_EQ(v32.sparse_attention->index_head_dim, 128);
  EXPECT_EQ(v32.sparse_attention->topk, 2048);
  EXPECT_TRUE(v32.sparse_attention->shared_index_layers.empty());
  // An indexer: wq_b 1536 × 64·128, wk 7168 × 128, weights_proj 7168 × 64, the key's LayerNorm 2·128.
  const int64_t indexer = 1536 * 64 * 128 + 7168 * (128 + 64) + 2 * 128;
  const ParameterCounts p32 = count_parameters(v32), p3 = count_parameters(v3);
  EXPECT_EQ(p32.total - p3.total, 61 * indexer);
  EXPECT_EQ(p32.indexer, 61 * (indexer - 2 * 128));
  EXPECT_EQ(p32.mtp - p3.mtp, indexer);  // the MTP module's layer has its own
  EXPECT_EQ(p32.matmul_active - p3.matmul_active, 61 * (indexer - 2 * 128));
  EXPECT_EQ(v32.attended_keys_cap(), 2048);
  EXPECT_FALSE(v3.sparse_attention);
}

TEST(SparseAttention, Glm5CountsItsPublishedSize) {
  const ModelConfig glm5 = hf(std::string(kGlm5) + R"(,"num_hidden_layers":78})");
  ASSERT_TRUE(glm5.sparse_attention && glm5.moe && glm5.mla);
  EXPECT_EQ(glm5.sparse_attention->index_heads, 32);
  EXPECT_EQ(glm5.moe->first_dense_layers, 3);
  const ParameterCounts p = count_parameters(glm5);
  EXPECT_NEAR(static_cast<double>(p.total), 744e9, 744e9 * 0.01);  // 743.9 B counted
  EXPECT_NEAR(static_cast<double>(p.active_without_embedding()), 40e9, 40e9 * 0.03);  // 40.8 B: "40B", rounded
}

TEST(SparseAttention, SharedIndexerLayersAsGlmMoeDsaConfigDerivesThem) {
  // index_topk_freq 4, offset 2: layer i is full where max(i − 1, 0) is a multiple of 4.
  ModelConfig m = hf(std::string(kGlm5) + R"(,"num_hidden_layers":8,"index_topk_freq":4,"index_skip_topk_offset":2})");
  EXPECT_EQ(m.sparse_attention->shared_index_layers, (std::vector<int>{2, 3, 4, 6, 7}));
  EXPECT_TRUE(m.has_indexer(5));
  EXPECT_FALSE(m.has_indexer(6));
  EXPECT_EQ(layer_parameters(m, 6).indexer, 0);
  EXPECT_GT(layer_parameters(m, 5).indexer, 0);
  m = hf(std::string(kGlm5) + R"(,"num_hidden_layers":4,"index_topk_pattern":"FSFS"})");
  EXPECT_EQ(m.sparse_attention->shared_index_layers, (std::vector<int>{1, 3}));
  m = hf(std::string(kGlm5) + R"(,"num_hidden_layers":4,"indexer_types":["full","full","shared","full"]})");
  EXPECT_EQ(m.sparse_attention->shared_index_layers, (std::vector<int>{2}));
  // A layer without an indexer runs the attention on the top-k it reuses: no indexer operators.
  const auto shared = layer_operators(m, 2, micro_batch(1, 4096), {});
  EXPECT_FALSE(has_op(shared, "indexer_scores_topk"));
  EXPECT_TRUE(has_op(layer_operators(m, 1, micro_batch(1, 4096), {}), "indexer_scores_topk"));
}

TEST(SparseAttention, BadIndexerFieldsNameTheirJsonPointer) {
  try {
    hf(std::string(kGlm5) + R"(,"num_hidden_layers":2,"indexer_types":["full","dense"]})");
    FAIL() << "an unknown indexer type was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/indexer_types/1"), std::string::npos) << e.what();
  }
  try {
    hf(std::string(kGlm5) + R"(,"num_hidden_layers":2,"indexer_types":["shared","full"]})");
    FAIL() << "a first layer without an indexer was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/indexer_types/0"), std::string::npos) << e.what();
  }
  try {
    hf(std::string(kGlm5) + R"(,"num_hidden_layers":4,"index_topk_freq":2,"index_skip_topk_offset":-2})");
    FAIL() << "an offset that leaves layer 0 without an indexer was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/index_skip_topk_offset"), std::string::npos) << e.what();
  }
  // As GlmMoeDsaConfig: a frequency of 0 counts as 1 (every layer runs its indexer).
  EXPECT_TRUE(hf(std::string(kGlm5) + R"(,"num_hidden_layers":4,"index_topk_freq":0})")
                  .sparse_attention->shared_index_layers.empty());
  const nlohmann::json twice = parse_json_text(R"({"model":{"name":"m","layers":4,"hidden":256,"heads":4,"ffn":512,
    "vocab":1000,"max_sequence":4096,"mla":{"kv_lora_rank":64,"qk_nope_head_dim":32,"qk_rope_head_dim":16,
    "v_head_dim":32},"sparse_attention":{"index_heads":4,"index_head_dim":32,"topk":64,
    "shared_index_layers":[2,2]}}})", "w.json");
  try {
    read_model(JsonReader(twice, "w.json").at("model"), models_dir());
    FAIL() << "a layer listed twice was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/model/sparse_attention/shared_index_layers/1"), std::string::npos) << e.what();
  }
  ModelConfig m = bundled("deepseek-v3.2");
  m.mla.reset();
  EXPECT_NE(m.problem().find("MLA"), std::string::npos);
}

TEST(SparseAttention, ItsModelBlockRoundTrips) {
  const ModelConfig m = hf(std::string(kGlm5) + R"(,"num_hidden_layers":8,"index_topk_freq":4})");
  const nlohmann::json doc = {{"model", model_block(m)}};
  JsonReader root(doc, "w.json");
  const ModelConfig back = read_model(root.at("model"), models_dir());
  ASSERT_TRUE(back.sparse_attention);
  EXPECT_EQ(back.sparse_attention->shared_index_layers, m.sparse_attention->shared_index_layers);
  EXPECT_EQ(count_parameters(back).total, count_parameters(m).total);
}

// A pipeline stage must start on a layer that runs its own indexer: the top-k is not sent
// between stages (Megatron-Core refuses such a split). Shared layers here: 2, 4 and 6.
TEST(SparseAttention, APipelineStageStartsOnALayerWithAnIndexer) {
  const ModelConfig m = hf(std::string(kGlm5) + R"(,"num_hidden_layers":8,"index_topk_freq":2})");
  ASSERT_EQ(m.sparse_attention->shared_index_layers, (std::vector<int>{2, 4, 6}));
  ParallelLayout l;
  l.tp = 8;
  l.pp = 2;
  l.dp = 1;
  l.micro_batch = 1;
  l.global_batch = 8;
  l.sequence_length = 4096;
  const auto expect_refused = [&](const std::string& pointer, const std::string& reason) {
    try {
      validate(l, m, 16, "job.json");
      ADD_FAILURE() << "accepted; expected " << pointer << ": " << reason;
    } catch (const InputError& e) {
      EXPECT_EQ(e.pointer(), pointer) << e.what();
      EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
    }
  };
  expect_refused("/parallel/pp", "starts at layer 4");
  l.stage_layers = {3, 5};  // the second stage starts on layer 3, which runs its own
  EXPECT_NO_THROW(validate(l, m, 16, "job.json"));
  l.stage_layers.clear();
  l.pp = 1;
  l.cp = 2;
  l.dp = 1;
  expect_refused("/parallel/cp", "sparse attention (DSA) is not modelled");
}

// Each query past the first k attends to k keys, a window of k on every layer: of a causal
// sequence's s²/2 pairs, (s·k − k²/2)/(s²/2); at s = 8,192 and k = 2,048, 0.4375. The indexer
// scores every causal pair with its 64 heads of 128, on every TP rank.
TEST(SparseAttention, TrainingAttendsToTheTopKAndIndexesEveryPair) {
  const ModelConfig m = bundled("deepseek-v3.2");
  ModelConfig dense = m;
  dense.sparse_attention.reset();
  const ShardingFactors tp8{8, 1, 1, false};
  const auto sparse_ops = layer_operators(m, 3, micro_batch(1, 8192), tp8);
  const auto dense_ops = layer_operators(dense, 3, micro_batch(1, 8192), tp8);
  // The core runs absorbed (Megatron-Core's AbsorbedMLASelfAttention): per pair and head a key of
  // 512 + 64 and a value of 512, against the materialised 192 and 128 of V3's; no kv_up_proj.
  EXPECT_FALSE(has_op(sparse_ops, "kv_up_proj"));
  EXPECT_FALSE(has_op(sparse_ops, "attention"));
  const OperatorCost& core = op_named(sparse_ops, "mla_latent_attention").forward;
  EXPECT_DOUBLE_EQ(core.flops.value(),
                   0.4375 * op_named(dense_ops, "attention").forward.flops.value() * (576 + 512) / (192 + 128));
  EXPECT_DOUBLE_EQ(op_named(sparse_ops, "mla_latent_attention").backward.flops.value(), 2.5 * core.flops.value());
  const OperatorCost& index = op_named(sparse_ops, "indexer_scores_topk").forward;
  const double pairs = 8192.0 * 8192 / 2;
  EXPECT_DOUBLE_EQ(index.flops.value(), pairs * 64 * (2 * 128 + 3));
  // Its query projection is whole on each rank: 8,192 rows of 1,536 → 64·128.
  EXPECT_DOUBLE_EQ(op_named(sparse_ops, "indexer_q_proj").forward.flops.value(), 2.0 * 8192 * 1536 * 64 * 128);
  // A sequence no longer than k attends to every key.
  EXPECT_DOUBLE_EQ(op_named(layer_operators(m, 3, micro_batch(1, 2048), tp8), "mla_latent_attention").forward.flops.value(),
                   2.0 * (2048.0 * 2048 / 2) * 16 * (576 + 512));
  // The indexer's scores are part of the attention core, not a weight GEMM.
  EXPECT_TRUE(op_named(sparse_ops, "indexer_scores_topk").attention_core);
  // Context parallelism is refused (Megatron-Core's DSA all-gathers instead).
  EXPECT_THROW(layer_operators(m, 3, micro_batch(1, 8192), ShardingFactors{1, 2, 1, false}), std::invalid_argument);
  // MFU's model FLOPs count the same pairs.
  const double per_layer_dense = 6.0 * 8192 * 128 * (192 + 128) * 0.5;
  EXPECT_NEAR(model_flops_per_token(dense, 8192).value() - model_flops_per_token(m, 8192).value(),
              61 * per_layer_dense * (1 - 0.4375) - 6.0 * static_cast<double>(count_parameters(m).indexer), 1.0);
}

// A serving step: every token, prompt or decode, runs MLA absorbed over the latents of its top-k
// keys; the indexer reads every cached token's fp8 key (128 B and a 4-byte scale) in fp8.
TEST(SparseAttention, AServingStepReadsTheTopKLatentsAndEveryIndexKey) {
  const ModelConfig m = bundled("deepseek-v3.2");
  const ShardingFactors tp8{8, 1, 1, false};
  RaggedBatch decode = batch_of({{1, 100000, true}, {1, 1000, true}});
  decode.kv_cache = DType::kFp8;
  const auto ops = layer_operators(m, 3, decode, tp8);
  EXPECT_FALSE(has_op(ops, "kv_up_proj"));
  const OperatorCost& core = op_named(ops, "mla_latent_attention").forward;
  EXPECT_DOUBLE_EQ(core.flops.value(), 2.0 * (2048 + 1000) * 16 * (576 + 512));
  const double q = 2.0 * 16 * 576, o = 2.0 * 16 * 512;
  // Each latent read in the sparse FlashMLA fp8 format: 512 fp8, 4 fp32 scales, 64 bf16 rope values.
  EXPECT_DOUBLE_EQ(core.bytes_read_written.value(), (q + o) * 2 + (2048.0 + 1000) * 656 + 2.0 * 16 * 4);
  const OperatorCost& index = op_named(ops, "indexer_scores_topk").forward;
  EXPECT_EQ(index.dtype, DType::kFp8);
  EXPECT_DOUBLE_EQ(index.flops.value(), 101000.0 * 64 * (2 * 128 + 3));
  const double keys = 101000.0 * (128 + 4), logits = 2.0 * 101000 * 4, indices = (2048.0 + 1000) * 4;
  EXPECT_DOUBLE_EQ(index.bytes_read_written.value(), 2.0 * 64 * 128 + 2.0 * 64 * 4 + keys + logits + indices);
  // A prompt chunk runs absorbed too (no per-head keys built for its context).
  const auto prompt = layer_operators(m, 3, batch_of({{4096, 4096, true}}), tp8);
  EXPECT_FALSE(has_op(prompt, "kv_up_proj"));
  const double chunk_pairs = 2048.0 * 2049 / 2 + (4096.0 - 2048) * 2048;
  EXPECT_DOUBLE_EQ(op_named(prompt, "mla_latent_attention").forward.flops.value(), 2.0 * chunk_pairs * 16 * (576 + 512));
  // Each query gathers its own top-k latents: the kernel reads the pairs' rows, not the context once.
  const double prompt_q = 4096.0 * 16 * 576, prompt_o = 4096.0 * 16 * 512;
  EXPECT_DOUBLE_EQ(op_named(prompt, "mla_latent_attention").forward.bytes_read_written.value(),
                   (prompt_q + prompt_o) * 2 + chunk_pairs * 576 * 2 + 4096.0 * 16 * 4);
}

}  // namespace
}  // namespace parallax::sparse_attention_test
