// Routes between devices: shortest paths in hops that never pass through a GPU (GPUs are
// endpoints, they do not forward; a relay through a GPU, as NCCL's PXN does, is the job of the
// layer that schedules the traffic), nor through a NIC between two devices of its own node (a
// NIC joins its node to the network; two GPUs that share one talk over their own fabric). Where
// several next hops are equally short (ECMP), the choice is a deterministic hash of the flow key
// and the current device. The rail-optimized convention (GPU i of every node on rail i) follows
// from how the fabric is wired: GPU i's NIC joins rail i's leaf, so same-rail traffic stays under
// one leaf.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "topology/topology.h"

namespace parallax {

inline constexpr uint16_t kUnreachable = UINT16_MAX;

/// Hop distances from every device to a destination along paths that do not transit a GPU (nor
/// a NIC between two devices of its node); kUnreachable where there is none. Built once per
/// topology (every device's in-links in compressed rows), then one breadth-first search per
/// destination.
class HopDistances {
 public:
  explicit HopDistances(const Topology& topo);
  std::vector<uint16_t> to(DeviceId dst) const;

 private:
  std::vector<uint32_t> offsets_;  // per device: its in-links in from_ and from_network_
  std::vector<uint32_t> from_;
  std::vector<uint8_t> from_network_;
  std::vector<DeviceKind> kind_;
  std::vector<int> node_;
};

class Router {
 public:
  /// Keeps a reference to `topo`, which must outlive the router. Caches distance vectors per
  /// destination (not thread-safe: give each thread its own Router).
  explicit Router(const Topology& topo);

  /// Appends the links of the path from src to dst chosen for `flow_key` to `out` (nothing
  /// when src == dst). Throws std::invalid_argument when dst cannot be reached without passing
  /// through a GPU (loaders check reachability first, so this means a caller bug).
  void route(DeviceId src, DeviceId dst, uint64_t flow_key, std::vector<LinkId>& out) const;
  std::vector<LinkId> route(DeviceId src, DeviceId dst, uint64_t flow_key = 0) const {
    std::vector<LinkId> out;
    route(src, dst, flow_key, out);
    return out;
  }
  /// Sum of the link latencies on the path chosen for `flow_key`.
  Time path_latency(DeviceId src, DeviceId dst, uint64_t flow_key = 0) const {
    Time sum = Time::zero();
    for (LinkId l : route(src, dst, flow_key)) sum = sum + topo_.link(l).latency;
    return sum;
  }
  /// path_latency(src, dst) (flow key 0) for every src of `sources`, computed together: with
  /// key 0 each step depends on the device and dst alone, so the routes to dst form a tree, and
  /// each device's latency to dst is its link's plus its next hop's (integer picoseconds: the
  /// same sums). An all-to-all's n² pairs then cost n trees instead of n² routes.
  std::vector<Time> path_latencies_to(DeviceId dst, std::span<const DeviceId> sources) const;
  /// Number of links on a shortest path, or kUnreachable.
  int hops(DeviceId src, DeviceId dst) const;
  /// Replaces `out` with every link out of `at` (not dst) that starts a shortest path to dst by
  /// route()'s rules, in out-link order: the ports among which an adaptive switch may choose
  /// (route() hashes the flow key over the same list).
  void equal_next_hops(DeviceId at, DeviceId dst, std::vector<LinkId>& out) const;
  const Topology& topology() const { return topo_; }

 private:
  const std::vector<uint16_t>& distances_to(DeviceId dst) const;

  const Topology& topo_;
  HopDistances distances_;
  mutable std::vector<std::unique_ptr<std::vector<uint16_t>>> cache_;
  // Every device's out-links in compressed rows, in out_links order, with what a route step
  // reads of each: walking a spine's hundreds of ports then stays in one contiguous array.
  struct Hop {
    uint32_t to;
    uint32_t link;
    bool to_gpu;
    int relay_node;  ///< a NIC entered from its node: that node (it relays nothing back into it); else -1
  };
  std::vector<uint32_t> hop_offsets_;
  std::vector<Hop> hops_;
  mutable std::vector<uint32_t> eligible_;  // next_hop's scratch: the equal next hops, one per out-link
  /// The hop that route() takes from `at` (not dst) toward dst for `flow_key`.
  const Hop& next_hop(DeviceId at, DeviceId dst, uint64_t flow_key, const std::vector<uint16_t>& dist) const;
  /// Lists the equal next hops from `at` toward dst in eligible_ (indices into hops_); their count.
  uint32_t list_next_hops(DeviceId at, DeviceId dst, const std::vector<uint16_t>& dist) const;
};

}  // namespace parallax
