// Fleet simulation reports (fleet_report.h).
#include "serving/fleet_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "serving/rate_bound.h"

namespace parallax {
namespace {

// The hybrid allocator's rule for a pool of a model with windowed or chunked layers (share 0
// where the pool holds every token); nullopt for a model without such layers.
std::optional<BatchingConfig> hybrid_rule(const FleetConfig& c, const PoolConfig& pc) {
  if (!(c.model.bounded_attention().share > 0)) return std::nullopt;
  BatchingConfig rule = pc.batching;
  apply_hybrid_kv_allocator(c.model, pc, rule);
  return rule;
}

LatencyStats stats_of(std::vector<double> v) {
  LatencyStats s;
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = quantile(v, 0.50);
  s.p90 = quantile(v, 0.90);
  s.p99 = quantile(v, 0.99);
  return s;
}

nlohmann::ordered_json stats_json(const LatencyStats& s) {
  return {{"mean_s", s.mean}, {"p50_s", s.p50}, {"p90_s", s.p90}, {"p99_s", s.p99}};
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", seconds * 1e3);
  return buf;
}

std::string stats_line(const char* name, const LatencyStats& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-10s mean %10s  p50 %10s  p90 %10s  p99 %10s\n", name, ms(s.mean).c_str(),
                ms(s.p50).c_str(), ms(s.p90).c_str(), ms(s.p99).c_str());
  return buf;
}

// The first GPU of each of pool p's instances, by name.
std::vector<std::string> pool_placement(const FleetConfig& c, const FleetResult& r, size_t p) {
  std::vector<std::string> out;
  for (size_t i = 0; i < r.instance_pool.size() && i < r.instance_gpus.size(); ++i) {
    if (r.instance_pool[i] == static_cast<int>(p)) out.push_back(c.topology->device(r.instance_gpus[i].front()).name);
  }
  return out;
}

nlohmann::ordered_json scaling_json(const AutoscaleConfig& a, const PoolStats& ps) {
  const PoolScaling& s = *ps.scaling;
  nlohmann::ordered_json timeline = nlohmann::ordered_json::array();
  for (const InstanceCountPoint& p : s.timeline) {
    timeline.push_back({{"t_s", p.at.seconds()}, {"serving", p.serving}, {"starting", p.starting}, {"draining", p.draining}});
  }
  return {{"metric", to_string(a.metric)},
          {"target", a.target},
          {"min", a.min},
          {"max", a.max},
          {"interval_s", a.interval.seconds()},
          {"scale_down_window_s", a.scale_down_window.seconds()},
          {"startup_s", s.startup.seconds()},
          {"started", s.started},
          {"released", s.drained},
          {"cancelled", s.cancelled},
          {"peak_instances", s.peak},
          {"mean_instances", ps.mean_instances},
          {"gpu_hours", ps.gpu_hours},
          {"timeline", timeline}};
}

std::string scaling_text(const AutoscaleConfig& a, const PoolStats& ps, Time duration) {
  const PoolScaling& s = *ps.scaling;
  char buf[512];
  const char* per = a.metric == AutoscaleMetric::kTtft          ? " s"
                    : a.metric == AutoscaleMetric::kArrivalRate ? " of an instance's rate"
                                                                : " an instance";
  std::snprintf(buf, sizeof buf,
                "    autoscaled on %s (target %g%s, decided every %g s, %d-%d instances, start-up %.1f s): %d started, "
                "%d released, %d called off; %.2f instances on average (peak %d), %.2f GPU-hours (%.2f with %d throughout)\n",
                to_string(a.metric), a.target, per, a.interval.seconds(), a.min, a.max, s.startup.seconds(), s.started,
                s.drained, s.cancelled, ps.mean_instances, s.peak, ps.gpu_hours,
                duration.seconds() * ps.instances * ps.gpus_per_instance / 3600.0, ps.instances);
  return buf;
}

}  // namespace

double quantile(std::vector<double>& values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

bool meets_slo(const FleetConfig& c, const RequestRecord& rec) {
  if (!rec.completed) return false;
  const bool ttft_ok = c.slo_ttft == Time::zero() || rec.ttft() <= c.slo_ttft;
  const bool tpot_ok = c.slo_tpot == Time::zero() || rec.tpot() <= c.slo_tpot;
  return ttft_ok && tpot_ok;
}

FleetSummary summarize(const FleetConfig& c, const FleetResult& r) {
  FleetSummary s;
  s.requests = static_cast<int64_t>(r.requests.size());
  s.duration_s = r.duration.seconds();
  s.preemptions = r.preemptions;
  s.has_slo = c.slo_ttft > Time::zero() || c.slo_tpot > Time::zero();
  std::vector<double> ttft, tpot, e2e, queueing, transfers;
  double input = 0, output = 0;
  int64_t good = 0, matched_blocks = 0, hashed_blocks = 0, hit_tokens = 0, host_blocks = 0;
  for (const RequestRecord& rec : r.requests) {
    if (rec.rejected) {
      if (s.first_rejection.empty()) s.first_rejection = "request " + std::to_string(rec.id) + ": " + rec.rejection;
      ++s.rejected;
      continue;
    }
    if (!rec.completed) continue;
    ++s.completed;
    matched_blocks += rec.prefix_matched_blocks;
    hashed_blocks += rec.prefix_blocks;
    hit_tokens += rec.prefix_hit_tokens;
    host_blocks += rec.prefix_host_blocks;
    input += static_cast<double>(rec.prompt_tokens);
    output += static_cast<double>(rec.output_tokens);
    ttft.push_back(rec.ttft().seconds());
    if (rec.output_tokens > 1) tpot.push_back(rec.tpot().seconds());
    e2e.push_back(rec.e2e().seconds());
    queueing.push_back(rec.queueing().seconds());
    if (rec.decode_instance >= 0) transfers.push_back(rec.kv_transfer.seconds());
    if (meets_slo(c, rec)) ++good;
  }
  s.ttft = stats_of(std::move(ttft));
  s.tpot = stats_of(std::move(tpot));
  s.e2e = stats_of(std::move(e2e));
  s.queueing = stats_of(std::move(queueing));
  s.disaggregated = !transfers.empty();
  s.kv_transfer = stats_of(std::move(transfers));
  s.itl.mean = r.itl_count > 0 ? r.itl_sum_s / static_cast<double>(r.itl_count) : 0;
  s.itl.p50 = itl_quantile(r, 0.50);
  s.itl.p90 = itl_quantile(r, 0.90);
  s.itl.p99 = itl_quantile(r, 0.99);
  if (s.duration_s > 0) {
    s.requests_per_s = static_cast<double>(s.completed) / s.duration_s;
    s.input_tokens_per_s = input / s.duration_s;
    s.output_tokens_per_s = output / s.duration_s;
    s.output_tokens_per_s_per_gpu = r.total_gpus > 0 ? s.output_tokens_per_s / r.total_gpus : 0;
    s.goodput_per_s = static_cast<double>(good) / s.duration_s;
  }
  s.has_prefix_blocks = hashed_blocks > 0;
  if (s.has_prefix_blocks) {
    s.prefix_block_hit_ratio = static_cast<double>(matched_blocks) / static_cast<double>(hashed_blocks);
    s.prefix_token_hit_ratio = input > 0 ? static_cast<double>(hit_tokens) / input : 0;
    s.prefix_host_hit_ratio = static_cast<double>(host_blocks) / static_cast<double>(hashed_blocks);
  }
  s.slo_attainment = s.requests > 0 ? static_cast<double>(good) / static_cast<double>(s.requests) : 0;
  return s;
}

nlohmann::ordered_json fleet_json(const FleetConfig& c, const std::string& topology_name, const FleetResult& r,
                                  const FleetSummary& s) {
  nlohmann::ordered_json j;
  j["model"] = c.model.name;
  j["topology"] = topology_name;
  j["router"] = to_string(c.router);
  if (s.disaggregated) {
    j["decode_router"] = to_string(c.decode_router);
    j["kv_streaming"] = c.kv_streaming;
  }
  j["refresh_interval_s"] = c.refresh_interval.seconds();
  j["traffic"] = c.replay ? "replay of " + c.replay_name : c.traffic.describe();
  j["seed"] = c.seed;
  j["requests"] = s.requests;
  j["completed"] = s.completed;
  j["rejected"] = s.rejected;
  if (!s.first_rejection.empty()) j["first_rejection"] = s.first_rejection;
  j["duration_s"] = s.duration_s;
  j["requests_per_s"] = s.requests_per_s;
  j["input_tokens_per_s"] = s.input_tokens_per_s;
  j["output_tokens_per_s"] = s.output_tokens_per_s;
  j["output_tokens_per_s_per_gpu"] = s.output_tokens_per_s_per_gpu;
  j["gpus"] = r.total_gpus;
  j["ttft"] = stats_json(s.ttft);
  j["tpot"] = stats_json(s.tpot);
  j["itl"] = stats_json(s.itl);
  j["e2e"] = stats_json(s.e2e);
  j["queueing"] = stats_json(s.queueing);
  if (s.disaggregated) j["kv_transfer"] = stats_json(s.kv_transfer);
  if (s.has_slo) {
    j["slo"] = {{"ttft_s", c.slo_ttft.seconds()}, {"tpot_s", c.slo_tpot.seconds()}, {"attainment", s.slo_attainment},
                {"goodput_per_s", s.goodput_per_s}};
  }
  j["preemptions"] = s.preemptions;
  if (r.swaps > 0) {
    j["swap"] = {{"preemptions", r.swaps}, {"bytes", r.swap_bytes.value()}, {"step_time_s", r.swap_time.seconds()}};
  }
  if (s.has_prefix_blocks) {
    j["prefix_cache"] = {{"block_hit_ratio", s.prefix_block_hit_ratio},
                         {"token_hit_ratio", s.prefix_token_hit_ratio},
                         {"host_block_hit_ratio", s.prefix_host_hit_ratio},
                         {"host_bytes", r.host_cache_bytes.value()},
                         {"host_step_time_s", r.host_cache_time.seconds()}};
  }
  j["mean_in_system"] = r.mean_in_system;
  nlohmann::ordered_json pools = nlohmann::ordered_json::array();
  for (size_t p = 0; p < r.pools.size(); ++p) {
    const PoolStats& ps = r.pools[p];
    const PoolConfig& pc = c.pools[p];
    pools.push_back({{"name", ps.name},
                     {"role", to_string(ps.role)},
                     {"instances", ps.instances},
                     {"tp", pc.shape.tp},
                     {"pp", pc.shape.pp},
                     {"ep", pc.shape.ep},
                     {"dp", pc.shape.dp},
                     {"first_gpus", pool_placement(c, r, p)},
                     {"policy", to_string(pc.batching.policy)},
                     {"max_sequences", pc.batching.max_sequences},
                     {"token_budget", pc.batching.token_budget},
                     {"block_size", pc.batching.block_size},
                     {"prefix_caching", pc.batching.prefix_caching},
                     {"host_cache_bytes_per_gpu", pc.host_cache.value()},
                     {"preemption", to_string(pc.batching.preemption)},
                     {"kv_blocks", ps.kv_blocks},
                     {"steps", ps.steps},
                     {"busy_fraction", ps.busy_fraction},
                     {"kv_occupancy", ps.kv_occupancy},
                     {"mean_batch_sequences", ps.mean_batch},
                     {"mean_batch_tokens", ps.mean_tokens}});
    if (const auto rule = hybrid_rule(c, pc)) {
      pools.back()["hybrid_allocator"] = {{"bounded_kv_share", rule->bounded_kv_share},
                                          {"bounded_kv_tokens", rule->bounded_kv_span}};
    }
    if (ps.scaling) pools.back()["autoscale"] = scaling_json(*pc.autoscale, ps);
    if (!c.topology->info().node_groups.empty()) {
      const Topology& gpus = pool_topology(c, pc);
      pools.back()["gpu"] = gpus.gpu_spec_of(gpus.gpus().front()).name;
    }
  }
  j["pools"] = pools;
  return j;
}

std::string fleet_text(const FleetConfig& c, const std::string& topology_name, const FleetResult& r,
                       const FleetSummary& s) {
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "serve: %s on %s (%d GPUs), router %s%s, seed %llu\n", c.model.name.c_str(),
                topology_name.c_str(), r.total_gpus, to_string(c.router),
                c.refresh_interval > Time::zero() ? (", signals every " + ms(c.refresh_interval.seconds())).c_str() : "",
                static_cast<unsigned long long>(c.seed));
  out += buf;
  out += "  traffic: " + (c.replay ? "replay of " + c.replay_name : c.traffic.describe()) + "\n";
  for (size_t p = 0; p < r.pools.size(); ++p) {
    const PoolStats& ps = r.pools[p];
    const PoolConfig& pc = c.pools[p];
    std::string from = pool_placement(c, r, p).front();
    if (!c.topology->info().node_groups.empty()) {
      const Topology& gpus = pool_topology(c, pc);
      from += " (" + gpus.gpu_spec_of(gpus.gpus().front()).name + ")";
    }
    std::snprintf(buf, sizeof buf,
                  "  pool %s (%s): %d x (tp %d, pp %d%s) from %s, %s batching (max %d sequences, %lld tokens per step), %lld "
                  "KV blocks of %lld tokens each\n",
                  ps.name.c_str(), to_string(ps.role), ps.instances, pc.shape.tp, pc.shape.pp,
                  pc.shape.dp > 1 ? (", dp " + std::to_string(pc.shape.dp) + " attention ranks, ep " + std::to_string(pc.shape.ep)).c_str() : "",
                  from.c_str(), to_string(pc.batching.policy),
                  pc.batching.max_sequences, static_cast<long long>(pc.batching.token_budget),
                  static_cast<long long>(ps.kv_blocks), static_cast<long long>(pc.batching.block_size));
    out += buf;
    if (const auto rule = hybrid_rule(c, pc)) {
      if (rule->bounded_kv_share > 0) {
        std::snprintf(buf, sizeof buf,
                      "    hybrid KV allocator: on %.0f%% of the KV bytes (the windowed or chunked layers') a sequence "
                      "keeps the blocks of its last %lld tokens\n",
                      100 * rule->bounded_kv_share, static_cast<long long>(rule->bounded_kv_span));
        out += buf;
      } else {
        out += "    every layer keeps every token's KV (no hybrid allocator, or a prefix cache)\n";
      }
    }
    if (pc.step.speculative != SpeculativeMethod::kNone) {
      const std::string by = pc.step.speculative == SpeculativeMethod::kMtp     ? "its MTP module"
                             : pc.step.speculative == SpeculativeMethod::kEagle ? "an EAGLE head"
                                                                                : "the draft model " + pc.step.draft_model->name;
      std::snprintf(buf, sizeof buf,
                    "    speculative decoding by %s: %d draft token(s) a step, each accepted with probability %.2f (%.2f "
                    "tokens a sequence a step)\n",
                    by.c_str(), pc.batching.speculative_tokens, pc.batching.acceptance,
                    expected_tokens_per_step(pc.batching.speculative_tokens, pc.batching.acceptance));
      out += buf;
    }
    std::snprintf(buf, sizeof buf,
                  "    busy %.1f%%, KV cache %.1f%% full on average, %.1f sequences and %.0f new tokens per step%s\n",
                  100 * ps.busy_fraction, 100 * ps.kv_occupancy, ps.mean_batch, ps.mean_tokens,
                  ps.scaling ? " (while running)" : "");
    out += buf;
    if (ps.scaling) out += scaling_text(*pc.autoscale, ps, r.duration);
  }
  std::snprintf(buf, sizeof buf, "\n  %lld requests: %lld completed, %lld rejected, in %.2f s simulated\n",
                static_cast<long long>(s.requests), static_cast<long long>(s.completed),
                static_cast<long long>(s.rejected), s.duration_s);
  out += buf;
  if (!s.first_rejection.empty()) out += "  first rejected: " + s.first_rejection + "\n";
  std::snprintf(buf, sizeof buf,
                "  throughput: %.2f requests/s, %.0f input and %.0f output tokens/s (%.1f output tokens/s per GPU)\n",
                s.requests_per_s, s.input_tokens_per_s, s.output_tokens_per_s, s.output_tokens_per_s_per_gpu);
  out += buf;
  out += stats_line("TTFT", s.ttft);
  out += stats_line("TPOT", s.tpot);
  out += stats_line("ITL", s.itl);
  out += stats_line("E2E", s.e2e);
  out += stats_line("queueing", s.queueing);
  if (s.disaggregated) out += stats_line(c.kv_streaming ? "KV stream" : "KV move", s.kv_transfer);
  if (s.has_slo) {
    std::snprintf(buf, sizeof buf, "  SLO (TTFT <= %s, TPOT <= %s): %.1f%% of requests met it; goodput %.2f requests/s\n",
                  c.slo_ttft > Time::zero() ? ms(c.slo_ttft.seconds()).c_str() : "-",
                  c.slo_tpot > Time::zero() ? ms(c.slo_tpot.seconds()).c_str() : "-", 100 * s.slo_attainment,
                  s.goodput_per_s);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "  preemptions: %lld", static_cast<long long>(s.preemptions));
  out += buf;
  if (r.swaps > 0) {
    std::snprintf(buf, sizeof buf, " (%lld swapped to host: %.2f GiB over PCIe, %.3f s of step time)",
                  static_cast<long long>(r.swaps), r.swap_bytes.value() / (1024.0 * 1024 * 1024), r.swap_time.seconds());
    out += buf;
  }
  out += "\n";
  if (s.has_prefix_blocks) {
    std::snprintf(buf, sizeof buf, "  prefix cache: %.1f%% of prompt blocks found cached, %.1f%% of prompt tokens not recomputed\n",
                  100 * s.prefix_block_hit_ratio, 100 * s.prefix_token_hit_ratio);
    out += buf;
    if (r.host_cache_bytes.value() > 0) {
      std::snprintf(buf, sizeof buf,
                    "    from host memory: %.1f%% of prompt blocks, %.2f GiB copied back over PCIe, %.3f s of step time\n",
                    100 * s.prefix_host_hit_ratio, r.host_cache_bytes.value() / (1024.0 * 1024 * 1024),
                    r.host_cache_time.seconds());
      out += buf;
    }
  }
  return out;
}

namespace {

std::string pool_gpu(const FleetConfig& c, const PoolConfig& pool) {
  const Topology& gpus = pool_topology(c, pool);
  return gpus.gpu_spec_of(gpus.gpus().front()).name;
}

std::optional<double> price_of(const GpuHourPrices& prices, const std::string& gpu) {
  auto it = prices.find(gpu);
  if (it == prices.end()) it = prices.find("*");
  if (it == prices.end()) return std::nullopt;
  return it->second;
}

}  // namespace

std::string unpriced_gpu(const FleetConfig& c, const GpuHourPrices& prices) {
  for (const PoolConfig& pool : c.pools) {
    const std::string gpu = pool_gpu(c, pool);
    if (!price_of(prices, gpu)) return gpu + " (pool " + pool.name + ")";
  }
  return {};
}

FleetCost fleet_cost(const FleetConfig& c, const FleetResult& r, const FleetSummary& s, const GpuHourPrices& prices) {
  if (const std::string gpu = unpriced_gpu(c, prices); !gpu.empty()) {
    throw std::invalid_argument("no GPU-hour price for " + gpu);
  }
  FleetCost cost;
  for (size_t p = 0; p < r.pools.size(); ++p) {
    const PoolStats& ps = r.pools[p];
    const double price = price_of(prices, pool_gpu(c, c.pools[p])).value_or(0.0);
    cost.gpu_hours += ps.gpu_hours;
    cost.dollars += ps.gpu_hours * price;
  }
  const double seconds = s.duration_s;
  const double output = s.output_tokens_per_s * seconds, all = (s.input_tokens_per_s + s.output_tokens_per_s) * seconds;
  if (output > 0) cost.per_million_output_tokens = cost.dollars / output * 1e6;
  if (all > 0) cost.per_million_tokens = cost.dollars / all * 1e6;
  return cost;
}

std::string unpriced_cluster_gpu(const Topology& topology, const GpuHourPrices& prices) {
  for (const DeviceId gpu : topology.gpus()) {
    const std::string name = topology.gpu_spec_of(gpu).name;
    if (!price_of(prices, name)) return name;
  }
  return {};
}

double fleet_dollars_per_hour(const FleetConfig& c, const GpuHourPrices& prices) {
  if (const std::string gpu = unpriced_gpu(c, prices); !gpu.empty()) {
    throw std::invalid_argument("no GPU-hour price for " + gpu);
  }
  double dollars = 0;
  for (const PoolConfig& pool : c.pools) {
    dollars += pool.count * pool.shape.gpus() * price_of(prices, pool_gpu(c, pool)).value_or(0.0);
  }
  return dollars;
}

std::string cost_text(const FleetCost& cost) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "  cost: %.2f GPU-hours, $%.2f; $%.3f per million output tokens ($%.3f per million prompt and output tokens)\n",
                cost.gpu_hours, cost.dollars, cost.per_million_output_tokens, cost.per_million_tokens);
  return buf;
}

nlohmann::ordered_json cost_json(const FleetCost& cost) {
  return {{"gpu_hours", cost.gpu_hours},
          {"dollars", cost.dollars},
          {"dollars_per_million_output_tokens", cost.per_million_output_tokens},
          {"dollars_per_million_tokens", cost.per_million_tokens}};
}

std::string chrome_trace(const FleetConfig& c, const FleetResult& r) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  char buf[320];
  bool first = true;
  auto emit = [&](const char* text) {
    out += first ? "" : ",\n";
    out += text;
    first = false;
  };
  for (size_t p = 0; p < c.pools.size(); ++p) {
    std::snprintf(buf, sizeof buf, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%zu,\"args\":{\"name\":\"pool %s (%s)\"}}", p,
                  c.pools[p].name.c_str(), to_string(c.pools[p].role));
    emit(buf);
  }
  for (size_t k = 0; k < r.instance_pool.size(); ++k) {
    std::snprintf(buf, sizeof buf, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%zu,\"args\":{\"name\":\"instance %zu\"}}",
                  r.instance_pool[k], k, k);
    emit(buf);
  }
  for (const StepRecord& s : r.steps) {
    const char* name = s.prefill_tokens == 0 ? "decode" : s.decode_tokens == 0 ? "prefill" : "mixed";
    std::snprintf(buf, sizeof buf,
                  "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{"
                  "\"sequences\":%d,\"prefill_tokens\":%lld,\"decode_tokens\":%lld}}",
                  name, r.instance_pool[static_cast<size_t>(s.instance)], s.instance, s.start.microseconds(),
                  s.duration.microseconds(), s.sequences, static_cast<long long>(s.prefill_tokens),
                  static_cast<long long>(s.decode_tokens));
    emit(buf);
  }
  return out + "\n]}\n";
}

std::string per_request_csv(const FleetResult& r) {
  std::string out =
      "id,arrival_s,prompt_tokens,output_tokens,instance,decode_instance,queueing_s,ttft_s,tpot_s,e2e_s,max_gap_s,"
      "kv_transfer_s,preemptions,status\n";
  char buf[512];
  for (const RequestRecord& rec : r.requests) {
    const char* status = rec.rejected ? "rejected" : rec.completed ? "completed" : "unfinished";
    if (!rec.completed) {
      std::snprintf(buf, sizeof buf, "%lld,%.9f,%lld,%lld,%d,%d,,,,,,,%d,%s\n", static_cast<long long>(rec.id),
                    rec.arrival.seconds(), static_cast<long long>(rec.prompt_tokens),
                    static_cast<long long>(rec.output_tokens), rec.instance, rec.decode_instance, rec.preemptions, status);
    } else {
      std::snprintf(buf, sizeof buf, "%lld,%.9f,%lld,%lld,%d,%d,%.9f,%.9f,%.9f,%.9f,%.9f,%.9f,%d,%s\n",
                    static_cast<long long>(rec.id), rec.arrival.seconds(), static_cast<long long>(rec.prompt_tokens),
                    static_cast<long long>(rec.output_tokens), rec.instance, rec.decode_instance, rec.queueing().seconds(),
                    rec.ttft().seconds(), rec.tpot().seconds(), rec.e2e().seconds(), rec.max_gap.seconds(),
                    rec.kv_transfer.seconds(), rec.preemptions, status);
    }
    out += buf;
  }
  return out;
}

}  // namespace parallax
