// The picture of one training iteration (iteration_plot.h).
#include "training/iteration_plot.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>

#include "io/text_format.h"

namespace parallax {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The time columns in their order in the data, after the stage: each kind's exposed time.
constexpr WorkKind kExposedKinds[] = {WorkKind::kTpComm, WorkKind::kCpComm, WorkKind::kEpComm,
                                      WorkKind::kPpComm, WorkKind::kDpComm, WorkKind::kOffload};

// pipeline.png's boxes, by pass kind (PassKind's order), then outside the passes: colour and key.
struct BoxStyle {
  int rgb;
  const char* title;
};
constexpr BoxStyle kBoxStyles[] = {{0x4C72B0, "forward (F)"},
                                   {0xDD8452, "backward (B: input gradients where W is apart)"},
                                   {0x55A868, "weight gradients (W)"},
                                   {0xBBBBBB, "outside the passes (optimizer step)"}};

int pass_colour(const std::optional<PipelineOp>& pass) {
  return kBoxStyles[pass ? static_cast<size_t>(pass->kind) : std::size(kBoxStyles) - 1].rgb;
}

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

std::string pipeline_timeline_data(const IterationResult& r, int chunks, double label_width) {
  std::vector<const TimelineSpan*> compute;
  for (const TimelineSpan& span : r.timeline) {
    if (span.stream == "compute") compute.push_back(&span);
  }
  std::stable_sort(compute.begin(), compute.end(), [](const TimelineSpan* a, const TimelineSpan* b) {
    return a->rank != b->rank ? a->rank < b->rank : a->start < b->start;
  });
  // The boxes: the tasks of one pass (or outside the passes) that follow each other without a gap.
  struct Box {
    const TimelineSpan* first;
    double start, width;
  };
  std::vector<Box> boxes;
  for (size_t i = 0; i < compute.size();) {
    size_t j = i + 1;
    while (j < compute.size() && compute[j]->rank == compute[i]->rank && compute[j]->pass == compute[i]->pass &&
           compute[j]->start == compute[j - 1]->finish) {
      ++j;
    }
    const double start = compute[i]->start.seconds();
    boxes.push_back({compute[i], start, compute[j - 1]->finish.seconds() - start});
    i = j;
  }
  // A pass cut into several boxes (waiting between layers, or in turns with the other pass of a
  // pair) is labelled once, on its widest box.
  std::map<std::pair<int, PipelineOp>, size_t> widest;
  for (size_t k = 0; k < boxes.size(); ++k) {
    if (!boxes[k].first->pass) continue;
    auto [it, added] = widest.try_emplace({boxes[k].first->rank, *boxes[k].first->pass}, k);
    if (!added && boxes[k].width > boxes[it->second].width) it->second = k;
  }
  const double span_s = std::max(r.iteration_time.seconds(), 1e-12);
  std::string out = "# pass boxes on each stage's compute stream: start (s), stage, width (s), colour, micro-batch\n";
  char line[160];
  for (size_t k = 0; k < boxes.size(); ++k) {
    const Box& box = boxes[k];
    const std::optional<PipelineOp>& pass = box.first->pass;
    std::string label;
    if (pass && widest.at({box.first->rank, *pass}) == k) {
      label = std::to_string(pass->micro_batch) + (chunks > 1 ? "." + std::to_string(pass->chunk) : "");
      if (box.width < label_width * span_s * static_cast<double>(label.size())) label.clear();
    }
    std::snprintf(line, sizeof line, "%.9f %d %.9f %d \"%s\"\n", box.start, box.first->rank, box.width,
                  pass_colour(pass), label.c_str());
    out += line;
  }
  return out;
}

std::string pipeline_timeline_script(const IterationResult& r, const std::string& data_file, const std::string& png,
                                     const std::vector<std::string>& title) {
  const int stages = static_cast<int>(r.stages.size());
  const int height = 160 + 36 * std::min(stages, 32);
  std::string out = "set terminal pngcairo size 1500," + std::to_string(height) + " noenhanced font ',10'\nset output '" +
                    png + "'\n";
  std::string lines;
  for (const std::string& line : title) lines += (lines.empty() ? "" : "\\n") + gnuplot_text(line);
  char range[160];
  std::snprintf(range, sizeof range, "set xrange [0:%.9f]\nset yrange [%.1f:-0.5]\n", r.iteration_time.seconds(),
                stages - 0.5);
  out += "set title \"" + lines + "\"\n" + range;
  out += "set xlabel 'seconds'\nset ylabel 'pipeline stage'\nset ytics 1\nset grid xtics\n"
         "set style fill solid 1.0 noborder\nset key outside bottom center horizontal\n";
  if (stages > 32) out += "set ytics " + std::to_string((stages + 31) / 32) + "\n";
  // Column 1 the box's start, 3 its width: x from start to start + width, y ± 0.4 around the
  // stage; a box wider than the gap g leaves g free at its end, so that neighbours stand apart.
  char gap[64];
  std::snprintf(gap, sizeof gap, "g = %.9f\n", 0.0015 * r.iteration_time.seconds());
  out += gap;
  out += "plot '" + data_file + "' using ($1 + $3 / 2):2:($3 > 2 * g ? $3 / 2 - g / 2 : $3 / 2):(0.4):4 "
         "with boxxyerror lc rgb variable notitle, \\\n"
         "     '' using ($1 + $3 / 2):2:5 with labels font ',7' tc rgb 'white' notitle";
  for (const BoxStyle& style : kBoxStyles) {  // the key
    char entry[160];
    std::snprintf(entry, sizeof entry, ", \\\n     NaN with boxes lc rgb '#%06X' title '%s'", style.rgb, style.title);
    out += entry;
  }
  return out + "\n";
}

}  // namespace parallax
