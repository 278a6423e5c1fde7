// `parallax validate`'s work (run_validation.h).
#include "training/run_validation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "io/input_error.h"
#include "model/model_block.h"
#include "topology/topology_loader.h"
#include "training/workload_writer.h"

namespace parallax {

RunValidator::RunValidator(std::string topologies_dir, double sustained_fraction, ValidationModel model)
    : topologies_dir_(std::move(topologies_dir)), sustained_fraction_(sustained_fraction), model_(model) {}

RunPrediction RunValidator::predict(const PublishedRun& run) {
  RunPrediction p;
  p.problem = run.error;
  if (!p.problem.empty()) return p;
  try {
    p.layout = parallel_layout_of(run);
    if (run.layout.micro_batch_assumed) p.note = "micro-batch unknown: 1";
    // The vendor's standard node, as many as the GPUs fill.
    const std::string file = topologies_dir_ + "/" + run.preset + ".json";
    auto it = one_node_.find(file);
    if (it == one_node_.end()) it = one_node_.emplace(file, load_topology(file, TopologyLoadOptions{1})).first;
    // Placed as a launcher would: the same GPUs on every node, part of each when whole nodes
    // do not divide the run (64 of a 72-GPU rack).
    const int per_node = static_cast<int>(it->second.gpus_of_node(0).size());
    const Topology topo = load_topology(file, load_options_for(run.gpus, per_node));
    IterationOptions options;
    options.compute.sustained_fraction = sustained_fraction_;
    options.compute.host_dispatch = model_.host_dispatch;
    options.compute.host_gemm_issue = model_.host_gemm_issue;
    options.compute.attention_model = model_.attention_model;
    options.cosimulate = model_.cosimulate;
    p.result = simulate_iteration(run.model, *p.layout, topo, options);
    p.predicted = p.result.tokens_per_second_per_gpu;
    if (!run.expected_out_of_memory) p.error = p.predicted / run.expected_tokens_per_sec_per_gpu - 1.0;
    if (p.result.out_of_memory) {
      char gib[32];
      std::snprintf(gib, sizeof gib, "%.1f GiB", p.result.peak_memory.value() / (1024.0 * 1024 * 1024));
      p.note += std::string(p.note.empty() ? "" : "; ") + "predicted OOM (" + gib + ")";
    }
  } catch (const std::exception& e) {
    p.problem = e.what();
  }
  return p;
}

nlohmann::ordered_json workload_of_run(const PublishedRun& run, double sustained_fraction, const ValidationModel& model) {
  if (!run.error.empty()) throw InputError("", "/" + run.id, run.error);
  const ParallelLayout layout = parallel_layout_of(run);
  nlohmann::ordered_json w;
  w["description"] = "The published run " + run.id + " as `parallax validate` simulates it. " + run.source;
  w["model"] = model_block(run.model);
  w["topology"] = {{"preset", run.preset}, {"gpus", run.gpus}};
  w["sequence_length"] = layout.sequence_length;
  w["parallel"] = parallel_block(layout);
  w["compute"] = {{"sustained_fraction", sustained_fraction},
                  {"host_dispatch", std::to_string(model.host_dispatch.picoseconds()) + " ps"},
                  {"host_gemm_issue", std::to_string(model.host_gemm_issue.picoseconds()) + " ps"}};
  if (model.attention_model != AttentionModel::kShape) w["compute"]["attention_model"] = attention_model_name(model.attention_model);
  return w;
}

nlohmann::ordered_json run_json(const PublishedRun& run, const RunPrediction& p) {
  nlohmann::ordered_json j;
  j["id"] = run.id;
  j["gpu"] = run.gpu;
  j["gpus"] = run.gpus;
  if (run.expected_out_of_memory) {
    j["expected_out_of_memory"] = true;
  } else {
    j["expected_tokens_per_sec_per_gpu"] = run.expected_tokens_per_sec_per_gpu;
  }
  if (!p.problem.empty()) {
    j["error_message"] = p.problem;
    return j;
  }
  const IterationResult& r = p.result;
  j["predicted_tokens_per_sec_per_gpu"] = p.predicted;
  if (!run.expected_out_of_memory) j["error"] = p.error;
  j["mfu"] = r.mfu;
  // Where the predicted time goes, for looking into a row's error: the iteration, its
  // pipeline bubble, and the most communication any stage leaves exposed.
  j["iteration_time_s"] = r.iteration_time.seconds();
  j["pipeline_bubble_fraction"] = r.pipeline_bubble_fraction;
  Time exposed;
  for (const StageResult& stage : r.stages) exposed = std::max(exposed, stage.time.exposed_communication());
  j["exposed_communication_s"] = exposed.seconds();
  j["peak_memory_bytes"] = r.peak_memory.value();
  j["gpu_memory_bytes"] = r.gpu_memory.value();
  if (r.out_of_memory) j["out_of_memory"] = true;
  return j;
}

std::string source_label(const std::string& source) {
  size_t end = source.size();
  for (const char* stop : {",", " (", " \u2014", " - "}) end = std::min(end, source.find(stop));
  std::string label = source.substr(0, end);
  if (label.size() > 40) label = label.substr(0, 39) + "~";
  return label.empty() ? "(no source)" : label;
}

double mean_error(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? std::nan("") : s / static_cast<double>(v.size());
}

double median_error(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

namespace {

std::vector<double> ranks_of(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double average = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = average;
    i = j + 1;
  }
  return rank;
}

}  // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) return std::nan("");
  const std::vector<double> ra = ranks_of(a), rb = ranks_of(b);
  const double n = static_cast<double>(a.size()), mean = (n + 1) / 2;
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    cov += (ra[i] - mean) * (rb[i] - mean);
    va += (ra[i] - mean) * (ra[i] - mean);
    vb += (rb[i] - mean) * (rb[i] - mean);
  }
  return va > 0 && vb > 0 ? cov / std::sqrt(va * vb) : std::nan("");
}

std::vector<RankAgreement> rank_agreement(const std::vector<PublishedRun>& runs,
                                          const std::vector<RunPrediction>& predictions, size_t min_rows) {
  std::map<std::pair<std::string, std::string>, std::pair<std::vector<double>, std::vector<double>>> groups;
  for (size_t i = 0; i < runs.size() && i < predictions.size(); ++i) {
    if (!predictions[i].problem.empty() || runs[i].expected_out_of_memory) continue;
    auto& g = groups[{source_label(runs[i].source), runs[i].model.name}];
    g.first.push_back(predictions[i].predicted);
    g.second.push_back(runs[i].expected_tokens_per_sec_per_gpu);
  }
  std::vector<RankAgreement> out;
  for (const auto& [key, series] : groups) {
    if (series.first.size() < min_rows) continue;
    const auto& [predicted, published] = series;
    const double rho = spearman(predicted, published);
    if (std::isnan(rho)) continue;
    const size_t chosen = static_cast<size_t>(std::max_element(predicted.begin(), predicted.end()) - predicted.begin());
    const double best = *std::max_element(published.begin(), published.end());
    out.push_back(RankAgreement{key.first, key.second, predicted.size(), rho, published[chosen] / best - 1.0});
  }
  return out;
}

}  // namespace parallax
