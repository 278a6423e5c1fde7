// Start-up and closing steps shared by the harness mains (harness_run.h).
#include "harness/harness_run.h"

#include <stdexcept>

namespace parallax::harness {

std::unique_ptr<MeasurementLog> open_log_on_root(Coordinator& coordinator, const std::string& harness,
                                                 const std::string& path, std::ostream& notes) {
  if (path.empty()) return nullptr;
  std::unique_ptr<MeasurementLog> log;
  bool failed = false;
  if (coordinator.is_root()) {
    try {
      log = std::make_unique<MeasurementLog>(path, notes);
      if (log->resumed() > 0) {
        notes << harness << ": resuming " << path << ": " << log->resumed()
              << " measurements already there are skipped\n";
      }
    } catch (const std::exception& e) {
      notes << harness << ": error: " << e.what() << "\n";
      failed = true;
    }
  }
  if (coordinator.any(failed)) throw std::runtime_error("cannot use the measurement file " + path);
  return log;
}

void RunTally::add(const SweepSummary& s) {
  measured += s.measured;
  resumed += s.resumed;
  failures += s.failed_sweeps;
  if (s.stopped) {
    stopped = true;
    stop_reason = s.stop_reason;
  }
}

int finish_run(const RunTally& tally, const std::string& harness, const MeasurementLog* log, std::ostream& notes) {
  notes << harness << ": measured " << tally.measured << " points";
  if (log) notes << " into " << log->path();
  if (tally.resumed > 0) notes << " (" << tally.resumed << " already there, skipped)";
  if (tally.failures > 0) notes << "; " << tally.failures << " failed (see above)";
  if (tally.stopped) notes << "; stopped early: " << tally.stop_reason << " (run the same command again to resume)";
  notes << "\n";
  if (tally.interrupted) return kExitInterrupted;
  return tally.failures > 0 ? kExitFailed : kExitOk;
}

}  // namespace parallax::harness
