// Context parallelism in the simulated iteration: the bytes ring attention and Ulysses send
// per GPU against their closed forms, the exposed CP time of one layer against the ring's
// block-by-block timeline worked out by hand, gradients over dp·cp ranks, activations of s/cp.
#include <gtest/gtest.h>

#include <algorithm>

#include "collectives/collective_simulator.h"
#include "compute/compute_model.h"
#include "io/input_error.h"
#include "training/iteration.h"
#include "model/layer_operators.h"
#include "training_test_support.h"

namespace parallax {
namespace {

using test::expect_parts_add_up;
using test::tiny;
using test::toy_cluster;
using test::kDp;
using test::kCp;
using test::kEp;
using test::kTp;


// cp ranks (tp = dp = pp = 1), micro-batches of one 512-token sequence.
ParallelLayout cp_layout(int cp, int64_t micro_batches, ContextParallelComm comm = ContextParallelComm::kRing) {
  ParallelLayout l;
  l.cp = cp;
  l.cp_comm = comm;
  l.micro_batch = 1;
  l.global_batch = micro_batches;
  l.sequence_length = 512;
  return l;
}

// How the iteration times collectives by default.
CollectiveOptions analytical() {
  CollectiveOptions o;
  o.model = "analytical";
  return o;
}

double sent(const IterationResult& r, size_t kind) { return r.stages[0].communication[kind].sent.value(); }

TEST(IterationContextParallel, RingPassesCpMinusOneKvBlocksPerAttention) {
  // K/V block of a CP rank: b·(s/cp)·kv·(d_qk + d_v)·2 bytes = 1·128·4·128·2 = 131,072 B (cp 4).
  // Per layer and micro-batch the forward passes cp−1 = 3 blocks; the backward 2(cp−1) = 6
  // (K/V at the first step, K/V + dK/dV in between, dK/dV at the last). 8 layers × 2
  // micro-batches × 9 blocks = 144 blocks.
  const double block = 1.0 * 128 * 4 * 128 * 2;
  const Topology topo = toy_cluster(4);
  const IterationResult none = simulate_iteration(tiny(), cp_layout(4, 2), topo);
  EXPECT_DOUBLE_EQ(sent(none, kCp), 8 * 2 * 9 * block);
  expect_parts_add_up(none);
  // Selective recomputation re-runs the attention core's forward, ring included: 3 more blocks
  // per layer and micro-batch — exactly the forward's cp−1.
  ParallelLayout l = cp_layout(4, 2);
  l.recompute = Recomputation::kSelective;
  const IterationResult selective = simulate_iteration(tiny(), l, topo);
  EXPECT_DOUBLE_EQ(sent(selective, kCp) - sent(none, kCp), 8 * 2 * 3 * block);
}

TEST(IterationContextParallel, UlyssesSendsQkvAndOutputThroughAllToAlls) {
  // cp 4: each rank holds T = 128 tokens. Forward: an all-to-all of Q, K, V, T·(4·64 + 4·128)
  // elements = 98,304 elements = 196,608 B, and one of the output, T·4·64·2 = 65,536 B; the
  // backward the same two. An all-to-all sends (cp−1)/cp of its buffer: per layer and
  // micro-batch 2·(3/4)·(196,608 + 65,536) = 393,216 B; 8 layers × 2 micro-batches.
  const Topology topo = toy_cluster(4);
  const IterationResult r = simulate_iteration(tiny(), cp_layout(4, 2, ContextParallelComm::kUlysses), topo);
  EXPECT_DOUBLE_EQ(sent(r, kCp), 8 * 2 * 2 * 0.75 * (196'608 + 65'536));
  expect_parts_add_up(r);
}

TEST(IterationContextParallel, UlyssesReplicatesKvHeadsFewerThanCp) {
  // One KV head (MQA) over cp = 4: each CP rank receives one replica, so the Q, K, V
  // all-to-all carries T·(4·64 + 4·128) elements as with 4 KV heads — the same bytes as the
  // multi-head test above.
  ModelConfig mqa = tiny();
  mqa.kv_heads = 1;
  const IterationResult r = simulate_iteration(mqa, cp_layout(4, 2, ContextParallelComm::kUlysses), toy_cluster(4));
  EXPECT_DOUBLE_EQ(sent(r, kCp), 8 * 2 * 2 * 0.75 * (196'608 + 65'536));
  // 3 KV heads neither divide cp = 2 nor are divided by it: refused, naming the field.
  ModelConfig gqa = tiny();
  gqa.heads = 12;
  gqa.kv_heads = 3;
  try {
    simulate_iteration(gqa, cp_layout(2, 2, ContextParallelComm::kUlysses), toy_cluster(2));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.pointer(), "/parallel/cp");
    EXPECT_NE(e.reason().find("3 KV heads"), std::string::npos) << e.reason();
  }
}

struct OneLayer {
  Time before_forward, attention_forward, after_forward;
  Time before_backward, attention_backward, after_backward;
};

OneLayer one_layer_times(const ModelConfig& model, const ParallelLayout& l, const GpuSpec& gpu) {
  const ComputeModel cm(gpu, test::kernels_only().compute);
  const MicroBatch batch{l.micro_batch, l.sequence_length, true, l.dtype};
  OneLayer t;
  bool before = true;
  for (const ModelOperator& op : layer_operators(model, 0, batch, ShardingFactors{l.tp, l.cp, 1, false})) {
    if (op.name == "attention") {
      t.attention_forward = cm.time(op.forward);
      t.attention_backward = cm.time(op.backward);
      before = false;
    } else if (before) {
      t.before_forward += cm.time(op.forward);
      t.before_backward += cm.time(op.backward);
    } else {
      t.after_forward += cm.time(op.forward);
      t.after_backward += cm.time(op.backward);
    }
  }
  return t;
}

TEST(IterationContextParallel, RingOverlapsBlocksWithTheirTransfers) {
  // One layer, cp 2, one micro-batch. Forward: block 0 (t_f = attention/2) runs while the
  // K/V block travels (t_m); block 1 waits for both, so max(0, t_m − t_f) is exposed.
  // Backward: step 0 computes (t_b) while K/V moves; step 1 waits for both, and its pass of
  // dK/dV (t_m, after step 0's block) runs beside it; the input side waits for both:
  // 2·max(0, t_m − t_b) exposed. Exposed CP = max(0, t_m − t_f) + 2·max(0, t_m − t_b).
  IterationOptions options = test::kernels_only();
  options.transformer_layers_only = true;
  const ModelConfig model = tiny(1);
  const ParallelLayout l = cp_layout(2, 1);
  const Bytes block(1.0 * 256 * 4 * 128 * 2);
  for (double gbps : {100.0, 0.02}) {  // fast: transfers hidden; slow: exposed
    SCOPED_TRACE(gbps);
    const Topology topo = test::star(2, gigabytes_per_second(gbps), Time::us(1));
    const OneLayer t = one_layer_times(model, l, topo.gpu_spec_of(topo.gpus()[0]));
    const Time t_f = Time::ps(t.attention_forward.picoseconds() / 2);
    const Time t_b = Time::ps(t.attention_backward.picoseconds() / 2);
    const Time t_m = CollectiveSimulator(topo, 2).run(CollectiveOp::kSendRecv, block, analytical()).time;
    auto exposed = [](Time comm, Time compute) { return std::max(Time::zero(), comm - compute); };
    const IterationResult r = simulate_iteration(model, l, topo, options);
    EXPECT_EQ(r.stages[0].time.exposed[kCp], exposed(t_m, t_f) + exposed(t_m, t_b) * 2);
    // After the pipeline: the last gradient reduction (over the 2 CP ranks), then the optimizer.
    const Time optimizer = r.iteration_time - r.pipeline_end - r.stages[0].time.exposed[kDp];
    EXPECT_EQ(r.stages[0].time.compute, t.before_forward + t_f * 2 + t.after_forward + t.after_backward + t_b * 2 +
                                            t.before_backward + optimizer);
    if (gbps > 1) {
      EXPECT_EQ(r.stages[0].time.exposed[kCp], Time::zero());
    } else {
      EXPECT_GT(r.stages[0].time.exposed[kCp], Time::zero());
    }
  }
}

TEST(IterationContextParallel, UlyssesAllToAllsAreExposed) {
  // The all-to-alls sit between the kernels that need them: all four are exposed.
  IterationOptions options;
  options.transformer_layers_only = true;
  const Topology topo = toy_cluster(2);
  const ParallelLayout l = cp_layout(2, 1, ContextParallelComm::kUlysses);
  const CollectiveSimulator sim(topo, 2);
  // T = 256 tokens: Q, K, V of 256·(4·64 + 4·128)·2 B, output 256·4·64·2 B.
  const Time qkv = sim.run(CollectiveOp::kAllToAll, Bytes(256.0 * 768 * 2), analytical()).time;
  const Time out = sim.run(CollectiveOp::kAllToAll, Bytes(256.0 * 256 * 2), analytical()).time;
  const IterationResult r = simulate_iteration(tiny(1), l, topo, options);
  EXPECT_EQ(r.stages[0].time.exposed[kCp], (qkv + out) * 2);
}

TEST(IterationContextParallel, GradientsAreReducedOverDpTimesCp) {
  // CP ranks hold the same parameters: with dp 2 and cp 2, ZeRO-0 all-reduces the gradients
  // (bf16) over n = 4 ranks: 2·(n−1)/n·2Ψ = 3Ψ bytes per GPU for the Ψ parameters it holds.
  ParallelLayout l = cp_layout(2, 2);
  l.dp = 2;
  const IterationResult r = simulate_iteration(tiny(), l, toy_cluster(4));
  EXPECT_NEAR(sent(r, kDp), 3.0 * r.stages[0].parameters, 1e-6 * sent(r, kDp));
}

TEST(IterationContextParallel, ActivationsHoldTheRanksShareOfTheSequence) {
  // One stage (pp 1) holds one micro-batch's activations of every layer with s/cp = 256 tokens
  // of the 512: tiny()'s 40·sbh + FlashAttention's 4·a·s·b per layer (see
  // IterationMemory.ActivationsFollowTheScheduleAndStatesFollowZero), and the output side's
  // 4sbh + 4·s·b·V, all with s = 256.
  const IterationResult r = simulate_iteration(tiny(), cp_layout(2, 2), toy_cluster(2));
  EXPECT_DOUBLE_EQ(r.stages[0].memory.activations.value(),
                   (256.0 * 256 * 40 + 4.0 * 4 * 256) * 8 + 4 * 256.0 * 256 + 4.0 * 256 * 1024);
}

}  // namespace
}  // namespace parallax
