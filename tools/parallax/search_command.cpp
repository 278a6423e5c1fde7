// `parallax search WORKLOAD.json`: the best layouts of a training job on its cluster (the search
// is sim/planning/layout_search.h, its formats sim/planning/search_report.h). Thin: arguments,
// the progress bar, printing and output files.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "io/atomic_file.h"
#include "io/input_error.h"
#include "io/json_reader.h"
#include "parallax/cli_support.h"
#include "parallax/commands.h"
#include "planning/layout_search.h"
#include "planning/search_report.h"
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
  std::optional<int> jobs;
  std::string network = "analytical";
  std::string emit, json, plot_dir;
};

// The node count for --gpus: whole nodes of the topology the workload names.
std::optional<int> nodes_for(const SearchArgs& a) {
  if (a.nodes) return a.nodes;
  if (!a.gpus) return std::nullopt;
  if (*a.gpus < 1) throw InputError("", "--gpus", "must be at least 1");
  WorkloadOverrides probe;
  probe.validate_layout = false;
  probe.nodes = 1;
  const TrainingWorkload one = load_training_workload(a.workload, bundled_models_dir(), topologies_dir(), probe);
  const int per_node = static_cast<int>(one.topology.gpu_count());
  if (*a.gpus % per_node != 0) {
    throw InputError("", "--gpus", std::to_string(*a.gpus) + " GPUs do not fill whole " + std::to_string(per_node) +
                                       "-GPU nodes");
  }
  return *a.gpus / per_node;
}

std::function<void(size_t, size_t)> progress_bar() {
  if (isatty(STDERR_FILENO) == 0) return {};
  return [](size_t done, size_t left) {
    const size_t all = done + left, width = 40;
    const size_t filled = all ? width * done / all : width;
    std::fprintf(stderr, "\r  [%s%s] %zu simulated, %zu to go ", std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), done, left);
    if (left == 0) std::fprintf(stderr, "\r%90s\r", "");
  };
}

void plot(const std::string& dir, const SearchOutcome& outcome, const std::string& title) {
  std::filesystem::create_directories(dir);
  const std::string data = dir + "/search.dat";
  write_file_atomically(data, pareto_data(outcome));
  run_gnuplot(dir + "/search.gp", pareto_script(data, dir + "/search.png", title));
}

void run_search(const SearchArgs& a) {
  const auto objective = search_objective_from(a.objective);
  if (!objective) throw InputError("", "--objective", "\"" + a.objective + "\" (expected tokens_per_s or mfu)");
  if (a.top < 1) throw InputError("", "--top", "must be at least 1");
  WorkloadOverrides o;
  o.validate_layout = false;  // the search finds the degrees; the file gives batch, sequence, dtype
  o.nodes = nodes_for(a);
  o.global_batch = a.global_batch;
  const TrainingWorkload job = load_training_workload(a.workload, bundled_models_dir(), topologies_dir(), o);
  const int gpus = static_cast<int>(job.topology.gpu_count());
  const int per_node = static_cast<int>(job.topology.gpus_of_node(0).size());
  SearchSpace space = default_search_space(job.model, job.layout, gpus, per_node);
  if (!a.space.empty()) space = read_search_space(a.space, space);
  SearchOptions options;
  options.top = a.top;
  options.objective = *objective;
  options.threads = a.jobs.value_or(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  if (options.threads < 1) throw InputError("", "--jobs", "must be at least 1");
  options.iteration.cosimulate = a.network == "flow";
  options.iteration.compute = job.compute;
  options.iteration.gemm_efficiency = job.gemm;
  options.progress = progress_bar();
  const SearchOutcome outcome = search_layouts(job.model, job.layout, job.topology, space, options);
  std::printf("# Parallax search: %s on %s, %d GPUs, global batch %lld, seq %lld; ranked by %s (%s)\n",
              job.model.name.c_str(), job.topology.info().name.c_str(), gpus,
              static_cast<long long>(job.layout.global_batch), static_cast<long long>(job.layout.sequence_length),
              a.objective.c_str(), a.network == "flow" ? "co-simulated" : "analytical");
  std::printf("%s", search_table(outcome, a.top).c_str());
  if (outcome.ranked.empty()) throw InputError(a.workload, "", "no layout of the space fits and runs on these GPUs");
  const int nodes = job.topology.node_count();
  if (!a.emit.empty()) {
    const nlohmann::json original = load_json_file(a.workload);
    write_file_atomically(a.emit, workload_with_layout(original, a.workload, job.topology_file, nodes,
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
  cmd->add_option("--objective", args->objective, "tokens_per_s or mfu")->capture_default_str();
  cmd->add_option("--jobs", args->jobs, "threads (default: every core); the ranking does not depend on it");
  cmd->add_option("--network", args->network, "analytical (the default: each collective alone, fast) or flow (co-simulated)")
      ->check(CLI::IsMember({"analytical", "flow"}));
  cmd->add_option("--emit", args->emit, "write the best layout as a workload JSON that parallax train runs");
  cmd->add_option("--json", args->json, "write every simulated layout and the counts as JSON");
  cmd->add_option("--plot", args->plot_dir, "draw throughput vs memory with the Pareto front (PNG, gnuplot) into this folder");
  cmd->excludes(cmd->get_option("--gpus"))->excludes(cmd->get_option("--nodes"));
  cmd->callback([args] { run_search(*args); });
}

}  // namespace parallax::cli
