// `parallax calibrate fit|compare`: fit launch/α/β per link class and protocol to measurements
// (harness JSON lines, nccl-tests logs), write them into a topology file with their provenance,
// and compare any measurements with what a (calibrated) topology predicts, with plots.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "calibration_record.h"
#include "collective_fit.h"
#include "measurement_comparison.h"
#include "io/atomic_file.h"
#include "io/input_error.h"
#include "parallax/cli_support.h"
#include "parallax/commands.h"
#include "parallax/text_table.h"
#include "topology/topology_loader.h"

namespace parallax::cli {
namespace {

struct CalibrateArgs {
  std::vector<std::string> inputs;
  std::string topology;
  std::optional<int> gpus, nodes, gpus_per_node;
  std::string op;
  std::string output;
  std::string json;
  std::string plot_dir;
};

nlohmann::ordered_json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "", "cannot open the file");
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path, "", std::string("not valid JSON: ") + e.what());
  }
}

// Reads every input; a bad line is reported with its file and line and skipped, and every good
// line is still used. Past a few warnings per file the rest are counted, not printed.
void warn_about(const std::vector<ReadProblem>& problems) {
  constexpr int kShownPerFile = 5;
  std::map<std::string, int> per_file;
  for (const ReadProblem& p : problems) {
    if (++per_file[p.file] <= kShownPerFile) {
      std::fprintf(stderr, "parallax: warning: %s (line skipped; the others are used)\n", p.message().c_str());
    }
  }
  for (const auto& [file, n] : per_file) {
    if (n > kShownPerFile) {
      std::fprintf(stderr, "parallax: warning: %s: %d more bad lines skipped\n", file.c_str(), n - kShownPerFile);
    }
  }
}

MeasurementSet read_inputs(const CalibrateArgs& a) {
  MeasurementReadOptions o;
  o.ranks = a.gpus;
  o.nodes = a.nodes;
  o.ranks_per_node = a.gpus_per_node;
  if (!a.op.empty()) {
    o.op = parse_op(a.op);
    if (!o.op) throw InputError("", "--op", "unknown collective \"" + a.op + "\"");
  }
  ReadOutcome in = read_measurements(a.inputs, o);
  if (in.set.collectives.empty()) {
    // Nothing usable: one error with the first reason, not a warning per line before it.
    if (in.problems.empty()) throw InputError(a.inputs.front(), "", "no collective measurement in the input");
    const ReadProblem& first = in.problems.front();
    const size_t others = in.problems.size() - 1;
    throw InputError(first.file, first.line > 0 ? "line " + std::to_string(first.line) : "",
                     first.reason + (others > 0 ? strprintf(" (and %zu more bad lines)", others) : std::string()) +
                         "; no collective measurement is left to use");
  }
  warn_about(in.problems);
  return std::move(in.set);
}

Topology load_for(const std::string& path, const MeasurementSet& set) {
  int nodes = 1;
  for (const auto& m : set.collectives) nodes = std::max(nodes, m.nodes);
  TopologyLoadOptions load;
  if (nodes > 1) load.nodes = nodes;
  Topology topology = load_topology(path, load);
  // One set of fitted link parameters per class cannot hold two kinds of node's.
  if (!topology.info().node_groups.empty()) {
    throw InputError(path, "/node_groups", "calibration fits one kind of node; use a group's own topology");
  }
  return topology;
}

bool from_mpi(const CollectiveMeasurement& m, const MeasurementSet& set) {
  for (const RunMetadata& r : set.runs) {
    if (r.run == m.run) return r.harness == "parallax-mpi-bench";
  }
  return false;
}

std::vector<CollectiveTerms> terms_of(const MeasurementSet& set, CollectiveTermModel& model) {
  std::vector<CollectiveTerms> terms;
  for (const auto& m : set.collectives) {
    try {
      terms.push_back(model.terms(m, !from_mpi(m, set)));
    } catch (const std::invalid_argument& e) {
      throw InputError(m.source.file, "line " + std::to_string(m.source.line), e.what());
    }
  }
  return terms;
}

std::string percent(double fraction) { return std::isnan(fraction) ? "n/a" : strprintf("%.1f%%", 100 * fraction); }

std::string series_name(const CollectiveMeasurement& m) {
  return strprintf("%s %s %s n=%d nodes=%d%s", std::filesystem::path(m.source.file).filename().c_str(),
                   std::string(op_name(m.op)).c_str(), m.group.c_str(), m.ranks, m.nodes, m.in_place ? " in-place" : "");
}

// A fit that the measurements cannot determine is the input's fault: named by its files.
CollectiveFit fit_or_refuse(const MeasurementSet& set, std::vector<CollectiveTerms>& terms, const std::vector<bool>& use) {
  try {
    return fit_collectives_with_regimes(set.collectives, terms, use);
  } catch (const std::invalid_argument& e) {
    std::string files;
    for (const std::string& f : set.files) files += (files.empty() ? "" : ", ") + f;
    throw InputError(files, "", std::string("these measurements cannot be fitted: ") + e.what());
  }
}

// Cross-validation, each on its own copy of the terms (a fit reassigns their regimes): fit on
// every other size and predict the rest; and, where there are other groups than "all", fit on
// them and predict "all".
FitErrors cross_validate(const MeasurementSet& set, CollectiveTermModel& model) {
  const auto& ms = set.collectives;
  FitErrors errors;
  std::vector<CollectiveTerms> cv_terms = terms_of(set, model);
  std::vector<bool> half = alternate_sizes_split(ms);
  CollectiveFit half_fit = fit_or_refuse(set, cv_terms, half);
  std::vector<bool> held(half.size());
  for (size_t i = 0; i < half.size(); ++i) held[i] = !half[i];
  errors.held_out_alternate_sizes = prediction_errors(ms, cv_terms, half_fit, held);

  std::vector<bool> others(ms.size()), whole(ms.size());
  bool have_all = false, have_others = false;
  for (size_t i = 0; i < ms.size(); ++i) {
    whole[i] = ms[i].group == "all";
    others[i] = !whole[i];
    have_all = have_all || whole[i];
    have_others = have_others || others[i];
  }
  if (have_all && have_others) {
    std::vector<CollectiveTerms> logo_terms = terms_of(set, model);
    try {
      CollectiveFit f = fit_collectives_with_regimes(ms, logo_terms, others);
      errors.leave_one_group_out = prediction_errors(ms, logo_terms, f, whole);
    } catch (const std::invalid_argument& e) {
      spdlog::warn("leave-one-group-out skipped: {}", e.what());
    }
  }
  return errors;
}

void print_fit(const MeasurementSet& set, const Topology& base, const CollectiveFit& fit, const FitErrors& errors) {
  const auto& ms = set.collectives;
  std::printf("# Parallax calibration fit: %zu collective measurements from %zu file(s) on %s\n", ms.size(),
              set.files.size(), base.info().name.c_str());
  TextTable t({"parameter", "value", "std. error", "note"},
              {TextTable::Align::kLeft, TextTable::Align::kRight, TextTable::Align::kRight, TextTable::Align::kLeft});
  for (const FittedParameter& p : fit.parameters) {
    if (!p.identifiable) continue;
    std::string se = std::isnan(p.standard_error) ? "-" : strprintf("%.3g%%", 100 * p.standard_error / std::max(p.value, 1e-300));
    std::string shown = p.name;
    if (shown.rfind("inverse_bandwidth.", 0) == 0) shown = "beta." + shown.substr(18);
    t.add_row({shown, parameter_text(p, p.value), se, p.at_bound ? "at bound 0" : ""});
  }
  std::printf("%s", t.render().c_str());
  for (const std::string& f : fit.folded) std::printf("  folded: %s\n", f.c_str());
  std::printf("  rejected as outliers: %zu of %zu rows\n", fit.raw.rejected_rows.size(), ms.size());
  std::printf("  in-sample: time median |err| %s, p90 %s\n", percent(errors.in_sample.median_time()).c_str(),
              percent(errors.in_sample.p90_time()).c_str());
  const PredictionErrors& held = errors.held_out_alternate_sizes;
  std::printf("  held-out sizes (fit on every other size): time median |err| %s, busbw >= 1 MiB median |err| %s\n",
              percent(held.median_time()).c_str(), percent(held.median_busbw_large()).c_str());
  if (const auto& logo = errors.leave_one_group_out) {
    std::printf("  leave-one-group-out (fit without group \"all\", predict it): time median |err| %s, busbw >= 1 MiB %s\n",
                percent(logo->median_time()).c_str(), percent(logo->median_busbw_large()).c_str());
  }
}

void run_fit(const CalibrateArgs& a) {
  MeasurementSet set = read_inputs(a);
  Topology base = load_for(a.topology, set);
  CollectiveTermModel model(base);
  FitErrors errors = cross_validate(set, model);
  std::vector<CollectiveTerms> terms = terms_of(set, model);
  CollectiveFit fit = fit_or_refuse(set, terms, {});
  errors.in_sample = prediction_errors(set.collectives, terms, fit, {});
  print_fit(set, base, fit, errors);
  // The calibrated topology: the base file as written, plus the calibration block.
  nlohmann::ordered_json out = read_json_file(a.topology);
  nlohmann::ordered_json cal = calibration_block(set, fit, errors);
  out["calibration"] = cal;
  write_file_atomically(a.output, out.dump(2) + "\n");
  if (!a.json.empty()) write_file_atomically(a.json, cal.dump(2) + "\n");
  std::printf("  wrote %s\n", a.output.c_str());
}

void plot(const std::string& dir, const std::vector<std::pair<std::string, std::vector<std::array<double, 3>>>>& series,
          const std::vector<std::array<double, 3>>& scaling) {
  std::filesystem::create_directories(dir);
  std::string script =
      "set terminal pngcairo size 1000,650 noenhanced\nset logscale x 2\nset format x '%.0b%B'\nset key left top\nset grid\n";
  script += "set xlabel 'size (bytes)'\nset ylabel 'busbw (GB/s)'\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const std::string data = dir + "/busbw-" + std::to_string(s) + ".dat";
    std::ofstream d(data);
    for (const auto& r : series[s].second) d << r[0] << " " << r[1] << " " << r[2] << "\n";
    script += "set output '" + dir + "/busbw-" + std::to_string(s) + ".png'\nset title \"" + series[s].first + "\"\n";
    script += "plot '" + data + "' using 1:2 with linespoints title 'measured', '' using 1:3 with lines title 'predicted'\n";
  }
  if (scaling.size() >= 2) {
    const std::string data = dir + "/scaling.dat";
    std::ofstream d(data);
    for (const auto& r : scaling) d << r[0] << " " << r[1] << " " << r[2] << "\n";
    script += "set output '" + dir + "/scaling.png'\nunset logscale x\nset format x '%g'\nset xlabel 'ranks'\nset title 'busbw at the largest size vs ranks'\n";
    script += "plot '" + data + "' using 1:2 with points pt 7 title 'measured', '' using 1:3 with linespoints title 'predicted'\n";
  }
  run_gnuplot(dir + "/plots.gp", script);
}

// The measurements' series (file, op, group, ranks, nodes, in-place), in the order first seen.
std::vector<std::pair<std::string, std::vector<size_t>>> series_of(const std::vector<CollectiveMeasurement>& ms) {
  std::vector<std::pair<std::string, std::vector<size_t>>> series;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < ms.size(); ++i) {
    std::string s = series_name(ms[i]);
    auto [it, added] = index.try_emplace(s, series.size());
    if (added) series.emplace_back(s, std::vector<size_t>{});
    series[it->second].second.push_back(i);
  }
  return series;
}

std::vector<std::string> compared_row(const CollectiveMeasurement& m, const ComparedPoint& p) {
  const std::string size = strprintf("%.0f", m.size.value()), time = strprintf("%.2f", p.measured.seconds() * 1e6);
  const std::string bus = strprintf("%.2f", p.measured_busbw_gbs);
  if (!p.predicted_positive()) return {size, time, "-", "-", bus, "-", "-"};
  return {size, time, strprintf("%.2f", p.predicted->seconds() * 1e6), strprintf("%+.1f%%", 100 * p.time_error), bus,
          strprintf("%.2f", p.predicted_busbw_gbs), m.size.value() > 0 ? strprintf("%+.1f%%", 100 * p.busbw_error) : "-"};
}

// What a comparison gathers beyond its tables: the errors, the JSON rows, the busbw curves and,
// per rank count, the largest size of the first op (the scaling plot).
struct ComparisonTotals {
  std::vector<double> time_err, busbw_err;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::vector<std::pair<std::string, std::vector<std::array<double, 3>>>> plots;
  std::map<int, std::array<double, 3>> scaling;  // ranks → (size, measured, predicted) at the largest size
};

void write_comparison(const CalibrateArgs& a, bool calibrated, const ComparisonTotals& c) {
  std::printf("\n# summary: time |err| median %s, p90 %s over %zu rows; busbw >= 1 MiB |err| median %s, p90 %s\n",
              percent(median_of(c.time_err)).c_str(), percent(quantile_of(c.time_err, 0.9)).c_str(), c.time_err.size(),
              percent(median_of(c.busbw_err)).c_str(), percent(quantile_of(c.busbw_err, 0.9)).c_str());
  if (!a.json.empty()) {
    nlohmann::ordered_json j;
    j["topology"] = a.topology;
    j["calibrated"] = calibrated;
    j["rows"] = c.rows;
    j["time_median_abs_error"] = median_of(c.time_err);
    j["time_p90_abs_error"] = quantile_of(c.time_err, 0.9);
    j["busbw_median_abs_error_ge_1MiB"] = median_of(c.busbw_err);
    write_file_atomically(a.json, j.dump(2) + "\n");
  }
  if (!a.plot_dir.empty()) {
    std::vector<std::array<double, 3>> sc;
    for (const auto& [ranks, v] : c.scaling) sc.push_back({static_cast<double>(ranks), v[1], v[2]});
    plot(a.plot_dir, c.plots, sc);
    std::printf("# plots: %s/busbw-*.png%s\n", a.plot_dir.c_str(), sc.size() >= 2 ? ", scaling.png" : "");
  }
}

void run_compare(const CalibrateArgs& a) {
  MeasurementSet set = read_inputs(a);
  Topology topo = load_for(a.topology, set);
  CollectiveTermModel model(topo);
  MeasurementComparison comparison(topo, terms_of(set, model));
  const auto& ms = set.collectives;
  std::printf("# Parallax calibrate compare: %s (%s)\n", a.topology.c_str(),
              comparison.calibrated() ? "calibrated" : "uncalibrated: NCCL's model on the datasheet topology");
  std::printf("# measured time: the median iteration where the file gives it, else the mean\n");
  ComparisonTotals c;
  for (const auto& [s, indices] : series_of(ms)) {
    std::printf("\n## %s\n", s.c_str());
    TextTable t({"size", "time_us", "pred_us", "err", "busbw", "pred_busbw", "err"});
    std::vector<std::array<double, 3>> curve;
    for (size_t i : indices) {
      const CollectiveMeasurement& m = ms[i];
      const ComparedPoint p = comparison.compare(m, i);
      t.add_row(compared_row(m, p));
      if (!p.predicted_positive()) continue;
      c.time_err.push_back(std::fabs(p.time_error));
      if (m.size.value() >= 1 << 20) c.busbw_err.push_back(std::fabs(p.busbw_error));
      if (m.size.value() > 0) curve.push_back({m.size.value(), p.measured_busbw_gbs, p.predicted_busbw_gbs});
      auto& sc = c.scaling[m.ranks];
      if (!m.in_place && m.op == ms.front().op && m.size.value() >= sc[0]) {
        sc = {m.size.value(), p.measured_busbw_gbs, p.predicted_busbw_gbs};
      }
      c.rows.push_back(compared_point_json(m, p));
    }
    std::printf("%s", t.render().c_str());
    c.plots.emplace_back(s, curve);
  }
  write_comparison(a, comparison.calibrated(), c);
}

void common_options(CLI::App* cmd, CalibrateArgs& a) {
  cmd->add_option("measurements", a.inputs, "harness JSON-lines files and nccl-tests logs")->required();
  cmd->add_option("--topology", a.topology, "the topology the measurements ran on")->required();
  cmd->add_option("--gpus,-g", a.gpus, "ranks of logs that do not list their devices");
  cmd->add_option("--nodes", a.nodes, "nodes of logs that do not list their devices");
  cmd->add_option("--gpus-per-node", a.gpus_per_node,
                  "ranks on the fullest node of logs that do not list their devices (as parallax collective takes it)");
  cmd->add_option("--op", a.op, "the collective of logs that do not say it");
  cmd->add_option("--json", a.json, "write the report as JSON");
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("calibrate", "fit the model to measurements and compare predictions with them");
  cmd->require_subcommand(1);
  auto args = std::make_shared<CalibrateArgs>();
  auto* fit = cmd->add_subcommand("fit", "fit launch/alpha/beta per link class and protocol; write a calibrated topology");
  common_options(fit, *args);
  fit->add_option("-o,--output", args->output, "the calibrated topology to write")->required();
  fit->callback([args] { run_fit(*args); });
  auto* compare = cmd->add_subcommand("compare", "measured vs predicted per size, with summary errors and plots");
  common_options(compare, *args);
  compare->add_option("--plot", args->plot_dir, "draw busbw and scaling plots (PNG, gnuplot) into this folder");
  compare->callback([args] { run_compare(*args); });
}

}  // namespace parallax::cli
