// A pool's autoscaler (autoscaler.h).
#include "serving/autoscaler.h"

#include <algorithm>
#include <cmath>

namespace parallax {

const char* to_string(AutoscaleMetric m) {
  switch (m) {
    case AutoscaleMetric::kConcurrency: return "concurrency";
    case AutoscaleMetric::kWaiting: return "waiting";
    case AutoscaleMetric::kKvCache: return "kv_cache";
    case AutoscaleMetric::kTtft: return "ttft";
    case AutoscaleMetric::kArrivalRate: return "arrival_rate";
  }
  return "?";
}

std::optional<AutoscaleMetric> autoscale_metric_from(const std::string& name) {
  for (AutoscaleMetric m :
       {AutoscaleMetric::kConcurrency, AutoscaleMetric::kWaiting, AutoscaleMetric::kKvCache, AutoscaleMetric::kTtft,
        AutoscaleMetric::kArrivalRate}) {
    if (name == to_string(m)) return m;
  }
  return std::nullopt;
}

Time startup_time(const AutoscaleConfig& config, Bytes weights_per_gpu) {
  if (config.startup) return *config.startup;
  return config.engine_init + transfer_time(weights_per_gpu, config.load_bandwidth);
}

int Autoscaler::decide(Time now, int current, double load, int at_least) {
  int wanted = current;
  const double ratio = current > 0 ? load / (c_.target * current) : 1.0;
  if (current == 0 || std::abs(ratio - 1.0) > c_.tolerance) {
    wanted = static_cast<int>(std::ceil(load / c_.target - 1e-9));
  }
  wanted = std::clamp(std::max(wanted, at_least), c_.min, c_.max);
  recent_.emplace_back(now, wanted);
  while (!recent_.empty() && recent_.front().first + c_.scale_down_window < now) recent_.pop_front();
  if (wanted >= current) return wanted;
  // Down only as far as the largest recommendation still in the window.
  int floor = wanted;
  for (const auto& [at, n] : recent_) floor = std::max(floor, n);
  return std::min(floor, current);
}

}  // namespace parallax
