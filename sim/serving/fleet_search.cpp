// The instance-shape search of a serving fleet (fleet_search.h).
#include "serving/fleet_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "engine/parallel_for.h"
#include "serving/fleet_sweep.h"
#include "serving/step_model.h"

namespace parallax {
namespace {

// Better first: capacity (or output throughput), then output throughput, then smaller
// instances, then the text.
bool better(const ShapeRun& a, const ShapeRun& b, bool by_capacity) {
  const double ga = by_capacity ? a.capacity : a.summary.output_tokens_per_s;
  const double gb = by_capacity ? b.capacity : b.summary.output_tokens_per_s;
  if (ga != gb) return ga > gb;
  if (a.summary.output_tokens_per_s != b.summary.output_tokens_per_s) {
    return a.summary.output_tokens_per_s > b.summary.output_tokens_per_s;
  }
  if (a.shape.gpus() != b.shape.gpus()) return a.shape.gpus() < b.shape.gpus();
  return describe_shape(a.shape) < describe_shape(b.shape);
}

double offered_rate(const FleetConfig& c) { return c.replay ? 1.0 : c.traffic.rate_per_s; }

}  // namespace

std::string describe_shape(const InstanceShape& s) {
  std::string t = "tp " + std::to_string(s.tp) + " · pp " + std::to_string(s.pp);
  if (s.dp > 1) t += " · dp " + std::to_string(s.dp);
  if (s.ep > 1) t += " · ep " + std::to_string(s.ep);
  return t;
}

std::string shape_label(const InstanceShape& s) {
  std::string label = "tp" + std::to_string(s.tp);
  if (s.pp > 1) label += " pp" + std::to_string(s.pp);
  if (s.dp > 1) label += " dp" + std::to_string(s.dp);
  if (s.ep > 1) label += " ep" + std::to_string(s.ep);
  return label;
}

std::string shape_refusal(const FleetConfig& c, const PoolConfig& pool) {
  try {
    check_pool_shape(c, pool);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

std::vector<InstanceShape> candidate_shapes(const ModelConfig& model, int gpus, bool pipeline) {
  std::vector<InstanceShape> out;
  for (int tp = 1; tp <= gpus; tp *= 2) {
    for (int pp = 1; pp <= (pipeline ? 8 : 1) && pp <= model.layers && tp * pp <= gpus; pp *= 2) {
      for (int dp = 1; tp * pp * dp <= gpus; dp *= 2) {
        if (gpus % (tp * pp * dp) != 0) continue;
        if (dp > 1 && (!model.moe || pp > 1)) break;
        if (dp > 1) {
          out.push_back(InstanceShape{tp, pp, tp * dp, dp});
          continue;
        }
        out.push_back(InstanceShape{tp, pp, 1, 1});
        if (model.moe && tp > 1) out.push_back(InstanceShape{tp, pp, tp, 1});
      }
    }
  }
  return out;
}

std::pair<double, FleetSummary> capacity_at_slo(const FleetConfig& config, double attainment) {
  // Open-loop arrivals keep the fleet's window (requests over rate), so that a higher rate is a
  // longer queue, not a burst the fleet drains; a replayed trace is sped up as it is.
  const double window = config.replay ? 0.0 : static_cast<double>(config.traffic.requests) / config.traffic.rate_per_s;
  const auto at = [&](double rate) {
    FleetConfig c = config;
    if (!config.replay) {
      c.traffic.requests = std::max(config.traffic.requests, static_cast<int64_t>(std::llround(rate * window)));
    }
    return sweep_rates(c, {rate}).front().summary;
  };
  const auto meets = [&](const FleetSummary& f) { return f.slo_attainment >= attainment; };
  double low = 0, high = offered_rate(config);
  FleetSummary best = at(high), run = best;
  // Up from the fleet's rate while it holds, else down until it does.
  if (meets(run)) {
    for (int i = 0; i < 8 && meets(run); ++i) {
      low = high;
      best = run;
      high *= 2;
      run = at(high);
    }
    if (meets(run)) return {high, run};
  } else {
    for (int i = 0; i < 6 && !meets(run); ++i) {
      high /= 2;
      run = at(high);
    }
    if (!meets(run)) return {0.0, best};
    low = high;
    best = run;
    high *= 2;
  }
  while (high - low > 0.02 * low) {
    const double mid = 0.5 * (low + high);
    run = at(mid);
    if (meets(run)) {
      low = mid;
      best = run;
    } else {
      high = mid;
    }
  }
  return {low, best};
}

ShapeSearch search_shapes(const FleetConfig& config, int threads, double attainment,
                          const std::function<void(size_t, size_t)>& progress) {
  if (config.pools.size() != 1 || config.pools.front().role != PoolRole::kColocated) {
    throw std::invalid_argument("the shape search re-shapes a fleet of one colocated pool");
  }
  const int gpus = static_cast<int>(config.topology->gpu_count());
  const PoolConfig& base = config.pools.front();
  const bool pipeline = base.step.speculative == SpeculativeMethod::kNone && !base.step.two_batch_overlap;
  std::vector<InstanceShape> shapes = candidate_shapes(config.model, gpus, pipeline);
  if (base.step.two_batch_overlap) {
    std::erase_if(shapes, [](const InstanceShape& s) { return s.dp < 2; });
  }
  ShapeSearch out;
  out.enumerated = shapes.size();
  out.attainment = attainment;
  out.by_capacity = (config.slo_ttft > Time::zero() || config.slo_tpot > Time::zero()) &&
                    (config.replay || config.traffic.arrival != TrafficSpec::Arrival::kClosedLoop);
  std::vector<std::string> why(shapes.size());
  std::vector<std::optional<ShapeRun>> runs(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    PoolConfig pool = base;
    pool.shape = shapes[i];
    pool.first_gpu.reset();
    why[i] = shape_refusal(config, pool);
  }
  std::mutex reporting;
  size_t done = 0;
  parallel_for(shapes.size(), std::max(1, threads), [&](size_t, size_t i) {
    if (why[i].empty()) {
      FleetConfig c = config;
      PoolConfig& pool = c.pools.front();
      pool.shape = shapes[i];
      pool.count = gpus / shapes[i].gpus();
      pool.first_gpu.reset();
      try {
        const FleetResult r = simulate_fleet(c);
        ShapeRun run{shapes[i], pool.count, r.pools.front().kv_blocks, 0.0, summarize(c, r)};
        if (out.by_capacity) std::tie(run.capacity, run.summary) = capacity_at_slo(c, attainment);
        runs[i] = run;
      } catch (const std::invalid_argument& e) {
        why[i] = e.what();
      }
    }
    const std::lock_guard<std::mutex> lock(reporting);
    ++done;
    if (progress) progress(done, shapes.size());
  });
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (runs[i]) {
      out.ranked.push_back(*runs[i]);
      continue;
    }
    const bool memory = why[i].find("does not fit") != std::string::npos;
    size_t& count = memory ? out.rejected_by_memory : out.rejected_by_rule;
    if (count++ == 0) out.rejections.push_back(describe_shape(shapes[i]) + ": " + why[i]);
  }
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [&](const ShapeRun& a, const ShapeRun& b) { return better(a, b, out.by_capacity); });
  return out;
}

std::string shape_table(const ShapeSearch& s, size_t top) {
  std::string t;
  char line[512];
  std::snprintf(line, sizeof line, "  %4s  %-28s %9s %10s %10s %13s %10s %10s %8s\n", "rank", "instance", "instances",
                "KV blocks", s.by_capacity ? "capacity" : "requests/s", "out tok/s/GPU", "TTFT p99", "TPOT p99",
                "SLO met");
  t += line;
  for (size_t i = 0; i < s.ranked.size() && i < top; ++i) {
    const ShapeRun& r = s.ranked[i];
    const FleetSummary& f = r.summary;
    std::snprintf(line, sizeof line, "  %4zu  %-28s %9d %10lld %10.2f %13.1f %7.0f ms %7.1f ms %7.1f%%\n", i + 1,
                  describe_shape(r.shape).c_str(), r.instances, static_cast<long long>(r.kv_blocks),
                  s.by_capacity ? r.capacity : f.requests_per_s, f.output_tokens_per_s_per_gpu, f.ttft.p99 * 1e3,
                  f.tpot.p99 * 1e3, 100.0 * f.slo_attainment);
    t += line;
  }
  if (s.by_capacity) t += capacity_note(s.attainment);
  std::snprintf(line, sizeof line, "\nshapes: %zu enumerated = %zu rejected by rule + %zu rejected by memory + %zu simulated\n",
                s.enumerated, s.rejected_by_rule, s.rejected_by_memory, s.ranked.size());
  t += line;
  for (const std::string& r : s.rejections) t += "  rejected, e.g. " + r + "\n";
  return t;
}

std::string shape_data(const ShapeSearch& s) {
  std::string out = "# rate tpot_p99_ms ttft_p99_ms label\n";
  for (const ShapeRun& r : s.ranked) {
    out += data_row(s.by_capacity ? r.capacity : r.summary.requests_per_s, r.summary, shape_label(r.shape));
  }
  return out;
}

std::string shape_gnuplot(const std::string& data_file, const std::string& png, bool by_capacity,
                          const std::string& title) {
  const std::string y = by_capacity ? "capacity at the SLO (requests/s)" : "requests/s at the fleet's rate";
  return "set terminal pngcairo size 1000,650 noenhanced\nset output '" + png + "'\nset title \"" + title +
         "\"\nset xlabel 'TPOT p99 (ms)'\nset ylabel '" + y + "'\nset grid\nset key off\nset offsets 0.05, 0.2, 0.05, 0.05\n" +
         "plot '" + data_file + "' using 2:1 with points pt 7 ps 1.2 lc rgb '#d04020', '' using 2:1:4 with labels offset 0,1 font ',8'\n";
}

nlohmann::ordered_json shape_json(const ShapeSearch& s) {
  nlohmann::ordered_json j;
  j["enumerated"] = s.enumerated;
  j["rejected_by_rule"] = s.rejected_by_rule;
  j["rejected_by_memory"] = s.rejected_by_memory;
  j["ranked_by"] = s.by_capacity ? "capacity_at_slo" : "output_throughput";
  j["attainment"] = s.attainment;
  j["rejections"] = s.rejections;
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  for (const ShapeRun& r : s.ranked) {
    nlohmann::ordered_json run{{"tp", r.shape.tp}, {"pp", r.shape.pp},           {"dp", r.shape.dp},
                               {"ep", r.shape.ep}, {"instances", r.instances}, {"kv_blocks", r.kv_blocks}};
    add_run_figures(run, r.capacity, r.summary);
    runs.push_back(std::move(run));
  }
  j["shapes"] = std::move(runs);
  return j;
}

std::string capacity_note(double attainment) {
  char line[256];
  std::snprintf(line, sizeof line,
                "  capacity: the highest rate (requests/s; replaying, the trace's speed-up) at which %.0f%% of the "
                "requests meet the SLO; the other columns at it\n",
                100.0 * attainment);
  return line;
}

std::string data_row(double rate, const FleetSummary& f, const std::string& label) {
  char line[256];
  std::snprintf(line, sizeof line, "%.6g %.6g %.6g \"%s\"\n", rate, f.tpot.p99 * 1e3, f.ttft.p99 * 1e3, label.c_str());
  return line;
}

void add_run_figures(nlohmann::ordered_json& j, double capacity, const FleetSummary& f) {
  j["capacity"] = capacity;
  j["goodput_per_s"] = f.goodput_per_s;
  j["requests_per_s"] = f.requests_per_s;
  j["output_tokens_per_s_per_gpu"] = f.output_tokens_per_s_per_gpu;
  j["ttft_p99_s"] = f.ttft.p99;
  j["tpot_p99_s"] = f.tpot.p99;
  j["slo_attainment"] = f.slo_attainment;
}

void set_pool_shape(nlohmann::json& pool, const InstanceShape& shape, int instances) {
  pool["tp"] = shape.tp;
  pool["pp"] = shape.pp;
  pool["ep"] = shape.ep;
  if (shape.dp > 1) {
    pool["dp"] = shape.dp;
  } else {
    pool.erase("dp");
  }
  pool["count"] = instances;
  pool.erase("placement");
}

nlohmann::json fleet_with_shape(const nlohmann::json& original, const ShapeRun& run) {
  nlohmann::json out = original;
  set_pool_shape(out["pools"][0], run.shape, run.instances);
  return out;
}

}  // namespace parallax
