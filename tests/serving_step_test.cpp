// One engine step of a serving instance (serving/step_model.h) against closed forms: a decode
// step is memory-bound and costs its bytes at the compute model's HBM bandwidth, a long prefill
// is compute-bound and scales with its FLOPs, TP adds 2 all-reduces per layer (and one for the
// embedding) of T·h activations, and PP splits the layers and adds the hand-offs.
#include <gtest/gtest.h>

#include "model/model_loader.h"
#include "model/parameter_count.h"
#include "serving/kv_capacity.h"
#include "serving/step_model.h"
#include "test_support.h"
#include "topology/topology_loader.h"

namespace parallax {
namespace {

using test::bundled;
Topology dgx_h100(int nodes = 1) {
  return load_topology(test::source_path("topologies/dgx-h100.json"), TopologyLoadOptions{nodes});
}

RaggedBatch decode_batch(int sequences, int64_t context) {
  RaggedBatch b;
  for (int i = 0; i < sequences; ++i) b.sequences.push_back({1, context, true});
  return b;
}

RaggedBatch prefill_batch(int sequences, int64_t length) {
  RaggedBatch b;
  for (int i = 0; i < sequences; ++i) b.sequences.push_back({length, length, true});
  return b;
}

TEST(ServingStep, ADecodeStepCostsItsBytesAtTheHbmBandwidth) {
  const ModelConfig m = bundled("llama3-8b");
  StepModelOptions o;
  o.step_overhead = Time::zero();
  const StepModel model(m, dgx_h100(), InstanceShape{1, 1}, o);
  const RaggedBatch batch = decode_batch(32, 2048);
  const StepBreakdown b = model.step(batch);
  // Every GEMM and the attention core are memory-bound at 32 rows, and so is everything else:
  // the step is its bytes at B_HBM·η·σ, plus one launch per kernel (to a picosecond each).
  int kernels = 0;
  double bytes = 0;
  auto count = [&](const std::vector<ModelOperator>& ops, int times) {
    for (const ModelOperator& op : ops) {
      EXPECT_TRUE(model.compute().timing(op.forward).memory_bound()) << op.name;
      kernels += op.forward.kernels * times;
      bytes += op.forward.bytes_read_written.value() * times;
    }
  };
  const ShardingFactors one{1, 1, 1, false};
  count(embedding_operators(m, batch, one), 1);
  count(layer_operators(m, 0, batch, one), m.layers);
  count(output_operators(m, batch, one), 1);
  const double bandwidth = model.compute().memory_bandwidth().value() * ComputeModelOptions{}.sustained_fraction;
  const double expected = bytes / bandwidth + kernels * ComputeModelOptions{}.kernel_launch_overhead.seconds();
  EXPECT_NEAR(b.total.seconds(), expected, 200e-12 * kernels);
  EXPECT_DOUBLE_EQ(b.hbm_bytes.value(), bytes);
  // The bytes are the weights once (bf16, every matrix but the input embedding, which is only
  // looked up) plus K and V of every cached token in every layer, plus small activations:
  // 32 · 2048 tokens · 32 layers · 8 KV heads · (128 + 128) · 2 B = 8.6 GB of KV.
  const double weights = 2.0 * static_cast<double>(count_parameters(m).matmul_active);
  const double kv = 32.0 * 2048 * 32 * 8 * 256 * 2;
  EXPECT_GT(bytes, weights + kv);
  EXPECT_LT(bytes, 1.03 * (weights + kv));
}

TEST(ServingStep, ALongPrefillIsComputeBoundAndScalesWithItsFlops) {
  const ModelConfig m = bundled("llama3-8b");
  StepModelOptions o;
  o.step_overhead = Time::zero();
  const StepModel model(m, dgx_h100(), InstanceShape{1, 1}, o);
  // 4 and 8 prompts of 4096: the same per-sequence attention, twice the GEMM rows (16k and 32k,
  // both past the efficiency knee), so twice the FLOPs and, compute-bound, twice the time.
  const StepBreakdown four = model.step(prefill_batch(4, 4096));
  const StepBreakdown eight = model.step(prefill_batch(8, 4096));
  for (const ModelOperator& op : layer_operators(m, 0, prefill_batch(4, 4096), ShardingFactors{})) {
    if (op.forward.kind == OperatorKind::kGemm || op.forward.kind == OperatorKind::kAttention) {
      EXPECT_FALSE(model.compute().timing(op.forward).memory_bound()) << op.name;
    }
  }
  EXPECT_NEAR(eight.flops.value() / four.flops.value(), 2.0, 1e-3);
  EXPECT_NEAR(eight.total.seconds() / four.total.seconds(), 2.0, 0.04);
  EXPECT_GT(four.gemm, four.attention);
}

TEST(ServingStep, TensorParallelismAddsTwoAllReducesPerLayer) {
  const ModelConfig m = bundled("llama3-70b");
  StepModelOptions o;
  o.step_overhead = Time::zero();
  const Topology one_node = dgx_h100(1);
  const StepModel tp8(m, one_node, InstanceShape{8, 1}, o);
  const RaggedBatch batch = decode_batch(64, 4096);
  const StepBreakdown b = tp8.step(batch);
  // 80 layers × 2 + the embedding's = 161 all-reduces of 64 tokens × 8192 × 2 B = 1 MiB.
  const CollectiveSimulator group(one_node, 8, 8);
  CollectiveOptions co;
  co.model = "analytical";
  const Time one = group.run(CollectiveOp::kAllReduce, Bytes(64.0 * 8192 * 2), co).time;
  EXPECT_EQ(b.tp_communication, one * 161);
  EXPECT_EQ(b.total, b.gemm + b.attention + b.other + b.tp_communication);
  // TP 16 spans two nodes: its all-reduces cross the network and are slower than TP 8's.
  const StepModel tp16(m, dgx_h100(2), InstanceShape{16, 1}, o);
  EXPECT_GT(tp16.step(batch).tp_communication, b.tp_communication);
  EXPECT_THROW(StepModel(m, one_node, InstanceShape{16, 1}, o), std::invalid_argument);  // 16 GPUs on 8
  EXPECT_THROW(StepModel(m, one_node, InstanceShape{3, 1}, o), std::invalid_argument);   // 3 ∤ 64 heads
}

TEST(ServingStep, Fp8RunsTheGemmsInFp8AndEverythingElseInBf16) {
  const ModelConfig m = bundled("llama3-70b");
  const RaggedBatch batch = prefill_batch(1, 2048);
  RaggedBatch fp8 = batch;
  fp8.dtype = DType::kFp8;
  const ShardingFactors tp4{4, 1, 1, false};
  const std::vector<ModelOperator> low = layer_operators(m, 0, fp8, tp4);
  const std::vector<ModelOperator> high = layer_operators(m, 0, batch, tp4);
  ASSERT_EQ(low.size(), high.size());
  for (size_t i = 0; i < low.size(); ++i) {
    const OperatorCost& a = low[i].forward;
    const OperatorCost& b = high[i].forward;
    if (a.kind != OperatorKind::kGemm) {
      // Norms, activations, rotary and the attention core are unchanged: bf16 activations.
      EXPECT_EQ(a.dtype, DType::kBf16) << low[i].name;
      EXPECT_EQ(a.bytes_read_written, b.bytes_read_written) << low[i].name;
      continue;
    }
    // A weight GEMM reads its input and weights in 1 byte and writes its output in 2:
    // (m·k + k·n)·1 + m·n·2, against (m·k + k·n + m·n)·2 in bf16.
    const GemmShape& g = a.shape;
    EXPECT_EQ(a.dtype, DType::kFp8) << low[i].name;
    EXPECT_DOUBLE_EQ(a.bytes_read_written.value(), (g.m * g.k + g.k * g.n) * 1.0 + g.m * g.n * 2.0) << low[i].name;
  }
  // The output head stays in 16 bits.
  for (const ModelOperator& op : output_operators(m, fp8, tp4)) {
    if (op.name == "logits") {
      EXPECT_EQ(op.forward.dtype, DType::kBf16);
    }
  }
  // TP all-reduces carry bf16 activations: 161 of 2048 × 8192 × 2 B on TP 4.
  StepModelOptions o;
  o.dtype = DType::kFp8;
  const Topology node = dgx_h100(1);
  const StepModel model(m, node, InstanceShape{4, 1}, o);
  const CollectiveSimulator group(node, 4, 4);
  CollectiveOptions co;
  co.model = "analytical";
  EXPECT_EQ(model.step(batch).tp_communication,
            group.run(CollectiveOp::kAllReduce, Bytes(2048.0 * 8192 * 2), co).time * 161);
}

// The expert GEMMs of layer 0 for `batch` under `sharding`.
std::vector<ModelOperator> experts(const ModelConfig& m, const RaggedBatch& batch, const ShardingFactors& sharding) {
  std::vector<ModelOperator> out;
  for (const ModelOperator& op : layer_operators(m, 0, batch, sharding)) {
    if (op.name.rfind("expert_", 0) == 0 && op.forward.kind == OperatorKind::kGemm) out.push_back(op);
  }
  return out;
}

TEST(ServingStep, AFewTokensReadOnlyTheExpertsTheyReach) {
  const ModelConfig m = bundled("mixtral-8x7b");  // 8 experts, top 2, h 4096, f_e 14336
  // One decode token on one GPU: 2 slots over 8 experts reach 8·(1 − (7/8)²) = 1.875 of them
  // on average, each on 2/1.875 rows; the weights read are those of 1.875 experts.
  const std::vector<ModelOperator> one = experts(m, decode_batch(1, 1024), ShardingFactors{});
  ASSERT_EQ(one.size(), 2u);  // gate and up (one GEMM, 2·f_e wide), down
  for (const ModelOperator& op : one) {
    const double width = op.name == "expert_gate_up_proj" ? 2.0 : 1.0;
    EXPECT_DOUBLE_EQ(op.forward.shape.batch, 1.875) << op.name;
    EXPECT_DOUBLE_EQ(op.forward.shape.m, 2 / 1.875) << op.name;
    // 2 slots, whatever the split
    EXPECT_DOUBLE_EQ(op.forward.flops.value(), 2.0 * 2 * 4096 * 14336 * width) << op.name;
    EXPECT_GT(op.forward.bytes_read_written.value(), 1.875 * 4096 * 14336 * 2 * width) << op.name;
    EXPECT_LT(op.forward.bytes_read_written.value(), 1.876 * 4096 * 14336 * 2 * width) << op.name;
  }
  // 4096 tokens reach every expert (8·(1 − (7/8)^8192) = 8 in double precision).
  for (const ModelOperator& op : experts(m, prefill_batch(1, 4096), ShardingFactors{})) {
    EXPECT_EQ(op.forward.shape.batch, 8.0) << op.name;
    EXPECT_EQ(op.forward.shape.m, 4096.0 * 2 / 8) << op.name;
  }
}

TEST(ServingStep, ExpertParallelismSpreadsWholeExpertsOverTheTpGroup) {
  const ModelConfig m = bundled("mixtral-8x7b");
  const RaggedBatch batch = prefill_batch(1, 4096);
  // TP 4 without EP: all 8 experts on every GPU, each 14336/4 wide, on all 8192 slots.
  // TP 4 with EP 4: 2 whole experts per GPU on the 8192/4 slots routed to them. The same FLOPs.
  const std::vector<ModelOperator> split = experts(m, batch, ShardingFactors{4, 1, 1, false});
  const std::vector<ModelOperator> spread = experts(m, batch, ShardingFactors{4, 1, 4, false, true});
  ASSERT_EQ(split.size(), spread.size());
  for (size_t i = 0; i < split.size(); ++i) {
    EXPECT_EQ(split[i].forward.shape.batch, 8.0);
    EXPECT_EQ(spread[i].forward.shape.batch, 2.0);
    EXPECT_EQ(spread[i].forward.shape.m, 1024.0);  // 2048 slots over 2 experts
    EXPECT_DOUBLE_EQ(spread[i].forward.flops.value(), split[i].forward.flops.value());
  }
  EXPECT_EQ(split[0].forward.shape.n, 2 * 14336.0 / 4);  // gate_up_proj: h → 2f_e/t
  EXPECT_EQ(spread[0].forward.shape.n, 2 * 14336.0);     // h → 2f_e
  // The step model takes ep = tp or 1, and only for a MoE model.
  StepModelOptions o;
  const Topology node = dgx_h100(1);
  EXPECT_NO_THROW(StepModel(m, node, InstanceShape{4, 1, 4}, o));
  EXPECT_THROW(StepModel(m, node, InstanceShape{4, 1, 2}, o), std::invalid_argument);
  EXPECT_THROW(StepModel(bundled("llama3-8b"), node, InstanceShape{2, 1, 2}, o), std::invalid_argument);
}

TEST(ServingStep, DataParallelAttentionSplitsTheSequencesAndDispatchesToEveryGpusExperts) {
  const ModelConfig m = bundled("mixtral-8x7b");  // 8 experts, top 2, h 4096, 32 MoE layers
  // 64 decoding sequences over dp 8 ranks of tp 1: 8 each, context balanced.
  std::vector<SequenceChunk> chunks;
  for (int i = 0; i < 64; ++i) chunks.push_back({1, i % 2 ? 3000 : 1000, true});
  RaggedBatch batch;
  batch.sequences = chunks;
  const std::vector<RaggedBatch> ranks = split_over_attention_ranks(batch, 8);
  ASSERT_EQ(ranks.size(), 8u);
  for (const RaggedBatch& r : ranks) {
    EXPECT_EQ(r.sequences.size(), 8u);
    int64_t context = 0;
    for (const SequenceChunk& c : r.sequences) context += c.kv_len;
    EXPECT_EQ(context, 4 * 1000 + 4 * 3000);
  }
  // A rank's experts receive the tokens of all 8 ranks: 8 · 8 tokens · top 2 / ep 8 = 16 slots
  // on its one expert.
  const ShardingFactors dp8{1, 1, 8, false, true, 0, 8};
  for (const ModelOperator& op : experts(m, ranks[0], dp8)) {
    EXPECT_DOUBLE_EQ(op.forward.shape.m * op.forward.shape.batch, 16.0) << op.name;
  }
  // The step: the attention is one rank's 8 sequences alone; each MoE layer adds a dispatch and
  // a combine all-to-all of 8 tokens · 2 rows of 4096 bf16 over the 8 GPUs.
  StepModelOptions o;
  o.step_overhead = Time::zero();
  const Topology node = dgx_h100(1);
  const StepModel dp(m, node, InstanceShape{1, 1, 8, 8}, o);
  const StepModel alone(m, node, InstanceShape{1, 1, 1, 1}, o);
  const StepBreakdown b = dp.step(batch);
  EXPECT_DOUBLE_EQ(b.attention.seconds(), alone.step(ranks[0]).attention.seconds());
  const CollectiveSimulator all8(node, 8, 8);
  CollectiveOptions analytical;
  analytical.model = "analytical";
  const Time a2a = all8.run(CollectiveOp::kAllToAll, Bytes(8.0 * 2 * 4096 * 2), analytical).time;
  EXPECT_NEAR(b.ep_communication.seconds(), (a2a * (2 * 32)).seconds(), 1e-12);
  EXPECT_EQ(b.sequences, 64);
  EXPECT_EQ(b.new_tokens, 64);
  EXPECT_DOUBLE_EQ(b.total.seconds(), (b.bottleneck_stage).seconds());
  // Two-batch overlap: each rank's 8 sequences as two micro-batches of 4, one's all-to-alls (of
  // 4 tokens' rows) beside the other's layers; the longer side goes on, plus one MoE layer's
  // share of the shorter.
  StepModelOptions tbo = o;
  tbo.two_batch_overlap = true;
  const StepBreakdown t = StepModel(m, node, InstanceShape{1, 1, 8, 8}, tbo).step(batch);
  const Time exchange = all8.run(CollectiveOp::kAllToAll, Bytes(4.0 * 2 * 4096 * 2), analytical).time * (2 * 32 * 2);
  EXPECT_NEAR(t.ep_communication.seconds(), exchange.seconds(), 1e-12);
  const Time layers = t.total + t.overlapped - t.ep_communication;  // both halves' layers
  EXPECT_GT(layers, b.total - b.ep_communication);  // each half reads the weights again
  const Time longer = std::max(layers, exchange), shorter = std::min(layers, exchange);
  EXPECT_NEAR(t.total.seconds(), longer.seconds() + shorter.seconds() / 32, 1e-12);
  // Every GPU keeps the dense weights and an eighth of the routed experts; the instance's cache
  // is its 8 ranks'.
  const ParameterCounts p = count_parameters(m);
  const double dense = static_cast<double>(p.total - p.routed_experts - p.router);
  EXPECT_NEAR(stage_weight_bytes(m, InstanceShape{1, 1, 8, 8}).front().value(),
              2 * dense + 2 * static_cast<double>(p.router) + 2 * static_cast<double>(p.routed_experts) / 8, 1.0);
  const GpuSpec gpu = node.gpu_spec_of(node.gpus().front());
  const KvCapacity one = kv_capacity(m, gpu, InstanceShape{1, 1, 8, 8}, 16, 0.1, Bytes(0), 256);
  const double room = 0.9 * gpu.memory.value() - stage_weight_bytes(m, InstanceShape{1, 1, 8, 8}).front().value();
  EXPECT_EQ(one.blocks, 8 * static_cast<int64_t>(std::floor(room / one.block_bytes.value())));
  // Refused: a dense model, pipeline stages, experts not over every GPU.
  EXPECT_THROW(StepModel(bundled("llama3-8b"), node, InstanceShape{1, 1, 8, 8}, o), std::invalid_argument);
  EXPECT_THROW(StepModel(m, node, InstanceShape{1, 2, 4, 4}, o), std::invalid_argument);
  EXPECT_THROW(StepModel(m, node, InstanceShape{1, 1, 4, 8}, o), std::invalid_argument);
}

TEST(ServingStep, SpeculatingStepsVerifyTheirDraftsAndPayTheDraftPasses) {
  // DeepSeek-V3 on TP 8, 32 sequences of 2,048 tokens of context, 2 drafts by its MTP module:
  // the step verifies 3 tokens a sequence and runs 2 draft passes of one token a sequence, each
  // the MTP layer, its 2h → h projection and the head.
  const ModelConfig m = bundled("deepseek-v3");
  StepModelOptions o;
  o.step_overhead = Time::zero();
  const Topology node = dgx_h100(1);
  const StepModel plain(m, node, InstanceShape{8, 1, 8}, o);
  o.speculative = SpeculativeMethod::kMtp;
  const StepModel mtp(m, node, InstanceShape{8, 1, 8}, o);
  RaggedBatch verify, draft;
  for (int i = 0; i < 32; ++i) {
    verify.sequences.push_back({3, 2050, true, 2});
    draft.sequences.push_back({1, 2048, true});
  }
  const StepBreakdown b = mtp.step(verify);
  EXPECT_EQ(b.new_tokens, 96);
  // Without drafting, the same verification costs what the plain model's step of it costs.
  EXPECT_NEAR((b.total - b.drafting).seconds(), plain.step(verify).total.seconds(), 1e-12);
  // A draft pass costs more than one MTP layer's step alone and less than the whole model's.
  EXPECT_GT(b.drafting.seconds(), 0.0);
  EXPECT_LT(b.drafting.seconds() / 2, plain.step(draft).total.seconds());
  // Refused: MTP drafting for a model without the module, speculation with pipeline stages.
  EXPECT_THROW(StepModel(bundled("llama3-70b"), node, InstanceShape{8, 1}, o), std::invalid_argument);
  o.speculative = SpeculativeMethod::kEagle;
  EXPECT_NO_THROW(StepModel(bundled("llama3-70b"), node, InstanceShape{8, 1}, o));
  EXPECT_THROW(StepModel(bundled("llama3-70b"), node, InstanceShape{4, 2}, o), std::invalid_argument);
}

TEST(ServingStep, ADraftModelPassIsADecodeStepOfItAndItsMemorySitsBesideTheTargets) {
  // Llama 3 70B on TP 4 drafted by Llama 3.2 1B: 16 sequences of 4,096 tokens, 3 drafts. Each
  // of the 3 passes is a decode step of the 1B model on the same TP group (its embedding, 16
  // layers, TP all-reduces and head; no second framework overhead); the verification costs
  // what the target's step of it costs.
  const ModelConfig target = bundled("llama3-70b"), draft = bundled("llama3.2-1b");
  const Topology node = dgx_h100(1);
  StepModelOptions o;
  const StepModel plain(target, node, InstanceShape{4, 1}, o);
  StepModelOptions alone = o;
  alone.step_overhead = Time::zero();
  const StepModel drafter(draft, node, InstanceShape{4, 1}, alone);
  o.speculative = SpeculativeMethod::kDraftModel;
  o.draft_model = std::make_shared<const ModelConfig>(draft);
  const StepModel speculating(target, node, InstanceShape{4, 1}, o);
  RaggedBatch verify, passes;
  for (int i = 0; i < 16; ++i) {
    verify.sequences.push_back({4, 4100, true, 3});
    passes.sequences.push_back({1, 4097, true});
  }
  const StepBreakdown b = speculating.step(verify);
  EXPECT_NEAR(b.drafting.seconds(), 3 * drafter.step(passes).total.seconds(), 1e-12);
  EXPECT_NEAR((b.total - b.drafting).seconds(), plain.step(verify).total.seconds(), 1e-12);
  // Memory: the draft's weights on the TP group and its KV beside the target's in every block,
  // 16 layers × K and V × 2 of its 8 KV heads per rank × 64 × 2 B = 8,192 B a token.
  const DraftFootprint footprint = draft_footprint(draft, 4);
  EXPECT_EQ(footprint.kv_per_token.value(), 8192.0);
  EXPECT_EQ(footprint.weights.value(), stage_weight_bytes(draft, InstanceShape{4, 1}).front().value());
  const GpuSpec& gpu = node.gpu_spec_of(node.gpus().front());
  const KvCapacity without = kv_capacity(target, gpu, InstanceShape{4, 1}, 16, 0.1, Bytes(1e9), 256);
  const KvCapacity with = kv_capacity(target, gpu, InstanceShape{4, 1}, 16, 0.1, Bytes(1e9), 256, {}, footprint);
  EXPECT_EQ(with.weights.value(), without.weights.value() + footprint.weights.value());
  EXPECT_EQ(with.block_bytes.value(), without.block_bytes.value() + 16 * 8192.0);
  EXPECT_LT(with.blocks, without.blocks);
  // Refused: a draft of another vocabulary (Llama 2's 32,000 tokens), or none given.
  o.draft_model = std::make_shared<const ModelConfig>(bundled("llama2-7b"));
  EXPECT_THROW(StepModel(target, node, InstanceShape{4, 1}, o), std::invalid_argument);
  o.draft_model.reset();
  EXPECT_THROW(StepModel(target, node, InstanceShape{4, 1}, o), std::invalid_argument);
}

TEST(ServingStep, ASkewedRouterSlowsSpreadExpertsOnly) {
  // Zipf 1 over 4 experts in 2 groups: shares 1, 1/2, 1/3, 1/4 (sum 25/12); the first group's
  // 3/2 over an even 25/24 is 1.44×.
  EXPECT_DOUBLE_EQ(busiest_expert_group_load(4, 2, 1.0), 1.5 / (25.0 / 12) * 2);
  EXPECT_DOUBLE_EQ(busiest_expert_group_load(8, 4, 0.0), 1.0);
  // Mixtral on TP 4: with the experts spread (EP 4) the busiest GPU's experts take longer; split
  // by TP, every GPU holds a slice of every expert and the skew changes nothing.
  const ModelConfig m = bundled("mixtral-8x7b");
  const Topology node = dgx_h100(1);
  const RaggedBatch batch = prefill_batch(1, 4096);
  StepModelOptions even, skewed;
  skewed.expert_skew = 1.0;
  EXPECT_GT(StepModel(m, node, InstanceShape{4, 1, 4}, skewed).step(batch).gemm.seconds(),
            StepModel(m, node, InstanceShape{4, 1, 4}, even).step(batch).gemm.seconds());
  EXPECT_DOUBLE_EQ(StepModel(m, node, InstanceShape{4, 1, 1}, skewed).step(batch).total.seconds(),
                   StepModel(m, node, InstanceShape{4, 1, 1}, even).step(batch).total.seconds());
  EXPECT_DOUBLE_EQ(StepModel(m, node, InstanceShape{4, 1, 4}, skewed).expert_rows(), busiest_expert_group_load(8, 4, 1.0));
  // Two redundant copies over the same 4 experts (3 a group): both go to expert 0 (1, then 1/2
  // a copy against expert 1's 1/2: the first wins the tie), so the copies are 1/2, four of 1/3
  // and 1/4; packed largest first onto the emptier group with room: {1/2, 1/3, 1/4} and
  // {1/3, 1/3, 1/3}, the busiest 13/12 over an even 25/24.
  EXPECT_NEAR(busiest_expert_group_load(4, 2, 1.0, 2), (13.0 / 12) / (25.0 / 24), 1e-12);
  // DeepSeek-V3 on 72 GPUs needs them (256 experts do not split 72 ways; 288 do), and its weights
  // per GPU count the copies.
  const ModelConfig ds = bundled("deepseek-v3");
  const Topology nine = dgx_h100(9);
  EXPECT_THROW(StepModel(ds, nine, InstanceShape{1, 1, 72, 72}, even), std::invalid_argument);
  const StepModel eplb(ds, nine, InstanceShape{1, 1, 72, 72, 32}, skewed);
  EXPECT_LT(eplb.expert_rows(), busiest_expert_group_load(256, 64, 1.0));
  const ParameterCounts p = count_parameters(ds);
  EXPECT_NEAR((stage_weight_bytes(ds, InstanceShape{1, 1, 72, 72, 32}).front() -
               stage_weight_bytes(ds, InstanceShape{1, 1, 72, 72, 0}).front())
                  .value(),
              2.0 * static_cast<double>(p.routed_experts) * 32 / 256 / 72, 1.0);
  EXPECT_THROW(StepModel(m, node, InstanceShape{4, 1, 1, 1, 4}, even), std::invalid_argument);  // experts split by TP
}

TEST(ServingStep, WhereAnInstanceSitsDecidesWhichLinksItsStagesUse) {
  const ModelConfig m = bundled("llama3-70b");
  StepModelOptions o;
  const Topology two = dgx_h100(2);
  const RaggedBatch batch = decode_batch(64, 1024);
  // TP 4 × PP 2 from GPU 0 keeps both stages on node 0; from GPU 4 its second stage is on
  // node 1, and the hand-off crosses the network.
  const StepModel at0(m, two, InstanceShape{4, 2}, o, 0);
  const StepModel at4(m, two, InstanceShape{4, 2}, o, 4);
  EXPECT_GT(at4.step(batch).pp_handoff, at0.step(batch).pp_handoff);
  EXPECT_EQ(at4.step(batch).tp_communication, at0.step(batch).tp_communication);
  EXPECT_THROW(StepModel(m, two, InstanceShape{4, 1}, o, 6), std::invalid_argument);  // GPUs 6-9 straddle
  EXPECT_EQ(placement_problem(InstanceShape{4, 2}, 8, 2), "stage 1's TP group of 4 GPUs would start at GPU 6 of a node of 8 and straddle two nodes");
  EXPECT_EQ(placement_problem(InstanceShape{16, 1}, 8, 0), "");
  EXPECT_NE(placement_problem(InstanceShape{12, 1}, 8, 0), "");
}

TEST(ServingStep, PipelineStagesSplitTheLayersAndHandOff) {
  EXPECT_EQ(split_layers(80, 3), (std::vector<int>{27, 27, 26}));
  EXPECT_THROW(split_layers(2, 3), std::invalid_argument);
  const ModelConfig m = bundled("llama3-70b");
  StepModelOptions o;
  o.step_overhead = Time::ms(1);
  const StepModel pp1(m, dgx_h100(), InstanceShape{4, 1}, o);
  const StepModel pp2(m, dgx_h100(), InstanceShape{4, 2}, o);
  const RaggedBatch batch = decode_batch(16, 1024);
  const StepBreakdown one = pp1.step(batch), two = pp2.step(batch);
  // The same work on the same TP group, split 40/40, plus one hand-off of 16 · 8192 · 2 B.
  EXPECT_EQ(two.gemm, one.gemm);
  EXPECT_EQ(two.tp_communication, one.tp_communication);
  EXPECT_GT(two.pp_handoff, Time::zero());
  EXPECT_EQ(two.total, one.total + two.pp_handoff);
  EXPECT_EQ(two.overhead, Time::ms(1));
  // Each stage holds half the layers (the head on the last one): the slowest about half the step.
  EXPECT_LT(two.bottleneck_stage.seconds(), 0.6 * (one.total - one.overhead).seconds());
}

// A hybrid model served (Nemotron 3 Nano): only its 6 attention layers keep KV; each sequence
// holds its 23 Mamba layers' state; a decode step advances that state by the recurrence and a
// prompt chunk scans its tokens; each single-block layer all-reduces once over TP.
TEST(ServingStep, AStepsMemoryIsItsWeightsAndItsBatchsCache) {
  const GpuSpec gpu = dgx_h100().gpu_spec_of(dgx_h100().gpus().front());
  // Llama 3 70B on TP 8: 70,553,706,496 parameters × 2 B / 8; 128 sequences of 8,192 tokens ×
  // 80 layers × 2 × 1 KV head a rank × 128 × 2 B.
  const ModelConfig llama = bundled("llama3-70b");
  const StepMemory fits = step_memory(llama, gpu, InstanceShape{8, 1}, decode_batch(128, 8192));
  EXPECT_DOUBLE_EQ(fits.weights.value(), 70'553'706'496.0 * 2 / 8);
  EXPECT_DOUBLE_EQ(fits.kv_cache.value(), 128.0 * 8192 * 80 * 2 * 128 * 2);
  EXPECT_TRUE(fits.fits());
  // Kimi K2 on 8 H100s does not: over a terabyte of bf16 weights; its MLA cache keeps the latent
  // and rope key whole on every rank, 61 layers × 576 × 2 B a token.
  const ModelConfig kimi = bundled("kimi-k2");
  const StepMemory over = step_memory(kimi, gpu, InstanceShape{8, 1}, decode_batch(128, 8192));
  EXPECT_DOUBLE_EQ(over.kv_cache.value(), 128.0 * 8192 * 61 * 576 * 2);
  EXPECT_FALSE(over.fits());
  // With pipeline stages, the fullest one: Llama's last stage holds the head as well.
  const StepMemory staged = step_memory(llama, gpu, InstanceShape{4, 2}, decode_batch(64, 4096));
  EXPECT_EQ(staged.stage, 1);
  EXPECT_DOUBLE_EQ(staged.kv_cache.value(), 64.0 * 4096 * 40 * 2 * 2 * 128 * 2);
  // Gemma 3 27B on TP 2: its 52 windowed layers of 62 keep the last 1,024 tokens only, the 10
  // global ones all 32,768 (8 KV heads a rank of 128, 2 B): 32 × (10 × 32768 + 52 × 1024) layers'
  // tokens.
  const ModelConfig gemma = bundled("gemma-3-27b");
  const StepMemory windowed = step_memory(gemma, gpu, InstanceShape{2, 1}, decode_batch(32, 32768));
  EXPECT_NEAR(windowed.kv_cache.value(), 32.0 * (10 * 32768.0 + 52 * 1024.0) * 2 * 8 * 128 * 2,
              1e-9 * windowed.kv_cache.value());
  // A prompt computed in one step writes every token on every layer before the window frees any.
  RaggedBatch prompt;
  prompt.sequences = {SequenceChunk{32768, 32768, true}};
  EXPECT_DOUBLE_EQ(step_memory(gemma, gpu, InstanceShape{2, 1}, prompt).kv_cache.value(),
                   32768.0 * 62 * 2 * 8 * 128 * 2);
}

// DeepSeek Sparse Attention caches each token's fp8 index key (128 B and an fp32 scale) beside its
// latent on every layer, and its fp8 latent in the sparse FlashMLA format: 512 fp8 values, 4 fp32
// scales, the rope key in bf16 (656 B). The indexer's weights are whole on every TP rank.
TEST(ServingStep, SparseAttentionCachesIndexKeysBesideTheLatents) {
  const ModelConfig v32 = bundled("deepseek-v3.2"), v3 = bundled("deepseek-v3");
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(v32, 8, 0, 61).value(), 61.0 * ((512 + 64) * 2 + 128 + 4));
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(v32, 8, 0, 61, DType::kFp8).value(), 61.0 * (512 + 16 + 128 + 128 + 4));
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(v3, 8, 0, 61, DType::kFp8).value(), 61.0 * 576);
  const double indexer = static_cast<double>(count_parameters(v32).indexer);
  for (int tp : {1, 8}) {
    const double extra = stage_weight_bytes(v32, InstanceShape{tp, 1}, DType::kBf16).front().value() -
                         stage_weight_bytes(v3, InstanceShape{tp, 1}, DType::kBf16).front().value();
    EXPECT_NEAR(extra, 2.0 * indexer + 2.0 * 61 * 256 / tp, 1.0) << tp;  // the key norms split as the vectors are
  }
}

TEST(ServingStep, AHybridModelsMambaLayersKeepAStatePerSequence) {
  const ModelConfig m = bundled("nemotron-3-nano");
  // KV: 6 layers × 2 × 2 KV heads × 128 × 2 B = 6,144 B a token at TP 1 (TP 2: one KV head a rank).
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(m, 1, 0, m.layers).value(), 6.0 * 2 * 2 * 128 * 2);
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(m, 1, 0, 5).value(), 0.0);  // MEMEM: no attention
  // State: 23 × (3 × (4096 + 2·8·128) × 2 B + 64 × 64 × 128 × 4 B) a sequence.
  const double state = 23.0 * (3 * (4096 + 2 * 8 * 128) * 2 + 64.0 * 64 * 128 * 4);
  EXPECT_DOUBLE_EQ(mamba_state_bytes(m, 1, 0, m.layers).value(), state);
  EXPECT_DOUBLE_EQ(mamba_state_bytes(m, 2, 0, m.layers).value(), state / 2);
  // max_sequences slots of state come out of the KV cache's room.
  const GpuSpec gpu = dgx_h100().gpu_spec_of(dgx_h100().gpus().front());
  const KvCapacity few = kv_capacity(m, gpu, InstanceShape{1, 1}, 16, 0.1, Bytes(0), 16);
  const KvCapacity many = kv_capacity(m, gpu, InstanceShape{1, 1}, 16, 0.1, Bytes(0), 64);
  EXPECT_DOUBLE_EQ(many.states.value() - few.states.value(), 48 * state);
  EXPECT_NEAR(static_cast<double>(few.blocks - many.blocks), 48 * state / few.block_bytes.value(), 1.0);

  // A decode step's Mamba layer: the fp32 state read and written, x, B, C, dt read and y written.
  const ShardingFactors one{1, 1, 1, false};
  auto op = [](const std::vector<ModelOperator>& ops, const std::string& name) -> const ModelOperator* {
    for (const ModelOperator& o : ops) {
      if (o.name == name) return &o;
    }
    return nullptr;
  };
  const std::vector<ModelOperator> decode = layer_operators(m, 0, decode_batch(8, 4096), one);
  ASSERT_NE(op(decode, "mamba_state_update"), nullptr);
  EXPECT_EQ(op(decode, "mamba_ssd_scan"), nullptr);
  const double io = (2.0 * 4096 + 2 * 8 * 128 + 64) * 2;
  EXPECT_DOUBLE_EQ(op(decode, "mamba_state_update")->forward.bytes_read_written.value(),
                   8 * (2 * 64.0 * 64 * 128 * 4 + io));
  // A prompt chunk scans its tokens as training's forward does, and writes its final state.
  const std::vector<ModelOperator> prefill = layer_operators(m, 0, prefill_batch(2, 1024), one);
  MicroBatch training;
  training.sequences = 2;
  training.sequence_length = 1024;
  const std::vector<ModelOperator> trained = layer_operators(m, 0, training, one);
  ASSERT_NE(op(prefill, "mamba_ssd_scan"), nullptr);
  EXPECT_DOUBLE_EQ(op(prefill, "mamba_ssd_scan")->forward.flops.value(), op(trained, "mamba_ssd_scan")->forward.flops.value());
  EXPECT_DOUBLE_EQ(op(prefill, "mamba_state_io")->forward.bytes_read_written.value(), 2 * 64.0 * 64 * 128 * 4);

  // TP 2: every layer of the 52 is one block, one all-reduce each, and the embedding's.
  StepModelOptions o;
  o.step_overhead = Time::zero();
  const Topology node = dgx_h100(1);
  const StepModel tp2(m, node, InstanceShape{2, 1}, o);
  const RaggedBatch batch = decode_batch(16, 2048);
  const CollectiveSimulator group(node, 2, 2);
  CollectiveOptions co;
  co.model = "analytical";
  const Time each = group.run(CollectiveOp::kAllReduce, Bytes(16.0 * 2688 * 2), co).time;
  EXPECT_EQ(tp2.step(batch).tp_communication, each * 53);
}

}  // namespace
}  // namespace parallax
