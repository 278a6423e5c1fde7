// How should a disaggregated fleet split its GPUs? DistServe's placement question (Zhong et al.
// 2024): how many GPUs prefill and how many decode, and in what instance shape each. Every pair
// of valid shapes (candidate_shapes, each pool's own batching and memory) and every count of
// each that fills the topology's GPUs and packs onto its nodes is a candidate split. On a cluster
// of node groups (several kinds of GPU) each pool runs within one group: every pair of groups is
// tried, each pool filling its own group's GPUs, or both splitting one group's (the others idle),
// which answers which kind of GPU should prefill and which decode (Splitwise-HA, Patel et al. 2024).
//
// Each split gets a rate bound before any simulation (rate_bound.h): the requests per second its
// prefill side and its decode side each sustain with every instance's batches full, the smaller
// of the two. Splits are simulated best bound first (run_best_bound_first), each through the
// whole fleet simulation (KV transfers on the network included) on the fleet's traffic and
// seed, ranked by capacity at the SLO as the shape search ranks (capacity_at_slo), else by
// output throughput at the fleet's rate; those whose bound cannot reach the best capacity found
// are pruned unsimulated.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/fleet.h"
#include "serving/fleet_report.h"
#include "serving/fleet_search.h"
#include "serving/rate_bound.h"

namespace parallax {

struct PoolShape {
  InstanceShape shape;
  int instances = 0;
  int64_t kv_blocks = 0;  ///< per instance
  std::string group;            ///< on node groups: the group it runs on (else empty)
  std::optional<int> first_gpu; ///< on node groups: the GPU its first instance starts at
};

struct SplitRun {
  PoolShape prefill, decode;
  double bound = 0;     ///< requests/s: the smaller side's rate at full batches
  double capacity = 0;  ///< with an SLO: the highest rate meeting it (0: none tried did)
  FleetSummary summary; ///< at the capacity (or, below every rate tried, at the fleet's)
  double dollars_per_hour = 0;            ///< priced: both pools' GPUs an hour
  double dollars_per_million_output = 0;  ///< priced: at its capacity (dollars_per_million_output)
};

struct SplitSearch {
  size_t prefill_shapes = 0, decode_shapes = 0;   ///< enumerated per pool
  size_t rejected_by_rule = 0;                    ///< shapes (both pools) the model cannot take
  size_t rejected_by_memory = 0;                  ///< shapes whose weights leave no room for KV
  std::vector<std::string> rejections;            ///< "pool shape: reason", the first of each kind
  size_t splits = 0;           ///< pairs of valid shapes and counts filling the GPUs (their groups')
  size_t unplaceable = 0;      ///< of those, TP groups that cannot all be packed inside nodes
  size_t pruned_by_bound = 0;
  size_t refused = 0;          ///< simulated, but the fleet refused to run (e.g. a request never fits)
  std::vector<SplitRun> ranked;  ///< the simulated splits, best first
  bool by_capacity = false;
  bool by_cost = false;  ///< priced: ranked by that figure per dollar an hour
  double attainment = 0.9;
  bool node_groups = false;  ///< the pools were placed on node groups
  /// On node groups, per (prefill group, decode group) in the topology's group order.
  std::vector<GroupOutcome> group_pairs;
};

/// Searches the splits of `config`'s prefill and decode pools over all the topology's GPUs
/// (`threads` simulations at once; the result does not depend on them). `prune` false simulates
/// every placeable split. With `prices`, ranked per dollar an hour of the GPUs in use (as
/// ShapeSearchOptions::prices). Throws std::invalid_argument unless the fleet is one prefill and
/// one decode pool, or for a GPU that `prices` does not price.
SplitSearch search_splits(const FleetConfig& config, int threads, double attainment = 0.9, bool prune = true,
                          const std::function<void(size_t, size_t)>& progress = nullptr,
                          const GpuHourPrices& prices = {});

std::string split_table(const SplitSearch& search, size_t top);
/// Per simulated split: its capacity (or requests/s), p99 TPOT and TTFT (ms) at it, and its label.
std::string split_data(const SplitSearch& search);
nlohmann::ordered_json split_json(const SplitSearch& search);
/// The fleet file `original` (loaded as `config`) with its prefill and decode pools re-shaped as
/// `run`, the rest as it was: what `serve search --emit` writes.
nlohmann::json fleet_with_split(const nlohmann::json& original, const FleetConfig& config, const SplitRun& run);

}  // namespace parallax
