// The prefill/decode split search of a disaggregated fleet (fleet_split_search.h).
#include "serving/fleet_split_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "serving/fleet_search.h"
#include "serving/step_model.h"

namespace parallax {
namespace {

// One pool's valid shapes in one region with their KV blocks and the rate bound of one instance.
struct ShapeOption {
  InstanceShape shape;
  int64_t kv_blocks = 0;
  double rate = 0;  ///< requests/s of one instance at full batches
};

struct Candidate {
  PoolShape prefill, decode;
  double bound = 0;
  std::string label;
  double dollars_per_hour = 0;  ///< priced: both pools' GPUs an hour
};

std::string side_description(const PoolShape& p) {
  return std::to_string(p.instances) + " × (" + describe_shape(p.shape) + ")" + (p.group.empty() ? "" : " on " + p.group);
}

std::string split_description(const PoolShape& prefill, const PoolShape& decode) {
  return side_description(prefill) + " + " + side_description(decode);
}

// Whether a pool's first refusal of each kind is still to be shown.
struct FirstRefusals {
  bool rule = true, memory = true;
};

std::vector<ShapeOption> pool_options(const FleetConfig& config, const PoolConfig& base, const SearchRegion& region,
                                      const TrafficMeans& means, SplitSearch& out, size_t& enumerated,
                                      FirstRefusals& first) {
  const bool decode = base.role == PoolRole::kDecode;
  const std::vector<InstanceShape> shapes = pool_candidate_shapes(config, base, region.gpus);
  enumerated += shapes.size();
  std::vector<ShapeOption> options;
  for (const InstanceShape& shape : shapes) {
    PoolConfig pool = base;
    pool.shape = shape;
    pool.first_gpu = region.start();
    const std::string why = shape_refusal(config, pool);
    if (!why.empty()) {
      const bool memory = refused_for_memory(why);
      (memory ? out.rejected_by_memory : out.rejected_by_rule)++;
      if (std::exchange(memory ? first.memory : first.rule, false)) {
        out.rejections.push_back(base.name + " " + describe_shape(shape) +
                                 (region.group.empty() ? "" : " on " + region.group) + ": " + why);
      }
      continue;
    }
    ShapeOption o{shape, pool.batching.kv_blocks > 0 ? pool.batching.kv_blocks : pool_kv_capacity(config, pool).blocks,
                  0.0};
    const StepModel model(config.model, pool_topology(config, pool), shape, pool.step, 0);
    BatchingConfig batching = instance_batching(pool);
    apply_hybrid_kv_allocator(config.model, pool, batching);
    o.rate = decode ? decode_rate_bound(model, batching, o.kv_blocks, means, config.slo_tpot)
                    : prefill_rate_bound(model, batching, means);
    options.push_back(o);
  }
  return options;
}

// Packs `p`'s instances from GPU `cursor` with their TP groups inside nodes: the GPU after the
// last, or nullopt when they pass `end`.
std::optional<int> pack(const PoolShape& p, int per_node, int cursor, int end) {
  const int after = packed_end(p.shape, p.instances, per_node, cursor);
  return after <= end ? std::optional<int>(after) : std::nullopt;
}

// Places `first` then `second` (the fleet's pool order) in `region`, setting their first GPUs on
// node groups; false when they cannot all be packed there.
bool place_in(const SearchRegion& region, int per_node, PoolShape& first, PoolShape& second) {
  const int end = region.first_gpu + region.gpus;
  const std::optional<int> after = pack(first, per_node, region.first_gpu, end);
  if (!after) return false;
  const int start = packed_start(second.shape, per_node, *after);
  if (!pack(second, per_node, start, end)) return false;
  first.first_gpu = region.start();
  if (first.first_gpu) second.first_gpu = start;
  return true;
}

// Each pool alone in its own region, filling it; false when its instances cannot be packed.
bool place_alone(const SearchRegion& region, int per_node, PoolShape& p) {
  if (!pack(p, per_node, region.first_gpu, region.first_gpu + region.gpus)) return false;
  p.first_gpu = region.start();
  return true;
}

// The splits of the prefill side `rp`'s and the decode side `rd`'s options: both sharing one
// region's GPUs, or each filling its own.
void add_splits(const FleetConfig& config, const SearchRegion& rp, const std::vector<ShapeOption>& prefill, const SearchRegion& rd,
                const std::vector<ShapeOption>& decode, bool prefill_first, SplitSearch& out,
                std::vector<Candidate>& candidates) {
  const int per_node = gpus_per_node(*config.topology);
  const double unit = requests_per_load_unit(config);
  const bool shared = &rp == &rd;
  for (const ShapeOption& p : prefill) {
    for (const ShapeOption& d : decode) {
      for (int np = 1; np * p.shape.gpus() <= rp.gpus; ++np) {
        const int rest = shared ? rp.gpus - np * p.shape.gpus() : rd.gpus;
        if (shared && rest < d.shape.gpus()) break;
        if (!shared && np * p.shape.gpus() != rp.gpus) continue;
        if (rest % d.shape.gpus() != 0) continue;
        Candidate c{{p.shape, np, p.kv_blocks, rp.group, {}}, {d.shape, rest / d.shape.gpus(), d.kv_blocks, rd.group, {}},
                    0.0, {}};
        ++out.splits;
        const bool placed = shared ? (prefill_first ? place_in(rp, per_node, c.prefill, c.decode)
                                                    : place_in(rp, per_node, c.decode, c.prefill))
                                   : place_alone(rp, per_node, c.prefill) && place_alone(rd, per_node, c.decode);
        if (!placed) {
          ++out.unplaceable;
          continue;
        }
        c.bound = std::min(np * p.rate, c.decode.instances * d.rate) / unit;
        c.label = split_description(c.prefill, c.decode);
        candidates.push_back(std::move(c));
      }
    }
  }
}

// Per pair of groups (prefill's, decode's): its splits, their best bound and best figure.
std::vector<GroupOutcome> group_pairs(const std::vector<SearchRegion>& where, const std::vector<Candidate>& candidates,
                                      const std::vector<std::optional<SplitRun>>& runs, size_t examined, bool by_capacity,
                                      double unit) {
  std::vector<GroupOutcome> pairs;
  for (const SearchRegion& p : where) {
    for (const SearchRegion& d : where) pairs.push_back(GroupOutcome{{p.group, d.group}});
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    const auto g = std::find_if(pairs.begin(), pairs.end(), [&](const GroupOutcome& x) {
      return x.groups[0] == c.prefill.group && x.groups[1] == c.decode.group;
    });
    g->add(c.bound,
           runs[i] ? std::optional<double>(bound_figure(by_capacity, runs[i]->capacity, runs[i]->summary, unit)) : std::nullopt,
           i < examined && !runs[i]);
  }
  return pairs;
}

// The fleet with its prefill pool (index ip) and decode pool (id) re-shaped and placed as `c`.
FleetConfig split_fleet_config(const FleetConfig& config, size_t ip, size_t id, const Candidate& c) {
  FleetConfig out = config;
  out.pools[ip].shape = c.prefill.shape;
  out.pools[ip].count = c.prefill.instances;
  out.pools[ip].first_gpu = c.prefill.first_gpu;
  out.pools[id].shape = c.decode.shape;
  out.pools[id].count = c.decode.instances;
  out.pools[id].first_gpu = c.decode.first_gpu;
  return out;
}

// Better first: capacity (or output throughput; priced, per dollar an hour), then output
// throughput, then the text.
bool better(const SplitRun& a, const SplitRun& b, bool by_capacity) {
  const double ga = ranking_figure(by_capacity, a.capacity, a.summary, a.dollars_per_hour);
  const double gb = ranking_figure(by_capacity, b.capacity, b.summary, b.dollars_per_hour);
  if (ga != gb) return ga > gb;
  if (a.summary.output_tokens_per_s != b.summary.output_tokens_per_s) {
    return a.summary.output_tokens_per_s > b.summary.output_tokens_per_s;
  }
  return split_description(a.prefill, a.decode) < split_description(b.prefill, b.decode);
}

}  // namespace

SplitSearch search_splits(const FleetConfig& config, int threads, double attainment, bool prune,
                          const std::function<void(size_t, size_t)>& progress, const GpuHourPrices& prices) {
  check_searchable(config, "the split search");
  const auto role_index = [&](PoolRole role) {
    const auto it = std::find_if(config.pools.begin(), config.pools.end(), [&](const PoolConfig& p) { return p.role == role; });
    return static_cast<size_t>(it - config.pools.begin());
  };
  const size_t ip = role_index(PoolRole::kPrefill), id = role_index(PoolRole::kDecode);
  if (config.pools.size() != 2 || ip == config.pools.size() || id == config.pools.size()) {
    throw std::invalid_argument("the split search re-shapes a fleet of one prefill and one decode pool");
  }
  SplitSearch out;
  out.attainment = attainment;
  out.by_capacity = ranks_by_capacity(config);
  out.node_groups = !config.topology->info().node_groups.empty();
  out.by_cost = !prices.empty();
  const TrafficMeans means = traffic_means(config);
  const std::vector<SearchRegion> where = search_regions(config);
  std::vector<std::vector<ShapeOption>> prefill, decode;  // by region
  FirstRefusals prefill_first, decode_first;
  for (const SearchRegion& r : where) {
    prefill.push_back(pool_options(config, config.pools[ip], r, means, out, out.prefill_shapes, prefill_first));
  }
  for (const SearchRegion& r : where) {
    decode.push_back(pool_options(config, config.pools[id], r, means, out, out.decode_shapes, decode_first));
  }
  const double unit = requests_per_load_unit(config);
  std::vector<Candidate> candidates;
  for (size_t a = 0; a < where.size(); ++a) {
    for (size_t b = 0; b < where.size(); ++b) {
      add_splits(config, where[a], prefill[a], where[b], decode[b], ip < id, out, candidates);
    }
  }
  if (out.by_cost) {
    for (Candidate& c : candidates) c.dollars_per_hour = fleet_dollars_per_hour(split_fleet_config(config, ip, id, c), prices);
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    const double ka = per_dollar_hour(a.bound, a.dollars_per_hour), kb = per_dollar_hour(b.bound, b.dollars_per_hour);
    return ka != kb ? ka > kb : a.label < b.label;
  });

  std::vector<std::optional<SplitRun>> runs(candidates.size());
  std::vector<std::string> why(candidates.size());
  std::vector<double> bounds;
  for (const Candidate& c : candidates) bounds.push_back(per_dollar_hour(c.bound, c.dollars_per_hour));
  const size_t examined = run_best_bound_first(
      bounds, prune, threads,
      [&](size_t i) -> std::optional<double> {
        const Candidate& cand = candidates[i];
        const FleetConfig c = split_fleet_config(config, ip, id, cand);
        SplitRun run{cand.prefill, cand.decode, cand.bound, 0.0, {}, cand.dollars_per_hour, 0.0};
        try {
          if (out.by_capacity) {
            std::tie(run.capacity, run.summary) = capacity_at_slo(c, attainment);
          } else {
            run.summary = summarize(c, simulate_fleet(c));
          }
        } catch (const std::invalid_argument& e) {
          why[i] = cand.label + ": " + e.what();
          return std::nullopt;
        }
        run.dollars_per_million_output = dollars_per_million_output(run.dollars_per_hour, out.by_capacity, run.capacity,
                                                                    unit, means.decode + 1, run.summary);
        runs[i] = run;
        return per_dollar_hour(bound_figure(out.by_capacity, run.capacity, run.summary, unit), run.dollars_per_hour);
      },
      progress);
  for (size_t i = 0; i < examined; ++i) {
    if (runs[i]) {
      out.ranked.push_back(*runs[i]);
    } else if (out.refused++ == 0) {
      out.rejections.push_back(why[i]);
    }
  }
  out.pruned_by_bound = candidates.size() - examined;
  std::stable_sort(out.ranked.begin(), out.ranked.end(),
                   [&](const SplitRun& a, const SplitRun& b) { return better(a, b, out.by_capacity); });
  if (out.node_groups) out.group_pairs = group_pairs(where, candidates, runs, examined, out.by_capacity, unit);
  return out;
}

std::string split_table(const SplitSearch& s, size_t top) {
  std::string t;
  char line[640];
  const int width = s.node_groups ? 40 : 30;  // bytes: "×" and "·" take two each
  std::snprintf(line, sizeof line, "  %4s  %-*s %-*s %9s %10s %13s %10s %10s %8s", "rank", width, "prefill", width,
                "decode", "bound", s.by_capacity ? "capacity" : "requests/s", "out tok/s/GPU", "TTFT p99", "TPOT p99",
                "SLO met");
  t += line + cost_header(s.by_cost) + "\n";
  for (size_t i = 0; i < s.ranked.size() && i < top; ++i) {
    const SplitRun& r = s.ranked[i];
    const FleetSummary& f = r.summary;
    const auto side = [](const PoolShape& p) {
      return std::to_string(p.instances) + " × " + describe_shape(p.shape) + (p.group.empty() ? "" : " on " + p.group);
    };
    std::snprintf(line, sizeof line, "  %4zu  %-*s %-*s %9.2f %10.2f %13.1f %7.0f ms %7.1f ms %7.1f%%", i + 1, width,
                  side(r.prefill).c_str(), width, side(r.decode).c_str(), r.bound,
                  s.by_capacity ? r.capacity : f.requests_per_s, f.output_tokens_per_s_per_gpu, f.ttft.p99 * 1e3,
                  f.tpot.p99 * 1e3, 100.0 * f.slo_attainment);
    t += line + cost_columns(s.by_cost, r.dollars_per_hour, r.dollars_per_million_output) + "\n";
  }
  t += bound_note("the smaller side sustains");
  if (s.by_capacity) t += capacity_note(s.attainment);
  if (s.by_cost) t += cost_note(s.by_capacity);
  if (s.node_groups) {
    t += "\nnode groups: each pool runs on one group's GPUs; both on one group leave the others idle (out "
         "tok/s/GPU counts the GPUs used)\n" +
         group_outcome_table(s.group_pairs, {"prefill on", "decode on"}, s.by_capacity);
  }
  std::snprintf(line, sizeof line,
                "\nshapes: %zu prefill, %zu decode enumerated%s; %zu rejected by rule, %zu rejected by memory\n"
                "splits: %zu fill the GPUs%s = %zu unplaceable + %zu pruned by bound + %zu refused + %zu simulated\n",
                s.prefill_shapes, s.decode_shapes, s.node_groups ? " (over the groups)" : "", s.rejected_by_rule,
                s.rejected_by_memory, s.splits, s.node_groups ? " (of their groups)" : "", s.unplaceable,
                s.pruned_by_bound, s.refused, s.ranked.size());
  t += line;
  for (const std::string& r : s.rejections) t += "  rejected, e.g. " + r + "\n";
  return t;
}

std::string split_data(const SplitSearch& s) {
  std::string out = "# rate tpot_p99_ms ttft_p99_ms label\n";
  for (const SplitRun& r : s.ranked) {
    const auto side = [](const PoolShape& p) {
      return std::to_string(p.instances) + "x" + shape_label(p.shape) + (p.group.empty() ? "" : "@" + p.group);
    };
    const std::string label = side(r.prefill) + " / " + side(r.decode);
    out += data_row(s.by_capacity ? r.capacity : r.summary.requests_per_s, r.summary, label);
  }
  return out;
}

nlohmann::ordered_json split_json(const SplitSearch& s) {
  const auto side = [](const PoolShape& p) {
    nlohmann::ordered_json j = pool_shape_json(p.shape, p.instances, p.kv_blocks);
    if (!p.group.empty()) j["group"] = p.group;
    if (p.first_gpu) j["first_gpu"] = *p.first_gpu;
    return j;
  };
  nlohmann::ordered_json j;
  j["prefill_shapes"] = s.prefill_shapes;
  j["decode_shapes"] = s.decode_shapes;
  j["rejected_by_rule"] = s.rejected_by_rule;
  j["rejected_by_memory"] = s.rejected_by_memory;
  j["splits"] = s.splits;
  j["unplaceable"] = s.unplaceable;
  j["pruned_by_bound"] = s.pruned_by_bound;
  j["refused"] = s.refused;
  j["ranked_by"] = ranked_by(s.by_capacity, s.by_cost);
  j["attainment"] = s.attainment;
  if (s.node_groups) j["group_pairs"] = group_outcome_json(s.group_pairs, {"prefill_group", "decode_group"});
  j["rejections"] = s.rejections;
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  for (const SplitRun& r : s.ranked) {
    nlohmann::ordered_json run{{"prefill", side(r.prefill)}, {"decode", side(r.decode)}, {"bound", r.bound}};
    add_run_figures(run, r.capacity, r.summary);
    if (s.by_cost) add_cost_figures(run, r.dollars_per_hour, r.dollars_per_million_output);
    runs.push_back(std::move(run));
  }
  j["splits_simulated"] = std::move(runs);
  return j;
}

nlohmann::json fleet_with_split(const nlohmann::json& original, const FleetConfig& config, const SplitRun& run) {
  nlohmann::json out = original;
  for (size_t i = 0; i < config.pools.size(); ++i) {
    const PoolShape& p = config.pools[i].role == PoolRole::kPrefill ? run.prefill : run.decode;
    set_pool_shape(out["pools"][i], p.shape, p.instances, *config.topology, p.first_gpu);
  }
  return out;
}

}  // namespace parallax
