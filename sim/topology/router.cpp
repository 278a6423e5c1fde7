#include "topology/router.h"

#include <algorithm>
#include <stdexcept>

namespace parallax {
namespace {

std::invalid_argument no_route(const Topology& topo, DeviceId src, DeviceId dst) {
  return std::invalid_argument("no route from " + topo.device(src).name + " to " + topo.device(dst).name);
}

uint64_t mix(uint64_t x) {
  // splitmix64 finaliser: a fixed, platform-independent hash so routes are reproducible.
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

// A breadth-first search from dst over the in-links walks the original links backwards. Two
// kinds of link are never walked: one into a GPU other than dst (a GPU would be a transit hop),
// and one into a NIC from its own node (not from the network) when dst is another device of
// that node (the NIC would relay between two devices of its node; next_hop keeps the same
// rule). A GPU thus gets a distance only as a source.
HopDistances::HopDistances(const Topology& topo)
    : offsets_(topo.device_count() + 1, 0), kind_(topo.device_count()), node_(topo.device_count()) {
  for (uint32_t d = 0; d < topo.device_count(); ++d) {
    kind_[d] = topo.device(DeviceId{d}).kind;
    node_[d] = topo.device(DeviceId{d}).node;
    for (LinkId l : topo.out_links(DeviceId{d})) ++offsets_[topo.link(l).to.value + 1];
  }
  for (size_t i = 1; i < offsets_.size(); ++i) offsets_[i] += offsets_[i - 1];
  from_.resize(offsets_.back());
  from_network_.resize(offsets_.back());
  std::vector<uint32_t> fill(offsets_.begin(), offsets_.end() - 1);
  for (uint32_t d = 0; d < topo.device_count(); ++d) {
    for (LinkId l : topo.out_links(DeviceId{d})) {
      const uint32_t at = fill[topo.link(l).to.value]++;
      from_[at] = d;
      from_network_[at] = topo.link(l).link_class == LinkClass::kNetwork ? 1 : 0;
    }
  }
}

std::vector<uint16_t> HopDistances::to(DeviceId dst) const {
  std::vector<uint16_t> dist(kind_.size(), kUnreachable);
  std::vector<uint32_t> queue;
  queue.reserve(kind_.size());
  dist[dst.value] = 0;
  queue.push_back(dst.value);
  const int dst_node = node_[dst.value];
  for (size_t head = 0; head < queue.size(); ++head) {
    const uint32_t v = queue[head];
    if (v != dst.value && kind_[v] == DeviceKind::kGpu) continue;
    const bool network_only = v != dst.value && kind_[v] == DeviceKind::kNic && node_[v] == dst_node;
    for (uint32_t i = offsets_[v]; i < offsets_[v + 1]; ++i) {
      const uint32_t u = from_[i];
      if (dist[u] != kUnreachable || (network_only && !from_network_[i])) continue;
      dist[u] = static_cast<uint16_t>(dist[v] + 1);
      queue.push_back(u);
    }
  }
  return dist;
}

Router::Router(const Topology& topo) : topo_(topo), distances_(topo), cache_(topo.device_count()) {
  uint32_t max_degree = 0;
  hop_offsets_.reserve(topo.device_count() + 1);
  hop_offsets_.push_back(0);
  for (uint32_t d = 0; d < topo.device_count(); ++d) {
    for (LinkId l : topo.out_links(DeviceId{d})) {
      const DeviceId to = topo.link(l).to;
      const Device& device = topo.device(to);
      const bool into_nic_from_node = device.kind == DeviceKind::kNic && topo.link(l).link_class != LinkClass::kNetwork;
      hops_.push_back(Hop{to.value, l.value, device.kind == DeviceKind::kGpu, into_nic_from_node ? device.node : -1});
    }
    hop_offsets_.push_back(static_cast<uint32_t>(hops_.size()));
    max_degree = std::max(max_degree, hop_offsets_[d + 1] - hop_offsets_[d]);
  }
  eligible_.resize(max_degree);
}

const std::vector<uint16_t>& Router::distances_to(DeviceId dst) const {
  auto& slot = cache_[dst.value];
  if (!slot) slot = std::make_unique<std::vector<uint16_t>>(distances_.to(dst));
  return *slot;
}

int Router::hops(DeviceId src, DeviceId dst) const {
  uint16_t d = distances_to(dst)[src.value];
  return d == kUnreachable ? kUnreachable : d;
}

uint32_t Router::list_next_hops(DeviceId at, DeviceId dst, const std::vector<uint16_t>& dist) const {
  const uint16_t want = static_cast<uint16_t>(dist[at.value] - 1);
  const int dst_node = topo_.device(dst).node;
  const uint32_t first = hop_offsets_[at.value], end = hop_offsets_[at.value + 1];
  // One pass over the out-links lists the equal next hops (written every time, counted when
  // eligible: whether a spine's port leads on is a coin toss for the branch predictor).
  uint32_t n = 0;
  for (uint32_t i = first; i < end; ++i) {
    const Hop& hop = hops_[i];
    // A GPU other than dst has a distance only as a source; never step onto one. Nor into a NIC
    // from its node toward another device of that node (HopDistances' rule).
    const bool relay = hop.relay_node >= 0 && hop.relay_node == dst_node;
    const bool eligible = dist[hop.to] == want && (hop.to == dst.value || (!hop.to_gpu && !relay));
    eligible_[n] = i;
    n += eligible ? 1 : 0;
  }
  if (n == 0) throw std::logic_error("router: no next hop from " + topo_.device(at).name);  // dist says there is one
  return n;
}

const Router::Hop& Router::next_hop(DeviceId at, DeviceId dst, uint64_t flow_key,
                                    const std::vector<uint16_t>& dist) const {
  const uint32_t n = list_next_hops(at, dst, dist);
  const size_t pick = n == 1 ? 0 : mix(flow_key ^ mix(at.value)) % n;
  return hops_[eligible_[pick]];
}

void Router::equal_next_hops(DeviceId at, DeviceId dst, std::vector<LinkId>& out) const {
  const uint32_t n = list_next_hops(at, dst, distances_to(dst));
  out.clear();
  for (uint32_t i = 0; i < n; ++i) out.push_back(LinkId{hops_[eligible_[i]].link});
}

void Router::route(DeviceId src, DeviceId dst, uint64_t flow_key, std::vector<LinkId>& out) const {
  const auto& dist = distances_to(dst);
  if (dist[src.value] == kUnreachable) {
    throw no_route(topo_, src, dst);
  }
  for (DeviceId at = src; at != dst;) {
    const Hop& hop = next_hop(at, dst, flow_key, dist);
    out.push_back(LinkId{hop.link});
    at = DeviceId{hop.to};
  }
}

std::vector<Time> Router::path_latencies_to(DeviceId dst, std::span<const DeviceId> sources) const {
  const auto& dist = distances_to(dst);
  constexpr int64_t kUnknown = -1;
  std::vector<int64_t> to_dst(topo_.device_count(), kUnknown);  // picoseconds along the key-0 tree
  to_dst[dst.value] = 0;
  std::vector<std::pair<uint32_t, int64_t>> walked;  // (device, its step's latency) up to a known one
  std::vector<Time> out;
  out.reserve(sources.size());
  for (DeviceId src : sources) {
    if (dist[src.value] == kUnreachable) {
      throw no_route(topo_, src, dst);
    }
    walked.clear();
    DeviceId at = src;
    while (to_dst[at.value] == kUnknown) {
      const Hop& hop = next_hop(at, dst, 0, dist);
      walked.emplace_back(at.value, topo_.link(LinkId{hop.link}).latency.picoseconds());
      at = DeviceId{hop.to};
    }
    // Back from the known device: each walked one's latency is its step's plus the next's.
    int64_t below = to_dst[at.value];
    for (auto it = walked.rbegin(); it != walked.rend(); ++it) {
      below += it->second;
      to_dst[it->first] = below;
    }
    out.push_back(Time::ps(to_dst[src.value]));
  }
  return out;
}

}  // namespace parallax
