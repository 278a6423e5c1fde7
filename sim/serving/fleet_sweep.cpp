// Capacity curves and router comparisons (fleet_sweep.h).
#include "serving/fleet_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "io/text_format.h"

namespace parallax {
namespace {

double positive(const std::string& text, const std::string& whole) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(v > 0) || !std::isfinite(v)) {
    throw std::invalid_argument("\"" + whole + "\": \"" + text + "\" is not a positive rate");
  }
  return v;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::vector<double> parse_rates(const std::string& text) {
  std::vector<double> out;
  if (text.find(':') != std::string::npos) {
    std::vector<std::string> parts;
    std::stringstream in(text);
    for (std::string p; std::getline(in, p, ':');) parts.push_back(p);
    if (parts.size() != 3 || parts[2].size() < 2 || (parts[2][0] != 'x' && parts[2][0] != '+')) {
      throw std::invalid_argument("\"" + text + "\": expected A:B:xF or A:B:+S (e.g. 1:64:x2)");
    }
    const double a = positive(parts[0], text), b = positive(parts[1], text), step = positive(parts[2].substr(1), text);
    if (b < a) throw std::invalid_argument("\"" + text + "\": the last rate is below the first");
    if (parts[2][0] == 'x' && step <= 1) throw std::invalid_argument("\"" + text + "\": the factor must exceed 1");
    for (double r = a; r <= b * (1 + 1e-12) && out.size() < 1000; r = parts[2][0] == 'x' ? r * step : r + step) out.push_back(r);
  } else {
    std::stringstream in(text);
    for (std::string p; std::getline(in, p, ',');) out.push_back(positive(p, text));
  }
  if (out.empty()) throw std::invalid_argument("\"" + text + "\": no rate");
  if (out.size() > 200) throw std::invalid_argument("\"" + text + "\": more than 200 rates");
  return out;
}

std::vector<RatePoint> sweep_rates(const FleetConfig& config, const std::vector<double>& rates,
                                   const std::function<void(size_t, size_t)>& progress, const GpuHourPrices& prices) {
  if (!config.replay && config.traffic.arrival == TrafficSpec::Arrival::kClosedLoop) {
    throw std::invalid_argument("a closed loop has no offered rate to sweep (its load follows from its users)");
  }
  std::vector<RatePoint> out;
  for (size_t i = 0; i < rates.size(); ++i) {
    FleetConfig c = config;
    if (config.replay) {
      auto scaled = std::make_shared<std::vector<Request>>(*config.replay);
      for (Request& r : *scaled) {
        const double at = static_cast<double>(r.arrival.picoseconds()) / rates[i];
        if (!(at < 9e18)) throw std::invalid_argument("the trace slowed down by " + std::to_string(rates[i]) + " lasts over 100 days");
        r.arrival = Time::ps(std::llround(at));
      }
      c.replay = std::move(scaled);
    } else {
      c.traffic.rate_per_s = rates[i];
    }
    const FleetResult r = simulate_fleet(c);
    RatePoint point{rates[i], summarize(c, r), std::nullopt, 0.0, std::nullopt};
    if (!prices.empty()) point.cost = fleet_cost(c, r, point.summary, prices);
    if (has_autoscaled_pool(r)) {
      double instances = 0;
      for (const PoolStats& p : r.pools) {
        instances += p.mean_instances;
        point.gpu_hours += p.gpu_hours;
      }
      point.mean_instances = instances;
    }
    out.push_back(std::move(point));
    if (progress) progress(i + 1, rates.size());
  }
  return out;
}

double highest_rate_meeting(const std::vector<RatePoint>& points, double attainment) {
  double best = 0;
  for (const RatePoint& p : points) {
    if (p.summary.slo_attainment >= attainment) best = std::max(best, p.rate);
  }
  return best;
}

std::string sweep_table(const std::vector<RatePoint>& points, double attainment) {
  const bool scaled = !points.empty() && points.front().mean_instances.has_value();
  const bool priced = !points.empty() && points.front().cost.has_value();
  std::string out = "  rate/s   SLO met   TTFT p50   TTFT p99   TPOT p50   TPOT p99    E2E p99   out tok/s";
  out += scaled ? "  instances  GPU-hours" : "";
  out += priced ? "   $/M out\n" : "\n";
  for (const RatePoint& p : points) {
    const FleetSummary& s = p.summary;
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %6.2f  %7.1f%%  %8.1fms %8.1fms %8.1fms %8.1fms %9.2fs  %10.0f", p.rate,
                  100 * s.slo_attainment, 1e3 * s.ttft.p50, 1e3 * s.ttft.p99, 1e3 * s.tpot.p50, 1e3 * s.tpot.p99,
                  s.e2e.p99, s.output_tokens_per_s);
    out += buf;
    if (p.mean_instances) {
      std::snprintf(buf, sizeof buf, "  %9.2f  %9.2f", *p.mean_instances, p.gpu_hours);
      out += buf;
    }
    if (p.cost) {
      std::snprintf(buf, sizeof buf, "  %8.3f", p.cost->per_million_output_tokens);
      out += buf;
    }
    out += s.slo_attainment >= attainment ? "\n" : "   <- misses\n";
  }
  const double best = highest_rate_meeting(points, attainment);
  out += best > 0 ? "  highest rate meeting the SLOs for " + fmt("%.0f", 100 * attainment) + "% of requests: " +
                        fmt("%.2f", best) + " requests/s\n"
                  : "  no rate met the SLOs for " + fmt("%.0f", 100 * attainment) + "% of requests\n";
  return out;
}

nlohmann::ordered_json sweep_json(const std::vector<RatePoint>& points, double attainment) {
  nlohmann::ordered_json j;
  j["attainment_target"] = attainment;
  j["highest_rate_meeting_slo"] = highest_rate_meeting(points, attainment);
  j["points"] = nlohmann::ordered_json::array();
  for (const RatePoint& p : points) {
    j["points"].push_back({{"rate", p.rate}, {"slo_attainment", p.summary.slo_attainment},
                           {"ttft_p99_s", p.summary.ttft.p99}, {"tpot_p99_s", p.summary.tpot.p99},
                           {"e2e_p99_s", p.summary.e2e.p99}, {"output_tokens_per_s", p.summary.output_tokens_per_s}});
    if (p.mean_instances) {
      j["points"].back()["mean_instances"] = *p.mean_instances;
      j["points"].back()["gpu_hours"] = p.gpu_hours;
    }
    if (p.cost) j["points"].back()["cost"] = cost_json(*p.cost);
  }
  return j;
}

std::string sweep_data(const std::vector<RatePoint>& points) {
  std::string out = "# rate attainment ttft_p50_s ttft_p99_s tpot_p50_s tpot_p99_s e2e_p99_s output_tokens_per_s\n";
  for (const RatePoint& p : points) {
    const FleetSummary& s = p.summary;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%.6g %.6f %.6f %.6f %.6f %.6f %.6f %.3f\n", p.rate, s.slo_attainment, s.ttft.p50,
                  s.ttft.p99, s.tpot.p50, s.tpot.p99, s.e2e.p99, s.output_tokens_per_s);
    out += buf;
  }
  return out;
}

std::string sweep_gnuplot(const std::string& data_file, const std::string& png, const std::string& title) {
  return "set terminal pngcairo size 1000,650 noenhanced\nset output '" + png + "'\nset title \"" + gnuplot_text(title) +
         "\"\nset xlabel 'offered load (requests/s)'\nset logscale x 2\nset grid\nset key left top\n"
         "set ylabel 'SLO attainment'\nset yrange [0:1.05]\nset y2label 'p99 latency (s)'\nset y2tics\n"
         "set logscale y2\nplot '" + data_file + "' using 1:2 with linespoints lw 2 title 'SLO attainment', '" +
         data_file + "' using 1:4 axes x1y2 with linespoints title 'TTFT p99', '" + data_file +
         "' using 1:6 axes x1y2 with linespoints title 'TPOT p99'\n";
}

std::vector<RouterRun> compare_routers(const FleetConfig& config, const std::vector<RoutingPolicy>& routers) {
  std::vector<RouterRun> out;
  for (const RoutingPolicy r : routers) {
    FleetConfig c = config;
    c.router = r;
    FleetResult result = simulate_fleet(c);
    FleetSummary summary = summarize(c, result);
    out.push_back(RouterRun{r, std::move(result), std::move(summary)});
  }
  return out;
}

std::string router_table(const std::vector<RouterRun>& runs) {
  std::string out = "  router            SLO met   TTFT p50   TTFT p99   TPOT p99    E2E p50    E2E p99  prefix hits\n";
  for (const RouterRun& r : runs) {
    const FleetSummary& s = r.summary;
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %-15s %7.1f%%  %8.1fms %8.1fms %8.1fms %9.2fs %9.2fs  %10s\n", to_string(r.router),
                  100 * s.slo_attainment, 1e3 * s.ttft.p50, 1e3 * s.ttft.p99, 1e3 * s.tpot.p99, s.e2e.p50, s.e2e.p99,
                  s.has_prefix_blocks ? fmt("%.1f%%", 100 * s.prefix_block_hit_ratio).c_str() : "-");
    out += buf;
  }
  return out;
}

std::string router_cdf_data(const RouterRun& run) {
  std::vector<double> ttft, e2e;
  for (const RequestRecord& rec : run.result.requests) {
    if (!rec.completed) continue;
    ttft.push_back(rec.ttft().seconds());
    e2e.push_back(rec.e2e().seconds());
  }
  std::sort(ttft.begin(), ttft.end());
  std::sort(e2e.begin(), e2e.end());
  std::string out = "# fraction ttft_s e2e_s\n";
  // At most ~500 points per curve: every k-th request and the last.
  const size_t n = ttft.size();
  const size_t stride = std::max<size_t>(1, n / 500);
  for (size_t i = 0; i < n; i += stride) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.6f %.6f %.6f\n", static_cast<double>(i + 1) / static_cast<double>(n), ttft[i], e2e[i]);
    out += buf;
  }
  if (n > 0 && (n - 1) % stride != 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "1 %.6f %.6f\n", ttft[n - 1], e2e[n - 1]);
    out += buf;
  }
  return out;
}

std::string router_cdf_gnuplot(const std::vector<std::string>& data_files, const std::vector<RouterRun>& runs,
                               const std::string& png) {
  std::string s = "set terminal pngcairo size 1200,550 noenhanced\nset output '" + png +
                  "'\nset multiplot layout 1,2\nset grid\nset key right bottom\nset logscale x\nset ylabel 'fraction of "
                  "requests'\nset yrange [0:1]\n";
  for (int column : {2, 3}) {
    s += std::string("set xlabel '") + (column == 2 ? "TTFT" : "end-to-end latency") + " (s)'\nset title '" +
         (column == 2 ? "time to first token" : "end-to-end latency") + "'\nplot ";
    for (size_t i = 0; i < runs.size(); ++i) {
      s += (i ? ", '" : "'") + data_files[i] + "' using " + std::to_string(column) + ":1 with lines lw 2 title '" +
           to_string(runs[i].router) + "'";
    }
    s += "\n";
  }
  return s + "unset multiplot\n";
}

}  // namespace parallax
