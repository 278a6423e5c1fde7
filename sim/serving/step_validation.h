// Published engine-step measurements (workloads/serve-validation/*.json, sources in
// docs/serving-step-measurements.md) predicted by the step model, row by row.
//
// A row: {"id", "source", "model" (bundled name), "topology" (preset), "tp", "dtype" ("bf16"
// for fp16/bf16, "fp8"), "kind", "batch", "length", "output" (request rows), "measured_ms"}.
// Kinds: "prefill" (batch prompts of length tokens; also a time to first token at concurrency
// 1), "decode" (one step of batch sequences holding length tokens of context), "request"
// (batch prompts of length tokens, then output − 1 decode steps as their context grows).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/step_model.h"

namespace parallax {

struct StepRun {
  std::string id, source, model, topology, kind;
  int tp = 1;
  DType dtype = DType::kBf16;
  int batch = 1;
  int64_t length = 1;
  int64_t output = 1;
  double measured_ms = 0;
};

struct StepRunResult {
  StepRun run;
  double predicted_ms = 0;
  double error = 0;  ///< (predicted − measured) / measured
  std::string error_message;  ///< why it was not predicted
};

/// Reads a runs file; throws InputError with the JSON path.
std::vector<StepRun> load_step_runs(const std::string& path);

/// Predicts every row (a row that cannot be predicted gets error_message).
std::vector<StepRunResult> predict_step_runs(const std::vector<StepRun>& runs, const std::string& models_dir,
                                             const std::string& topologies_dir, const StepModelOptions& options);

/// One object per row: id, source, measured_ms and predicted_ms with error, or error_message.
nlohmann::ordered_json step_validation_json(const std::vector<StepRunResult>& results);

/// The table, one line per row, and per source and overall: mean |error| and signed median.
std::string step_validation_text(const std::vector<StepRunResult>& results);

}  // namespace parallax
