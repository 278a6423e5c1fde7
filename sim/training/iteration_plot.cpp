// The picture of one training iteration (iteration_plot.h).
#include "training/iteration_plot.h"

#include <algorithm>
#include <cstdio>

#include "io/text_format.h"

namespace parallax {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The time columns in their order in the data, after the stage: each kind's exposed time.
constexpr WorkKind kExposedKinds[] = {WorkKind::kTpComm, WorkKind::kCpComm, WorkKind::kEpComm,
                                      WorkKind::kPpComm, WorkKind::kDpComm, WorkKind::kOffload};

}  // namespace

std::string iteration_breakdown_data(const IterationResult& r) {
  std::string out = "# stage, seconds: compute tp cp ep pp dp offload bubble idle; GiB: params grads optimizer activations buffers\n";
  char line[512];
  for (const StageResult& s : r.stages) {
    std::snprintf(line, sizeof line, "%d %.6f", s.stage, s.time.compute.seconds());
    out += line;
    for (const WorkKind k : kExposedKinds) {
      std::snprintf(line, sizeof line, " %.6f", s.time.exposed[kind_index(k)].seconds());
      out += line;
    }
    const MemoryBreakdown& m = s.memory;
    std::snprintf(line, sizeof line, " %.6f %.6f %.4f %.4f %.4f %.4f %.4f\n", s.time.bubble.seconds(), s.time.idle.seconds(),
                  m.parameters.value() / kGiB, m.gradients.value() / kGiB, m.optimizer_states.value() / kGiB,
                  m.activations.value() / kGiB, m.communication_buffers.value() / kGiB);
    out += line;
  }
  return out;
}

std::string iteration_breakdown_script(const IterationResult& r, const std::string& data_file, const std::string& png,
                                       const std::vector<std::string>& title) {
  // Columns: 1 stage, 2 compute, 3–8 the exposed kinds, 9 bubble, 10 idle, 11–15 memory.
  const char* time_titles[] = {"compute", "TP", "CP", "EP", "PP", "DP", "offload", "bubble", "idle"};
  const char* time_colours[] = {"#4C72B0", "#DD8452", "#8172B3", "#C44E52", "#937860", "#55A868", "#DA8BC3",
                                "#BBBBBB", "#EEEEEE"};
  const char* memory_titles[] = {"parameters", "gradients", "optimizer states", "activations", "buffers"};
  const char* memory_colours[] = {"#4C72B0", "#55A868", "#8172B3", "#DD8452", "#937860"};
  const size_t stages = r.stages.size();
  const int width = 1100 + 2 * static_cast<int>(std::min<size_t>(stages, 64) * 12);
  std::string out = "set terminal pngcairo size " + std::to_string(width) + ",600 noenhanced font ',10'\nset output '" +
                    png + "'\n";
  std::string lines;
  for (const std::string& line : title) lines += (lines.empty() ? "" : "\\n") + gnuplot_text(line);
  out += "set multiplot layout 1,2 title \"" + lines + "\"\n";
  out += "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.9 border -1\n"
         "set boxwidth 0.75\nset grid ytics\nset key outside bottom center horizontal maxrows 3\n"
         "set xlabel 'pipeline stage'\nset yrange [0:*]\n";
  if (stages > 16) out += "set xtics rotate by 90\n";
  out += "set title 'where the iteration time of each stage went'\nset ylabel 'seconds'\nplot ";
  for (int c = 0; c < 9; ++c) {
    out += (c > 0 ? ", '' " : "'" + data_file + "' ") + "using " + std::to_string(c + 2) +
           (c == 0 ? ":xtic(1)" : "") + " title '" + time_titles[c] + "' lc rgb '" + time_colours[c] + "'";
  }
  char limit[64];
  std::snprintf(limit, sizeof limit, "%.4f", r.gpu_memory.value() / kGiB);
  char top[64];
  std::snprintf(top, sizeof top, "%.4f", 1.08 * std::max(r.gpu_memory, r.peak_memory).value() / kGiB);
  out += "\nset title 'memory per GPU of each stage'\nset ylabel 'GiB'\nset yrange [0:" + std::string(top) + "]\nplot ";
  for (int c = 0; c < 5; ++c) {
    out += (c > 0 ? ", '' " : "'" + data_file + "' ") + "using " + std::to_string(c + 11) +
           (c == 0 ? ":xtic(1)" : "") + " title '" + memory_titles[c] + "' lc rgb '" + memory_colours[c] + "'";
  }
  out += ", " + std::string(limit) + " with lines lw 2 lc rgb '#C44E52' title 'GPU memory'\n";
  out += "unset multiplot\n";
  return out;
}

}  // namespace parallax
