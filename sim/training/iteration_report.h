// The formats of one simulated training iteration: its layout in words, the full result as
// JSON (`parallax train --json`) and a Chrome/Perfetto trace (`--trace`): one process per
// simulated pipeline stage with a thread per stream, and, co-simulated, a process of the
// busiest links (a utilisation counter and a slice per task that crossed each link, with a
// flow arrow from the task to its slice, so the collision of parallel dimensions shows).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "training/iteration.h"
#include "training/parallel_layout.h"
#include "training/workload_loader.h"

namespace parallax {

/// "tp 8 · pp 4 · dp 2, 1f1b, ZeRO-1, mbs 1, gbs 64, seq 4096, bf16, SP, …".
std::string layout_description(const ParallelLayout& layout);

/// How the workload's GEMMs are timed (a measured table or the shape model), in words.
std::string gemm_model_description(const TrainingWorkload& job);

nlohmann::ordered_json iteration_json(const TrainingWorkload& job, const IterationResult& r);

/// Needs the result of a run with IterationOptions::keep_timeline.
std::string iteration_trace_json(const TrainingWorkload& job, const IterationResult& r);

}  // namespace parallax
