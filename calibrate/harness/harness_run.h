// The steps every harness main takes around its measurements, so that both programs start,
// resume, report and exit the same way: parsing errors, opening the measurement file on rank 0
// with every process agreeing, the closing summary and the exit status.
//
// Exit status: 0 done (or stopped by --time-limit); 1 a sweep or the file failed; 2 bad
// arguments; 3 nothing to measure on (no GPU; parallax-nccl-bench only); 130 interrupted.
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "harness/collective_sweep.h"
#include "harness/measurement_log.h"

namespace parallax::harness {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoDevice = 3;
constexpr int kExitInterrupted = 130;

/// Opens `path` (resume and repair, see MeasurementLog) on the root. Every process calls it and
/// learns whether the root succeeded; on failure the root has printed why and every process
/// gets a std::runtime_error. An empty path opens nothing and returns null.
std::unique_ptr<MeasurementLog> open_log_on_root(Coordinator& coordinator, const std::string& harness,
                                                 const std::string& path, std::ostream& notes);

/// What a run did, for the closing line and the exit status.
struct RunTally {
  int measured = 0;
  int resumed = 0;
  int failures = 0;  ///< failed sweeps, shapes, copies
  bool stopped = false;
  bool interrupted = false;
  std::string stop_reason;

  void add(const SweepSummary& s);
};

/// "<harness>: measured N points (M already in FILE); stopped: time limit" on `notes`, and
/// the exit status of the run.
int finish_run(const RunTally& tally, const std::string& harness, const MeasurementLog* log, std::ostream& notes);

}  // namespace parallax::harness
