// `parallax validate --plot` (validation_plots.h).
#include "training/validation_plots.h"

#include <cstdio>
#include <map>

#include "io/text_format.h"

namespace parallax {
namespace {

// A name as a gnuplot double-quoted string.
std::string quoted(const std::string& name) { return "\"" + gnuplot_text(name) + "\""; }

// `key`: where the legend goes, inside the plot where its curves leave room.
std::string png_header(const std::string& png, const std::string& title, const std::string& key) {
  return "set terminal pngcairo noenhanced size 900,800\nset output '" + png + "'\nset title " + quoted(title) +
         "\nset grid\nset key " + key + " box opaque\n";
}

}  // namespace

std::string parity_data(const std::vector<PublishedRun>& runs, const std::vector<RunPrediction>& predictions,
                        const std::vector<std::string>& row_sources, std::vector<std::string>& groups) {
  std::map<std::string, std::string> blocks;
  char line[64];
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!predictions[i].problem.empty() || runs[i].expected_out_of_memory) continue;
    std::snprintf(line, sizeof line, "%.6g %.6g\n", runs[i].expected_tokens_per_sec_per_gpu, predictions[i].predicted);
    blocks[row_sources[i]] += line;
  }
  std::string data;
  groups.clear();
  for (const auto& [name, rows] : blocks) {
    data += "# " + name + "\n" + rows + "\n\n";
    groups.push_back(name);
  }
  return data;
}

std::string parity_script(const std::string& data_file, const std::string& png, const std::string& title,
                          const std::vector<std::string>& groups) {
  std::string s = png_header(png, title, "top left");
  s += "set size square\nset logscale xy\nset xlabel 'published tokens/s per GPU'\nset ylabel 'predicted tokens/s per GPU'\n";
  s += "plot x with lines lc rgb '#404040' title 'predicted = published', \\\n";
  s += "     1.1*x with lines dt 2 lc rgb '#a0a0a0' title '+10%', 0.9*x with lines dt 2 lc rgb '#a0a0a0' title '-10%'";
  for (size_t g = 0; g < groups.size(); ++g) {
    s += ", \\\n     '" + data_file + "' index " + std::to_string(g) + " using 1:2 with points pt 7 ps 0.8 title " +
         quoted(groups[g]);
  }
  return s + "\n";
}

std::string constant_fit_data(const ConstantSweep& sweep, const ConstantFit& fit) {
  std::string data = "# the constant, MAPE of every row, then of each source's rows (%)\n";
  char cell[48];
  for (size_t s = 0; s < sweep.values.size(); ++s) {
    std::snprintf(cell, sizeof cell, "%.6g %.4f", sweep.values[s], 100 * fit.mape_by_value[s]);
    data += cell;
    for (const SourceHoldOut& h : fit.sources) {
      std::snprintf(cell, sizeof cell, " %.4f", 100 * h.mape_by_value[s]);
      data += cell;
    }
    data += "\n";
  }
  return data;
}

std::string constant_fit_script(const std::string& data_file, const std::string& png, const std::string& title,
                                const std::string& axis, const ConstantFit& fit) {
  std::string s = png_header(png, title, "top center");
  char at[160];
  std::snprintf(at, sizeof at, "set arrow from %.6g, graph 0 to %.6g, graph 1 nohead dt 3 lc rgb '#d04020'\n", fit.value,
                fit.value);
  s += at;
  s += "set xlabel " + quoted(axis) + "\nset ylabel 'MAPE, tokens/s per GPU (%)'\nset yrange [0:60]\n";
  std::snprintf(at, sizeof at, "every row (fitted %.6g)", fit.value);
  s += "plot '" + data_file + "' using 1:2 with lines lw 3 lc rgb '#000000' title " + quoted(at);
  for (size_t g = 0; g < fit.sources.size(); ++g) {
    s += ", \\\n     '' using 1:" + std::to_string(g + 3) + " with lines lw 1.5 title " + quoted(fit.sources[g].source);
  }
  return s + "\n";
}

}  // namespace parallax
