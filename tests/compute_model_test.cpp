// The compute model against its roofline: huge GEMMs run at peak × efficiency, elementwise
// kernels at the achievable HBM bandwidth; the closed-form efficiency's documented anchor
// (8192³ bf16 ≈ 790 TFLOP/s on H100); and the measured-table replacement, which must give back
// the measured points exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "compute/compute_model.h"
#include "compute/measured_gemm_table.h"
#include "io/input_error.h"
#include "test_support.h"

namespace parallax {
namespace {

// H100 SXM5 datasheet figures (dense), as in topologies/dgx-h100.json.
GpuSpec h100() {
  GpuSpec g;
  g.name = "H100-SXM5-80GB";
  g.fp32 = teraflops_per_second(67);
  g.tf32 = teraflops_per_second(494.7);
  g.bf16 = teraflops_per_second(989.4);
  g.fp16 = teraflops_per_second(989.4);
  g.fp8 = teraflops_per_second(1978.9);
  g.memory = gib(80);
  g.memory_bandwidth = gigabytes_per_second(3350);
  return g;
}

constexpr double kPeakBf16 = 989.4e12;
constexpr double kHbm = 3.35e12;
const Time kLaunch = Time::us(2);

// ceil(x · 1e12) picoseconds: the rounding of compute_time and transfer_time.
Time seconds_rounded_up(double s) { return Time::ps(static_cast<int64_t>(std::ceil(s * 1e12))); }

GemmShape cube(double n) { return GemmShape{n, n, n, 1}; }

// The closed form of gemm_efficiency.h, written out again: F · u / (1 + u · 2³⁰ / W), with
// u = d / (d + 32), W = m·n·k·batch, d = min(m, n, k).
double closed_form(double fraction, double m, double n, double k, double batch = 1) {
  const double d = std::min({m, n, k});
  const double u = d / (d + 32.0);
  return fraction * u / (1.0 + u * std::pow(2.0, 30) / (m * n * k * batch));
}

TEST(ShapeEfficiency, LargeSquareBf16GemmReachesTheDocumentedRate) {
  // 8192³: u = 8192/8224 = 0.99611, W½/W = 2⁻⁹ → 0.80 · 0.99611 / 1.001946 = 0.7953;
  // × 989.4 TFLOP/s = 786.9 TFLOP/s, within 1 % of the ~790 that public benchmarks measure.
  ShapeEfficiency model;
  const double u = 8192.0 / 8224.0;
  EXPECT_DOUBLE_EQ(model.efficiency(cube(8192)), 0.80 * u / (1.0 + u / 512.0));
  EXPECT_NEAR(model.achieved_rate(cube(8192), DType::kBf16, h100()).value(), 790e12, 0.01 * 790e12);
}

TEST(ShapeEfficiency, AMeasuredMatmulCeilingSetsThePeakFraction) {
  // GB200's measured ceilings (1822 of 2500 TFLOP/s bf16, 3615.6 of 5000 fp8) replace F = 0.80:
  // F = 0.7288 and 0.72312 in the same closed form; fp16 takes the bf16 figure; a dtype with
  // no figure (tf32) keeps 0.80.
  GpuSpec gpu = h100();
  gpu.bf16 = gpu.fp16 = teraflops_per_second(2500);
  gpu.fp8 = teraflops_per_second(5000);
  gpu.achievable_bf16 = teraflops_per_second(1822);
  gpu.achievable_fp8 = teraflops_per_second(3615.6);
  ShapeEfficiency model;
  EXPECT_DOUBLE_EQ(model.peak_fraction(DType::kBf16, gpu), 1822.0 / 2500.0);
  EXPECT_DOUBLE_EQ(model.peak_fraction(DType::kFp16, gpu), 1822.0 / 2500.0);
  EXPECT_DOUBLE_EQ(model.peak_fraction(DType::kFp8, gpu), 3615.6 / 5000.0);
  EXPECT_DOUBLE_EQ(model.peak_fraction(DType::kTf32, gpu), 0.80);
  EXPECT_NEAR(model.achieved_rate(cube(8192), DType::kBf16, gpu).value(),
              2500e12 * closed_form(1822.0 / 2500.0, 8192, 8192, 8192), 1.0);
  // Without a figure, the default.
  EXPECT_DOUBLE_EQ(model.peak_fraction(DType::kBf16, h100()), 0.80);
}

TEST(ShapeEfficiency, HopperFp8TakesOneFastAccumulatingForwardAndTwoPreciseBackwards) {
  // H100's fp8 ceiling (1402.6 of 1978.9, measured without fast accumulation): a training step's
  // forward GEMM runs 1.08 times faster with it, its two backward GEMMs do not, so the three
  // take 1/1.08 + 2 ceiling-times for 3: F = 0.70878 · 3/(1/1.08 + 2) = 0.72672. Blackwell has
  // no such mode, and bf16 is untouched.
  GpuSpec gpu = h100();
  gpu.architecture = "hopper";
  gpu.achievable_bf16 = teraflops_per_second(794.5);
  gpu.achievable_fp8 = teraflops_per_second(1402.6);
  ShapeEfficiency model;
  const double ceiling = 1402.6 / 1978.9;
  EXPECT_NEAR(model.peak_fraction(DType::kFp8, gpu), ceiling * 3.0 / (1.0 / 1.08 + 2.0), 1e-12);
  EXPECT_NEAR(model.peak_fraction(DType::kFp8, gpu), 0.72672, 1e-5);
  EXPECT_DOUBLE_EQ(model.peak_fraction(DType::kBf16, gpu), 794.5 / 989.4);
  gpu.architecture = "blackwell";
  EXPECT_DOUBLE_EQ(model.peak_fraction(DType::kFp8, gpu), ceiling);
}

TEST(ShapeEfficiency, SmallAndSkinnyProductsAreLessEfficient) {
  ShapeEfficiency model;
  EXPECT_LT(model.efficiency(cube(128)), model.efficiency(cube(1024)));
  EXPECT_LT(model.efficiency(cube(1024)), model.efficiency(cube(4096)));
  EXPECT_LT(model.efficiency(cube(4096)), model.efficiency(cube(8192)));
  // 1024³ is the half-volume point: u = 1024/1056, 0.80 · u / (1 + u) = 0.3939 (about half of F).
  const double u = 1024.0 / 1056.0;
  EXPECT_DOUBLE_EQ(model.efficiency(cube(1024)), 0.80 * u / (1.0 + u));
  // Same volume (2³³), one dimension of 16 instead of 2048: lower, by the closed form.
  GemmShape square = cube(2048);
  GemmShape skinny{16, 2048, 2048 * 128, 1};
  ASSERT_DOUBLE_EQ(square.volume(), skinny.volume());
  EXPECT_LT(model.efficiency(skinny), 0.5 * model.efficiency(square));
  EXPECT_DOUBLE_EQ(model.efficiency(skinny), closed_form(0.80, 16, 2048, 2048 * 128));
  // Grouped products count every group's volume.
  EXPECT_GT(model.efficiency(GemmShape{1024, 1024, 1024, 8}), model.efficiency(cube(1024)));
  EXPECT_DOUBLE_EQ(model.efficiency(GemmShape{1024, 1024, 1024, 8}), closed_form(0.80, 1024, 1024, 1024, 8));
}

// The kernel model alone, as a benchmark would see each kernel (σ = 1).
ComputeModelOptions standalone() {
  ComputeModelOptions o;
  o.sustained_fraction = 1.0;
  return o;
}

TEST(ComputeModel, HugeGemmIsComputeBoundAtPeakTimesEfficiency) {
  ComputeModel model(h100(), standalone());
  const OperatorCost op = gemm_cost(cube(32768), DType::kBf16);
  // FLOPs 2·32768³ = 7.037e13; efficiency 0.80 · u / (1 + u · 2⁻¹⁵), u = 32768/32800 → 0.79920.
  const double flops = 2.0 * std::pow(32768.0, 3);
  ASSERT_DOUBLE_EQ(op.flops.value(), flops);
  const double eff = closed_form(0.80, 32768, 32768, 32768);
  const OperatorTiming t = model.timing(op);
  EXPECT_FALSE(t.memory_bound());
  EXPECT_NEAR(t.rate.value(), kPeakBf16 * eff, kPeakBf16 * 1e-12);
  EXPECT_EQ(t.total, seconds_rounded_up(flops / (kPeakBf16 * eff)) + kLaunch);
  // Bytes: 3 · 32768² · 2 = 6.4 GB at 0.9 · 3.35 TB/s = 2.1 ms, against 89 ms of compute.
  EXPECT_LT(t.memory.seconds(), 0.05 * t.compute.seconds());
  // Never faster than the datasheet peak, and at least 79 % of it.
  EXPECT_GT(t.compute.seconds(), flops / kPeakBf16);
  EXPECT_LT(t.compute.seconds(), flops / (0.79 * kPeakBf16));
}

TEST(ComputeModel, ElementwiseOpIsMemoryBoundAtHbmBandwidth) {
  ComputeModel model(h100(), standalone());
  // A residual add on 2²⁸ bf16 elements: read two, write one → 3 · 2²⁸ · 2 B = 1.5 GiB, one
  // FLOP per element. Memory: 1.61e9 B / (0.9 · 3.35e12 B/s) = 534 µs; the FLOPs take 4 µs at
  // the 67 TFLOP/s vector peak.
  const double elements = std::pow(2.0, 28);
  const double bytes = 3 * elements * 2;
  const OperatorCost op = memory_bound_cost(Bytes(bytes), Flops(elements));
  const OperatorTiming t = model.timing(op);
  EXPECT_TRUE(t.memory_bound());
  EXPECT_EQ(t.memory, seconds_rounded_up(bytes / (0.9 * kHbm)));
  EXPECT_EQ(t.total, t.memory + kLaunch);
  EXPECT_DOUBLE_EQ(model.memory_bandwidth().value(), 0.9 * kHbm);
}

TEST(ComputeModel, LatencyBoundKernelsMoveNoMoreThanTheirSmsKeepInFlight) {
  // The same 1.5 GiB of traffic from a kernel whose SMs each move 10 GB/s: on 132 SMs that is
  // 1.32 TB/s, under the 0.9 · 3.35 TB/s that HBM gives a streaming kernel, so 1.22 ms.
  const double bytes = 3 * std::pow(2.0, 28) * 2;
  OperatorCost op = memory_bound_cost(Bytes(bytes));
  op.per_sm_bandwidth = gigabytes_per_second(10);
  GpuSpec gpu = h100();
  gpu.sms = 132;
  const ComputeModel model(gpu, standalone());
  EXPECT_DOUBLE_EQ(model.memory_bandwidth(op).value(), 132 * 10e9);
  EXPECT_EQ(model.timing(op).memory, seconds_rounded_up(bytes / (132 * 10e9)));
  // With 400 SMs they could move 4 TB/s: HBM bounds them again.
  gpu.sms = 400;
  EXPECT_DOUBLE_EQ(ComputeModel(gpu, standalone()).memory_bandwidth(op).value(), 0.9 * kHbm);
  // A GPU whose SM count is not known: HBM alone, as for every other kernel.
  EXPECT_DOUBLE_EQ(ComputeModel(h100(), standalone()).memory_bandwidth(op).value(), 0.9 * kHbm);
}

TEST(ComputeModel, DecodeGemmIsMemoryBound) {
  ComputeModel model(h100(), standalone());
  // 1 × 8192 × 8192 bf16 (one token through a square weight): bytes (8192 + 8192² + 8192) · 2
  // = 1.3425e8 take 44.5 µs at 0.9 · 3.35 TB/s. Compute: W = 2²⁶, u = 1/33,
  // η = 0.8 · u / (1 + 16u) = 0.01633 → 16.2 TFLOP/s, 1.34e8 FLOPs in 8.3 µs. Memory wins.
  const OperatorCost op = gemm_cost(GemmShape{1, 8192, 8192, 1}, DType::kBf16);
  const OperatorTiming t = model.timing(op);
  EXPECT_TRUE(t.memory_bound());
  const double bytes = (8192.0 + 8192.0 * 8192.0 + 8192.0) * 2.0;
  EXPECT_EQ(t.total, seconds_rounded_up(bytes / (0.9 * kHbm)) + kLaunch);
  EXPECT_NEAR(t.rate.value(), kPeakBf16 * closed_form(0.80, 1, 8192, 8192), 1.0);
}

TEST(ComputeModel, SustainedFractionSlowsEveryKernelButNotItsLaunch) {
  ComputeModel alone(h100(), standalone());
  ComputeModel in_step(h100());  // σ = 0.74 by default
  EXPECT_DOUBLE_EQ(in_step.options().sustained_fraction, 0.74);
  // Compute-bound (8192³) and memory-bound (a 1 GiB copy) alike: the kernel's own time is
  // divided by σ (to the picosecond the rounding allows); the launch gap is not.
  for (const OperatorCost& op : {gemm_cost(cube(8192), DType::kBf16), memory_bound_cost(gib(1.0))}) {
    const OperatorTiming a = alone.timing(op), s = in_step.timing(op);
    const double kernel_alone = std::max(a.compute, a.memory).seconds();
    EXPECT_NEAR((s.total - kLaunch).seconds(), kernel_alone / 0.74, 2e-12);
    EXPECT_EQ(s.launch, a.launch);
    EXPECT_EQ(s.rate, a.rate);  // the stand-alone rate is what the report shows
  }
  ComputeModelOptions bad;
  bad.sustained_fraction = 0.0;
  EXPECT_THROW(ComputeModel(h100(), bad), std::invalid_argument);
  bad.sustained_fraction = 1.5;
  EXPECT_THROW(ComputeModel(h100(), bad), std::invalid_argument);
}

TEST(ComputeModel, AttentionUsesTheAttentionEfficiency) {
  ComputeModel model(h100());
  // Per-head Q·Kᵀ of 4096 × 4096 × 128 for 2 sequences × 32 heads: W = 2¹²·2¹²·2⁷·2⁶ = 2³⁷,
  // u = 128/160 = 0.8 → 0.55 · 0.8 / (1 + 0.8 · 2⁻⁷) = 0.4373 of the bf16 peak.
  OperatorCost op;
  op.kind = OperatorKind::kAttention;
  op.shape = GemmShape{4096, 4096, 128, 64};
  op.flops = Flops(4.0 * 2 * 4096.0 * 4096.0 * 4096.0 * 0.5);
  const double expected_rate = kPeakBf16 * 0.55 * 0.8 / (1.0 + 0.8 / 128.0);
  EXPECT_NEAR(model.compute_rate(op).value(), expected_rate, expected_rate * 1e-12);
}

// FlashAttention-2 (warp-level mma.sync) on a GPU with asynchronous tensor cores: F = 0.55 · ρ,
// ρ = (338 / 989.4) / (203 / 312) = 0.5251 (Dao 2023's kernel benchmarks, forward+backward, the
// same shape on both GPUs); on Ampere, or a GPU of no stated
// architecture, the same as the GPU's own kernel.
TEST(ComputeModel, FlashAttention2LeavesAsynchronousTensorCoresIdle) {
  OperatorCost op;
  op.kind = OperatorKind::kAttention;
  op.shape = GemmShape{4096, 4096, 128, 64};
  op.flops = Flops(1e12);
  OperatorCost fa2 = op;
  fa2.warp_mma_only = true;
  EXPECT_NEAR(kWarpMmaAttentionShare, 0.5251, 1e-4);
  const double u = 0.8;
  const double f = 0.55 * kWarpMmaAttentionShare;
  const double expected_rate = kPeakBf16 * f * u / (1.0 + u / 128.0);
  GpuSpec hopper = h100();
  hopper.architecture = "hopper";
  EXPECT_NEAR(ComputeModel(hopper).compute_rate(fa2).value(), expected_rate, expected_rate * 1e-12);
  EXPECT_EQ(ComputeModel(hopper).compute_rate(op).value(), ComputeModel(h100()).compute_rate(op).value());
  GpuSpec blackwell = h100();
  blackwell.architecture = "blackwell";
  EXPECT_NEAR(ComputeModel(blackwell).compute_rate(fa2).value(), expected_rate, expected_rate * 1e-12);
  for (const char* arch : {"ampere", "ada", ""}) {
    GpuSpec g = h100();
    g.architecture = arch;
    EXPECT_EQ(ComputeModel(g).compute_rate(fa2).value(), ComputeModel(g).compute_rate(op).value()) << arch;
  }
}

TEST(ComputeModel, LaunchOverheadIsPaidPerKernel) {
  ComputeModel model(h100());
  OperatorCost op = memory_bound_cost(Bytes(0));
  op.kernels = 3;
  EXPECT_EQ(model.time(op), Time::us(6));
  op.kernels = 0;
  EXPECT_EQ(model.time(op), Time::zero());
  ComputeModelOptions graphs;
  graphs.kernel_launch_overhead = Time::zero();
  op.kernels = 3;
  EXPECT_EQ(ComputeModel(h100(), graphs).time(op), Time::zero());
}

TEST(ComputeModel, HostIssuedKernelsTakeAtLeastTheHostsTime) {
  // A grouped GEMM issued expert by expert: t = max(max(compute, memory) + kernels·t_launch,
  // host_issued·t_host). 32 tiny GEMMs are host-bound (32·55 µs), 32 huge ones GPU-bound.
  ComputeModel model(h100());
  OperatorCost tiny = gemm_cost(GemmShape{16, 64, 64, 32}, DType::kBf16);
  tiny.kernels = tiny.host_issued_kernels = 32;
  EXPECT_EQ(model.timing(tiny).host, Time::us(32 * 55));
  EXPECT_EQ(model.time(tiny), Time::us(32 * 55));
  OperatorCost huge = gemm_cost(GemmShape{8192, 8192, 8192, 32}, DType::kBf16);
  const Time alone = model.time(huge);
  huge.kernels = huge.host_issued_kernels = 32;
  EXPECT_EQ(model.time(huge), alone + Time::us(31 * 2));  // only the 31 further launches
  ComputeModelOptions no_host;
  no_host.host_gemm_issue = Time::zero();
  EXPECT_EQ(ComputeModel(h100(), no_host).time(tiny), ComputeModel(h100(), no_host).timing(tiny).compute +
                                                            Time::us(32 * 2));
}

// A pass issued by the host onto one stream (issued_stream_time). Every kernel costs the host
// t_dispatch to issue; the GPU starts an operator once its first kernel is issued.
TEST(IssuedStream, SumsTheKernelsWhenTheHostKeepsAhead) {
  // Without t_dispatch the pass is the sum of its operators' times, host-issued GEMMs included.
  ComputeModelOptions no_dispatch;
  no_dispatch.host_dispatch = Time::zero();
  const ComputeModel model(h100(), no_dispatch);
  OperatorCost experts = gemm_cost(GemmShape{16, 64, 64, 32}, DType::kBf16);
  experts.kernels = experts.host_issued_kernels = 32;
  const OperatorCost big = gemm_cost(GemmShape{8192, 8192, 8192}, DType::kBf16);
  const OperatorCost norm = memory_bound_cost(Bytes(64e6));
  const std::vector<const OperatorCost*> pass{&big, &experts, &norm, &big};
  EXPECT_EQ(issued_stream_time(model, pass), model.time(big) * 2 + model.time(experts) + model.time(norm));
  // With it, kernels far longer than t_dispatch: only the first kernel's issue is exposed.
  const ComputeModel eager(h100());
  const std::vector<const OperatorCost*> gemms{&big, &big, &big};
  EXPECT_EQ(issued_stream_time(eager, gemms), kHostDispatch + eager.time(big) * 3);
}

TEST(IssuedStream, TinyKernelsRunAtTheHostsPace) {
  // n kernels each shorter than t_dispatch: the GPU runs each as soon as it is issued, so the
  // pass takes n·t_dispatch + the last kernel's time; a two-kernel operator (a GEMM's backward)
  // costs the host two dispatches, and its second kernel, half its time, runs after the second.
  const ComputeModel eager(h100());
  const OperatorCost tiny = memory_bound_cost(Bytes(1e3));
  ASSERT_LT(eager.time(tiny), kHostDispatch);
  const std::vector<const OperatorCost*> pass(10, &tiny);
  EXPECT_EQ(issued_stream_time(eager, pass), kHostDispatch * 10 + eager.time(tiny));
  OperatorCost two = tiny;
  two.kernels = 2;
  EXPECT_EQ(eager.timing(two).issue, kHostDispatch * 2);
  const std::vector<const OperatorCost*> pairs(5, &two);
  EXPECT_EQ(issued_stream_time(eager, pairs), kHostDispatch * 10 + Time::ps(eager.timing(two).device.picoseconds() / 2));
  // A run of small PyTorch ops folded into one routine (an unfused MoE router): each kernel
  // pays its launch on the GPU, the host one dispatch for the routine; none from a CUDA graph.
  OperatorCost routine = tiny;
  routine.kernels = 24;
  routine.host_dispatches = 1;
  EXPECT_EQ(eager.timing(routine).issue, kHostDispatch);
  EXPECT_EQ(eager.timing(routine).launch, Time::us(2) * 24);
  routine.graph_replayed = true;
  EXPECT_EQ(eager.timing(routine).issue, Time::zero());
}

TEST(IssuedStream, HostIssuedGemmsWaitForTheGpuFirst) {
  // The host reads the experts' row counts back before issuing their GEMMs: it cannot have
  // issued them ahead while the GPU ran the long GEMM before them. So: one dispatch, the long
  // GEMM, then 32 host issues (t_host each, longer than the tiny GEMMs), then the last norm's
  // dispatch (the host is ahead of the GPU no more) and the norm itself.
  const ComputeModel eager(h100());
  const OperatorCost big = gemm_cost(GemmShape{8192, 8192, 8192}, DType::kBf16);
  OperatorCost experts = gemm_cost(GemmShape{16, 64, 64, 32}, DType::kBf16);
  experts.kernels = experts.host_issued_kernels = 32;
  const OperatorCost norm = memory_bound_cost(Bytes(1e3));
  ASSERT_EQ(eager.time(experts), Time::us(32 * 55));
  const std::vector<const OperatorCost*> pass{&big, &experts, &norm};
  EXPECT_EQ(issued_stream_time(eager, pass),
            kHostDispatch + eager.time(big) + Time::us(32 * 55) + kHostDispatch + eager.time(norm));
}

TEST(ComputeModel, MissingTensorCorePathsFallBack) {
  GpuSpec g = h100();
  g.fp8 = FlopRate(0);
  g.tf32 = FlopRate(0);
  EXPECT_EQ(peak_rate(g, DType::kFp8), g.bf16);
  EXPECT_EQ(peak_rate(g, DType::kTf32), g.fp32);
  EXPECT_EQ(peak_rate(h100(), DType::kFp8), h100().fp8);
  // No fp4 tensor cores, no fp4 GEMM: the peak is zero, and training refuses it (below).
  EXPECT_EQ(peak_rate(h100(), DType::kFp4).value(), 0.0);
}

TEST(ComputeModel, RejectsNonsenseOptions) {
  ComputeModelOptions bad;
  bad.memory_efficiency = 1.5;
  EXPECT_THROW(ComputeModel(h100(), bad), std::invalid_argument);
  GpuSpec no_hbm = h100();
  no_hbm.memory_bandwidth = Bandwidth(0);
  EXPECT_THROW(ComputeModel{no_hbm}, std::invalid_argument);
}

// ---------------------------------------------------------------- measured table

MeasuredGemmTable fixture_table() {
  return load_gemm_measurements(test::source_path("tests/data/compute/gemm-h100.jsonl"));
}

TEST(MeasuredGemmTable, ReproducesEveryMeasuredPointExactly) {
  MeasuredGemmTable table = fixture_table();
  // Six gemm lines; the meta, collective and memcpy lines and the blank line are skipped.
  ASSERT_EQ(table.measurements().size(), 6u);
  for (const MeasuredGemmRate& m : table.measurements()) {
    SCOPED_TRACE(std::string(to_string(m.dtype)) + " " + std::to_string(m.shape.m) + "x" +
                 std::to_string(m.shape.n) + "x" + std::to_string(m.shape.k));
    const FlopRate rate = table.achieved_rate(m.shape, m.dtype, h100());
    EXPECT_EQ(rate.value(), m.achieved.value());
    // The efficiency the harness reports, tflops / peak_tflops, comes back against the GPU's
    // own peak (the fixture's peak_tflops are the H100 datasheet's).
    EXPECT_DOUBLE_EQ(rate / peak_rate(h100(), m.dtype), m.achieved / m.peak);
  }
  EXPECT_EQ(table.achieved_rate(cube(8192), DType::kBf16, h100()).value(), 791e12);
  EXPECT_EQ(table.achieved_rate(GemmShape{16, 8192, 4096, 1}, DType::kBf16, h100()).value(), 95e12);
}

TEST(MeasuredGemmTable, InterpolatesInLogVolumeAndClampsOutside) {
  MeasuredGemmTable table = fixture_table();
  const GpuSpec gpu = h100();
  // 2048 × 2048 × 1024 = 2³² lies between the 1024³ (2³⁰, 420) and 2048³ (2³³, 610) points,
  // two thirds of the way in log volume: 420 + ⅔ · 190 = 546.67 TFLOP/s.
  EXPECT_NEAR(table.achieved_rate(GemmShape{2048, 2048, 1024, 1}, DType::kBf16, gpu).value(),
              (420.0 + 2.0 / 3.0 * 190.0) * 1e12, 1e3);
  // Beyond the largest volume: the 8192³ rate; below the smallest (2²⁹): the skinny point's.
  EXPECT_EQ(table.achieved_rate(cube(16384), DType::kBf16, gpu).value(), 791e12);
  EXPECT_EQ(table.achieved_rate(cube(8), DType::kBf16, gpu).value(), 95e12);
  // fp8 has one point: every fp8 shape gets it.
  EXPECT_EQ(table.achieved_rate(cube(1024), DType::kFp8, gpu).value(), 1350e12);
  // fp16 was not measured: the closed-form fallback answers.
  EXPECT_FALSE(table.covers(DType::kFp16));
  EXPECT_EQ(table.achieved_rate(cube(4096), DType::kFp16, gpu).value(),
            ShapeEfficiency().achieved_rate(cube(4096), DType::kFp16, gpu).value());
}

TEST(MeasuredGemmTable, ReplacesTheEfficiencyModelOfTheComputeModel) {
  auto table = std::make_shared<MeasuredGemmTable>(fixture_table());
  ComputeModel model(h100(), standalone(), table);
  // 4096³ measured at 745 TFLOP/s: 2 · 4096³ / 745e12 = 184.5 µs, plus the launch.
  const OperatorCost op = gemm_cost(cube(4096), DType::kBf16);
  EXPECT_EQ(model.time(op), seconds_rounded_up(2.0 * std::pow(4096.0, 3) / 745e12) + kLaunch);
  EXPECT_NE(model.gemm_efficiency().describe().find("measured GEMM table"), std::string::npos);
}

TEST(MeasuredGemmTable, Fp8FastAndPreciseAccumulationMakeOneTrainingRate) {
  // 4096³ at 1500 TFLOP/s with fast accumulation and 1000 without: the forward GEMM takes t/1500,
  // the two backward ones 2t/1000, so three GEMMs run at 3 / (1/1500 + 2/1000) = 1125 TFLOP/s.
  const std::string text =
      R"({"kind":"gemm","dtype":"fp8","m":4096,"n":4096,"k":4096,"fast_accum":true,"tflops":1500})" "\n"
      R"({"kind":"gemm","dtype":"fp8","m":4096,"n":4096,"k":4096,"tflops":1000})" "\n"
      R"({"kind":"gemm","dtype":"bf16","m":128,"n":4096,"k":7168,"batch":8,"tflops":300})" "\n"
      R"({"kind":"gemm","dtype":"bf16","m":1024,"n":4096,"k":7168,"tflops":600})" "\n";
  const MeasuredGemmTable table = parse_gemm_measurements(text, "moe.jsonl");
  EXPECT_NEAR(table.achieved_rate(cube(4096), DType::kFp8, h100()).value(), 1125e12, 1e3);
  // A grouped shape is its own point: 8 experts of 128 tokens is not one product of 1024 tokens,
  // though both have the same volume.
  EXPECT_EQ(table.achieved_rate(GemmShape{128, 4096, 7168, 8}, DType::kBf16, h100()).value(), 300e12);
  EXPECT_EQ(table.achieved_rate(GemmShape{1024, 4096, 7168, 1}, DType::kBf16, h100()).value(), 600e12);
  // Between them in volume the curve has one point for that volume: their mean.
  EXPECT_EQ(table.achieved_rate(GemmShape{2048, 2048, 7168, 1}, DType::kBf16, h100()).value(), 450e12);
}

// The attention core as layer_operators builds it for one sequence of s tokens, causal, on
// `heads` heads of dimension d: forward 2·(s²/2)·heads·2d FLOPs, backward 2.5 times that.
OperatorCost attention_op(double s, double d, double heads, bool backward, bool flash2) {
  OperatorCost op;
  op.kind = OperatorKind::kAttention;
  op.shape = GemmShape{s, s, d, heads};
  op.flops = Flops(2.0 * (s * s / 2) * heads * 2 * d * (backward ? 2.5 : 1.0));
  op.backward_pass = backward;
  op.warp_mma_only = flash2;
  return op;
}

const char* kAttentionLines =
    R"({"kind":"gemm","dtype":"bf16","m":4096,"n":4096,"k":4096,"tflops":700})" "\n"
    R"({"kind":"attention","kernel":"fused","pass":"forward","s_q":2048,"s_kv":2048,"d_qk":128,"tflops":500})" "\n"
    R"({"kind":"attention","kernel":"fused","pass":"forward","s_q":8192,"s_kv":8192,"d_qk":128,"tflops":600})" "\n"
    R"({"kind":"attention","kernel":"fused","pass":"backward","s_q":8192,"s_kv":8192,"d_qk":128,"tflops":450})" "\n"
    R"({"kind":"attention","kernel":"fused","pass":"forward","s_q":8192,"s_kv":8192,"d_qk":64,"tflops":400})" "\n"
    R"({"kind":"attention","kernel":"flash2","pass":"forward","s_q":8192,"s_kv":8192,"d_qk":128,"tflops":320})" "\n";

TEST(MeasuredAttentionTable, MeasuredKernelsReplaceTheClosedForm) {
  const auto table = std::make_shared<MeasuredGemmTable>(parse_gemm_measurements(kAttentionLines, "attn.jsonl"));
  GpuSpec hopper = h100();
  hopper.architecture = "hopper";
  const ComputeModel model(hopper, standalone(), table);
  // A measured shape: its rate exactly, per pass and kernel.
  EXPECT_EQ(model.compute_rate(attention_op(8192, 128, 32, false, false)).value(), 600e12);
  EXPECT_EQ(model.compute_rate(attention_op(8192, 128, 32, true, false)).value(), 450e12);
  EXPECT_EQ(model.compute_rate(attention_op(8192, 128, 32, false, true)).value(), 320e12);
  // s = 4096 lies halfway between 2048 and 8192 in log(s_q·s_kv): (500 + 600) / 2.
  EXPECT_NEAR(model.compute_rate(attention_op(4096, 128, 32, false, false)).value(), 550e12, 1e3);
  // Outside the measured sequences, the nearest end; head dim 96 is nearer 128 than 64 by ratio
  // (log 4/3 against log 3/2), 80 nearer 64.
  EXPECT_EQ(model.compute_rate(attention_op(65536, 128, 32, false, false)).value(), 600e12);
  EXPECT_EQ(model.compute_rate(attention_op(8192, 96, 32, false, false)).value(), 600e12);
  EXPECT_EQ(model.compute_rate(attention_op(8192, 80, 32, false, false)).value(), 400e12);
  // The time is the FLOPs at that rate: 2 · 8192²/2 · 32 · 256 / 600e12, plus the launch.
  const OperatorCost forward = attention_op(8192, 128, 32, false, false);
  EXPECT_EQ(model.time(forward), seconds_rounded_up(forward.flops.value() / 600e12) + kLaunch);
  // FlashAttention-2's backward was not measured: on Hopper the closed form answers for it.
  const ComputeModel closed(hopper, standalone());
  EXPECT_EQ(model.compute_rate(attention_op(8192, 128, 32, true, true)).value(),
            closed.compute_rate(attention_op(8192, 128, 32, true, true)).value());
  // GEMMs from the same file.
  EXPECT_EQ(model.compute_rate(gemm_cost(cube(4096), DType::kBf16)).value(), 700e12);
  EXPECT_NE(table->describe().find("attention kernels measured (5 points)"), std::string::npos);
}

TEST(MeasuredAttentionTable, OnAmpereFlashAttention2IsTheGpusOwnKernel) {
  // Only "flash2" lines (what a sweep on an A100 may write): the fused kernel is the same there.
  const std::string text =
      R"({"kind":"attention","kernel":"flash2","pass":"backward","s_q":4096,"s_kv":4096,"d_qk":128,"tflops":180})" "\n";
  const auto table = std::make_shared<MeasuredGemmTable>(parse_gemm_measurements(text, "a100.jsonl"));
  GpuSpec ampere = h100();
  ampere.architecture = "ampere";
  EXPECT_EQ(ComputeModel(ampere, standalone(), table).compute_rate(attention_op(4096, 128, 16, true, false)).value(),
            180e12);
  // On Hopper the two kernels differ: no line for the fused one, so the closed form.
  GpuSpec hopper = ampere;
  hopper.architecture = "hopper";
  EXPECT_EQ(ComputeModel(hopper, standalone(), table).compute_rate(attention_op(4096, 128, 16, true, false)).value(),
            ComputeModel(hopper, standalone()).compute_rate(attention_op(4096, 128, 16, true, false)).value());
  // No gemm line: every GEMM from the closed form.
  EXPECT_EQ(table->achieved_rate(cube(4096), DType::kBf16, ampere).value(),
            ShapeEfficiency().achieved_rate(cube(4096), DType::kBf16, ampere).value());
}

void expect_input_error(const std::string& text, const std::string& where, const std::string& pointer,
                        const std::string& reason_part) {
  try {
    parse_gemm_measurements(text, "bench.jsonl");
    FAIL() << "no error for: " << text;
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), where);
    EXPECT_EQ(e.pointer(), pointer);
    EXPECT_NE(e.reason().find(reason_part), std::string::npos) << e.what();
  }
}

TEST(MeasuredGemmTable, BadLinesNameTheFileLineAndField) {
  const std::string good = R"({"kind":"gemm","dtype":"bf16","m":1024,"n":1024,"k":1024,"tflops":420.0})";
  expect_input_error(good + "\n{\"kind\":\"gemm\",", "bench.jsonl:2", "", "malformed JSON");
  expect_input_error(good + "\n\n" + R"({"kind":"gemm","dtype":"bf16","n":1,"k":1,"tflops":1})", "bench.jsonl:3", "",
                     "missing required key \"m\"");
  expect_input_error(R"({"kind":"gemm","dtype":"bf16","m":"1024","n":1,"k":1,"tflops":1})", "bench.jsonl:1", "/m",
                     "expected an integer");
  expect_input_error(R"({"kind":"gemm","dtype":"int4","m":1,"n":1,"k":1,"tflops":1})", "bench.jsonl:1", "/dtype",
                     "unknown dtype");
  expect_input_error(R"({"kind":"gemm","dtype":"bf16","m":1,"n":1,"k":1,"tflops":0})", "bench.jsonl:1", "/tflops",
                     "greater than zero");
  expect_input_error(R"({"dtype":"bf16"})", "bench.jsonl:1", "", "missing required key \"kind\"");
  expect_input_error(R"({"kind":"meta"})", "bench.jsonl", "", "no \"kind\":\"gemm\" or \"kind\":\"attention\" measurements");
  // Attention lines: their kernel, pass and fields.
  const std::string attention = R"({"kind":"attention","kernel":"fused","pass":"forward","s_q":4096,"s_kv":4096,"d_qk":128,)";
  expect_input_error(attention + R"("tflops":0})", "bench.jsonl:1", "/tflops", "greater than zero");
  expect_input_error(R"({"kind":"attention","kernel":"xformers","pass":"forward","s_q":1,"s_kv":1,"d_qk":1,"tflops":1})",
                     "bench.jsonl:1", "/kernel", "unknown kernel");
  expect_input_error(R"({"kind":"attention","kernel":"fused","pass":"both","s_q":1,"s_kv":1,"d_qk":1,"tflops":1})",
                     "bench.jsonl:1", "/pass", "unknown pass");
  expect_input_error(R"({"kind":"attention","kernel":"fused","pass":"forward","s_q":1,"d_qk":1,"tflops":1})",
                     "bench.jsonl:1", "", "missing required key \"s_kv\"");
}

}  // namespace
}  // namespace parallax
