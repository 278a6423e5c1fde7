// What a harness run records about itself (the `meta` line of FORMAT.md: run id, date, host,
// command, environment) and when it must stop (the --time-limit deadline, SIGINT/SIGTERM).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parallax::harness {

/// "2026-11-30T12:00:00Z" (UTC, seconds).
std::string utc_now_iso();
/// gethostname(), or "localhost" when it fails.
std::string host_name();
/// "model name" of /proc/cpuinfo, or empty.
std::string cpu_model();
/// "<date>-<host>-<pid>": unique per harness start.
std::string make_run_id(const std::string& date, const std::string& host);
/// argv joined with spaces, words with blanks or quotes in single quotes.
std::string command_line(int argc, const char* const* argv);
/// NCCL_*, OMPI_*, UCX_*, CUDA_VISIBLE_DEVICES as set now, sorted by name; NCCL_ALGO and
/// NCCL_PROTO always present (null when unset), since they change what is measured. Left out:
/// what mpirun sets for its own bookkeeping (ranks, URIs, session directories, argv), which
/// describes the launch, not a setting.
nlohmann::ordered_json harness_env();
/// The fields every meta line starts with (kind … nodes); a harness then adds its own (gpu,
/// cpu, versions) and ends the line with finish_meta_line.
nlohmann::ordered_json meta_line(const std::string& harness, const std::string& run_id, const std::string& date,
                                 const std::vector<std::string>& hosts, int ranks, int nodes);
/// Appends "env" (harness_env(), so call it before the harness changes NCCL_ALGO/NCCL_PROTO)
/// and "command".
void finish_meta_line(nlohmann::ordered_json& meta, const std::string& command);

/// `value` rounded to `decimals` decimal places, as the double nearest that decimal, so that
/// JSON prints it short ("0.013605", not "0.013604999999999999"). The harnesses keep 3 decimals
/// of µs (1 ns) and 6 of GB/s: far below the measurement noise.
double round_decimals(double value, int decimals);

/// The run's deadline and the stop request of SIGINT/SIGTERM. Decisions are made on rank 0 and
/// broadcast, so the clocks of the other ranks do not matter.
class RunClock {
 public:
  /// `limit_s` ≤ 0: no limit.
  explicit RunClock(double limit_s);
  double elapsed_s() const;
  /// True when the limit is set and `elapsed + next_cost_s` passes it, or a stop signal came.
  bool must_stop(double next_cost_s = 0) const;
  /// Why must_stop() said yes: "time limit" or "interrupted".
  std::string stop_reason() const;
  bool interrupted() const;

 private:
  std::chrono::steady_clock::time_point start_;
  double limit_s_;
};

/// Installs SIGINT/SIGTERM handlers that ask RunClock to stop (the point being measured
/// finishes and is written); a second signal kills the process as usual.
void install_stop_handlers();

}  // namespace parallax::harness
