// cuBLASLt GEMM sweep (compute_sweeps.h). Layout "TN" in cuBLASLt's column-major terms:
// A is stored k×m (lda = k) and used transposed, B is k×n (ldb = k), D is m×n (ldd = m), so
// D = Aᵀ·B is an m×n product over k: FLOPs = 2·m·n·k. fp8 (e4m3) accepts only this layout and
// needs scale factors for A and B (1.0 here); its output is bf16 like the bf16 GEMM's.
#include <cublasLt.h>

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
constexpr uint64_t kSeed = 0x5eed2026;

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
  Layout(cudaDataType_t type, int64_t rows, int64_t cols) {
    PX_CHECK(cublasLtMatrixLayoutCreate(&l_, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), rows));
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

bool supports_fp8(int major, int minor) { return major > 8 || (major == 8 && minor >= 9); }

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

class GemmSweep {
 public:
  GemmSweep(const ComputeRun& run, RunTally& tally) : run_(run), tally_(tally) {}

  void run_dtype(const std::string& dtype) {
    const bool fp8 = dtype == "fp8";
    const cudaDataType_t input = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    const size_t element = fp8 ? 1 : 2;
    LtHandle lt;
    TimedStream stream;
    DeviceBuffer workspace, pattern, scale;
    if (!workspace.allocate(kWorkspaceBytes) || !pattern.allocate(kPatternBytes) || !scale.allocate(sizeof(float))) {
      throw std::runtime_error("cannot allocate the 96 MiB of workspace and input pattern");
    }
    const auto host = random_block(kPatternBytes, dtype, kSeed);
    PX_CHECK(cudaMemcpy(pattern.get(), host.data(), host.size(), cudaMemcpyHostToDevice));
    const float one = 1.0f;
    PX_CHECK(cudaMemcpy(scale.get(), &one, sizeof one, cudaMemcpyHostToDevice));
    const std::optional<double> peak = peak_tflops(run_.gpu_name, dtype);

    print_header(dtype);
    double last_flop_rate = 0;  // FLOP/s of the last shape: the guess for the next one's cost
    int failures_in_a_row = 0;
    for (const GemmShape& shape : gemm_shapes()) {
      const double flops = 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.n) *
                           static_cast<double>(shape.k);
      if (const nlohmann::json* done = run_.log ? run_.log->find(measurement_key(gemm_identity(dtype, shape))) : nullptr) {
        ++tally_.resumed;
        print_row(dtype, shape, done->value("time_us", 0.0), done->value("tflops", 0.0), peak);
        continue;
      }
      const double guess = last_flop_rate > 0 ? flops * (run_.warmup + run_.iters) / last_flop_rate : 0.0;
      if (run_.clock->must_stop(guess)) {
        tally_.stopped = true;
        tally_.stop_reason = run_.clock->stop_reason();
        return;
      }
      try {
        DeviceBuffer a, b, d;
        const auto m = static_cast<size_t>(shape.m), n = static_cast<size_t>(shape.n), k = static_cast<size_t>(shape.k);
        if (!a.allocate(k * m * element) || !b.allocate(k * n * element) || !d.allocate(m * n * 2)) {
          note() << "gemm " << dtype << " " << shape.label << " (" << shape.m << "x" << shape.n << "x" << shape.k
                 << ") does not fit in GPU memory (needs "
                 << gib(static_cast<double>(k * m * element + k * n * element + m * n * 2)) << "); skipped\n";
          continue;
        }
        tile_fill(a.get(), a.size(), pattern, stream.get());
        tile_fill(b.get(), b.size(), pattern, stream.get());

        MatmulDesc op;
        const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
        PX_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa));
        PX_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb));
        if (fp8) {
          const void* scale_ptr = scale.get();
          PX_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_ptr,
                                                  sizeof scale_ptr));
          PX_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_ptr,
                                                  sizeof scale_ptr));
        }
        const Layout la(input, shape.k, shape.m), lb(input, shape.k, shape.n), ld(CUDA_R_16BF, shape.m, shape.n);
        const Preference preference;
        cublasLtMatmulHeuristicResult_t heuristic{};
        int found = 0;
        PX_CHECK(cublasLtMatmulAlgoGetHeuristic(lt.get(), op.get(), la.get(), lb.get(), ld.get(), ld.get(),
                                                preference.get(), 1, &heuristic, &found));
        if (found == 0) throw std::runtime_error("cublasLtMatmulAlgoGetHeuristic found no algorithm");
        const float alpha = 1.0f, beta = 0.0f;
        const TimeStats t = stream.time(run_.warmup, run_.iters, [&] {
          PX_CHECK(cublasLtMatmul(lt.get(), op.get(), &alpha, a.get(), la.get(), b.get(), lb.get(), &beta, d.get(),
                                  ld.get(), d.get(), ld.get(), &heuristic.algo, workspace.get(), kWorkspaceBytes,
                                  stream.get()));
        });
        const auto line = gemm_line(run_.run_id, dtype, shape, run_.warmup, run_.iters, t, peak);
        if (run_.log) run_.log->append(line);
        ++tally_.measured;
        failures_in_a_row = 0;
        last_flop_rate = flops / (t.mean_us * 1e-6);
        print_row(dtype, shape, t.mean_us, line["tflops"].get<double>(), peak);
        if (!run_.quiet) {
          note() << "gemm " << dtype << " " << shape.label << " " << shape.m << "x" << shape.n << "x" << shape.k << ": "
                 << line["time_us"].get<double>() << " us, " << line["tflops"].get<double>() << " TFLOP/s\n";
        }
      } catch (const std::exception& e) {
        ++tally_.failures;
        note() << "gemm " << dtype << " " << shape.label << " (" << shape.m << "x" << shape.n << "x" << shape.k
               << ") failed: " << e.what() << "\n";
        if (++failures_in_a_row >= 3) {
          note() << "three GEMMs failed in a row; abandoning the " << dtype << " sweep\n";
          return;
        }
      }
    }
  }

 private:
  std::ostream& note() const { return *run_.progress << run_.harness << ": "; }

  void print_header(const std::string& dtype) const {
    *run_.table << "# gemm " << dtype << " on GPU " << run_.device << " (" << run_.gpu_name
                << "): cuBLASLt, D(bf16) = A^T B, fp32 accumulate, first heuristic algorithm, 64 MiB workspace; "
                << "warmup " << run_.warmup << ", iters " << run_.iters << "\n";
    char buf[256];
    std::snprintf(buf, sizeof buf, "# %5s  %8s  %8s  %8s  %-28s  %10s  %9s  %6s  %5s\n", "dtype", "m", "n", "k", "label",
                  "time(us)", "TFLOP/s", "peak", "eff%");
    *run_.table << buf << std::flush;
  }

  void print_row(const std::string& dtype, const GemmShape& s, double time_us, double tflops,
                 std::optional<double> peak) const {
    char peak_text[16] = "-", eff_text[16] = "-";
    if (peak) {
      std::snprintf(peak_text, sizeof peak_text, "%.0f", *peak);
      std::snprintf(eff_text, sizeof eff_text, "%.1f", 100.0 * tflops / *peak);
    }
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %5s  %8lld  %8lld  %8lld  %-28s  %10.2f  %9.1f  %6s  %5s\n", dtype.c_str(),
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
  for (const auto& dtype : dtypes) {
    if (dtype == "fp8" && !supports_fp8(run.cc_major, run.cc_minor)) {
      *run.progress << run.harness << ": gemm fp8 skipped: " << run.gpu_name << " has compute capability "
                    << run.cc_major << "." << run.cc_minor << "; cuBLASLt fp8 needs 8.9 or later\n";
      continue;
    }
    try {
      PX_CHECK(cudaSetDevice(run.device));
      sweep.run_dtype(dtype);
    } catch (const std::exception& e) {
      ++tally.failures;
      *run.progress << run.harness << ": gemm " << dtype << " sweep failed: " << e.what() << "\n";
    }
    if (tally.stopped) break;
  }
  return tally;
}

}  // namespace parallax::harness
