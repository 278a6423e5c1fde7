// Op-level selective activation checkpointing (torchtitan's "op" policy, recompute
// "selective_op"): which operators keep their output and which run again in the backward, the
// bytes kept and re-created against hand-derived closed forms (the layouts it is refused for:
// training_layout_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "compute/compute_model.h"
#include "model/layer_operators.h"
#include "training/iteration_units.h"
#include "training/memory_model.h"
#include "test_support.h"

namespace parallax {
namespace {

using test::bundled;

MicroBatch batch_of(int64_t s, DType dtype, bool op_checkpointing) {
  MicroBatch mb;
  mb.sequences = 1;
  mb.sequence_length = s;
  mb.dtype = dtype;
  mb.fp8_recipe = Fp8Recipe::kCurrent;
  mb.op_checkpointing = op_checkpointing;
  return mb;
}

std::vector<std::string> names(const std::vector<ModelOperator>& ops, bool recomputed) {
  std::vector<std::string> out;
  for (const auto& op : ops) {
    if (op.recomputed == recomputed) out.push_back(op.name);
  }
  return out;
}

double bytes(Bytes b) { return b.value(); }

Bytes sum_regenerated(const std::vector<ModelOperator>& ops) {
  Bytes sum;
  for (const auto& op : ops) sum += op.regenerated;
  return sum;
}

// Llama-3 8B (h = 4096, 32 heads and 8 KV heads of 128, SwiGLU f = 14336), b = 1, s = T = 8192,
// tp 1, FlashAttention, bf16. torchtitan's layer runs wq, wk, wv, wo, w1, w3, w2 as seven
// matmuls, in that order; the policy keeps the outputs of the 1st, 3rd, 5th and 7th (Q, V, the
// gate, the down projection) and of the attention core (O and its fp32 row statistics), and
// the layer's input. In 16-bit elements that is T·(h + h + 1024 + h + f + h) = T·(4h + 1024 + f),
// plus 4·T·32 bytes of statistics. Without checkpointing the layer keeps 2·T·(6.5h + 3f) + 4·T·32
// (training_operators_test's Llama3_8BLayerKeepsItsGatedMlpAndGroupedKv); the difference,
// 2·T·(2.5h + 2f − 1024), is what the backward re-creates.
TEST(OpCheckpointing, Llama3_8BKeepsOddMatmulsAttentionAndItsInput) {
  const double T = 8192, h = 4096, f = 14336;
  const ModelConfig m = bundled("llama3-8b");
  const auto ops = layer_operators(m, 0, batch_of(8192, DType::kBf16, true), {});
  EXPECT_EQ(names(ops, false),
            (std::vector<std::string>{"q_proj", "v_proj", "attention", "mlp_gate_proj", "mlp_down_proj"}));
  EXPECT_EQ(names(ops, true), (std::vector<std::string>{"attention_norm", "k_proj", "rotary", "attention_out_proj",
                                                        "attention_residual", "mlp_norm", "mlp_up_proj",
                                                        "mlp_activation", "mlp_residual"}));
  EXPECT_DOUBLE_EQ(bytes(saved_activation_bytes(ops, false)), 2 * T * (4 * h + 1024 + f) + 4 * T * 32);
  EXPECT_DOUBLE_EQ(bytes(sum_regenerated(ops)), 2 * T * (2.5 * h + 2 * f - 1024));

  // The split projections do the fused ones' work; the recomputed matmuls (wk, wo, w3) run their
  // forward once more in the backward: 2·T·h·(1024 + h + f) FLOPs.
  const auto fused = layer_operators(m, 0, batch_of(8192, DType::kBf16, false), {});
  ComputeModelOptions kernels_only;  // the host issues ahead of the GPU: sums are the kernels'
  kernels_only.host_dispatch = Time::zero();
  const ComputeModel cm(test::load_preset("hgx-h200", 1).gpu_specs().front(), kernels_only);
  const iteration_detail::OperatorSums a = iteration_detail::sum_operators(cm, ops);
  const iteration_detail::OperatorSums b = iteration_detail::sum_operators(cm, fused);
  EXPECT_DOUBLE_EQ(a.forward_flops.value(), b.forward_flops.value());
  double recomputed_gemm_flops = 0;
  for (const auto& op : ops) {
    if (op.recomputed && op.forward.kind == OperatorKind::kGemm) recomputed_gemm_flops += op.forward.flops.value();
  }
  EXPECT_DOUBLE_EQ(recomputed_gemm_flops, 2 * T * h * (1024 + h + f));
  Time again;
  for (const auto& op : ops) {
    if (op.recomputed) again += cm.time(op.forward);
  }
  Time backward;
  for (const auto& op : ops) backward += cm.time(op.backward);
  EXPECT_EQ(a.backward, backward + again);

  // The unit keeps what the operators keep and holds the re-created tensors during its
  // backward; unlike Megatron's selective recomputation, the attention core is not re-run.
  const iteration_detail::Unit u = iteration_detail::unit_from(a, Recomputation::kSelectiveOp, true, true, false);
  EXPECT_EQ(u.activations, saved_activation_bytes(ops, false));
  EXPECT_EQ(u.recomputed_working_set, sum_regenerated(ops));
  EXPECT_EQ(u.backward, a.backward);
}

// With TP t = 4 and sequence parallelism (torchtitan's TP plan), the layer's input and the two
// blocks' reduce-scatter outputs are each a T/t shard of h; Q, V, O and the gate are the local
// heads' and columns' (T·h/t, T·1024/t, T·h/t, T·f/t); the down projection's output is the full
// T·h partial sum its reduce-scatter reads, kept as mm's output. In 16-bit elements
// T·(3h/t + h/t + 1024/t + h/t + f/t + h) = T·(5h + 1024 + f)/t + T·h, plus 4·T·(32/t) bytes of
// statistics (the local heads').
TEST(OpCheckpointing, WithTensorParallelismKeepsTheReduceScattersOutputs) {
  const double T = 8192, h = 4096, f = 14336, t = 4;
  ShardingFactors tp;
  tp.tp = 4;
  tp.sp = true;
  const auto ops = layer_operators(bundled("llama3-8b"), 0, batch_of(8192, DType::kBf16, true), tp);
  EXPECT_EQ(names(ops, false),
            (std::vector<std::string>{"q_proj", "v_proj", "attention", "mlp_gate_proj", "mlp_down_proj"}));
  EXPECT_DOUBLE_EQ(bytes(saved_activation_bytes(ops, false)),
                   2 * (T * (5 * h + 1024 + f) / t + T * h) + 4 * T * 32 / t);
}

// fp8 with per-tensor current scaling (6 bytes per cast element): the separate projections'
// input is quantised once (torch.compile merges the identical casts), so the casts move what
// the fused layer's do — forward T·h for Q, K, V and T·h for gate and up; backward each output
// gradient, T·(h + 2·1024) and T·2f — and every cast runs again in the backward: nothing
// quantised is kept, so each weight gradient quantises its (re-created) input anew.
TEST(OpCheckpointing, Fp8CastsMatchTheFusedLayerAndAllRunAgain) {
  const ModelConfig m = bundled("llama3-8b");
  const auto ops = layer_operators(m, 0, batch_of(8192, DType::kFp8, true), {});
  const auto fused = layer_operators(m, 0, batch_of(8192, DType::kFp8, false), {});
  auto cast_bytes = [](const std::vector<ModelOperator>& list, bool backward) {
    double sum = 0;
    for (const auto& op : list) {
      if (op.name.ends_with("_fp8_cast")) sum += (backward ? op.backward : op.forward).bytes_read_written.value();
    }
    return sum;
  };
  const double T = 8192, h = 4096;
  EXPECT_DOUBLE_EQ(cast_bytes(ops, false), cast_bytes(fused, false));
  EXPECT_DOUBLE_EQ(cast_bytes(ops, true), cast_bytes(fused, true));
  EXPECT_DOUBLE_EQ(std::find_if(ops.begin(), ops.end(), [](const ModelOperator& op) { return op.name == "k_proj_fp8_cast"; })
                       ->backward.bytes_read_written.value(),
                   6 * T * 1024);
  EXPECT_DOUBLE_EQ(std::find_if(ops.begin(), ops.end(), [](const ModelOperator& op) { return op.name == "q_proj_fp8_cast"; })
                       ->forward.bytes_read_written.value(),
                   6 * T * h);
  for (const auto& op : ops) {
    if (op.name.ends_with("_fp8_cast")) {
      EXPECT_TRUE(op.recomputed) << op.name;
    }
  }
  // The kept tensors are the 16-bit outputs whatever the GEMMs' type.
  EXPECT_EQ(saved_activation_bytes(ops, false),
            saved_activation_bytes(layer_operators(m, 0, batch_of(8192, DType::kBf16, true), {}), false));
}

// A plain (GELU) MLP without biases has six matmuls, q, k, v, o, up, down: the 1st, 3rd and 5th
// are kept, so the up projection's output stays and the down projection runs again.
TEST(OpCheckpointing, CountsMatmulsWhateverTheMlp) {
  ModelConfig m = bundled("llama3-8b");
  m.mlp = MlpKind::kPlain;
  const auto ops = layer_operators(m, 0, batch_of(4096, DType::kBf16, true), {});
  EXPECT_EQ(names(ops, false), (std::vector<std::string>{"q_proj", "v_proj", "attention", "mlp_up_proj"}));
}

// Its name reads back, and Korthikanti's GPT closed forms refuse it rather than answer for it.
TEST(OpCheckpointing, NamedAndLeftOutOfTheClosedForms) {
  for (Recomputation r : {Recomputation::kNone, Recomputation::kSelective, Recomputation::kFull, Recomputation::kSelectiveOp}) {
    EXPECT_EQ(recomputation_from(to_string(r)), r);
  }
  EXPECT_EQ(std::string(to_string(Recomputation::kSelectiveOp)), "selective_op");
  EXPECT_FALSE(recomputation_from("op"));
  EXPECT_THROW(activation_bytes_per_layer(2048, 1, 4096, 32, 1, false, Recomputation::kSelectiveOp), std::invalid_argument);
  EXPECT_THROW(flash_activation_bytes_per_layer(2048, 1, 4096, 32, 1, false, Recomputation::kSelectiveOp),
               std::invalid_argument);
}

}  // namespace
}  // namespace parallax
