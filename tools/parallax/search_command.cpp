// `parallax search WORKLOAD.json` (the best layouts of a training job on its cluster:
// sim/planning/layout_search.h, formats in search_report.h) and `parallax scale WORKLOAD.json`
// (its data-parallel strategies over GPU counts: sim/planning/scaling_study.h). Thin: arguments,
// the progress bar, printing and output files.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "io/atomic_file.h"
#include "io/input_error.h"
#include "io/json_reader.h"
#include "parallax/cli_support.h"
#include "parallax/commands.h"
#include "parallax/mpi_search.h"
#include "io/text_format.h"
#include "planning/layout_search.h"
#include "planning/measured_scaling.h"
#include "planning/rank_order_study.h"
#include "planning/scaling_study.h"
#include "planning/search_report.h"
#include "topology/topology_loader.h"
#include "training/workload_loader.h"

namespace parallax::cli {
namespace {

struct SearchArgs {
  std::string workload;
  std::optional<int> gpus, nodes;
  std::optional<int64_t> global_batch;
  size_t top = 10;
  std::string space;
  std::string objective = "tokens_per_s";
  std::optional<double> gpu_hour_price;  // USD per GPU-hour, for --objective cost
  std::optional<int> jobs;
  std::string network = "analytical";
  std::string emit, json, plot_dir;
};

void plot(const std::string& dir, const SearchOutcome& outcome, const std::string& title) {
  std::filesystem::create_directories(dir);
  const std::string data = dir + "/search.dat";
  write_file_atomically(data, pareto_data(outcome));
  run_gnuplot(dir + "/search.gp", pareto_script(data, dir + "/search.png", title));
}

void run_search(const SearchArgs& a) {
  const auto objective = search_objective_from(a.objective);
  if (!objective) throw InputError("", "--objective", "\"" + a.objective + "\" (expected tokens_per_s, mfu or cost)");
  if (a.gpu_hour_price && !(*a.gpu_hour_price > 0 && *a.gpu_hour_price <= 1e6)) {
    throw InputError("", "--gpu-hour-price", "must be a price in dollars above 0 and at most 1e6");
  }
  if (a.top < 1) throw InputError("", "--top", "must be at least 1");
  WorkloadOverrides o;
  o.validate_layout = false;  // the search finds the degrees; the file gives batch, sequence, dtype
  o.nodes = a.nodes;
  if (a.gpus) {
    if (*a.gpus < 1) throw InputError("", "--gpus", "must be at least 1");
    o.gpus = a.gpus;  // placed as a launcher would (part of each node when whole ones do not divide them)
  }
  o.global_batch = a.global_batch;
  const TrainingWorkload job = load_training_workload(a.workload, bundled_models_dir(), topologies_dir(), o);
  const int gpus = static_cast<int>(job.topology.gpu_count());
  const int per_node = static_cast<int>(job.topology.gpus_of_node(0).size());
  SearchSpace space = default_search_space(job.model, job.layout, gpus, per_node);
  if (!a.space.empty()) space = read_search_space(a.space, space, gpus);
  SearchOptions options;
  options.top = a.top;
  options.details_for_every_layout = !a.json.empty();  // the JSON lists every simulated layout's
  options.objective = *objective;
  options.threads = a.jobs.value_or(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  if (options.threads < 1) throw InputError("", "--jobs", "must be at least 1");
  options.iteration.cosimulate = a.network == "flow";
  options.iteration.compute = job.compute;
  options.iteration.gemm_efficiency = job.gemm;
  MpiSession mpi;
  options.partition = mpi.partition();
  if (mpi.is_root()) {
    if (auto bar = cli::progress_bar("layouts simulated")) {
      options.progress = [bar](size_t done, size_t left) { bar(done, done + left); };
    }
  }
  SearchOutcome outcome;
  try {
    outcome = search_layouts(job.model, job.layout, job.topology, space, options);
  } catch (const InputError& e) {
    if (!e.file().empty()) throw;
    throw InputError(a.space.empty() ? a.workload : a.space, e.pointer(), e.reason());
  }
  if (!mpi.is_root()) return;  // rank 0 reports; every rank holds the same ranking
  std::printf("# Parallax search: %s on %s, %d GPUs, global batch %lld, seq %lld; ranked by %s (%s)\n",
              job.model.name.c_str(), job.topology.info().name.c_str(), gpus,
              static_cast<long long>(job.layout.global_batch), static_cast<long long>(job.layout.sequence_length),
              a.objective.c_str(), a.network == "flow" ? "co-simulated" : "analytical");
  CostColumn cost{a.gpu_hour_price};
  std::printf("%s", search_table(outcome, a.top, *objective == SearchObjective::kCost ? &cost : nullptr).c_str());
  if (outcome.ranked.empty()) throw InputError(a.workload, "", no_layout_fits(outcome));
  if (!a.emit.empty()) {
    const nlohmann::json original = load_json_file(a.workload);
    write_file_atomically(a.emit, workload_with_layout(original, a.workload, job.topology_file,
                                                       outcome.ranked.front().layout)
                                          .dump(2) +
                                      "\n");
    std::printf("# best layout written to %s (parallax train %s)\n", a.emit.c_str(), a.emit.c_str());
  }
  if (!a.json.empty()) write_file_atomically(a.json, search_json(outcome).dump(2) + "\n");
  if (!a.plot_dir.empty()) {
    plot(a.plot_dir, outcome, job.model.name + " on " + std::to_string(gpus) + " GPUs: throughput vs memory");
    std::printf("# plot: %s/search.png\n", a.plot_dir.c_str());
  }
}

struct ScaleArgs {
  std::string workload;
  std::string gpus = "8,16,32,64,128,256,512,1024";
  std::string strategies = "ddp,zero1,zero2,zero3";
  bool weak = false;
  std::string network = "analytical";
  std::string json, plot_dir;
  std::string measured;     // CSV of the user's own runs
  std::string rank_orders;  // "all" or a comma-separated list
  bool gpus_given = false;
  bool strategies_given = false;
  std::optional<int> dp_shard;  // hsdp's shard group (else the node's data-parallel ranks)
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

std::vector<int> gpu_counts(const std::string& list) {
  std::vector<int> out;
  for (const std::string& item : split_commas(list)) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 1 || v > (1 << 20)) {
      throw InputError("", "--gpus", "\"" + item + "\" is not a GPU count between 1 and 1048576");
    }
    out.push_back(v);
  }
  return out;
}

struct ScaleJob {
  TrainingWorkload job;
  std::function<Topology(int)> topology_for;
  IterationOptions options;
};

ScaleJob load_scale_job(const ScaleArgs& a) {
  WorkloadOverrides o;
  o.validate_layout = false;
  o.nodes = 1;
  o.dp_shard = a.dp_shard;
  ScaleJob s{load_training_workload(a.workload, bundled_models_dir(), topologies_dir(), o), {}, {}};
  const int per_node = static_cast<int>(s.job.topology.gpu_count());
  const std::string file = s.job.topology_file;
  s.topology_for = [file, per_node](int g) { return load_topology(file, load_options_for(g, per_node)); };
  s.options.cosimulate = a.network == "flow";
  s.options.compute = s.job.compute;
  s.options.gemm_efficiency = s.job.gemm;
  return s;
}

// The workload's own GPU count: its topology as the file sizes it (the study loads one node).
int workload_gpus(const ScaleArgs& a) {
  WorkloadOverrides o;
  o.validate_layout = false;
  return static_cast<int>(load_training_workload(a.workload, bundled_models_dir(), topologies_dir(), o).topology.gpu_count());
}

// --rank-orders: the workload's layout under each order, at its own GPU count or each of --gpus.
void run_rank_orders(const ScaleArgs& a, const ScaleJob& s) {
  const ParallelLayout& base = s.job.layout;
  const int model_parallel = base.tp * base.pp * base.cp;
  const std::vector<int> counts = a.gpus_given ? gpu_counts(a.gpus) : std::vector<int>{workload_gpus(a)};
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (int g : counts) {
    if (g % model_parallel != 0) {
      throw InputError("", "--gpus", "tp·pp·cp = " + std::to_string(model_parallel) + " does not divide " + std::to_string(g));
    }
    ParallelLayout l = base;
    l.dp = g / model_parallel;
    std::vector<std::string> orders;
    if (a.rank_orders == "all") {
      orders = distinct_rank_orders(l);
    } else {
      for (const std::string& order : split_commas(a.rank_orders)) {
        try {
          parse_rank_order(order);
        } catch (const std::invalid_argument& e) {
          throw InputError("", "--rank-orders", "\"" + order + "\": " + e.what());
        }
        orders.push_back(order);
      }
    }
    const RankOrderStudy study = run_rank_order_study(s.job.model, l, s.topology_for(g), orders, s.options);
    std::printf("# Parallax scale --rank-orders: %s on %s, %d GPUs, tp %d · cp %d · ep %d · dp %d · pp %d, %s (%s)\n",
                s.job.model.name.c_str(), s.job.topology.info().name.c_str(), g, l.tp, l.cp, l.ep, l.dp, l.pp,
                scaling_strategy_name(l.zero_stage), a.network == "flow" ? "co-simulated" : "analytical");
    std::printf("%s", rank_order_table(study).c_str());
    all.push_back(rank_order_json(study));
  }
  if (!a.json.empty()) write_file_atomically(a.json, all.dump(2) + "\n");
}

void run_scale(const ScaleArgs& a) {
  std::vector<std::string> names = split_commas(a.strategies);
  for (const std::string& name : names) {
    if (!scaling_strategy_from(name)) {
      throw InputError("", "--strategies", "\"" + name + "\" (expected ddp, zero1, zero2, zero3, fsdp or hsdp)");
    }
  }
  std::vector<int> gpus = gpu_counts(a.gpus);
  const ScaleJob s = load_scale_job(a);
  if (!a.rank_orders.empty()) return run_rank_orders(a, s);
  const std::string own = scaling_strategy_name(s.job.layout.zero_stage);
  std::optional<MeasuredScaling> measured;
  if (!a.measured.empty()) {
    measured = load_measured_scaling(a.measured);
    // The measured counts are the study's, with any --gpus beside them; a measured strategy
    // the list lacks is added.
    gpus = gpu_counts_with(a.gpus_given ? gpus : std::vector<int>{}, *measured);
    if (!a.strategies_given) names = {own};
    for (const std::string& name : strategies_missing(names, *measured, own)) names.push_back(name);
  }
  std::vector<ScalingStrategy> strategies;
  for (const std::string& name : names) strategies.push_back(*scaling_strategy_from(name));
  ScalingStudy study = run_scaling_study(s.job.model, s.job.layout, s.topology_for, gpus, strategies, a.weak, s.options);
  if (measured) attach_measurements(study, *measured, own);
  const ParallelLayout& l = s.job.layout;
  std::printf("# Parallax scale: %s on %s, tp %d · pp %d · cp %d, global batch %lld at %d GPUs, seq %lld (%s)\n",
              s.job.model.name.c_str(), s.job.topology.info().name.c_str(), l.tp, l.pp, l.cp,
              static_cast<long long>(l.global_batch), gpus.front(), static_cast<long long>(l.sequence_length),
              a.network == "flow" ? "co-simulated" : "analytical");
  std::printf("%s", scaling_table(study).c_str());
  if (measured) {
    const MeasuredSummary m = measured_summary(study);
    std::string line = "measured: " + std::to_string(m.compared + m.not_compared) + " runs from " + a.measured;
    if (m.compared > 0) {
      line += format_text(": mean |error| %.1f%%, median %+.1f%% (error: predicted over measured tokens/s, minus 1)",
                          100 * m.mean_abs_error, 100 * m.median_error);
    } else {
      line += ": — (none could be compared)";
    }
    if (m.not_compared > 0) line += "; " + std::to_string(m.not_compared) + " not compared (not run or out of memory)";
    std::printf("%s\n", line.c_str());
  }
  if (!a.json.empty()) write_file_atomically(a.json, scaling_json(study).dump(2) + "\n");
  if (!a.plot_dir.empty()) {
    std::filesystem::create_directories(a.plot_dir);
    const std::string data = a.plot_dir + "/scale.dat";
    write_file_atomically(data, scaling_data(study));
    run_gnuplot(a.plot_dir + "/scale.gp", scaling_script(study, data, a.plot_dir + "/scale.png",
                                                         s.job.model.name + ": tokens/s per GPU vs GPUs (" +
                                                             (a.weak ? "weak" : "strong") + " scaling" +
                                                             (measured ? ", predicted and measured" : "") + ")"));
    std::printf("# plot: %s/scale.png\n", a.plot_dir.c_str());
  }
}

}  // namespace

void add_search_command(CLI::App& app) {
  auto args = std::make_shared<SearchArgs>();
  auto* cmd = app.add_subcommand("search", "rank the parallel layouts of a training job on its cluster");
  cmd->add_option("workload", args->workload, "workload JSON (model, topology; its batch, sequence and dtype)")->required();
  cmd->add_option("--gpus", args->gpus, "GPUs to lay out (whole nodes of the workload's topology)");
  cmd->add_option("--nodes", args->nodes, "nodes of the workload's topology");
  cmd->add_option("--gbs,--global-batch", args->global_batch, "global batch size (sequences)");
  cmd->add_option("--top", args->top, "layouts to show (and the bound keeps in play)")->capture_default_str();
  cmd->add_option("--space", args->space, "search space JSON: the values each dimension may take (docs/search-format.md)");
  cmd->add_option("--objective", args->objective,
                  "tokens_per_s, mfu or cost (GPU-hours per million tokens; over one GPU count it ranks as tokens_per_s)")
      ->capture_default_str();
  cmd->add_option("--gpu-hour-price", args->gpu_hour_price, "dollars per GPU-hour: --objective cost adds $ per million tokens");
  cmd->add_option("--jobs", args->jobs, "threads (default: every core); the ranking does not depend on it");
  cmd->add_option("--network", args->network, "analytical (the default: each collective alone, fast) or flow (co-simulated)")
      ->check(CLI::IsMember({"analytical", "flow"}));
  cmd->add_option("--emit", args->emit, "write the best layout as a workload JSON that parallax train runs");
  cmd->add_option("--json", args->json, "write every simulated layout and the counts as JSON");
  cmd->add_option("--plot", args->plot_dir, "draw throughput vs memory with the Pareto front (PNG, gnuplot) into this folder");
  cmd->get_option("--gpus")->excludes(cmd->get_option("--nodes"));
  cmd->callback([args] { run_search(*args); });

  auto scale = std::make_shared<ScaleArgs>();
  auto* sc = app.add_subcommand("scale", "how DDP, ZeRO-1/2/3 and FSDP scale a training job over GPU counts");
  sc->add_option("workload", scale->workload, "workload JSON (model, topology, its model-parallel degrees and batch)")
      ->required();
  sc->add_option("--gpus", scale->gpus, "GPU counts, comma-separated (whole nodes)")->capture_default_str();
  sc->add_option("--strategies", scale->strategies, "ddp, zero1, zero2, zero3, fsdp (= ZeRO-3's full sharding), hsdp (ZeRO-3 sharded within each node, replicated across nodes)")
      ->capture_default_str();
  auto* weak = sc->add_flag("--weak", scale->weak, "the global batch grows with the GPUs (default: strong, one batch)");
  sc->add_flag("--strong", [scale](int64_t) { scale->weak = false; }, "one global batch for every count (the default)")
      ->excludes(weak);
  sc->add_option("--dp-shard", scale->dp_shard,
                  "hsdp: the data-parallel ranks of each shard group (default: those of one node, the workload's "
                  "dp_shard where it gives one)");
  sc->add_option("--network", scale->network, "analytical (the default) or flow (co-simulated)")
      ->check(CLI::IsMember({"analytical", "flow"}));
  sc->add_option("--json", scale->json, "write every cell as JSON");
  sc->add_option("--plot", scale->plot_dir, "draw one curve per strategy (PNG, gnuplot) into this folder");
  auto* measured = sc->add_option("--measured", scale->measured,
                                  "CSV of your own runs (gpus, step_time_s | step_time_ms | tokens_per_s | "
                                  "tokens_per_s_per_gpu[, strategy]): predicted and measured side by side, error per point");
  sc->add_option("--rank-orders", scale->rank_orders,
                 "all, or comma-separated orders (innermost first, e.g. tp-dp-pp,dp-tp-pp): the workload's layout "
                 "under each, and which dimensions' traffic crosses nodes")
      ->excludes(measured);
  sc->callback([scale, sc] {
    scale->gpus_given = sc->count("--gpus") > 0;
    scale->strategies_given = sc->count("--strategies") > 0;
    run_scale(*scale);
  });
}

}  // namespace parallax::cli
