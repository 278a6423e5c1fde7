// The formats of a layout search (search_report.h).
#include "planning/search_report.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "compute/operator_cost.h"
#include "training/iteration_report.h"
#include "io/text_format.h"

namespace parallax {
namespace {

namespace fs = std::filesystem;

std::string absolute_beside(const std::string& path, const std::string& original_path) {
  fs::path p(path);
  if (p.is_relative()) p = fs::absolute(fs::path(original_path).parent_path() / p);
  return p.lexically_normal().string();
}

// With DP and PP both above one, which of them is inner decides what shares the NICs.
std::string row_layout(const ParallelLayout& l) {
  return layout_description(l) + (l.dp > 1 && l.pp > 1 ? ", order " + l.rank_order : "");
}

}  // namespace

double gpu_hours_per_million_tokens(double tokens_per_second_per_gpu) {
  return 1e6 / (tokens_per_second_per_gpu * 3600.0);
}

std::string search_table(const SearchOutcome& o, size_t top, const CostColumn* cost) {
  std::string t = format_text("  %4s  %-100s %11s %9s %6s %9s  %-18s %7s", "rank", "layout", "iteration", "tok/s/GPU", "MFU",
                              "memory", "most exposed comm", "bubble");
  if (cost) t += format_text(" %11s%s", "GPU-h/Mtok", cost->usd_per_gpu_hour ? "    $/Mtok" : "");
  t += "\n";
  for (size_t i = 0; i < std::min(top, o.ranked.size()); ++i) {
    const SearchedLayout& s = o.ranked[i];
    const LayoutSummary& r = s.result;
    t += format_text("  %4zu  %-100s %9.3f s %9.1f %5.1f%% %5.1f GiB  %-4s %10.2f ms %6.1f%%", i + 1,
                     row_layout(s.layout).c_str(), r.iteration_time_s, r.tokens_per_second_per_gpu, 100 * r.mfu,
                     in_gib(Bytes(r.peak_memory_bytes)), to_string(static_cast<WorkKind>(r.most_exposed_kind)), r.most_exposed_s * 1e3,
                     100 * r.pipeline_bubble_fraction);
    if (cost) {
      const double hours = gpu_hours_per_million_tokens(r.tokens_per_second_per_gpu);
      t += format_text(" %11.4g", hours);
      if (cost->usd_per_gpu_hour) t += format_text(" %9.4g", hours * *cost->usd_per_gpu_hour);
    }
    t += "\n";
  }
  t += format_text("\nlayouts: %zu enumerated = %zu rejected by rule + %zu rejected by memory + %zu pruned by bound + "
              "%zu simulated\n",
              o.enumerated, o.rejected_by_rule, o.rejected_by_memory, o.pruned_by_bound, o.simulated);
  return t;
}

std::string no_layout_fits(const SearchOutcome& o) {
  if (!o.none_fits || !o.leanest_out_of_memory) return "no layout of the space fits and runs on these GPUs";
  return format_text(
      "no layout of the space fits in memory: the leanest of the %zu, %s, needs %.1f GiB a GPU of %.1f GiB; "
      "more GPUs (--gpus), a smaller micro-batch or sequence, or recomputation and sharding in the space "
      "(docs/search-format.md) would make room",
      o.rejected_by_memory, layout_description(*o.leanest_out_of_memory).c_str(), in_gib(o.leanest_peak_memory),
      in_gib(o.gpu_memory));
}

nlohmann::ordered_json search_json(const SearchOutcome& o) {
  nlohmann::ordered_json j;
  j["enumerated"] = o.enumerated;
  j["rejected_by_rule"] = o.rejected_by_rule;
  j["rejected_by_memory"] = o.rejected_by_memory;
  j["pruned_by_bound"] = o.pruned_by_bound;
  j["simulated"] = o.simulated;
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const SearchedLayout& s : o.ranked) {
    const LayoutSummary& r = s.result;
    all.push_back({{"layout", row_layout(s.layout)},
                   {"parallel", parallel_block(s.layout)},
                   {"iteration_time_s", r.iteration_time_s},
                   {"tokens_per_second_per_gpu", r.tokens_per_second_per_gpu},
                   {"mfu", r.mfu},
                   {"peak_memory_bytes", r.peak_memory_bytes},
                   {"pipeline_bubble_fraction", r.pipeline_bubble_fraction},
                   {"most_exposed_communication",
                    {{"kind", to_string(static_cast<WorkKind>(r.most_exposed_kind))}, {"s", r.most_exposed_s}}}});
  }
  j["layouts"] = all;
  return j;
}

nlohmann::ordered_json workload_with_layout(const nlohmann::json& original, const std::string& original_path,
                                            const std::string& topology_file, const ParallelLayout& layout) {
  nlohmann::ordered_json w;
  w["description"] = "The best layout parallax search found for " + original_path + ": " + layout_description(layout);
  nlohmann::json model = original.at("model");
  if (model.is_string()) {
    const std::string m = model.get<std::string>();
    if (m.size() > 5 && m.compare(m.size() - 5, 5, ".json") == 0) model = absolute_beside(m, original_path);
  }
  w["model"] = model;
  w["topology"] = {{"file", fs::absolute(topology_file).lexically_normal().string()},
                   {"gpus", layout.dp * layout.tp * layout.pp * layout.cp}};
  w["sequence_length"] = layout.sequence_length;
  w["parallel"] = parallel_block(layout);
  if (original.contains("compute")) {
    nlohmann::json compute = original.at("compute");
    if (compute.contains("gemm_table")) compute["gemm_table"] = absolute_beside(compute["gemm_table"], original_path);
    w["compute"] = compute;
  }
  return w;
}

std::string pareto_data(const SearchOutcome& o) {
  // Block 0: every simulated layout; block 1: the Pareto front (no other layout is at least as
  // fast with no more memory), by memory.
  std::vector<std::pair<double, double>> points;  // (memory GiB, tokens/s per GPU)
  for (const SearchedLayout& s : o.ranked) points.emplace_back(in_gib(Bytes(s.result.peak_memory_bytes)), s.result.tokens_per_second_per_gpu);
  std::string out = "# peak memory per GPU (GiB), tokens/s per GPU\n";
  std::vector<std::pair<double, double>> front;
  for (size_t i = 0; i < points.size(); ++i) {
    out += format_text("%.6g %.6g\n", points[i].first, points[i].second);
    bool dominated = false;
    for (size_t j = 0; j < points.size() && !dominated; ++j) {
      dominated = j != i && points[j].first <= points[i].first && points[j].second >= points[i].second &&
                  (points[j].first < points[i].first || points[j].second > points[i].second);
    }
    if (!dominated) front.push_back(points[i]);
  }
  std::sort(front.begin(), front.end());
  out += "\n\n# the Pareto front\n";
  for (const auto& [memory, speed] : front) out += format_text("%.6g %.6g\n", memory, speed);
  return out;
}

std::string pareto_script(const std::string& data_file, const std::string& png, const std::string& title) {
  std::string s = "set terminal pngcairo noenhanced size 900,600\nset output '" + png + "'\n";
  s += "set title \"" + gnuplot_text(title) + "\"\nset xlabel 'peak memory per GPU (GiB)'\nset ylabel 'tokens/s per GPU'\n";
  s += "set key top left\nset grid\n";
  s += "plot '" + data_file + "' index 0 using 1:2 with points pt 7 ps 0.6 lc rgb '#8080a0' title 'simulated layouts', \\\n";
  s += "     '' index 1 using 1:2 with linespoints pt 7 lw 2 lc rgb '#d04020' title 'Pareto front'\n";
  return s;
}

}  // namespace parallax
