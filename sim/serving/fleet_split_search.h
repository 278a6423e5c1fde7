// How should a disaggregated fleet split its GPUs? DistServe's placement question (Zhong et al.
// 2024): how many GPUs prefill and how many decode, and in what instance shape each. Every pair
// of valid shapes (candidate_shapes, each pool's own batching and memory) and every count of
// each that fills the topology's GPUs and packs onto its nodes is a candidate split.
//
// Each split gets a rate bound before any simulation: the requests per second its prefill side
// and its decode side each sustain with every instance's batches full, the smaller of the two —
//   prefill: new tokens of a full-budget step of mean-length prompts / the step's interval
//            / the mean prompt;
//   decode:  b · tokens per step / the interval of a step of b sequences at the decode-weighted
//            mean context / the mean decode tokens of a request, b the largest batch the
//            sequence cap, the KV blocks and the TPOT objective allow.
// Splits are simulated best bound first, in rounds of a fixed size (so the result does not
// depend on the threads), each run through the whole fleet simulation (KV transfers on the
// network included) on the fleet's traffic and seed, ranked by capacity at the SLO as the
// shape search ranks (capacity_at_slo), else by output throughput at the fleet's rate. A split
// whose bound, with a margin for what the bound leaves out, is below the best simulated capacity
// is pruned unsimulated.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/fleet.h"
#include "serving/fleet_report.h"

namespace parallax {

struct PoolShape {
  InstanceShape shape;
  int instances = 0;
  int64_t kv_blocks = 0;  ///< per instance
};

struct SplitRun {
  PoolShape prefill, decode;
  double bound = 0;     ///< requests/s: the smaller side's rate at full batches
  double capacity = 0;  ///< with an SLO: the highest rate meeting it (0: none tried did)
  FleetSummary summary; ///< at the capacity (or, below every rate tried, at the fleet's)
};

struct SplitSearch {
  size_t prefill_shapes = 0, decode_shapes = 0;   ///< enumerated per pool
  size_t rejected_by_rule = 0;                    ///< shapes (both pools) the model cannot take
  size_t rejected_by_memory = 0;                  ///< shapes whose weights leave no room for KV
  std::vector<std::string> rejections;            ///< "pool shape: reason", the first of each kind
  size_t splits = 0;           ///< pairs of valid shapes and counts filling the GPUs
  size_t unplaceable = 0;      ///< of those, TP groups that cannot all be packed inside nodes
  size_t pruned_by_bound = 0;
  size_t refused = 0;          ///< simulated, but the fleet refused to run (e.g. a request never fits)
  std::vector<SplitRun> ranked;  ///< the simulated splits, best first
  bool by_capacity = false;
  double attainment = 0.9;
};

/// The margin on a split's bound: pruned when bound · (1 + kBoundMargin) is below the best
/// simulated capacity. The bound leaves out the spread of lengths around their means and that a
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

/// Requests/s one prefill instance sustains with full-budget steps of mean-length prompts.
double prefill_rate_bound(const StepModel& model, const BatchingConfig& batching, const TrafficMeans& means);
/// Requests/s one decode instance sustains: its largest batch that fits the sequence cap, its
/// `kv_blocks` and, when `slo_tpot` > 0, meets it. 0 when one sequence alone misses the TPOT.
double decode_rate_bound(const StepModel& model, const BatchingConfig& batching, int64_t kv_blocks,
                         const TrafficMeans& means, Time slo_tpot);

/// Searches the splits of `config`'s prefill and decode pools over all the topology's GPUs
/// (`threads` simulations at once; the result does not depend on them). `prune` false simulates
/// every placeable split. Throws std::invalid_argument unless the fleet is one prefill and one
/// decode pool.
SplitSearch search_splits(const FleetConfig& config, int threads, double attainment = 0.9, bool prune = true,
                          const std::function<void(size_t, size_t)>& progress = nullptr);

std::string split_table(const SplitSearch& search, size_t top);
/// Per simulated split: its capacity (or requests/s), p99 TPOT and TTFT (ms) at it, and its label.
std::string split_data(const SplitSearch& search);
nlohmann::ordered_json split_json(const SplitSearch& search);
/// The fleet file `original` (loaded as `config`) with its prefill and decode pools re-shaped as
/// `run`, the rest as it was: what `serve search --emit` writes.
nlohmann::json fleet_with_split(const nlohmann::json& original, const FleetConfig& config, const SplitRun& run);

}  // namespace parallax
