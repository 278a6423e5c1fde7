// Studies over whole fleet simulations: the capacity curve (the same fleet and seed at a series
// of offered rates: SLO attainment, latency percentiles, throughput, and the highest rate that
// still meets the SLOs) and a comparison of routers on the same traffic (side by side, with the
// latency distributions for a CDF plot). Data files and gnuplot scripts for the plots.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "serving/fleet.h"
#include "serving/fleet_report.h"

namespace parallax {

/// "A:B:xF" (A, A·F, … ≤ B), "A:B:+S" (A, A + S, … ≤ B) or "r1,r2,…"; rates > 0. Throws
/// std::invalid_argument naming what is wrong.
std::vector<double> parse_rates(const std::string& text);

struct RatePoint {
  double rate = 0;
  FleetSummary summary;
  /// With an autoscaled pool: the instances that held GPUs on average, over every pool (a fixed
  /// pool's count, an autoscaled one's mean), and the run's GPU-hours. Empty otherwise.
  std::optional<double> mean_instances;
  double gpu_hours = 0;
  /// Priced: what the run's GPUs cost (fleet_cost), per million output tokens among the rest.
  std::optional<FleetCost> cost;
};

/// Runs `config` at each rate: requests per second of its open-loop traffic or, when it
/// replays a trace, factors by which the trace is sped up (2 = twice its own rate).
/// `progress(i, n)` is called after each run. With `prices`, each point's cost too. Throws
/// std::invalid_argument for closed-loop traffic (its load follows from its users) or a GPU
/// that `prices` does not price.
std::vector<RatePoint> sweep_rates(const FleetConfig& config, const std::vector<double>& rates,
                                   const std::function<void(size_t, size_t)>& progress = nullptr,
                                   const GpuHourPrices& prices = {});

/// The highest rate whose SLO attainment is at least `attainment`, or 0 when none is.
double highest_rate_meeting(const std::vector<RatePoint>& points, double attainment);

std::string sweep_table(const std::vector<RatePoint>& points, double attainment);
/// The curve as JSON: the target, the highest rate meeting it, and per rate its attainment,
/// p99 latencies and output throughput.
nlohmann::ordered_json sweep_json(const std::vector<RatePoint>& points, double attainment);
/// Columns: rate, attainment, ttft p50/p99, tpot p50/p99, e2e p99, output tokens/s.
std::string sweep_data(const std::vector<RatePoint>& points);
/// A gnuplot script drawing `data_file` into `png` (attainment and p99 latencies vs rate).
std::string sweep_gnuplot(const std::string& data_file, const std::string& png, const std::string& title);

struct RouterRun {
  RoutingPolicy router;
  FleetResult result;
  FleetSummary summary;
};

/// The same fleet and traffic through each router.
std::vector<RouterRun> compare_routers(const FleetConfig& config, const std::vector<RoutingPolicy>& routers);
std::string router_table(const std::vector<RouterRun>& runs);
/// Per router, its completed requests' TTFT and E2E, sorted, with their cumulative fraction.
std::string router_cdf_data(const RouterRun& run);
std::string router_cdf_gnuplot(const std::vector<std::string>& data_files, const std::vector<RouterRun>& runs,
                               const std::string& png);

}  // namespace parallax
