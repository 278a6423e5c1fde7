// How much a collective slows down because its siblings — the same collective of the other
// replicas, running at the same moment on other GPUs — share links with it.
//
// A training layout runs every collective once per replica: the DP all-reduce of TP rank 0
// and that of TP rank 7 start together, on other rails; on a rail-optimized, non-blocking
// fabric they never meet, but on an oversubscribed spine they split its uplinks. A model that
// times one replica's collective alone misses that. This is the fluid estimate: every pair of
// ranks that the collective's pattern connects (ring neighbours, or every pair for an
// all-to-all) offers its standalone rate — the capacity of the tightest link on its path — to
// each link of that path, and a link's load is what all sibling pairs offer over its capacity.
// The collective runs at the pace of its most loaded link; the slowdown is that load, with the
// siblings and where the group really sits, over the same load for a reference placement of
// the group alone — the placement on which the caller timed the collective (≥ 1). So it also
// counts a group that its own placement spreads over oversubscribed links.
//
// Equal-cost paths are spread evenly, as ECMP does on average, by pooling: the uplinks of a
// leaf to its spines are one resource, and so are the spines' downlinks into a leaf. Without
// the pooling, the one path a hash picks per pair would pile some spines up and leave others
// idle, and a non-blocking fabric would look oversubscribed.
//
// Where GPUs share no PCIe switch or CPU, every NIC serves one GPU and every leaf's uplinks
// carry at least what its NICs can send (NVSwitch nodes on a non-blocking fat tree), a leaf
// pool is never loaded above the busiest NIC under it, and siblings of the same shape load
// their own NICs alike: the slowdown is 1 without routing a pair. The estimate is made only on
// other fabrics. On a two-tier fat tree it routes only the sibling pairs that could reach a
// pool on the group's paths (an end that reaches, in its node or at its first leaf, a device
// those paths cross); elsewhere it routes every sibling pair.
#pragma once

#include <cstddef>
#include <vector>

#include "topology/router.h"
#include "topology/topology.h"

namespace parallax {

enum class TrafficPattern {
  kRing,      ///< each rank sends to the next, the last to the first (rings, trees, send/recv)
  kAllPairs,  ///< each rank sends to every other (all-to-all)
};

/// Keeps the link pools of a topology; not thread-safe (scratch is reused between calls).
class SiblingContention {
 public:
  struct Options {
    /// On a two-tier fat tree, skip the sibling pairs that cannot reach the group's paths
    /// (false: route them all; tests compare the two).
    bool skip_far_pairs = true;
  };
  /// Keeps references to `topo` and `router`, which must outlive it.
  SiblingContention(const Topology& topo, const Router& router) : SiblingContention(topo, router, Options{}) {}
  SiblingContention(const Topology& topo, const Router& router, Options options);

  /// True when the fabric cannot slow a group by its siblings (see above).
  bool non_blocking() const { return non_blocking_; }

  /// The slowdown (≥ 1) of groups[own]'s collective when every group of `groups` runs the
  /// same pattern at once, relative to `reference` (the same collective, alone, where its time
  /// was taken). Groups are lists of GPUs in ring order; a group of one GPU sends nothing.
  /// Throws std::invalid_argument when `own` is out of range.
  double slowdown(const std::vector<std::vector<DeviceId>>& groups, size_t own, const std::vector<DeviceId>& reference,
                  TrafficPattern pattern);

 private:
  void build_pools();
  bool fabric_is_non_blocking() const;
  bool fabric_is_two_tier() const;
  void build_access();

  const Topology& topo_;
  const Router& router_;
  bool non_blocking_ = false;  // dedicated NICs, leaves not oversubscribed: the slowdown is 1
  bool two_tier_ = false;      // leaves and spines only: far sibling pairs can be skipped
  std::vector<std::vector<uint32_t>> access_;  // by GPU device: what it reaches up to its leaves
  std::vector<uint32_t> pool_of_resource_;
  std::vector<double> pool_capacity_;
  std::vector<double> load_;  // bytes/s offered, by pool
  std::vector<uint32_t> touched_;
  std::vector<LinkId> path_;
};

}  // namespace parallax
