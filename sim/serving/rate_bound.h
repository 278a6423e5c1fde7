// What a serving instance sustains at most, before any simulation: the requests per second its
// prefill and its decode each reach with full batches at the traffic's mean lengths. The
// searches (fleet_search.h, fleet_split_search.h) simulate the layouts with the best bounds first
// and leave unsimulated those whose bound cannot reach the best capacity already found.
//   prefill: new tokens of a full-budget step of mean-length prompts / the step's interval
//            / the mean prompt;
//   decode:  b · tokens per step / the interval of a step of b sequences at the decode-weighted
//            mean context / the mean decode tokens of a request, b the largest batch the
//            sequence cap, the KV blocks and the TPOT objective allow.
// A colocated instance does both on the same GPUs: it sustains at most the smaller of the two.
#pragma once

#include "serving/batch_scheduler.h"
#include "serving/fleet.h"
#include "serving/step_model.h"

namespace parallax {

/// The margin on a bound: a layout is left unsimulated when bound · (1 + kBoundMargin) is below
/// the best simulated capacity. The bound leaves out the spread of lengths around their means and that a
/// short run lets a slightly overloaded decode side meet a TPOT objective for a while: checked
/// exhaustively on the bundled disaggregated fleets, no capacity exceeded its bound at the
/// files' request counts, and the most was 1.245× it at a sixth of them (docs/serving-format.md).
inline constexpr double kBoundMargin = 0.3;

/// The mean prompt, the mean decode tokens of a request (its outputs after the first) and the
/// decode-weighted mean context (over decode steps: Σ(P·D + D²/2) / ΣD) of the fleet's traffic
/// (its replayed trace, or its synthetic stream drawn with its seed).
struct TrafficMeans {
  double prompt = 0;
  double decode = 0;
  double decode_context = 0;
};
TrafficMeans traffic_means(const FleetConfig& config);

/// The requests/s of one unit of offered load: 1 for synthetic traffic (its loads are
/// requests/s), a replayed trace's own rate (its requests over their arrival span) when the loads
/// are the trace's speed-ups. Bounds divided by it compare with capacities.
double requests_per_load_unit(const FleetConfig& config);

/// Requests/s one prefill instance sustains with full-budget steps of mean-length prompts;
/// unbounded (infinity) with a prefix cache, which spares prefill work the bound cannot count.
double prefill_rate_bound(const StepModel& model, const BatchingConfig& batching, const TrafficMeans& means);
/// Requests/s one decode instance sustains: its largest batch that fits the sequence cap, its
/// `kv_blocks` and, when `slo_tpot` > 0, meets it. 0 when one sequence alone misses the TPOT.
double decode_rate_bound(const StepModel& model, const BatchingConfig& batching, int64_t kv_blocks,
                         const TrafficMeans& means, Time slo_tpot);

/// Requests/s one instance of `pool` sustains in `config`'s fleet: its prefill's bound in a
/// prefill pool, its decode's (under the fleet's TPOT objective) in a decode pool, the smaller of
/// the two in a colocated one; its KV blocks derived from memory unless given.
double instance_rate_bound(const FleetConfig& config, const PoolConfig& pool, const TrafficMeans& means);

/// The batching an instance of `pool` runs with, seen whole: with data-parallel attention its
/// ranks' shares of the cap and budget (rounded up, as DataParallelScheduler gives them) added
/// up.
BatchingConfig instance_batching(const PoolConfig& pool);

/// Sets `batching`'s hybrid-allocator rule (BatchingConfig::bounded_kv_share and
/// bounded_kv_span) for `model` served by `pool`, where the pool's engine frees the blocks that
/// leave a window or a chunk (PoolConfig::hybrid_kv_allocator) and keeps no prefix cache (whose
/// blocks hold every token: the rule is left off there). The share is the windowed or chunked
/// layers' share of a token's KV bytes on the pipeline stage where it is least (⌊s·L_stage⌋ of
/// a stage's L_stage layers), with a draft model's KV beside the target's; the span, a window w's
/// w + b − 1 tokens, or a chunk c's c (c + b − 1 when b does not divide it).
void apply_hybrid_kv_allocator(const ModelConfig& model, const PoolConfig& pool, BatchingConfig& batching);

}  // namespace parallax
