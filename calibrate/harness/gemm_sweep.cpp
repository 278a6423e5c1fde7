// cuBLASLt GEMM sweep (compute_sweeps.h). Layout "TN" in cuBLASLt's column-major terms:
// A is stored k×m (lda = k) and used transposed, B is k×n (ldb = k), D is m×n (ldd = m), so
// D = Aᵀ·B is an m×n product over k: FLOPs = 2·m·n·k. fp8 (e4m3) accepts only this layout and
// needs scale factors for A and B (1.0 here); its output is bf16 like the bf16 GEMM's. fp8 runs
// with and without fast accumulation (compute_plan.h); batch > 1 is a strided batch, the
// balanced case of a grouped MoE GEMM. The sweep starts with ~1 s of untimed products.
#include <cublasLt.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "harness/compute_plan.h"
#include "harness/compute_sweeps.h"
#include "harness/gpu_check.h"
#include "harness/gpu_support.h"

namespace parallax::harness {
namespace {

constexpr size_t kWorkspaceBytes = size_t{64} << 20;
constexpr size_t kPatternBytes = size_t{32} << 20;
constexpr uint64_t kGemmPatternSeed = 0x5eed2026;
constexpr double kWarmUpSeconds = 1.0;

// Owners of the cuBLASLt handles, so that an exception frees them.
class LtHandle {
 public:
  LtHandle() { PX_CHECK(cublasLtCreate(&h_)); }
  ~LtHandle() { cublasLtDestroy(h_); }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  cublasLtHandle_t get() const { return h_; }

 private:
  cublasLtHandle_t h_ = nullptr;
};

class MatmulDesc {
 public:
  MatmulDesc() { PX_CHECK(cublasLtMatmulDescCreate(&d_, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(d_); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  cublasLtMatmulDesc_t get() const { return d_; }

 private:
  cublasLtMatmulDesc_t d_ = nullptr;
};

class Layout {
 public:
  // A column-major rows×cols matrix; batch > 1 is a strided batch of them, back to back.
  Layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t batch) {
    PX_CHECK(cublasLtMatrixLayoutCreate(&l_, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), rows));
    if (batch > 1) {
      const auto count = static_cast<int32_t>(batch);
      const int64_t stride = rows * cols;
      PX_CHECK(cublasLtMatrixLayoutSetAttribute(l_, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      PX_CHECK(cublasLtMatrixLayoutSetAttribute(l_, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(l_); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
  cublasLtMatrixLayout_t get() const { return l_; }

 private:
  cublasLtMatrixLayout_t l_ = nullptr;
};

class Preference {
 public:
  Preference() {
    PX_CHECK(cublasLtMatmulPreferenceCreate(&p_));
    const uint64_t workspace = kWorkspaceBytes;
    PX_CHECK(cublasLtMatmulPreferenceSetAttribute(p_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                  sizeof workspace));
  }
  ~Preference() { cublasLtMatmulPreferenceDestroy(p_); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  cublasLtMatmulPreference_t get() const { return p_; }

 private:
  cublasLtMatmulPreference_t p_ = nullptr;
};

// One product planned for cuBLASLt: its descriptor (TN, fp8 scales and fast accumulation), its
// layouts and the heuristic's first algorithm.
class PlannedMatmul {
 public:
  PlannedMatmul(cublasLtHandle_t lt, const GemmVariant& v, const GemmShape& s, const void* scale)
      : lt_(lt), la_(input_type(v), s.k, s.m, s.batch), lb_(input_type(v), s.k, s.n, s.batch),
        ld_(CUDA_R_16BF, s.m, s.n, s.batch) {
    const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    PX_CHECK(cublasLtMatmulDescSetAttribute(op_.get(), CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
    PX_CHECK(cublasLtMatmulDescSetAttribute(op_.get(), CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
    if (v.dtype == "fp8") {
      PX_CHECK(cublasLtMatmulDescSetAttribute(op_.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof scale));
      PX_CHECK(cublasLtMatmulDescSetAttribute(op_.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale, sizeof scale));
      const int8_t fast = v.fast_accum ? 1 : 0;
      PX_CHECK(cublasLtMatmulDescSetAttribute(op_.get(), CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    }
    const Preference preference;
    int found = 0;
    PX_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_, op_.get(), la_.get(), lb_.get(), ld_.get(), ld_.get(),
                                            preference.get(), 1, &heuristic_, &found));
    if (found == 0) throw std::runtime_error("cublasLtMatmulAlgoGetHeuristic found no algorithm");
  }

  void run(const void* a, const void* b, void* d, void* workspace, cudaStream_t stream) const {
    const float alpha = 1.0f, beta = 0.0f;
    PX_CHECK(cublasLtMatmul(lt_, op_.get(), &alpha, a, la_.get(), b, lb_.get(), &beta, d, ld_.get(), d, ld_.get(),
                            &heuristic_.algo, workspace, kWorkspaceBytes, stream));
  }

  static cudaDataType_t input_type(const GemmVariant& v) { return v.dtype == "fp8" ? CUDA_R_8F_E4M3 : CUDA_R_16BF; }

 private:
  cublasLtHandle_t lt_;
  MatmulDesc op_;
  Layout la_, lb_, ld_;
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

bool supports_fp8(int major, int minor) { return major > 8 || (major == 8 && minor >= 9); }

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// Inputs and scratch every shape of one variant shares.
struct GemmScratch {
  DeviceBuffer workspace, pattern, scale;
};

class GemmSweep {
 public:
  GemmSweep(const ComputeRun& run, RunTally& tally) : run_(run), tally_(tally) {}

  // About a second of untimed 8192³ bf16 products, so that the first timed shape does not run
  // while the clocks still ramp up from idle.
  void warm_up_clocks() {
    const GemmVariant bf16{"bf16", false};
    const GemmShape shape{"warm-up", 8192, 8192, 8192, 1};
    LtHandle lt;
    TimedStream stream;
    GemmScratch scratch;
    prepare(bf16, scratch);
    DeviceBuffer a, b, d;
    const size_t bytes = 8192u * 8192u * 2u;
    if (!a.allocate(bytes) || !b.allocate(bytes) || !d.allocate(bytes)) {
      note() << "gemm warm-up skipped: three 128 MiB matrices do not fit\n";
      return;
    }
    tile_fill(a.get(), a.size(), scratch.pattern, stream.get());
    tile_fill(b.get(), b.size(), scratch.pattern, stream.get());
    const PlannedMatmul product(lt.get(), bf16, shape, scratch.scale.get());
    const auto start = std::chrono::steady_clock::now();
    int products = 0;
    double elapsed = 0;
    while (elapsed < kWarmUpSeconds) {
      for (int i = 0; i < 8; ++i) product.run(a.get(), b.get(), d.get(), scratch.workspace.get(), stream.get());
      PX_CHECK(cudaStreamSynchronize(stream.get()));
      products += 8;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    const double tflops = 2.0 * 8192.0 * 8192.0 * 8192.0 * products / elapsed / 1e12;
    note() << "gemm warm-up: " << products << " untimed bf16 8192^3 products in " << elapsed << " s (" << tflops
           << " TFLOP/s)\n";
    *run_.table << "# warm-up: " << products << " untimed bf16 8192^3 products over " << elapsed << " s\n";
  }

  void run_variant(const GemmVariant& v) {
    LtHandle lt;
    TimedStream stream;
    GemmScratch scratch;
    prepare(v, scratch);
    const std::optional<double> peak = peak_tflops(run_.gpu_name, v.dtype);

    print_header(v);
    double last_flop_rate = 0;  // FLOP/s of the last shape: the guess for the next one's cost
    int failures_in_a_row = 0;
    for (const GemmShape& shape : gemm_shapes()) {
      if (const nlohmann::json* done = run_.log ? run_.log->find(measurement_key(gemm_identity(v, shape))) : nullptr) {
        ++tally_.resumed;
        print_row(v, shape, done->value("time_us", 0.0), done->value("tflops", 0.0), peak);
        continue;
      }
      const double guess = last_flop_rate > 0 ? flops_of(shape) * (run_.warmup + run_.iters) / last_flop_rate : 0.0;
      if (run_.clock->must_stop(guess)) {
        tally_.stopped = true;
        tally_.stop_reason = run_.clock->stop_reason();
        return;
      }
      try {
        const std::optional<TimeStats> t = time_shape(lt, stream, scratch, v, shape);
        if (!t) continue;
        const auto line = gemm_line(run_.run_id, v, shape, run_.warmup, run_.iters, *t, peak);
        if (run_.log) run_.log->append(line);
        ++tally_.measured;
        failures_in_a_row = 0;
        last_flop_rate = flops_of(shape) / (t->mean_us * 1e-6);
        print_row(v, shape, t->mean_us, line["tflops"].get<double>(), peak);
        if (!run_.quiet) {
          note() << "gemm " << name(v) << " " << shape.label << " " << dims(shape) << ": "
                 << line["time_us"].get<double>() << " us, " << line["tflops"].get<double>() << " TFLOP/s\n";
        }
      } catch (const std::exception& e) {
        ++tally_.failures;
        note() << "gemm " << name(v) << " " << shape.label << " (" << dims(shape) << ") failed: " << e.what() << "\n";
        if (++failures_in_a_row >= 3) {
          note() << "three GEMMs failed in a row; abandoning the " << name(v) << " sweep\n";
          return;
        }
      }
    }
  }

 private:
  static double flops_of(const GemmShape& s) {
    return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) *
           static_cast<double>(s.batch);
  }

  static std::string name(const GemmVariant& v) {
    return v.dtype == "fp8" ? std::string(v.fast_accum ? "fp8 (fast accum)" : "fp8") : v.dtype;
  }

  static std::string dims(const GemmShape& s) {
    return (s.batch > 1 ? std::to_string(s.batch) + "x " : std::string()) + std::to_string(s.m) + "x" +
           std::to_string(s.n) + "x" + std::to_string(s.k);
  }

  void prepare(const GemmVariant& v, GemmScratch& scratch) const {
    if (!scratch.workspace.allocate(kWorkspaceBytes) || !scratch.pattern.allocate(kPatternBytes) ||
        !scratch.scale.allocate(sizeof(float))) {
      throw std::runtime_error("cannot allocate the 96 MiB of workspace and input pattern");
    }
    const auto host = random_block(kPatternBytes, v.dtype, kGemmPatternSeed);
    PX_CHECK(cudaMemcpy(scratch.pattern.get(), host.data(), host.size(), cudaMemcpyHostToDevice));
    const float one = 1.0f;
    PX_CHECK(cudaMemcpy(scratch.scale.get(), &one, sizeof one, cudaMemcpyHostToDevice));
  }

  // The shape's stats, or nullopt when its matrices do not fit in GPU memory.
  std::optional<TimeStats> time_shape(const LtHandle& lt, TimedStream& stream, const GemmScratch& scratch,
                                      const GemmVariant& v, const GemmShape& shape) const {
    const size_t element = v.dtype == "fp8" ? 1 : 2;
    const auto m = static_cast<size_t>(shape.m), n = static_cast<size_t>(shape.n), k = static_cast<size_t>(shape.k);
    const auto batch = static_cast<size_t>(shape.batch);
    DeviceBuffer a, b, d;
    if (!a.allocate(batch * k * m * element) || !b.allocate(batch * k * n * element) || !d.allocate(batch * m * n * 2)) {
      note() << "gemm " << name(v) << " " << shape.label << " (" << dims(shape)
             << ") does not fit in GPU memory (needs "
             << gib(static_cast<double>(batch * (k * m * element + k * n * element + m * n * 2))) << "); skipped\n";
      return std::nullopt;
    }
    tile_fill(a.get(), a.size(), scratch.pattern, stream.get());
    tile_fill(b.get(), b.size(), scratch.pattern, stream.get());
    const PlannedMatmul product(lt.get(), v, shape, scratch.scale.get());
    return stream.time(run_.warmup, run_.iters, [&] {
      product.run(a.get(), b.get(), d.get(), scratch.workspace.get(), stream.get());
    });
  }

  std::ostream& note() const { return *run_.progress << run_.harness << ": "; }

  void print_header(const GemmVariant& v) const {
    *run_.table << "# gemm " << name(v) << " on GPU " << run_.device << " (" << run_.gpu_name
                << "): cuBLASLt, D(bf16) = A^T B, fp32 accumulate"
                << (v.dtype == "fp8" ? (v.fast_accum ? " (fast accumulation)" : " (no fast accumulation)") : "")
                << ", first heuristic algorithm, 64 MiB workspace; batch > 1: strided batch; "
                << "warmup " << run_.warmup << ", iters " << run_.iters << "\n";
    char buf[256];
    std::snprintf(buf, sizeof buf, "# %5s  %5s  %8s  %8s  %8s  %-28s  %10s  %9s  %6s  %5s\n", "dtype", "batch", "m", "n",
                  "k", "label", "time(us)", "TFLOP/s", "peak", "eff%");
    *run_.table << buf << std::flush;
  }

  void print_row(const GemmVariant& v, const GemmShape& s, double time_us, double tflops,
                 std::optional<double> peak) const {
    char peak_text[16] = "-", eff_text[16] = "-";
    if (peak) {
      std::snprintf(peak_text, sizeof peak_text, "%.0f", *peak);
      std::snprintf(eff_text, sizeof eff_text, "%.1f", 100.0 * tflops / *peak);
    }
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %5s  %5lld  %8lld  %8lld  %8lld  %-28s  %10.2f  %9.1f  %6s  %5s\n",
                  v.fast_accum ? "fp8f" : v.dtype.c_str(), static_cast<long long>(s.batch),
                  static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
                  s.label.c_str(), time_us, tflops, peak_text, eff_text);
    *run_.table << buf << std::flush;
  }

  const ComputeRun& run_;
  RunTally& tally_;
};

}  // namespace

RunTally run_gemm_sweep(const ComputeRun& run, const std::vector<std::string>& dtypes) {
  RunTally tally;
  GemmSweep sweep(run, tally);
  try {
    PX_CHECK(cudaSetDevice(run.device));
    sweep.warm_up_clocks();
  } catch (const std::exception& e) {
    *run.progress << run.harness << ": gemm warm-up failed: " << e.what() << "\n";
  }
  for (const GemmVariant& v : gemm_variants(dtypes)) {
    if (v.dtype == "fp8" && !supports_fp8(run.cc_major, run.cc_minor)) {
      if (v.fast_accum) {
        *run.progress << run.harness << ": gemm fp8 skipped: " << run.gpu_name << " has compute capability "
                      << run.cc_major << "." << run.cc_minor << "; cuBLASLt fp8 needs 8.9 or later\n";
      }
      continue;
    }
    try {
      PX_CHECK(cudaSetDevice(run.device));
      sweep.run_variant(v);
    } catch (const std::exception& e) {
      ++tally.failures;
      *run.progress << run.harness << ": gemm " << v.dtype << " sweep failed: " << e.what() << "\n";
    }
    if (tally.stopped) break;
  }
  return tally;
}

}  // namespace parallax::harness
