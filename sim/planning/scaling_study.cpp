// `parallax scale` (scaling_study.h).
#include "planning/scaling_study.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "io/input_error.h"
#include "io/text_format.h"

namespace parallax {
namespace {

Time worst_exposed_communication(const IterationResult& r) {
  Time worst;
  for (const StageResult& s : r.stages) worst = std::max(worst, s.time.exposed_communication());
  return worst;
}

ScalingCell simulate_cell(const ModelConfig& model, ParallelLayout l, const std::function<Topology(int)>& topology_for,
                          int gpus, bool hybrid, const IterationOptions& options) {
  ScalingCell cell;
  cell.gpus = gpus;
  cell.tokens_per_step = static_cast<double>(l.global_batch) * static_cast<double>(l.sequence_length);
  const int model_parallel = l.tp * l.pp * l.cp;
  if (gpus % model_parallel != 0) {
    cell.problem = "tp·pp·cp = " + std::to_string(model_parallel) + " does not divide " + std::to_string(gpus);
    return cell;
  }
  l.dp = gpus / model_parallel;
  try {
    const Topology topology = topology_for(gpus);
    if (hybrid) {
      // The workload's shard groups where it gives them, else one node's data-parallel ranks.
      const int per_node = std::max(1, static_cast<int>(topology.gpu_count()) / std::max(1, topology.node_count()));
      l.dp_shard = l.dp_shard > 0 ? std::gcd(l.dp * l.cp, l.dp_shard) : node_shard_ranks(l, per_node);
    } else {
      l.dp_shard = 0;
    }
    cell.result = simulate_iteration(model, l, topology, options);
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
  if (name == "hsdp") return ScalingStrategy{name, ZeroStage::kStage3, true};
  return std::nullopt;
}

const char* scaling_strategy_name(ZeroStage zero) {
  switch (zero) {
    case ZeroStage::kStage0: return "ddp";
    case ZeroStage::kStage1: return "zero1";
    case ZeroStage::kStage2: return "zero2";
    case ZeroStage::kStage3: return "zero3";
  }
  return "ddp";
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
      row.cells.push_back(simulate_cell(model, l, topology_for, g, strategy.hybrid, options));
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

namespace {

// With measurements: the measured value in the file's unit and the prediction's error, or
// blanks where no run was measured.
int measured_width(const ScalingStudy& study) {
  return static_cast<int>(std::string("measured ").size() + study.measured_column.size());
}

std::string measured_columns(const ScalingStudy& study, const ScalingCell& c) {
  if (study.measured_column.empty()) return "";
  const int w = measured_width(study);
  if (!c.measured) return format_text(" %*s %8s", w, "", "");
  const std::string error = c.measured->error ? format_text("%+.1f%%", 100 * *c.measured->error) : "-";
  return format_text(" %*.5g %8s", w, c.measured->value, error.c_str());
}

}  // namespace

std::string scaling_table(const ScalingStudy& study) {
  std::string t = format_text("  %-8s %6s %11s %10s %10s %16s %12s", "strategy", "GPUs", "iteration", "tok/s/GPU",
                              "efficiency", "memory/GPU", "exposed comm");
  if (!study.measured_column.empty()) t += format_text(" %*s %8s", measured_width(study), ("measured " + study.measured_column).c_str(), "error");
  t += "\n";
  for (const ScalingRow& row : study.rows) {
    for (const ScalingCell& c : row.cells) {
      if (!c.result) {
        t += format_text("  %-8s %6d  not run: %s%s\n", row.strategy.name.c_str(), c.gpus, c.problem.c_str(),
                         c.measured ? format_text(" (measured %.5g)", c.measured->value).c_str() : "");
        continue;
      }
      const IterationResult& r = *c.result;
      const std::string memory = format_text("%.1f GiB%s", in_gib(r.peak_memory), r.out_of_memory ? " OOM" : "");
      t += format_text("  %-8s %6d %9.3f s %10.1f %9.1f%% %16s %9.1f ms%s\n", row.strategy.name.c_str(), c.gpus,
                       r.iteration_time.seconds(), r.tokens_per_second_per_gpu, 100 * c.efficiency, memory.c_str(),
                       worst_exposed_communication(r).seconds() * 1e3, measured_columns(study, c).c_str());
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
      if (c.measured) {
        nlohmann::ordered_json m;
        m["line"] = c.measured->line;
        m[study.measured_column] = c.measured->value;
        m["tokens_per_second_per_gpu"] = c.measured->tokens_per_s_per_gpu;
        if (c.measured->error) m["error"] = *c.measured->error;
        cell["measured"] = m;
      }
      cells.push_back(cell);
    }
    rows.push_back({{"strategy", row.strategy.name}, {"zero_stage", static_cast<int>(row.strategy.zero)}, {"cells", cells}});
  }
  j["strategies"] = rows;
  if (!study.measured_source.empty()) j["measured_file"] = study.measured_source;
  return j;
}

std::string scaling_data(const ScalingStudy& study) {
  const bool measured = !study.measured_column.empty();
  std::string out = "# GPUs, then tokens/s per GPU per strategy (NaN: not run or out of memory)";
  out += measured ? "; then measured tokens/s per GPU per strategy and the error labels\n" : "\n";
  for (size_t i = 0; i < study.gpus.size(); ++i) {
    out += std::to_string(study.gpus[i]);
    for (const ScalingRow& row : study.rows) {
      const ScalingCell& c = row.cells[i];
      out += c.result && !c.result->out_of_memory ? format_text(" %.6g", c.result->tokens_per_second_per_gpu) : " NaN";
    }
    if (measured) {
      for (const ScalingRow& row : study.rows) {
        const auto& m = row.cells[i].measured;
        out += m ? format_text(" %.6g", m->tokens_per_s_per_gpu) : " NaN";
      }
      for (const ScalingRow& row : study.rows) {
        const auto& m = row.cells[i].measured;
        out += m && m->error ? format_text(" %+.1f%%", 100 * *m->error) : " -";
      }
    }
    out += "\n";
  }
  return out;
}

std::string scaling_script(const ScalingStudy& study, const std::string& data_file, const std::string& png,
                           const std::string& title) {
  std::string s = "set terminal pngcairo noenhanced size 900,560\nset output '" + png + "'\n";
  s += "set title \"" + gnuplot_text(title) + "\"\nset logscale x 2\nset xlabel 'GPUs'\nset ylabel 'tokens/s per GPU'\n";
  s += "set key outside right\nset grid\nset datafile missing 'NaN'\n";
  if (!study.measured_column.empty()) s += "set offsets 0, 0, graph 0.1, graph 0.05\n";  // room for the error labels
  s += "plot ";
  for (size_t i = 0; i < study.rows.size(); ++i) {
    s += format_text("%s'%s' using 1:%zu with linespoints lw 2 lc %zu title '%s'", i ? ", " : "", i ? "" : data_file.c_str(),
                     i + 2, i + 1, study.rows[i].strategy.name.c_str());
  }
  if (!study.measured_column.empty()) {
    // Measured points in their strategy's colour, each labelled with the prediction's error.
    const size_t n = study.rows.size();
    for (size_t i = 0; i < n; ++i) {
      if (!std::any_of(study.rows[i].cells.begin(), study.rows[i].cells.end(), [](const ScalingCell& c) { return c.measured; })) {
        continue;
      }
      s += format_text(", '' using 1:%zu with points pt 7 ps 1.5 lc %zu title '%s measured'", n + 2 + i, i + 1,
                       study.rows[i].strategy.name.c_str());
      s += format_text(", '' using 1:%zu:%zu with labels offset 0,1.2 notitle", n + 2 + i, 2 * n + 2 + i);
    }
  }
  return s + "\n";
}

}  // namespace parallax
