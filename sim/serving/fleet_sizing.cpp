// Sizing a fleet's pools for a target load (fleet_sizing.h).
#include "serving/fleet_sizing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "serving/fleet_search.h"

namespace parallax {
namespace {

constexpr int kMostGrowths = 40;  // guesses grown before giving up
constexpr double kMostInstances = 100000;  // a pool's count beyond which sizing gives up

int grown(int count) { return count + std::max(1, static_cast<int>(std::ceil(0.05 * count))); }

// The fleet with `counts` instances at the target, on as few nodes as hold them packed.
SizedFleet run_at(const FleetConfig& config, const std::vector<int>& counts, double target, double attainment,
                  const TopologyAt& topology_at) {
  SizedFleet f;
  f.counts = counts;
  const int per_node = gpus_per_node(*config.topology);
  int cursor = 0;  // the instances packed as the fleet packs them, TP groups inside nodes
  for (size_t i = 0; i < counts.size(); ++i) {
    f.gpus += counts[i] * config.pools[i].shape.gpus();
    const InstanceShape shape = config.pools[i].shape;
    for (int k = 0; k < counts[i]; ++k) cursor = packed_start(shape, per_node, cursor) + shape.gpus();
  }
  f.nodes = std::max(1, (cursor + per_node - 1) / per_node);
  FleetConfig c = config;
  c.topology = topology_at(f.nodes);
  for (size_t i = 0; i < counts.size(); ++i) {
    c.pools[i].count = counts[i];
    c.pools[i].first_gpu.reset();
  }
  f.summary = summary_at(c, target);
  f.meets = f.summary.slo_attainment >= attainment;
  return f;
}

std::string fleet_label(const FleetConfig& config, const std::vector<int>& counts) {
  std::string label;
  for (size_t i = 0; i < counts.size(); ++i) {
    label += (i > 0 ? " + " : "") + config.pools[i].name + " " + std::to_string(counts[i]) + " × (" +
             describe_shape(config.pools[i].shape) + ")";
  }
  return label;
}

}  // namespace

FleetSizing size_fleet(const FleetConfig& config, double target, double attainment, const TopologyAt& topology_at,
                       const std::function<void(size_t, size_t)>& progress) {
  check_searchable(config, "serve size");
  if (!config.replay && config.traffic.arrival == TrafficSpec::Arrival::kClosedLoop) {
    throw std::invalid_argument("sizing needs open-loop traffic or a replayed trace (a closed loop's load is its users)");
  }
  if (config.slo_ttft == Time::zero() && config.slo_tpot == Time::zero()) {
    throw std::invalid_argument("sizing needs an SLO (the fleet's slo, or --slo-ttft / --slo-tpot)");
  }
  if (!(target > 0 && std::isfinite(target))) throw std::invalid_argument("the target load must be positive");
  FleetSizing s;
  s.target = target;
  s.attainment = attainment;
  s.capacity = capacity_at_slo(config, attainment).first;
  if (!(s.capacity > 0)) {
    throw std::invalid_argument("the fleet as given meets the SLO at no rate down to a 64th of its own: no count of its "
                                "instances will (change their shape or batching)");
  }
  std::vector<int> counts;
  for (const PoolConfig& p : config.pools) {
    const double guess = std::ceil(p.count * target / s.capacity - 1e-9);
    if (!(guess <= kMostInstances)) {
      throw std::invalid_argument("the target needs some " + std::to_string(static_cast<int64_t>(std::min(guess, 1e15))) +
                                  " instances of pool " + p.name + " (at most " +
                                  std::to_string(static_cast<int>(kMostInstances)) + " are sized)");
    }
    counts.push_back(std::max(1, static_cast<int>(guess)));
  }
  const auto run = [&](const std::vector<int>& n) {
    s.tried.push_back(run_at(config, n, target, attainment, topology_at));
    if (progress) progress(s.tried.size(), s.tried.size() + 1);
    return s.tried.back();
  };
  SizedFleet current = run(counts);
  for (int g = 0; !current.meets && g < kMostGrowths; ++g) {
    std::optional<SizedFleet> best;
    for (size_t p = 0; p < counts.size(); ++p) {
      std::vector<int> trial = counts;
      trial[p] = grown(trial[p]);
      SizedFleet r = run(trial);
      if (!best || r.summary.goodput_per_s > best->summary.goodput_per_s) best = r;
    }
    counts = best->counts;
    current = *best;
  }
  if (current.meets) {
    for (size_t p = 0; p < counts.size(); ++p) {
      while (counts[p] > 1) {
        std::vector<int> trial = counts;
        --trial[p];
        SizedFleet r = run(trial);
        if (!r.meets) break;
        counts = trial;
        current = r;
      }
    }
    for (size_t i = s.tried.size(); i-- > 0;) {
      if (s.tried[i].meets && s.tried[i].counts == current.counts) {
        s.chosen = i;
        break;
      }
    }
  }
  if (progress) progress(s.tried.size(), s.tried.size());
  return s;
}

std::string sizing_table(const FleetConfig& config, const FleetSizing& s) {
  std::string t;
  char line[512];
  int given = 0;
  for (const PoolConfig& p : config.pools) given += p.count * p.shape.gpus();
  std::snprintf(line, sizeof line,
                "  the fleet as given (%d GPUs): %.2f requests/s at the SLO (%.0f%% of requests meeting it); target "
                "%.2f\n\n",
                given, s.capacity, 100 * s.attainment, s.target);
  t += line;
  std::snprintf(line, sizeof line, "  %3s  %-52s %6s %6s %9s %10s %10s %10s  %s\n", "run", "instances", "GPUs", "nodes",
                "SLO met", "goodput/s", "TTFT p99", "TPOT p99", "");
  t += line;
  for (size_t i = 0; i < s.tried.size(); ++i) {
    const SizedFleet& f = s.tried[i];
    std::snprintf(line, sizeof line, "  %3zu  %-52s %6d %6d %8.1f%% %10.2f %7.0f ms %7.1f ms  %s\n", i + 1,
                  fleet_label(config, f.counts).c_str(), f.gpus, f.nodes, 100 * f.summary.slo_attainment,
                  f.summary.goodput_per_s, f.summary.ttft.p99 * 1e3, f.summary.tpot.p99 * 1e3,
                  s.chosen == i ? "<- the smallest that meets it" : f.meets ? "meets" : "");
    t += line;
  }
  if (s.chosen) {
    const SizedFleet& f = s.tried[*s.chosen];
    std::snprintf(line, sizeof line, "\n  to serve %.2f: %s, %d GPUs on %d nodes\n", s.target,
                  fleet_label(config, f.counts).c_str(), f.gpus, f.nodes);
  } else {
    std::snprintf(line, sizeof line, "\n  no fleet tried met the SLO at %.2f (grown %d times)\n", s.target, kMostGrowths);
  }
  t += line;
  return t;
}

nlohmann::ordered_json sizing_json(const FleetConfig& config, const FleetSizing& s) {
  nlohmann::ordered_json j;
  j["target"] = s.target;
  j["attainment"] = s.attainment;
  j["capacity_as_given"] = s.capacity;
  nlohmann::ordered_json tried = nlohmann::ordered_json::array();
  for (const SizedFleet& f : s.tried) {
    nlohmann::ordered_json pools = nlohmann::ordered_json::object();
    for (size_t i = 0; i < f.counts.size(); ++i) pools[config.pools[i].name] = f.counts[i];
    nlohmann::ordered_json row{{"instances", pools}, {"gpus", f.gpus}, {"nodes", f.nodes}, {"meets", f.meets}};
    add_run_figures(row, s.target, f.summary);
    row.erase("capacity");  // every run is at the target
    tried.push_back(std::move(row));
  }
  j["tried"] = std::move(tried);
  j["chosen"] = s.chosen ? nlohmann::ordered_json(*s.chosen) : nlohmann::ordered_json();
  return j;
}

nlohmann::json sized_fleet_file(const nlohmann::json& original, const FleetConfig& config, const FleetSizing& sizing,
                                const SizedFleet& fleet) {
  nlohmann::json out = original;
  // Synthetic open-loop traffic at the target, as the fleet was sized (a replayed trace's
  // speed-up is the command line's --rate-scale).
  if (!config.replay && out.contains("traffic") && out["traffic"].contains("rate")) {
    const double window = static_cast<double>(config.traffic.requests) / config.traffic.rate_per_s;
    out["traffic"]["rate"] = sizing.target;
    out["traffic"]["requests"] = std::max(config.traffic.requests, static_cast<int64_t>(std::llround(sizing.target * window)));
  }
  for (size_t i = 0; i < fleet.counts.size(); ++i) {
    out["pools"][i]["count"] = fleet.counts[i];
    out["pools"][i].erase("placement");
  }
  if (out["topology"].is_string()) out["topology"] = nlohmann::json{{"preset", out["topology"]}};
  out["topology"]["nodes"] = fleet.nodes;
  return out;
}

}  // namespace parallax
