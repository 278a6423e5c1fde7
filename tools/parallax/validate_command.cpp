// `parallax validate RUNS.json...`: published (or the user's own) training runs predicted, the
// error per row and its summaries (over every file given, then per file), the rank agreement per
// model, and --fit-sustained-fraction / --fit-host-dispatch / --fit-host-gemm-issue, which fit one
// of the model's global constants to the rows. Thin: the rows are read by sim/training/published_runs.h, predicted by
// run_validation.h, fitted by constant_fit.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/input_error.h"
#include "io/text_format.h"
#include "parallax/cli_support.h"
#include "parallax/commands.h"
#include "parallax/text_table.h"
#include "training/constant_fit.h"
#include "training/iteration_report.h"
#include "training/published_runs.h"
#include "training/run_validation.h"
#include "training/validation_plots.h"
#include "units/unit_parse.h"

namespace parallax::cli {
namespace {

const std::string& kRunsTopologiesDir = topologies_dir();

struct ValidateArgs {
  std::vector<std::string> runs;  // one file or more, read in this order
  std::string json;
  double sustained_fraction = ComputeModelOptions{}.sustained_fraction;
  std::string network = "analytical";
  bool fit_sustained_fraction = false;
  bool fit_host_dispatch = false;
  bool fit_host_gemm_issue = false;
  std::optional<int> jobs;
  std::string plot_dir;
  std::string host_dispatch;    // a time string; empty: the default
  std::string host_gemm_issue;  // the same
  std::string attention_model = "shape";
  std::vector<std::string> emit_workload;  // {row id, file}
};

// The runs files as the reports name them: the path of the one, or how many.
std::string runs_label(const ValidateArgs& a) {
  return a.runs.size() == 1 ? a.runs.front() : std::to_string(a.runs.size()) + " runs files";
}

// Every file's rows in the order given; `file_of[i]` is row i's file.
struct RunsOfFiles {
  std::vector<PublishedRun> runs;
  std::vector<size_t> file_of;
};

RunsOfFiles read_runs_files(const ValidateArgs& a) {
  RunsOfFiles r;
  for (size_t f = 0; f < a.runs.size(); ++f) {
    for (PublishedRun& run : read_published_runs(a.runs[f], bundled_models_dir())) {
      // The row's JSON path alone would not say which file it is in.
      if (!run.error.empty() && a.runs.size() > 1) run.error = a.runs[f] + ": " + run.error;
      r.runs.push_back(std::move(run));
      r.file_of.push_back(f);
    }
  }
  return r;
}

// What every row is simulated with: the network mode and the host's two times.
ValidationModel validation_model(const ValidateArgs& a) {
  ValidationModel m;
  m.cosimulate = a.network == "flow";
  m.attention_model = *attention_model_named(a.attention_model);  // CLI11 checks the name
  for (auto [text, flag, field] : {std::tuple{&a.host_dispatch, "--host-dispatch", &m.host_dispatch},
                                   std::tuple{&a.host_gemm_issue, "--host-gemm-issue", &m.host_gemm_issue}}) {
    if (text->empty()) continue;
    try {
      *field = parse_time(*text);
    } catch (const UnitError& e) {
      throw InputError("", flag, e.what());
    }
  }
  return m;
}

// A row's group by hardware and number format: "H100-80GB fp8 (current)", "GB200 bf16".
std::string gpu_and_precision(const PublishedRun& run) {
  std::string label = run.gpu + " " + run.precision;
  if (run.precision == "fp8") label += " (" + run.fp8_recipe + ")";
  return label;
}

// The error summaries under the table: over every simulated row, per GPU type and precision,
// and per source (signed: a bias shared by one publication's rows — its framework, its kernels,
// its hardware — shows there, where per-row errors only look like scatter); rows published as
// out of memory counted apart.
void print_error_summaries(const std::vector<PublishedRun>& runs, const std::vector<RunPrediction>& predictions) {
  std::vector<double> errors;
  std::map<std::string, std::vector<double>> by_gpu;     // signed errors
  std::map<std::string, std::vector<double>> by_source;  // signed errors
  size_t out_of_memory = 0, agreed = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const PublishedRun& run = runs[i];
    const RunPrediction& p = predictions[i];
    if (!p.problem.empty()) continue;
    if (run.expected_out_of_memory) {
      ++out_of_memory;
      agreed += p.result.out_of_memory ? 1 : 0;
      continue;
    }
    errors.push_back(std::fabs(p.error));
    by_gpu[gpu_and_precision(run)].push_back(p.error);
    by_source[source_label(run.source)].push_back(p.error);
  }
  const size_t simulated = errors.size() + out_of_memory;
  if (errors.empty()) {
    std::printf("no published throughput could be compared (%zu runs): no error to report\n", runs.size());
  } else {
    std::printf("tokens/s per GPU, |predicted/published - 1| over %zu simulated rows (%zu not simulated): median %.1f%%, mean (MAPE) %.1f%%\n",
                errors.size(), runs.size() - simulated, 100 * median_error(errors), 100 * mean_error(errors));
  }
  if (out_of_memory > 0) {
    std::printf("published out of memory: %zu rows, %zu of them predicted out of memory\n", out_of_memory, agreed);
  }
  auto magnitudes = [](const std::vector<double>& v) {
    std::vector<double> m;
    for (double e : v) m.push_back(std::fabs(e));
    return m;
  };
  std::printf("per GPU type and precision: rows, median |error|, median signed error (bias), mean |error|\n");
  for (const auto& [group, v] : by_gpu) {
    const std::vector<double> m = magnitudes(v);
    std::printf("  %-26s %3zu rows: median %.1f%%, bias %+.1f%%, mean %.1f%%\n", group.c_str(), v.size(),
                100 * median_error(m), 100 * median_error(v), 100 * mean_error(m));
  }
  std::printf("per source: rows, median signed error (bias), mean |error|\n");
  for (const auto& [source, v] : by_source) {
    std::printf("  %-40s %3zu rows: median %+.1f%%, mean |error| %.1f%%\n", source.c_str(), v.size(), 100 * median_error(v),
                100 * mean_error(magnitudes(v)));
  }
}

// With several files: each file's compared rows, its MAPE and signed median (a dev set and a
// hold-out given together stay apart here).
void print_file_summaries(const ValidateArgs& a, const RunsOfFiles& files, const std::vector<RunPrediction>& predictions) {
  std::vector<std::vector<double>> signed_errors(a.runs.size());
  for (size_t i = 0; i < files.runs.size(); ++i) {
    if (predictions[i].problem.empty() && !files.runs[i].expected_out_of_memory) {
      signed_errors[files.file_of[i]].push_back(predictions[i].error);
    }
  }
  int width = 0;
  for (const std::string& file : a.runs) width = std::max(width, static_cast<int>(file.size()));
  std::printf("per file: rows compared, mean |error| (MAPE), median |error|, median signed error (bias)\n");
  for (size_t f = 0; f < a.runs.size(); ++f) {
    const std::vector<double>& v = signed_errors[f];
    if (v.empty()) {
      std::printf("  %-*s    0 rows\n", width, a.runs[f].c_str());
      continue;
    }
    std::vector<double> m;
    for (double e : v) m.push_back(std::fabs(e));
    std::printf("  %-*s %4zu rows: MAPE %.1f%%, median %.1f%%, bias %+.1f%%\n", width, a.runs[f].c_str(), v.size(),
                100 * mean_error(m), 100 * median_error(m), 100 * median_error(v));
  }
}

// How the predictions order each source's layouts of one model (what a search ranks by).
void print_rank_agreement(const std::vector<PublishedRun>& runs, const std::vector<RunPrediction>& predictions) {
  const std::vector<RankAgreement> ranks = rank_agreement(runs, predictions);
  if (ranks.empty()) return;
  std::printf("rank agreement per source and model (3+ rows): Spearman's rho, predicted vs published tokens/s per GPU;\n"
              "the published throughput of the layout predicted fastest against the fastest published\n");
  double sum = 0, worst = 0;
  for (const RankAgreement& r : ranks) {
    std::printf("  %-40s %-36s %3zu rows: %+.2f, first choice %+.1f%%\n", r.source.c_str(), r.model.c_str(), r.rows, r.rho,
                100 * r.first_choice_shortfall);
    sum += r.rho;
    worst = std::min(worst, r.first_choice_shortfall);
  }
  std::printf("  mean over %zu groups: %+.2f; first choice at worst %+.1f%% from the best\n", ranks.size(),
              sum / static_cast<double>(ranks.size()), 100 * worst);
}

// One row of the table: published and predicted tokens/s per GPU and the error, or for a run
// published as out of memory whether the memory model agrees.
std::vector<std::string> validation_row(const PublishedRun& run, const RunPrediction& p) {
  const std::string layout = p.layout ? layout_description(*p.layout) : "";
  const std::string published = run.expected_out_of_memory ? "OOM" : strprintf("%.0f", run.expected_tokens_per_sec_per_gpu);
  if (!p.problem.empty()) {
    return {run.id, run.gpu, std::to_string(run.gpus), layout, published, "-", "-", "not simulated: " + p.problem};
  }
  if (run.expected_out_of_memory) {
    const std::string peak = gib(p.result.peak_memory) + " of " + gib(p.result.gpu_memory);
    return {run.id, run.gpu, std::to_string(run.gpus), layout, published, p.result.out_of_memory ? "OOM" : "fits", "-",
            p.result.out_of_memory ? "agrees (" + peak + ")" : "predicted to fit: " + peak};
  }
  return {run.id, run.gpu, std::to_string(run.gpus), layout, published, strprintf("%.0f", p.predicted),
          strprintf("%+.1f%%", 100 * p.error), p.note};
}

// A constant `validate` can fit to a file's rows, and how it is shown.
struct FitSpec {
  Time ValidationModel::*host_time;  // the host time fitted; null: σ
  const char* flag;       // the option that asks for it
  const char* name;       // in the report's words
  const char* symbol;     // in the report's lines
  const char* unit;       // after each value ("" or " us")
  int decimals;           // of each value
  double lo, hi, step;    // the grid searched
  const char* plot;       // the PNG's stem
  const char* axis;       // the plot's x axis
};

// σ: a grid wide enough for every source of the bundled files (0.55-0.87,
// docs/performance-and-accuracy.md), fine enough for the figures printed. t_dispatch: from none
// (CUDA graphs) to well past the 74 us of an eager 2023 stack, by 1 us.
// t_host: from none (a device-side grouped GEMM) to twice the 55 us fitted on the MoE dev rows.
constexpr FitSpec kSigmaFit{nullptr, "--fit-sustained-fraction", "sustained fraction", "sigma", "", 2, 0.40, 1.00, 0.01,
                            "sigma", "sustained fraction (sigma)"};
constexpr FitSpec kDispatchFit{&ValidationModel::host_dispatch, "--fit-host-dispatch", "host dispatch time", "t_dispatch",
                               " us", 0, 0, 200, 1, "host-dispatch", "the host's time to issue a kernel (us)"};
constexpr FitSpec kGemmIssueFit{&ValidationModel::host_gemm_issue, "--fit-host-gemm-issue", "host GEMM issue time", "t_host",
                                " us", 0, 0, 110, 1, "host-gemm-issue",
                                "the host's time to issue one per-expert GEMM (us)"};

std::string value_text(const FitSpec& spec, double v) { return strprintf("%.*f%s", spec.decimals, v, spec.unit); }

// One line per group: the value fitted on its rows alone, and held out against the others.
void print_hold_outs(const FitSpec& spec, const std::vector<SourceHoldOut>& groups, const char* what) {
  for (const SourceHoldOut& h : groups) {
    std::printf("  %-40s %3zu rows: alone %s (MAPE %.1f%%)", h.source.c_str(), h.rows, value_text(spec, h.own_value).c_str(),
                100 * h.own_mape);
    if (std::isnan(h.others_value)) {
      std::printf("; no other %s to hold it out against\n", what);
    } else {
      std::printf("; others %s, held out: MAPE %.1f%%\n", value_text(spec, h.others_value).c_str(), 100 * h.held_out_mape);
    }
  }
}

struct ConstantFitOutcome {
  const FitSpec* spec = nullptr;
  ConstantSweep sweep;
  ConstantFit fit;
};

// The fit's report: the value, the MAPE curve, and each source and each GPU type held out.
void print_constant_fit(const ValidateArgs& a, const ConstantFitOutcome& f, const std::vector<std::string>& gpus) {
  const FitSpec& spec = *f.spec;
  const ConstantFit& fit = f.fit;
  std::printf("# %s fitted to %s: %s %s-%s in steps of %s, the least mean |error| over %zu rows\n", spec.name,
              runs_label(a).c_str(), spec.symbol, value_text(spec, spec.lo).c_str(), value_text(spec, spec.hi).c_str(),
              value_text(spec, spec.step).c_str(), fit.rows);
  std::printf("fitted %s %s: MAPE %.1f%%, median |error| %.1f%%, median signed error %+.1f%%%s\n", spec.symbol,
              value_text(spec, fit.value).c_str(), 100 * fit.mape, 100 * fit.median_abs, 100 * fit.median_signed,
              fit.value <= spec.lo || fit.value >= spec.hi ? " (at the grid's edge)" : "");
  std::printf("MAPE by %s:", spec.symbol);
  for (size_t s = 0; s < f.sweep.values.size(); s += 5) {
    std::printf(" %s %.1f%%", value_text(spec, f.sweep.values[s]).c_str(), 100 * fit.mape_by_value[s]);
  }
  std::printf("\nper source: %s fitted on its rows alone; fitted on every other source, and this source's MAPE there\n",
              spec.symbol);
  print_hold_outs(spec, fit.sources, "source");
  std::printf("per GPU type and precision, the same\n");
  print_hold_outs(spec, fit_constant_to_runs(f.sweep, gpus).sources, "group");
  std::printf("\n");
}

// Fits the constant of `spec` to the file's rows (constant_fit.h) and prints the fit.
ConstantFitOutcome fit_and_print_constant(const ValidateArgs& a, const FitSpec& spec, const std::vector<PublishedRun>& runs) {
  const auto comparable = [](const PublishedRun& run) { return run.error.empty() && !run.expected_out_of_memory; };
  if (std::none_of(runs.begin(), runs.end(), comparable)) {
    throw InputError(runs_label(a), "", std::string(spec.flag) + " needs a row with a published throughput, and none has one");
  }
  const int threads = a.jobs.value_or(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const auto progress = [&spec](size_t done, size_t total) {
    std::fprintf(stderr, "\rparallax validate: %s %zu/%zu", spec.name, done, total);
  };
  ConstantFitOutcome f;
  f.spec = &spec;
  if (spec.host_time == nullptr) {
    f.sweep = sweep_sustained_fraction(runs, kRunsTopologiesDir, validation_model(a), sigma_grid(spec.lo, spec.hi, spec.step),
                                       threads, progress);
  } else {
    f.sweep = sweep_host_time(runs, kRunsTopologiesDir, validation_model(a), spec.host_time, a.sustained_fraction,
                              value_grid(spec.lo, spec.hi, spec.step), threads, progress);
  }
  std::fprintf(stderr, "\n");
  std::vector<std::string> sources, gpus;
  for (const PublishedRun& run : runs) {
    sources.push_back(source_label(run.source));
    gpus.push_back(gpu_and_precision(run));
  }
  try {
    f.fit = fit_constant_to_runs(f.sweep, sources);
  } catch (const std::invalid_argument& e) {  // every comparable row failed to simulate
    throw InputError(runs_label(a), "", std::string(spec.flag) + ": " + e.what());
  }
  print_constant_fit(a, f, gpus);
  return f;
}

// --plot: the parity plot of every compared row, and with the fit its MAPE-against-σ curves.
void plot_validation(const ValidateArgs& a, const std::vector<PublishedRun>& runs,
                     const std::vector<RunPrediction>& predictions, const std::optional<ConstantFitOutcome>& fitted) {
  std::filesystem::create_directories(a.plot_dir);
  std::vector<std::string> sources, groups;
  for (const PublishedRun& run : runs) sources.push_back(source_label(run.source));
  const std::string name = a.runs.size() == 1 ? std::filesystem::path(a.runs.front()).stem().string() : runs_label(a);
  write_file_atomically(a.plot_dir + "/validate.dat", parity_data(runs, predictions, sources, groups));
  run_gnuplot(a.plot_dir + "/validate.gp",
              parity_script(a.plot_dir + "/validate.dat", a.plot_dir + "/validate.png",
                            name + ": predicted vs published tokens/s per GPU, sigma " + strprintf("%.2f", a.sustained_fraction),
                            groups));
  std::printf("# plot: %s/validate.png\n", a.plot_dir.c_str());
  if (!fitted) return;
  const FitSpec& spec = *fitted->spec;
  const std::string stem = a.plot_dir + "/" + spec.plot;
  write_file_atomically(stem + ".dat", constant_fit_data(fitted->sweep, fitted->fit));
  run_gnuplot(stem + ".gp", constant_fit_script(stem + ".dat", stem + ".png",
                                                name + ": MAPE against the " + spec.name, spec.axis, fitted->fit));
  std::printf("# plot: %s.png\n", stem.c_str());
}

// --emit-workload ID FILE: one row as a workload for `parallax train` (--ops, --explain, --trace).
void emit_row_workload(const ValidateArgs& a, const std::vector<PublishedRun>& runs) {
  const std::string& id = a.emit_workload[0];
  const std::string& file = a.emit_workload[1];
  const auto run = std::find_if(runs.begin(), runs.end(), [&](const PublishedRun& r) { return r.id == id; });
  if (run == runs.end()) throw InputError(runs_label(a), "--emit-workload", "no row has the id \"" + id + "\"");
  write_file_atomically(file, workload_of_run(*run, a.sustained_fraction, validation_model(a)).dump(2) + "\n");
  std::printf("# row %s written to %s: parallax train %s%s gives validate's prediction\n", id.c_str(), file.c_str(),
              file.c_str(), a.network == "flow" ? "" : " --network analytical");
}

void run_validate(ValidateArgs a) {
  RunsOfFiles files = read_runs_files(a);
  const std::vector<PublishedRun>& runs = files.runs;
  if (!a.emit_workload.empty()) {
    emit_row_workload(a, runs);
    return;
  }
  if (!a.plot_dir.empty()) require_gnuplot();
  std::optional<ConstantFitOutcome> fitted;
  if (a.fit_sustained_fraction) {
    fitted = fit_and_print_constant(a, kSigmaFit, runs);
    a.sustained_fraction = fitted->fit.value;
  } else if (a.fit_host_dispatch) {
    fitted = fit_and_print_constant(a, kDispatchFit, runs);
    a.host_dispatch = strprintf("%g us", fitted->fit.value);
  } else if (a.fit_host_gemm_issue) {
    fitted = fit_and_print_constant(a, kGemmIssueFit, runs);
    a.host_gemm_issue = strprintf("%g us", fitted->fit.value);
  }
  TextTable t({"id", "gpu", "gpus", "layout", "published", "predicted", "error", "note"},
              {TextTable::Align::kLeft, TextTable::Align::kLeft, TextTable::Align::kRight, TextTable::Align::kLeft,
               TextTable::Align::kRight, TextTable::Align::kRight, TextTable::Align::kRight, TextTable::Align::kLeft});
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  RunValidator validator(kRunsTopologiesDir, a.sustained_fraction, validation_model(a));
  std::vector<RunPrediction> predictions;
  for (const PublishedRun& run : runs) {
    std::fprintf(stderr, "\rparallax validate: %zu/%zu %-40s", predictions.size() + 1, runs.size(), run.id.c_str());
    predictions.push_back(validator.predict(run));
    t.add_row(validation_row(run, predictions.back()));
    out.push_back(run_json(run, predictions.back()));
  }
  std::fprintf(stderr, "\n");
  const ValidationModel model = validation_model(a);
  std::printf(
      "# Parallax validate: %s (%zu runs; kernels at %.2f of their stand-alone speed, %g us to issue one, %g us a "
      "per-expert GEMM%s)\n%s\n",
      runs_label(a).c_str(), runs.size(), a.sustained_fraction, model.host_dispatch.microseconds(),
      model.host_gemm_issue.microseconds(),
      model.attention_model == AttentionModel::kCudnn ? (std::string("; ") + cli::kCudnnAttentionNote).c_str() : "",
      t.render().c_str());
  print_error_summaries(runs, predictions);
  if (a.runs.size() > 1) print_file_summaries(a, files, predictions);
  print_rank_agreement(runs, predictions);
  if (!a.json.empty()) write_file_atomically(a.json, out.dump(2) + "\n");
  if (!a.plot_dir.empty()) plot_validation(a, runs, predictions, fitted);
}

}  // namespace

void add_validate_command(CLI::App& app) {
  auto vargs = std::make_shared<ValidateArgs>();
  auto* v = app.add_subcommand("validate", "predict published training runs and report the error per row");
  v->add_option("runs", vargs->runs,
                "runs files (format: workloads/validation/README.md); with several, the summaries cover them all, then "
                "each file")
      ->required();
  v->add_option("--json", vargs->json, "write one object per row (id, predicted, expected, error or error_message)");
  auto* sigma = v->add_option("--sustained-fraction", vargs->sustained_fraction, sustained_fraction_help())
                    ->check(CLI::Range(1e-9, 1.0));
  auto* fit_sigma = v->add_flag("--fit-sustained-fraction", vargs->fit_sustained_fraction,
                                "fit the sustained fraction to these rows (the least mean |error| on a grid of 0.40-1.00 by "
                                "0.01), with each source held out (fitted on the others, its error there); then report "
                                "every row at the fitted value");
  fit_sigma->excludes(sigma);
  v->add_option("--plot", vargs->plot_dir,
                "write PNGs (gnuplot) into this directory: predicted vs published per source (validate.png), and with a "
                "fit each source's MAPE against the constant (sigma.png, host-dispatch.png, host-gemm-issue.png)");
  v->add_option("--jobs", vargs->jobs, "threads for a fit (default: all cores)")->check(CLI::PositiveNumber);
  v->add_option("--network", vargs->network, "analytical (each collective alone) or flow (co-simulated)")
      ->check(CLI::IsMember({"analytical", "flow"}))
      ->capture_default_str();
  auto* dispatch = v->add_option("--host-dispatch", vargs->host_dispatch,
                                 "the host's time to issue one kernel (\"74 us\", the default: an eager framework; \"0 us\" "
                                 "for kernels replayed from CUDA graphs): small layers on fast GPUs run at the host's pace");
  auto* fit_dispatch =
      v->add_flag("--fit-host-dispatch", vargs->fit_host_dispatch,
                  "fit the host's time to issue a kernel to these rows (0-200 us by 1 us, at the sustained fraction given), "
                  "each source held out as for the sustained fraction; then report every row at the fitted value")
          ->excludes(dispatch)
          ->excludes(fit_sigma);
  auto* gemm_issue =
      v->add_option("--host-gemm-issue", vargs->host_gemm_issue,
                    "the host's time to issue one GEMM of a MoE layer's experts issued one by one (expert_gemm "
                    "per_expert: Transformer Engine's GroupedLinear with host-side row counts; \"55 us\", the default)");
  v->add_flag("--fit-host-gemm-issue", vargs->fit_host_gemm_issue,
              "fit that time to these rows (0-110 us by 1 us, at the sustained fraction and host dispatch given), each "
              "source held out as for the sustained fraction; then report every row at the fitted value")
      ->excludes(gemm_issue)
      ->excludes(fit_sigma)
      ->excludes(fit_dispatch);
  v->add_option("--attention-model", vargs->attention_model,
                "fused attention on Hopper and Blackwell: shape (the default: one share of the peak with the shape "
                "saturation) or cudnn (per pass, by keys per query and head dimension, fitted to cuDNN 9.19-9.22's "
                "published kernel rates: docs/performance-and-accuracy.md)")
      ->check(CLI::IsMember({"shape", "cudnn"}));
  v->add_option("--emit-workload", vargs->emit_workload,
                "ID FILE: write row ID as a workload that parallax train runs to the same prediction (to look into one "
                "row with --ops, --explain or --trace), at the sustained fraction and host times given; nothing "
                "else is done")
      ->expected(2)
      ->excludes(fit_sigma);
  v->callback([vargs] { run_validate(*vargs); });
}

}  // namespace parallax::cli
