// Sizing a fleet's pools for a target load (fleet_sizing.h).
#include "serving/fleet_sizing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "serving/fleet_search.h"
#include "serving/rate_bound.h"

namespace parallax {
namespace {

constexpr int kMostGrowths = 40;  // guesses grown before giving up
constexpr double kMostInstances = 100000;  // a pool's count beyond which sizing gives up
constexpr size_t kMostMixes = 100000;      // cheaper mixes enumerated before the proof gives up
constexpr size_t kMostProofRuns = 24;      // of them simulated before it gives up

int grown(int count) { return count + std::max(1, static_cast<int>(std::ceil(0.05 * count))); }

// Each pool's node group on a cluster of node groups (from its placement), else empty.
std::vector<size_t> pool_groups(const FleetConfig& config) {
  const TopologyInfo& info = config.topology->info();
  std::vector<size_t> groups;
  if (info.node_groups.empty()) return groups;
  for (const PoolConfig& pool : config.pools) {
    if (!pool.first_gpu) {
      throw std::invalid_argument("pool " + pool.name + " has no placement: on a cluster of node groups sizing keeps each " +
                                  "pool on the group its placement names");
    }
    const int node = config.topology->device(config.topology->gpus()[static_cast<size_t>(*pool.first_gpu)]).node;
    groups.push_back(static_cast<size_t>(node_group_of(info, node) - info.node_groups.data()));
  }
  return groups;
}

// The fleet with `counts` instances at the target, on as few nodes as hold them packed.
SizedFleet run_at(const FleetConfig& config, const std::vector<int>& counts, double target, double attainment,
                  const TopologyAt& topology_at, const GpuHourPrices& prices) {
  SizedFleet f;
  f.counts = counts;
  const PackedFleet packed = pack_fleet(config, counts);
  for (size_t i = 0; i < counts.size(); ++i) f.gpus += counts[i] * config.pools[i].shape.gpus();
  for (const int n : packed.nodes) f.nodes += n;
  FleetConfig c = config;
  c.topology = topology_at(packed.nodes);
  for (size_t i = 0; i < counts.size(); ++i) {
    c.pools[i].count = counts[i];
    c.pools[i].first_gpu.reset();
    if (!packed.first_gpus.empty()) c.pools[i].first_gpu = packed.first_gpus[i];
  }
  if (!packed.first_gpus.empty()) {
    f.group_nodes = packed.nodes;
    f.first_gpus = packed.first_gpus;
  }
  if (!prices.empty()) f.dollars_per_hour = fleet_dollars_per_hour(c, prices);
  f.summary = summary_at(c, target);
  f.meets = f.summary.slo_attainment >= attainment;
  return f;
}

// What one instance of each pool costs: its GPUs' dollars an hour, or unpriced its GPUs.
std::vector<double> instance_costs(const FleetConfig& config, const GpuHourPrices& prices) {
  std::vector<double> cost;
  for (const PoolConfig& pool : config.pools) {
    FleetConfig one = config;
    one.pools = {pool};
    one.pools[0].count = 1;
    cost.push_back(prices.empty() ? pool.shape.gpus() : fleet_dollars_per_hour(one, prices));
  }
  return cost;
}

// The pools in the order the trimming tries them: the fleet's, or priced the dearest instance
// first (the fleet's order among equals).
std::vector<size_t> trimming_order(const FleetConfig& config, const GpuHourPrices& prices) {
  std::vector<size_t> order(config.pools.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (prices.empty()) return order;
  const std::vector<double> instance = instance_costs(config, prices);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return instance[a] > instance[b]; });
  return order;
}

// The requests/s `counts` instances sustain at most, in load units: the sum of their rate bounds
// (rate_bound.h), with decode pools the smaller of the prefill pools' sum and the decode pools'.
double fleet_rate_bound(const FleetConfig& config, const std::vector<double>& instance_bound, const std::vector<int>& counts) {
  double front = 0, decode = 0;
  bool disaggregated = false;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double r = counts[i] * instance_bound[i];
    if (config.pools[i].role == PoolRole::kDecode) {
      decode += r;
      disaggregated = true;
    } else {
      front += r;
    }
  }
  return (disaggregated ? std::min(front, decode) : front) / requests_per_load_unit(config);
}

// Every mix of at least one instance a pool that costs less than `ceiling`, cheapest first (then
// on the fewest GPUs, then the fewest instances of the first pools); empty with `complete` false
// past kMostMixes.
std::vector<std::vector<int>> cheaper_mixes(const std::vector<double>& cost, const std::vector<int>& gpus, double ceiling,
                                            bool& complete) {
  std::vector<std::pair<double, std::vector<int>>> found;
  std::vector<int> counts(cost.size(), 1);
  double base = 0;
  for (const double c : cost) base += c;
  complete = true;
  // Odometer over the counts, each pool's bounded by what the others' one instance leaves.
  const std::function<void(size_t, double)> walk = [&](size_t i, double spent) {
    if (!complete) return;
    if (i == cost.size()) {
      if (found.size() >= kMostMixes) {
        complete = false;
        return;
      }
      found.emplace_back(spent, counts);
      return;
    }
    for (counts[i] = 1; complete && spent + (counts[i] - 1) * cost[i] < ceiling - 1e-9 * ceiling; ++counts[i]) {
      walk(i + 1, spent + (counts[i] - 1) * cost[i]);
    }
    counts[i] = 1;
  };
  if (base < ceiling - 1e-9 * ceiling) walk(0, base);
  if (!complete) return {};
  const auto gpus_of = [&](const std::vector<int>& n) {
    int g = 0;
    for (size_t i = 0; i < n.size(); ++i) g += n[i] * gpus[i];
    return g;
  };
  std::stable_sort(found.begin(), found.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : gpus_of(a.second) < gpus_of(b.second);
  });
  std::vector<std::vector<int>> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

// Of the fleets each with one pool grown, the one to keep: the most goodput, or priced the most
// goodput gained per dollar an hour added (the most goodput when none gains).
const SizedFleet& best_growth(const std::vector<SizedFleet>& trials, const SizedFleet& current, bool priced) {
  const SizedFleet* best = &trials.front();
  const auto per_dollar = [&](const SizedFleet& r) {
    const double added = r.dollars_per_hour - current.dollars_per_hour;
    return added > 0 ? (r.summary.goodput_per_s - current.summary.goodput_per_s) / added : 0.0;
  };
  const bool gains = priced && std::any_of(trials.begin(), trials.end(), [&](const SizedFleet& r) { return per_dollar(r) > 0; });
  for (const SizedFleet& r : trials) {
    if (gains ? per_dollar(r) > per_dollar(*best) : r.summary.goodput_per_s > best->summary.goodput_per_s) best = &r;
  }
  return *best;
}

// " (h100 2, a100 3)": each group's nodes on node groups, else empty.
std::string nodes_by_group(const FleetConfig& config, const SizedFleet& f) {
  if (f.group_nodes.empty()) return {};
  std::string out;
  for (size_t g = 0; g < f.group_nodes.size(); ++g) {
    out += (g > 0 ? ", " : " (") + config.topology->info().node_groups[g].name + " " + std::to_string(f.group_nodes[g]);
  }
  return out + ")";
}

std::string fleet_label(const FleetConfig& config, const std::vector<int>& counts) {
  std::string label;
  for (size_t i = 0; i < counts.size(); ++i) {
    label += (i > 0 ? " + " : "") + config.pools[i].name + " " + std::to_string(counts[i]) + " × (" +
             describe_shape(config.pools[i].shape) + ")";
  }
  return label;
}

// With several pools the growth and trimming are greedy: every mix cheaper than the one chosen
// (fewer GPUs, unpriced) is then taken in order of cost. One run before either missed the SLO
// (the cheapest of those tried that meet it is the one chosen priced) or, unpriced, met it with
// more goodput than the fewest GPUs needed: it is chosen. Those whose rate bound, with its margin,
// cannot reach the target are left unrun; the rest are simulated until one meets the SLO. What
// became of each mix cheaper than the fleet finally chosen is counted.
template <typename Run>
void prove_cheapest(const FleetConfig& config, double target, const Run& run, const GpuHourPrices& prices, FleetSizing& s) {
  const std::vector<double> cost = instance_costs(config, prices);
  std::vector<int> gpus;
  for (const PoolConfig& pool : config.pools) gpus.push_back(pool.shape.gpus());
  const auto cost_of = [&](const std::vector<int>& counts) {
    double c = 0;
    for (size_t i = 0; i < counts.size(); ++i) c += counts[i] * cost[i];
    return c;
  };
  bool complete = false;
  const std::vector<std::vector<int>> mixes = cheaper_mixes(cost, gpus, cost_of(s.tried[*s.chosen].counts), complete);
  if (!complete) return;
  const TrafficMeans means = traffic_means(config);
  std::vector<double> bound;
  for (const PoolConfig& pool : config.pools) bound.push_back(instance_rate_bound(config, pool, means));
  enum class Fate : uint8_t { kRunBefore, kBoundedOut, kSimulated };
  std::vector<std::pair<double, Fate>> missed;  // the mixes taken before one met the SLO, with their costs
  std::optional<size_t> found;
  size_t simulated = 0;
  for (const std::vector<int>& counts : mixes) {
    const auto seen = std::find_if(s.tried.begin(), s.tried.end(), [&](const SizedFleet& f) { return f.counts == counts; });
    if (seen != s.tried.end()) {
      if (seen->meets) {
        found = static_cast<size_t>(seen - s.tried.begin());
        break;
      }
      missed.emplace_back(cost_of(counts), Fate::kRunBefore);
      continue;
    }
    if (fleet_rate_bound(config, bound, counts) * (1 + kBoundMargin) < target) {
      missed.emplace_back(cost_of(counts), Fate::kBoundedOut);
      continue;
    }
    if (simulated++ == kMostProofRuns) return;  // unproven: no proof kept
    if (run(counts).meets) {
      found = s.tried.size() - 1;
      break;
    }
    missed.emplace_back(cost_of(counts), Fate::kSimulated);
  }
  SizingProof proof;
  proof.mixes = mixes.size();
  if (found) {
    proof.greedy = s.chosen;
    s.chosen = found;
  }
  // Mixes of the chosen fleet's own cost taken before it are not cheaper than it.
  const double chosen_cost = cost_of(s.tried[*s.chosen].counts);
  for (const auto& [c, fate] : missed) {
    if (!(c < chosen_cost - 1e-9 * chosen_cost)) continue;
    ++(fate == Fate::kRunBefore ? proof.tried_before : fate == Fate::kBoundedOut ? proof.bounded_out : proof.simulated);
  }
  s.proof = proof;
}

}  // namespace

PackedFleet pack_fleet(const FleetConfig& config, const std::vector<int>& counts) {
  const int per_node = gpus_per_node(*config.topology);
  const std::vector<size_t> groups = pool_groups(config);
  std::vector<int> cursor(groups.empty() ? 1 : config.topology->info().node_groups.size(), 0), offset(counts.size(), 0);
  for (size_t i = 0; i < counts.size(); ++i) {
    int& at = cursor[groups.empty() ? 0 : groups[i]];
    offset[i] = packed_start(config.pools[i].shape, per_node, at);
    at = packed_end(config.pools[i].shape, counts[i], per_node, at);
  }
  PackedFleet out;
  for (const int used : cursor) out.nodes.push_back(std::max(1, (used + per_node - 1) / per_node));
  if (groups.empty()) return out;
  std::vector<int> first_node(out.nodes.size(), 0);  // each group's, in the resized cluster
  for (size_t g = 1; g < out.nodes.size(); ++g) first_node[g] = first_node[g - 1] + out.nodes[g - 1];
  for (size_t i = 0; i < counts.size(); ++i) out.first_gpus.push_back(first_node[groups[i]] * per_node + offset[i]);
  return out;
}

FleetSizing size_fleet(const FleetConfig& config, double target, double attainment, const TopologyAt& topology_at,
                       const std::function<void(size_t, size_t)>& progress, const GpuHourPrices& prices) {
  check_searchable(config, "serve size");
  pool_groups(config);  // on node groups, every pool placed
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
  s.priced = !prices.empty();
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
    s.tried.push_back(run_at(config, n, target, attainment, topology_at, prices));
    if (progress) progress(s.tried.size(), s.tried.size() + 1);
    return s.tried.back();
  };
  SizedFleet current = run(counts);
  for (int g = 0; !current.meets && g < kMostGrowths; ++g) {
    std::vector<SizedFleet> trials;
    for (size_t p = 0; p < counts.size(); ++p) {
      std::vector<int> trial = counts;
      trial[p] = grown(trial[p]);
      trials.push_back(run(trial));
    }
    current = best_growth(trials, current, s.priced);
    counts = current.counts;
  }
  if (current.meets) {
    for (const size_t p : trimming_order(config, prices)) {
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
    // Priced, a growth kept for its goodput per dollar may have passed a cheaper fleet that
    // meets the SLO too: the cheapest of all tried (fewer GPUs, then the earlier, among equals).
    for (size_t i = 0; i < s.tried.size() && s.priced; ++i) {
      const SizedFleet& f = s.tried[i];
      const SizedFleet& c = s.tried[*s.chosen];
      if (f.meets && (f.dollars_per_hour < c.dollars_per_hour || (f.dollars_per_hour == c.dollars_per_hour && f.gpus < c.gpus))) {
        s.chosen = i;
      }
    }
    if (config.pools.size() > 1) prove_cheapest(config, target, run, prices, s);
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
  const char* chosen = s.proof ? (s.priced ? "<- the cheapest that meets it" : "<- the smallest that meets it")
                      : s.priced ? "<- the cheapest found that meets it"
                                 : config.pools.size() > 1 ? "<- the smallest found that meets it"
                                                           : "<- the smallest that meets it";
  std::snprintf(line, sizeof line, "  %3s  %-52s %6s %6s%s %9s %10s %10s %10s  %s\n", "run", "instances", "GPUs", "nodes",
                s.priced ? "    $/hour" : "", "SLO met", "goodput/s", "TTFT p99", "TPOT p99", "");
  t += line;
  for (size_t i = 0; i < s.tried.size(); ++i) {
    const SizedFleet& f = s.tried[i];
    char dollars[32] = "";
    if (s.priced) std::snprintf(dollars, sizeof dollars, " %9.2f", f.dollars_per_hour);
    std::snprintf(line, sizeof line, "  %3zu  %-52s %6d %6d%s %8.1f%% %10.2f %7.0f ms %7.1f ms  %s\n", i + 1,
                  fleet_label(config, f.counts).c_str(), f.gpus, f.nodes, dollars, 100 * f.summary.slo_attainment,
                  f.summary.goodput_per_s, f.summary.ttft.p99 * 1e3, f.summary.tpot.p99 * 1e3,
                  s.chosen == i ? chosen : f.meets ? "meets" : "");
    t += line;
  }
  if (s.chosen) {
    const SizedFleet& f = s.tried[*s.chosen];
    std::snprintf(line, sizeof line, "\n  to serve %.2f: %s, %d GPUs on %d nodes%s\n", s.target,
                  fleet_label(config, f.counts).c_str(), f.gpus, f.nodes, nodes_by_group(config, f).c_str());
    t += line;
    if (s.priced) {
      std::snprintf(line, sizeof line, "  at $%.2f an hour\n", f.dollars_per_hour);
      t += line;
    }
    if (s.proof) {
      const char* cheaper = s.priced ? "cheaper" : "smaller";
      if (s.proof->greedy) {
        std::snprintf(line, sizeof line, "  (the greedy search chose run %zu; of the %zu mixes %s than it, taken in order, run %zu is "
                                         "the first that meets the SLO)\n",
                      *s.proof->greedy + 1, s.proof->mixes, cheaper, *s.chosen + 1);
        t += line;
      }
      std::snprintf(line, sizeof line,
                    "  every mix %s than it, at least one instance a pool: %zu run before, %zu bounded out (rate bound "
                    "x %.1f below the target), %zu simulated now: none meets the SLO\n",
                    cheaper, s.proof->tried_before, s.proof->bounded_out, 1 + kBoundMargin, s.proof->simulated);
      t += line;
    }
  } else {
    std::snprintf(line, sizeof line, "\n  no fleet tried met the SLO at %.2f (grown %d times)\n", s.target, kMostGrowths);
    t += line;
  }
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
    if (!f.group_nodes.empty()) {
      nlohmann::ordered_json groups = nlohmann::ordered_json::object();
      for (size_t g = 0; g < f.group_nodes.size(); ++g) groups[config.topology->info().node_groups[g].name] = f.group_nodes[g];
      row["group_nodes"] = std::move(groups);
    }
    if (s.priced) row["dollars_per_hour"] = f.dollars_per_hour;
    add_run_figures(row, s.target, f.summary);
    row.erase("capacity");  // every run is at the target
    tried.push_back(std::move(row));
  }
  j["tried"] = std::move(tried);
  j["chosen"] = s.chosen ? nlohmann::ordered_json(*s.chosen) : nlohmann::ordered_json();
  if (s.proof) {
    j["cheaper_mixes"] = {{"below_greedy_choice", s.proof->mixes},
                          {"run_before", s.proof->tried_before},
                          {"bounded_out", s.proof->bounded_out},
                          {"simulated", s.proof->simulated},
                          {"greedy_choice", s.proof->greedy ? nlohmann::ordered_json(*s.proof->greedy) : nlohmann::ordered_json()}};
  }
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
  if (out["topology"].is_string()) out["topology"] = nlohmann::json{{"preset", out["topology"]}};
  if (fleet.group_nodes.empty()) {
    for (size_t i = 0; i < fleet.counts.size(); ++i) {
      out["pools"][i]["count"] = fleet.counts[i];
      out["pools"][i].erase("placement");
    }
    out["topology"]["nodes"] = fleet.nodes;
    return out;
  }
  // On node groups: each group's nodes, and each pool placed where its group now starts.
  const std::vector<NodeGroup>& groups = config.topology->info().node_groups;
  nlohmann::json nodes = nlohmann::json::object();
  for (size_t g = 0; g < groups.size(); ++g) nodes[groups[g].name] = fleet.group_nodes[g];
  out["topology"]["group_nodes"] = nodes;
  for (size_t i = 0; i < fleet.counts.size(); ++i) {
    out["pools"][i]["count"] = fleet.counts[i];
    out["pools"][i]["placement"] = placement_json(fleet.first_gpus[i], gpus_per_node(*config.topology));
  }
  return out;
}

}  // namespace parallax
