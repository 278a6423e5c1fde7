// The simulated training iteration: with free communication the pipeline's bubble equals the
// closed forms; the bytes sent by DP (all-reduce, ZeRO 1/2/3) and TP (Megatron, with and
// without SP) match their textbook volumes; a two-stage 1F1B iteration equals its timeline
// worked out by hand; memory, OOM, overlap switches and bad layouts (expert parallelism:
// training_ep_test; context parallelism: training_cp_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "collectives/collective_simulator.h"
#include "compute/compute_model.h"
#include "io/input_error.h"
#include "training/iteration.h"
#include "training/operator_breakdown.h"
#include "model/layer_operators.h"
#include "model/model_loader.h"
#include "model/parameter_count.h"
#include "training/iteration_units.h"
#include "training/optimizer_cost.h"
#include "training/iteration_plot.h"
#include "training_test_support.h"

namespace parallax {
namespace {

using test::expect_parts_add_up;
using test::tiny;
using test::toy_cluster;

ParallelLayout layout(int dp, int tp, int pp, int64_t global_batch) {
  ParallelLayout l;
  l.dp = dp;
  l.tp = tp;
  l.pp = pp;
  l.micro_batch = 1;
  l.global_batch = global_batch;
  l.sequence_length = 512;
  return l;
}

Time sum_time(const ComputeModel& cm, const std::vector<ModelOperator>& ops, bool backward) {
  Time t;
  for (const auto& op : ops) t += cm.time(backward ? op.backward : op.forward);
  return t;
}

// DSA's indexer on a TP group all-reduces its loss's target (fp32, each token's top-k keys) every
// layer's forward, and under SP gathers the hidden state and the query latent first: more
// exposed TP time than the same layers with the indexer's cost but no communication (tp 1 has none).
TEST(SparseAttention, TheIndexerAddsItsTpCollectivesToEachLayer) {
  const Topology topo = toy_cluster(2);
  ModelConfig m = tiny(2);
  m.mla = MlaConfig{64, 128, 32, 16, 32};
  m.head_dim = 48;
  ModelConfig dsa = m;
  dsa.sparse_attention = SparseAttentionConfig{4, 32, 128, {}};
  const auto tp = static_cast<size_t>(WorkKind::kTpComm);
  ParallelLayout l = layout(1, 2, 1, 4);
  const auto tp_time = [&](const ModelConfig& model, const ParallelLayout& at) {
    return simulate_iteration(model, at, topo, test::kernels_only()).stages[0].time.exposed[tp];
  };
  const Time plain = tp_time(m, l), sparse = tp_time(dsa, l);
  EXPECT_GT(sparse, plain);
  l.sequence_parallel = true;
  EXPECT_GT(tp_time(dsa, l) - tp_time(m, l), sparse - plain);  // the two gathers besides
  l = layout(2, 1, 1, 4);
  EXPECT_EQ(tp_time(dsa, l), Time::zero());
  // MoE layers too, with the experts split by TP or folded (expert TP 1): all-MoE models.
  MoeConfig moe;
  moe.experts = 4;
  moe.top_k = 2;
  moe.expert_ffn = 256;
  m.moe = moe;
  dsa.moe = moe;
  for (const int expert_tp : {0, 1}) {
    l = layout(1, 2, 1, 4);
    l.expert_tp = expert_tp;
    l.sequence_parallel = true;
    EXPECT_GT(tp_time(dsa, l), tp_time(m, l)) << expert_tp;
  }
}

// DeepSeek's multi-token-prediction module runs on the last pipeline stage after the model's
// layers: its input (the shifted tokens' embedding, two norms, the 2h → h projection), one more
// Transformer layer (index layers) and the output head it shares. The last stage's forward grows
// by exactly those operators' times and its parameters by the module's own (count_parameters'
// mtp: 3 norms, 2h², the layer); the first stage does not change.
TEST(MultiTokenPrediction, TheModuleRunsOnTheLastStageWithTheSharedHead) {
  const Topology topo = toy_cluster(2);
  const ParallelLayout l = layout(1, 1, 2, 2);
  ModelConfig without = tiny(4);
  ModelConfig with = without;
  with.mtp_layers = 1;
  const IterationResult a = simulate_iteration(without, l, topo, test::kernels_only());
  const IterationResult b = simulate_iteration(with, l, topo, test::kernels_only());
  EXPECT_EQ(b.stages[0].forward_compute, a.stages[0].forward_compute);
  EXPECT_EQ(b.stages[0].parameters, a.stages[0].parameters);
  const ComputeModel cm(topo.gpu_specs().front(), test::kernels_only().compute);
  const MicroBatch mb = iteration_detail::micro_batch_of(l);
  const ShardingFactors sh = iteration_detail::sharding_of(l);
  const Time module = sum_time(cm, mtp_input_operators(with, mb, sh), false) +
                      sum_time(cm, layer_operators(with, 4, mb, sh), false) +
                      sum_time(cm, output_operators(with, mb, sh), false);
  EXPECT_EQ(b.stages[1].forward_compute, a.stages[1].forward_compute + module);
  EXPECT_DOUBLE_EQ(b.stages[1].parameters - a.stages[1].parameters, static_cast<double>(count_parameters(with).mtp));
  // The projection: T·h output columns from 2h inputs, 2·T·h·2h FLOPs forward.
  const std::vector<ModelOperator> input = mtp_input_operators(with, mb, sh);
  const auto proj = std::find_if(input.begin(), input.end(), [](const ModelOperator& op) { return op.name == "mtp_eh_proj"; });
  ASSERT_NE(proj, input.end());
  EXPECT_DOUBLE_EQ(proj->forward.flops.value(), 2.0 * 512 * 256 * 512);
}

// A parallel block reduces its attention and MLP branches once over TP: a transformer layer's
// TP collectives and bytes halve, forward and backward, with SP (all-gather + reduce-scatter
// pairs) and without (all-reduces).
TEST(ParallelBlock, HalvesTheTensorParallelCommunication) {
  IterationOptions options;
  options.transformer_layers_only = true;
  const Topology topo = toy_cluster(2);
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "SP" : "no SP");
    ParallelLayout l = layout(1, 2, 1, 4);
    l.sequence_parallel = sp;
    ModelConfig m = tiny();
    const IterationResult sequential = simulate_iteration(m, l, topo, options);
    m.parallel_block = true;
    const IterationResult parallel = simulate_iteration(m, l, topo, options);
    const CommunicationVolume& a = sequential.stages[0].communication[kind_index(WorkKind::kTpComm)];
    const CommunicationVolume& b = parallel.stages[0].communication[kind_index(WorkKind::kTpComm)];
    ASSERT_GT(a.collectives, 0);
    EXPECT_EQ(b.collectives * 2, a.collectives);
    EXPECT_DOUBLE_EQ(b.sent.value() * 2, a.sent.value());
    EXPECT_LT(parallel.iteration_time, sequential.iteration_time);
  }
}

TEST(IterationBubble, FreeCommunicationGivesTheClosedForms) {
  // Equal stages (transformer layers only), every communication free: the pipeline phase is
  // stage 2's executor, so Σ bubble / (p · end of the last backward) is exactly
  //   GPipe, 1F1B   p=4, m=8       (p−1)/(m+p−1)   = 3/11
  //   interleaved   p=4, m=8, v=2  (p−1)/(v·m+p−1) = 3/19
  // (8 layers: 2 per stage, 1 per chunk with v = 2, so every chunk takes the same time.)
  IterationOptions free;
  free.free_communication = true;
  free.transformer_layers_only = true;
  const Topology topo = toy_cluster(4);
  struct Case {
    PipelineScheduleKind kind;
    int v;
    int64_t num, den;
  };
  for (const Case& c : {Case{PipelineScheduleKind::kGpipe, 1, 3, 11}, Case{PipelineScheduleKind::kOneFOneB, 1, 3, 11},
                        Case{PipelineScheduleKind::kInterleavedOneFOneB, 2, 3, 19}}) {
    SCOPED_TRACE(to_string(c.kind));
    ParallelLayout l = layout(1, 1, 4, 8);
    l.schedule = c.kind;
    l.virtual_stages = c.v;
    const IterationResult r = simulate_iteration(tiny(), l, topo, free);
    Time bubble;
    for (const StageResult& s : r.stages) bubble += s.time.bubble;
    EXPECT_EQ(bubble.picoseconds() * c.den, c.num * 4 * r.pipeline_end.picoseconds());
    EXPECT_NEAR(r.pipeline_bubble_fraction, static_cast<double>(c.num) / static_cast<double>(c.den), 1e-12);
    expect_parts_add_up(r);
  }
}

TEST(IterationTime, SmallLayersRunAtTheHostsPace) {
  // A host that takes 1 s to issue a kernel, far longer than any of the toy model's kernels:
  // each pass of a layer takes its n kernels' issue times, n·t_dispatch, plus at most its own
  // kernels once more (the last one runs after its issue). Over the 8 layers of a micro-batch:
  // 8·n_f s forward, 8·n_b s backward, each within the kernels-only pass above it.
  IterationOptions slow_host;
  slow_host.transformer_layers_only = true;
  slow_host.compute.host_dispatch = Time::from_seconds(1);
  const Topology topo = toy_cluster(1);
  const ParallelLayout l = layout(1, 1, 1, 1);
  const IterationResult host = simulate_iteration(tiny(), l, topo, slow_host);
  const IterationResult kernels = simulate_iteration(tiny(), l, topo, test::kernels_only(slow_host));
  const std::vector<ModelOperator> ops =
      layer_operators(tiny(), 0, iteration_detail::micro_batch_of(l), iteration_detail::sharding_of(l));
  int forward_kernels = 0, backward_kernels = 0;
  for (const ModelOperator& op : ops) {
    forward_kernels += op.forward.kernels;
    backward_kernels += op.backward.kernels;
  }
  const Time forward_issue = Time::from_seconds(8.0 * forward_kernels);
  const Time backward_issue = Time::from_seconds(8.0 * backward_kernels);
  ASSERT_LT(kernels.stages[0].forward_compute, Time::from_seconds(1));
  EXPECT_GE(host.stages[0].forward_compute, forward_issue);
  EXPECT_LE(host.stages[0].forward_compute, forward_issue + kernels.stages[0].forward_compute);
  EXPECT_GE(host.stages[0].backward_compute, backward_issue);
  EXPECT_LE(host.stages[0].backward_compute, backward_issue + kernels.stages[0].backward_compute);
}

// Kernels of `ops` (forward and backward) whose names pass `keep`.
template <class Keep>
int kernels_of(const std::vector<ModelOperator>& ops, Keep keep) {
  int n = 0;
  for (const ModelOperator& op : ops) n += keep(op.name) ? op.forward.kernels + op.backward.kernels : 0;
  return n;
}

TEST(IterationTime, KernelsReplayedFromGraphsCostTheHostNothing) {
  // The same slow host (t_dispatch = 1 s), one GPU, one micro-batch of the 8-layer toy model, no
  // recomputation. Under a full-iteration CUDA graph the iteration is the kernels-only one, to the
  // picosecond. A pass whose n eager kernels the host must issue takes between n s and n s plus
  // its kernels (SmallLayersRunAtTheHostsPace), so a graph that leaves n kernels of the iteration
  // eager puts it between kernels + n s − the kernels' own time and kernels + n s:
  // per-layer graphs leave the embedding's and the output layer's; the attention scope leaves
  // each layer's MLP block (mlp_norm on) besides; the MLP scope each attention block.
  IterationOptions slow_host;
  slow_host.compute.host_dispatch = Time::from_seconds(1);
  const Topology topo = toy_cluster(1);
  ParallelLayout l = layout(1, 1, 1, 1);
  const IterationResult kernels = simulate_iteration(tiny(), l, topo, test::kernels_only(slow_host));
  const MicroBatch mb = iteration_detail::micro_batch_of(l);
  const ShardingFactors sh = iteration_detail::sharding_of(l);
  const auto all = [](const std::string&) { return true; };
  const int ends = kernels_of(embedding_operators(tiny(), mb, sh), all) + kernels_of(output_operators(tiny(), mb, sh), all);
  const std::vector<ModelOperator> layer = layer_operators(tiny(), 0, mb, sh);
  const int mlp = kernels_of(layer, [](const std::string& name) { return name.rfind("mlp_", 0) == 0; });
  const int attention = kernels_of(layer, all) - mlp;
  ASSERT_GT(mlp, 0);
  ASSERT_GT(attention, 0);
  auto expect_eager_kernels = [&](const ParallelLayout& graphed, int eager) {
    const Time t = simulate_iteration(tiny(), graphed, topo, slow_host).iteration_time;
    EXPECT_LE(t, kernels.iteration_time + Time::from_seconds(eager)) << to_string(graphed.cuda_graphs, graphed.cuda_graph_scope);
    EXPECT_GE(t, Time::from_seconds(eager)) << to_string(graphed.cuda_graphs, graphed.cuda_graph_scope);
  };
  expect_eager_kernels(l, ends + 8 * (attention + mlp));
  l.cuda_graphs = CudaGraphs::kFullIteration;
  EXPECT_EQ(simulate_iteration(tiny(), l, topo, slow_host).iteration_time, kernels.iteration_time);
  l.cuda_graphs = CudaGraphs::kLayers;
  const Time layers = simulate_iteration(tiny(), l, topo, slow_host).iteration_time;
  expect_eager_kernels(l, ends);
  // Megatron's scopes: the attention block and the MLP block together are the whole layer.
  l.cuda_graphs = CudaGraphs::kScoped;
  l.cuda_graph_scope = {.attn = true, .mlp = true};
  EXPECT_EQ(simulate_iteration(tiny(), l, topo, slow_host).iteration_time, layers);
  l.cuda_graph_scope = {.attn = true};
  expect_eager_kernels(l, ends + 8 * mlp);
  l.cuda_graph_scope = {.mlp = true};
  expect_eager_kernels(l, ends + 8 * attention);
}

TEST(CudaGraphScopes, ReadAsMegatronNamesThem) {
  const auto scoped = cuda_graphs_from("attn/moe_router,moe_preprocess");
  ASSERT_TRUE(scoped);
  EXPECT_EQ(scoped->first, CudaGraphs::kScoped);
  EXPECT_EQ(scoped->second, (CudaGraphScope{.attn = true, .moe_router = true, .moe_preprocess = true}));
  EXPECT_EQ(to_string(scoped->first, scoped->second), "attn/moe_router/moe_preprocess");
  EXPECT_EQ(cuda_graphs_from("full_iteration")->first, CudaGraphs::kFullIteration);
  EXPECT_FALSE(cuda_graphs_from("attn/experts"));
  EXPECT_FALSE(cuda_graphs_from(""));
  EXPECT_FALSE(cuda_graphs_from("attn/"));
}

TEST(IterationTime, SustainedFractionStretchesEveryKernel) {
  // Free communication and no launch gaps: the iteration is kernels and bubbles only, and every
  // kernel takes its stand-alone time / σ. At σ = 0.5 each kernel takes twice as long (up to
  // its own picosecond of rounding up), so the iteration does too, and the pipeline's shape —
  // its bubble fraction, 3/11 for p = 4, m = 8 — stays the same.
  IterationOptions alone = test::kernels_only();
  alone.free_communication = true;
  alone.transformer_layers_only = true;
  alone.compute.kernel_launch_overhead = Time::zero();
  alone.compute.sustained_fraction = 1.0;
  IterationOptions half = alone;
  half.compute.sustained_fraction = 0.5;
  const Topology topo = toy_cluster(4);
  const ParallelLayout l = layout(1, 1, 4, 8);
  const IterationResult a = simulate_iteration(tiny(), l, topo, alone);
  const IterationResult h = simulate_iteration(tiny(), l, topo, half);
  // Kernels per iteration: far below 10⁴, so the rounding is under 10 ns of a multi-ms step.
  EXPECT_NEAR(h.iteration_time.seconds(), 2 * a.iteration_time.seconds(), 1e-8);
  EXPECT_GT(h.iteration_time, a.iteration_time + a.iteration_time - Time::ns(10));
  EXPECT_NEAR(h.pipeline_bubble_fraction, 3.0 / 11.0, 1e-9);
  EXPECT_NEAR(h.mfu, a.mfu / 2, a.mfu * 1e-6);
}

TEST(IterationTime, SustainedFractionIsRecoveredFromAMeasuredStep) {
  // A step "measured" as the simulation at σ = 0.7 (two stages, DP 2 on 4 toy GPUs, with its
  // communication) gives σ = 0.7 back: the bisection stops within 1e-4 of the largest σ whose
  // step still takes that long, and the time is strictly falling in σ here (compute is never
  // fully hidden), so that σ is 0.7 itself.
  const Topology topo = toy_cluster(4);
  const ParallelLayout l = layout(2, 1, 2, 4);
  IterationOptions options;
  options.compute.sustained_fraction = 0.7;
  const Time measured = simulate_iteration(tiny(), l, topo, options).iteration_time;
  options.compute.sustained_fraction = 0.3;  // ignored by the fit
  const double sigma = fit_sustained_fraction(tiny(), l, topo, options, measured);
  EXPECT_NEAR(sigma, 0.7, 1e-4);
  // A step faster than every kernel at its stand-alone speed cannot be fitted, nor one slower
  // than σ = 0.05 allows.
  options.compute.sustained_fraction = 1.0;
  const Time fastest = simulate_iteration(tiny(), l, topo, options).iteration_time;
  EXPECT_THROW(fit_sustained_fraction(tiny(), l, topo, options, fastest - Time::ns(1)), std::invalid_argument);
  EXPECT_DOUBLE_EQ(fit_sustained_fraction(tiny(), l, topo, options, fastest), 1.0);
  // At σ = 0.05 the kernels take 14× their time at 0.7, the communication no longer: under
  // 15× the measured step.
  EXPECT_THROW(fit_sustained_fraction(tiny(), l, topo, options, measured * 15), std::invalid_argument);
}

TEST(IterationCommunication, DataParallelSendsTheZeroVolumes) {
  // One micro-batch per step (global batch = dp), N = 4 ranks, Ψ parameters, bf16 gradients:
  //   ZeRO 0: all-reduce                       2(N−1)/N · 2Ψ
  //   ZeRO 1, 2: reduce-scatter + all-gather   (N−1)/N · 2Ψ · 2 = the same
  //   ZeRO 3: 2 all-gathers + reduce-scatter   3(N−1)/N · 2Ψ = 1.5× (ZeRO paper §7.2.2)
  const ModelConfig model = tiny();
  const double psi = static_cast<double>(count_parameters(model).total);
  const double ddp = 2.0 * 3.0 / 4.0 * psi * 2.0;
  const Topology topo = toy_cluster(4);
  const std::pair<ZeroStage, double> cases[] = {{ZeroStage::kStage0, 1.0}, {ZeroStage::kStage1, 1.0},
                                                {ZeroStage::kStage2, 1.0}, {ZeroStage::kStage3, 1.5}};
  for (auto [stage, factor] : cases) {
    for (bool prefetch : {true, false}) {
      SCOPED_TRACE(static_cast<int>(stage));
      ParallelLayout l = layout(4, 1, 1, 4);
      l.zero_stage = stage;
      l.param_gather_prefetch = prefetch;
      const IterationResult r = simulate_iteration(model, l, topo);
      const auto& dp = r.stages[0].communication[static_cast<size_t>(WorkKind::kDpComm)];
      EXPECT_NEAR(dp.sent.value(), factor * ddp, 1e-9 * ddp);
      EXPECT_DOUBLE_EQ(r.stages[0].parameters, psi);
      expect_parts_add_up(r);
    }
  }
}

TEST(IterationCommunication, HybridShardingShardsWithinGroupsAndAllReducesTheShards) {
  // HSDP over N = 8 data-parallel ranks in shard groups of g = 2 (R = 4 replicas), Ψ parameters,
  // bf16 gradients, one micro-batch:
  //   ZeRO 3: 2 all-gathers + a reduce-scatter within the group, 3(g−1)/g · 2Ψ, and an all-reduce
  //           of the 2Ψ/g gradient shard across the replicas, 2(R−1)/R · 2Ψ/g
  //   ZeRO 1: reduce-scatter + all-gather within the group, 2(g−1)/g · 2Ψ, and the same all-reduce
  // The states are those of ZeRO over g ranks (ZeRO paper's formula with N = g).
  const ModelConfig model = tiny();
  const double psi = static_cast<double>(count_parameters(model).total);
  const Topology topo = toy_cluster(8);
  const double g = 2, replicas = 4;
  const double across = 2.0 * (replicas - 1) / replicas * 2.0 * psi / g;
  for (auto [stage, within] : {std::pair{ZeroStage::kStage3, 3.0 * (g - 1) / g * 2.0 * psi},
                               std::pair{ZeroStage::kStage1, 2.0 * (g - 1) / g * 2.0 * psi}}) {
    SCOPED_TRACE(static_cast<int>(stage));
    ParallelLayout l = layout(8, 1, 1, 8);
    l.zero_stage = stage;
    l.dp_shard = 2;
    const IterationResult r = simulate_iteration(model, l, topo);
    const auto& dp = r.stages[0].communication[static_cast<size_t>(WorkKind::kDpComm)];
    EXPECT_NEAR(dp.sent.value(), within + across, 1e-9 * (within + across));
    const MemoryBreakdown& m = r.stages[0].memory;
    EXPECT_NEAR((m.parameters + m.gradients + m.optimizer_states).value(),
                zero_model_state_bytes(psi, stage, 2, kAdamOptimizerBytesPerParameter).value(), 1e-6 * psi);
    expect_parts_add_up(r);
  }
  // Shards over every rank are plain ZeRO, byte for byte.
  ParallelLayout whole = layout(8, 1, 1, 8), sharded = whole;
  whole.zero_stage = sharded.zero_stage = ZeroStage::kStage3;
  sharded.dp_shard = 8;
  EXPECT_EQ(simulate_iteration(model, whole, topo).iteration_time, simulate_iteration(model, sharded, topo).iteration_time);
  // Refused without sharded states, and where the groups do not divide the ranks.
  sharded.dp_shard = 3;
  EXPECT_THROW(simulate_iteration(model, sharded, topo), InputError);
  sharded.dp_shard = 2;
  sharded.zero_stage = ZeroStage::kStage0;
  EXPECT_THROW(simulate_iteration(model, sharded, topo), InputError);
}

TEST(IterationCommunication, Fp32GradientsDoubleTheReductionAndTheirMemory) {
  // Megatron's main_grad (grad_reduce_in_fp32): ZeRO 0's all-reduce moves 2(N−1)/N · 4Ψ, twice
  // the bf16 volume, and the gradients held grow from 2Ψ to 4Ψ (ZeRO 0: 2 + 4 + 12 = 18Ψ of
  // model states). Reducing after the whole backward instead of per bucket moves the same bytes.
  const ModelConfig model = tiny();
  const double psi = static_cast<double>(count_parameters(model).total);
  const Topology topo = toy_cluster(4);
  ParallelLayout l = layout(4, 1, 1, 4);
  const IterationResult bf16 = simulate_iteration(model, l, topo);
  l.grad_reduce_in_fp32 = true;
  for (bool overlap : {true, false}) {
    l.grad_reduce_overlap = overlap;
    const IterationResult fp32 = simulate_iteration(model, l, topo);
    const auto sent = [](const IterationResult& r) {
      return r.stages[0].communication[static_cast<size_t>(WorkKind::kDpComm)].sent.value();
    };
    EXPECT_NEAR(sent(fp32), 2.0 * 3.0 / 4.0 * psi * 4.0, 1e-9 * sent(fp32));
    EXPECT_NEAR(sent(fp32), 2 * sent(bf16), 1e-9 * sent(fp32));
    EXPECT_DOUBLE_EQ(fp32.stages[0].memory.gradients.value(), 4 * psi);
    EXPECT_DOUBLE_EQ((fp32.stages[0].memory.parameters + fp32.stages[0].memory.gradients +
                      fp32.stages[0].memory.optimizer_states).value(), 18 * psi);
    expect_parts_add_up(fp32);
  }
}

TEST(IterationMemory, PrecisionAwareAdamKeepsItsStateInTheTypesItWasGiven) {
  // Megatron's --use-precision-aware-optimizer hands the Adam state to Transformer Engine's
  // FusedAdam: moments in exp_avg_dtype / exp_avg_sq_dtype, and where FusedAdam owns the fp32
  // master weight (no fp8 recipe but delayed scaling) and the parameters are bf16, only the 16
  // bits the bf16 copy lacks (store_param_remainders). Bytes per parameter:
  ParallelLayout l;
  EXPECT_DOUBLE_EQ(adam_state_bytes_per_parameter(l), 12.0);  // off: fp32 master, m, v
  l.precision_aware_optimizer = true;
  EXPECT_DOUBLE_EQ(adam_state_bytes_per_parameter(l), 2.0 + 4 + 4);  // the remainder, fp32 moments
  l.exp_avg_bytes = l.exp_avg_sq_bytes = 2;
  EXPECT_DOUBLE_EQ(adam_state_bytes_per_parameter(l), 2.0 + 2 + 2);  // DeepSeek-V3's recipe
  l.dtype = DType::kFp8;
  EXPECT_DOUBLE_EQ(adam_state_bytes_per_parameter(l), 6.0);  // delayed scaling: still FusedAdam's
  l.fp8_param_gather = true;
  EXPECT_DOUBLE_EQ(adam_state_bytes_per_parameter(l), 4.0 + 2 + 2);  // fp8 parameters: no bf16 bits
  l.fp8_param_gather = false;
  l.fp8_recipe = Fp8Recipe::kMxfp8;
  EXPECT_DOUBLE_EQ(adam_state_bytes_per_parameter(l), 4.0 + 2 + 2);  // Megatron keeps the master
  EXPECT_EQ(optimizer_state_dtype_bytes("bfloat16"), 2);
  EXPECT_EQ(optimizer_state_dtype_bytes("uint8"), 1);
  EXPECT_EQ(optimizer_state_dtype_bytes("fp64"), std::nullopt);
  for (const char* name : {"fp32", "bf16", "fp8"}) {  // what search --emit writes reads back the same
    EXPECT_STREQ(optimizer_state_dtype_name(*optimizer_state_dtype_bytes(name)), name);
  }

  // Simulated: ZeRO-1 over N = 4 ranks holds K·Ψ/N of state, 12Ψ/4 → 6Ψ/4, and the optimizer
  // step, a memory-bound kernel of 28 B per parameter of its shard (2 of gradient and parameter,
  // the state read and written), moves 2·(12 − 6) B less.
  const ModelConfig model = tiny();
  const double psi = static_cast<double>(count_parameters(model).total);
  const Topology topo = toy_cluster(4);
  ParallelLayout z = layout(4, 1, 1, 4);
  z.zero_stage = ZeroStage::kStage1;
  const IterationResult fp32_state = simulate_iteration(model, z, topo);
  z.precision_aware_optimizer = true;
  z.exp_avg_bytes = z.exp_avg_sq_bytes = 2;
  const IterationResult bf16_state = simulate_iteration(model, z, topo);
  EXPECT_DOUBLE_EQ(fp32_state.stages[0].memory.optimizer_states.value(), 12 * psi / 4);
  EXPECT_DOUBLE_EQ(bf16_state.stages[0].memory.optimizer_states.value(), 6 * psi / 4);
  expect_parts_add_up(bf16_state);
  const ComputeModel cm(topo.gpu_specs()[0]);
  const Time saved = cm.time(memory_bound_cost(Bytes(psi / 4 * 28))) - cm.time(memory_bound_cost(Bytes(psi / 4 * 16)));
  EXPECT_EQ(fp32_state.iteration_time - bf16_state.iteration_time, saved);
}

TEST(IterationCommunication, Fp8ParametersHalveTheGathersAndTheWeightsHeld) {
  // fp8 training on N = 4 ranks. Outside ZeRO-3 Transformer Engine caches each weight's fp8
  // row-wise and transposed copies beside the bf16 ones: 2 + 2 = 4Ψ of parameters; with the
  // parameters in fp8 (--fp8-param-gather) 1 + 1 = 2Ψ. Under ZeRO-3 the gathered layers are
  // transient: 2Ψ/N held, 1Ψ/N in fp8, and the parameter all-gathers (2 of the 3 ZeRO-3
  // collectives) move half the bytes: 3(N−1)/N·2Ψ → (2·1 + 2)(N−1)/N·Ψ.
  const ModelConfig model = tiny();
  const double psi = static_cast<double>(count_parameters(model).total);
  const Topology topo = toy_cluster(4);
  ParallelLayout l = layout(4, 1, 1, 4);
  l.dtype = DType::kFp8;
  l.zero_stage = ZeroStage::kStage1;
  EXPECT_DOUBLE_EQ(simulate_iteration(model, l, topo).stages[0].memory.parameters.value(), 4 * psi);
  l.fp8_param_gather = true;
  EXPECT_DOUBLE_EQ(simulate_iteration(model, l, topo).stages[0].memory.parameters.value(), 2 * psi);
  l.zero_stage = ZeroStage::kStage3;
  const IterationResult fp8_params = simulate_iteration(model, l, topo);
  EXPECT_DOUBLE_EQ(fp8_params.stages[0].memory.parameters.value(), psi / 4);
  l.fp8_param_gather = false;
  const IterationResult bf16_params = simulate_iteration(model, l, topo);
  EXPECT_DOUBLE_EQ(bf16_params.stages[0].memory.parameters.value(), 2 * psi / 4);
  const auto sent = [](const IterationResult& r) {
    return r.stages[0].communication[static_cast<size_t>(WorkKind::kDpComm)].sent.value();
  };
  EXPECT_NEAR(sent(bf16_params), 3.0 * 3.0 / 4.0 * 2.0 * psi, 1e-9 * sent(bf16_params));
  EXPECT_NEAR(sent(fp8_params), (2.0 + 2.0) * 3.0 / 4.0 * psi, 1e-9 * sent(fp8_params));
  expect_parts_add_up(fp8_params);
}

TEST(IterationMemory, Fp4TrainingCachesTwoQuantisedCopiesOfEachWeight) {
  // Outside ZeRO-3, Transformer Engine keeps a weight's fp4 copy for the forward and its
  // transposed copy for the data gradient beside the bf16 one: NVFP4 quantises weights in 16×16
  // blocks (an E4M3 scale per 256 elements), so 2 + 2·(0.5 + 1/256) B per parameter; MXFP4's
  // scale per 32: 2 + 2·(0.5 + 1/32).
  const ModelConfig model = tiny();
  const double psi = static_cast<double>(count_parameters(model).total);
  Topology topo = toy_cluster(4);
  ParallelLayout l = layout(4, 1, 1, 4);
  l.dtype = DType::kFp4;
  l.zero_stage = ZeroStage::kStage1;
  // The toy GPU has no fp4 tensor cores: training in fp4 is refused with the GPU named.
  try {
    simulate_iteration(model, l, topo);
    FAIL() << "fp4 GEMMs on a GPU without fp4 tensor cores";
  } catch (const InputError& e) {
    EXPECT_EQ(e.pointer(), "/parallel/dtype");
    EXPECT_NE(e.reason().find("has no fp4 peak"), std::string::npos) << e.what();
  }
  GpuSpec with_fp4 = test::toy_gpu();
  with_fp4.fp4 = FlopRate(4 * with_fp4.bf16.value());
  topo = test::star(4, gigabytes_per_second(100), Time::us(1), with_fp4);
  EXPECT_DOUBLE_EQ(simulate_iteration(model, l, topo).stages[0].memory.parameters.value(), (2 + 2 * (0.5 + 1.0 / 256)) * psi);
  l.fp4_recipe = Fp4Recipe::kMxfp4;
  EXPECT_DOUBLE_EQ(simulate_iteration(model, l, topo).stages[0].memory.parameters.value(), (2 + 2 * (0.5 + 1.0 / 32)) * psi);
}

TEST(IterationCompute, Bf16EndLayersRunAsInABf16Iteration) {
  // Four layers on four stages, fp8 with one bf16 layer at each end (Megatron's
  // --first-last-layers-bf16): stage 0 (embedding and layer 0) computes exactly as in a bf16
  // iteration, stages 1 and 2 exactly as in an fp8 one.
  const ModelConfig model = tiny(4);
  const Topology topo = toy_cluster(4);
  ParallelLayout l = layout(1, 1, 4, 4);
  const IterationResult bf16 = simulate_iteration(model, l, topo);
  l.dtype = DType::kFp8;
  const IterationResult fp8 = simulate_iteration(model, l, topo);
  l.bf16_layers_at_start = l.bf16_layers_at_end = 1;
  const IterationResult ends = simulate_iteration(model, l, topo);
  EXPECT_EQ(ends.stages[0].forward_compute, bf16.stages[0].forward_compute);
  EXPECT_EQ(ends.stages[0].backward_compute, bf16.stages[0].backward_compute);
  EXPECT_EQ(ends.stages[1].forward_compute, fp8.stages[1].forward_compute);
  EXPECT_EQ(ends.stages[2].backward_compute, fp8.stages[2].backward_compute);
  EXPECT_NE(ends.stages[0].forward_compute, fp8.stages[0].forward_compute);
  l.bf16_layers_at_end = 4;
  EXPECT_THROW(simulate_iteration(model, l, topo), InputError);
}

TEST(IterationCommunication, TensorParallelSendsFourAllReducesPerLayer) {
  // Megatron: 2 all-reduces forward and 2 backward per layer, each of S = b·s·h·2 bytes; a ring
  // all-reduce sends 2(t−1)/t·S per GPU. t = 4, 8 layers, m = 2 micro-batches:
  //   collectives 4·8·2 = 64, bytes 64 · 2·3/4 · S.
  // The vocabulary-parallel ends add per micro-batch: the embedding's all-reduce (forward), the
  // output layer's input-gradient all-reduce (backward), both of S, and the cross-entropy's 3
  // all-reduces of s·4 bytes (fp32 per token): 5 collectives, 2·1.5·S + 3·1.5·s·4 bytes.
  // With SP each all-reduce becomes all-gather + reduce-scatter (128 in the layers); the ends
  // reduce-scatter/all-gather S once per pass each (4, sending 3/4·S each: the same 3S) plus
  // the cross-entropy's 3: 142 collectives, the same bytes.
  // Full recomputation repeats the layers' forward 2: 6 per layer → 96, plus the ends' 10.
  const double S = 1 * 512 * 256 * 2.0;
  const double ends = 2 * (2 * 1.5 * S + 3 * 1.5 * 512 * 4.0);
  const Topology topo = toy_cluster(4);
  ParallelLayout l = layout(1, 4, 1, 2);
  auto tp_of = [&](const ParallelLayout& lay) {
    return simulate_iteration(tiny(), lay, topo).stages[0].communication[static_cast<size_t>(WorkKind::kTpComm)];
  };
  auto plain = tp_of(l);
  EXPECT_EQ(plain.collectives, 64 + 10);
  EXPECT_NEAR(plain.sent.value(), 64 * 1.5 * S + ends, 1e-6);
  l.sequence_parallel = true;
  auto sp = tp_of(l);
  EXPECT_EQ(sp.collectives, 128 + 14);
  EXPECT_NEAR(sp.sent.value(), 64 * 1.5 * S + ends, 1e-6);
  l.sequence_parallel = false;
  l.recompute = Recomputation::kFull;
  EXPECT_EQ(tp_of(l).collectives, 96 + 10);
  // Megatron's block method: only the first 3 of the stage's 8 layers repeat their forward's 2.
  l.recompute_layers = 3;
  EXPECT_EQ(tp_of(l).collectives, 64 + 3 * 2 * 2 + 10);
  l.recompute_layers = 0;
  // Op-level checkpointing (torchtitan's policy, with SP as its TP plan runs) keeps each
  // block's reduce-scatter output but gathers its input again in the backward: 2 more
  // all-gathers per layer and micro-batch, 8·2·2 = 32, each sending 3/4·S.
  l.recompute = Recomputation::kSelectiveOp;
  l.sequence_parallel = true;
  const CommunicationVolume op = tp_of(l);
  EXPECT_EQ(op.collectives, 128 + 32 + 14);
  EXPECT_NEAR(op.sent.value(), 64 * 1.5 * S + 32 * 0.75 * S + ends, 1e-6);
  l.sequence_parallel = false;
  // Without the ends (transformer layers only), exactly the layers' 64.
  IterationOptions layers_only;
  layers_only.transformer_layers_only = true;
  l.recompute = Recomputation::kNone;
  EXPECT_EQ(simulate_iteration(tiny(), l, topo, layers_only).stages[0].communication[static_cast<size_t>(WorkKind::kTpComm)].collectives,
            64);
}

TEST(IterationTime, BlockRecomputationRepeatsOnlyItsLayersForwards) {
  // One GPU, 8 layers, 2 micro-batches: recomputing the first N layers adds N of the 8 layers'
  // forwards to each backward, N/8 of what full recomputation adds; N ≥ 8 is full recomputation.
  const Topology topo = toy_cluster(1);
  ParallelLayout l = layout(1, 1, 1, 2);
  const double none = simulate_iteration(tiny(), l, topo).iteration_time.seconds();
  l.recompute = Recomputation::kFull;
  const double full = simulate_iteration(tiny(), l, topo).iteration_time.seconds();
  ASSERT_GT(full, none);
  l.recompute_layers = 3;
  EXPECT_NEAR(simulate_iteration(tiny(), l, topo).iteration_time.seconds() - none, 3.0 / 8 * (full - none),
              1e-9 * full);
  l.recompute_layers = 8;
  EXPECT_DOUBLE_EQ(simulate_iteration(tiny(), l, topo).iteration_time.seconds(), full);
}

// The per-operator breakdown is the iteration's own arithmetic kept per operator: on one GPU,
// with nothing to communicate, two more micro-batches add twice its units to the compute (the
// optimizer step, also compute, stays).
Time breakdown_total(const std::vector<UnitBreakdown>& units) {
  Time t;
  for (const UnitBreakdown& u : units) t += u.total() * u.count;
  return t;
}

double two_more_micro_batches(const ParallelLayout& l, const Topology& topo) {
  ParallelLayout more = l;
  more.global_batch += 2;
  return simulate_iteration(tiny(), more, topo).stages[0].time.compute.seconds() -
         simulate_iteration(tiny(), l, topo).stages[0].time.compute.seconds();
}

TEST(OperatorBreakdown, AddsUpToTheIterationsComputeAndNamesItsRecomputation) {
  const Topology topo = toy_cluster(1);
  const GpuSpec& gpu = topo.gpu_spec_of(topo.gpus()[0]);
  ParallelLayout l = layout(1, 1, 1, 2);
  for (const Recomputation r : {Recomputation::kNone, Recomputation::kSelective, Recomputation::kFull}) {
    l.recompute = r;
    const std::vector<UnitBreakdown> units = operator_breakdown(tiny(), l, gpu);
    ASSERT_EQ(units.size(), 3u);  // embedding, the layers, output layer
    EXPECT_EQ(units[1].count, 8);
    EXPECT_NEAR((breakdown_total(units) * 2).seconds(), two_more_micro_batches(l, topo), 1e-9) << static_cast<int>(r);
    for (const OperatorTime& op : units[1].operators) {
      const bool recomputed = r == Recomputation::kFull || (r == Recomputation::kSelective && op.name == "attention");
      EXPECT_EQ(op.recomputed, recomputed ? op.forward : Time::zero()) << static_cast<int>(r) << " " << op.name;
    }
  }
  // Megatron's block method: 3 of the stage's 8 layers recomputed, a kind of their own.
  l.recompute_layers = 3;
  const std::vector<UnitBreakdown> block = operator_breakdown(tiny(), l, gpu);
  ASSERT_EQ(block.size(), 4u);
  EXPECT_EQ(block[1].unit, "Transformer layer (recomputed)");
  EXPECT_EQ(block[1].count, 3);
  EXPECT_EQ(block[2].unit, "Transformer layer");
  EXPECT_EQ(block[2].count, 5);
  EXPECT_NEAR((breakdown_total(block) * 2).seconds(), two_more_micro_batches(l, topo), 1e-9);
}

// DeepSeek-V3's and Nemotron 3's multi-token prediction: each depth's input projection, its
// layer and the output head again are units of their own, and the sum still is the iteration's.
TEST(OperatorBreakdown, ListsTheMtpDepthsAndStillAddsUp) {
  const Topology topo = toy_cluster(1);
  const GpuSpec& gpu = topo.gpu_spec_of(topo.gpus()[0]);
  ModelConfig m = tiny();
  m.mtp_layers = 2;
  const ParallelLayout l = layout(1, 1, 1, 2);
  const std::vector<UnitBreakdown> units = operator_breakdown(m, l, gpu);
  ASSERT_EQ(units.size(), 6u);  // embedding, the layers, MTP input, MTP layer, MTP head, output layer
  EXPECT_EQ(units[2].unit, "MTP input");
  EXPECT_EQ(units[3].unit, "MTP Transformer layer");
  EXPECT_EQ(units[4].unit, "MTP output head");
  for (size_t i = 2; i < 5; ++i) EXPECT_EQ(units[i].count, 2) << units[i].unit;
  EXPECT_EQ(units[4].total(), units[5].total());
  ParallelLayout more = l;
  more.global_batch += 2;
  const double added = simulate_iteration(m, more, topo).stages[0].time.compute.seconds() -
                       simulate_iteration(m, l, topo).stages[0].time.compute.seconds();
  EXPECT_NEAR((breakdown_total(units) * 2).seconds(), added, 1e-9);
}

TEST(OperatorBreakdown, NamesTheHostOnlyWhereItsPassWaitsForIt) {
  // A host that takes 1 s per kernel: every pass waits for it, by its issued time over its
  // kernels' own, and each operator (the toy's kernels all take far less than 1 s) is "host".
  // The kernels alone: no pass waits, and no operator is named "host".
  const Topology topo = toy_cluster(1);
  const GpuSpec& gpu = topo.gpu_spec_of(topo.gpus()[0]);
  const ParallelLayout l = layout(1, 1, 1, 2);
  IterationOptions slow_host;
  slow_host.transformer_layers_only = true;
  slow_host.compute.host_dispatch = Time::from_seconds(1);
  const std::vector<UnitBreakdown> host = operator_breakdown(tiny(), l, gpu, slow_host);
  const std::vector<UnitBreakdown> kernels = operator_breakdown(tiny(), l, gpu, test::kernels_only(slow_host));
  ASSERT_EQ(host.size(), 1u);
  ASSERT_EQ(kernels.size(), 1u);
  // A pass of n kernels taking T alone is issued in n s, plus at most T after the last issue.
  const std::vector<ModelOperator> ops =
      layer_operators(tiny(), 0, iteration_detail::micro_batch_of(l), iteration_detail::sharding_of(l));
  double n_forward = 0, n_backward = 0, t_forward = 0, t_backward = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    n_forward += ops[i].forward.kernels;
    n_backward += ops[i].backward.kernels;
    t_forward += kernels[0].operators[i].forward.seconds();
    t_backward += kernels[0].operators[i].backward.seconds();
  }
  EXPECT_GE(host[0].host_pace_forward, n_forward / t_forward);
  EXPECT_LE(host[0].host_pace_forward, (n_forward + t_forward) / t_forward);
  EXPECT_GE(host[0].host_pace_backward, n_backward / t_backward);
  EXPECT_LE(host[0].host_pace_backward, (n_backward + t_backward) / t_backward);
  EXPECT_EQ(kernels[0].host_pace_forward, 1.0);
  EXPECT_EQ(kernels[0].host_pace_backward, 1.0);
  for (size_t i = 0; i < host[0].operators.size(); ++i) {
    const OperatorTime& paced = host[0].operators[i];
    const OperatorTime& alone = kernels[0].operators[i];
    EXPECT_EQ(paced.bound, "host") << paced.name;
    EXPECT_NE(alone.bound, "host") << alone.name;
    EXPECT_NEAR(paced.forward.seconds(), alone.forward.seconds() * host[0].host_pace_forward,
                1e-9 * paced.forward.seconds())
        << paced.name;
  }
}

TEST(IterationCommunication, DataParallelReductionsAreBoundByTheNodesNics) {
  // Llama 2 7B on two HGX A100 nodes with 4 NICs of 25 GB/s each (100 GB/s a node), bf16
  // gradients reduced after the backward (so the DP time is all exposed). A DP ring all-reduce
  // of S bytes sends 2(n−1)/n·S out of each node it crosses; with G rings leaving every node,
  // no schedule beats G·2(n−1)/n·S / 100 GB/s, and NCCL on the NICs reaches about 80% of it.
  // - TP 8 · DP 2: 8 rings of 2 (one GPU per node), S = 2 B × 6.7B / 8: 135 ms.
  // - TP 4 · DP 4: 4 rings of 4 (two GPUs per node), S = 2 B × 6.7B / 4: 202 ms; each ring
  //   leaves a node through both its GPUs' NICs, which it shares with another ring.
  // Both, analytical and co-simulated, within [1, 1.6] of the bound.
  const Topology topo = test::load_preset("hgx-a100-4hdr", 2);
  const ModelConfig model = test::bundled("llama2-7b");
  const double params = static_cast<double>(count_parameters(model).total);
  for (const int tp : {8, 4}) {
    ParallelLayout l = layout(16 / tp, tp, 1, 16 / tp);
    l.grad_reduce_overlap = false;
    const int n = l.dp;
    const double s = 2.0 * params / tp;
    const double bound = tp * 2.0 * (n - 1) / n * s / 100e9;  // tp rings leave each node
    for (const bool cosimulate : {false, true}) {
      IterationOptions o;
      o.cosimulate = cosimulate;
      const IterationResult r = simulate_iteration(model, l, topo, o);
      const double dp = r.stages[0].time.exposed[static_cast<size_t>(WorkKind::kDpComm)].seconds();
      EXPECT_GE(dp, bound) << "tp " << tp << (cosimulate ? " co-simulated" : "");
      EXPECT_LE(dp, 1.6 * bound) << "tp " << tp << (cosimulate ? " co-simulated" : "");
    }
  }
}

TEST(IterationCommunication, RingsAcrossRacksTakeNvlinkFromTheTensorParallelCollectives) {
  // Llama-3 70B, TP 2 · DP 64 with ZeRO-3 on two GB200 NVL72 racks (64 GPUs each), analytical.
  // The data-parallel group has 32 ranks in each rack, so its rings cross the racks through the
  // NICs but hop over NVLink 31 times in 32: at ~670 GB/s of busbw they keep about 90% of each
  // GPU's NVLink busy (900 GB/s at NCCL's 40.1/50 of line rate, 722 GB/s), and the TP
  // collectives that overlap them get the max-min fair rest.
  // So sharing links costs TP time here (at most 3×: two loads beside one TP collective leave
  // it a third), while with TP 8 · DP 16 (one rank of each DP group per 8 GPUs, rails across
  // two DGX H100 nodes) the rings never touch NVLink and the TP time is what it is alone.
  const ModelConfig model = test::bundled("llama3-70b");
  auto tp_time = [&](const Topology& topo, ParallelLayout l, bool contention) {
    l.sequence_length = 8192;
    l.sequence_parallel = l.tp > 1;
    l.zero_stage = ZeroStage::kStage3;
    IterationOptions o;
    o.communication_contention = contention;
    return simulate_iteration(model, l, topo, o).stages[0].time.exposed[static_cast<size_t>(WorkKind::kTpComm)].seconds();
  };
  TopologyLoadOptions two_racks(2);
  two_racks.gpus_per_node = 64;
  const Topology racks = load_topology(test::source_path("topologies/gb200-nvl72.json"), two_racks);
  const double shared = tp_time(racks, layout(64, 2, 1, 64), true), alone = tp_time(racks, layout(64, 2, 1, 64), false);
  EXPECT_GT(shared, 1.05 * alone);
  EXPECT_LE(shared, 3.0 * alone);
  const Topology dgx = test::load_preset("dgx-h100", 2);
  EXPECT_DOUBLE_EQ(tp_time(dgx, layout(2, 8, 1, 16), true), tp_time(dgx, layout(2, 8, 1, 16), false));
}

TEST(IterationCommunication, PipelineSendsScatterOverTensorParallelRanks) {
  // tp 2 · pp 2, m = 4 micro-batches of S = b·s·h·2 bytes. Every TP rank sends only its half,
  // S/2 (Megatron-LM's scatter-gather, DeepSpeed's partitioned activations): with SP that is the
  // slice it holds; without SP the two receivers then all-gather S, (t−1)/t·S = S/2 sent each.
  // So per stage and iteration: 4 sends of S/2, plus without SP 4 all-gathers of S/2.
  const double S = 1 * 512 * 256 * 2.0;
  const Topology topo = toy_cluster(4);
  ParallelLayout l = layout(1, 2, 2, 4);
  auto pp_of = [&](const ParallelLayout& lay, int stage) {
    return simulate_iteration(tiny(), lay, topo).stages[static_cast<size_t>(stage)].communication[static_cast<size_t>(
        WorkKind::kPpComm)];
  };
  for (int stage : {0, 1}) {
    l.sequence_parallel = false;
    const auto plain = pp_of(l, stage);
    EXPECT_EQ(plain.collectives, 8);
    EXPECT_DOUBLE_EQ(plain.sent.value(), 4 * S / 2 + 4 * S / 2);
    l.sequence_parallel = true;
    const auto sp = pp_of(l, stage);
    EXPECT_EQ(sp.collectives, 4);
    EXPECT_DOUBLE_EQ(sp.sent.value(), 4 * S / 2);
  }
}

TEST(IterationTime, TwoStageOneFOneBMatchesTheHandTimeline) {
  // pp = 2, m = 2, tp = dp = 1. Stage 0 holds the embedding and layers 0–3, stage 1 layers 4–7
  // and the output layer. a, b0: stage 0's forward and backward per micro-batch; f1, b1: stage
  // 1's; c: one activation send (S = 512·256·2 bytes) between the two GPUs.
  // Orders: stage 0 F0 F1 B0 B1, stage 1 F0 B0 F1 B1; sends queue on the sender's PP stream.
  //   s0.F0 [0, a]               send F0 [a, a+c]
  //   s0.F1 [a, 2a]              send F1 ends e1 = max(2a, a+c) + c
  //   s1.F0 [a+c, a+c+f1]        s1.B0 ends x = a+c+f1+b1, send B0 [x, x+c]
  //   s1.F1 ends y = max(x, e1) + f1; s1.B1 ends y+b1; send B1 ends z = max(y+b1, x+c) + c
  //   s0.B0 ends w = max(2a, x+c) + b0; s0.B1 ends max(w, z) + b0 = end of the pipeline
  // then the optimizer of each stage after the barrier: + max(opt0, opt1), optᵢ = the time of a
  // memory-bound kernel moving 28 bytes per parameter of stage i.
  const ModelConfig model = tiny();
  const Topology topo = toy_cluster(2);
  const ParallelLayout l = layout(1, 1, 2, 2);
  const IterationResult r = simulate_iteration(model, l, topo, test::kernels_only());

  const ComputeModel cm(topo.gpu_specs()[0], test::kernels_only().compute);
  const MicroBatch mb{1, 512, true, DType::kBf16};
  const auto layer = layer_operators(model, 0, mb, {});
  const auto embed = embedding_operators(model, mb, {});
  const auto out = output_operators(model, mb, {});
  const Time a = sum_time(cm, embed, false) + sum_time(cm, layer, false) * 4;
  const Time b0 = sum_time(cm, embed, true) + sum_time(cm, layer, true) * 4;
  const Time f1 = sum_time(cm, layer, false) * 4 + sum_time(cm, out, false);
  const Time b1 = sum_time(cm, layer, true) * 4 + sum_time(cm, out, true);
  CollectiveOptions analytical;
  analytical.model = "analytical";
  const Time c = CollectiveSimulator(topo, 2, 2).run(CollectiveOp::kSendRecv, Bytes(512 * 256 * 2.0), analytical).time;
  ASSERT_GT(c, Time::zero());

  const Time e1 = std::max(a * 2, a + c) + c;
  const Time x = a + c + f1 + b1;
  const Time y = std::max(x, e1) + f1;
  const Time z = std::max(y + b1, x + c) + c;
  const Time w = std::max(a * 2, x + c) + b0;
  const Time end = std::max(w, z) + b0;
  EXPECT_EQ(r.pipeline_end, end);

  const ParameterCounts counts = count_parameters(model);
  const double layer_params = static_cast<double>(layer_parameters(model, 0).total());
  const double psi0 = static_cast<double>(counts.embedding) + 4 * layer_params;
  const double psi1 = 4 * layer_params + static_cast<double>(counts.output_head + counts.final_norm);
  const Time opt0 = cm.time(memory_bound_cost(Bytes(28 * psi0)));
  const Time opt1 = cm.time(memory_bound_cost(Bytes(28 * psi1)));
  EXPECT_EQ(r.iteration_time, end + std::max(opt0, opt1));
  EXPECT_EQ(r.stages[0].forward_compute, a);
  EXPECT_EQ(r.stages[1].backward_compute, b1);
  // Each stage sends 2 activations forward (stage 0) or 2 gradients back (stage 1).
  EXPECT_EQ(r.stages[0].communication[static_cast<size_t>(WorkKind::kPpComm)].collectives, 2);
  EXPECT_EQ(r.stages[1].communication[static_cast<size_t>(WorkKind::kPpComm)].collectives, 2);
  expect_parts_add_up(r);
}

TEST(IterationMemory, ActivationsFollowTheScheduleAndStatesFollowZero) {
  // Stage 0 of 1F1B holds p = 4 micro-batches of its 2 layers, GPipe all m = 8. A layer of
  // tiny() (s = 512, b = 1, h = 256, a = 4 heads of 64, SwiGLU f = 4h, no dropout) keeps, in
  // 16-bit sbh units: two norm inputs 4, the QKV input 2, Q, K, V 6, the output projection's
  // input 2, the MLP input 2, gate and up outputs 2·2·4 = 16, their product 2·4 = 8: 40·sbh,
  // plus FlashAttention's fp32 row statistics 4·a·s·b. (Korthikanti's GPT layer is 34: a GELU
  // MLP keeps 8 + 8 where SwiGLU keeps 16 + 8, and its two dropout masks add 2.)
  const Topology topo = toy_cluster(4);
  ParallelLayout l = layout(1, 1, 4, 8);
  const double sbh = 512.0 * 256;
  const Bytes per_layer(sbh * 40 + 4.0 * 4 * 512);
  // The last stage also keeps the output side of its one micro-batch in flight: the final
  // norm's and the logits' inputs (2sbh each) and the cross-entropy's fp32 softmax, 4·s·b·V.
  const double output = 4 * sbh + 4.0 * 512 * 1024;
  IterationResult r = simulate_iteration(tiny(), l, topo);
  EXPECT_DOUBLE_EQ(r.stages[0].memory.activations.value(), 4 * 2 * per_layer.value());
  EXPECT_DOUBLE_EQ(r.stages[3].memory.activations.value(), 1 * 2 * per_layer.value() + output);
  EXPECT_DOUBLE_EQ(r.stages[0].in_flight_micro_batches, 4);
  l.schedule = PipelineScheduleKind::kGpipe;
  r = simulate_iteration(tiny(), l, topo);
  EXPECT_DOUBLE_EQ(r.stages[0].memory.activations.value(), 8 * 2 * per_layer.value());
  // GPipe runs every forward first: the last stage holds all m = 8 micro-batches' output side.
  EXPECT_DOUBLE_EQ(r.stages[3].memory.activations.value(), 8 * 2 * per_layer.value() + 8 * output);
  // The unfused attention core keeps the softmax output instead of the row statistics, 2as²b
  // (no dropout: Korthikanti's 5as²b less the mask and the dropout output), with a = 4, s =
  // 512, h = 256; selective recomputation drops it again, back to 40·sbh.
  l.schedule = PipelineScheduleKind::kOneFOneB;
  l.attention = AttentionKernel::kUnfused;
  r = simulate_iteration(tiny(), l, topo);
  EXPECT_DOUBLE_EQ(r.stages[3].memory.activations.value(), 1 * 2 * sbh * (40 + 2.0 * 4 * 512 / 256) + output);
  // During a layer's backward its recomputation re-creates the 2as²b again, one layer at a time.
  l.recompute = Recomputation::kSelective;
  r = simulate_iteration(tiny(), l, topo);
  const double scores = sbh * 2.0 * 4 * 512 / 256;
  EXPECT_DOUBLE_EQ(r.stages[3].memory.activations.value(), 1 * 2 * sbh * 40 + output + scores);
  // Full recomputation keeps each layer's input, 2sbh; the output side is not recomputed. The
  // layer being back-propagated has its whole set again beside its kept input.
  l.recompute = Recomputation::kFull;
  r = simulate_iteration(tiny(), l, topo);
  const double whole = sbh * 40 + scores;
  EXPECT_DOUBLE_EQ(r.stages[3].memory.activations.value(), 1 * 2 * sbh * 2 + output + (whole - 2 * sbh));
  EXPECT_DOUBLE_EQ(r.stages[0].memory.activations.value(), 4 * 2 * sbh * 2 + (whole - 2 * sbh));
  // Recomputing only the first layer of each stage (block method) keeps the other's whole.
  l.recompute_layers = 1;
  r = simulate_iteration(tiny(), l, topo);
  EXPECT_DOUBLE_EQ(r.stages[3].memory.activations.value(), 1 * (2 * sbh + whole) + output + (whole - 2 * sbh));
  l.recompute_layers = 0;
  l.recompute = Recomputation::kNone;
  l.attention = AttentionKernel::kFlash;
  r = simulate_iteration(tiny(), l, topo);
  // Model states: 2Ψ + 2Ψ + 12Ψ for ZeRO 0 with one DP rank.
  const double psi = r.stages[1].parameters;
  EXPECT_DOUBLE_EQ((r.stages[1].memory.parameters + r.stages[1].memory.gradients +
                    r.stages[1].memory.optimizer_states).value(), 16 * psi);
  EXPECT_FALSE(r.out_of_memory);
}

TEST(IterationMemory, SeventyBillionOnEightGpusWithoutShardingDoesNotFit) {
  // Llama-3-70B over tp 8, dp 2, ZeRO 0: ~8.8 B parameters per GPU × 16 bytes ≈ 140 GB > 80 GB.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-70b");
  const Topology topo = test::load_preset("dgx-h100", 2);
  ParallelLayout l = layout(2, 8, 1, 4);
  l.sequence_length = 4096;
  l.sequence_parallel = true;
  l.recompute = Recomputation::kSelective;
  IterationResult r = simulate_iteration(model, l, topo);
  EXPECT_TRUE(r.out_of_memory);
  EXPECT_GT(r.peak_memory.value(), 130e9);
  // ZeRO 3 over the 2 DP ranks shards the optimizer states: 12Ψ/2 instead of 12Ψ.
  l.zero_stage = ZeroStage::kStage3;
  IterationResult sharded = simulate_iteration(model, l, topo);
  EXPECT_LT(sharded.stages[0].memory.optimizer_states.value(), r.stages[0].memory.optimizer_states.value() / 1.9);
}

TEST(IterationMemory, EstimatedWithoutTimeAsTheSimulationHasIt) {
  // estimate_memory builds the same stage plan and memory as simulate_iteration without the
  // stream graph: every stage's figures must agree exactly, whatever the layout.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  const Topology topo = test::load_preset("dgx-h100", 2);
  std::vector<ParallelLayout> layouts;
  for (const ZeroStage z : {ZeroStage::kStage0, ZeroStage::kStage1, ZeroStage::kStage2, ZeroStage::kStage3}) {
    ParallelLayout l = layout(2, 4, 2, 16);
    l.zero_stage = z;
    l.sequence_parallel = true;
    layouts.push_back(l);
  }
  ParallelLayout interleaved = layout(1, 8, 2, 16);
  interleaved.schedule = PipelineScheduleKind::kInterleavedOneFOneB;
  interleaved.virtual_stages = 2;
  layouts.push_back(interleaved);
  ParallelLayout zero_bubble = layout(2, 4, 2, 16);
  zero_bubble.schedule = PipelineScheduleKind::kZeroBubbleH1;
  layouts.push_back(zero_bubble);
  ParallelLayout context = layout(1, 4, 2, 8);
  context.cp = 2;
  layouts.push_back(context);
  ParallelLayout block = interleaved;  // full recomputation of the first 3 of each chunk's 8 layers
  block.recompute = Recomputation::kFull;
  block.recompute_layers = 3;
  layouts.push_back(block);
  for (const ParallelLayout& l : layouts) {
    const IterationResult r = simulate_iteration(model, l, topo);
    const IterationMemory m = estimate_memory(model, l, topo.gpu_spec_of(topo.gpus()[0]));
    ASSERT_EQ(m.stages.size(), r.stages.size());
    for (size_t s = 0; s < m.stages.size(); ++s) {
      EXPECT_EQ(m.stages[s].total(), r.stages[s].memory.total()) << "stage " << s;
      EXPECT_EQ(m.stages[s].activations, r.stages[s].memory.activations) << "stage " << s;
      EXPECT_EQ(m.in_flight_micro_batches[s], r.stages[s].in_flight_micro_batches) << "stage " << s;
    }
    EXPECT_EQ(m.peak_memory, r.peak_memory);
    EXPECT_EQ(m.out_of_memory, r.out_of_memory);
  }
}

TEST(IterationTime, RealisticLlama8bOnTwoDgxNodes) {
  // Llama-3-8B, 16 H100s: tp 8 (inside a node), dp 2 across nodes, SP, ZeRO 1, s = 8192,
  // 8 micro-batches per replica. Published Megatron runs of this size reach 40–55 % MFU; the
  // check is only that the simulation lands in a plausible band and fits in 80 GB.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  const Topology topo = test::load_preset("dgx-h100", 2);
  ParallelLayout l = layout(2, 8, 1, 16);
  l.sequence_length = 8192;
  l.sequence_parallel = true;
  l.zero_stage = ZeroStage::kStage1;
  const IterationResult r = simulate_iteration(model, l, topo);
  EXPECT_GT(r.mfu, 0.2);
  EXPECT_LT(r.mfu, 0.75);
  EXPECT_GE(r.hfu, r.mfu);
  EXPECT_FALSE(r.out_of_memory);
  EXPECT_GT(r.stages[0].time.exposed[static_cast<size_t>(WorkKind::kTpComm)], Time::zero());
  EXPECT_EQ(r.simulated_ranks, 1);
  EXPECT_NEAR(r.tokens_per_second_per_gpu * 16, r.tokens_per_second, 1e-6 * r.tokens_per_second);
  expect_parts_add_up(r);
}

// The layout of workloads/train/llama3-70b-64xdgx-h100.json: TP 8 with SP, PP 4, DP 16, 1F1B,
// ZeRO-1, selective recomputation, 1,024 sequences of 8192.
ParallelLayout bundled_70b_layout() {
  ParallelLayout l = layout(16, 8, 4, 1024);
  l.sequence_length = 8192;
  l.sequence_parallel = true;
  l.recompute = Recomputation::kSelective;
  l.zero_stage = ZeroStage::kStage1;
  return l;
}

TEST(IterationOverlap, Zero3GradientOverlapIsNeverSlower) {
  // Llama-3 70B, TP 8 · DP 64, ZeRO-3, 512 sequences of 4096: with the parameter gathers on the
  // gradient stream, each prefetched gather queued behind the previous layer's reduce-scatter
  // and overlap made the iteration 27% slower (16.73 s against 13.16 s). On their own streams
  // (FSDP's) overlapping the reduction can only hide time.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-70b");
  const Topology topo = test::load_preset("dgx-h100", 64);
  ParallelLayout l = layout(64, 8, 1, 512);
  l.sequence_length = 4096;
  l.sequence_parallel = true;
  l.recompute = Recomputation::kSelective;
  l.zero_stage = ZeroStage::kStage3;
  l.grad_reduce_overlap = false;
  const IterationResult serial = simulate_iteration(model, l, topo);
  l.grad_reduce_overlap = true;
  const IterationResult overlapped = simulate_iteration(model, l, topo);
  EXPECT_LE(overlapped.iteration_time, serial.iteration_time);
  expect_parts_add_up(overlapped);
}

TEST(IterationOverlap, TpOverlapCannotHideTheLastChunk) {
  // The bundled Llama-3 70B layout (TP 8 with SP, PP 4, DP 16, 1F1B, s = 8192). A middle stage
  // has only transformer layers, whose TP collectives run on the compute stream without
  // overlap: its exposed TP time is all of them. With TransformerEngine-style overlap the
  // last of 8 chunks of each stays exposed: at least 1/8 of that (it was 0.00 ms when the
  // collectives could start before the GEMMs that produce their data).
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-70b");
  const Topology topo = test::load_preset("dgx-h100", 64);
  ParallelLayout l = bundled_70b_layout();
  const IterationResult serial = simulate_iteration(model, l, topo);
  l.tp_comm_overlap = true;
  const IterationResult overlapped = simulate_iteration(model, l, topo);
  const auto tp = static_cast<size_t>(WorkKind::kTpComm);
  const Time all = serial.stages[1].time.exposed[tp];
  const Time exposed = overlapped.stages[1].time.exposed[tp];
  EXPECT_GE(exposed.seconds(), all.seconds() / 8 * 0.999);
  EXPECT_LT(exposed, all);
  EXPECT_LT(overlapped.iteration_time, serial.iteration_time);
  expect_parts_add_up(overlapped);
}

TEST(IterationCriticalPath, AddsUpToTheIterationAndFollowsTheBottleneck) {
  // The bundled Llama-3 70B layout: the critical path's parts and its waits add up to the
  // iteration time; it is mostly compute, and without TP overlap the TP collectives on the
  // compute stream are on it. With free communication only compute and waits remain.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-70b");
  const Topology topo = test::load_preset("dgx-h100", 64);
  ParallelLayout l = bundled_70b_layout();
  for (const bool free : {false, true}) {
    IterationOptions o;
    o.free_communication = free;
    const IterationResult r = simulate_iteration(model, l, topo, o);
    Time sum = r.critical_path.waiting;
    for (Time t : r.critical_path.by_kind) sum += t;
    EXPECT_EQ(sum, r.iteration_time);
    const Time compute = r.critical_path.by_kind[static_cast<size_t>(WorkKind::kCompute)];
    EXPECT_GT(compute.seconds(), 0.7 * r.iteration_time.seconds());
    const Time tp = r.critical_path.by_kind[static_cast<size_t>(WorkKind::kTpComm)];
    if (free) {
      EXPECT_EQ(tp, Time::zero());
    } else {
      EXPECT_GT(tp, Time::zero());
    }
  }
}

TEST(IterationOverlap, SwitchesHideCommunication) {
  const Topology topo = toy_cluster(4);
  // DP: overlapping the gradient reduction with the backward cannot be slower.
  ParallelLayout l = layout(4, 1, 1, 16);
  l.grad_reduce_overlap = false;
  const IterationResult serial = simulate_iteration(tiny(), l, topo);
  l.grad_reduce_overlap = true;
  const IterationResult overlapped = simulate_iteration(tiny(), l, topo);
  EXPECT_LT(overlapped.iteration_time, serial.iteration_time);
  EXPECT_LT(overlapped.stages[0].time.exposed[static_cast<size_t>(WorkKind::kDpComm)],
            serial.stages[0].time.exposed[static_cast<size_t>(WorkKind::kDpComm)]);
  // ZeRO 3: prefetching the next layer's parameters hides gathers.
  l.zero_stage = ZeroStage::kStage3;
  l.param_gather_prefetch = false;
  const IterationResult on_demand = simulate_iteration(tiny(), l, topo);
  l.param_gather_prefetch = true;
  const IterationResult prefetched = simulate_iteration(tiny(), l, topo);
  EXPECT_LT(prefetched.iteration_time, on_demand.iteration_time);
  // TP: collectives beside the GEMMs instead of after them.
  ParallelLayout t = layout(1, 4, 1, 4);
  const IterationResult tp_serial = simulate_iteration(tiny(), t, topo);
  t.tp_comm_overlap = true;
  const IterationResult tp_overlapped = simulate_iteration(tiny(), t, topo);
  EXPECT_LT(tp_overlapped.iteration_time, tp_serial.iteration_time);
  expect_parts_add_up(tp_overlapped);
  expect_parts_add_up(prefetched);
}

TEST(IterationErrors, BadLayoutsAreRefused) {
  const Topology topo = toy_cluster(4);
  ParallelLayout l = layout(2, 1, 1, 4);  // 2 GPUs of 4
  try {
    simulate_iteration(tiny(), l, topo);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.pointer(), "/parallel");
  }
  // Ulysses hands each CP rank whole heads: 4 heads over cp=8 cannot be split.
  l = layout(1, 1, 1, 1);
  l.cp = 4;
  l.cp_comm = ContextParallelComm::kUlysses;
  EXPECT_NO_THROW(simulate_iteration(tiny(), l, topo));
  l.cp = 8;
  try {
    simulate_iteration(tiny(), l, toy_cluster(8));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.pointer(), "/parallel/cp");
    EXPECT_NE(e.reason().find("ring"), std::string::npos) << e.reason();
  }
  // Context parallelism passes K/V blocks to a blockwise kernel; the unfused core has none.
  l = layout(1, 1, 1, 1);
  l.cp = 4;
  l.attention = AttentionKernel::kUnfused;
  try {
    simulate_iteration(tiny(), l, topo);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.pointer(), "/parallel/attention");
  }
  // Expert parallelism on a dense model is a bad layout (training_ep_test covers MoE models).
  l = layout(4, 1, 1, 4);
  l.ep = 2;
  try {
    simulate_iteration(tiny(), l, topo);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.pointer(), "/parallel/ep");
  }
}

TEST(IterationTime, OverlappingCollectivesShareTheirLinks) {
  // TP collectives beside the GEMMs (tp_comm_overlap) and ZeRO-3's prefetched parameter
  // gathers run at the same time on the same NVLink ports of the toy node. Shared, each pair
  // that overlaps stretches (processor sharing conserves work, so the stretched spans sum to
  // more than the solo ones); the compute hides it here, so the iteration is no shorter.
  const Topology topo = toy_cluster(4);
  ParallelLayout l = layout(2, 2, 1, 4);
  l.zero_stage = ZeroStage::kStage3;
  l.tp_comm_overlap = true;
  IterationOptions shared_links, alone;
  shared_links.keep_timeline = alone.keep_timeline = true;
  alone.communication_contention = false;
  const IterationResult shared = simulate_iteration(tiny(), l, topo, shared_links);
  const IterationResult solo = simulate_iteration(tiny(), l, topo, alone);
  auto communication_spans = [](const IterationResult& r) {
    Time sum;
    for (const TimelineSpan& span : r.timeline) {
      if (span.kind != WorkKind::kCompute) sum += span.finish - span.start;
    }
    return sum;
  };
  EXPECT_GT(communication_spans(shared), communication_spans(solo));
  EXPECT_GE(shared.iteration_time, solo.iteration_time);
  expect_parts_add_up(shared);
  for (size_t k = 0; k < kWorkKinds; ++k) {  // the same bytes either way
    EXPECT_EQ(shared.stages[0].communication[k].sent, solo.stages[0].communication[k].sent);
  }
}

TEST(IterationTime, CollectivesBesideComputeTakeTheirSms) {
  // Llama-3-8B with ZeRO-3 on 2 DGX H100 nodes (dp 16): the prefetched parameter gathers and
  // the gradient reduce-scatters run beside the kernels and hold one of the H100's 132 SMs per
  // NCCL channel, so the compute stretches by the SM-time they take; the collectives
  // themselves are timed as before. Without the SM count, or with the switch off, nothing
  // stretches and the compute column is the kernels' solo time.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  const Topology topo = test::load_preset("dgx-h100", 2);
  ASSERT_EQ(topo.gpu_spec_of(topo.gpus()[0]).sms, 132);
  ParallelLayout l = layout(16, 1, 1, 32);
  l.sequence_length = 4096;
  l.zero_stage = ZeroStage::kStage3;
  IterationOptions off;
  off.sm_contention = false;
  const IterationResult with = simulate_iteration(model, l, topo);
  const IterationResult without = simulate_iteration(model, l, topo, off);
  const Time stretch = with.stages[0].compute_slowed_by_communication;
  EXPECT_GT(stretch, Time::zero());
  EXPECT_EQ(without.stages[0].compute_slowed_by_communication, Time::zero());
  // The stretch is all in the compute column (to rounding of the shared SM pool).
  EXPECT_NEAR(static_cast<double>((with.stages[0].time.compute - without.stages[0].time.compute).picoseconds()),
              static_cast<double>(stretch.picoseconds()), 1e3);
  EXPECT_GE(with.iteration_time, without.iteration_time);
  // Bounded by the SM-time the collectives could have taken: Σ their spans × channels / 132.
  EXPECT_LT(stretch.seconds(), with.iteration_time.seconds() * 32.0 / 132);
  for (size_t k = 0; k < kWorkKinds; ++k) {
    EXPECT_EQ(with.stages[0].communication[k].sent, without.stages[0].communication[k].sent);
  }
  expect_parts_add_up(with);
}

TEST(IterationBubble, ZeroBubbleSplitsTheBackwardAndShrinksTheBubble) {
  // ZB-H1 splits each backward into B and W (the GEMMs' weight gradients, timed as their
  // forward) without changing the work: the same compute and FLOPs per stage, a smaller bubble
  // than 1F1B (p = 4; m = 4, 8 and 64), and no more activations held than 1F1B's stage 0 (p
  // micro-batches).
  IterationOptions free;
  free.free_communication = true;
  free.transformer_layers_only = true;
  const Topology topo = toy_cluster(4);
  for (int64_t m : {4, 8, 64}) {
    SCOPED_TRACE(m);
    ParallelLayout l = layout(1, 1, 4, m);
    const IterationResult one_f_one_b = simulate_iteration(tiny(), l, topo, free);
    l.schedule = PipelineScheduleKind::kZeroBubbleH1;
    const IterationResult zero_bubble = simulate_iteration(tiny(), l, topo, free);
    EXPECT_LT(zero_bubble.pipeline_bubble_fraction, one_f_one_b.pipeline_bubble_fraction);
    EXPECT_LT(zero_bubble.iteration_time, one_f_one_b.iteration_time);
    for (int s = 0; s < 4; ++s) {
      const size_t i = static_cast<size_t>(s);
      EXPECT_EQ(zero_bubble.stages[i].time.compute, one_f_one_b.stages[i].time.compute);
      EXPECT_NEAR(zero_bubble.stages[i].hardware_flops.value(), one_f_one_b.stages[i].hardware_flops.value(),
                  1e-9 * one_f_one_b.stages[i].hardware_flops.value());
      EXPECT_LE(zero_bubble.stages[i].in_flight_micro_batches, 4.0);
    }
    expect_parts_add_up(zero_bubble);
    // ZB-H2 may hold up to 2p − 1 = 7 micro-batches for a bubble no larger than ZB-H1's.
    l.schedule = PipelineScheduleKind::kZeroBubbleH2;
    const IterationResult h2 = simulate_iteration(tiny(), l, topo, free);
    EXPECT_LE(h2.iteration_time, zero_bubble.iteration_time);
    EXPECT_LE(h2.stages[0].in_flight_micro_batches, 7.0);
    EXPECT_EQ(h2.stages[0].time.compute, one_f_one_b.stages[0].time.compute);
    if (m >= 8) {
      EXPECT_GT(h2.stages[0].in_flight_micro_batches, 4.0);
    }
    expect_parts_add_up(h2);
  }
}

TEST(IterationBubble, ZeroBubbleVRunsTheModelDownTheStagesAndBack) {
  // ZB-V on 4 stages of 2 one-layer chunks: the same work as 1F1B, placed in a V. Stage 0 holds
  // the first and the last virtual stage, so the output layer (and its loss) runs there and a
  // tied head needs no copy of the embedding on another stage; every stage sends twice what it
  // sends in 1F1B (each micro-batch crosses 2p − 2 stage boundaries each way instead of p − 1)
  // but nothing where the V turns round on stage 3; and no stage holds more than 1F1B's peak of
  // p micro-batches.
  const Topology topo = toy_cluster(4);
  ModelConfig model = tiny(8);
  model.tied_embeddings = true;
  ParallelLayout l = layout(1, 1, 4, 8);
  const IterationResult one_f_one_b = simulate_iteration(model, l, topo, test::kernels_only());
  l.schedule = PipelineScheduleKind::kZeroBubbleV;
  l.virtual_stages = 2;
  const IterationResult v = simulate_iteration(model, l, topo, test::kernels_only());
  expect_parts_add_up(v);
  double params_1f1b = 0, params_v = 0;
  Time forward_1f1b, forward_v;
  for (int s = 0; s < 4; ++s) {
    const size_t i = static_cast<size_t>(s);
    params_1f1b += one_f_one_b.stages[i].parameters;
    params_v += v.stages[i].parameters;
    forward_1f1b += one_f_one_b.stages[i].forward_compute;
    forward_v += v.stages[i].forward_compute;
    EXPECT_EQ(v.stages[i].layers, 2);
    EXPECT_LE(v.stages[i].in_flight_micro_batches, 4.0);
    const size_t pp = kind_index(WorkKind::kPpComm);
    EXPECT_EQ(v.stages[i].communication[pp].sent, one_f_one_b.stages[i].communication[pp].sent * 2.0) << s;
  }
  EXPECT_EQ(forward_v, forward_1f1b);
  EXPECT_DOUBLE_EQ(params_1f1b - params_v, static_cast<double>(count_parameters(model).embedding));
  // The output layer has moved from the last stage to the first.
  EXPECT_GT(v.stages[0].forward_compute, v.stages[1].forward_compute);
  EXPECT_EQ(v.stages[3].forward_compute, v.stages[1].forward_compute);
  EXPECT_GT(one_f_one_b.stages[3].forward_compute, one_f_one_b.stages[1].forward_compute);
  // Without communication, its bubble is below ZB-H1's at the same memory.
  IterationOptions free = test::kernels_only();
  free.free_communication = true;
  free.transformer_layers_only = true;
  const IterationResult v_free = simulate_iteration(model, l, topo, free);
  l.schedule = PipelineScheduleKind::kZeroBubbleH1;
  l.virtual_stages = 1;
  const IterationResult h1_free = simulate_iteration(model, l, topo, free);
  EXPECT_LT(v_free.pipeline_bubble_fraction, h1_free.pipeline_bubble_fraction);
  EXPECT_LT(v_free.iteration_time, h1_free.iteration_time);
}

// The timeline tags every task of a pass with it: on each stage's compute stream the passes
// follow one another in the schedule's order (1F1B, ZB-H1's F/B/W, ZB-V's and DualPipeV's chunks).
TEST(IterationTimeline, EachStagesComputeRunsItsPassesInTheSchedulesOrder) {
  const Topology topo = toy_cluster(4);
  IterationOptions options = test::kernels_only();
  options.keep_timeline = true;
  for (PipelineScheduleKind kind : {PipelineScheduleKind::kOneFOneB, PipelineScheduleKind::kZeroBubbleH1,
                                    PipelineScheduleKind::kZeroBubbleV, PipelineScheduleKind::kDualPipeV}) {
    SCOPED_TRACE(to_string(kind));
    ParallelLayout l = layout(1, 1, 4, 8);
    l.schedule = kind;
    l.virtual_stages = v_shaped(kind) ? 2 : 1;
    const IterationResult r = simulate_iteration(tiny(8), l, topo, options);
    // (The zero-bubble orders follow the simulated pass times: only their lengths compare.)
    const PipelineSchedule s = make_pipeline_schedule(kind, 4, 8, l.virtual_stages);
    for (int stage = 0; stage < 4; ++stage) {
      std::vector<PipelineOp> seen;
      for (const TimelineSpan& span : r.timeline) {
        if (span.rank != stage || span.stream != "compute" || !span.pass) continue;
        if (seen.empty() || !(seen.back() == *span.pass)) seen.push_back(*span.pass);
      }
      // Every pass once, as many as the schedule lists; for 1F1B and DualPipeV (fixed orders)
      // exactly its order.
      EXPECT_EQ(seen.size(), s.per_stage[static_cast<size_t>(stage)].size()) << stage;
      if (kind == PipelineScheduleKind::kOneFOneB || kind == PipelineScheduleKind::kDualPipeV) {
        EXPECT_EQ(seen, s.per_stage[static_cast<size_t>(stage)]) << stage;
      }
    }
  }
}

// DualPipeV's communication in the iteration as dualpipev.py ties it: a whole backward's input
// gradient leaves only when its W has run (one autograd call), and a pair starts no sooner than
// its backward's input has arrived. Read off the timeline of 4 stages × 8 micro-batches.
TEST(IterationTimeline, DualPipeVsSendsLeaveAsItsCodeSendsThem) {
  const Topology topo = toy_cluster(4);
  IterationOptions options = test::kernels_only();
  options.keep_timeline = true;
  ParallelLayout l = layout(1, 1, 4, 8);
  l.schedule = PipelineScheduleKind::kDualPipeV;
  l.virtual_stages = 2;
  const IterationResult r = simulate_iteration(tiny(8), l, topo, options);
  const PipelineSchedule d = make_pipeline_schedule(PipelineScheduleKind::kDualPipeV, 4, 8, 2);
  // Per stage and pass: its compute's start and end, and its PP send's start.
  std::map<std::pair<int, PipelineOp>, std::pair<Time, Time>> compute;
  std::map<std::pair<int, PipelineOp>, std::pair<Time, Time>> send;
  for (const TimelineSpan& span : r.timeline) {
    if (!span.pass) continue;
    const auto key = std::make_pair(span.rank, *span.pass);
    if (span.stream == "compute") {
      auto [it, added] = compute.try_emplace(key, span.start, span.finish);
      if (!added) it->second = {std::min(it->second.first, span.start), std::max(it->second.second, span.finish)};
    } else if (span.stream == "pp") {
      send.try_emplace(key, span.start, span.finish);
    }
  }
  int whole = 0, pairs = 0;
  for (int s = 0; s < 4; ++s) {
    const auto& ops = d.per_stage[static_cast<size_t>(s)];
    for (size_t i = 0; i < ops.size(); ++i) {
      const PipelineSchedule::PassLinks& link = d.links[static_cast<size_t>(s)][d.pass_slot(ops[i])];
      if (link.output_leaves_after && send.count({s, ops[i]})) {
        EXPECT_GE(send.at({s, ops[i]}).first, compute.at({s, *link.output_leaves_after}).second) << s << " " << to_string(ops[i]);
        whole += ops[i].kind == PassKind::kBackward ? 1 : 0;
      }
      if (link.overlaps_next) {
        const std::optional<StagedOp> dep = pipeline_dependency(d, s, ops[i + 1]);
        if (dep && dep->stage != s) {
          EXPECT_GE(compute.at({s, ops[i]}).first, send.at({dep->stage, dep->op}).second) << s << " " << to_string(ops[i]);
          ++pairs;
        }
      }
    }
  }
  EXPECT_GT(whole, 0);
  EXPECT_GT(pairs, 0);
}

// train --plot's data: a line per stage whose nine time columns add up to the iteration time and
// whose memory columns are the stage's breakdown; the script's title keeps a name's quotes and
// backslashes from ending gnuplot's string.
TEST(IterationPlot, EachStagesColumnsAddUpAndTheTitleIsEscaped) {
  const Topology topo = toy_cluster(4);
  const IterationResult r = simulate_iteration(tiny(8), layout(1, 1, 4, 8), topo, test::kernels_only());
  std::istringstream data(iteration_breakdown_data(r));
  std::string line;
  std::getline(data, line);  // the header
  int stages = 0;
  while (std::getline(data, line)) {
    std::istringstream row(line);
    int stage = -1;
    row >> stage;
    double sum = 0, v = 0;
    for (int c = 0; c < 9; ++c) {
      row >> v;
      sum += v;
    }
    EXPECT_NEAR(sum, r.iteration_time.seconds(), 1e-5) << line;
    double gib = 0;
    for (int c = 0; c < 5; ++c) {
      row >> v;
      gib += v;
    }
    EXPECT_NEAR(gib, r.stages[static_cast<size_t>(stage)].memory.total().value() / (1024.0 * 1024 * 1024), 1e-3);
    ++stages;
  }
  EXPECT_EQ(stages, 4);
  const std::string script = iteration_breakdown_script(r, "d.dat", "p.png", {"a \"quoted\" name\\", "layout"});
  EXPECT_NE(script.find("title \"a \\\"quoted\\\" name\\\\\\nlayout\""), std::string::npos) << script;
}

// pipeline.png's boxes: with the kernels alone, each 1F1B pass runs back to back, so each stage
// has one box per pass, in the schedule's order, coloured by its kind and labelled by its
// micro-batch; then the optimizer step, grey. No box starts before the one before it ends.
TEST(IterationPlot, PipelineBoxesFollowEachStagesSchedule) {
  const Topology topo = toy_cluster(4);
  IterationOptions options = test::kernels_only();
  options.keep_timeline = true;
  const IterationResult r = simulate_iteration(tiny(8), layout(1, 1, 4, 8), topo, options);
  const PipelineSchedule s = make_pipeline_schedule(PipelineScheduleKind::kOneFOneB, 4, 8);
  std::istringstream data(pipeline_timeline_data(r, 1, 0.0));
  std::string line;
  std::getline(data, line);  // the header
  std::vector<std::vector<std::string>> seen(4);
  std::vector<double> end(4, 0.0);
  while (std::getline(data, line)) {
    std::istringstream row(line);
    double start = 0, width = 0;
    int stage = -1, colour = 0;
    std::string label;
    row >> start >> stage >> width >> colour >> label;
    ASSERT_GE(stage, 0);
    EXPECT_GE(start, end[static_cast<size_t>(stage)] - 1e-9) << line;
    end[static_cast<size_t>(stage)] = start + width;
    EXPECT_LE(start + width, r.iteration_time.seconds() + 1e-9);
    const std::string kind = colour == 0x4C72B0 ? "F" : colour == 0xDD8452 ? "B" : colour == 0x55A868 ? "W" : "-";
    seen[static_cast<size_t>(stage)].push_back(kind + label.substr(1, label.size() - 2));
  }
  for (int stage = 0; stage < 4; ++stage) {
    std::vector<std::string> expected;
    for (const PipelineOp& op : s.per_stage[static_cast<size_t>(stage)]) expected.push_back(to_string(op, false));
    expected.emplace_back("-");  // the optimizer step
    EXPECT_EQ(seen[static_cast<size_t>(stage)], expected) << stage;
  }
  // A label goes where it fits: at a character a fifth of the iteration, none does.
  EXPECT_EQ(pipeline_timeline_data(r, 1, 0.2).find("\"1\""), std::string::npos);
  const std::string script = pipeline_timeline_script(r, "d.dat", "p.png", {"it's"});
  EXPECT_NE(script.find("with boxxyerror lc rgb variable"), std::string::npos) << script;
  EXPECT_NE(script.find("set yrange [3.5:-0.5]"), std::string::npos) << script;
}

TEST(IterationTime, IsDeterministic) {
  const Topology topo = toy_cluster(4);
  ParallelLayout l = layout(2, 1, 2, 8);
  l.zero_stage = ZeroStage::kStage3;
  const IterationResult a = simulate_iteration(tiny(), l, topo);
  const IterationResult b = simulate_iteration(tiny(), l, topo);
  EXPECT_EQ(a.iteration_time, b.iteration_time);
  EXPECT_EQ(a.stages[1].time.bubble, b.stages[1].time.bubble);
}

}  // namespace
}  // namespace parallax

namespace parallax {
namespace {

TEST(IterationTime, SiblingDataParallelRingsShareAnOversubscribedLeaf) {
  // Llama-3 8B on 8 AWS p5 nodes, TP 8 in a node, DP 8: the DP group of TP rank r is GPU r of
  // every node, and the 8 groups all-reduce their gradients at once (not overlapped with the
  // backward here, so the all-reduce is exposed whole). The p5 fabric is not rail-optimized:
  // all 8 NICs of a node sit on its leaf (2 nodes per leaf). Each ring crosses a leaf boundary
  // once per leaf, so a leaf sends one 50 GB/s pair of each of the 8 rings up
  // (sibling_contention_test): 400 GB/s, within 1:1's 800 GB/s of uplinks, twice 4:1's 200.
  // At 4:1 each bucket's all-reduce runs as one of twice the bytes: its bandwidth term
  // doubles, its latency terms do not. On EFA those are large; without the 75 µs a step that
  // aws-ofi-nccl reports (kept out here, so that bandwidth dominates) a hop is ~13 µs, 2·7 ring
  // steps per bucket, about a tenth of a bucket's time, so the ratio is below 2 but well above
  // 1.8. At 1:1, or timed alone (replica_contention off), the siblings change nothing.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  ParallelLayout l = layout(8, 8, 1, 8);
  l.sequence_length = 2048;
  l.grad_reduce_overlap = false;
  IterationOptions alone;
  alone.replica_contention = false;
  auto exposed_dp = [](const IterationResult& r) {
    return r.stages[0].time.exposed[static_cast<size_t>(WorkKind::kDpComm)].seconds();
  };
  const Topology blocking = test::load_preset_oversubscribed("aws-p5", 8, "4:1", true),
                 non_blocking = test::load_preset_oversubscribed("aws-p5", 8, "1:1", true);
  const IterationResult slowed = simulate_iteration(model, l, blocking);
  // The slowdown itself, reported per kind: 400 / 200 over the NICs' 1 (sibling_contention_test).
  EXPECT_NEAR(slowed.stages[0].communication[static_cast<size_t>(WorkKind::kDpComm)].replica_slowdown, 2.0, 1e-12);
  EXPECT_EQ(slowed.stages[0].communication[static_cast<size_t>(WorkKind::kTpComm)].replica_slowdown, 1.0);
  const double shared = exposed_dp(slowed);
  const double by_itself = exposed_dp(simulate_iteration(model, l, blocking, alone));
  ASSERT_GT(by_itself, 0.01);
  EXPECT_GT(shared / by_itself, 1.8);
  EXPECT_LE(shared / by_itself, 2.0);
  EXPECT_DOUBLE_EQ(exposed_dp(simulate_iteration(model, l, non_blocking)),
                   exposed_dp(simulate_iteration(model, l, non_blocking, alone)));
}

}  // namespace

TEST(MuonOptimizer, NewtonSchulzStepsOnEachMatrixARankOwns) {
  // tiny (h 256, 4 heads of 64, SwiGLU f 1024): QKV 768 × 256, output 256 × 256, fc1 2048 × 256,
  // fc2 256 × 1024. Each of 5 steps on an m × n matrix (m ≤ n) runs X·Xᵀ, A·A and B·X: 4m²n +
  // 2m³ FLOPs; over dp 4 a rank owns a quarter of them under the layer-wise distributed
  // optimizer (ZeRO-1), and updates all of them without it (ZeRO-0).
  const ModelConfig model = tiny();
  ParallelLayout l = layout(4, 1, 1, 4);
  EXPECT_TRUE(muon_orthogonalisation_gemms(model, 0, l).empty());  // Adam
  l.optimizer = OptimizerKind::kMuon;
  auto flops_of = [](const ModelConfig& m, const ParallelLayout& x) {
    double flops = 0;
    for (const GemmShape& g : muon_orthogonalisation_gemms(m, 0, x)) flops += 2.0 * g.volume();
    return flops;
  };
  auto ns = [](double m, double n) { return 5.0 * (4.0 * m * m * n + 2.0 * m * m * m); };
  const double dense = ns(256, 768) + ns(256, 256) + ns(256, 2048) + ns(256, 1024);
  EXPECT_DOUBLE_EQ(flops_of(model, l), dense);
  l.zero_stage = ZeroStage::kStage1;
  EXPECT_DOUBLE_EQ(flops_of(model, l), dense / 4);
  // Routed experts: an EP rank's own, shared over the expert-data-parallel ranks (dp·cp / ep).
  ModelConfig moe = tiny();
  moe.moe = MoeConfig{8, 2, 0, 512, 0, 0, 1, {}};
  l.ep = 2;
  const double attention = ns(256, 768) + ns(256, 256), router = ns(8, 256);
  const double experts = 8 * (ns(256, 1024) + ns(256, 512));
  EXPECT_DOUBLE_EQ(flops_of(moe, l), (attention + router) / 4 + experts / (2 * 2));
  l.zero_stage = ZeroStage::kStage0;  // each rank its EP rank's 4 experts, every dense matrix
  EXPECT_DOUBLE_EQ(flops_of(moe, l), attention + router + experts / 2);
}

TEST(MuonOptimizer, OneMomentumOnTheMatricesAdamOnTheEnds) {
  // ZeRO-1 over 4 ranks: Adam holds 12 B of state a parameter, Muon 8 (fp32 master and
  // momentum) on the layers' parameters and Adam's 12 on the embedding and head (untied: 2·V·h,
  // and the final norm). (The orthogonalisation's FLOPs: NewtonSchulzStepsOnEachMatrixARankOwns.)
  const ModelConfig model = tiny();
  const ParameterCounts counts = count_parameters(model);
  const double psi = static_cast<double>(counts.total);
  const double ends = static_cast<double>(counts.embedding + counts.output_head + counts.final_norm);
  const Topology topo = toy_cluster(4);
  ParallelLayout adam = layout(4, 1, 1, 4);
  adam.zero_stage = ZeroStage::kStage1;
  ParallelLayout muon = adam;
  muon.optimizer = OptimizerKind::kMuon;
  const IterationResult a = simulate_iteration(model, adam, topo);
  const IterationResult m = simulate_iteration(model, muon, topo);
  EXPECT_DOUBLE_EQ(a.stages[0].memory.optimizer_states.value(), 12 * psi / 4);
  EXPECT_NEAR(m.stages[0].memory.optimizer_states.value(), (8 * (psi - ends) + 12 * ends) / 4, 1e-6 * psi);
  expect_parts_add_up(m);
  // The layer-wise optimizer all-reduces the (bf16) gradients where ZeRO-1 reduce-scatters them:
  // a rank sends 2 B · Ψ · 3/4 more; both all-gather the updated parameters.
  EXPECT_NEAR(m.stages[0].communication[test::kDp].sent.value() - a.stages[0].communication[test::kDp].sent.value(),
              2 * psi * 3 / 4, 1e-6 * psi);
  // Megatron's Muon runs beside the layer-wise optimizer: a sharded gradient is refused.
  muon.zero_stage = ZeroStage::kStage2;
  try {
    simulate_iteration(model, muon, topo);
    ADD_FAILURE() << "muon with zero_stage 2 was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.pointer(), "/parallel/optimizer");
  }
}

}  // namespace parallax
