// Memory per GPU of mixed-precision training: model states under ZeRO, and activations per
// transformer layer under tensor/sequence parallelism and recomputation.
//
// Model states (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", SC 2020, §3 and Fig. 1). Ψ parameters trained with mixed-precision Adam
// hold 2Ψ bytes of fp16/bf16 parameters, 2Ψ of gradients and KΨ of optimizer states, with
// K = 12: an fp32 master copy, momentum and variance, 4 bytes each. Over N data-parallel ranks:
//   stage 0 (plain DP)            (2 + 2 + K)·Ψ
//   stage 1 (optimizer sharded)   (2 + 2 + K/N)·Ψ
//   stage 2 (+ gradients)         (2 + (2 + K)/N)·Ψ
//   stage 3 (+ parameters)        (2 + 2 + K)·Ψ / N
// Ψ is what one model-parallel rank holds (the model divided by TP and PP, experts by EP);
// temporary buffers, fragmentation and the gathered parameters of ZeRO-3 are not included.
//
// Activations (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
// Models", MLSys 2023, §4 and Table 2), for one GPT layer (a heads, MLP 4h, dropout, 16-bit
// activations, 1-byte dropout masks), sequence s, micro-batch b, hidden h, tensor parallel t:
//   attention block: 11·sbh + 5·as²b
//     QKV input 2sbh, Q and K for QKᵀ 4sbh, softmax output 2as²b, its dropout mask as²b,
//     dropout output 2as²b, V 2sbh, output-projection input 2sbh, output dropout mask sbh
//   MLP block: 19·sbh
//     first linear's input 2sbh, GeLU input 8sbh, GeLU output 8sbh, dropout mask sbh
//   two LayerNorm inputs: 4·sbh
//   total sbh·(34 + 5as/h)
// With TP, the tensors inside the TP regions split t ways (Q, K, V, the out-projection input,
// the GeLU input and output, the as² terms: 24sbh + 5as²b); the LayerNorm inputs, the inputs of
// the first linears and the dropout masks after them (10sbh) stay replicated:
//   TP                                sbh·(10 + 24/t + 5as/(ht))
//   TP + SP (those 10sbh split too)   sbh·(34 + 5as/h) / t
//   TP + selective recomputation      sbh·(10 + 24/t)       (the as² terms are recomputed)
//   TP + SP + selective               sbh·34 / t
//   full recomputation                2·sbh                 (only the layer's input is kept)
// t = 1 gives the no-parallelism rows. The paper's full-recomputation row is 2sbh whatever t;
// with SP, Megatron keeps the sequence-parallel shard of the input, 2sbh/t — this function
// follows the paper. Context parallelism divides s: pass s/cp.
// These closed forms hold for a GPT layer only. The iteration sums what each operator keeps
// (ModelOperator::saved in layer_operators.h), which covers gated MLPs, GQA, MoE and MLA too
// and equals these forms for a GPT layer with dropout (tested): they are its reference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "units/units.h"

namespace parallax {

enum class ZeroStage : uint8_t { kStage0, kStage1, kStage2, kStage3 };

/// ZeRO's optimizer bytes per parameter for mixed-precision Adam.
inline constexpr double kAdamOptimizerBytesPerParameter = 12.0;

/// Model-state bytes per GPU: `parameters` Ψ held by this model-parallel rank, `data_parallel`
/// N ≥ 1 ranks sharing the optimizer (and more, by stage), K optimizer bytes per parameter.
/// Throws std::invalid_argument for N < 1 or negative Ψ or K.
Bytes zero_model_state_bytes(double parameters, ZeroStage stage, int data_parallel,
                             double optimizer_bytes_per_parameter = kAdamOptimizerBytesPerParameter);

/// kSelective: Megatron's selective recomputation (the attention core). kSelectiveOp: PyTorch's
/// selective checkpointing by operator, torchtitan's "op" policy (MicroBatch::op_checkpointing in
/// model/layer_operators.h); the closed forms below do not cover it.
enum class Recomputation : uint8_t { kNone, kSelective, kFull, kSelectiveOp };
/// "none", "selective", "full", "selective_op".
const char* to_string(Recomputation r);
/// Parses the names above; nullopt for another.
std::optional<Recomputation> recomputation_from(const std::string& name);

/// Korthikanti et al.'s activation bytes of one GPT layer for one micro-batch (Table 2).
/// s sequence length (per CP rank), b micro-batch, h hidden, a heads, t tensor parallel ≥ 1.
/// Throws std::invalid_argument for non-positive sizes and for kSelectiveOp.
Bytes activation_bytes_per_layer(double s, double b, double h, double a, int t, bool sequence_parallel,
                                 Recomputation recomputation);

/// The same layer with FlashAttention (Dao et al. 2022), whose kernel never writes the s×s
/// scores, their softmax or its dropout mask: it keeps its output and the softmax's row
/// statistics (one fp32 log-sum-exp per token and head, 4·a·s·b/t bytes). So without
/// recomputation a layer holds selective recomputation's sbh·(10 + 24/t) (sbh·34/t with SP)
/// plus those statistics; selective recomputation saves nothing more; full is unchanged.
Bytes flash_activation_bytes_per_layer(double s, double b, double h, double a, int t, bool sequence_parallel,
                                       Recomputation recomputation);

}  // namespace parallax
