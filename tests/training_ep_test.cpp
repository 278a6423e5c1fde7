// Expert parallelism in the simulated iteration: the dispatch/combine all-to-all volumes of
// Megatron's token dispatcher, ep = 1 adding nothing to the pre-EP model, expert-data-parallel
// gradient reduction, router skew (explicit loads, Zipf) and the capacity factor's drops, and a
// Mixtral-8x7B layout with ep 8 end to end.
#include <gtest/gtest.h>

#include <map>

#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>

#include "collectives/collective_simulator.h"
#include "compute/compute_model.h"
#include "io/input_error.h"
#include "training/explain.h"
#include "training/iteration.h"
#include "training/iteration_comm.h"
#include "training/iteration_units.h"
#include "training/workload_loader.h"
#include "training/workload_writer.h"
#include "model/layer_operators.h"
#include "model/model_loader.h"
#include "model/parameter_count.h"
#include "test_support.h"
#include "training_test_support.h"

namespace parallax {
namespace {

using test::expect_parts_add_up;
using test::toy_cluster;
using test::kDp;
using test::kCp;
using test::kEp;
using test::kTp;


// The tiny Llama-style model of the iteration tests (8 layers, hidden 256, 4 heads of 64,
// vocab 1024) with every MLP a MoE of 4 routed experts, top-2, expert FFN 512.
ModelConfig tiny_moe() {
  ModelConfig m = test::tiny(8);
  m.name = "tiny-moe";
  m.moe = MoeConfig{4, 2, 0, 512, 0, 0, 1, {}};
  return m;
}

// dp ranks, one micro-batch of one 512-token sequence per rank, bf16.
ParallelLayout moe_layout(int dp, int ep) {
  ParallelLayout l;
  l.dp = dp;
  l.ep = ep;
  l.micro_batch = 1;
  l.global_batch = dp;
  l.sequence_length = 512;
  return l;
}


TEST(CudaGraphScopes, MoeRouterAndPreprocessLeaveTheExpertsToTheHost) {
  // Megatron-Bridge's DeepSeek-V3 recipes on GB200: cuda_graph_scope moe_router, moe_preprocess.
  // Graphed: the MLP's norm, the router, its top-k and load-balancing loss, the permutation. Not: the attention block,
  // the experts, the unpermutation and the residual add.
  ParallelLayout l = moe_layout(1, 1);
  l.cuda_graphs = CudaGraphs::kScoped;
  l.cuda_graph_scope = {.moe_router = true, .moe_preprocess = true};
  std::vector<std::string> graphed, eager;
  for (const ModelOperator& op : iteration_detail::timed_layer_operators(tiny_moe(), l, 0, false, 1.0)) {
    EXPECT_EQ(op.forward.graph_replayed, op.backward.graph_replayed) << op.name;
    (op.forward.graph_replayed ? graphed : eager).push_back(op.name);
  }
  EXPECT_EQ(graphed,
            (std::vector<std::string>{"mlp_norm", "router", "router_topk", "router_load_balancing_loss", "moe_permute"}));
  for (const char* name : {"attention_norm", "attention_out_proj", "expert_down_proj", "moe_unpermute", "mlp_residual"}) {
    EXPECT_NE(std::find(eager.begin(), eager.end(), name), eager.end()) << name;
  }
}

TEST(CudaGraphScopes, SharedExpertsReplayWithTheRouterAndALatentDownProjectionWithThePermutation) {
  // Megatron-Core's MoELayer computes the shared experts before routing, inside the moe_router
  // graph (their output one of its outputs), unless they overlap the dispatch; a latent MoE
  // projects its tokens down in the preprocessing, inside the moe_preprocess graph.
  ModelConfig m = tiny_moe();
  m.moe->shared_experts = 1;
  m.moe->shared_expert_ffn = 512;
  m.moe->latent = 128;
  ParallelLayout l = moe_layout(1, 1);
  l.cuda_graphs = CudaGraphs::kScoped;
  const auto graphed = [&](const std::string& prefix) {
    std::vector<bool> flags;
    for (const ModelOperator& op : iteration_detail::timed_layer_operators(m, l, 0, false, 1.0)) {
      if (op.name.rfind(prefix, 0) == 0) flags.push_back(op.forward.graph_replayed && op.backward.graph_replayed);
    }
    EXPECT_FALSE(flags.empty()) << prefix;
    return !flags.empty() && std::all_of(flags.begin(), flags.end(), [](bool f) { return f; });
  };
  l.cuda_graph_scope = {.moe_router = true};
  EXPECT_TRUE(graphed("shared_expert_"));
  EXPECT_FALSE(graphed("moe_latent_down_proj"));
  l.moe_shared_expert_overlap = true;
  EXPECT_FALSE(graphed("shared_expert_"));
  l.cuda_graph_scope = {.moe_preprocess = true};
  EXPECT_TRUE(graphed("moe_latent_down_proj"));
  EXPECT_FALSE(graphed("moe_latent_up_proj"));
}

TEST(CudaGraphScopes, AHybridModelsMtpDepthRunsEagerUnderScopedGraphs) {
  // Transformer Engine's per-layer capture graphs an MTP depth whose inner layer is a
  // TransformerLayer, not one whose inner layer is a hybrid stack (Nemotron 3's "*E":
  // cuda_graphs.py _layer_is_graphable); a full-iteration graph holds it all the same.
  ModelConfig hybrid = test::bundled("nemotron-3-nano");
  hybrid.mtp_layers = 1;
  ParallelLayout l = moe_layout(1, 1);
  l.cuda_graphs = CudaGraphs::kScoped;
  l.cuda_graph_scope = {.attn = true, .moe_router = true, .moe_preprocess = true, .mamba = true};
  const auto any_graphed = [&](const ModelConfig& model, int layer) {
    const auto ops = iteration_detail::timed_layer_operators(model, l, layer, false, 1.0);
    return std::any_of(ops.begin(), ops.end(), [](const ModelOperator& op) { return op.forward.graph_replayed; });
  };
  EXPECT_TRUE(any_graphed(hybrid, 1));  // pattern "MEMEM*E…": layer 1 is a MoE layer, its router graphed
  EXPECT_FALSE(any_graphed(hybrid, hybrid.layers));
  ModelConfig plain = tiny_moe();
  plain.mtp_layers = 1;
  EXPECT_TRUE(any_graphed(plain, plain.layers));
  l.cuda_graphs = CudaGraphs::kFullIteration;
  EXPECT_TRUE(any_graphed(hybrid, hybrid.layers));
}

TEST(IterationExpertParallel, DispatchSendsTokensTimesTopKTimesHidden) {
  // Uniform routing, tp = 1, no SP: each GPU dispatches T = b·s = 512 tokens × top_k = 2
  // slots of h = 256 bf16 elements; an all-to-all keeps 1/ep of it, so per direction
  //   D = 512·2·256·2·(ep−1)/ep bytes.
  // 8 MoE layers, m = 1 micro-batch, 4 all-to-alls each (dispatch + combine, forward and
  // backward): EP bytes = 32·D, 32 collectives.
  const ModelConfig model = tiny_moe();
  const Topology topo = toy_cluster(4);
  for (int ep : {2, 4}) {
    SCOPED_TRACE(ep);
    const double per_direction = 512.0 * 2 * 256 * 2 * (ep - 1) / ep;
    const IterationResult r = simulate_iteration(model, moe_layout(4, ep), topo);
    const CommunicationVolume& volume = r.stages[0].communication[kEp];
    EXPECT_EQ(volume.collectives, 32);
    EXPECT_NEAR(volume.sent.value(), 32 * per_direction, 1e-9 * per_direction);
    EXPECT_GT(r.stages[0].time.exposed[kEp], Time::zero());
    EXPECT_EQ(r.moe_dropped_token_slots, 0.0);
    expect_parts_add_up(r);
  }
  // Full recomputation re-runs the forward's dispatcher in the backward: 6 per layer.
  ParallelLayout full = moe_layout(4, 2);
  full.recompute = Recomputation::kFull;
  EXPECT_EQ(simulate_iteration(model, full, topo).stages[0].communication[kEp].collectives, 48);
  // So does Megatron's "moe" module recomputation (the MoE block alone), with TP (2, SP) the
  // block's own all-gather and reduce-scatter again too: one more pair per layer.
  ParallelLayout moe_module = moe_layout(4, 2);
  moe_module.recompute_modules.moe = true;
  EXPECT_EQ(simulate_iteration(model, moe_module, topo).stages[0].communication[kEp].collectives, 48);
  ParallelLayout with_tp = moe_layout(2, 2);
  with_tp.tp = 2;
  with_tp.sequence_parallel = true;
  const int plain_tp = simulate_iteration(model, with_tp, topo).stages[0].communication[kTp].collectives;
  with_tp.recompute_modules.moe = true;
  EXPECT_EQ(simulate_iteration(model, with_tp, topo).stages[0].communication[kTp].collectives, plain_tp + 8 * 2);
}

// Megatron's "moe" recompute module keeps only the MoE block's input and runs every operator of
// the block again in the backward; "layernorm" re-runs the norm before the MoE block, while the
// pre-attention norm, fused into the QKV projection by Transformer Engine's layer spec (an
// IdentityOp in transformer_layer.py), is not a module it can reach.
TEST(RecomputeModules, TheMoeBlockKeepsOnlyItsInputAndItsNormRunsAgain) {
  const ModelConfig model = tiny_moe();
  MicroBatch batch;
  batch.sequence_length = 512;
  batch.recompute.moe = true;
  batch.recompute.layernorm = true;
  const std::vector<ModelOperator> ops = layer_operators(model, 0, batch, ShardingFactors{});
  Bytes moe_kept;
  bool in_moe = false;
  for (const ModelOperator& op : ops) {
    in_moe = in_moe || op.name == "router";
    if (op.name == "mlp_residual") in_moe = false;
    if (in_moe) {
      EXPECT_TRUE(op.recomputed) << op.name;
      moe_kept += op.saved;
    }
    if (op.name == "attention_norm") {
      EXPECT_FALSE(op.recomputed);
    }
    if (op.name == "mlp_norm") {
      EXPECT_TRUE(op.recomputed);
    }
    if (op.name == "qkv_proj") {
      EXPECT_FALSE(op.recomputed);
    }
  }
  EXPECT_DOUBLE_EQ(moe_kept.value(), 512.0 * 256 * 2);  // T·h in 16 bits
  // "core_attn" is the layout's selective recomputation of the attention core, unless the
  // layout recomputes whole layers.
  RecomputeModules core;
  core.core_attn = true;
  ParallelLayout l;
  l.adopt_recompute_modules(core);
  EXPECT_EQ(l.recompute, Recomputation::kSelective);
  l.recompute = Recomputation::kFull;
  l.adopt_recompute_modules(core);
  EXPECT_EQ(l.recompute, Recomputation::kFull);
  EXPECT_EQ(to_string(*add_recompute_module(core, "moe")), "moe+core_attn");
}

// The busiest expert's pace re-shapes the experts' GEMMs: each keeps its own type, the run's or
// a per-module recipe's.
TEST(RecomputeModules, ScaledExpertsKeepTheirModulesType) {
  MicroBatch batch;
  batch.sequence_length = 512;
  batch.dtype = DType::kFp8;
  batch.module_precision.set(QuantModule::kExperts, DType::kBf16);
  const std::vector<ModelOperator> ops =
      scale_experts(layer_operators(tiny_moe(), 0, batch, ShardingFactors{}), 1.5);
  for (const ModelOperator& op : ops) {
    if (op.name == "expert_gate_up_proj") {
      EXPECT_EQ(op.forward.dtype, DType::kBf16);
    }
    if (op.name == "qkv_proj") {
      EXPECT_EQ(op.forward.dtype, DType::kFp8);
    }
  }
}

// Megatron's --moe-shared-expert-overlap: the shared experts run on their own stream beside the
// dispatch and combine, so each MoE pass hides min(shared experts, all-to-all) and keeps its
// compute. With contention off (no shared links or SMs) the iteration is shorter by exactly that
// sum; the shared experts' span is the sum of their operators' times.
TEST(IterationExpertParallel, OverlappedSharedExpertsHideBehindTheDispatch) {
  ModelConfig model = tiny_moe();
  model.moe->shared_experts = 1;
  model.moe->shared_expert_ffn = 512;
  const Topology topo = toy_cluster(4);
  IterationOptions options = test::kernels_only();
  options.keep_timeline = true;
  options.sm_contention = false;
  options.communication_contention = false;
  ParallelLayout layout = moe_layout(4, 4);
  const IterationResult after = simulate_iteration(model, layout, topo, options);
  layout.moe_shared_expert_overlap = true;
  const IterationResult beside = simulate_iteration(model, layout, topo, options);

  const ComputeModel cm(topo.gpu_spec_of(topo.gpus()[0]), options.compute);
  ShardingFactors sharding;
  sharding.ep = 4;
  Time shared_forward;
  for (const ModelOperator& op : layer_operators(model, 0, MicroBatch{1, 512}, sharding)) {
    if (op.shared_expert) shared_forward += cm.time(op.forward);
  }
  ASSERT_GT(shared_forward, Time::zero());

  Time hidden, compute_after, compute_beside;
  int passes = 0;
  for (const TimelineSpan& span : after.timeline) {
    if (span.kind == WorkKind::kCompute) compute_after += span.finish - span.start;
  }
  for (const TimelineSpan& span : beside.timeline) {
    if (span.kind == WorkKind::kCompute) compute_beside += span.finish - span.start;
    if (span.stream != "shared_expert") continue;
    if (passes == 0) {
      EXPECT_EQ(span.finish - span.start, shared_forward);  // the first layer's forward
    }
    ++passes;
    for (const TimelineSpan& a2a : beside.timeline) {
      if (a2a.kind == WorkKind::kEpComm && a2a.start == span.start) hidden += std::min(a2a.finish - a2a.start, span.finish - span.start);
    }
  }
  EXPECT_EQ(passes, 16);  // 8 MoE layers, forward and backward, one micro-batch
  EXPECT_EQ(compute_beside, compute_after);
  EXPECT_GT(hidden, Time::zero());
  EXPECT_EQ(after.iteration_time - beside.iteration_time, hidden);
  // Without EP there is no dispatch to hide behind: the switch changes nothing.
  ParallelLayout no_ep = moe_layout(4, 1);
  const Time plain = simulate_iteration(model, no_ep, topo, options).iteration_time;
  no_ep.moe_shared_expert_overlap = true;
  EXPECT_EQ(simulate_iteration(model, no_ep, topo, options).iteration_time, plain);
}

// --explain offers the overlap only where it can act: a model with shared experts, ep > 1.
TEST(IterationExpertParallel, ExplainOffersSharedExpertOverlapOnlyToModelsWithSharedExperts) {
  const Topology topo = toy_cluster(4);
  const ParallelLayout layout = moe_layout(4, 4);
  auto knob = [&](const ModelConfig& model) -> std::optional<Suggestion> {
    const IterationResult base = simulate_iteration(model, layout, topo);
    for (const Suggestion& s : explain_layout(model, layout, topo, IterationOptions{}, base)) {
      if (s.knob == "shared experts overlapped") return s;
    }
    return std::nullopt;
  };
  EXPECT_FALSE(knob(tiny_moe()));
  ModelConfig shared = tiny_moe();
  shared.moe->shared_experts = 1;
  shared.moe->shared_expert_ffn = 512;
  const std::optional<Suggestion> s = knob(shared);
  ASSERT_TRUE(s);
  EXPECT_LT(s->delta, Time::zero());
  EXPECT_TRUE(s->layout.moe_shared_expert_overlap);
  EXPECT_EQ(s->overrides.moe_shared_expert_overlap, std::optional<bool>(true));
}

TEST(IterationExpertParallel, ExplainOffersGroupedExpertGemmsOnlyToMoeLayersIssuedPerExpert) {
  // One GPU, 4 local experts issued per expert by a host far slower than the toy GPU's GEMMs:
  // --expert-gemm grouped is offered and saves time; a grouped layout or a dense model is not
  // offered it.
  const Topology topo = toy_cluster(1);
  IterationOptions slow_host;
  slow_host.compute.host_gemm_issue = Time::from_seconds(1);
  auto knob = [&](const ModelConfig& model, const ParallelLayout& layout) -> std::optional<Suggestion> {
    const IterationResult base = simulate_iteration(model, layout, topo, slow_host);
    for (const Suggestion& s : explain_layout(model, layout, topo, slow_host, base)) {
      if (s.flags == "--expert-gemm grouped") return s;
    }
    return std::nullopt;
  };
  const std::optional<Suggestion> s = knob(tiny_moe(), moe_layout(1, 1));
  ASSERT_TRUE(s);
  EXPECT_LT(s->delta, Time::zero());
  EXPECT_EQ(s->layout.expert_gemms, ExpertGemms::kGrouped);
  EXPECT_EQ(s->overrides.expert_gemm, "grouped");
  ParallelLayout grouped = moe_layout(1, 1);
  grouped.expert_gemms = ExpertGemms::kGrouped;
  EXPECT_FALSE(knob(tiny_moe(), grouped));
  EXPECT_FALSE(knob(test::tiny(8), moe_layout(1, 1)));
}

// An unfused router (Megatron's default) is offered Transformer Engine's fused kernels: fewer
// passes over the scores and fewer kernels, so the iteration is shorter. Fused, or a dense model,
// it is not offered.
TEST(IterationExpertParallel, ExplainOffersTheFusedRouterToUnfusedMoeLayers) {
  const Topology topo = toy_cluster(2);
  auto knob = [&](const ModelConfig& model, const ParallelLayout& layout) -> std::optional<Suggestion> {
    const IterationResult base = simulate_iteration(model, layout, topo);
    for (const Suggestion& s : explain_layout(model, layout, topo, IterationOptions{}, base)) {
      if (s.flags == "--moe-router-fusion on") return s;
    }
    return std::nullopt;
  };
  const std::optional<Suggestion> s = knob(tiny_moe(), moe_layout(2, 2));
  ASSERT_TRUE(s);
  EXPECT_LT(s->delta, Time::zero());
  EXPECT_TRUE(s->layout.moe_router_fusion);
  EXPECT_EQ(s->overrides.moe_router_fusion, std::optional<bool>(true));
  ParallelLayout fused = moe_layout(2, 2);
  fused.moe_router_fusion = true;
  EXPECT_FALSE(knob(tiny_moe(), fused));
  EXPECT_FALSE(knob(test::tiny(8), moe_layout(2, 1)));
}

// A layout that recomputes its MoE blocks (Megatron's "moe" module) is offered the same module
// list without it, as flags that say the rest; it saves the blocks' second forward.
TEST(IterationExpertParallel, ExplainOffersToKeepRecomputedMoeBlocks) {
  const Topology topo = toy_cluster(2);
  ParallelLayout l = moe_layout(2, 2);
  l.recompute_modules.moe = true;
  l.recompute_modules.layernorm = true;
  const IterationResult base = simulate_iteration(tiny_moe(), l, topo);
  std::optional<Suggestion> kept;
  for (const Suggestion& s : explain_layout(tiny_moe(), l, topo, IterationOptions{}, base)) {
    if (s.knob == "MoE blocks kept instead of recomputed") kept = s;
  }
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->flags, "--recompute-modules \"layernorm\"");
  EXPECT_EQ(kept->overrides.recompute_modules, "layernorm");
  EXPECT_FALSE(kept->layout.recompute_modules.moe);
  EXPECT_TRUE(kept->layout.recompute_modules.layernorm);
  EXPECT_LT(kept->delta, Time::zero());
}

TEST(IterationExpertParallel, OverlappedAllToAllsHideBehindTheOtherMicroBatchsKernels) {
  // Megatron's combined 1F1B on one stage (dp 4, ep 4, 4 micro-batches): F0 alone, then B0+F1,
  // B1+F2, B2+F3 as one, then B3 alone. In the pairs each pass's dispatch and combine run beside
  // the other pass's kernels, so the iteration is shorter and less EP time is exposed; it can be
  // no shorter than the compute alone nor than the all-to-alls alone. With one micro-batch
  // there is no pair: nothing changes. The same dispatches and combines are sent either way.
  const ModelConfig model = tiny_moe();
  const Topology topo = toy_cluster(4);
  ParallelLayout blocking = moe_layout(4, 4);
  blocking.global_batch = 16;
  ParallelLayout overlapped = blocking;
  overlapped.moe_a2a_overlap = true;
  const IterationResult b = simulate_iteration(model, blocking, topo);
  const IterationResult o = simulate_iteration(model, overlapped, topo);
  const auto& tb = b.stages[0].time;
  const auto& to = o.stages[0].time;
  EXPECT_LT(o.iteration_time, b.iteration_time);
  EXPECT_LT(to.exposed[kEp], tb.exposed[kEp]);
  EXPECT_GE(o.iteration_time, to.compute);
  EXPECT_EQ(to.compute, tb.compute);
  EXPECT_EQ(o.stages[0].communication[kEp].collectives, b.stages[0].communication[kEp].collectives);
  EXPECT_EQ(o.stages[0].communication[kEp].sent.value(), b.stages[0].communication[kEp].sent.value());
  // Of the blocking iteration's exposed EP time, at most the share of the 3 paired of 4
  // micro-batches' can hide.
  EXPECT_GE(to.exposed[kEp] * 4, tb.exposed[kEp]);
  ParallelLayout one = moe_layout(4, 4);
  one.moe_a2a_overlap = true;
  EXPECT_EQ(simulate_iteration(model, one, topo).iteration_time, simulate_iteration(model, moe_layout(4, 4), topo).iteration_time);
  EXPECT_NE(layout_description(overlapped).find("ep 4 (all-to-alls overlapped)"), std::string::npos);
}

TEST(IterationExpertParallel, OverlappedAllToAllsFollowMegatronsRules) {
  // Megatron-Core refuses --overlap-moe-expert-parallel-comm without EP, with full
  // recomputation, and with pp > 1 unless the schedule is interleaved.
  const ModelConfig model = tiny_moe();
  auto refused = [&](ParallelLayout l, int gpus, const std::string& reason) {
    l.moe_a2a_overlap = true;
    try {
      simulate_iteration(model, l, toy_cluster(gpus));
      ADD_FAILURE() << reason << " was accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.pointer(), "/parallel/moe_a2a_overlap");
      EXPECT_NE(e.reason().find(reason), std::string::npos) << e.reason();
    }
  };
  refused(moe_layout(4, 1), 4, "needs expert parallelism");
  ParallelLayout full = moe_layout(4, 4);
  full.recompute = Recomputation::kFull;
  refused(full, 4, "full recomputation");
  ParallelLayout pp2 = moe_layout(2, 2);
  pp2.pp = 2;
  pp2.global_batch = 8;
  refused(pp2, 4, "needs interleaved_1f1b");
  pp2.schedule = PipelineScheduleKind::kInterleavedOneFOneB;
  pp2.virtual_stages = 2;
  pp2.moe_a2a_overlap = true;
  EXPECT_NO_THROW(simulate_iteration(model, pp2, toy_cluster(4)));
}

TEST(IterationExpertParallel, DualPipeVsPairsHideTheAllToAlls) {
  // DualPipeV on 2 stages × (dp 2, ep 2), 8 micro-batches: its overlapped pairs (F0&B1, F1&B0)
  // run as Megatron's combined 1F1B runs its pairs, each pass's dispatch and combine beside the
  // other's kernels (DeepSeek-V3 §3.2.1). The same kernels and all-to-alls run either way; the
  // iteration is shorter and less EP time is exposed. Without the overlap the pairs still wait
  // for both inputs, then run one pass after the other, as dualpipev.py does without an
  // overlapped_forward_backward.
  const ModelConfig model = tiny_moe();
  const Topology topo = toy_cluster(4);
  ParallelLayout plain = moe_layout(2, 2);
  plain.pp = 2;
  plain.global_batch = 16;
  plain.schedule = PipelineScheduleKind::kDualPipeV;
  plain.virtual_stages = 2;
  ParallelLayout overlapped = plain;
  overlapped.moe_a2a_overlap = true;
  const IterationResult b = simulate_iteration(model, plain, topo);
  const IterationResult o = simulate_iteration(model, overlapped, topo);
  EXPECT_LT(o.iteration_time, b.iteration_time);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(o.stages[s].time.compute, b.stages[s].time.compute) << s;
    EXPECT_LT(o.stages[s].time.exposed[kEp], b.stages[s].time.exposed[kEp]) << s;
    EXPECT_EQ(o.stages[s].communication[kEp].collectives, b.stages[s].communication[kEp].collectives) << s;
  }
  // A micro-batch too few for DualPipeV's warm-up is refused by name.
  plain.global_batch = 6;
  try {
    simulate_iteration(model, plain, topo);
    ADD_FAILURE() << "3 micro-batches on 2 stages were accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.pointer(), "/parallel/global_batch");
    EXPECT_NE(e.reason().find("dualpipe_v needs at least 2·pp=4 micro-batches"), std::string::npos) << e.reason();
  }
}

// --explain offers the schedules that hide a pipelined MoE layout's all-to-alls behind the other
// micro-batch's kernels: DualPipeV's pairs and Megatron's combined 1F1B (interleaved), each with
// the flags that apply it, and DualPipeV's pairs do better with them than without.
TEST(IterationExpertParallel, ExplainOffersTheSchedulesThatHideTheAllToAlls) {
  const ModelConfig model = tiny_moe();
  const Topology topo = toy_cluster(4);
  ParallelLayout l = moe_layout(2, 2);
  l.pp = 2;
  l.global_batch = 16;
  const IterationResult base = simulate_iteration(model, l, topo);
  std::map<std::string, Suggestion> by_knob;
  for (const Suggestion& s : explain_layout(model, l, topo, IterationOptions{}, base)) by_knob.emplace(s.knob, s);
  ASSERT_TRUE(by_knob.count("DualPipeV, its pairs hiding the all-to-alls"));
  ASSERT_TRUE(by_knob.count("DualPipeV (V-shaped, overlapped forward-and-backward chunks)"));
  ASSERT_TRUE(by_knob.count("interleaved 1F1B, vpp 2, all-to-alls overlapped (combined 1F1B)"));
  const Suggestion& pairs = by_knob.at("DualPipeV, its pairs hiding the all-to-alls");
  EXPECT_EQ(pairs.flags, "--schedule dualpipe_v --moe-a2a-overlap on");
  EXPECT_TRUE(pairs.layout.moe_a2a_overlap);
  EXPECT_LT(pairs.delta, by_knob.at("DualPipeV (V-shaped, overlapped forward-and-backward chunks)").delta);
  // A dense model has no all-to-alls to hide.
  ModelConfig dense = model;
  dense.moe.reset();
  ParallelLayout d = l;
  d.ep = 1;
  const IterationResult dense_base = simulate_iteration(dense, d, topo);
  for (const Suggestion& s : explain_layout(dense, d, topo, IterationOptions{}, dense_base)) {
    EXPECT_EQ(s.flags.find("--moe-a2a-overlap"), std::string::npos) << s.knob;
  }
}

TEST(IterationExpertParallel, FlexDispatchSendsATokenOncePerRemoteNode) {
  // 16 experts, top-4, ep 16 over two DGX H100 nodes (8 experts per node). The flat all-to-all
  // sends each token's 4 slots, 15/16 of them off the GPU. DeepEP / HybridEP (flex) sends a
  // token to the other node once if any of its experts is there, P(hit) = 1 − C(8,4)/C(16,4)
  // = 1 − 70/1820, then over NVLink once to each GPU holding one of its experts (one expert per
  // GPU here: 4 GPUs, 7/8 of them off the GPU); before each forward dispatch HybridEP
  // all-gathers the routing maps (16 ranks × T × 16 experts, a byte each). Per layer, with
  // T·h·2 bytes of tokens:
  //   flat: 4 · T·h·2 · 4 · 15/16,
  //   flex: 4 · T·h·2 · (P(hit) + 4 · 7/8) + 16·T·16 · 15/16,
  // and for each of the flat one's collectives two, plus the all-gather. The flat one's time is
  // what crosses the NICs (8/16 of its slots; NVLink carries the rest at once), flex's about
  // one copy per token there: with 16k-token sequences, where bandwidth outweighs flex's
  // second latency and its all-gather, flex is faster.
  ModelConfig model = tiny_moe();
  model.moe->experts = 16;
  model.moe->top_k = 4;
  model.max_sequence = 16384;
  const Topology two_nodes = test::load_preset("dgx-h100", 2);
  ParallelLayout flat = moe_layout(16, 16);
  flat.sequence_length = 16384;
  ParallelLayout flex = flat;
  flex.moe_dispatcher = MoeDispatcher::kFlex;
  const double tokens = 16384.0 * 256 * 2;
  const double hit = 1.0 - 70.0 / 1820.0;
  const double routing_maps = 16.0 * 16384 * 16;
  const IterationResult a = simulate_iteration(model, flat, two_nodes);
  const IterationResult b = simulate_iteration(model, flex, two_nodes);
  const CommunicationVolume& va = a.stages[0].communication[kEp];
  const CommunicationVolume& vb = b.stages[0].communication[kEp];
  const int layers = 8;
  EXPECT_NEAR(va.sent.value(), layers * 4 * tokens * 4 * 15 / 16, 1e-6 * va.sent.value());
  EXPECT_NEAR(vb.sent.value(), layers * (4 * tokens * (hit + 4 * 7.0 / 8) + routing_maps * 15 / 16),
              1e-6 * vb.sent.value());
  EXPECT_EQ(vb.collectives, 2 * va.collectives + layers);
  EXPECT_LT(b.stages[0].time.exposed[kEp], a.stages[0].time.exposed[kEp]);
  // One kernel forwards over NVLink what arrives by RDMA: each dispatch or combine takes the
  // slower of its rail all-to-all (2 ranks, one per node) and its NVLink one (8 ranks), not both.
  CollectiveSimulator rail(two_nodes, 2, 1), local(two_nodes, 8), group(two_nodes, 16);
  CollectiveOptions analytical;
  analytical.model = "analytical";
  const double across = rail.run(CollectiveOp::kAllToAll, Bytes(tokens * 2 * hit), analytical).time.seconds();
  const double inside = local.run(CollectiveOp::kAllToAll, Bytes(tokens * 4), analytical).time.seconds();
  const double gather = group.run(CollectiveOp::kAllGather, Bytes(routing_maps), analytical).time.seconds();
  const double expected = layers * (4 * std::max(across, inside) + gather);
  EXPECT_NEAR(b.stages[0].time.exposed[kEp].seconds(), expected, 0.02 * expected) << across << " " << inside;
  expect_parts_add_up(b);
  // Inside one node (16 experts on 8 GPUs, two each) flex sends a token to the
  // 8·(1 − C(14,4)/C(16,4)) = 3.6 GPUs holding its experts, not its 4 slots, after the routing maps.
  const Topology one_node = test::load_preset("dgx-h100", 1);
  ParallelLayout flat8 = moe_layout(8, 8), flex8 = flat8;
  flex8.moe_dispatcher = MoeDispatcher::kFlex;
  const double reached = 8 * (1 - 1001.0 / 1820.0);
  EXPECT_NEAR(iteration_detail::groups_reached(16, 8, 4), reached, 1e-12);
  const double tokens8 = 512.0 * 256 * 2, maps8 = 8.0 * 512 * 16;
  const IterationResult r8 = simulate_iteration(model, flex8, one_node);
  const CommunicationVolume& v8 = r8.stages[0].communication[kEp];
  EXPECT_NEAR(v8.sent.value(), layers * (4 * tokens8 * reached + maps8) * 7 / 8, 1e-6 * v8.sent.value());
  EXPECT_DOUBLE_EQ(iteration_detail::groups_reached(16, 1, 4), 1.0);
  EXPECT_DOUBLE_EQ(iteration_detail::groups_reached(16, 16, 4), 4.0);  // one expert per group: every slot a group
}

TEST(IterationExpertParallel, ExpertGradientsReduceOverTheExpertDataParallelGroup) {
  // dp 4, ep 2, ZeRO 0: the routed experts' gradients (Ψₑ = 8 layers × routed / ep per GPU)
  // all-reduce over dp·cp/ep = 2 ranks, the rest (Ψ − Ψₑ) over the 4 DP ranks, bf16:
  //   DP bytes = 2·(3/4)·2(Ψ − Ψₑ) + 2·(1/2)·2Ψₑ.
  const ModelConfig model = tiny_moe();
  const IterationResult r = simulate_iteration(model, moe_layout(4, 2), toy_cluster(4));
  const double total = static_cast<double>(count_parameters(model).total);
  const double experts = 8.0 * static_cast<double>(layer_parameters(model, 0).routed_experts) / 2;
  const double psi = total - experts;  // this GPU holds half of the routed experts
  EXPECT_NEAR(r.stages[0].parameters, psi, 1e-6);
  const double expected = 2 * 0.75 * 2 * (psi - experts) + 2 * 0.5 * 2 * experts;
  EXPECT_NEAR(r.stages[0].communication[kDp].sent.value(), expected, 1e-9 * expected);
}

TEST(IterationExpertParallel, EpOneAddsNothingToThePreEpModel) {
  // One GPU, ep = 1: the iteration is the pre-EP model's, every unit's forward then backward
  // on the compute stream, then the optimizer (28 bytes per parameter):
  //   embedding + 8 MoE layers + output layer, forward and backward, + optimizer.
  const ModelConfig model = tiny_moe();
  const Topology topo = toy_cluster(1);
  const IterationResult r = simulate_iteration(model, moe_layout(1, 1), topo, test::kernels_only());
  const ComputeModel cm(topo.gpu_specs()[0], test::kernels_only().compute);
  MicroBatch mb{1, 512, true, DType::kBf16};
  mb.expert_gemms = ExpertGemms::kPerExpert;  // the layout's default, Megatron-Core's TEGroupedMLP
  mb.sort_received_tokens = true;             // its default dispatcher, alltoall, regroups by expert
  Time expected;
  auto add = [&](const std::vector<ModelOperator>& ops, int times) {
    for (const ModelOperator& op : ops) expected += (cm.time(op.forward) + cm.time(op.backward)) * times;
  };
  add(embedding_operators(model, mb, {}), 1);
  add(layer_operators(model, 0, mb, {}), 8);
  add(output_operators(model, mb, {}), 1);
  expected += cm.time(memory_bound_cost(Bytes(28 * static_cast<double>(count_parameters(model).total))));
  EXPECT_EQ(r.iteration_time, expected);
  EXPECT_EQ(r.stages[0].communication[kEp].collectives, 0);
  EXPECT_EQ(r.stages[0].communication[kEp].sent.value(), 0.0);
  EXPECT_EQ(r.moe_expert_pace, 1.0);
  // Uniform loads given explicitly are the default.
  ParallelLayout uniform = moe_layout(4, 1);
  uniform.moe_expert_load.relative = {3, 3, 3, 3};
  const IterationResult dp4 = simulate_iteration(model, moe_layout(4, 1), toy_cluster(4));
  EXPECT_EQ(simulate_iteration(model, uniform, toy_cluster(4)).iteration_time, dp4.iteration_time);
  EXPECT_EQ(dp4.stages[0].communication[kEp].sent.value(), 0.0);
}

TEST(IterationExpertParallel, ExpertsIssuedPerExpertWaitForTheHost) {
  // One GPU, 4 local experts. With a host that takes 1 s to issue a GEMM (far longer than any
  // of the toy GPU's expert GEMMs), per-expert issue makes each expert GEMM host-bound: 4 host
  // issues forward and 8 backward for each of a MoE layer's two expert GEMMs. Grouped (one
  // device-side kernel per GEMM) they run at the GPU's pace; nothing else changes.
  const ModelConfig model = tiny_moe();
  const Topology topo = toy_cluster(1);
  IterationOptions slow_host = test::kernels_only();
  slow_host.compute.host_gemm_issue = Time::from_seconds(1);
  ParallelLayout grouped = moe_layout(1, 1);
  grouped.expert_gemms = ExpertGemms::kGrouped;
  const IterationResult per_expert = simulate_iteration(model, moe_layout(1, 1), topo, slow_host);
  const IterationResult on_device = simulate_iteration(model, grouped, topo, slow_host);
  const ComputeModel cm(topo.gpu_specs()[0], slow_host.compute);
  MicroBatch mb{1, 512, true, DType::kBf16};
  auto expert_time = [&](ExpertGemms g) {
    mb.expert_gemms = g;
    Time t;
    for (const ModelOperator& op : layer_operators(model, 0, mb, {})) {
      if (op.name.rfind("expert_", 0) == 0 && op.forward.kind == OperatorKind::kGemm) {
        t += cm.time(op.forward) + cm.time(op.backward);
      }
    }
    return t;
  };
  EXPECT_EQ(expert_time(ExpertGemms::kPerExpert), Time::from_seconds(2 * (4 + 8)));
  EXPECT_LT(expert_time(ExpertGemms::kGrouped), Time::from_seconds(1));
  EXPECT_EQ(per_expert.iteration_time - on_device.iteration_time,
            (expert_time(ExpertGemms::kPerExpert) - expert_time(ExpertGemms::kGrouped)) * 8);
}

TEST(IterationExpertParallel, SequentialExpertsIssueTheirActivationsOneByOneAndConcatenate) {
  // Megatron-Core's SequentialMLP on 4 local experts: the same GEMMs as TEGroupedMLP's, each
  // expert's activation a kernel of its own each way (one over all of them in TEGroupedMLP), and
  // one cat of the experts' outputs forward (its gradient's split is a view: no kernel). With a
  // host that takes 1 s per kernel dispatch, the activations alone differ by 2 × (4 − 1) s.
  const ModelConfig model = tiny_moe();
  const Topology topo = toy_cluster(1);
  IterationOptions slow = test::kernels_only();
  slow.compute.host_dispatch = Time::from_seconds(1);
  const ComputeModel cm(topo.gpu_specs()[0], slow.compute);
  MicroBatch mb{1, 512, true, DType::kBf16};
  auto by_name = [&](ExpertGemms g) {
    mb.expert_gemms = g;
    std::map<std::string, ModelOperator> ops;
    for (const ModelOperator& op : layer_operators(model, 0, mb, {})) ops.emplace(op.name, op);
    return ops;
  };
  const auto grouped = by_name(ExpertGemms::kPerExpert), sequential = by_name(ExpertGemms::kSequential);
  EXPECT_EQ(grouped.at("expert_activation").forward.kernels, 1);
  EXPECT_EQ(sequential.at("expert_activation").forward.kernels, 4);
  EXPECT_EQ(sequential.at("expert_activation").backward.kernels, 4);
  EXPECT_EQ(grouped.count("expert_output_cat"), 0u);
  EXPECT_EQ(sequential.at("expert_output_cat").backward.kernels, 0);
  for (const char* gemm : {"expert_gate_up_proj", "expert_down_proj"}) {
    EXPECT_EQ(sequential.at(gemm).forward.host_issued_kernels, grouped.at(gemm).forward.host_issued_kernels);
  }
  const auto issue = [&](const ModelOperator& op) {
    return cm.timing(op.forward).issue + cm.timing(op.backward).issue;
  };
  EXPECT_EQ(issue(sequential.at("expert_activation")) - issue(grouped.at("expert_activation")), Time::from_seconds(6));
  EXPECT_EQ(expert_gemms_from("sequential"), ExpertGemms::kSequential);
}

TEST(IterationExpertParallel, ExpertTensorParallelismOfOneKeepsExpertsWholeOnTheirTokens) {
  // tp 2 with SP, dp 2, ep 2 on 4 GPUs, 8 MoE layers of 4 experts (top 2, f_e = 512).
  //   etp = tp = 2: each GPU holds 2 experts split in two, computes T·k slots on f_e/2, and the
  //     layer's MLP half is the TP all-gather + reduce-scatter; the experts' gradients have an
  //     expert-DP group of tp·dp/(etp·ep) = 1 rank (nothing to reduce).
  //   etp = 1: 2 whole experts per GPU (twice the expert parameters), T·k/2 slots on f_e (the
  //     same FLOPs), no collective for the MLP half (4 fewer TP collectives per layer: AG + RS
  //     forward and backward), and the experts' gradients all-reduce over 2 ranks.
  const ModelConfig model = tiny_moe();
  const Topology topo = toy_cluster(4);
  ParallelLayout l = moe_layout(2, 2);
  l.tp = 2;
  l.sequence_parallel = true;
  const IterationResult same = simulate_iteration(model, l, topo);
  l.expert_tp = 1;
  const IterationResult folded = simulate_iteration(model, l, topo);
  const double per_gpu_experts = 8.0 * static_cast<double>(layer_parameters(model, 0).routed_experts) / 2;  // /(etp·ep)
  EXPECT_NEAR(folded.stages[0].parameters - same.stages[0].parameters, per_gpu_experts / 2, 1e-6);
  EXPECT_EQ(same.stages[0].communication[kTp].collectives - folded.stages[0].communication[kTp].collectives, 8 * 4);
  EXPECT_GT(folded.stages[0].communication[kDp].sent.value(), same.stages[0].communication[kDp].sent.value());
  // The GEMMs' FLOPs are the same; only the per-slot weighting of the unpermute (2 FLOPs per
  // slot element) runs on half the slots: 0.04% of the total here.
  EXPECT_NEAR(folded.stages[0].hardware_flops.value(), same.stages[0].hardware_flops.value(),
              1e-3 * same.stages[0].hardware_flops.value());
  expect_parts_add_up(folded);
  // Without SP the TP ranks hold the same tokens: refused, as Megatron's MoE refuses it.
  l.sequence_parallel = false;
  EXPECT_THROW(simulate_iteration(model, l, topo), InputError);
}

TEST(IterationExpertParallel, CapacityFactorDropsTheOverflowOfSkewedExperts) {
  // Loads 4:2:1:1 over E = 4 experts are uᵢ = E·wᵢ/Σw = 2, 1, ½, ½ times the uniform share.
  // Capacity factor 1 caps each at 1: processed 1, 1, ½, ½ → ¾ of the slots, ¼ dropped:
  //   global tokens 4·512 × top_k 2 × 8 MoE layers × ¼ = 8192 dropped slots per iteration.
  // The busiest expert then runs the uniform rows (pace 1), and the all-to-all sends ¾ of D.
  const ModelConfig model = tiny_moe();
  const Topology topo = toy_cluster(4);
  ParallelLayout skewed = moe_layout(4, 2);
  skewed.moe_expert_load.relative = {4, 2, 1, 1};
  ParallelLayout capped = skewed;
  capped.moe_capacity_factor = 1.0;
  const IterationResult uniform = simulate_iteration(model, moe_layout(4, 2), topo);
  const IterationResult dropped = simulate_iteration(model, capped, topo);
  EXPECT_DOUBLE_EQ(dropped.moe_dropped_fraction, 0.25);
  EXPECT_DOUBLE_EQ(dropped.moe_dropped_token_slots, 8192);
  EXPECT_DOUBLE_EQ(dropped.moe_expert_pace, 1.0);
  EXPECT_NEAR(dropped.stages[0].communication[kEp].sent.value(),
              0.75 * uniform.stages[0].communication[kEp].sent.value(), 1e-6);
  // Fewer expert FLOPs than uniform routing, at the same pace.
  EXPECT_LT(dropped.stages[0].hardware_flops, uniform.stages[0].hardware_flops);
  // Dropless, the busiest expert takes 2× the uniform rows and sets the pace: slower.
  const IterationResult paced = simulate_iteration(model, skewed, topo);
  EXPECT_DOUBLE_EQ(paced.moe_expert_pace, 2.0);
  EXPECT_EQ(paced.moe_dropped_token_slots, 0.0);
  EXPECT_GT(paced.iteration_time, uniform.iteration_time);
  // Zipf(1): wᵢ = 1, ½, ⅓, ¼, Σ = 25/12, the busiest u₁ = 4·12/25 = 1.92.
  ParallelLayout zipf = moe_layout(4, 2);
  zipf.moe_expert_load.zipf_exponent = 1.0;
  const IterationResult z = simulate_iteration(model, zipf, topo);
  EXPECT_NEAR(z.moe_expert_pace, 1.92, 1e-12);
  EXPECT_GT(z.iteration_time, uniform.iteration_time);
  EXPECT_LT(z.iteration_time, paced.iteration_time);
  expect_parts_add_up(z);
}

TEST(IterationExpertParallel, BadRoutingIsRefusedWithItsKey) {
  const ModelConfig model = tiny_moe();
  auto reason = [&](const ParallelLayout& l) {
    try {
      validate(l, model, 4, "w.json", "/parallel");
    } catch (const InputError& e) {
      return e.pointer() + ": " + e.reason();
    }
    return std::string("no error");
  };
  ParallelLayout l = moe_layout(4, 2);
  l.moe_expert_load.relative = {1, 1};
  EXPECT_EQ(reason(l), "/parallel/moe_expert_load/relative: 2 loads for 4 experts");
  l.moe_expert_load.relative = {0, 0, 0, 0};
  EXPECT_EQ(reason(l), "/parallel/moe_expert_load/relative: the loads are all zero");
  l = moe_layout(4, 2);
  l.moe_expert_load.zipf_exponent = -1;
  EXPECT_EQ(reason(l), "/parallel/moe_expert_load/zipf: the Zipf exponent must be finite and >= 0");
  l = moe_layout(4, 2);
  l.moe_capacity_factor = 0.0;
  EXPECT_EQ(reason(l), "/parallel/moe_capacity_factor: must be > 0");
  l.moe_capacity_factor = 1.0;
  l.moe_dispatcher = MoeDispatcher::kFlex;
  EXPECT_EQ(reason(l), "/parallel/moe_capacity_factor: Megatron drops tokens only with the alltoall dispatcher, not flex");
  l = moe_layout(4, 2);
  l.moe_pad_to_capacity = true;
  EXPECT_EQ(reason(l), "/parallel/moe_pad_to_capacity: needs a capacity factor (moe_capacity_factor) to pad to");
  l.moe_capacity_factor = 1.25;
  EXPECT_EQ(reason(l), "no error");
  l.ep = 1;
  EXPECT_EQ([&] {
    try {
      validate(l, tiny(2), 4, "w.json", "/parallel");
    } catch (const InputError& e) {
      return e.pointer();
    }
    return std::string();
  }(), "/parallel/moe_capacity_factor");
}

// The workload's MoE routing keys, read strictly and written back by the search's and validate's
// emitters (workload_writer.h), refused where Megatron refuses them.
TEST(IterationExpertParallel, WorkloadRoutingKeysRoundTrip) {
  const std::string dir = ::testing::TempDir();
  auto load = [&](const std::string& routing) {
    const std::string path = dir + "/moe_routing.json";
    std::ofstream(path) << R"({"model": "mixtral-8x7b", "topology": {"preset": "dgx-h100", "nodes": 8},
      "parallel": {"tp": 2, "pp": 4, "ep": 8, "sequence_parallel": true, "global_batch": 128)" + routing + "}}";
    return load_training_workload(path, test::source_path("workloads/models"), test::source_path("topologies"));
  };
  const TrainingWorkload w = load(R"(, "moe_expert_load": {"zipf": 1.2}, "moe_capacity_factor": 1.25,
                                     "moe_pad_to_capacity": true)");
  EXPECT_EQ(w.layout.moe_expert_load.zipf_exponent, 1.2);
  EXPECT_EQ(w.layout.moe_capacity_factor, 1.25);
  EXPECT_TRUE(w.layout.moe_pad_to_capacity);
  const nlohmann::ordered_json back = parallel_block(w.layout);
  EXPECT_EQ(back["moe_expert_load"]["zipf"], 1.2);
  EXPECT_EQ(back["moe_capacity_factor"], 1.25);
  EXPECT_EQ(back["moe_pad_to_capacity"], true);
  const TrainingWorkload r = load(R"(, "moe_expert_load": {"relative": [8, 1, 1, 1, 1, 1, 1, 1]})");
  EXPECT_EQ(parallel_block(r.layout)["moe_expert_load"]["relative"].size(), 8u);
  EXPECT_FALSE(parallel_block(load("").layout).contains("moe_capacity_factor"));
  auto refused = [&](const std::string& routing) {
    try {
      load(routing);
    } catch (const InputError& e) {
      return e.pointer() + ": " + e.reason();
    }
    return std::string("no error");
  };
  EXPECT_EQ(refused(R"(, "moe_expert_load": {"zipf": 1, "relative": [1]})"),
            "/parallel/moe_expert_load: give zipf or relative, not both");
  EXPECT_EQ(refused(R"(, "moe_expert_load": {"skew": 1})"),
            "/parallel/moe_expert_load: expected zipf (an exponent) or relative (one load per routed expert)");
  EXPECT_EQ(refused(R"(, "moe_expert_load": {"relative": [1, 2]})"),
            "/parallel/moe_expert_load/relative: 2 loads for 8 experts");
  EXPECT_EQ(refused(R"(, "moe_capacity_factor": 1, "moe_dispatcher": "flex")"),
            "/parallel/moe_capacity_factor: Megatron drops tokens only with the alltoall dispatcher, not flex");
}

// Megatron's --moe-pad-expert-input-to-capacity: every expert computes and sends c times its
// even share, whatever the routing, and the host issues the per-expert GEMMs without reading
// their rows back. Loads 4:2:1:1 (u = 2, 1, ½, ½) at c = 1.25: ¾ dropped of expert 0's share,
// (2 − 1.25)/4 = 0.1875 of all slots; 1.25 computed and sent per expert.
TEST(IterationExpertParallel, PaddingToCapacityComputesAndSendsTheCapacity) {
  const ModelConfig model = tiny_moe();
  const Topology topo = toy_cluster(4);
  ParallelLayout padded = moe_layout(4, 2);
  padded.moe_expert_load.relative = {4, 2, 1, 1};
  padded.moe_capacity_factor = 1.25;
  padded.moe_pad_to_capacity = true;
  const IterationResult uniform = simulate_iteration(model, moe_layout(4, 2), topo);
  const IterationResult r = simulate_iteration(model, padded, topo);
  EXPECT_DOUBLE_EQ(r.moe_dropped_fraction, 0.1875);
  EXPECT_DOUBLE_EQ(r.moe_expert_pace, 1.25);
  EXPECT_NEAR(r.stages[0].communication[kEp].sent.value(), 1.25 * uniform.stages[0].communication[kEp].sent.value(),
              1e-6);
  // Uniform routing padded to c = 1: the even share, as dropless uniform routing computes it.
  ParallelLayout even = moe_layout(4, 2);
  even.moe_capacity_factor = 1.0;
  even.moe_pad_to_capacity = true;
  const IterationResult e = simulate_iteration(model, even, topo);
  EXPECT_EQ(e.moe_dropped_fraction, 0.0);
  EXPECT_NEAR(e.stages[0].communication[kEp].sent.value(), uniform.stages[0].communication[kEp].sent.value(), 1e-6);
  EXPECT_NEAR(e.stages[0].hardware_flops.value(), uniform.stages[0].hardware_flops.value(),
              1e-9 * uniform.stages[0].hardware_flops.value());
  expect_parts_add_up(r);
}

// Per-expert GEMMs whose rows the host knows (padded experts) are issued ahead of the GPU, as
// any kernel is; read back first, they start only when the GPU is done with what came before.
TEST(IterationExpertParallel, PaddedExpertsAreIssuedWithoutReadingTheirRowsBack) {
  const ModelConfig model = tiny_moe();
  MicroBatch read_back{1, 512};
  read_back.expert_gemms = ExpertGemms::kPerExpert;
  MicroBatch known = read_back;
  known.experts_padded = true;
  const ShardingFactors sharding{1, 1, 2, false, false, 1};
  size_t per_expert = 0;
  const std::vector<ModelOperator> a = layer_operators(model, 0, read_back, sharding);
  const std::vector<ModelOperator> b = layer_operators(model, 0, known, sharding);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].forward.host_issued_kernels == 0) continue;
    ++per_expert;
    EXPECT_TRUE(a[i].forward.host_reads_back) << a[i].name;
    EXPECT_FALSE(b[i].forward.host_reads_back) << b[i].name;
    EXPECT_FALSE(b[i].backward.host_reads_back) << b[i].name;
    // Every local expert computes when padded (4 experts on ep 2: 2 a GPU).
    EXPECT_EQ(b[i].forward.host_issued_kernels, 2) << b[i].name;
  }
  EXPECT_GT(per_expert, 0u);
  // A host that takes 1 s per GEMM and a GPU busy 1 s before them (the toy GPU runs such a
  // small GEMM in milliseconds): read back, the 3 GEMMs start after that second; known, the host
  // issues them while the GPU is still busy.
  ComputeModelOptions o;
  o.host_gemm_issue = Time::from_seconds(1);
  o.host_dispatch = Time::zero();
  o.kernel_launch_overhead = Time::zero();
  o.sustained_fraction = 1.0;
  const ComputeModel cm(test::toy_gpu(), o);
  const OperatorCost busy = memory_bound_cost(Bytes(100e9 * 0.9), Flops(0), DType::kBf16);  // 1 s at 0.9 × 100 GB/s
  OperatorCost gemms = gemm_cost(GemmShape{8, 8, 8, 1}, DType::kBf16);
  gemms.kernels = gemms.host_issued_kernels = 3;
  const OperatorCost* read[] = {&busy, &gemms};
  const Time after = issued_stream_time(cm, read);
  gemms.host_reads_back = false;
  const Time ahead = issued_stream_time(cm, read);
  EXPECT_NEAR(after.seconds(), 1 + 3, 1e-9);
  EXPECT_NEAR(ahead.seconds(), 3, 1e-9);
  // A CUDA graph replays fixed-shape GEMMs with no host issue at all; rows read back from the
  // GPU cannot be captured, and the host still issues them inside a graphed layer.
  gemms.graph_replayed = true;
  EXPECT_EQ(cm.timing(gemms).issue, Time::zero());
  gemms.host_reads_back = true;
  EXPECT_EQ(cm.timing(gemms).issue, Time::from_seconds(3));
}

// Mixtral 8x7B on 64 H100s (8 DGX nodes): tp 2 with SP, pp 4, dp 8, ep 8, ZeRO 1, selective
// recomputation, s = 4096, 128 sequences per step.
ParallelLayout mixtral_layout() {
  ParallelLayout l;
  l.tp = 2;
  l.pp = 4;
  l.dp = 8;
  l.ep = 8;
  l.sequence_parallel = true;
  l.zero_stage = ZeroStage::kStage1;
  l.micro_batch = 1;
  l.global_batch = 128;
  l.sequence_length = 4096;
  l.recompute = Recomputation::kSelective;
  return l;
}

TEST(IterationExpertParallel, Mixtral8x7bWithEp8RunsEndToEnd) {
  // The EP group of a rank is 8 ranks 2 apart (tp innermost): 16 consecutive GPUs, two nodes,
  // so the all-to-all crosses the network and shows as exposed EP time on every stage.
  // Per direction per GPU: T_sp = 4096/2 tokens × top_k 2 × h 4096 × 2 bytes × 7/8.
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "mixtral-8x7b");
  const Topology topo = test::load_preset("dgx-h100", 8);
  const ParallelLayout l = mixtral_layout();
  const IterationResult r = simulate_iteration(model, l, topo);
  const double per_direction = 2048.0 * 2 * 4096 * 2 * 7 / 8;
  const int64_t m = 128 / 8;
  for (const StageResult& s : r.stages) {
    EXPECT_GT(s.time.exposed[kEp], Time::zero()) << "stage " << s.stage;
    EXPECT_EQ(s.communication[kEp].collectives, 8 * m * 4);  // 8 MoE layers per stage
    EXPECT_NEAR(s.communication[kEp].sent.value(), 8.0 * m * 4 * per_direction, 1e-9 * per_direction * 8 * m * 4);
  }
  EXPECT_GT(r.mfu, 0.05);
  EXPECT_LT(r.mfu, 0.75);
  expect_parts_add_up(r);
  std::cout << "mixtral-8x7b on 64 H100 (tp 2, pp 4, dp 8, ep 8): iteration " << r.iteration_time.seconds()
            << " s, MFU " << r.mfu << ", EP exposed on stage 0 " << r.stages[0].time.exposed[kEp].seconds()
            << " s, peak memory " << r.peak_memory.value() / 1e9 << " GB\n";
}

TEST(IterationExpertParallel, IsDeterministic) {
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "mixtral-8x7b");
  const Topology topo = test::load_preset("dgx-h100", 8);
  ParallelLayout zipf = mixtral_layout();
  zipf.moe_expert_load.zipf_exponent = 1.2;
  zipf.moe_capacity_factor = 1.25;
  const IterationResult a = simulate_iteration(model, zipf, topo);
  const IterationResult b = simulate_iteration(model, zipf, topo);
  EXPECT_EQ(a.iteration_time, b.iteration_time);
  EXPECT_EQ(a.stages[2].time.exposed[kEp], b.stages[2].time.exposed[kEp]);
  EXPECT_EQ(a.moe_dropped_token_slots, b.moe_dropped_token_slots);
  EXPECT_GT(a.moe_dropped_token_slots, 0.0);
}

}  // namespace
}  // namespace parallax
