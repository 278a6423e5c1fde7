// The serving fleet simulation: requests arrive (traffic.h), a router picks an instance
// (request_router.h), each instance batches its requests step by step (batch_scheduler.h), and each
// engine step takes the time its StepTimer gives (step_model.h on the instance's GPUs). One
// event per request arrival and one per engine step, not per token.
//
// An instance of PP stages keeps up to pp steps in flight, disjoint sets of sequences (vLLM's
// virtual engines): a step may start when fewer than pp are in flight and the interval of the
// one before it (StepTiming) has passed; steps complete in the order they started.
//
// On a cluster of node groups (several kinds of GPU) every pool is placed, its instances stay in
// its group and their steps are timed on the group's own topology; KV transfers between pools
// cross the whole cluster's network.
//
// Every instance of a pool is the same TP × PP shape on tp·pp consecutive GPUs; instances take
// the topology's GPUs in order, pool after pool, or from where a pool is placed
// (PoolConfig::first_gpu), each moved to the next node when its TP groups would straddle one;
// its step time is that of an instance at the same place in a node (which links its TP groups
// and stage hand-offs take). No GPU serves two instances.
//
// Autoscaling (PoolConfig::autoscale, autoscaler.h): the pool's GPUs hold `max` instances, of
// which `initial` serve at time 0. Every second the scaler samples its metric over the serving
// instances; every interval it decides. An instance started serves after its start-up time (a
// fresh engine: empty KV and prefix caches); one released is drained (the router sends it
// nothing more, it finishes what it holds) and then gives its GPUs back. Starts not yet
// serving are cancelled before anything is drained. The pool's GPU-hours count every instance
// from its start to its release.
//
// Prefill/decode disaggregation: with prefill and decode pools, a request goes to a prefill
// instance (the router), which computes its prompt and samples its first token; a decode
// instance (the decode router) then allocates blocks for the prompt's KV, which moves as flows
// on the network model from the prefill instance's GPUs to the decode instance's (shards
// spread over max(GPUs of each) flows; every transfer shares links with every other), and the
// prefill instance frees its blocks when the last byte lands. The first token reaches the user
// then (TTFT counts the transfer), and the decode instance produces the rest. With layer-wise
// streaming (FleetConfig::kv_streaming) the decode instance is chosen when the prefill begins
// and the flows start as soon as its blocks are allocated, overlapping the prefill.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "serving/autoscaler.h"
#include "serving/batch_scheduler.h"
#include "serving/kv_capacity.h"
#include "serving/request.h"
#include "serving/request_router.h"
#include "serving/step_model.h"
#include "serving/traffic.h"
#include "topology/topology.h"

namespace parallax {

/// A step's latency (its batch through every stage) and the interval after which the
/// instance's first stage can take the next batch (the slowest stage and the framework term;
/// the latency itself without pipeline parallelism).
struct StepTiming {
  Time latency;
  Time interval;
};

/// How long an engine step takes. Not const: a test timer may draw random times.
class StepTimer {
 public:
  virtual ~StepTimer() = default;
  virtual Time step_time(const RaggedBatch& batch) = 0;
  /// Default: one batch at a time (interval = latency).
  virtual StepTiming timing(const RaggedBatch& batch) {
    const Time t = step_time(batch);
    return {t, t};
  }
};

/// The cost model's answer (step_model.h).
class ModelStepTimer final : public StepTimer {
 public:
  explicit ModelStepTimer(std::shared_ptr<const StepModel> model) : model_(std::move(model)) {}
  Time step_time(const RaggedBatch& batch) override { return model_->step(batch).total; }
  StepTiming timing(const RaggedBatch& batch) override {
    const StepBreakdown b = model_->step(batch);
    return {b.total, model_->shape().pp > 1 ? b.bottleneck_stage + b.overhead : b.total};
  }

 private:
  std::shared_ptr<const StepModel> model_;
};

/// What a pool's instances do: both phases, or one side of prefill/decode disaggregation.
enum class PoolRole : uint8_t { kColocated, kPrefill, kDecode };
const char* to_string(PoolRole r);

struct PoolConfig {
  std::string name = "pool";
  PoolRole role = PoolRole::kColocated;
  InstanceShape shape;
  int count = 1;
  /// Where its first instance starts (an index into the topology's GPUs); nullopt: after the
  /// previous pool's. Its instances follow one another from there.
  std::optional<int> first_gpu;
  BatchingConfig batching;  ///< kv_blocks 0: derived from memory (kv_capacity.h)
  double memory_reserve = 0.10;
  std::optional<Bytes> workspace;  ///< nullopt: activation_workspace of the pool's budget
  /// Swap preemption: host memory per GPU for swapped-out KV (vLLM's swap_space, 4 GiB), and
  /// the rate it is copied at (nullopt: 85% of the GPU's PCIe link in the topology, the payload
  /// share of PCIe's packets).
  Bytes swap_space = Bytes(4.0 * 1024 * 1024 * 1024);
  /// Prefix caching's host-memory tier, per GPU (0: none): BatchingConfig::host_cache_blocks of
  /// its KV blocks, copied back at swap_bandwidth on the step that reuses them.
  Bytes host_cache;
  /// The engine frees the KV blocks that leave a sliding window or an attention chunk (vLLM's
  /// hybrid KV-cache manager, default since 0.10; SGLang's sliding-window pool): on a model with
  /// windowed or chunked layers, BatchingConfig::bounded_kv_share. false: vLLM's
  /// --disable-hybrid-kv-cache-manager, every layer holds every token.
  bool hybrid_kv_allocator = true;
  std::optional<Bandwidth> swap_bandwidth;
  StepModelOptions step;
  std::optional<AutoscaleConfig> autoscale;  ///< count is then its max
};

/// The types a pool keeps its weights and KV cache in (its step options').
inline ServingPrecision precision_of(const PoolConfig& pool) { return {pool.step.dtype, pool.step.kv_cache_dtype}; }

struct FleetConfig {
  ModelConfig model;
  std::shared_ptr<const Topology> topology;
  std::vector<PoolConfig> pools;
  RoutingPolicy router = RoutingPolicy::kRoundRobin;  ///< over colocated or prefill instances
  RoutingPolicy decode_router = RoutingPolicy::kLeastRequests;  ///< disaggregated: over decode instances
  /// Disaggregated: the network model KV transfers run on ("flow": they share links with each
  /// other; "analytical": each alone).
  std::string kv_network = "flow";
  /// Layer-wise KV streaming: a prompt is routed to its decode instance when its prefill
  /// begins, and its KV flows while it is computed (once blocks are allocated there); the
  /// transfer lands no earlier than the prefill's end plus the last layer's share of it.
  bool kv_streaming = false;
  Time refresh_interval;  ///< how stale the engines' reports are to the router; 0: fresh
  int64_t router_index_blocks = 0;  ///< prompt blocks the router's prefix index keeps per instance; 0: all
  TrafficSpec traffic;
  /// A trace to replay in place of `traffic`'s synthetic stream (trace_reader.h); its requests
  /// in arrival order with ids 0…n−1.
  std::shared_ptr<const std::vector<Request>> replay;
  std::string replay_name;  ///< what it was read from, for the report
  uint64_t seed = 1;
  Time slo_ttft;  ///< 0: no TTFT objective
  Time slo_tpot;  ///< 0: no TPOT objective
  /// Keep every engine step (for a Chrome/Perfetto trace); costs ~40 B a step.
  bool record_steps = false;
  /// Called as requests complete, about every 1% of them: (completed or rejected, all).
  std::function<void(int64_t, int64_t)> progress;
};

/// One engine step of one instance, when FleetConfig::record_steps is on.
struct StepRecord {
  int instance = 0;
  Time start;
  Time duration;
  int sequences = 0;
  int64_t prefill_tokens = 0;  ///< new tokens of sequences still in their prompt
  int64_t decode_tokens = 0;   ///< one per decoding sequence
};

/// Makes the step timer of instance `instance` (fleet-wide index) of `pool`; null means the
/// cost model. Tests use it for closed-form queues.
using StepTimerFactory = std::function<std::unique_ptr<StepTimer>(const PoolConfig& pool, int instance)>;

/// An autoscaled pool's instances from a moment on.
struct InstanceCountPoint {
  Time at;
  int serving = 0, starting = 0, draining = 0;
};

/// What an autoscaled pool did.
struct PoolScaling {
  Time startup;                 ///< an instance's, from being asked for to serving
  int started = 0, drained = 0;  ///< instances started (not those serving at 0) and released
  int cancelled = 0;            ///< starts called off before serving
  int peak = 0;                 ///< most instances holding GPUs at once
  std::vector<InstanceCountPoint> timeline;  ///< from time 0, one point per change
};

struct PoolStats {
  std::string name;
  PoolRole role = PoolRole::kColocated;
  int instances = 0;
  int gpus_per_instance = 0;
  int64_t kv_blocks = 0;       ///< per instance
  KvCapacity capacity;         ///< how kv_blocks was derived (blocks 0 when given)
  int64_t steps = 0;
  double busy_fraction = 0;    ///< mean over instances: time in steps / duration
  double kv_occupancy = 0;     ///< mean over instances and time: used / capacity
  double mean_batch = 0;       ///< sequences per step
  double mean_tokens = 0;      ///< new tokens per step
  /// Instances holding GPUs, averaged over the run (a fixed pool's count), and their GPU-hours.
  double mean_instances = 0;
  double gpu_hours = 0;
  std::optional<PoolScaling> scaling;  ///< autoscaled pools
};

struct FleetResult {
  std::vector<RequestRecord> requests;  ///< by request id
  std::vector<PoolStats> pools;
  Time duration;                        ///< first arrival (0) to the last completion
  int64_t preemptions = 0;
  int64_t swaps = 0;          ///< preemptions that swapped the KV to host memory
  Bytes swap_bytes;           ///< copied out and in, all GPUs together
  Time swap_time;             ///< steps' time spent copying it
  Bytes host_cache_bytes;     ///< prefix-cache blocks copied back from host memory, all GPUs together
  Time host_cache_time;       ///< steps' time spent copying them
  /// Little's law: the time-average number of requests in the system, and arrival rate × mean
  /// time in system, over the completed requests.
  double mean_in_system = 0;
  double arrival_rate_times_mean_e2e = 0;
  /// Inter-token gaps of every request: a histogram with buckets 1% wide (log scale), for
  /// percentiles without keeping every gap.
  std::vector<int64_t> itl_histogram;
  int64_t itl_count = 0;
  double itl_sum_s = 0;
  int total_gpus = 0;
  std::vector<StepRecord> steps;  ///< with record_steps, in start order
  std::vector<int> instance_pool;  ///< the pool of each instance
  std::vector<std::vector<DeviceId>> instance_gpus;  ///< the GPUs of each instance
};

/// The gap that histogram bucket `i` starts at, in seconds.
double itl_bucket_start(size_t i);
/// The q-quantile (0 < q ≤ 1) of the gaps in the histogram, in seconds (bucket midpoints).
double itl_quantile(const FleetResult& r, double q);

/// Where an instance of `shape` packed from GPU `cursor` starts: there, or at the next node's
/// first GPU when its TP groups would straddle a node (placement_problem).
int packed_start(InstanceShape shape, int gpus_per_node, int cursor);
/// The GPU after `count` instances of `shape` packed from `cursor` (packed_start for each).
int packed_end(InstanceShape shape, int count, int gpus_per_node, int cursor);

/// The KV capacity `pool`'s instances take from their GPUs' memory (kv_capacity.h), with the
/// pool's workspace or one estimated from its batching. Throws std::invalid_argument when the
/// weights leave no room.
KvCapacity pool_kv_capacity(const FleetConfig& config, const PoolConfig& pool);
/// Throws std::invalid_argument when `pool`'s shape does not suit the model (the step model's
/// checks) or, its blocks not given, its weights leave no room for the cache.
void check_pool_shape(const FleetConfig& config, const PoolConfig& pool);

/// The cluster `pool`'s instances run on: the topology, or on a cluster of node groups
/// (TopologyInfo::node_groups) the group holding the node its placement names, as a topology of
/// its own (one kind of GPU). Throws std::invalid_argument for an unplaced pool on node groups.
const Topology& pool_topology(const FleetConfig& config, const PoolConfig& pool);

/// Whether a pool of the run autoscaled.
bool has_autoscaled_pool(const FleetResult& result);

/// Throws std::invalid_argument for what `what` (a search or sizing, which re-shapes pools with
/// fixed counts) cannot take: an autoscaled pool.
void check_searchable(const FleetConfig& config, const std::string& what);

/// Runs the simulation. Throws std::invalid_argument for a configuration that cannot run
/// (pools that do not fit the topology or their GPUs' memory, bad shapes), naming the pool.
FleetResult simulate_fleet(const FleetConfig& config, const StepTimerFactory& timers = nullptr);

}  // namespace parallax
