// The prefill/decode split search of a disaggregated fleet (fleet_split_search.h).
#include "serving/fleet_split_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "serving/fleet_search.h"
#include "serving/step_model.h"

namespace parallax {
namespace {

// One pool's valid shapes with their KV blocks and the rate bound of one instance.
struct ShapeOption {
  InstanceShape shape;
  int64_t kv_blocks = 0;
  double rate = 0;  ///< requests/s of one instance at full batches
};

struct Candidate {
  PoolShape prefill, decode;
  double bound = 0;
  std::string label;
};

std::string split_description(const PoolShape& prefill, const PoolShape& decode) {
  return std::to_string(prefill.instances) + " × (" + describe_shape(prefill.shape) + ") + " +
         std::to_string(decode.instances) + " × (" + describe_shape(decode.shape) + ")";
}

std::vector<ShapeOption> pool_options(const FleetConfig& config, const PoolConfig& base, const TrafficMeans& means,
                                      SplitSearch& out, size_t& enumerated) {
  const bool decode = base.role == PoolRole::kDecode;
  const std::vector<InstanceShape> shapes = pool_candidate_shapes(config, base);
  enumerated = shapes.size();
  std::vector<ShapeOption> options;
  bool first_rule = true, first_memory = true;
  for (const InstanceShape& shape : shapes) {
    PoolConfig pool = base;
    pool.shape = shape;
    pool.first_gpu.reset();
    const std::string why = shape_refusal(config, pool);
    if (!why.empty()) {
      const bool memory = refused_for_memory(why);
      (memory ? out.rejected_by_memory : out.rejected_by_rule)++;
      bool& first = memory ? first_memory : first_rule;
      if (first) out.rejections.push_back(base.name + " " + describe_shape(shape) + ": " + why);
      first = false;
      continue;
    }
    ShapeOption o{shape, pool.batching.kv_blocks > 0 ? pool.batching.kv_blocks : pool_kv_capacity(config, pool).blocks,
                  0.0};
    const StepModel model(config.model, *config.topology, shape, pool.step, 0);
    const BatchingConfig batching = instance_batching(pool);
    o.rate = decode ? decode_rate_bound(model, batching, o.kv_blocks, means, config.slo_tpot)
                    : prefill_rate_bound(model, batching, means);
    options.push_back(o);
  }
  return options;
}

// Whether the two pools' instances, packed in the fleet's pool order, fit the topology's GPUs.
bool packs(const FleetConfig& config, const std::vector<PoolShape>& in_order) {
  const int per_node = gpus_per_node(*config.topology);
  const int gpus = static_cast<int>(config.topology->gpu_count());
  int cursor = 0;
  for (const PoolShape& p : in_order) {
    for (int k = 0; k < p.instances; ++k) {
      cursor = packed_start(p.shape, per_node, cursor) + p.shape.gpus();
      if (cursor > gpus) return false;
    }
  }
  return true;
}



// Better first: capacity (or output throughput), then output throughput, then the text.
bool better(const SplitRun& a, const SplitRun& b, bool by_capacity) {
  const double ga = by_capacity ? a.capacity : a.summary.output_tokens_per_s;
  const double gb = by_capacity ? b.capacity : b.summary.output_tokens_per_s;
  if (ga != gb) return ga > gb;
  if (a.summary.output_tokens_per_s != b.summary.output_tokens_per_s) {
    return a.summary.output_tokens_per_s > b.summary.output_tokens_per_s;
  }
  return split_description(a.prefill, a.decode) < split_description(b.prefill, b.decode);
}

}  // namespace

SplitSearch search_splits(const FleetConfig& config, int threads, double attainment, bool prune,
                          const std::function<void(size_t, size_t)>& progress) {
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
  const TrafficMeans means = traffic_means(config);
  const std::vector<ShapeOption> prefill = pool_options(config, config.pools[ip], means, out, out.prefill_shapes);
  const std::vector<ShapeOption> decode = pool_options(config, config.pools[id], means, out, out.decode_shapes);

  const int gpus = static_cast<int>(config.topology->gpu_count());
  const double unit = requests_per_load_unit(config);
  std::vector<Candidate> candidates;
  for (const ShapeOption& p : prefill) {
    for (const ShapeOption& d : decode) {
      for (int np = 1; gpus - np * p.shape.gpus() >= d.shape.gpus(); ++np) {
        const int rest = gpus - np * p.shape.gpus();
        if (rest % d.shape.gpus() != 0) continue;
        Candidate c{{p.shape, np, p.kv_blocks}, {d.shape, rest / d.shape.gpus(), d.kv_blocks}, 0.0, {}};
        ++out.splits;
        if (!packs(config, ip < id ? std::vector{c.prefill, c.decode} : std::vector{c.decode, c.prefill})) {
          ++out.unplaceable;
          continue;
        }
        c.bound = std::min(np * p.rate, c.decode.instances * d.rate) / unit;
        c.label = split_description(c.prefill, c.decode);
        candidates.push_back(std::move(c));
      }
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.bound != b.bound ? a.bound > b.bound : a.label < b.label;
  });

  std::vector<std::optional<SplitRun>> runs(candidates.size());
  std::vector<std::string> why(candidates.size());
  std::vector<double> bounds;
  for (const Candidate& c : candidates) bounds.push_back(c.bound);
  const size_t examined = run_best_bound_first(
      bounds, prune, threads,
      [&](size_t i) -> std::optional<double> {
        const Candidate& cand = candidates[i];
        FleetConfig c = config;
        c.pools[ip].shape = cand.prefill.shape;
        c.pools[ip].count = cand.prefill.instances;
        c.pools[id].shape = cand.decode.shape;
        c.pools[id].count = cand.decode.instances;
        c.pools[ip].first_gpu.reset();
        c.pools[id].first_gpu.reset();
        SplitRun run{cand.prefill, cand.decode, cand.bound, 0.0, {}};
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
        runs[i] = run;
        return out.by_capacity ? run.capacity : run.summary.requests_per_s / unit;
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
  return out;
}

std::string split_table(const SplitSearch& s, size_t top) {
  std::string t;
  char line[640];
  std::snprintf(line, sizeof line, "  %4s  %-30s %-30s %9s %10s %13s %10s %10s %8s\n", "rank", "prefill", "decode", "bound",
                s.by_capacity ? "capacity" : "requests/s", "out tok/s/GPU", "TTFT p99", "TPOT p99", "SLO met");
  t += line;
  for (size_t i = 0; i < s.ranked.size() && i < top; ++i) {
    const SplitRun& r = s.ranked[i];
    const FleetSummary& f = r.summary;
    const auto side = [](const PoolShape& p) { return std::to_string(p.instances) + " × " + describe_shape(p.shape); };
    std::snprintf(line, sizeof line, "  %4zu  %-30s %-30s %9.2f %10.2f %13.1f %7.0f ms %7.1f ms %7.1f%%\n", i + 1,
                  side(r.prefill).c_str(), side(r.decode).c_str(), r.bound,
                  s.by_capacity ? r.capacity : f.requests_per_s, f.output_tokens_per_s_per_gpu, f.ttft.p99 * 1e3,
                  f.tpot.p99 * 1e3, 100.0 * f.slo_attainment);
    t += line;
  }
  t += bound_note("the smaller side sustains");
  if (s.by_capacity) t += capacity_note(s.attainment);
  std::snprintf(line, sizeof line,
                "\nshapes: %zu prefill, %zu decode enumerated; %zu rejected by rule, %zu rejected by memory\n"
                "splits: %zu fill the GPUs = %zu unplaceable + %zu pruned by bound + %zu refused + %zu simulated\n",
                s.prefill_shapes, s.decode_shapes, s.rejected_by_rule, s.rejected_by_memory, s.splits, s.unplaceable,
                s.pruned_by_bound, s.refused, s.ranked.size());
  t += line;
  for (const std::string& r : s.rejections) t += "  rejected, e.g. " + r + "\n";
  return t;
}

std::string split_data(const SplitSearch& s) {
  std::string out = "# rate tpot_p99_ms ttft_p99_ms label\n";
  for (const SplitRun& r : s.ranked) {
    const std::string label = std::to_string(r.prefill.instances) + "x" + shape_label(r.prefill.shape) + " / " +
                              std::to_string(r.decode.instances) + "x" + shape_label(r.decode.shape);
    out += data_row(s.by_capacity ? r.capacity : r.summary.requests_per_s, r.summary, label);
  }
  return out;
}

nlohmann::ordered_json split_json(const SplitSearch& s) {
  const auto side = [](const PoolShape& p) { return pool_shape_json(p.shape, p.instances, p.kv_blocks); };
  nlohmann::ordered_json j;
  j["prefill_shapes"] = s.prefill_shapes;
  j["decode_shapes"] = s.decode_shapes;
  j["rejected_by_rule"] = s.rejected_by_rule;
  j["rejected_by_memory"] = s.rejected_by_memory;
  j["splits"] = s.splits;
  j["unplaceable"] = s.unplaceable;
  j["pruned_by_bound"] = s.pruned_by_bound;
  j["refused"] = s.refused;
  j["ranked_by"] = s.by_capacity ? "capacity_at_slo" : "output_throughput";
  j["attainment"] = s.attainment;
  j["rejections"] = s.rejections;
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  for (const SplitRun& r : s.ranked) {
    nlohmann::ordered_json run{{"prefill", side(r.prefill)}, {"decode", side(r.decode)}, {"bound", r.bound}};
    add_run_figures(run, r.capacity, r.summary);
    runs.push_back(std::move(run));
  }
  j["splits_simulated"] = std::move(runs);
  return j;
}

nlohmann::json fleet_with_split(const nlohmann::json& original, const FleetConfig& config, const SplitRun& run) {
  nlohmann::json out = original;
  for (size_t i = 0; i < config.pools.size(); ++i) {
    const PoolShape& p = config.pools[i].role == PoolRole::kPrefill ? run.prefill : run.decode;
    set_pool_shape(out["pools"][i], p.shape, p.instances);
  }
  return out;
}

}  // namespace parallax
