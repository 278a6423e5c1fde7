// Hybrid models (Megatron's hybrid layer pattern): Nemotron 3 Nano counted as NVIDIA publishes
// it, the Mamba-2 layer's operators against their closed forms, a pattern of attention and MLP
// layers simulating as the Transformer it spells, and what is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "compute/compute_model.h"
#include "io/input_error.h"
#include "io/json_reader.h"
#include "model/layer_operators.h"
#include "model/model_block.h"
#include "model/model_loader.h"
#include "model/parameter_count.h"
#include "training/iteration.h"
#include "test_support.h"
#include "training_test_support.h"

namespace parallax {
namespace {

using test::kTp;
using test::tiny;
using test::toy_cluster;

// Data (and expert) parallelism over dp GPUs at TP tp, one 512-token sequence per DP rank.
ParallelLayout small_layout(int tp, int dp, int ep = 1) {
  ParallelLayout l;
  l.tp = tp;
  l.dp = dp;
  l.ep = ep;
  l.micro_batch = 1;
  l.global_batch = dp;
  l.sequence_length = 512;
  l.sequence_parallel = tp > 1;
  return l;
}

// The tiny Llama-style model with `pattern` as its layers and a Mamba mixer of 8 heads of 32
// (d_in 256), state 16, 2 groups, kernel 4, chunks of 64.
ModelConfig tiny_hybrid(const std::string& pattern) {
  ModelConfig m = tiny(static_cast<int>(pattern.size()));
  m.hybrid_pattern = pattern;
  m.mamba = MambaConfig{8, 32, 16, 2, 4, 64};
  return m;
}

ModelConfig nano() { return load_bundled_model(test::source_path("workloads/models"), "nemotron-3-nano"); }

ModelConfig hf(const std::string& text) {
  return model_from_hf_config(parse_json_text(text, "config.json"), "config.json", "m");
}

TEST(HybridModels, Nemotron3NanoCountsAsNvidiaPublishesIt) {
  // 23 Mamba layers: in_proj 2688·(2·4096 + 2·8·128 + 64) = 27,697,152, out_proj 4096·2688 =
  // 11,010,048, conv taps and biases 6144·5, dt bias, A and D 3·64, gated norm 4096, pre-norm
  // 2688 → 38,744,896. 6 attention layers: 2688·(32 + 4)·128 + 4096·2688 + 2688 = 23,399,040.
  // 23 MoE layers: 128 squared-ReLU experts of 2·2688·1856, a shared one of 2·2688·3712, the
  // router 128·2688 and the norm → 1,297,468,032. Embedding and head 2·131072·2688, final norm.
  // Total 31,577,937,344; active (6 of 128 experts) 3,580,073,408, 3,227,751,872 without the
  // input embedding: NVIDIA's "31.6B total, 3.2B active (3.6B including embeddings)".
  const ModelConfig m = nano();
  ASSERT_TRUE(m.hybrid());
  EXPECT_EQ(m.layer_kind(0), LayerKind::kMamba);
  EXPECT_EQ(m.layer_kind(1), LayerKind::kMoe);
  EXPECT_EQ(m.layer_kind(5), LayerKind::kAttention);
  EXPECT_EQ(m.attention_layer_count(), 6);
  EXPECT_EQ(m.moe_layer_count(), 23);
  EXPECT_EQ(m.mlp, MlpKind::kPlain);
  const ParameterCounts p = count_parameters(m);
  EXPECT_EQ(p.total, 31'577'937'344);
  EXPECT_EQ(p.active, 3'580'073'408);
  EXPECT_EQ(p.active_without_embedding(), 3'227'751'872);
}

TEST(HybridModels, Nemotron3SuperCountsAsItsCheckpointHoldsIt) {
  // A latent MoE: 512 experts of 2·1024·2688 on the latent width 1024 (5,505,024 each), the
  // projections 2·4096·1024, a shared expert 2·4096·5376, the router 512·4096 → 2,873,102,336 a
  // MoE layer (40). 40 Mamba layers of 128 heads × 64: in_proj 4096·18,560, out_proj 8192·4096,
  // vectors 63,872 → 109,640,064. 8 attention layers 35,655,680. Embedding and head 2·131072·4096.
  // The checkpoint's safetensors headers (nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16): 123,611,012,096
  // weights of which 2,942,324,736 the MTP module (one attention and one MoE layer, eh_proj and
  // norms) and 107,898,470,400 the inactive experts (40 · 490 · 5,505,024): all three exact.
  const ModelConfig m = load_bundled_model(test::source_path("workloads/models"), "nemotron-3-super");
  ASSERT_TRUE(m.moe.has_value());
  EXPECT_EQ(m.moe->latent, 1024);
  EXPECT_EQ(m.mtp_layers, 1);
  const ParameterCounts p = count_parameters(m);
  EXPECT_EQ(p.total, 123'611'012'096 - 2'942'324'736);
  EXPECT_EQ(p.mtp, 2'942'324'736);
  EXPECT_EQ(p.total - p.active, 107'898'470'400);
  EXPECT_EQ(p.latent_projections, 40 * 2 * 4096 * 1024);
  // Megatron-Bridge trains it with two MTP depths over one module's weights
  // (mtp_use_repeated_layer): two passes, one module of parameters.
  ModelConfig repeated = m;
  repeated.mtp_layers = 2;
  repeated.mtp_repeated = true;
  EXPECT_EQ(count_parameters(repeated).mtp, 2'942'324'736);
  repeated.mtp_repeated = false;
  EXPECT_EQ(count_parameters(repeated).mtp, 2 * 2'942'324'736LL);
}

// Repeated MTP depths run twice and hold one module: the last stage's parameters are those of
// one depth, its compute that of two.
TEST(HybridModels, RepeatedMtpDepthsRunTwiceAndHoldOneModule) {
  ModelConfig one = tiny(2);
  one.moe = MoeConfig{4, 2, 0, 512, 0, 0, 1, {}};
  one.mtp_layers = 1;
  ModelConfig repeated = one;
  repeated.mtp_layers = 2;
  repeated.mtp_repeated = true;
  ModelConfig two = repeated;
  two.mtp_repeated = false;
  const ParallelLayout l = small_layout(1, 2);
  const Topology topo = toy_cluster(2);
  const IterationResult r1 = simulate_iteration(one, l, topo);
  const IterationResult rr = simulate_iteration(repeated, l, topo);
  const IterationResult r2 = simulate_iteration(two, l, topo);
  EXPECT_DOUBLE_EQ(rr.stages[0].parameters, r1.stages[0].parameters);
  EXPECT_GT(r2.stages[0].parameters, rr.stages[0].parameters);
  EXPECT_EQ(rr.stages[0].forward_compute, r2.stages[0].forward_compute);
  EXPECT_GT(rr.stages[0].forward_compute, r1.stages[0].forward_compute);
}

// A latent MoE's experts and all-to-alls work in the latent width: the routed experts' GEMMs
// shrink by l/h, two projections h → l → h appear, and the dispatch sends l-wide tokens.
TEST(HybridModels, ALatentMoeDispatchesAndComputesInItsLatentWidth) {
  ModelConfig m = tiny(2);
  m.moe = MoeConfig{4, 2, 0, 512, 0, 0, 1, {}};
  ModelConfig latent = m;
  latent.moe->latent = 64;
  MicroBatch batch;
  batch.sequence_length = 512;
  auto flops = [&](const ModelConfig& model, const std::string& name) {
    for (const ModelOperator& o : layer_operators(model, 0, batch, ShardingFactors{})) {
      if (o.name == name) return o.forward.flops.value();
    }
    return 0.0;
  };
  EXPECT_DOUBLE_EQ(flops(latent, "expert_gate_up_proj") * 256 / 64, flops(m, "expert_gate_up_proj"));
  EXPECT_DOUBLE_EQ(flops(latent, "moe_latent_down_proj"), 2.0 * 512 * 256 * 64);
  EXPECT_DOUBLE_EQ(flops(latent, "moe_latent_up_proj"), 2.0 * 512 * 64 * 256);
  EXPECT_DOUBLE_EQ(flops(m, "moe_latent_down_proj"), 0.0);
  const ParallelLayout l = small_layout(1, 4, 4);
  const Topology topo = toy_cluster(4);
  const double full = simulate_iteration(m, l, topo).stages[0].communication[test::kEp].sent.value();
  const double narrow = simulate_iteration(latent, l, topo).stages[0].communication[test::kEp].sent.value();
  EXPECT_DOUBLE_EQ(narrow * 256 / 64, full);
}

TEST(HybridModels, TheLayerListReadsAsThePattern) {
  // Newer transformers write layers_block_type instead of hybrid_override_pattern.
  const std::string common = R"("model_type":"nemotron_h","hidden_size":256,"num_hidden_layers":4,
    "num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"intermediate_size":512,"vocab_size":1000,
    "max_position_embeddings":4096,"mamba_num_heads":8,"mamba_head_dim":32,"ssm_state_size":16,"n_groups":2,)";
  const ModelConfig a = hf("{" + common + R"("hybrid_override_pattern":"M*M-"})");
  const ModelConfig b = hf("{" + common + R"("layers_block_type":["mamba","attention","mamba","mlp"]})");
  EXPECT_EQ(a.hybrid_pattern, "M*M-");
  EXPECT_EQ(b.hybrid_pattern, "M*M-");
  // Its MTP module spelt either way (Nemotron 3.5 writes the list).
  const std::string moe = R"("n_routed_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":128,"num_nextn_predict_layers":1,)";
  EXPECT_EQ(hf("{" + common + moe + R"("hybrid_override_pattern":"M*ME","mtp_hybrid_override_pattern":"*E"})").mtp_layers, 1);
  EXPECT_EQ(hf("{" + common + moe + R"("hybrid_override_pattern":"M*ME","mtp_layers_block_type":["attention","moe"]})").mtp_layers, 1);
  EXPECT_EQ(count_parameters(a).total, count_parameters(b).total);
  // transformers 5 leaves num_hidden_layers out (Nemotron 3 Ultra's config.json): the list says it.
  std::string unnumbered = common;
  unnumbered.erase(unnumbered.find(R"("num_hidden_layers":4,)"), std::string(R"("num_hidden_layers":4,)").size());
  const ModelConfig c = hf("{" + unnumbered + R"("layers_block_type":["mamba","attention","mamba","mlp"]})");
  EXPECT_EQ(c.layers, 4);
  EXPECT_EQ(count_parameters(c).total, count_parameters(b).total);
  // The model block carries the pattern and the mixer.
  const nlohmann::json doc = {{"model", model_block(a)}};
  JsonReader root(doc, "w.json");
  const ModelConfig back = read_model(root.at("model"), "");
  EXPECT_EQ(back.hybrid_pattern, "M*M-");
  EXPECT_EQ(count_parameters(back).total, count_parameters(a).total);
}

TEST(HybridModels, WhatIsNotModelledIsRefusedWithItsKey) {
  const std::string common = R"("model_type":"nemotron_h","hidden_size":256,"num_hidden_layers":2,
    "num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"vocab_size":1000,"max_position_embeddings":4096,
    "mamba_num_heads":8,"mamba_head_dim":32,"ssm_state_size":16,"n_routed_experts":8,"num_experts_per_tok":2,
    "moe_intermediate_size":128,)";
  auto reason = [&](const std::string& extra) {
    try {
      hf("{" + common + extra + "}");
    } catch (const InputError& e) {
      return e.pointer() + ": " + e.reason();
    }
    return std::string("no error");
  };
  EXPECT_EQ(reason(R"("hybrid_override_pattern":"ME","num_nextn_predict_layers":1,"mtp_hybrid_override_pattern":"M*E")"),
            "/mtp_hybrid_override_pattern: a multi-token prediction module other than one attention and one MoE layer "
            "(\"*E\") is not modelled");
  EXPECT_EQ(reason(R"("hybrid_override_pattern":"MEM")"), ": hybrid_pattern has 3 layers, not layers=2");
  EXPECT_EQ(reason(R"("hybrid_override_pattern":"MX")"),
            ": hybrid_pattern: 'X' at layer 1 is not M (Mamba), * (attention), - (MLP) or E (MoE)");
  EXPECT_EQ(reason(R"("hybrid_override_pattern":"ME","mlp_hidden_act":"silu")"),
            "/mlp_hidden_act: \"silu\" is not modelled (expected relu2)");
}

// One Mamba layer of h 256, 8 heads of 32 (d_in 256), state 16, 2 groups, kernel 4, chunks of
// 64, on 2 sequences of 128 tokens (T = 256), TP 2.
TEST(HybridModels, AMambaLayersOperatorsAreTheirClosedForms) {
  const ModelConfig m = tiny_hybrid("M");
  MicroBatch batch;
  batch.sequences = 2;
  batch.sequence_length = 128;
  ShardingFactors sh;
  sh.tp = 2;
  const std::vector<ModelOperator> ops = layer_operators(m, 0, batch, sh);
  auto op = [&](const std::string& name) {
    for (const ModelOperator& o : ops) {
      if (o.name == name) return o;
    }
    ADD_FAILURE() << "no " << name;
    return ModelOperator{};
  };
  const double t = 256;
  // in_proj: h → (2·256 + 2·2·16 + 8)/2 = 292 per rank; out_proj: 128 → 256.
  EXPECT_DOUBLE_EQ(op("mamba_in_proj").forward.flops.value(), 2 * t * 256 * 292);
  EXPECT_DOUBLE_EQ(op("mamba_out_proj").forward.flops.value(), 2 * t * 128 * 256);
  // The scan on 4 local heads of 32 in 1 local group: 2·64·16·1 + 4·(2·64·32 + 4·16·32) a token.
  const double scan = 2 * 64 * 16 * 1 + 4 * (2 * 64 * 32 + 4 * 16 * 32);
  EXPECT_DOUBLE_EQ(op("mamba_ssd_scan").forward.flops.value(), t * scan);
  const double scan_backward = 6 * 64 * 16 * 1 + 4 * (6 * 64 * 32 + 10 * 16 * 32);
  EXPECT_DOUBLE_EQ(op("mamba_ssd_scan").backward.flops.value(), t * scan_backward);
  // Its bytes a token as mamba_ssm's kernels move them (HP = 128, GN = 16, Gq = 64, the fp32
  // state elements a token S = 4·32·16/64 = 32, H = 4, e = 2): forward 3e·HP + 4e·GN + 8·Gq +
  // 16·S + (e + 24)·H, backward 11e·HP + 15e·GN + 24·Gq + (44 + 4e)·S + 56·H.
  EXPECT_DOUBLE_EQ(op("mamba_ssd_scan").forward.bytes_read_written.value(),
                   t * (6 * 128 + 8 * 16 + 8 * 64 + 16 * 32 + 26 * 4));
  EXPECT_DOUBLE_EQ(op("mamba_ssd_scan").backward.bytes_read_written.value(),
                   t * (22 * 128 + 30 * 16 + 24 * 64 + 52 * 32 + 56 * 4));
  // The model FLOPs: 6N (no attention layer) plus three scans of all 8 heads and 2 groups.
  const double full_scan = 2 * 64 * 16 * 2 + 8 * (2 * 64 * 32 + 4 * 16 * 32);
  const double n = static_cast<double>(count_parameters(m).matmul_active);
  EXPECT_DOUBLE_EQ(model_flops_per_token(m, 128).value(), 6 * n + 3 * full_scan);
}

// mamba_ssm's Triton scan waits on its loads: its traffic moves at 16.6 GB/s per SM, which on an
// H100 (132 SMs) is what vLLM PR 27299 measured (11.8 M tokens/s for 128 heads of 64, state 128,
// one group, chunks of 128: 185,600 bytes a token) and on a B200 (148 SMs) 2.46 TB/s, not the
// 7.2 TB/s its HBM gives a streaming kernel.
TEST(HybridModels, TheScanMovesItsBytesNoFasterThanItsSmsKeepThemInFlight) {
  ModelConfig m = tiny_hybrid("M");
  m.hidden = 4096;
  m.mamba = MambaConfig{128, 64, 128, 1, 4, 128};
  MicroBatch batch;
  batch.sequences = 1;
  batch.sequence_length = 8192;
  const std::vector<ModelOperator> ops = layer_operators(m, 0, batch, ShardingFactors{});
  const auto scan = std::find_if(ops.begin(), ops.end(), [](const ModelOperator& o) { return o.name == "mamba_ssd_scan"; });
  ASSERT_NE(scan, ops.end());
  EXPECT_DOUBLE_EQ(scan->forward.bytes_read_written.value(), 8192.0 * 185600);
  EXPECT_DOUBLE_EQ(scan->forward.per_sm_bandwidth.value(), 16.6e9);
  EXPECT_DOUBLE_EQ(scan->backward.per_sm_bandwidth.value(), 16.6e9);
  ComputeModelOptions alone;
  alone.sustained_fraction = 1;
  const ComputeModel h100(test::load_preset("dgx-h100").gpu_specs()[0], alone);
  const ComputeModel b200(test::load_preset("dgx-b200").gpu_specs()[0], alone);
  EXPECT_DOUBLE_EQ(h100.memory_bandwidth(scan->forward).value(), 132 * 16.6e9);
  EXPECT_DOUBLE_EQ(b200.memory_bandwidth(scan->forward).value(), 148 * 16.6e9);
  EXPECT_NEAR(8192 / h100.timing(scan->forward).memory.seconds(), 11.8e6, 0.01 * 11.8e6);
  // Streaming kernels beside it still get the HBM: the gated norm on the B200 at 0.9 · 8 TB/s.
  const auto norm = std::find_if(ops.begin(), ops.end(), [](const ModelOperator& o) { return o.name == "mamba_gated_norm"; });
  ASSERT_NE(norm, ops.end());
  EXPECT_DOUBLE_EQ(b200.memory_bandwidth(norm->forward).value(), 0.9 * 8e12);
}

// A pattern of attention and MLP layers is the Transformer it spells: "*-*-" has the operators,
// parameters, model FLOPs, TP collectives and memory (its buckets aside) of two Transformer
// layers, and runs in their time.
TEST(HybridModels, AttentionAndMlpLayersSimulateAsTheTransformerTheySpell) {
  const ModelConfig transformer = tiny(2);
  ModelConfig hybrid = tiny(4);
  hybrid.hybrid_pattern = "*-*-";
  EXPECT_EQ(count_parameters(hybrid).total, count_parameters(transformer).total);
  EXPECT_DOUBLE_EQ(model_flops_per_token(hybrid, 512).value(), model_flops_per_token(transformer, 512).value());
  ParallelLayout l = small_layout(2, 2);
  l.global_batch = 4;
  const Topology topo = toy_cluster(4);
  const IterationResult a = simulate_iteration(transformer, l, topo);
  const IterationResult b = simulate_iteration(hybrid, l, topo);
  const CommunicationVolume& tp_a = a.stages[0].communication[kTp];
  const CommunicationVolume& tp_b = b.stages[0].communication[kTp];
  EXPECT_EQ(tp_a.collectives, tp_b.collectives);
  EXPECT_DOUBLE_EQ(tp_a.sent.value(), tp_b.sent.value());
  // Memory alike but for the communication buffers, which a per-layer bucket sizes.
  const MemoryBreakdown& ma = a.stages[0].memory;
  const MemoryBreakdown& mb = b.stages[0].memory;
  EXPECT_EQ(ma.parameters, mb.parameters);
  EXPECT_EQ(ma.gradients, mb.gradients);
  EXPECT_EQ(ma.optimizer_states, mb.optimizer_states);
  EXPECT_EQ(ma.activations, mb.activations);
  EXPECT_NEAR(b.iteration_time.seconds(), a.iteration_time.seconds(), 0.01 * a.iteration_time.seconds());
}

TEST(HybridModels, MambaLayersRefuseContextParallelismAndUnevenGroups) {
  const ModelConfig m = tiny_hybrid("M-");
  MicroBatch batch;
  batch.sequence_length = 128;
  ShardingFactors sh;
  sh.tp = 4;
  EXPECT_EQ(sharding_problem(m, batch, sh), "tp=4 does not divide mamba.groups=2");
  sh.tp = 2;
  sh.cp = 2;
  EXPECT_EQ(sharding_problem(m, batch, sh), "context parallelism of Mamba layers is not modelled (cp=2)");
}

}  // namespace
}  // namespace parallax
