// The per-layer operators of a serving step's ragged batch (model/layer_operators.h) against
// their closed forms: a prefill of one whole prompt has the training micro-batch's GEMMs, a
// prefill chunk after cached tokens and a decode batch have the causal pairs and the K/V bytes
// of the header, MLA decodes over its cached latents and prefills up-projected keys, the head
// runs on sampled rows only, and bad batches are refused.
#include <gtest/gtest.h>

#include <array>

#include "model/layer_operators.h"
#include "model/model_loader.h"
#include "test_support.h"

namespace parallax {
namespace {

ModelConfig llama(const std::string& name) { return load_bundled_model(test::source_path("workloads/models"), name); }

const ModelOperator& op_named(const std::vector<ModelOperator>& ops, const std::string& name) {
  for (const ModelOperator& op : ops) {
    if (op.name == name) return op;
  }
  throw std::runtime_error("no operator " + name);
}

RaggedBatch batch_of(std::vector<SequenceChunk> chunks) {
  RaggedBatch b;
  b.sequences = std::move(chunks);
  return b;
}

TEST(RaggedBatch, AWholePromptHasTheMicroBatchGemms) {
  const ModelConfig m = llama("llama3-8b");
  MicroBatch micro;
  micro.sequences = 1;
  micro.sequence_length = 4096;
  const ShardingFactors tp2{2, 1, 1, false};
  const auto training = layer_operators(m, 0, micro, tp2);
  const auto serving = layer_operators(m, 0, batch_of({{4096, 4096, true}}), tp2);
  ASSERT_EQ(training.size(), serving.size());
  for (size_t i = 0; i < training.size(); ++i) {
    EXPECT_EQ(training[i].name, serving[i].name);
    if (training[i].name == "attention") continue;  // s²/2 pairs against the exact s(s+1)/2
    EXPECT_EQ(training[i].forward.flops.value(), serving[i].forward.flops.value()) << training[i].name;
    EXPECT_EQ(training[i].forward.bytes_read_written.value(), serving[i].forward.bytes_read_written.value())
        << training[i].name;
  }
  // Llama-3 8B: 32 heads of 128 over TP 2 = 16 per GPU; causal pairs 4096·4097/2.
  const double pairs = 4096.0 * 4097.0 / 2.0;
  EXPECT_DOUBLE_EQ(op_named(serving, "attention").forward.flops.value(), 2.0 * pairs * 16 * (128 + 128));
  EXPECT_DOUBLE_EQ(op_named(training, "attention").forward.flops.value(), 2.0 * 4096.0 * 4096.0 / 2.0 * 16 * 256);
}

TEST(RaggedBatch, APrefillChunkAfterCachedTokensAttendsToThemAll) {
  const ModelConfig m = llama("llama3-70b");
  // 512 new tokens after 1536 cached: token i sees 1536 + i + 1 keys, 512·1536 + 512·513/2 pairs.
  const RaggedBatch chunk = batch_of({{512, 2048, false}});
  const AttentionWork w = ragged_attention_work(chunk);
  EXPECT_DOUBLE_EQ(w.score_pairs, 512.0 * 1536.0 + 512.0 * 513.0 / 2.0);
  EXPECT_DOUBLE_EQ(w.query_tokens, 512);
  EXPECT_DOUBLE_EQ(w.key_tokens, 2048);
  const auto ops = layer_operators(m, 0, chunk, ShardingFactors{8, 1, 1, false});
  // 64 query heads / 8 = 8 per GPU; 8 KV heads / 8 = 1; d = 128.
  const OperatorCost& a = op_named(ops, "attention").forward;
  EXPECT_DOUBLE_EQ(a.flops.value(), 2.0 * w.score_pairs * 8 * 256);
  // Q and O of the 512 new tokens, K and V of all 2048, and fp32 row statistics, in bf16.
  const double q = 512.0 * 8 * 128, kv = 2048.0 * 1 * 256, o = 512.0 * 8 * 128;
  EXPECT_DOUBLE_EQ(a.bytes_read_written.value(), (q + kv + o) * 2 + 512.0 * 8 * 4);
  // The GEMMs run on the 512 new rows: qkv is 512 × (8 + 2·1)·128 × 8192.
  EXPECT_DOUBLE_EQ(op_named(ops, "qkv_proj").forward.flops.value(), 2.0 * 512 * 10 * 128 * 8192);
  // A chunk that does not end its prompt samples nothing: no logits.
  const auto out = output_operators(m, chunk, ShardingFactors{8, 1, 1, false});
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "final_norm");
}

TEST(RaggedBatch, ADecodeStepReadsEveryCachedKeyOnce) {
  const ModelConfig m = llama("llama3-8b");
  // 64 sequences, one new token each, 1000 and 3000 tokens of context alternately.
  std::vector<SequenceChunk> decode;
  for (int i = 0; i < 64; ++i) decode.push_back({1, i % 2 ? 3000 : 1000, true});
  const RaggedBatch batch = batch_of(decode);
  const AttentionWork w = ragged_attention_work(batch);
  // One new token sees its whole context: q·(kv − q) + q(q+1)/2 = kv.
  EXPECT_DOUBLE_EQ(w.score_pairs, 32.0 * 1000 + 32.0 * 3000);
  const auto ops = layer_operators(m, 0, batch, ShardingFactors{1, 1, 1, false});
  // K and V of 128,000 cached tokens × 8 KV heads × 2·128, in bf16, dominate the bytes.
  const double kv_bytes = 128000.0 * 8 * 256 * 2;
  const OperatorCost& a = op_named(ops, "attention").forward;
  EXPECT_DOUBLE_EQ(a.bytes_read_written.value(), kv_bytes + (64.0 * 32 * 128 * 2) * 2 + 64.0 * 32 * 4);
  // An fp8 cache: the same keys and values read at 1 B an element.
  RaggedBatch fp8 = batch;
  fp8.kv_cache = DType::kFp8;
  const auto fp8_ops = layer_operators(m, 0, fp8, ShardingFactors{1, 1, 1, false});
  const OperatorCost& f = op_named(fp8_ops, "attention").forward;
  EXPECT_DOUBLE_EQ(f.bytes_read_written.value(), kv_bytes / 2 + (64.0 * 32 * 128 * 2) * 2 + 64.0 * 32 * 4);
  // The head runs on the 64 sampled rows: 64 × 128256 × 4096.
  const auto out = output_operators(m, batch, ShardingFactors{1, 1, 1, false});
  EXPECT_DOUBLE_EQ(op_named(out, "logits").forward.flops.value(), 2.0 * 64 * 128256 * 4096);
  EXPECT_EQ(sampled_rows(batch), 64);
}

bool has_op(const std::vector<ModelOperator>& ops, const std::string& name) {
  for (const ModelOperator& op : ops) {
    if (op.name == name) return true;
  }
  return false;
}

TEST(RaggedBatch, MlaDecodesOverTheCachedLatentsAndPrefillsUpProjectedKeys) {
  // DeepSeek-V3 on TP 8: 128 heads / 8 = 16 a GPU; latent 512, rope 64, nope 128, v 128.
  const ModelConfig m = llama("deepseek-v3");
  const ShardingFactors tp8{8, 1, 1, false};
  // Decode: 4 sequences of 1,024 tokens of context, one new token each. The cache is read as
  // latents (576 a token, shared by the heads), never up-projected; each query absorbs W_UK
  // (16 products of 4 × 128 × 512) and each output W_UV (4 × 512 × 128).
  const RaggedBatch decode = batch_of({{1, 1024, true}, {1, 1024, true}, {1, 1024, true}, {1, 1024, true}});
  const auto ops = layer_operators(m, 0, decode, tp8);
  EXPECT_FALSE(has_op(ops, "kv_up_proj"));
  EXPECT_FALSE(has_op(ops, "attention"));
  const OperatorCost& core = op_named(ops, "mla_latent_attention").forward;
  const double pairs = 4.0 * 1024, q = 4.0 * 16 * 576, o = 4.0 * 16 * 512;
  EXPECT_DOUBLE_EQ(core.flops.value(), 2.0 * pairs * 16 * (576 + 512));
  EXPECT_DOUBLE_EQ(core.bytes_read_written.value(), (q + 4096.0 * 576 + o) * 2 + 4.0 * 16 * 4);
  const GemmShape absorb = op_named(ops, "q_absorb_key_up_proj").forward.shape;
  EXPECT_EQ((std::array<double, 4>{absorb.m, absorb.n, absorb.k, absorb.batch}), (std::array<double, 4>{4, 512, 128, 16}));
  const GemmShape value = op_named(ops, "value_up_proj").forward.shape;
  EXPECT_EQ((std::array<double, 4>{value.m, value.n, value.k, value.batch}), (std::array<double, 4>{4, 128, 512, 16}));
  // A prompt chunk of 512 tokens after 1,536 cached ones up-projects all 2,048 latents to 16
  // heads' keys (128) and values (128), then attends with per-head keys of 192.
  const auto chunk = layer_operators(m, 0, batch_of({{512, 2048, false}}), tp8);
  EXPECT_FALSE(has_op(chunk, "mla_latent_attention"));
  const GemmShape up = op_named(chunk, "kv_up_proj").forward.shape;
  EXPECT_EQ((std::array<double, 3>{up.m, up.n, up.k}), (std::array<double, 3>{2048, 16 * 256, 512}));
  const double chunk_pairs = 512.0 * 1536 + 512.0 * 513 / 2;
  EXPECT_DOUBLE_EQ(op_named(chunk, "attention").forward.flops.value(), 2.0 * chunk_pairs * 16 * (192 + 128));
  // A speculating sequence's verification (its last token and 2 drafts) decodes over the latents
  // too: 3 query tokens, none of its 1,026 cached tokens up-projected.
  const auto verify = layer_operators(m, 0, batch_of({{3, 1026, true, 2}}), tp8);
  EXPECT_FALSE(has_op(verify, "kv_up_proj"));
  EXPECT_DOUBLE_EQ(op_named(verify, "q_absorb_key_up_proj").forward.shape.m, 3.0);
  // A whole prompt's up-projection is the training micro-batch's.
  MicroBatch micro;
  micro.sequences = 1;
  micro.sequence_length = 4096;
  EXPECT_DOUBLE_EQ(op_named(layer_operators(m, 0, batch_of({{4096, 4096, true}}), tp8), "kv_up_proj").forward.flops.value(),
                   op_named(layer_operators(m, 0, micro, tp8), "kv_up_proj").forward.flops.value());
}

TEST(RaggedBatch, BadBatchesAreRefused) {
  const ModelConfig m = llama("llama3-8b");
  EXPECT_NE(sharding_problem(m, RaggedBatch{}, ShardingFactors{}), "");
  EXPECT_NE(sharding_problem(m, batch_of({{5, 4, true}}), ShardingFactors{}).find("need 1 <= new <= context"),
            std::string::npos);
  EXPECT_NE(sharding_problem(m, batch_of({{0, 4, true}}), ShardingFactors{}), "");
  EXPECT_NE(sharding_problem(m, batch_of({{1, 4, true}}), ShardingFactors{3, 1, 1, false}).find("tp=3"),
            std::string::npos);
  EXPECT_NE(sharding_problem(m, batch_of({{1, 4, true}}), ShardingFactors{1, 2, 1, false}).find("context parallelism"),
            std::string::npos);
  EXPECT_EQ(sharding_problem(m, batch_of({{1, 4, true}, {7, 7, false}}), ShardingFactors{8, 1, 1, false}), "");
  EXPECT_THROW(layer_operators(m, 0, batch_of({{5, 4, true}}), ShardingFactors{}), std::invalid_argument);
}

}  // namespace
}  // namespace parallax
