// `parallax scale` (scaling_study.h).
#include "planning/scaling_study.h"

#include <cmath>
#include <cstdio>

#include "io/input_error.h"
#include "io/text_format.h"

namespace parallax {
namespace {

double gib(Bytes b) { return b.value() / (1024.0 * 1024 * 1024); }

Time worst_exposed_communication(const IterationResult& r) {
  Time worst;
  for (const StageResult& s : r.stages) worst = std::max(worst, s.time.exposed_communication());
  return worst;
}

ScalingCell simulate_cell(const ModelConfig& model, ParallelLayout l, const std::function<Topology(int)>& topology_for,
                          int gpus, const IterationOptions& options) {
  ScalingCell cell;
  cell.gpus = gpus;
  const int model_parallel = l.tp * l.pp * l.cp;
  if (gpus % model_parallel != 0) {
    cell.problem = "tp·pp·cp = " + std::to_string(model_parallel) + " does not divide " + std::to_string(gpus);
    return cell;
  }
  l.dp = gpus / model_parallel;
  try {
    cell.result = simulate_iteration(model, l, topology_for(gpus), options);
  } catch (const InputError& e) {
    cell.problem = e.reason();
  } catch (const std::invalid_argument& e) {
    cell.problem = e.what();
  }
  return cell;
}

}  // namespace

std::optional<ScalingStrategy> scaling_strategy_from(const std::string& name) {
  if (name == "ddp") return ScalingStrategy{name, ZeroStage::kStage0};
  if (name == "zero1") return ScalingStrategy{name, ZeroStage::kStage1};
  if (name == "zero2") return ScalingStrategy{name, ZeroStage::kStage2};
  if (name == "zero3" || name == "fsdp") return ScalingStrategy{name, ZeroStage::kStage3};
  return std::nullopt;
}

ScalingStudy run_scaling_study(const ModelConfig& model, const ParallelLayout& base,
                               const std::function<Topology(int gpus)>& topology_for, const std::vector<int>& gpus,
                               const std::vector<ScalingStrategy>& strategies, bool weak, const IterationOptions& options) {
  ScalingStudy study;
  study.weak = weak;
  study.gpus = gpus;
  for (const ScalingStrategy& strategy : strategies) {
    ScalingRow row;
    row.strategy = strategy;
    for (int g : gpus) {
      ParallelLayout l = base;
      l.zero_stage = strategy.zero;
      if (weak) l.global_batch = base.global_batch * g / gpus.front();
      row.cells.push_back(simulate_cell(model, l, topology_for, g, options));
    }
    const ScalingCell& first = row.cells.front();
    for (ScalingCell& c : row.cells) {
      if (c.result && first.result && !c.result->out_of_memory && !first.result->out_of_memory) {
        c.efficiency = c.result->tokens_per_second_per_gpu / first.result->tokens_per_second_per_gpu;
      }
    }
    study.rows.push_back(std::move(row));
  }
  return study;
}

std::string scaling_table(const ScalingStudy& study) {
  std::string t = format_text("  %-8s %6s %11s %10s %10s %16s %12s\n", "strategy", "GPUs", "iteration", "tok/s/GPU",
                         "efficiency", "memory/GPU", "exposed comm");
  for (const ScalingRow& row : study.rows) {
    for (const ScalingCell& c : row.cells) {
      if (!c.result) {
        t += format_text("  %-8s %6d  not run: %s\n", row.strategy.name.c_str(), c.gpus, c.problem.c_str());
        continue;
      }
      const IterationResult& r = *c.result;
      const std::string memory = format_text("%.1f GiB%s", gib(r.peak_memory), r.out_of_memory ? " OOM" : "");
      t += format_text("  %-8s %6d %9.3f s %10.1f %9.1f%% %16s %9.1f ms\n", row.strategy.name.c_str(), c.gpus,
                  r.iteration_time.seconds(), r.tokens_per_second_per_gpu, 100 * c.efficiency, memory.c_str(),
                  worst_exposed_communication(r).seconds() * 1e3);
    }
  }
  t += study.weak ? "weak scaling: the global batch grows with the GPUs; efficiency: tokens/s per GPU against the first count\n"
                  : "strong scaling: one global batch; efficiency: tokens/s per GPU against the first count\n";
  return t;
}

nlohmann::ordered_json scaling_json(const ScalingStudy& study) {
  nlohmann::ordered_json j;
  j["scaling"] = study.weak ? "weak" : "strong";
  j["gpus"] = study.gpus;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const ScalingRow& row : study.rows) {
    nlohmann::ordered_json cells = nlohmann::ordered_json::array();
    for (const ScalingCell& c : row.cells) {
      nlohmann::ordered_json cell;
      cell["gpus"] = c.gpus;
      if (!c.result) {
        cell["problem"] = c.problem;
      } else {
        cell["iteration_time_s"] = c.result->iteration_time.seconds();
        cell["tokens_per_second_per_gpu"] = c.result->tokens_per_second_per_gpu;
        cell["scaling_efficiency"] = c.efficiency;
        cell["peak_memory_bytes"] = c.result->peak_memory.value();
        cell["out_of_memory"] = c.result->out_of_memory;
        cell["exposed_communication_s"] = worst_exposed_communication(*c.result).seconds();
      }
      cells.push_back(cell);
    }
    rows.push_back({{"strategy", row.strategy.name}, {"zero_stage", static_cast<int>(row.strategy.zero)}, {"cells", cells}});
  }
  j["strategies"] = rows;
  return j;
}

std::string scaling_data(const ScalingStudy& study) {
  std::string out = "# GPUs, then tokens/s per GPU per strategy (NaN: not run or out of memory)\n";
  for (size_t i = 0; i < study.gpus.size(); ++i) {
    out += std::to_string(study.gpus[i]);
    for (const ScalingRow& row : study.rows) {
      const ScalingCell& c = row.cells[i];
      out += c.result && !c.result->out_of_memory ? format_text(" %.6g", c.result->tokens_per_second_per_gpu) : " NaN";
    }
    out += "\n";
  }
  return out;
}

std::string scaling_script(const ScalingStudy& study, const std::string& data_file, const std::string& png,
                           const std::string& title) {
  std::string s = "set terminal pngcairo noenhanced size 900,560\nset output '" + png + "'\n";
  s += "set title \"" + title + "\"\nset logscale x 2\nset xlabel 'GPUs'\nset ylabel 'tokens/s per GPU'\n";
  s += "set key outside right\nset grid\nset datafile missing 'NaN'\nplot ";
  for (size_t i = 0; i < study.rows.size(); ++i) {
    s += format_text("%s'%s' using 1:%zu with linespoints lw 2 title '%s'", i ? ", " : "", i ? "" : data_file.c_str(), i + 2,
                study.rows[i].strategy.name.c_str());
  }
  return s + "\n";
}

}  // namespace parallax
