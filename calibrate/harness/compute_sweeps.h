// The compute sweeps of parallax-nccl-bench on one GPU: cuBLASLt GEMMs (achieved FLOP/s per
// transformer shape, compute_plan.h) and memory copies (achieved bytes/s), each point written as
// a FORMAT.md line as soon as it is timed, skipped when the file already holds it, and printed
// as a table row. Errors of one point are reported and the sweep goes on (three in a row end it:
// the GPU is then in a state where nothing more will work).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "harness/harness_run.h"
#include "harness/measurement_log.h"
#include "harness/run_context.h"

namespace parallax::harness {

/// What both compute sweeps need.
struct ComputeRun {
  std::string harness;
  std::string run_id;
  int device = 0;
  std::string gpu_name;
  int cc_major = 0;
  int cc_minor = 0;
  int warmup = 5;
  int iters = 20;
  bool quiet = false;
  MeasurementLog* log = nullptr;  ///< null: tables only
  RunClock* clock = nullptr;
  std::ostream* table = nullptr;
  std::ostream* progress = nullptr;
};

/// GEMM sweep for each of `dtypes` ("bf16"; "fp8" = e4m3 inputs, needs compute capability
/// 8.9+, skipped with a note below, measured with and without fast accumulation). D (bf16) =
/// Aᵀ·B in cuBLASLt's "TN" layout, which fp8 requires; inputs pseudo-random (fixed seed,
/// generated on the host), since zeros run faster; the heuristic's first algorithm with a
/// 64 MiB workspace. About a second of untimed large products comes first (clock ramp-up).
RunTally run_gemm_sweep(const ComputeRun& run, const std::vector<std::string>& dtypes);

/// cudaMemcpyAsync device→device, host→device and device→host (pinned host memory) for
/// 1 MiB … `max_bytes` (×2), capped by the memory the GPU and host can give. gbs as
/// memcpy_line (compute_plan.h) counts it: 2 × size for d2d, size for h2d and d2h.
RunTally run_memcpy_sweep(const ComputeRun& run, int64_t max_bytes);

}  // namespace parallax::harness
