// What a fleet simulation reports: the summary (throughput, latency percentiles, SLO
// attainment and goodput, pools' utilisation and KV occupancy, preemptions), as text for the
// terminal, as JSON (--json) and one CSV row per request (--per-request).
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "serving/fleet.h"

namespace parallax {

/// Seconds: mean and the nearest-rank 50th, 90th and 99th percentiles.
struct LatencyStats {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};

struct FleetSummary {
  int64_t requests = 0, completed = 0, rejected = 0;
  double duration_s = 0;
  double requests_per_s = 0, input_tokens_per_s = 0, output_tokens_per_s = 0;
  double output_tokens_per_s_per_gpu = 0;
  LatencyStats ttft, tpot, e2e, queueing, itl;
  LatencyStats kv_transfer;     ///< disaggregated fleets: prefill → decode KV transfers
  bool disaggregated = false;
  bool has_slo = false;
  double slo_attainment = 0;     ///< completed requests meeting every given SLO, over all requests
  double goodput_per_s = 0;      ///< those requests per second
  int64_t preemptions = 0;
  /// Prefix caching: leading prompt blocks found cached over the blocks that had hashes, and
  /// prefill tokens saved over all prompt tokens (0 when nothing had hashes).
  double prefix_block_hit_ratio = 0;
  double prefix_token_hit_ratio = 0;
  double prefix_host_hit_ratio = 0;  ///< prompt blocks copied back from the host tier, over those with hashes
  bool has_prefix_blocks = false;
  std::string first_rejection;   ///< the reason of the first rejected request
};

/// What a run's GPUs cost: each pool's GPU-hours (an autoscaled pool's as it scaled, a fixed one's
/// instances throughout the run) at its GPU's price per GPU-hour.
struct FleetCost {
  double gpu_hours = 0;
  double dollars = 0;
  double per_million_output_tokens = 0;  ///< dollars
  double per_million_tokens = 0;         ///< dollars per million prompt and output tokens
};

/// GPU-hour prices by GPU name (GpuSpec::name); "*" prices every GPU not named.
using GpuHourPrices = std::map<std::string, double>;

/// The first GPU of the fleet's pools that `prices` does not price ("pool NAME's GPU"), or empty.
std::string unpriced_gpu(const FleetConfig& config, const GpuHourPrices& prices);
/// Throws std::invalid_argument for a GPU that `prices` does not price (unpriced_gpu).
FleetCost fleet_cost(const FleetConfig& config, const FleetResult& result, const FleetSummary& summary,
                     const GpuHourPrices& prices);
/// The first kind of GPU in `topology` (each node group's, or the cluster's) that `prices` does
/// not price, or empty: what a search that may place pools anywhere checks first.
std::string unpriced_cluster_gpu(const Topology& topology, const GpuHourPrices& prices);
/// What `config`'s pools cost an hour with every instance up, at `prices`. Throws
/// std::invalid_argument for a GPU that `prices` does not price.
double fleet_dollars_per_hour(const FleetConfig& config, const GpuHourPrices& prices);
std::string cost_text(const FleetCost& cost);
nlohmann::ordered_json cost_json(const FleetCost& cost);

/// The nearest-rank q-quantile (0 < q ≤ 1) of `values` (sorted in place); 0 when empty.
double quantile(std::vector<double>& values, double q);

/// Whether a request completed within every objective the fleet gives.
bool meets_slo(const FleetConfig& config, const RequestRecord& record);

FleetSummary summarize(const FleetConfig& config, const FleetResult& result);

nlohmann::ordered_json fleet_json(const FleetConfig& config, const std::string& topology_name,
                                  const FleetResult& result, const FleetSummary& summary);
std::string fleet_text(const FleetConfig& config, const std::string& topology_name, const FleetResult& result,
                       const FleetSummary& summary);
/// Chrome / Perfetto trace-event JSON of the recorded steps: one process per pool, one track
/// per instance, each step a complete event ("X", microseconds) with its composition in args.
std::string chrome_trace(const FleetConfig& config, const FleetResult& result);

/// Header and one row per request, in id order (times in seconds, 9 decimals).
std::string per_request_csv(const FleetResult& result);

}  // namespace parallax
