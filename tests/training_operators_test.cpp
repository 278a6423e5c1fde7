// Per-operator FLOPs of a layer against the closed forms (a plain GPT layer, a Mixtral MoE
// layer, a DeepSeek-V3 MLA + shared-expert layer), the 6N + attention model FLOPs, and how
// tensor, context, expert and sequence parallelism divide the work of one GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "compute/compute_model.h"
#include "io/input_error.h"
#include "model/layer_operators.h"
#include "model/model_loader.h"
#include "training/iteration_units.h"
#include "training/memory_model.h"
#include "training/parallel_layout.h"
#include "model/parameter_count.h"
#include "test_support.h"

namespace parallax {
namespace {

using test::bundled;

// A GPT-2/3 layer of hidden h: MHA, plain GELU MLP of 4h, LayerNorm, learned positions.
ModelConfig gpt(int64_t h, int heads) {
  ModelConfig m;
  m.name = "gpt";
  m.layers = 1;
  m.hidden = h;
  m.heads = m.kv_heads = heads;
  m.head_dim = h / heads;
  m.ffn = 4 * h;
  m.mlp = MlpKind::kPlain;
  m.norm = NormKind::kLayerNorm;
  m.position = PositionEmbedding::kLearned;
  m.qkv_bias = m.attention_output_bias = m.mlp_bias = true;
  m.vocab = 50257;
  m.max_sequence = 2048;
  m.tied_embeddings = true;
  return m;
}

MicroBatch batch(int64_t b, int64_t s, bool causal = true) {
  MicroBatch mb;
  mb.sequences = b;
  mb.sequence_length = s;
  mb.causal = causal;
  return mb;
}

// FLOPs of the GEMMs and the attention core (the memory-bound kernels' few FLOPs left out).
double matmul_flops(const std::vector<ModelOperator>& ops, bool backward = false) {
  double sum = 0;
  for (const auto& op : ops) {
    const OperatorCost& c = backward ? op.backward : op.forward;
    if (c.kind != OperatorKind::kMemoryBound) sum += c.flops.value();
  }
  return sum;
}

double flops_of(const std::vector<ModelOperator>& ops, const std::string& name) {
  for (const auto& op : ops) {
    if (op.name == name) return op.forward.flops.value();
  }
  ADD_FAILURE() << "no operator " << name;
  return 0;
}

const ModelOperator& find(const std::vector<ModelOperator>& ops, const std::string& name) {
  auto it = std::find_if(ops.begin(), ops.end(), [&](const ModelOperator& op) { return op.name == name; });
  if (it == ops.end()) throw std::runtime_error("no operator " + name);
  return *it;
}

bool has(const std::vector<ModelOperator>& ops, const std::string& name) {
  return std::any_of(ops.begin(), ops.end(), [&](const ModelOperator& op) { return op.name == name; });
}

// Where the operator `name` stands in `ops` (ops.size() when absent).
size_t position(const std::vector<ModelOperator>& ops, const std::string& name) {
  return static_cast<size_t>(
      std::find_if(ops.begin(), ops.end(), [&](const ModelOperator& op) { return op.name == name; }) - ops.begin());
}

// GPT-OSS's eager expert operators run only where TEGroupedMLP issues the experts one by one
// and the model has what they serve: none under a device-side grouped GEMM (`mb` turned to it),
// none in `without` (the model lacking it), layer 1 on ep 8.
void expect_only_per_expert(const ModelConfig& without, MicroBatch mb, const std::string& name) {
  const ShardingFactors ep8{1, 1, 8, false};
  mb.expert_gemms = ExpertGemms::kGrouped;
  EXPECT_FALSE(has(layer_operators(bundled("gpt-oss-120b"), 1, mb, ep8), name));
  mb.expert_gemms = ExpertGemms::kPerExpert;
  EXPECT_FALSE(has(layer_operators(without, 1, mb, ep8), name));
}

TEST(DenseLayerFlops, PlainGptLayerMatchesTheClosedForm) {
  // Forward of one GPT layer, b sequences of s tokens, hidden h (Narayanan et al. 2021):
  //   QKV 2·bs·h·3h = 6bsh², scores QKᵀ 2bs²h, values PV 2bs²h, output projection 2bsh²,
  //   MLP 2·bs·h·4h·2 = 16bsh² → 24bsh² + 4bs²h without masking.
  // Causal FlashAttention skips the upper triangle: 24bsh² + 2bs²h.
  const double b = 2, s = 2048, h = 4096;
  const ModelConfig m = gpt(4096, 32);
  const auto full = layer_operators(m, 0, batch(2, 2048, false), {});
  EXPECT_DOUBLE_EQ(matmul_flops(full), 24 * b * s * h * h + 4 * b * s * s * h);
  const auto causal = layer_operators(m, 0, batch(2, 2048, true), {});
  EXPECT_DOUBLE_EQ(matmul_flops(causal), 24 * b * s * h * h + 2 * b * s * s * h);
  // Backward: GEMMs twice the forward (data and weight gradients), attention 2.5× (FA-2).
  EXPECT_DOUBLE_EQ(matmul_flops(causal, true), 2 * 24 * b * s * h * h + 2.5 * 2 * b * s * s * h);
}

// A window w over s > w causal tokens: query i sees min(i + 1, w) keys, s·w − w²/2 pairs in the
// model's continuous count against s²/2 — at s = 2w, three quarters of the scores.
TEST(SlidingWindow, AttentionComputesOnlyTheWindowedScores) {
  const double b = 2, s = 2048, h = 4096;
  ModelConfig m = gpt(4096, 32);
  const double full = flops_of(layer_operators(m, 0, batch(2, 2048, true), {}), "attention");
  EXPECT_DOUBLE_EQ(full, 2 * b * s * s * h);
  m.sliding_window = 1024;
  EXPECT_DOUBLE_EQ(flops_of(layer_operators(m, 0, batch(2, 2048, true), {}), "attention"), 0.75 * full);
  m.sliding_window_layers = 0.5;  // half the layers windowed: 0.875 on average
  EXPECT_DOUBLE_EQ(flops_of(layer_operators(m, 0, batch(2, 2048, true), {}), "attention"), 0.875 * full);
  m.sliding_window = 4096;  // a window longer than the sequence changes nothing
  EXPECT_DOUBLE_EQ(flops_of(layer_operators(m, 0, batch(2, 2048, true), {}), "attention"), full);
  // The model FLOPs of MFU count the same scores: 6·s·H·(d_qk + d_v)·share/2 a layer and token.
  ModelConfig w = gpt(4096, 32);
  const double attention_full = model_flops_per_token(w, 2048, true).value() - 6.0 * static_cast<double>(count_parameters(w).matmul_active);
  w.sliding_window = 1024;
  const double attention_windowed =
      model_flops_per_token(w, 2048, true).value() - 6.0 * static_cast<double>(count_parameters(w).matmul_active);
  EXPECT_NEAR(attention_windowed, 0.75 * attention_full, 1e-6 * attention_full);
}

// Serving: a decoded token past the window reads `window` keys; a prefill chunk after cached
// tokens sums min(a + i, w) over its tokens, a = kv − q + 1.
TEST(SlidingWindow, RaggedBatchesCapEachTokensKeys) {
  RaggedBatch decode;
  decode.sequences = {{1, 10000, true}, {1, 100, true}};
  EXPECT_DOUBLE_EQ(ragged_attention_work(decode, 4096).score_pairs, 4096.0 + 100.0);
  RaggedBatch chunk;
  chunk.sequences = {{10, 4100, false}};  // tokens see 4091 … 4100 keys, capped at 4096
  EXPECT_DOUBLE_EQ(ragged_attention_work(chunk, 4096).score_pairs, 4091.0 + 4092 + 4093 + 4094 + 4095 + 5 * 4096.0);
  EXPECT_DOUBLE_EQ(ragged_attention_work(chunk).score_pairs, 10 * 4090.0 + 55);
  // What the kernel reads of the cache: the window behind the newest token (and the new tokens
  // before it), not the whole context.
  EXPECT_DOUBLE_EQ(ragged_attention_work(decode, 4096).read_key_tokens, 4096.0 + 100.0);
  EXPECT_DOUBLE_EQ(ragged_attention_work(chunk, 4096).read_key_tokens, 4100.0);  // the first new token still sees key 0
  EXPECT_DOUBLE_EQ(ragged_attention_work(decode, 4096, 0.5).read_key_tokens, 0.5 * 10100 + 0.5 * 4196);
  EXPECT_DOUBLE_EQ(ragged_attention_work(decode).read_key_tokens, 10100.0);
}

// Chunked attention (Llama 4): a sequence of s = k·c + r tokens is k causal squares of c and one
// of r, (k·c² + r²)/s² of the full causal scores; at s = 2c, one half. On the share f of the
// layers only; a sequence no longer than a chunk is full causal attention.
TEST(ChunkedAttention, EachChunkIsACausalSquareOfItsOwn) {
  const double b = 2, s = 2048, h = 4096;
  ModelConfig m = gpt(4096, 32);
  const double full = flops_of(layer_operators(m, 0, batch(2, 2048, true), {}), "attention");
  EXPECT_DOUBLE_EQ(full, 2 * b * s * s * h);
  m.attention_chunk = 1024;
  EXPECT_DOUBLE_EQ(flops_of(layer_operators(m, 0, batch(2, 2048, true), {}), "attention"), 0.5 * full);
  m.attention_chunk = 768;  // 2 chunks of 768 and one of 512: (2·768² + 512²)/2048² = 0.34375
  EXPECT_DOUBLE_EQ(flops_of(layer_operators(m, 0, batch(2, 2048, true), {}), "attention"), 0.34375 * full);
  m.attention_chunk = 1024;
  m.attention_chunk_layers = 0.75;  // Llama 4: three of every four layers chunked
  EXPECT_DOUBLE_EQ(flops_of(layer_operators(m, 0, batch(2, 2048, true), {}), "attention"), (0.25 + 0.75 * 0.5) * full);
  m.attention_chunk = 8192;  // Llama 4's 8,192-token chunk over a 2,048-token sequence: no change
  EXPECT_DOUBLE_EQ(flops_of(layer_operators(m, 0, batch(2, 2048, true), {}), "attention"), full);
  m.sliding_window = 512;
  EXPECT_NE(m.problem(), "");  // a window and chunks together are refused
}

// Gated attention (Qwen3-Next): the query projection yields the gate too, b·s·h·(heads·d) more
// multiply-adds (qkv 3h → 4h outputs, heads·d = h here), and one sigmoid-and-multiply pass over
// the attention's output: b·s·heads·d = b·s·h elements at 4 FLOPs each (sigmoid ~3, the product).
TEST(GatedAttention, TheQueryProjectionYieldsTheGateAndAPassAppliesIt) {
  const double b = 2, s = 2048, h = 4096;
  ModelConfig m = gpt(4096, 32);
  const double qkv = flops_of(layer_operators(m, 0, batch(2, 2048, true), {}), "qkv_proj");
  EXPECT_DOUBLE_EQ(qkv, 2 * b * s * h * 3 * h);
  m.attention_output_gate = true;
  const auto ops = layer_operators(m, 0, batch(2, 2048, true), {});
  EXPECT_DOUBLE_EQ(flops_of(ops, "qkv_proj"), 2 * b * s * h * 4 * h);
  EXPECT_DOUBLE_EQ(flops_of(ops, "attention_output_gate"), 4 * b * s * h);
}

// Serving under chunks: the token at position p sees the p mod c + 1 keys of its own chunk.
TEST(ChunkedAttention, RaggedBatchesSeeOnlyTheirChunk) {
  RaggedBatch decode;
  decode.sequences = {{1, 10000, true}, {1, 100, true}};  // positions 9999 and 99
  EXPECT_DOUBLE_EQ(ragged_attention_work(decode, 0, 1.0, 8192).score_pairs, (9999 % 8192 + 1) + 100.0);
  EXPECT_DOUBLE_EQ(ragged_attention_work(decode, 0, 1.0, 8192, 0.75).score_pairs,
                   0.25 * (10000 + 100) + 0.75 * (1808 + 100));
  RaggedBatch across;
  across.sequences = {{4, 8194, false}};  // positions 8190 … 8193: 8191, 8192 keys, then a new chunk: 1, 2
  EXPECT_DOUBLE_EQ(ragged_attention_work(across, 0, 1.0, 8192).score_pairs, 8191.0 + 8192 + 1 + 2);
  RaggedBatch prompt;
  prompt.sequences = {{20000, 20000, false}};  // two whole chunks and 3,616 tokens
  EXPECT_DOUBLE_EQ(ragged_attention_work(prompt, 0, 1.0, 8192).score_pairs, 2 * 8192.0 * 8193 / 2 + 3616.0 * 3617 / 2);
  // The cache read: from the start of the oldest new token's chunk.
  EXPECT_DOUBLE_EQ(ragged_attention_work(decode, 0, 1.0, 8192).read_key_tokens, 1808.0 + 100);
  EXPECT_DOUBLE_EQ(ragged_attention_work(across, 0, 1.0, 8192).read_key_tokens, 8194.0);
  EXPECT_DOUBLE_EQ(ragged_attention_work(prompt, 0, 1.0, 8192).read_key_tokens, 20000.0);
}

// A parallel block: the MLP reads the attention's normalised input (no norm or kept input of
// its own) and both branches join the residual once.
TEST(ParallelBlock, OneNormAndOneResidualForBothBranches) {
  ModelConfig m = bundled("llama3-8b");
  m.parallel_block = true;
  std::vector<std::string> names;
  for (const auto& op : layer_operators(m, 0, batch(1, 4096), {})) names.push_back(op.name);
  EXPECT_EQ(names, (std::vector<std::string>{"attention_norm", "qkv_proj", "rotary", "attention", "attention_out_proj",
                                             "mlp_gate_up_proj", "mlp_activation", "mlp_down_proj",
                                             "mlp_residual"}));
  const ModelConfig sequential = bundled("llama3-8b");
  auto saved = [](const std::vector<ModelOperator>& ops) {
    double sum = 0;
    for (const auto& op : ops) sum += op.saved.value();
    return sum;
  };
  // The sequential block keeps two tensors more, each 4096 tokens × 4096 hidden in bf16: the MLP
  // norm's input (for its backward) and the MLP's input (the norm's output, for the weight
  // gradients) — 2 · 4096 · 4096 · 2 bytes.
  const double difference = saved(layer_operators(sequential, 0, batch(1, 4096), {})) -
                            saved(layer_operators(m, 0, batch(1, 4096), {}));
  EXPECT_DOUBLE_EQ(difference, 2.0 * 4096 * 4096 * 2);
}

TEST(DenseLayerFlops, OperatorsOfALlamaLayerInOrder) {
  std::vector<std::string> names;
  for (const auto& op : layer_operators(bundled("llama3-8b"), 0, batch(1, 4096), {})) names.push_back(op.name);
  EXPECT_EQ(names, (std::vector<std::string>{"attention_norm", "qkv_proj", "rotary", "attention", "attention_out_proj",
                                             "attention_residual", "mlp_norm", "mlp_gate_up_proj",
                                             "mlp_activation", "mlp_down_proj", "mlp_residual"}));
}

TEST(Fp8Recipes, EachFp8GemmQuantisesItsInputAndItsOutputGradient) {
  // Llama-3 8B, one 4096-token sequence, fp8 GEMMs. qkv_proj is [T×h]·[h×(H+2G)d] with
  // T = 4096, h = 4096, (H + 2G)d = (32 + 16)·128 = 6144. Delayed scaling casts its input
  // (2 B read, 1 B row-wise and 1 B transposed written: 4 B per element of T×h) forward and its
  // output gradient (T×6144) backward; current scaling reads each once more for its amax (6 B);
  // MXFP8 writes a scale byte per 32 elements of each copy (4 + 2/32 B).
  const ModelConfig llama = bundled("llama3-8b");
  for (auto [recipe, per_element] : {std::pair{Fp8Recipe::kDelayed, 4.0}, std::pair{Fp8Recipe::kCurrent, 6.0},
                                     std::pair{Fp8Recipe::kMxfp8, 4.0 + 2.0 / 32}}) {
    SCOPED_TRACE(to_string(recipe));
    MicroBatch mb = batch(1, 4096);
    mb.dtype = DType::kFp8;
    mb.fp8_recipe = recipe;
    const std::vector<ModelOperator> ops = layer_operators(llama, 0, mb, {});
    auto find = [&](const std::string& name) {
      auto it = std::find_if(ops.begin(), ops.end(), [&](const ModelOperator& op) { return op.name == name; });
      EXPECT_NE(it, ops.end()) << name;
      return *it;
    };
    const ModelOperator cast = find("qkv_proj_fp8_cast");
    EXPECT_DOUBLE_EQ(cast.forward.bytes_read_written.value(), 4096.0 * 4096 * per_element);
    EXPECT_DOUBLE_EQ(cast.backward.bytes_read_written.value(), 4096.0 * 6144 * per_element);
    EXPECT_EQ(cast.forward.kind, OperatorKind::kMemoryBound);
    // One per fp8 GEMM: qkv, out_proj, the fused gate and up (one input), down; the attention
    // core stays 16-bit.
    EXPECT_EQ(std::count_if(ops.begin(), ops.end(),
                            [](const ModelOperator& op) { return op.name.ends_with("_fp8_cast"); }),
              4);
    // The fused gate/up GEMM casts its input once and its 2f-wide output gradient.
    const ModelOperator gate_up = find("mlp_gate_up_proj_fp8_cast");
    EXPECT_DOUBLE_EQ(gate_up.forward.bytes_read_written.value(), 4096.0 * 4096 * per_element);
    EXPECT_DOUBLE_EQ(gate_up.backward.bytes_read_written.value(), 4096.0 * 2 * 14336 * per_element);
  }
  // bf16 GEMMs quantise nothing.
  for (const ModelOperator& op : layer_operators(llama, 0, batch(1, 4096), {})) {
    EXPECT_FALSE(op.name.ends_with("_fp8_cast")) << op.name;
  }
}

TEST(Fp8Recipes, SequenceParallelCastsTheShardBeforeTheAllGather) {
  // Llama-3 8B, one 4096-token sequence, fp8 current scaling (6 B per element), TP 4 with SP:
  // T = 4096, T_sp = 1024. The column-parallel GEMMs' inputs (qkv, gate_up) are gathered from
  // the sequence shards and the row-parallel GEMMs' output gradients (out_proj, down) too:
  // Transformer Engine quantises the T_sp × h shard before the all-gather. The other casts
  // (their local tensors) keep all T rows: qkv's output gradient T × 6144/4, out_proj's input
  // T × 4096/4. Without SP every cast covers T rows.
  const ModelConfig llama = bundled("llama3-8b");
  MicroBatch mb = batch(1, 4096);
  mb.dtype = DType::kFp8;
  mb.fp8_recipe = Fp8Recipe::kCurrent;
  const double T = 4096, T_sp = 1024, h = 4096, f = 14336;
  const std::vector<ModelOperator> sp = layer_operators(llama, 0, mb, {4, 1, 1, true});
  EXPECT_DOUBLE_EQ(find(sp, "qkv_proj_fp8_cast").forward.bytes_read_written.value(), T_sp * h * 6);
  EXPECT_DOUBLE_EQ(find(sp, "qkv_proj_fp8_cast").backward.bytes_read_written.value(), T * 6144 / 4 * 6);
  EXPECT_DOUBLE_EQ(find(sp, "attention_out_proj_fp8_cast").forward.bytes_read_written.value(), T * h / 4 * 6);
  EXPECT_DOUBLE_EQ(find(sp, "attention_out_proj_fp8_cast").backward.bytes_read_written.value(), T_sp * h * 6);
  EXPECT_DOUBLE_EQ(find(sp, "mlp_gate_up_proj_fp8_cast").forward.bytes_read_written.value(), T_sp * h * 6);
  EXPECT_DOUBLE_EQ(find(sp, "mlp_down_proj_fp8_cast").backward.bytes_read_written.value(), T_sp * h * 6);
  const std::vector<ModelOperator> plain = layer_operators(llama, 0, mb, {4, 1, 1, false});
  EXPECT_DOUBLE_EQ(find(plain, "qkv_proj_fp8_cast").forward.bytes_read_written.value(), T * h * 6);
  EXPECT_DOUBLE_EQ(find(plain, "mlp_down_proj_fp8_cast").backward.bytes_read_written.value(), T * h * 6);
  EXPECT_DOUBLE_EQ(find(plain, "mlp_down_proj_fp8_cast").forward.bytes_read_written.value(), T * f / 4 * 6);
}

TEST(Fp4Recipes, EachFp4GemmQuantisesItsInputAndItsOutputGradient) {
  // The same qkv_proj in fp4. NVFP4 (Transformer Engine's NVFP4BlockScaling) reads the 16-bit
  // tensor for its per-tensor amax, again for the cast, and writes a row-wise and a column-wise
  // (Hadamard-transformed) copy of 0.5 B per element plus an E4M3 scale per 16:
  // 2 + 2 + 2·(0.5 + 1/16) = 5.125 B per element. MXFP4 has no per-tensor scale and an E8M0
  // scale per 32: 2 + 2·(0.5 + 1/32) = 3.0625 B.
  EXPECT_DOUBLE_EQ(fp4_cast_bytes_per_element(Fp4Recipe::kNvfp4), 5.125);
  EXPECT_DOUBLE_EQ(fp4_cast_bytes_per_element(Fp4Recipe::kMxfp4), 3.0625);
  EXPECT_FALSE(training_quantisation(DType::kBf16, Fp8Recipe::kDelayed, Fp4Recipe::kNvfp4).has_value());
  const ModelConfig llama = bundled("llama3-8b");
  for (auto [recipe, per_element] : {std::pair{Fp4Recipe::kNvfp4, 5.125}, std::pair{Fp4Recipe::kMxfp4, 3.0625}}) {
    SCOPED_TRACE(to_string(recipe));
    MicroBatch mb = batch(1, 4096);
    mb.dtype = DType::kFp4;
    mb.fp4_recipe = recipe;
    const std::vector<ModelOperator> ops = layer_operators(llama, 0, mb, {});
    auto it = std::find_if(ops.begin(), ops.end(), [](const ModelOperator& op) { return op.name == "qkv_proj_fp4_cast"; });
    ASSERT_NE(it, ops.end());
    EXPECT_DOUBLE_EQ(it->forward.bytes_read_written.value(), 4096.0 * 4096 * per_element);
    EXPECT_DOUBLE_EQ(it->backward.bytes_read_written.value(), 4096.0 * 6144 * per_element);
    // The GEMMs themselves read fp4 operands (0.5625 B with NVFP4's scales) and write bf16; the
    // attention core and the norms stay 16-bit.
    auto gemm = std::find_if(ops.begin(), ops.end(), [](const ModelOperator& op) { return op.name == "qkv_proj"; });
    ASSERT_NE(gemm, ops.end());
    EXPECT_EQ(gemm->forward.dtype, DType::kFp4);
    EXPECT_DOUBLE_EQ(gemm->forward.bytes_read_written.value(),
                     (4096.0 * 4096 + 4096.0 * 6144) * 0.5625 + 4096.0 * 6144 * 2);
    auto attention = std::find_if(ops.begin(), ops.end(), [](const ModelOperator& op) { return op.name == "attention"; });
    ASSERT_NE(attention, ops.end());
    EXPECT_EQ(attention->forward.dtype, DType::kBf16);
    EXPECT_EQ(std::count_if(ops.begin(), ops.end(),
                            [](const ModelOperator& op) { return op.name.ends_with("_fp4_cast"); }),
              4);
  }
}

TEST(QuantisedTraining, GemmInputsAreKeptQuantised) {
  // Llama-3 8B layer, one 4096-token sequence (T), h = 4096, f = 14336, H·d = h. Transformer
  // Engine's modules keep each GEMM input for the weight gradient as its quantised copy: the
  // QKV input (T·h), the MLP input (T·h) and the down projection's input (T·f) go from 2 B to
  // q B per element; the attention output stays in 16 bits (the attention backward reads it)
  // and the output projection keeps its quantised copy beside it (+q·T·h). bf16 − quantised:
  // T·((2 − q)(2h + f) − q·h): fp8 (q = 1) T·(h + f), NVFP4 (q = 0.5625) T·(1.4375(2h + f) − 0.5625h).
  const ModelConfig llama = bundled("llama3-8b");
  const double T = 4096, h = 4096, f = 14336;
  const Bytes bf16 = saved_activation_bytes(layer_operators(llama, 0, batch(1, 4096), {}), false);
  for (auto [dtype, q] : {std::pair{DType::kFp8, 1.0}, std::pair{DType::kFp4, 0.5625}}) {
    SCOPED_TRACE(to_string(dtype));
    MicroBatch mb = batch(1, 4096);
    mb.dtype = dtype;
    const Bytes quantised = saved_activation_bytes(layer_operators(llama, 0, mb, {}), false);
    EXPECT_DOUBLE_EQ((bf16 - quantised).value(), T * ((2 - q) * (2 * h + f) - q * h));
  }
}

TEST(MoeLayerFlops, MixtralLayerMatchesTheClosedForm) {
  // Mixtral layer, b = 1, s = T = 4096, h = 4096, 32 heads of 128, 8 KV heads, 8 experts
  // (f_e = 14336), top-2. Forward:
  //   QKV 2T·h·(32 + 2·8)·128 = 2T·h·6144, output 2T·h², attention 4·b·s²·h · ½ (causal),
  //   router 2T·h·8, experts 2·(2T)·3·h·f_e (two SwiGLU experts per token).
  const double T = 4096, h = 4096, s = 4096, f = 14336;
  const auto ops = layer_operators(bundled("mixtral-8x7b"), 0, batch(1, 4096), {});
  const double expected = 2 * T * h * 6144 + 2 * T * h * h + 2 * s * s * h + 2 * T * h * 8 + 2 * (2 * T) * 3 * h * f;
  EXPECT_DOUBLE_EQ(matmul_flops(ops), expected);
  EXPECT_DOUBLE_EQ(flops_of(ops, "router"), 2 * T * h * 8);
  // The grouped expert GEMM: 8 groups of 2T/8 = 1024 rows each, gate and up fused (2f_e).
  const GemmShape up = find(ops, "expert_gate_up_proj").forward.shape;
  EXPECT_EQ(up.batch, 8);
  EXPECT_EQ(up.m, 1024);
  EXPECT_EQ(up.n, 2 * 14336);
  EXPECT_EQ(up.k, 4096);
}

TEST(MoeLayerFlops, DeepSeekV3MlaLayerWithSharedExpertMatchesTheClosedForm) {
  // DeepSeek-V3 layer 3 (the first MoE layer), b = 1, s = T = 4096, h = 7168, 128 heads.
  // MLA projections: 2T·(h·1536 + 1536·128·192 + h·576 + 512·128·256 + 128·128·h);
  // attention on the materialised dims: 2·b·s²·128·(192 + 128) · ½;
  // router 2T·h·256; 8 routed experts 2·8T·3·h·2048; 1 shared expert 2T·3·h·2048.
  const double T = 4096, h = 7168, s = 4096;
  const double mla = 2 * T * (h * 1536 + 1536 * 128 * 192 + h * 576 + 512 * 128 * 256 + 128 * 128 * h);
  const double attention = 2 * s * s * 128 * (192 + 128) * 0.5;
  const double moe = 2 * T * h * 256 + 2 * (8 * T) * 3 * h * 2048 + 2 * T * 3 * h * 2048;
  const auto ops = layer_operators(bundled("deepseek-v3"), 3, batch(1, 4096), {});
  EXPECT_DOUBLE_EQ(matmul_flops(ops), mla + attention + moe);
  EXPECT_DOUBLE_EQ(flops_of(ops, "attention"), attention);
  // Layer 0 is dense: SwiGLU 2T·3·h·18432 instead of the MoE part.
  const auto dense = layer_operators(bundled("deepseek-v3"), 0, batch(1, 4096), {});
  EXPECT_DOUBLE_EQ(matmul_flops(dense), mla + attention + 2 * T * 3 * h * 18432);
}

TEST(AttentionKernels, UnfusedCoreMaterialisesEveryScore) {
  // GPT layer h = 768, 12 heads of d = 64, b = 2, s = 1024, causal. Unfused, the scores are
  // computed in full (the mask is applied after): Q·Kᵀ and P·V are each 2·b·a·s²·d FLOPs in
  // b·a groups; the fused softmax reads and writes the b·a·s² bf16 scores (2 bytes each), and
  // its backward reads probabilities and gradient and writes a gradient (1.5×). FlashAttention
  // skips the masked half: its forward is half of the two products together.
  const double b = 2, a = 12, s = 1024, d = 64;
  MicroBatch mb = batch(2, 1024);
  const auto flash = layer_operators(gpt(768, 12), 0, mb, {});
  mb.attention = AttentionKernel::kUnfused;
  const auto unfused = layer_operators(gpt(768, 12), 0, mb, {});
  const double product = 2 * b * a * s * s * d;
  EXPECT_DOUBLE_EQ(flops_of(unfused, "attention_scores"), product);
  EXPECT_DOUBLE_EQ(flops_of(unfused, "attention_context"), product);
  EXPECT_DOUBLE_EQ(flops_of(flash, "attention"), 0.5 * 2 * product);
  const GemmShape scores = find(unfused, "attention_scores").forward.shape;
  EXPECT_EQ(scores.batch, b * a);
  EXPECT_EQ(scores.m, s);
  EXPECT_EQ(scores.n, s);
  EXPECT_EQ(scores.k, d);
  const ModelOperator& softmax = find(unfused, "attention_softmax");
  EXPECT_DOUBLE_EQ(softmax.forward.bytes_read_written.value(), 2 * b * a * s * s * 2);
  EXPECT_DOUBLE_EQ(softmax.backward.bytes_read_written.value(), 1.5 * 2 * b * a * s * s * 2);
  EXPECT_DOUBLE_EQ(find(unfused, "attention_context").backward.flops.value(), 2 * product);
  // The core is exactly these three (and FlashAttention's one kernel); the rest is unchanged.
  std::vector<std::string> core;
  for (const auto& op : unfused) {
    if (op.attention_core) core.push_back(op.name);
  }
  EXPECT_EQ(core, (std::vector<std::string>{"attention_scores", "attention_softmax", "attention_context"}));
  EXPECT_TRUE(find(flash, "attention").attention_core);
  EXPECT_DOUBLE_EQ(matmul_flops(unfused) - 2 * product, matmul_flops(flash) - flops_of(flash, "attention"));
  EXPECT_EQ(attention_kernel_from("unfused"), AttentionKernel::kUnfused);
  EXPECT_EQ(attention_kernel_from("eager"), std::nullopt);
}

TEST(AttentionKernels, MegatronsSoftmaxFallsBackToPyTorchWhereItsKernelDoesNotFit) {
  // 16 heads over TP 8: 2 per rank. Megatron's fused softmax needs b·heads a multiple of 4
  // (its kernel's batches per block at s > 128). At micro-batch 2 (4 batches) it runs: one
  // kernel each way, 2·2 bytes a score forward, 1.5× that backward, the bf16 output kept. At
  // micro-batch 1 (2 batches) PyTorch's softmax_in_fp32 path runs: five kernels each way,
  // 2·2 + 24 bytes a score forward (casts, scale, masked_fill, softmax in fp32), 2·2 + 36
  // backward, and its fp32 output kept beside the bf16 one. A sequence of 4,100 (over 4,096)
  // misses the kernel too, and so does one of 1,022 (not a multiple of 4).
  const ShardingFactors tp8{8};
  auto softmax = [&](int64_t b, int64_t s) {
    MicroBatch mb = batch(b, s);
    mb.attention = AttentionKernel::kUnfused;
    return find(layer_operators(gpt(1024, 16), 0, mb, tp8), "attention_softmax");
  };
  const double s = 1024;
  const ModelOperator fused = softmax(2, 1024);
  const double scores2 = 2 * 2 * s * s;
  EXPECT_EQ(fused.forward.kernels, 1);
  EXPECT_DOUBLE_EQ(fused.forward.bytes_read_written.value(), 4 * scores2);
  EXPECT_DOUBLE_EQ(fused.backward.bytes_read_written.value(), 6 * scores2);
  EXPECT_DOUBLE_EQ(fused.saved_scores.value(), 2 * scores2);
  const ModelOperator torch = softmax(1, 1024);
  const double scores1 = 1 * 2 * s * s;
  EXPECT_EQ(torch.forward.kernels, 5);
  EXPECT_EQ(torch.backward.kernels, 5);
  EXPECT_DOUBLE_EQ(torch.forward.bytes_read_written.value(), 28 * scores1);
  EXPECT_DOUBLE_EQ(torch.backward.bytes_read_written.value(), 40 * scores1);
  EXPECT_DOUBLE_EQ(torch.saved_scores.value(), (4 + 2) * scores1);
  EXPECT_EQ(softmax(4, 4096).forward.kernels, 1);
  EXPECT_EQ(softmax(4, 4100).forward.kernels, 5);
  EXPECT_EQ(softmax(4, 1022).forward.kernels, 5);
}

// ---- activations each operator keeps for the backward (the memory model's input) ---------

TEST(SavedActivations, GptLayerWithDropoutIsKorthikantisFormula) {
  // GPT-3's layer shape scaled down: h = 1024, a = 16 heads, MLP 4h, LayerNorm, dropout 0.1 on
  // the probabilities and after each residual branch; s = 2048, b = 2. Korthikanti et al.
  // (Table 2; memory_model.h): sbh·(10 + 24/t + 5as/(ht)) without recomputation and with the
  // unfused core, /t for the 10 with sequence parallelism, the 5as/h dropped by selective
  // recomputation; FlashAttention keeps the selective form plus 4·a·s·b/t of row statistics.
  ModelConfig m = gpt(1024, 16);
  m.attention_dropout = m.hidden_dropout = 0.1;
  const double s = 2048, b = 2, h = 1024, a = 16;
  for (int t : {1, 2, 4, 8}) {
    for (bool sp : {false, true}) {
      SCOPED_TRACE(std::to_string(t) + (sp ? " SP" : ""));
      MicroBatch mb = batch(2, 2048);
      mb.attention = AttentionKernel::kUnfused;
      const ShardingFactors sh{t, 1, 1, sp};
      const auto unfused = layer_operators(m, 0, mb, sh);
      EXPECT_DOUBLE_EQ(saved_activation_bytes(unfused, false).value(),
                       activation_bytes_per_layer(s, b, h, a, t, sp, Recomputation::kNone).value());
      EXPECT_DOUBLE_EQ(saved_activation_bytes(unfused, true).value(),
                       activation_bytes_per_layer(s, b, h, a, t, sp, Recomputation::kSelective).value());
      const auto flash = layer_operators(m, 0, batch(2, 2048), sh);
      EXPECT_DOUBLE_EQ(saved_activation_bytes(flash, false).value(),
                       flash_activation_bytes_per_layer(s, b, h, a, t, sp, Recomputation::kNone).value());
    }
  }
}

TEST(SavedActivations, WithoutDropoutTheMasksGo) {
  // The same layer without dropout (t = 1): the two sbh masks go (34 → 32) and of the unfused
  // core's 5as²b only the softmax output's 2as²b stays (the product reads it directly).
  const ModelConfig m = gpt(1024, 16);
  const double sbh = 2048.0 * 2 * 1024, as2b = 16.0 * 2048 * 2048 * 2;
  MicroBatch mb = batch(2, 2048);
  mb.attention = AttentionKernel::kUnfused;
  const auto ops = layer_operators(m, 0, mb, {});
  EXPECT_DOUBLE_EQ(saved_activation_bytes(ops, false).value(), 32 * sbh + 2 * as2b);
  EXPECT_DOUBLE_EQ(saved_activation_bytes(ops, true).value(), 32 * sbh);
  // Dropout also costs traffic: the unfused core's dropout kernel reads the probabilities and
  // writes the output and the mask, 5 bytes per score.
  ModelConfig with = m;
  with.attention_dropout = 0.1;
  EXPECT_DOUBLE_EQ(find(layer_operators(with, 0, mb, {}), "attention_dropout").forward.bytes_read_written.value(),
                   5 * as2b);
}

TEST(SavedActivations, Llama3_8BLayerKeepsItsGatedMlpAndGroupedKv) {
  // Llama-3 8B: h = 4096, 32 heads and 8 KV heads of 128, SwiGLU f = 14336, no dropout;
  // b = 1, s = T = 8192, tp 1, FlashAttention. 16-bit tensors kept, in elements:
  //   norm inputs 2·T·h, QKV input T·h, Q T·h, K and V 2·T·8·128 = T·h/2, output projection
  //   input T·h, MLP input T·h, gate and up outputs 2·T·f, product T·f
  // = T·(6.5h + 3f); plus the row statistics, 4·T·32 bytes.
  const double T = 8192, h = 4096, f = 14336;
  const auto ops = layer_operators(bundled("llama3-8b"), 0, batch(1, 8192), {});
  EXPECT_DOUBLE_EQ(saved_activation_bytes(ops, false).value(), 2 * T * (6.5 * h + 3 * f) + 4 * T * 32);
}

TEST(SavedActivations, MixtralLayerKeepsEveryRoutedSlot) {
  // Mixtral (h = 4096, 32 heads, 8 KV heads of 128, 8 experts of f_e = 14336, top-2), b = 1,
  // s = T = 4096, tp 1, ep 1. In 16-bit elements: attention norm input T·h, QKV input T·h,
  // Q T·h, K and V T·h/2, output projection input T·h, MLP norm input T·h, router input T·h
  // (6.5·T·h); per routed slot (2T of them) its input h, gate and up outputs 2f_e, product
  // f_e and output h.
  // fp32: the router's 8 probabilities and 2 chosen weights per token, and the 8 scores its
  // load-balancing loss keeps (Megatron's default recipe trains with one); row statistics 4·T·32.
  const double T = 4096, h = 4096, f = 14336;
  const auto ops = layer_operators(bundled("mixtral-8x7b"), 0, batch(1, 4096), {});
  const double elements = T * 6.5 * h + 2 * T * (2 * h + 3 * f);
  EXPECT_DOUBLE_EQ(saved_activation_bytes(ops, false).value(), 2 * elements + 4 * T * (8 + 2 + 8) + 4 * T * 32);
}

// Megatron's recompute_modules on a DeepSeek-V3 layer (b = 1, s = T = 4096, tp 1, ep 1):
// mla_up_proj drops the attention's Q (T·128·192) and K, V (T·128·(192 + 128)) — 16-bit, so
// 2·T·128·(192 + 192 + 128) bytes — and re-runs the up-projections and rotary in the backward;
// the latents they read stay kept. moe_act drops the 8T routed slots' down-projection input
// (2·8T·2048 bytes) and re-runs the activation. mlp keeps a dense layer's MLP input only: its
// gate and up outputs and product (2·T·3·18432 bytes) go, its whole forward runs again.
TEST(SavedActivations, RecomputedModulesKeepOnlyTheirInputs) {
  const ModelConfig ds = bundled("deepseek-v3");
  const double T = 4096;
  auto with = [](RecomputeModules r) {
    MicroBatch mb = batch(1, 4096);
    mb.recompute = r;
    return mb;
  };
  auto recomputed_names = [](const std::vector<ModelOperator>& ops) {
    std::vector<std::string> names;
    for (const auto& op : ops) {
      if (op.recomputed) names.push_back(op.name);
    }
    return names;
  };
  const auto moe = layer_operators(ds, 3, batch(1, 4096), {});
  EXPECT_TRUE(recomputed_names(moe).empty());
  const double keep = saved_activation_bytes(moe, false).value();

  const auto mla = layer_operators(ds, 3, with({.mla_up_proj = true}), {});
  EXPECT_DOUBLE_EQ(keep - saved_activation_bytes(mla, false).value(), 2 * T * 128 * (192 + 192 + 128));
  EXPECT_EQ(recomputed_names(mla), (std::vector<std::string>{"q_up_proj", "kv_up_proj", "rotary"}));

  const auto act = layer_operators(ds, 3, with({.moe_act = true}), {});
  EXPECT_DOUBLE_EQ(keep - saved_activation_bytes(act, false).value(), 2 * 8 * T * 2048);
  EXPECT_EQ(recomputed_names(act), (std::vector<std::string>{"expert_activation"}));
  EXPECT_DOUBLE_EQ(find(act, "expert_activation_recompute_copy").backward.bytes_read_written.value(),
                   2 * 2 * 8 * T * 2048);

  // layernorm: MLA's input norm is a module of its own (re-run before every layer), the
  // pre-MLP norm only before a MoE block; a dense MLP's norm is fused into its first projection.
  EXPECT_EQ(recomputed_names(layer_operators(ds, 3, with({.layernorm = true}), {})),
            (std::vector<std::string>{"attention_norm", "mlp_norm"}));
  EXPECT_EQ(recomputed_names(layer_operators(ds, 0, with({.layernorm = true}), {})),
            (std::vector<std::string>{"attention_norm"}));
  // Each recomputed norm's output, T·7168, is copied back into its freed storage.
  EXPECT_DOUBLE_EQ(find(layer_operators(ds, 3, with({.layernorm = true}), {}), "mlp_norm_recompute_copy")
                       .backward.bytes_read_written.value(),
                   2 * 2 * T * 7168);

  const auto dense = layer_operators(ds, 0, batch(1, 4096), {});
  const auto mlp = layer_operators(ds, 0, with({.mlp = true}), {});
  EXPECT_DOUBLE_EQ(saved_activation_bytes(dense, false).value() - saved_activation_bytes(mlp, false).value(),
                   2 * T * 3 * 18432);
  EXPECT_EQ(recomputed_names(mlp),
            (std::vector<std::string>{"mlp_gate_up_proj", "mlp_activation", "mlp_down_proj"}));
  // A MoE layer has no dense MLP: "mlp" leaves it alone (Megatron's "moe" is the whole layer).
  EXPECT_DOUBLE_EQ(saved_activation_bytes(layer_operators(ds, 3, with({.mlp = true}), {}), false).value(), keep);

  // The backward pays each recomputed operator's forward once more, and the copy of the new
  // Q, K and V into the storage the forward freed (Megatron's CheckpointWithoutOutput: read and
  // written, 2 · 2·T·128·(192 + 192 + 128) bytes); nothing else changes.
  const ModelOperator& copy = find(mla, "mla_up_proj_recompute_copy");
  EXPECT_DOUBLE_EQ(copy.backward.bytes_read_written.value(), 2 * 2 * T * 128 * (192 + 192 + 128));
  EXPECT_DOUBLE_EQ(copy.forward.bytes_read_written.value(), 0.0);
  EXPECT_EQ(copy.forward.kernels, 0);
  ComputeModelOptions kernels_only;  // the host issues ahead of the GPU: sums are the kernels'
  kernels_only.host_dispatch = Time::zero();
  const ComputeModel cm(test::load_preset("dgx-h100", 1).gpu_specs().front(), kernels_only);
  Time again = cm.time(copy.backward);
  for (const auto& op : mla) {
    if (op.recomputed) again += cm.time(op.forward);
  }
  const iteration_detail::OperatorSums plain = iteration_detail::sum_operators(cm, moe);
  const iteration_detail::OperatorSums sums = iteration_detail::sum_operators(cm, mla);
  EXPECT_GT(again, Time::zero());
  EXPECT_EQ(sums.backward, plain.backward + again);
  EXPECT_EQ(sums.forward, plain.forward);
}

TEST(SavedActivations, OutputSideKeepsTheFp32Softmax) {
  // Final norm input and logits input, 2·T·h each, and the cross-entropy's fp32 softmax over
  // this rank's vocabulary slice, 4·T·⌈V/t⌉: Llama-3 8B (V = 128256), T = 8192, tp 2 with SP
  // (the two h-wide inputs split too).
  const double T = 8192, h = 4096;
  const auto ops = output_operators(bundled("llama3-8b"), batch(1, 8192), {2, 1, 1, true});
  EXPECT_DOUBLE_EQ(saved_activation_bytes(ops, false).value(), 2 * 2 * T * h / 2 + 4 * T * 64128);
}

TEST(LayerFlops, GemmFlopsAreTwiceTokensTimesActiveMatrices) {
  // Every GEMM multiplies each token by each active weight once: forward GEMM FLOPs of a layer
  // = 2 · T · matmul_active(layer), for every bundled model and both layer kinds.
  for (const char* name : {"gpt3-175b", "llama3-8b", "llama3-405b", "mixtral-8x7b", "deepseek-v3"}) {
    const ModelConfig m = bundled(name);
    for (int layer : {0, m.layers - 1}) {
      SCOPED_TRACE(std::string(name) + " layer " + std::to_string(layer));
      const auto ops = layer_operators(m, layer, batch(2, 1024), {});
      double gemm = 0;
      for (const auto& op : ops) gemm += op.forward.kind == OperatorKind::kGemm ? op.forward.flops.value() : 0.0;
      const double expected = 2.0 * 2 * 1024 * static_cast<double>(layer_parameters(m, layer).matmul_active());
      EXPECT_NEAR(gemm, expected, expected * 1e-12);
    }
  }
}

TEST(ModelFlops, SixNPlusAttentionForLlama3_70B) {
  // N = layer matrices 80 · (150,994,944 + 704,643,072) + output head 128256·8192
  //   = 68,451,041,280 + 1,050,673,152 = 69,501,714,432.
  // Per token at s = 8192, causal: 6N + 6·L·s·h_attn = 417,010,286,592 + 6·80·8192·8192
  //   = 417,010,286,592 + 32,212,254,720 = 449,222,541,312.
  const ModelConfig m = bundled("llama3-70b");
  EXPECT_EQ(count_parameters(m).matmul_active, 69'501'714'432);
  EXPECT_DOUBLE_EQ(model_flops_per_token(m, 8192).value(), 449'222'541'312.0);
  // Non-causal doubles the attention term: PaLM's 6N + 12·L·H·Q·T.
  EXPECT_DOUBLE_EQ(model_flops_per_token(m, 8192, false).value(), 417'010'286'592.0 + 2 * 32'212'254'720.0);
}

TEST(ModelFlops, EqualThreeTimesTheForwardOperatorFlops) {
  // Model FLOPs count the backward as 2× forward, so 3 × (forward GEMM + attention FLOPs of
  // every layer and the logits) / tokens must equal model_flops_per_token exactly.
  for (const char* name : {"gpt3-175b", "llama3-8b", "mixtral-8x7b", "deepseek-v3"}) {
    SCOPED_TRACE(name);
    const ModelConfig m = bundled(name);
    const MicroBatch mb = batch(1, 2048);
    double forward = matmul_flops(output_operators(m, mb, {})) + matmul_flops(embedding_operators(m, mb, {}));
    for (int layer = 0; layer < m.layers; ++layer) forward += matmul_flops(layer_operators(m, layer, mb, {}));
    const double per_token = model_flops_per_token(m, 2048).value();
    EXPECT_NEAR(3 * forward / 2048, per_token, per_token * 1e-12);
  }
}

TEST(Sharding, TensorParallelismDividesMatmulsAndSequenceParallelismTheRest) {
  // Llama-3 70B: 64 heads, 8 KV heads, ffn 28672 all divide by 8: every GEMM and the attention
  // core shrink exactly 8×. Without SP the norms and residuals are replicated; with SP they
  // shrink 8× too.
  const ModelConfig m = bundled("llama3-70b");
  const MicroBatch mb = batch(1, 8192);
  const auto whole = layer_operators(m, 0, mb, {});
  const auto tp8 = layer_operators(m, 0, mb, {8, 1, 1, false});
  const auto tp8_sp = layer_operators(m, 0, mb, {8, 1, 1, true});
  EXPECT_DOUBLE_EQ(8 * matmul_flops(tp8), matmul_flops(whole));
  EXPECT_DOUBLE_EQ(find(tp8, "mlp_norm").forward.bytes_read_written.value(),
                   find(whole, "mlp_norm").forward.bytes_read_written.value());
  EXPECT_DOUBLE_EQ(8 * find(tp8_sp, "mlp_norm").forward.bytes_read_written.value(),
                   find(whole, "mlp_norm").forward.bytes_read_written.value());
  // The QKV GEMM's columns: (64 + 2·8)·128 / 8 = 1280.
  EXPECT_EQ(find(tp8, "qkv_proj").forward.shape.n, 1280);
}

TEST(Sharding, KvHeadsAreReplicatedWhenTpExceedsThem) {
  // Llama-3 8B (8 KV heads) at tp = 16: 2 query heads and 1 replicated KV head per GPU →
  // QKV columns (2 + 2·1)·128 = 512.
  const auto ops = layer_operators(bundled("llama3-8b"), 0, batch(1, 4096), {16, 1, 1, false});
  EXPECT_EQ(find(ops, "qkv_proj").forward.shape.n, 512);
}

TEST(Sharding, ContextParallelismDividesEverythingIncludingCausalAttention) {
  // cp = 4: each GPU holds 2048 of the 8192 tokens against all 8192 keys; with the load-balanced
  // causal split its attention is a quarter of the whole: 2·b·(s/4)·s·h · ... = whole / 4.
  const ModelConfig m = bundled("llama3-8b");
  const MicroBatch mb = batch(1, 8192);
  const auto whole = layer_operators(m, 0, mb, {});
  const auto cp4 = layer_operators(m, 0, mb, {1, 4, 1, false});
  EXPECT_DOUBLE_EQ(4 * matmul_flops(cp4), matmul_flops(whole));
  EXPECT_DOUBLE_EQ(4 * flops_of(cp4, "attention"), flops_of(whole, "attention"));
  const GemmShape qk = find(cp4, "attention").forward.shape;
  EXPECT_EQ(qk.m, 2048);
  EXPECT_EQ(qk.n, 8192);
}

TEST(Sharding, ExpertParallelismRegroupsButKeepsTheRoutedWork) {
  // Mixtral, T = 4096 tokens per GPU, top-2: the GPU computes 8192 routed token-slots whatever
  // ep is; ep = 8 leaves 1 expert with all 8192 rows, ep = 2 leaves 4 experts of 2048 rows.
  // Expert tensor parallelism (= tp) splits f_e: tp = 2 halves the expert FLOPs.
  const ModelConfig m = bundled("mixtral-8x7b");
  const MicroBatch mb = batch(1, 4096);
  const double whole = flops_of(layer_operators(m, 0, mb, {}), "expert_gate_up_proj");
  const auto ep8 = layer_operators(m, 0, mb, {1, 1, 8, false});
  EXPECT_DOUBLE_EQ(flops_of(ep8, "expert_gate_up_proj"), whole);
  EXPECT_EQ(find(ep8, "expert_gate_up_proj").forward.shape.batch, 1);
  EXPECT_EQ(find(ep8, "expert_gate_up_proj").forward.shape.m, 8192);
  const auto ep2 = layer_operators(m, 0, mb, {1, 1, 2, false});
  EXPECT_EQ(find(ep2, "expert_gate_up_proj").forward.shape.batch, 4);
  EXPECT_EQ(find(ep2, "expert_gate_up_proj").forward.shape.m, 2048);
  const auto tp2 = layer_operators(m, 0, mb, {2, 1, 8, false});
  EXPECT_DOUBLE_EQ(2 * flops_of(tp2, "expert_gate_up_proj"), whole);
}

TEST(ExpertGemms, PerExpertIssueIsOneHostGemmPerLocalExpertAndPass) {
  // DeepSeek-V3 on ep 8: 32 local experts, each touched by the 4096·8 slots of a micro-batch.
  // Issued per expert, each expert GEMM is a kernel of its own issued by the host: 32 in the
  // forward, 64 (data and weight gradients) in the backward; grouped, one kernel, no host issue.
  // The FLOPs and bytes do not change, nor do the dense GEMMs.
  const ModelConfig m = bundled("deepseek-v3");
  MicroBatch mb = batch(1, 4096);
  const ShardingFactors ep8{1, 1, 8, false};
  const auto grouped = layer_operators(m, 5, mb, ep8);
  mb.expert_gemms = ExpertGemms::kPerExpert;
  const auto per_expert = layer_operators(m, 5, mb, ep8);
  for (const char* name : {"expert_gate_up_proj", "expert_down_proj"}) {
    const ModelOperator& g = find(grouped, name);
    const ModelOperator& p = find(per_expert, name);
    EXPECT_EQ(g.forward.host_issued_kernels, 0) << name;
    EXPECT_EQ(g.forward.kernels, 1) << name;
    EXPECT_EQ(p.forward.host_issued_kernels, 32) << name;
    EXPECT_EQ(p.forward.kernels, 32) << name;
    EXPECT_EQ(p.backward.host_issued_kernels, 64) << name;
    EXPECT_DOUBLE_EQ(p.forward.flops.value(), g.forward.flops.value()) << name;
    EXPECT_DOUBLE_EQ(p.backward.bytes_read_written.value(), g.backward.bytes_read_written.value()) << name;
  }
  EXPECT_EQ(find(per_expert, "shared_expert_gate_up_proj").forward.host_issued_kernels, 0);
  EXPECT_EQ(find(per_expert, "router").forward.host_issued_kernels, 0);
  const auto dense = layer_operators(m, 0, mb, ep8);
  EXPECT_EQ(find(dense, "mlp_gate_up_proj").forward.host_issued_kernels, 0);
  EXPECT_EQ(to_string(ExpertGemms::kPerExpert), std::string("per_expert"));
  EXPECT_EQ(expert_gemms_from("grouped"), ExpertGemms::kGrouped);
  EXPECT_FALSE(expert_gemms_from("batched").has_value());
}

TEST(RotaryEmbedding, UnfusedRopeMovesSixTimesTheFusedBytes) {
  // Llama-3 8B, 4096 tokens: rotary on 32 query and 8 key heads of 128. Fused (Transformer
  // Engine's kernel): read and written once forward, twice backward, one kernel. Eager
  // (Megatron's _apply_rotary_pos_emb_bshd): t·cos, the rotated half (negation and cat), ·sin,
  // the sum and the closing cat, 12 element sizes each way, one call for Q and one for K.
  const ModelConfig m = bundled("llama3-8b");
  MicroBatch mb = batch(1, 4096);
  const double elements = 4096.0 * (32 + 8) * 128;
  const ModelOperator fused = find(layer_operators(m, 0, mb, {}), "rotary");
  EXPECT_DOUBLE_EQ(fused.forward.bytes_read_written.value(), 2 * 2 * elements);
  EXPECT_DOUBLE_EQ(fused.backward.bytes_read_written.value(), 4 * 2 * elements);
  EXPECT_EQ(fused.forward.kernels, 1);
  mb.rope_fusion = false;
  const ModelOperator eager = find(layer_operators(m, 0, mb, {}), "rotary");
  EXPECT_DOUBLE_EQ(eager.forward.bytes_read_written.value(), 12 * 2 * elements);
  EXPECT_DOUBLE_EQ(eager.backward.bytes_read_written.value(), 12 * 2 * elements);
  EXPECT_EQ(eager.forward.kernels, 2);
  EXPECT_EQ(eager.backward.kernels, 2);
  EXPECT_DOUBLE_EQ(eager.forward.flops.value(), fused.forward.flops.value());
}

TEST(ExpertGemms, PerExpertBiasesAreAddedInEagerPyTorchOnePassPerExpert) {
  // GPT-OSS 120B on ep 8: 16 local experts of 128, biased, top-4. One micro-batch of 4096 tokens
  // routes 4096 · 4 slots to this GPU's experts (ep divides experts and tokens alike), each of
  // the hidden width 2,880. Megatron Core's TEGroupedMLP adds the second projection's bias per
  // expert in PyTorch (t + b·p, then torch.cat): 6 bf16 element sizes a slot element forward
  // and 6 backward (b's and p's gradients), issued as one operator per expert each way and the
  // cat. A device-side grouped GEMM adds it in its epilogue: no such operator; nor without
  // biases.
  const ModelConfig m = bundled("gpt-oss-120b");
  MicroBatch mb = batch(1, 4096);
  const ShardingFactors ep8{1, 1, 8, false};
  mb.expert_gemms = ExpertGemms::kPerExpert;
  const auto per_expert = layer_operators(m, 1, mb, ep8);
  const ModelOperator& bias = find(per_expert, "expert_output_bias");
  const double elements = 4096.0 * 4 * 2880;
  EXPECT_DOUBLE_EQ(bias.forward.bytes_read_written.value(), 6 * 2 * elements);
  EXPECT_DOUBLE_EQ(bias.backward.bytes_read_written.value(), 6 * 2 * elements);
  EXPECT_EQ(bias.forward.kernels, 16 + 1);
  EXPECT_EQ(bias.backward.kernels, 16);
  EXPECT_EQ(bias.forward.host_issued_kernels, 0);
  // Under DeepEP or HybridEP the routing weights arrive in fp32 and PyTorch promotes the sum and
  // the cat to fp32, then casts back: 2·2 + 24 = 28 bytes a slot element forward, 2·2 + 32 = 36
  // backward, a cast kernel more each way.
  mb.fp32_routing_weights = true;
  const auto fp32_ops = layer_operators(m, 1, mb, ep8);
  const ModelOperator& wide = find(fp32_ops, "expert_output_bias");
  EXPECT_DOUBLE_EQ(wide.forward.bytes_read_written.value(), 28 * elements);
  EXPECT_DOUBLE_EQ(wide.backward.bytes_read_written.value(), 36 * elements);
  EXPECT_EQ(wide.forward.kernels, 16 + 2);
  EXPECT_EQ(wide.backward.kernels, 16 + 2);
  mb.fp32_routing_weights = false;
  // It follows the down projection and comes before the unpermutation.
  EXPECT_EQ(position(per_expert, "expert_down_proj") + 1, position(per_expert, "expert_output_bias"));
  EXPECT_LT(position(per_expert, "expert_output_bias"), position(per_expert, "moe_unpermute"));
  ModelConfig unbiased = m;
  unbiased.mlp_bias = false;
  expect_only_per_expert(unbiased, mb, "expert_output_bias");
}

TEST(ExpertGemms, ClampedGatedActivationClampsAndConcatenatesInEagerPyTorch) {
  // GPT-OSS 120B on ep 8 (as above: 4096 · 4 slots here, expert width 2,880). Its experts'
  // activation clamps the fc1 output's halves (swiglu_limit) and concatenates them before
  // Megatron-Core's fused quick-GEGLU when TEGroupedMLP issues them: per element of one half,
  // 8 bf16 element sizes forward (two clamps read and write a half each, the cat both halves),
  // 15 backward (the clamps' masks and wheres, the chunk's cat), 3 and 7 kernels, one host
  // dispatch each pass (one Python routine); the clamped copy of both halves is kept besides
  // the fc1 output. Recomputed with moe_act, it keeps nothing more; a device-side grouped MLP
  // (or a model without the clamp) runs no such op.
  const ModelConfig m = bundled("gpt-oss-120b");
  ASSERT_TRUE(m.glu_clamp);
  MicroBatch mb = batch(1, 4096);
  const ShardingFactors ep8{1, 1, 8, false};
  mb.expert_gemms = ExpertGemms::kPerExpert;
  const auto ops = layer_operators(m, 1, mb, ep8);
  const ModelOperator& clamp = find(ops, "expert_activation_clamp");
  const double half = 4096.0 * 4 * 2880;
  EXPECT_DOUBLE_EQ(clamp.forward.bytes_read_written.value(), 8 * 2 * half);
  EXPECT_DOUBLE_EQ(clamp.backward.bytes_read_written.value(), 15 * 2 * half);
  EXPECT_EQ(clamp.forward.kernels, 3);
  EXPECT_EQ(clamp.backward.kernels, 7);
  EXPECT_EQ(clamp.forward.host_dispatches, 1);
  EXPECT_EQ(clamp.backward.host_dispatches, 1);
  EXPECT_DOUBLE_EQ(clamp.saved.value(), 2 * 2 * half);
  EXPECT_FALSE(clamp.recomputed);
  mb.recompute.moe_act = true;
  const auto recomputed = layer_operators(m, 1, mb, ep8);
  const ModelOperator& again = find(recomputed, "expert_activation_clamp");
  EXPECT_TRUE(again.recomputed);
  EXPECT_DOUBLE_EQ(again.saved.value(), 0.0);
  mb.recompute.moe_act = false;
  ModelConfig unclamped = m;
  unclamped.glu_clamp = false;
  expect_only_per_expert(unclamped, mb, "expert_activation_clamp");
}

TEST(ExpertGemms, TheAllToAllDispatcherRegroupsReceivedRowsByLocalExpert) {
  // Megatron's alltoall dispatcher receives a GPU's rows grouped by source rank and sorts them
  // by local expert before the experts (rows and fp32 routing weights read and written once),
  // and back before the combine; each backward is the inverse sort. GPT-OSS at ep 8 (16 local
  // experts, 4096 · 4 slots of 2,880): 2 · slots · (2,880 · 2 + 4) and 2 · slots · 2,880 · 2
  // bytes each way. With one local expert, or DeepEP/HybridEP's grouped receive, none.
  const ModelConfig m = bundled("gpt-oss-120b");
  MicroBatch mb = batch(1, 4096);
  mb.sort_received_tokens = true;
  const double slots = 4096.0 * 4;
  const auto ops = layer_operators(m, 1, mb, ShardingFactors{1, 1, 8, false});
  const ModelOperator& sort = find(ops, "moe_sort_by_expert");
  const ModelOperator& unsort = find(ops, "moe_unsort_by_expert");
  EXPECT_DOUBLE_EQ(sort.forward.bytes_read_written.value(), 2 * slots * (2880 * 2 + 4));
  EXPECT_DOUBLE_EQ(sort.backward.bytes_read_written.value(), sort.forward.bytes_read_written.value());
  EXPECT_DOUBLE_EQ(unsort.forward.bytes_read_written.value(), 2 * slots * 2880 * 2);
  EXPECT_DOUBLE_EQ(unsort.backward.bytes_read_written.value(), unsort.forward.bytes_read_written.value());
  EXPECT_LT(position(ops, "moe_permute"), position(ops, "moe_sort_by_expert"));
  EXPECT_LT(position(ops, "moe_sort_by_expert"), position(ops, "expert_gate_up_proj"));
  EXPECT_LT(position(ops, "expert_down_proj"), position(ops, "moe_unsort_by_expert"));
  EXPECT_LT(position(ops, "moe_unsort_by_expert"), position(ops, "moe_unpermute"));
  const auto none = [](const std::vector<ModelOperator>& list) {
    return !has(list, "moe_sort_by_expert") && !has(list, "moe_unsort_by_expert");
  };
  EXPECT_TRUE(none(layer_operators(m, 1, mb, ShardingFactors{1, 1, 128, false})));  // one expert a GPU
  mb.sort_received_tokens = false;
  EXPECT_TRUE(none(layer_operators(m, 1, mb, ShardingFactors{1, 1, 8, false})));
}

TEST(MoeRouter, UnfusedTopkAndLossCountMegatronsPytorchOps) {
  // DeepSeek-V3 (256 experts, sigmoid scores with an expert bias, top-8 within 4 of 8 groups),
  // T = 4096 tokens, U = T · 256 · 4 bytes. Unfused (router_cost.cpp): sigmoid 2U, bias 2U,
  // group-limited top-k 7U, the dense probabilities and map 9.25U = 20.25U in 1 + 2 + 3 + 10 + 8
  // = 24 kernels forward; backward 4U in 8. The sequence aux loss: sigmoid scores normalised
  // (5U, 4 kernels), their routing map (7.25U, 6), the counts and sums (1.25U, 6) = 13.5U in 16
  // forward, 12U in 7 backward. The host dispatches each routine once a pass, its small ops folded.
  const ModelConfig m = bundled("deepseek-v3");
  ASSERT_EQ(m.moe->router_score, RouterScore::kSigmoid);
  MicroBatch mb = batch(1, 4096);
  mb.router = {.fused = false, .loss = LoadBalancingLoss::kSeqAux};
  const double U = 4096.0 * 256 * 4;
  const auto ops = layer_operators(m, 3, mb, {});
  const ModelOperator& topk = find(ops, "router_topk");
  EXPECT_DOUBLE_EQ(topk.forward.bytes_read_written.value(), 20.25 * U);
  EXPECT_EQ(topk.forward.kernels, 24);
  EXPECT_DOUBLE_EQ(topk.backward.bytes_read_written.value(), 4 * U);
  EXPECT_EQ(topk.backward.kernels, 8);
  EXPECT_EQ(topk.forward.host_dispatches, 1);
  const ModelOperator& loss = find(ops, "router_load_balancing_loss");
  EXPECT_DOUBLE_EQ(loss.forward.bytes_read_written.value(), 13.5 * U);
  EXPECT_EQ(loss.forward.kernels, 16);
  EXPECT_DOUBLE_EQ(loss.backward.bytes_read_written.value(), 12 * U);
  EXPECT_EQ(loss.forward.host_dispatches, 2);
  EXPECT_LT(position(ops, "router"), position(ops, "router_topk"));
  EXPECT_LT(position(ops, "router_load_balancing_loss"), position(ops, "moe_permute"));
  // Without groups the top-k is one pass (1U, 1 kernel): 14.25U in 15.
  ModelConfig ungrouped = m;
  ungrouped.moe->router_groups = ungrouped.moe->router_group_topk = 0;
  EXPECT_DOUBLE_EQ(find(layer_operators(ungrouped, 3, mb, {}), "router_topk").forward.bytes_read_written.value(),
                   14.25 * U);
  // Fused (Transformer Engine): 3.25U in one kernel each way; its aux loss 4.5U in 3 and 7U in 3.
  mb.router.fused = true;
  const auto fused = layer_operators(m, 3, mb, {});
  EXPECT_DOUBLE_EQ(find(fused, "router_topk").forward.bytes_read_written.value(), 3.25 * U);
  EXPECT_EQ(find(fused, "router_topk").forward.kernels, 1);
  EXPECT_DOUBLE_EQ(find(fused, "router_load_balancing_loss").forward.bytes_read_written.value(), 4.5 * U);
  EXPECT_DOUBLE_EQ(find(fused, "router_load_balancing_loss").backward.bytes_read_written.value(), 7 * U);
  // No loss (GPT-OSS's recipes): no operator, and nothing more kept.
  mb.router.loss = LoadBalancingLoss::kNone;
  EXPECT_FALSE(has(layer_operators(m, 3, mb, {}), "router_load_balancing_loss"));
}

TEST(MoeRouter, SoftmaxTopkUnfusedAndAServingStepsFusedKernel) {
  // Mixtral (8 experts, softmax): the top-k of the logits (1U) and a softmax over the two
  // chosen, then the dense probabilities and map (9.25U): 10.25U in 10 kernels; its aux loss a
  // softmax over every expert (2U) with its routing map and sums: 10.5U in 13. A serving step
  // keeps one kernel reading the fp32 scores and writing the chosen ids and weights.
  const ModelConfig m = bundled("mixtral-8x7b");
  const double T = 4096, U = T * 8 * 4;
  const auto ops = layer_operators(m, 0, batch(1, 4096), {});
  EXPECT_DOUBLE_EQ(find(ops, "router_topk").forward.bytes_read_written.value(), 10.25 * U);
  EXPECT_EQ(find(ops, "router_topk").forward.kernels, 10);
  EXPECT_DOUBLE_EQ(find(ops, "router_load_balancing_loss").forward.bytes_read_written.value(), 10.5 * U);
  EXPECT_EQ(find(ops, "router_load_balancing_loss").forward.kernels, 13);
  RaggedBatch step;
  step.sequences = {SequenceChunk{4096, 4096, true}};
  const auto serving = layer_operators(m, 0, step, {});
  EXPECT_DOUBLE_EQ(find(serving, "router_topk").forward.bytes_read_written.value(), T * (8 * 4 + 2 * 2 * 4));
  EXPECT_EQ(find(serving, "router_topk").forward.kernels, 1);
  EXPECT_FALSE(has(serving, "router_load_balancing_loss"));
}

TEST(Sharding, LogitsSplitTheVocabulary) {
  // Llama-3 8B at tp = 8: 128256 / 8 = 16032 vocabulary columns per GPU.
  const auto ops = output_operators(bundled("llama3-8b"), batch(1, 4096), {8, 1, 1, true});
  const GemmShape logits = find(ops, "logits").forward.shape;
  EXPECT_EQ(logits.m, 4096);
  EXPECT_EQ(logits.n, 16032);
  EXPECT_EQ(logits.k, 4096);
}

TEST(Sharding, ImpossibleLayoutsAreRefusedWithTheNumbers) {
  const ModelConfig llama = bundled("llama3-8b");
  EXPECT_EQ(sharding_problem(llama, batch(1, 4096), {6, 1, 1, false}), "tp=6 does not divide heads=32");
  EXPECT_EQ(sharding_problem(bundled("mixtral-8x7b"), batch(1, 4096), {1, 1, 3, false}),
            "ep=3 does not divide experts=8");
  EXPECT_EQ(sharding_problem(llama, batch(1, 4096), {1, 3, 1, false}),
            "the sequence length 4096 is not a multiple of 6 (2·cp, for causal load balancing)");
  EXPECT_EQ(sharding_problem(llama, batch(1, 4096), {8, 2, 1, true}), "");
  EXPECT_THROW(layer_operators(llama, 0, batch(1, 4096), {6, 1, 1, false}), std::invalid_argument);
  EXPECT_THROW(layer_operators(llama, 32, batch(1, 4096), {}), std::invalid_argument);
}

TEST(LayerTiming, Llama3_8BOnH100LandsInTheUsualMfuRange) {
  // End-to-end sanity of compute model + operator list: one GPU, b = 1, s = 8192, bf16, no
  // communication. Single-GPU Llama-class training on H100 with FlashAttention is commonly
  // reported at 40–60 % MFU; the model must land in a generous 40–80 % band.
  const ModelConfig m = bundled("llama3-8b");
  GpuSpec gpu;
  gpu.name = "H100";
  gpu.fp32 = teraflops_per_second(67);
  gpu.bf16 = gpu.fp16 = teraflops_per_second(989.4);
  gpu.memory_bandwidth = gigabytes_per_second(3350);
  const ComputeModel model(gpu);
  const MicroBatch mb = batch(1, 8192);
  Time total;
  auto add = [&](const std::vector<ModelOperator>& ops) {
    for (const auto& op : ops) total += model.time(op.forward) + model.time(op.backward);
  };
  add(embedding_operators(m, mb, {}));
  for (int layer = 0; layer < m.layers; ++layer) add(layer_operators(m, layer, mb, {}));
  add(output_operators(m, mb, {}));
  const double mfu = model_flops_per_token(m, 8192).value() * 8192 / (total.seconds() * 989.4e12);
  EXPECT_GT(mfu, 0.40) << "step " << total.seconds() * 1e3 << " ms";
  EXPECT_LT(mfu, 0.80) << "step " << total.seconds() * 1e3 << " ms";
}

// A per-module quantisation recipe (Megatron-Bridge's te_quant.cfg for Nemotron 3 Super):
// within an NVFP4 layer the attention projections run in 16 bits with no cast and keep a 16-bit
// input, a dense MLP in MXFP8 casts at MXFP8's bytes, the rest stays NVFP4.
TEST(ModulePrecision, ModulesLeaveTheRunsTypeWithTheirOwnCasts) {
  const ModelConfig m = bundled("llama3-8b");
  MicroBatch batch;
  batch.sequence_length = 4096;
  batch.dtype = DType::kFp4;
  batch.fp8_recipe = Fp8Recipe::kMxfp8;
  const std::vector<ModelOperator> plain = layer_operators(m, 0, batch, ShardingFactors{});
  batch.module_precision.set(QuantModule::kAttention, DType::kBf16);
  batch.module_precision.set(QuantModule::kMlp, DType::kFp8);
  const std::vector<ModelOperator> mixed = layer_operators(m, 0, batch, ShardingFactors{});
  auto find = [](const std::vector<ModelOperator>& ops, const std::string& name) -> const ModelOperator* {
    for (const ModelOperator& o : ops) {
      if (o.name == name) return &o;
    }
    return nullptr;
  };
  ASSERT_NE(find(plain, "qkv_proj_fp4_cast"), nullptr);
  EXPECT_EQ(find(mixed, "qkv_proj_fp4_cast"), nullptr);
  EXPECT_EQ(find(mixed, "qkv_proj")->forward.dtype, DType::kBf16);
  // Kept for the weight gradient: the 16-bit input (T·h·2 bytes) instead of its NVFP4 copy.
  EXPECT_DOUBLE_EQ(find(mixed, "qkv_proj")->saved.value(), 4096.0 * 4096 * 2);
  ASSERT_NE(find(mixed, "mlp_gate_up_proj_fp8_cast"), nullptr);
  const auto mx = training_quantisation(DType::kFp8, Fp8Recipe::kMxfp8, Fp4Recipe::kNvfp4);
  ASSERT_TRUE(mx.has_value());
  EXPECT_DOUBLE_EQ(find(mixed, "mlp_gate_up_proj_fp8_cast")->forward.bytes_read_written.value(),
                   4096.0 * 4096 * mx->cast_bytes_per_element);
  EXPECT_EQ(find(mixed, "mlp_down_proj")->forward.dtype, DType::kFp8);
  EXPECT_EQ(to_string(batch.module_precision), "attention bf16, mlp fp8");
  // A 16-bit run has nothing to move; fp4 is not wider than fp4.
  ModulePrecision p;
  EXPECT_EQ(set_module_precision(p, "experts", "fp16"), "unknown GEMM type \"fp16\" for experts (expected bf16, fp8 or fp4)");
  EXPECT_EQ(set_module_precision(p, "mtp", "fp8"), "mtp layers can only be moved to bf16");
  EXPECT_EQ(set_module_precision(p, "router", "bf16").substr(0, 23), "unknown module \"router\"");
  ParallelLayout l;
  l.dp = 8;
  l.micro_batch = 1;
  l.global_batch = 8;
  l.sequence_length = 4096;
  l.module_precision.set(QuantModule::kAttention, DType::kBf16);
  EXPECT_THROW(validate(l, m, 8), InputError);  // a bf16 run
  l.dtype = DType::kFp8;
  EXPECT_NO_THROW(validate(l, m, 8));
  l.module_precision.set(QuantModule::kMlp, DType::kFp4);
  EXPECT_THROW(validate(l, m, 8), InputError);  // fp4 inside fp8
}

}  // namespace
}  // namespace parallax
