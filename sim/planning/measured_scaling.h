// Measured scaling points from a user's own runs (`parallax scale --measured FILE`), read from a
// CSV and set beside the scaling study's predictions.
//
// The file: an optional comment block ('#' lines), a header, then one row per run. Columns:
//   gpus                                  required, whole number ≥ 1
//   step_time_s | step_time_ms | tokens_per_s | tokens_per_s_per_gpu
//                                         exactly one: what was measured (finite, > 0)
//   strategy                              optional: ddp, zero1, zero2, zero3 or fsdp; a row
//                                         without it is the workload's own strategy
// Every measurement becomes tokens/s per GPU (a step of gbs·seq tokens, the study's at that
// count) and its error is the predicted throughput over the measured one, minus 1: positive
// when the prediction is too fast, as `parallax validate` reports it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planning/scaling_study.h"

namespace parallax {

enum class MeasuredQuantity { kStepTimeSeconds, kStepTimeMilliseconds, kTokensPerSecond, kTokensPerSecondPerGpu };
/// The column name of a quantity ("step_time_s", …).
const char* to_string(MeasuredQuantity q);

struct MeasuredScalingPoint {
  int line = 0;          ///< in the file, for messages
  std::string strategy;  ///< empty: the workload's own
  int gpus = 0;
  double value = 0;      ///< in the file's quantity
};

struct MeasuredScaling {
  std::string source;  ///< the file's name, for messages
  MeasuredQuantity quantity = MeasuredQuantity::kStepTimeSeconds;
  std::vector<MeasuredScalingPoint> points;
};

/// Most GPUs a measured row may name (as `--gpus`).
inline constexpr int kMaxMeasuredGpus = 1 << 20;

/// Parses the CSV text of `source`. Throws InputError "source:line: reason" on a bad header or
/// row, a repeated (strategy, gpus), or a file with no row.
MeasuredScaling parse_measured_scaling(const std::string& text, const std::string& source);
/// Reads and parses a file (InputError when it cannot be read).
MeasuredScaling load_measured_scaling(const std::string& path);

/// Sets each point beside its cell (strategy named, or `own_strategy`): the measured tokens/s
/// per GPU and the error of the cell's prediction. Throws InputError naming the point's line
/// when the study has no such strategy or GPU count (the caller runs both).
void attach_measurements(ScalingStudy& study, const MeasuredScaling& measured, const std::string& own_strategy);

/// The study's GPU counts with the measured ones added, ascending, each once.
std::vector<int> gpu_counts_with(const std::vector<int>& gpus, const MeasuredScaling& measured);
/// The strategies named by the points (own_strategy for a row without one) that `names` lacks.
std::vector<std::string> strategies_missing(const std::vector<std::string>& names, const MeasuredScaling& measured,
                                            const std::string& own_strategy);

/// Summary over the attached points: how many were compared, their mean |error| and median
/// signed error, and those that could not be (the cell not run or out of memory).
struct MeasuredSummary {
  int compared = 0;
  int not_compared = 0;
  double mean_abs_error = 0;
  double median_error = 0;
};
MeasuredSummary measured_summary(const ScalingStudy& study);

}  // namespace parallax
