// The instance-shape search of a serving fleet (fleet_search.h).
#include "serving/fleet_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "io/text_format.h"
#include "engine/parallel_for.h"
#include "serving/fleet_sweep.h"
#include "serving/step_model.h"

namespace parallax {
namespace {

// Better first: capacity (or output throughput; priced, per dollar an hour), then output
// throughput, then smaller instances, then the text.
bool better(const ShapeRun& a, const ShapeRun& b, bool by_capacity) {
  const double ga = ranking_figure(by_capacity, a.capacity, a.summary, a.dollars_per_hour);
  const double gb = ranking_figure(by_capacity, b.capacity, b.summary, b.dollars_per_hour);
  if (ga != gb) return ga > gb;
  if (a.summary.output_tokens_per_s != b.summary.output_tokens_per_s) {
    return a.summary.output_tokens_per_s > b.summary.output_tokens_per_s;
  }
  if (a.shape.gpus() != b.shape.gpus()) return a.shape.gpus() < b.shape.gpus();
  if (describe_shape(a.shape) != describe_shape(b.shape)) return describe_shape(a.shape) < describe_shape(b.shape);
  if (a.group != b.group) return a.group < b.group;
  return std::tuple(a.max_sequences, a.token_budget, a.draft_tokens) <
         std::tuple(b.max_sequences, b.token_budget, b.draft_tokens);
}

double offered_rate(const FleetConfig& c) { return c.replay ? 1.0 : c.traffic.rate_per_s; }

}  // namespace

std::vector<SearchRegion> search_regions(const FleetConfig& config) {
  const TopologyInfo& info = config.topology->info();
  if (info.node_groups.empty()) return {SearchRegion{{}, 0, static_cast<int>(config.topology->gpu_count())}};
  const int per_node = gpus_per_node(*config.topology);
  std::vector<SearchRegion> out;
  for (const NodeGroup& g : info.node_groups) out.push_back({g.name, g.first_node * per_node, g.nodes * per_node});
  return out;
}

double per_dollar_hour(double rate, double dollars_per_hour) {
  return dollars_per_hour > 0 ? rate / dollars_per_hour : rate;
}

double bound_figure(bool by_capacity, double capacity, const FleetSummary& summary, double requests_per_unit) {
  return by_capacity ? capacity : summary.requests_per_s / requests_per_unit;
}

double ranking_figure(bool by_capacity, double capacity, const FleetSummary& summary, double dollars_per_hour) {
  return per_dollar_hour(by_capacity ? capacity : summary.output_tokens_per_s, dollars_per_hour);
}

double dollars_per_million_output(double dollars_per_hour, bool by_capacity, double capacity, double requests_per_unit,
                                  double mean_output, const FleetSummary& summary) {
  const double tokens_per_s = by_capacity ? capacity * requests_per_unit * mean_output : summary.output_tokens_per_s;
  if (!(dollars_per_hour > 0) || !(tokens_per_s > 0)) return 0;
  return dollars_per_hour / (tokens_per_s * 3600.0) * 1e6;
}

void GroupOutcome::add(double bound, std::optional<double> figure, bool was_refused) {
  ++candidates;
  best_bound = std::max(best_bound, bound);
  if (was_refused) ++refused;
  if (figure) {
    ++simulated;
    best = std::max(best, *figure);
  }
}

std::string group_outcome_table(const std::vector<GroupOutcome>& outcomes, const std::vector<std::string>& headers,
                                bool by_capacity) {
  std::string t;
  char line[256];
  for (const std::string& h : headers) {
    std::snprintf(line, sizeof line, "  %-12s", h.c_str());
    t += line;
  }
  std::snprintf(line, sizeof line, " %10s %11s %10s %10s\n", "candidates", "best bound", "simulated",
                by_capacity ? "capacity" : "requests/s");
  t += line;
  for (const GroupOutcome& g : outcomes) {
    for (const std::string& name : g.groups) {
      std::snprintf(line, sizeof line, "  %-12s", name.c_str());
      t += line;
    }
    std::snprintf(line, sizeof line, " %10zu %11.2f %10zu ", g.candidates, g.best_bound, g.simulated);
    t += line;
    if (g.candidates == 0) {
      t += "         -  (nothing fits)\n";
    } else if (g.simulated == 0 && g.refused > 0) {
      t += "         -  (the fleet refused every one simulated)\n";
    } else if (g.simulated == 0) {
      t += "         -  (pruned: no bound within reach of the best)\n";
    } else {
      std::snprintf(line, sizeof line, "%10.2f\n", g.best);
      t += line;
    }
  }
  return t;
}

nlohmann::ordered_json group_outcome_json(const std::vector<GroupOutcome>& outcomes, const std::vector<std::string>& keys) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const GroupOutcome& g : outcomes) {
    nlohmann::ordered_json j;
    for (size_t i = 0; i < keys.size() && i < g.groups.size(); ++i) j[keys[i]] = g.groups[i];
    j["candidates"] = g.candidates;
    j["simulated"] = g.simulated;
    j["refused"] = g.refused;
    j["best_bound"] = g.best_bound;
    j["best"] = g.best;
    out.push_back(std::move(j));
  }
  return out;
}

bool ranks_by_capacity(const FleetConfig& config) {
  return (config.slo_ttft > Time::zero() || config.slo_tpot > Time::zero()) &&
         (config.replay || config.traffic.arrival != TrafficSpec::Arrival::kClosedLoop);
}

bool refused_for_memory(const std::string& why) { return why.find("does not fit") != std::string::npos; }

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

FleetSummary summary_at(const FleetConfig& config, double rate) {
  // Open-loop arrivals keep the fleet's window (requests over rate), so that a higher rate is a
  // longer queue, not a burst the fleet drains; a replayed trace is sped up as it is.
  FleetConfig c = config;
  if (!config.replay) {
    const double window = static_cast<double>(config.traffic.requests) / config.traffic.rate_per_s;
    c.traffic.requests = std::max(config.traffic.requests, static_cast<int64_t>(std::llround(rate * window)));
  }
  return sweep_rates(c, {rate}).front().summary;
}

std::vector<InstanceShape> pool_candidate_shapes(const FleetConfig& config, const PoolConfig& pool, int gpus) {
  const bool speculates = pool.role != PoolRole::kPrefill && pool.step.speculative != SpeculativeMethod::kNone;
  if (gpus <= 0) gpus = static_cast<int>(config.topology->gpu_count());
  std::vector<InstanceShape> shapes = candidate_shapes(config.model, gpus, !speculates && !pool.step.two_batch_overlap);
  if (pool.step.two_batch_overlap) std::erase_if(shapes, [](const InstanceShape& s) { return s.dp < 2; });
  return shapes;
}

std::pair<double, FleetSummary> capacity_at_slo(const FleetConfig& config, double attainment) {
  const auto at = [&](double rate) { return summary_at(config, rate); };
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

size_t run_best_bound_first(const std::vector<double>& bounds, bool prune, int threads,
                            const std::function<std::optional<double>(size_t)>& run,
                            const std::function<void(size_t, size_t)>& progress) {
  constexpr size_t kRound = 8;  // candidates run between two pruning decisions
  double best = 0;
  size_t next = 0, done = 0;
  std::mutex reporting;
  const auto hopeless = [&](size_t i) { return prune && best > 0 && bounds[i] * (1 + kBoundMargin) < best; };
  while (next < bounds.size() && !hopeless(next)) {
    size_t end = next;
    while (end < bounds.size() && end - next < kRound && !hopeless(end)) ++end;
    std::vector<std::optional<double>> figures(end - next);
    parallel_for(end - next, std::max(1, threads), [&](size_t, size_t k) {
      figures[k] = run(next + k);
      const std::lock_guard<std::mutex> lock(reporting);
      ++done;
      if (progress) progress(done, bounds.size());
    });
    for (const std::optional<double>& f : figures) {
      if (f) best = std::max(best, *f);
    }
    next = end;
  }
  if (progress && next < bounds.size()) progress(bounds.size(), bounds.size());
  return next;
}

namespace {

// Every (a, b) of two lists, a's order outermost.
std::vector<std::pair<int64_t, int>> cross(const std::vector<int64_t>& as, const std::vector<int>& bs) {
  std::vector<std::pair<int64_t, int>> out;
  for (const int64_t a : as) {
    for (const int b : bs) out.emplace_back(a, b);
  }
  return out;
}

// One shape with one batching, checked and bounded, ready to simulate.
struct ShapeCandidate {
  PoolConfig pool;
  ShapeRun run;
  std::string label;
};

std::string batching_label(int max_sequences, int64_t token_budget, int draft_tokens) {
  return std::to_string(max_sequences) + " seqs / " + std::to_string(token_budget) + " tokens" +
         (draft_tokens > 0 ? " / " + std::to_string(draft_tokens) + " drafts" : "");
}

// Every shape × batching of the search, those the model or the memory refuse counted in `out`.
std::vector<ShapeCandidate> shape_candidates(const FleetConfig& config, const ShapeSearchOptions& options,
                                             ShapeSearch& out) {
  const PoolConfig& base = config.pools.front();
  const std::vector<int> caps = options.max_sequences.empty() ? std::vector{base.batching.max_sequences} : options.max_sequences;
  const std::vector<int64_t> budgets =
      options.token_budgets.empty() ? std::vector{base.batching.token_budget} : options.token_budgets;
  if (!options.draft_tokens.empty() && base.step.speculative == SpeculativeMethod::kNone) {
    throw std::invalid_argument("draft tokens to try, but the pool does not speculate (its \"speculative\")");
  }
  const std::vector<int> drafts =
      options.draft_tokens.empty() ? std::vector{base.batching.speculative_tokens} : options.draft_tokens;
  out.batching_varied = caps.size() * budgets.size() * drafts.size() > 1;
  const TrafficMeans means = traffic_means(config);
  const double unit = requests_per_load_unit(config);
  std::vector<ShapeCandidate> candidates;
  for (const SearchRegion& region : search_regions(config)) {
    const std::vector<InstanceShape> shapes = pool_candidate_shapes(config, base, region.gpus);
    out.enumerated += shapes.size() * caps.size() * budgets.size() * drafts.size();
    for (const InstanceShape& shape : shapes) {
      for (const int cap : caps) {
        for (const auto& [budget, draft] : cross(budgets, drafts)) {
          PoolConfig pool = base;
          pool.shape = shape;
          pool.count = region.gpus / shape.gpus();
          pool.first_gpu = region.start();
          pool.batching.max_sequences = cap;
          pool.batching.token_budget = budget;
          pool.batching.speculative_tokens = draft;
          std::string label = describe_shape(shape);
          if (!region.group.empty()) label += " on " + region.group;
          if (out.batching_varied) label += ", " + batching_label(cap, budget, draft);
          if (const std::string why = shape_refusal(config, pool); !why.empty()) {
            const bool memory = refused_for_memory(why);
            if ((memory ? out.rejected_by_memory : out.rejected_by_rule)++ == 0) out.rejections.push_back(label + ": " + why);
            continue;
          }
          const int64_t kv = pool.batching.kv_blocks > 0 ? pool.batching.kv_blocks : pool_kv_capacity(config, pool).blocks;
          const double bound = pool.count * instance_rate_bound(config, pool, means) / unit;
          ShapeRun run{shape, region.group, pool.first_gpu, pool.count, kv, cap, budget, draft, bound, 0.0, {}, 0.0, 0.0};
          if (!options.prices.empty()) {
            FleetConfig priced = config;
            priced.pools.front() = pool;
            run.dollars_per_hour = fleet_dollars_per_hour(priced, options.prices);
          }
          candidates.push_back({pool, run, label});
        }
      }
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const ShapeCandidate& a, const ShapeCandidate& b) {
    const double ka = per_dollar_hour(a.run.bound, a.run.dollars_per_hour), kb = per_dollar_hour(b.run.bound, b.run.dollars_per_hour);
    return ka != kb ? ka > kb : a.label < b.label;
  });
  return candidates;
}

}  // namespace

ShapeSearch search_shapes(const FleetConfig& config, const ShapeSearchOptions& options,
                          const std::function<void(size_t, size_t)>& progress) {
  if (config.pools.size() != 1 || config.pools.front().role != PoolRole::kColocated) {
    throw std::invalid_argument("the shape search re-shapes a fleet of one colocated pool");
  }
  check_searchable(config, "the shape search");
  ShapeSearch out;
  out.attainment = options.attainment;
  out.by_capacity = ranks_by_capacity(config);
  out.node_groups = !config.topology->info().node_groups.empty();
  out.by_cost = !options.prices.empty();
  const std::vector<ShapeCandidate> candidates = shape_candidates(config, options, out);
  const double unit = requests_per_load_unit(config);
  const double mean_output = out.by_cost ? traffic_means(config).decode + 1 : 0.0;
  std::vector<std::optional<ShapeRun>> runs(candidates.size());
  std::vector<std::string> why(candidates.size());
  std::vector<double> bounds;
  for (const ShapeCandidate& c : candidates) bounds.push_back(per_dollar_hour(c.run.bound, c.run.dollars_per_hour));
  const size_t examined = run_best_bound_first(
      bounds, options.prune, options.threads,
      [&](size_t i) -> std::optional<double> {
        FleetConfig c = config;
        c.pools.front() = candidates[i].pool;
        ShapeRun run = candidates[i].run;
        try {
          if (out.by_capacity) {
            std::tie(run.capacity, run.summary) = capacity_at_slo(c, options.attainment);
          } else {
            run.summary = summarize(c, simulate_fleet(c));
          }
        } catch (const std::invalid_argument& e) {
          why[i] = e.what();
          return std::nullopt;
        }
        run.dollars_per_million_output = dollars_per_million_output(run.dollars_per_hour, out.by_capacity, run.capacity,
                                                                    unit, mean_output, run.summary);
        runs[i] = run;
        return per_dollar_hour(bound_figure(out.by_capacity, run.capacity, run.summary, unit), run.dollars_per_hour);
      },
      progress);
  out.pruned_by_bound = candidates.size() - examined;
  if (out.node_groups) {
    for (const SearchRegion& r : search_regions(config)) out.groups.push_back(GroupOutcome{{r.group}});
    for (size_t i = 0; i < candidates.size(); ++i) {
      const ShapeRun& run = candidates[i].run;
      const auto g = std::find_if(out.groups.begin(), out.groups.end(),
                                  [&](const GroupOutcome& o) { return o.groups.front() == run.group; });
      g->add(run.bound,
             runs[i] ? std::optional<double>(bound_figure(out.by_capacity, runs[i]->capacity, runs[i]->summary, unit))
                     : std::nullopt,
             i < examined && !runs[i]);
    }
  }
  for (size_t i = 0; i < examined; ++i) {
    if (runs[i]) {
      out.ranked.push_back(*runs[i]);
      continue;
    }
    const bool memory = refused_for_memory(why[i]);
    size_t& count = memory ? out.rejected_by_memory : out.rejected_by_rule;
    if (count++ == 0) out.rejections.push_back(candidates[i].label + ": " + why[i]);
  }
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [&](const ShapeRun& a, const ShapeRun& b) { return better(a, b, out.by_capacity); });
  return out;
}

std::string shape_table(const ShapeSearch& s, size_t top) {
  std::string t;
  char line[512];
  const int batching_width = s.batching_varied ? 34 : 0;
  const int instance_width = s.node_groups ? 38 : 28;  // bytes: "·" takes two
  std::snprintf(line, sizeof line, "  %4s  %-*s %-*s %9s %10s %9s %10s %13s %10s %10s %8s", "rank", instance_width,
                "instance", batching_width, s.batching_varied ? "batching" : "", "instances", "KV blocks", "bound",
                s.by_capacity ? "capacity" : "requests/s", "out tok/s/GPU", "TTFT p99", "TPOT p99", "SLO met");
  t += line + cost_header(s.by_cost) + "\n";
  for (size_t i = 0; i < s.ranked.size() && i < top; ++i) {
    const ShapeRun& r = s.ranked[i];
    const FleetSummary& f = r.summary;
    const std::string instance = describe_shape(r.shape) + (r.group.empty() ? "" : " on " + r.group);
    std::snprintf(line, sizeof line, "  %4zu  %-*s %-*s %9d %10lld %9.2f %10.2f %13.1f %7.0f ms %7.1f ms %7.1f%%",
                  i + 1, instance_width, instance.c_str(), batching_width,
                  s.batching_varied ? batching_label(r.max_sequences, r.token_budget, r.draft_tokens).c_str() : "",
                  r.instances,
                  static_cast<long long>(r.kv_blocks), r.bound, s.by_capacity ? r.capacity : f.requests_per_s,
                  f.output_tokens_per_s_per_gpu, f.ttft.p99 * 1e3, f.tpot.p99 * 1e3, 100.0 * f.slo_attainment);
    t += line + cost_columns(s.by_cost, r.dollars_per_hour, r.dollars_per_million_output) + "\n";
  }
  t += bound_note("the instances sustain");
  if (s.by_capacity) t += capacity_note(s.attainment);
  if (s.by_cost) t += cost_note(s.by_capacity);
  if (s.node_groups) {
    t += "\nnode groups: the pool is placed on one group at a time, the others idle\n" +
         group_outcome_table(s.groups, {"on"}, s.by_capacity);
  }
  std::snprintf(line, sizeof line,
                "\nshapes: %zu enumerated = %zu rejected by rule + %zu rejected by memory + %zu pruned by bound + %zu "
                "simulated\n",
                s.enumerated, s.rejected_by_rule, s.rejected_by_memory, s.pruned_by_bound, s.ranked.size());
  t += line;
  for (const std::string& r : s.rejections) t += "  rejected, e.g. " + r + "\n";
  return t;
}

std::string shape_data(const ShapeSearch& s) {
  std::string out = "# rate tpot_p99_ms ttft_p99_ms label\n";
  for (const ShapeRun& r : s.ranked) {
    std::string label = shape_label(r.shape) + (r.group.empty() ? "" : "@" + r.group);
    if (s.batching_varied) label += " " + std::to_string(r.max_sequences) + "/" + std::to_string(r.token_budget);
    if (s.batching_varied && r.draft_tokens > 0) label += "/d" + std::to_string(r.draft_tokens);
    out += data_row(s.by_capacity ? r.capacity : r.summary.requests_per_s, r.summary, label);
  }
  return out;
}

std::string shape_gnuplot(const std::string& data_file, const std::string& png, bool by_capacity,
                          const std::string& title) {
  const std::string y = by_capacity ? "capacity at the SLO (requests/s)" : "requests/s at the fleet's rate";
  return "set terminal pngcairo size 1000,650 noenhanced\nset output '" + png + "'\nset title \"" + gnuplot_text(title) +
         "\"\nset xlabel 'TPOT p99 (ms)'\nset ylabel '" + y + "'\nset grid\nset key off\nset offsets 0.05, 0.2, 0.05, 0.05\n" +
         "plot '" + data_file + "' using 2:1 with points pt 7 ps 1.2 lc rgb '#d04020', '' using 2:1:4 with labels offset 0,1 font ',8'\n";
}

nlohmann::ordered_json shape_json(const ShapeSearch& s) {
  nlohmann::ordered_json j;
  j["enumerated"] = s.enumerated;
  j["rejected_by_rule"] = s.rejected_by_rule;
  j["rejected_by_memory"] = s.rejected_by_memory;
  j["pruned_by_bound"] = s.pruned_by_bound;
  j["ranked_by"] = ranked_by(s.by_capacity, s.by_cost);
  j["attainment"] = s.attainment;
  if (s.node_groups) j["groups"] = group_outcome_json(s.groups, {"group"});
  j["rejections"] = s.rejections;
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  for (const ShapeRun& r : s.ranked) {
    nlohmann::ordered_json run = pool_shape_json(r.shape, r.instances, r.kv_blocks);
    if (!r.group.empty()) run["group"] = r.group;
    if (r.first_gpu) run["first_gpu"] = *r.first_gpu;
    run["max_sequences"] = r.max_sequences;
    run["token_budget"] = r.token_budget;
    run["draft_tokens"] = r.draft_tokens;
    run["bound"] = r.bound;
    add_run_figures(run, r.capacity, r.summary);
    if (s.by_cost) add_cost_figures(run, r.dollars_per_hour, r.dollars_per_million_output);
    runs.push_back(std::move(run));
  }
  j["shapes"] = std::move(runs);
  return j;
}

std::string ranked_by(bool by_capacity, bool by_cost) {
  return std::string(by_capacity ? "capacity_at_slo" : "output_throughput") + (by_cost ? "_per_dollar_hour" : "");
}

std::string cost_header(bool by_cost) {
  if (!by_cost) return {};
  char line[64];
  std::snprintf(line, sizeof line, " %9s %9s", "$/hour", "$/M out");
  return line;
}

std::string cost_columns(bool by_cost, double dollars_per_hour, double dollars_per_million_output) {
  if (!by_cost) return {};
  char line[64];
  std::snprintf(line, sizeof line, " %9.2f %9.3f", dollars_per_hour, dollars_per_million_output);
  return line;
}

std::string cost_note(bool by_capacity) {
  return std::string("  priced: ranked by ") + (by_capacity ? "capacity" : "output throughput") +
         " per dollar an hour of the GPUs in use; $/M out: dollars per million output tokens " +
         (by_capacity ? "at the capacity (its requests at the traffic's mean output)\n" : "at that throughput\n");
}

std::string bound_note(const std::string& who_sustains) {
  return "  bound: the load (requests/s; replaying, the trace's speed-up) " + who_sustains +
         " with full batches at the traffic's mean lengths\n";
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

nlohmann::ordered_json pool_shape_json(const InstanceShape& shape, int instances, int64_t kv_blocks) {
  return {{"tp", shape.tp}, {"pp", shape.pp},         {"dp", shape.dp},
          {"ep", shape.ep}, {"instances", instances}, {"kv_blocks", kv_blocks}};
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

void add_cost_figures(nlohmann::ordered_json& j, double dollars_per_hour, double dollars_per_million_output) {
  j["dollars_per_hour"] = dollars_per_hour;
  j["dollars_per_million_output_tokens"] = dollars_per_million_output;
}

void set_pool_shape(nlohmann::json& pool, const InstanceShape& shape, int instances, const Topology& topology,
                    std::optional<int> first_gpu) {
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
  if (first_gpu) pool["placement"] = placement_json(*first_gpu, gpus_per_node(topology));
}

nlohmann::json placement_json(int first_gpu, int gpus_per_node) {
  return {{"node", first_gpu / gpus_per_node}, {"gpu", first_gpu % gpus_per_node}};
}

nlohmann::json fleet_with_shape(const nlohmann::json& original, const FleetConfig& config, const ShapeRun& run) {
  nlohmann::json out = original;
  nlohmann::json& pool = out["pools"][0];
  set_pool_shape(pool, run.shape, run.instances, *config.topology, run.first_gpu);
  pool["batching"]["max_sequences"] = run.max_sequences;
  pool["batching"]["token_budget"] = run.token_budget;
  if (run.draft_tokens > 0) pool["speculative"]["tokens"] = run.draft_tokens;
  return out;
}

}  // namespace parallax
