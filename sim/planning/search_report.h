// The formats of a layout search: the ranked table, the JSON of every simulated layout, the
// best layout as a workload file that `parallax train` runs, and the data and gnuplot script of
// the throughput-vs-memory scatter with its Pareto front.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "planning/layout_search.h"
#include "training/workload_loader.h"
#include "training/workload_writer.h"

namespace parallax {

/// What a million tokens costs, for the table of a search by cost: GPU-hours, and dollars at
/// `usd_per_gpu_hour` when given.
struct CostColumn {
  std::optional<double> usd_per_gpu_hour;
};
/// GPU-hours a million tokens take at `tokens_per_second_per_gpu`.
double gpu_hours_per_million_tokens(double tokens_per_second_per_gpu);

/// The top `top` layouts: rank, layout, iteration time, tokens/s/GPU, MFU, peak memory, the
/// largest exposed communication (kind and time), the pipeline bubble, with `cost` what a
/// million tokens costs; then the counts.
std::string search_table(const SearchOutcome& outcome, size_t top, const CostColumn* cost = nullptr);

/// Why a search ranked nothing: with every valid layout out of memory, the one that needs least
/// and how far over it is, and what would make room.
std::string no_layout_fits(const SearchOutcome& outcome);

/// Counts and every simulated layout, best first.
nlohmann::ordered_json search_json(const SearchOutcome& outcome);

/// The workload file `original` (read from `original_path`) with its parallel block replaced by
/// `layout`, its topology sized to the layout's GPUs (placed as a launcher places them: part of
/// each node where the job takes part of a node, 64 of an NVL72 rack), and its relative paths
/// made absolute.
nlohmann::ordered_json workload_with_layout(const nlohmann::json& original, const std::string& original_path,
                                            const std::string& topology_file, const ParallelLayout& layout);

/// gnuplot data: every simulated layout (peak memory GiB, tokens/s per GPU), then, as a second
/// block, its Pareto front; and the script that draws them into `png`.
std::string pareto_data(const SearchOutcome& outcome);
std::string pareto_script(const std::string& data_file, const std::string& png, const std::string& title);

}  // namespace parallax
