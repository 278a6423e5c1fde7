// How many instances does this traffic need? The fleet's pools, as shaped, grown or shrunk until
// the fewest GPUs that still serve a target load within the SLO: the capacity planning question.
//
// The fleet as given is first run to its capacity at the SLO (capacity_at_slo); every pool's
// count is scaled by target / capacity (rounded up) as the first guess. Each guess runs the whole
// fleet simulation at the target rate (summary_at: the open-loop window kept; a replayed trace
// sped up by the target), on the topology loaded again with the nodes its instances take packed
// (TP groups inside nodes). While a guess misses the SLO, the pools grow (one pool:
// by about 5%, at least an instance; several: each pool tried grown alone, the one whose growth
// raises the goodput most kept); then each pool in turn gives up instances one at a time while
// the fleet still meets it. Every fleet tried is kept, in order, with its result.
//
// On a cluster of node groups each pool stays on the group its placement names, packed after the
// pools before it there, and each group gets the nodes its pools take (at least one). With GPU-hour
// prices the cheapest fleet is sought instead of the smallest (Mélange, Griggs et al. 2024, on a
// mix of GPU kinds): a growth keeps the pool whose growth raises the goodput most per added
// dollar an hour, the trimming gives up instances of the pool whose instance costs most first,
// and the fleet chosen is the cheapest of all tried that meet the SLO.
//
// Growth and trimming are greedy. With several pools every mix cheaper than the fleet they
// chose (unpriced: on fewer GPUs), at least one instance a pool, is then taken in order of cost:
// one run before that met the SLO (unpriced, a growth kept for its goodput can pass one) is
// chosen; those whose rate bound times 1 + kBoundMargin (rate_bound.h) cannot reach the target
// are left unrun; the rest are simulated until one meets the SLO. The fleet chosen is then the
// cheapest mix of all, as far as the bound's margin holds (SizingProof).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/fleet.h"
#include "serving/fleet_report.h"

namespace parallax {

/// The fleet's own topology loaded again with `nodes` nodes: one count for a cluster of one
/// kind, one per node group (in the topology's order) on node groups.
using TopologyAt = std::function<std::shared_ptr<const Topology>(const std::vector<int>& nodes)>;

/// `counts` instances of each of `config`'s pools packed as the fleet packs them (TP groups inside
/// nodes) on as few nodes as hold them: the nodes (one count; on node groups one per group, each
/// pool on the group its placement names, after the pools before it there, at least one node a
/// group) and, on node groups, each pool's first GPU in the cluster so resized. Throws
/// std::invalid_argument for an unplaced pool on node groups.
struct PackedFleet {
  std::vector<int> nodes;
  std::vector<int> first_gpus;
};
PackedFleet pack_fleet(const FleetConfig& config, const std::vector<int>& counts);

struct SizedFleet {
  std::vector<int> counts;  ///< instances per pool, in the fleet's pool order
  int nodes = 0;
  std::vector<int> group_nodes;  ///< on node groups: each group's nodes
  std::vector<int> first_gpus;   ///< on node groups: each pool's first GPU (pack_fleet)
  int gpus = 0;             ///< the instances' GPUs
  double dollars_per_hour = 0;   ///< priced: the instances' GPUs an hour
  FleetSummary summary;     ///< at the target
  bool meets = false;
};

/// With several pools: the mixes cheaper than the greedy search's choice (fewer GPUs, unpriced),
/// at least one instance a pool, were taken in order of cost until one met the SLO. Of those
/// cheaper than the fleet finally chosen, none meets it: each was run before and missed it, or
/// its rate bound times 1 + kBoundMargin is below the target, or it was simulated now and missed.
/// `greedy`: the greedy search's choice, when a cheaper mix met the SLO.
struct SizingProof {
  size_t mixes = 0;  ///< cheaper than the greedy search's choice
  size_t tried_before = 0;
  size_t bounded_out = 0;
  size_t simulated = 0;
  std::optional<size_t> greedy;
};

struct FleetSizing {
  double target = 0;
  double attainment = 0.9;
  double capacity = 0;                ///< the fleet as given: its capacity at the SLO
  std::vector<SizedFleet> tried;      ///< every fleet run, in order
  std::optional<size_t> chosen;       ///< the smallest (priced: cheapest) that meets the SLO at the target
  bool priced = false;
  /// Several pools, a fleet chosen and every cheaper mix accounted for (within 100,000 mixes and
  /// 24 more runs): the fleet chosen is the cheapest of all.
  std::optional<SizingProof> proof;
};

/// Sizes `config`'s pools for `target` requests/s (replaying: a speed-up of the trace).
/// `progress(done, estimate)` after each fleet run; `prices` (empty: none) seek the cheapest
/// fleet. Throws std::invalid_argument for closed-loop traffic, a fleet without an SLO, one that
/// meets its SLO at no rate, an unplaced pool on node groups, or a GPU `prices` does not price.
FleetSizing size_fleet(const FleetConfig& config, double target, double attainment, const TopologyAt& topology_at,
                       const std::function<void(size_t, size_t)>& progress = nullptr, const GpuHourPrices& prices = {});

std::string sizing_table(const FleetConfig& config, const FleetSizing& sizing);
nlohmann::ordered_json sizing_json(const FleetConfig& config, const FleetSizing& sizing);
/// The fleet file `original` (loaded as `config`) with `fleet`'s counts, the topology's node
/// count (on node groups each group's, "group_nodes", and the pools' placements) and, for
/// synthetic open-loop traffic, the target rate with the window kept: what `serve size --emit`
/// writes, which runs the sized case.
nlohmann::json sized_fleet_file(const nlohmann::json& original, const FleetConfig& config, const FleetSizing& sizing,
                                const SizedFleet& fleet);

}  // namespace parallax
