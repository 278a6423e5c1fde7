// The time of one operator on one GPU: a roofline with achieved efficiencies, plus a fixed
// launch overhead per kernel, and never less than the host's time to issue the kernels that it
// can only issue one by one.
//
//   t = max( max(FLOPs / (peak(dtype) · η_compute),  bytes / (B_HBM · η_memory))  +  kernels · t_launch,
//            host_issued · t_host )
//
// η_compute depends on the operator kind:
// - GEMM: the GemmEfficiency model (closed-form by shape, or a measured table);
// - attention, the fused kernel of a GPU with asynchronous tensor cores (cuDNN's, or
//   FlashAttention-3/4, on Hopper and Blackwell), per pass:
//     η = F · k / (k + k½) · φ / (φ + c · P / X)
//   k the keys each query row is scored against (s/2 causal, about w under a sliding window), φ
//   the kernel's FLOPs per exponential (one per query-key pair: 2(d_qk + d_v) forward, 2.5 times
//   that backward), P / X the FLOPs the tensor cores do in the time the special-function units
//   take for one exponential (the GPU's dense peak over its `exponentials`). The first factor is
//   each row's fixed work (loading its queries, rescaling, writing its output and statistics,
//   the masked diagonal) against its keys; the second, the exponentials the tensor cores wait
//   for, which is why head dimension 64 runs slower than 128, Blackwell Ultra's doubled
//   exponential rate speeds the forward pass more than the backward, and a 128-token window
//   reaches a tenth of the peak. Forward F = 1.000, k½ = 989, c = 0.40; backward F = 0.652,
//   k½ = 676, c = 0.54: fitted once (tools/fit-attention.py; F at most 1) to cuDNN's published
//   rates on H200, GB200 and GB300 (tests/data/compute/cudnn-sdpa/: cudnn-frontend's SDPA
//   training benchmark, bf16, Llama 3.1, DeepSeek-V3, Kimi K2.6, Qwen3.5 and GPT-OSS shapes at
//   2k–32k tokens, LTX-2's and Wan 2.2's at 6k–76k; 115 forward and 105 backward rows): median
//   |error| 5.9 % and 6.7 %; each model's shapes held out in turn, 5–12 %, but GPT-OSS's
//   128-token window with head dimension 64, the farthest from the rest, 49 % forward and 24 %
//   backward (docs/performance-and-accuracy.md). On the same rows the shape form below is
//   30–41 % too slow forward without a window (its median per GPU), and 5–9 times too fast
//   under the 128-token window; rms log error 0.60 against 0.11. It is not the default
//   (AttentionModel::kCudnn, `--attention-model cudnn`): the published training runs ran older
//   kernels as well, and with it the hold-out error rises from 11.4 to 11.9 %, all of it
//   NeMo's 2024 H100 long-context runs (16k–1M tokens: 8 % too fast at 16k, 18–39 % beyond),
//   where the shape form is within 6 %.
// - attention, any other kernel (Ampere's FlashAttention-2, FlashAttention-2 on Hopper, or an
//   operator that does not give k and φ), or any kernel when the job sets η_attention itself:
//   ShapeEfficiency's closed form with F = η_attention, on the per-head Q·Kᵀ shape
//   (W and d) and with ShapeEfficiency's default constants. η_attention = 0.55 by default:
//   FlashAttention-2 reaches 50–73 % of A100's dense peak forward and less backward (Dao 2023),
//   FlashAttention-3 up to 75 % of H100's bf16 peak forward (Shah et al. 2024), and backward
//   kernels sit well below their forward; 0.55 stands for a forward+backward mix on Hopper.
//   That is the GPU's own fused attention (FlashAttention-2 on Ampere, FlashAttention-3 or
//   cuDNN on Hopper and Blackwell). FlashAttention-2 itself (OperatorCost::warp_mma_only) uses
//   Ampere's warp-level mma.sync and neither wgmma nor TMA, so on GPUs with asynchronous tensor
//   cores it reaches ρ = (338 / 989.4) / (203 / 312) = 0.525 of the share it reaches on A100:
//   Dao 2023 (FlashAttention-2, arXiv:2307.08691; the benchmark figures of its repository,
//   assets/flash2_{a100,h100}_fwd_bwd_benchmark.png) measures the same kernels forward+backward
//   at up to 203 TFLOP/s on A100 (312 peak) and 338 on H100 SXM (989.4 peak), both at 16k
//   tokens, head dimension 128, no mask; the median of the 21 shapes both figures label
//   (causal or not, head dimension 64 or 128, 512–16k tokens) is the same 0.525 (0.505–0.547).
//   (The paper's 225 TFLOP/s on A100 is end-to-end GPT training, not the kernel.)
//   A measurement file with attention lines (MeasuredGemmTable, measured_attention_table.h)
//   replaces this closed form with the measured kernels' rates.
// - memory-bound: the fp32 vector peak (such kernels are limited by bytes; the FLOP term only
//   matters for an unusually arithmetic-heavy elementwise kernel).
// η_memory = 0.90: copy benchmarks on H100/H200 reach about 90 % of the datasheet HBM bandwidth
// (e.g. ~3.0 of 3.35 TB/s on H100 SXM). t_launch = 2 µs: the usual gap between dependent kernels
// on one stream without CUDA graphs is a few microseconds; calibrate it for a given software stack.
// The roofline assumes compute and memory traffic overlap perfectly inside a kernel and that
// nothing else runs on the GPU; contention with communication kernels is the caller's business.
//
// t_host = 55 µs: the host's time to issue one GEMM whose shape it learns only at run time — a
// MoE layer's per-expert GEMMs (layer_operators.h, ExpertGemms::kPerExpert): Transformer
// Engine's GroupedLinear reads the experts' row counts back from the GPU (`m_splits.tolist()`,
// a synchronisation), quantises each expert's rows into tensors of their own, and then, per
// expert, builds cuBLASLt descriptors, queries cuBLASLt's heuristic and launches the matmul
// (transformer_engine/common/gemm/cublaslt_gemm.cu, multi_stream_cublas_gemm). The GPU runs
// each GEMM while the host prepares the next, so the slower of the two sets the pace: many
// small experts per GPU (DeepSeek-V3 on ep 8: 32 per GPU) are host-bound, a few large ones are
// not. Fitted once, as one global constant, on the Megatron-Bridge MoE dev rows
// (workloads/validation/mbridge-deepseek-v3-dev.json and mbridge-qwen3-moe-dev.json: 35 rows, 32
// of them issued per expert; MAPE 21.8 % → 10.6 %); fitted on either model alone it is 45
// (Qwen3) or 60 µs (DeepSeek-V3), and the other model's error falls with it
// (docs/performance-and-accuracy.md).
// A device-side grouped GEMM or a CUDA graph of the experts has no such term.
//
// t_dispatch = 74 µs: the host's time to issue one kernel of an operator from an eager framework
// (Python, autograd, the dispatcher, the module's small bias, dropout and copy kernels folded into
// the operator, the launch). Small layers on fast GPUs run at the host's pace, not the GPU's
// (issued_stream_time below). Fitted once, as one global constant, on vTrain's 1,440 single-node
// runs (GPT of 12–24 layers, hidden 1,024 and 2,048, on 2–8 A100s under Megatron-DeepSpeed:
// workloads/validation/vtrain-a100-single-node.json), where GPUs wait for the host: MAPE 70.6 % →
// 7.8 %, with σ unchanged (docs/performance-and-accuracy.md). 0 for a stack that replays its
// kernels from a CUDA graph. An operator whose kernels are one routine's small PyTorch ops (the
// MoE router run unfused, GPT-OSS's eager clamp) says how many dispatches it takes
// (OperatorCost::host_dispatches), its ops folded as a module's are.
//
// σ, the sustained fraction: every kernel runs at σ times the speed above, which is what a
// kernel reaches alone in a benchmark. Inside a training step kernels lose speed to what no
// per-kernel benchmark shows: clocks held down by the power limit on real (not constant) data,
// caches and TLBs shared with their neighbours, the framework's small kernels, copies and
// synchronisations between the modelled ones. σ = 0.74 is fitted once, not per run, to the
// published runs of workloads/validation/dev-runs.json (A100, 2021–2024, Megatron-LM, DeepSpeed
// and PyTorch FSDP), with each GPU's GEMMs at its own measured matmul ceiling
// (gemm_efficiency.h): fitted on any two of its three sources it is 0.73–0.75, and the third
// source's error falls with it; the H100 and Blackwell runs outside that set were not used
// (docs/performance-and-accuracy.md, the sustained fraction). σ = 1 gives the stand-alone
// kernel model; a cluster's own measured iteration gives the figure for its software stack
// (fit_sustained_fraction in training/iteration.h, `parallax train --measured-step`).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "compute/gemm_efficiency.h"
#include "compute/operator_cost.h"
#include "topology/topology.h"

namespace parallax {

/// t_host of the header: the host's time to issue one GEMM whose shape it reads back from the GPU.
inline constexpr Time kHostGemmIssue = Time::us(55);
/// t_dispatch of the header: the host's time to issue one kernel from an eager framework.
inline constexpr Time kHostDispatch = Time::us(74);

/// Which closed form times fused attention kernels on Hopper and Blackwell (header).
enum class AttentionModel {
  kShape,  ///< η_attention and the shape saturation, as every other attention kernel (the default)
  kCudnn,  ///< the form fitted to cuDNN 9.19–9.22's published kernel rates
};
/// "shape" or "cudnn"; nullopt for anything else.
std::optional<AttentionModel> attention_model_named(std::string_view name);
const char* attention_model_name(AttentionModel model);

struct ComputeModelOptions {
  double memory_efficiency = 0.90;     ///< η_memory, in (0, 1]
  /// η_attention, in (0, 1]: when given, every attention kernel takes the shape form at this
  /// share, whatever attention_model says (header); nullopt: 0.55 where the shape form applies.
  std::optional<double> attention_efficiency;
  AttentionModel attention_model = AttentionModel::kShape;
  Time kernel_launch_overhead = Time::us(2);
  /// The host's time to issue one GEMM whose shape it learns only at run time (header).
  Time host_gemm_issue = kHostGemmIssue;
  /// The host's time to issue one kernel of any other operator (header), for issued_stream_time.
  Time host_dispatch = kHostDispatch;
  double sustained_fraction = 0.74;    ///< σ, in (0, 1]
};

/// Where an operator's time went.
struct OperatorTiming {
  Time total;     ///< max(max(compute, memory) + launch, host)
  Time compute;   ///< FLOPs at the achieved rate, σ included
  Time memory;    ///< bytes at the achievable HBM bandwidth, σ included
  Time launch;    ///< kernels × launch overhead
  Time host;      ///< host-issued kernels × the host's issue time
  Time device;    ///< max(compute, memory) + launch: the GPU's own time
  Time issue;     ///< the host's time to issue all the kernels: `host`, plus the others × t_dispatch
  FlopRate rate;  ///< the achieved compute rate used (stand-alone, before σ)
  bool memory_bound() const { return memory > compute; }
};

/// ρ of the header: FlashAttention-2's share of the peak on a GPU with asynchronous tensor cores
/// over its share on A100 (Dao 2023's measured maxima, forward+backward, at the same shape).
inline constexpr double kWarpMmaAttentionShare = (338.0 / 989.4) / (203.0 / 312.0);
/// η_attention of the header's older closed form, where the job does not set it.
inline constexpr double kAttentionEfficiency = 0.55;

/// F, k½ and c of the header's fused attention form, for one pass.
struct FusedAttentionConstants {
  double peak_share;        ///< F
  double half_keys;         ///< k½
  double exponential_cost;  ///< c
};
inline constexpr FusedAttentionConstants kFusedAttentionForward{1.000, 989.0, 0.40};
inline constexpr FusedAttentionConstants kFusedAttentionBackward{0.652, 676.0, 0.54};

/// The header's fused form: the share of `gpu`'s peak for `op`'s dtype that the fused attention
/// kernel `op` (keys_per_query and flops_per_exponential given) reaches alone. A GPU without an
/// `exponentials` figure takes 16 a clock per SM at the clock its bf16 peak implies (4,096 dense
/// FLOPs a clock per SM on Hopper, 8,192 on Blackwell).
double fused_attention_efficiency(const OperatorCost& op, const GpuSpec& gpu);

class ComputeModel {
 public:
  /// `gemm` null means ShapeEfficiency{}. Throws std::invalid_argument when an efficiency is
  /// outside (0, 1], the launch overhead is negative, or the GPU has no bf16 peak or no HBM
  /// bandwidth.
  explicit ComputeModel(GpuSpec gpu, ComputeModelOptions options = {},
                        std::shared_ptr<const GemmEfficiency> gemm = nullptr);

  /// The operator's time on this GPU.
  Time time(const OperatorCost& op) const { return timing(op).total; }
  OperatorTiming timing(const OperatorCost& op) const;
  /// The compute rate an operator achieves alone (before the memory bound and σ).
  FlopRate compute_rate(const OperatorCost& op) const;
  /// The achievable HBM bandwidth alone, B_HBM · η_memory (before σ).
  Bandwidth memory_bandwidth() const;
  /// The bandwidth `op`'s memory traffic moves at alone: memory_bandwidth(), or less for a
  /// latency-bound kernel on a GPU whose SMs cannot keep enough bytes in flight
  /// (OperatorCost::per_sm_bandwidth × SMs).
  Bandwidth memory_bandwidth(const OperatorCost& op) const;

  const GpuSpec& gpu() const { return gpu_; }
  const ComputeModelOptions& options() const { return options_; }
  const GemmEfficiency& gemm_efficiency() const { return *gemm_; }

 private:
  GpuSpec gpu_;
  ComputeModelOptions options_;
  std::shared_ptr<const GemmEfficiency> gemm_;
  ShapeEfficiencyParams attention_shape_;  // only its half-saturation constants are used
};

/// A pass of operators issued in order by one host thread onto one stream, the host and the GPU
/// in step at its start: the GPU starts an operator once the host has issued its first kernel
/// and runs its last kernel (an even share of its time) no sooner than the host has issued that,
/// while the host issues ahead of the GPU as far as it can. An operator with
/// host-issued kernels (a MoE layer's per-expert GEMMs) makes the host wait for the GPU first, as
/// it reads their shapes back. Returns the pass's time: the sum of the operators' times when the
/// host keeps ahead (or t_dispatch is 0), the host's total when the GPU waits for it.
Time issued_stream_time(const ComputeModel& cm, std::span<const OperatorCost* const> ops);

}  // namespace parallax
