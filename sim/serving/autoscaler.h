// A pool's autoscaler: how many instances it wants, decided every `interval` from a load metric
// averaged over that interval, as Kubernetes' Horizontal Pod Autoscaler decides (and Knative's,
// KServe's and AIBrix's on the metrics vLLM exports):
//
//   desired = ⌈Σ metric over the serving instances / target⌉, clamped to [min, max];
//   unchanged while Σ metric / (target · current) is within `tolerance` of 1 (HPA's 10%);
//   scale up at once, scale down only to the largest recommendation of the last
//   `scale_down_window` (HPA's stabilization window, 300 s by default), so a dip does not
//   release instances that the next burst needs.
//
// `current` counts the instances serving and those starting: starts already asked for are not
// asked for again. Metrics, per instance (what vLLM's /metrics exports):
//   concurrency  requests sent to it and not finished (Knative's and KServe's default)
//   waiting      requests queued, not yet scheduled (vllm:num_requests_waiting)
//   kv_cache     the share of its KV blocks in use (vllm:gpu_cache_usage_perc)
// and, per pool, a latency (as KEDA scales on a Prometheus query of vllm:time_to_first_token):
//   ttft         the mean time to first token, in seconds, of the requests that got theirs in
//                the interval (from the pool they entered); desired = ⌈current × ttft / target⌉,
//                HPA's rule for a value that does not add up over instances; no change when no
//                request got its first token
//   arrival_rate the requests the pool's instances were sent over the interval, per second,
//                over what one instance sustains at full batches at the traffic's mean lengths
//                (rate_bound.h): the load in instances' worth, and `target` the share of an
//                instance's rate to run at (0.7: 70%); desired = ⌈load / target⌉. NVIDIA
//                Dynamo's planner scales so, from the observed request rate over a replica's
//                profiled throughput, ahead of the queues that the metrics above wait for
//
// min 0 scales a pool to zero in a lull: requests then wait at the fleet's gateway (Knative's
// activator), count as in flight for the concurrency and waiting metrics, and start an instance
// at once (fleet.cpp); a scaler keeps one while any waits.
//
// An instance asked for serves after `startup`: by default the engine's initialisation plus
// its GPUs loading their weights (startup_time). Both are assumptions, not measurements; set
// them from your engine's start-up logs.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "units/units.h"

namespace parallax {

enum class AutoscaleMetric : uint8_t { kConcurrency, kWaiting, kKvCache, kTtft, kArrivalRate };
const char* to_string(AutoscaleMetric m);
std::optional<AutoscaleMetric> autoscale_metric_from(const std::string& name);

struct AutoscaleConfig {
  int min = 1;
  int max = 1;
  int initial = 0;  ///< instances serving at time 0; 0: min (with min 0, none until a request)
  AutoscaleMetric metric = AutoscaleMetric::kConcurrency;
  double target = 1;  ///< the metric's value per instance that the scaler aims at
  Time interval = Time::from_seconds(15);             ///< HPA's sync period
  Time scale_down_window = Time::from_seconds(300);   ///< HPA's scale-down stabilization
  double tolerance = 0.1;
  std::optional<Time> startup;                        ///< nullopt: startup_time()
  Time engine_init = Time::from_seconds(30);          ///< CUDA graphs, compilation, KV allocation
  Bandwidth load_bandwidth = gigabytes_per_second(2);  ///< weights read per GPU

  int initial_instances() const { return initial > 0 ? initial : min; }
};

/// Engine initialisation plus one GPU's weights at the load bandwidth (the GPUs of an
/// instance load their shards at once).
Time startup_time(const AutoscaleConfig& config, Bytes weights_per_gpu);

class Autoscaler {
 public:
  explicit Autoscaler(const AutoscaleConfig& config) : c_(config) {}

  /// The instances wanted at `now` by a pool with `current` serving or starting, whose serving
  /// instances' metric sums to `load` (averaged over the last interval); never fewer than
  /// `at_least` (a pool scaled to zero while requests wait for it), which the scale-down window
  /// then remembers like any recommendation.
  int decide(Time now, int current, double load, int at_least = 0);

 private:
  AutoscaleConfig c_;
  std::deque<std::pair<Time, int>> recent_;  ///< recommendations within the scale-down window
};

}  // namespace parallax
