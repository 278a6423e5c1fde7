// The formats of a layout search: the ranked table, the JSON of every simulated layout, the
// best layout as a workload file that `parallax train` runs, and the data and gnuplot script of
// the throughput-vs-memory scatter with its Pareto front.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "planning/layout_search.h"
#include "training/workload_loader.h"

namespace parallax {

/// The top `top` layouts: rank, layout, iteration time, tokens/s/GPU, MFU, peak memory, the
/// largest exposed communication (kind and time), the pipeline bubble; then the counts.
std::string search_table(const SearchOutcome& outcome, size_t top);

/// Counts and every simulated layout, best first.
nlohmann::ordered_json search_json(const SearchOutcome& outcome);

/// The workload file `original` (read from `original_path`) with its parallel block replaced by
/// `layout`, its topology sized to `nodes`, and its relative paths made absolute.
nlohmann::ordered_json workload_with_layout(const nlohmann::json& original, const std::string& original_path,
                                            const std::string& topology_file, int nodes, const ParallelLayout& layout);

/// The workload file's parallel block for `layout`.
nlohmann::ordered_json parallel_block(const ParallelLayout& layout);

/// gnuplot data: every simulated layout (peak memory GiB, tokens/s per GPU), then, as a second
/// block, its Pareto front; and the script that draws them into `png`.
std::string pareto_data(const SearchOutcome& outcome);
std::string pareto_script(const std::string& data_file, const std::string& png, const std::string& title);

}  // namespace parallax
