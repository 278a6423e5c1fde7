// The picture of an autoscaled run (autoscale_plot.h).
#include "serving/autoscale_plot.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "io/text_format.h"
#include "serving/fleet_report.h"

namespace parallax {
namespace {

double bin_seconds(const FleetResult& r) {
  const double run = r.duration.seconds();
  return run >= 20 * 60 ? 60.0 : std::max(run / 20, 1e-3);
}

}  // namespace

std::string autoscale_instances_data(const FleetResult& result) {
  std::string out;
  char buf[128];
  for (const PoolStats& pool : result.pools) {
    if (!pool.scaling) continue;
    if (!out.empty()) out += "\n\n";
    out += "# pool " + pool.name + ": minutes, serving, holding GPUs\n";
    const std::vector<InstanceCountPoint>& line = pool.scaling->timeline;
    for (const InstanceCountPoint& p : line) {
      std::snprintf(buf, sizeof buf, "%.4f %d %d\n", p.at.seconds() / 60, p.serving, p.serving + p.starting + p.draining);
      out += buf;
    }
    const InstanceCountPoint& last = line.back();
    std::snprintf(buf, sizeof buf, "%.4f %d %d\n", std::max(result.duration, last.at).seconds() / 60, last.serving,
                  last.serving + last.starting + last.draining);
    out += buf;
  }
  return out;
}

std::string autoscale_arrivals_data(const FleetConfig& config, const FleetResult& result) {
  const double bin = bin_seconds(result);
  const auto bins = static_cast<size_t>(result.duration.seconds() / bin) + 1;
  std::vector<int64_t> arrived(bins, 0), good(bins, 0);
  for (const RequestRecord& rec : result.requests) {
    const auto b = std::min(bins - 1, static_cast<size_t>(rec.arrival.seconds() / bin));
    ++arrived[b];
    if (meets_slo(config, rec)) ++good[b];
  }
  std::string out = "# minutes, arrivals per second, share meeting the SLO\n";
  char buf[128];
  for (size_t b = 0; b < bins; ++b) {
    const double share = arrived[b] > 0 ? static_cast<double>(good[b]) / static_cast<double>(arrived[b]) : 1.0;
    std::snprintf(buf, sizeof buf, "%.4f %.4f %.4f\n", static_cast<double>(b) * bin / 60,
                  static_cast<double>(arrived[b]) / bin, share);
    out += buf;
  }
  return out;
}

std::string autoscale_gnuplot(const FleetConfig& config, const FleetResult& result, const std::string& instances_file,
                              const std::string& arrivals_file, const std::string& png) {
  std::string plot;
  int block = 0;
  for (const PoolStats& pool : result.pools) {
    if (!pool.scaling) continue;
    const std::string index = " index " + std::to_string(block++);
    const std::string name = gnuplot_text(pool.name);
    plot += (plot.empty() ? "plot '" : ", '") + instances_file + "'" + index + " using 1:2 with steps lw 2 title \"" +
            name + ": serving\", '" + instances_file + "'" + index + " using 1:3 with steps dt 2 title \"" + name +
            ": holding GPUs\"";
  }
  plot += ", '" + arrivals_file + "' using 1:2 axes x1y2 with steps lc rgb '#888888' title 'arrivals (requests/s)'\n";
  const bool slo = config.slo_ttft > Time::zero() || config.slo_tpot > Time::zero();
  std::string out = "set terminal pngcairo size 1000," + std::string(slo ? "750" : "500") + " noenhanced\nset output '" +
                    png + "'\n";
  if (slo) out += "set multiplot layout 2,1\nset lmargin 10\nset rmargin 12\n";
  char range[64];
  std::snprintf(range, sizeof range, "set xrange [0:%.4f]\n", std::max(result.duration.seconds() / 60, 1e-3));
  out += std::string(range) + "set title \"" + gnuplot_text(config.model.name) +
         ": autoscaled instances and arrivals\"\nset grid\nset key right top opaque box\nset xlabel 'time (minutes)'\nset ylabel 'instances'\nset yrange [0:*]\nset ytics nomirror\n"
         "set y2label 'arrivals (requests/s)'\nset y2range [0:*]\nset y2tics\n" + plot;
  if (slo) {
    out += "unset y2label\nunset y2tics\nunset key\nset title 'share of each interval''s arrivals that met the SLO'\n"
           "set ylabel 'SLO attainment'\nset yrange [0:1.05]\nplot '" + arrivals_file +
           "' using 1:3 with steps lw 2 notitle\nunset multiplot\n";
  }
  return out;
}

}  // namespace parallax
