// Sibling contention (sibling_contention.h): the pools of a fat tree's links, whether the fabric
// blocks at all, and the slowdown of one group's collective by its siblings' traffic.
#include "collectives/sibling_contention.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

namespace parallax {

SiblingContention::SiblingContention(const Topology& topo, const Router& router, Options options)
    : topo_(topo), router_(router) {
  build_pools();
  non_blocking_ = fabric_is_non_blocking();
  two_tier_ = options.skip_far_pairs && fabric_is_two_tier();
  access_.assign(topo.device_count(), {});
  if (two_tier_ && !non_blocking_) build_access();  // a non-blocking fabric never routes a pair
}

namespace {

bool leaf_to_spine(const Topology& topo, const Link& link) {
  return topo.device(link.from).switch_kind == SwitchKind::kLeaf && topo.device(link.to).switch_kind == SwitchKind::kSpine;
}

bool spine_to_leaf(const Topology& topo, const Link& link) {
  return topo.device(link.from).switch_kind == SwitchKind::kSpine && topo.device(link.to).switch_kind == SwitchKind::kLeaf;
}

}  // namespace

// Pools: a leaf's uplinks (to any spine) are one; the downlinks into a leaf (from any spine)
// another; every other resource is its own.
void SiblingContention::build_pools() {
  const uint32_t resources = static_cast<uint32_t>(topo_.resource_count());
  pool_of_resource_.assign(resources, UINT32_MAX);
  std::map<std::pair<int, uint32_t>, uint32_t> pools;  // (0 up / 1 down, leaf) → pool
  for (uint32_t l = 0; l < topo_.link_count(); ++l) {
    const Link& link = topo_.link(LinkId{l});
    if (leaf_to_spine(topo_, link)) {
      pools.emplace(std::make_pair(0, link.from.value), 0);
    } else if (spine_to_leaf(topo_, link)) {
      pools.emplace(std::make_pair(1, link.to.value), 0);
    }
  }
  uint32_t next = resources;
  for (auto& [key, id] : pools) id = next++;
  pool_capacity_.assign(next, 0.0);
  for (uint32_t l = 0; l < topo_.link_count(); ++l) {
    const Link& link = topo_.link(LinkId{l});
    if (pool_of_resource_[link.resource] != UINT32_MAX) continue;
    uint32_t pool = link.resource;
    if (leaf_to_spine(topo_, link)) {
      pool = pools.at(std::make_pair(0, link.from.value));
    } else if (spine_to_leaf(topo_, link)) {
      pool = pools.at(std::make_pair(1, link.to.value));
    }
    pool_of_resource_[link.resource] = pool;
    pool_capacity_[pool] += topo_.resource_capacity(link.resource).value();
  }
  load_.assign(next, 0.0);
}

// Non-blocking: no PCIe switch or CPU that GPUs could share inside a node, each NIC's only
// non-fabric neighbour is one GPU, and each leaf's uplinks carry at least the sum of its links
// from NICs.
bool SiblingContention::fabric_is_non_blocking() const {
  bool non_blocking = true;
  std::map<uint32_t, double> leaf_down, leaf_up;  // by leaf: capacity from NICs, to spines
  for (uint32_t d = 0; d < topo_.device_count(); ++d) {
    const Device& device = topo_.device(DeviceId{d});
    if (device.kind == DeviceKind::kCpu || device.switch_kind == SwitchKind::kPcie) non_blocking = false;
    if (device.kind != DeviceKind::kNic) continue;
    int gpus = 0, others = 0;
    for (LinkId l : topo_.out_links(DeviceId{d})) {
      const Link& link = topo_.link(l);
      const Device& peer = topo_.device(link.to);
      if (peer.kind == DeviceKind::kGpu) {
        ++gpus;
      } else if (peer.switch_kind == SwitchKind::kLeaf) {
        leaf_down[link.to.value] += link.bandwidth.value();
      } else {
        ++others;
      }
    }
    if (gpus != 1 || others != 0) non_blocking = false;
  }
  for (uint32_t l = 0; l < topo_.link_count(); ++l) {
    const Link& link = topo_.link(LinkId{l});
    if (leaf_to_spine(topo_, link)) leaf_up[link.from.value] += link.bandwidth.value();
  }
  for (const auto& [leaf, down] : leaf_down) {
    if (leaf_up[leaf] < down * (1 - 1e-9) && leaf_up[leaf] > 0) non_blocking = false;
  }
  return non_blocking;
}

// A two-tier fat tree: the fabric switches are leaves and spines, joined leaf to spine only,
// and a leaf's other links go to NICs.
bool SiblingContention::fabric_is_two_tier() const {
  for (uint32_t l = 0; l < topo_.link_count(); ++l) {
    const Link& link = topo_.link(LinkId{l});
    const Device& from = topo_.device(link.from);
    const Device& to = topo_.device(link.to);
    const bool fabric_from = from.switch_kind == SwitchKind::kLeaf || from.switch_kind == SwitchKind::kSpine;
    const bool fabric_to = to.switch_kind == SwitchKind::kLeaf || to.switch_kind == SwitchKind::kSpine;
    if (fabric_from && fabric_to && from.switch_kind == to.switch_kind) return false;
    if (from.switch_kind == SwitchKind::kSpine && !fabric_to) return false;
    if (from.switch_kind == SwitchKind::kLeaf && !fabric_to && to.kind != DeviceKind::kNic) return false;
    if (!fabric_from && !fabric_to && from.node != to.node) return false;
  }
  return true;
}

// What each GPU reaches without passing another GPU or a spine: the devices of its node on its
// way out, and the leaves next to its NICs.
void SiblingContention::build_access() {
  // seen[d] == the search's stamp: one array for every GPU's search, never cleared.
  std::vector<uint32_t> seen(topo_.device_count(), 0);
  uint32_t stamp = 0;
  for (DeviceId gpu : topo_.gpus()) {
    std::vector<DeviceId> frontier{gpu};
    ++stamp;
    seen[gpu.value] = stamp;
    while (!frontier.empty()) {
      const DeviceId at = frontier.back();
      frontier.pop_back();
      for (LinkId l : topo_.out_links(at)) {
        const DeviceId neighbour = topo_.link(l).to;
        const Device& device = topo_.device(neighbour);
        if (seen[neighbour.value] == stamp) continue;
        seen[neighbour.value] = stamp;
        if (device.kind == DeviceKind::kGpu || device.switch_kind == SwitchKind::kSpine) continue;
        access_[gpu.value].push_back(neighbour.value);
        if (device.switch_kind != SwitchKind::kLeaf) frontier.push_back(neighbour);
      }
    }
  }
}

double SiblingContention::slowdown(const std::vector<std::vector<DeviceId>>& groups, size_t own,
                                   const std::vector<DeviceId>& reference, TrafficPattern pattern) {
  if (own >= groups.size()) {
    throw std::invalid_argument("sibling contention: group " + std::to_string(own) + " of " +
                                std::to_string(groups.size()));
  }
  if (non_blocking_) return 1.0;
  // The pairs of a group's pattern, each with the share of its rate it offers. A ring runs both
  // ways at half its rate each: NCCL's channels enter and leave a node through the NICs of the
  // group's different GPUs there, so each of those NICs carries both directions.
  auto for_each_pair = [&](const std::vector<DeviceId>& group, const auto& visit) {
    const size_t n = group.size();
    for (size_t i = 0; i < n && n >= 2; ++i) {
      if (pattern == TrafficPattern::kRing) {
        visit(group[i], group[(i + 1) % n], 0.5);
        visit(group[(i + 1) % n], group[i], 0.5);
        continue;
      }
      for (size_t j = 0; j < n; ++j) {
        if (j != i) visit(group[i], group[j], 1.0);
      }
    }
  };
  // A pair offers its share of its standalone rate to every pool on its path.
  auto offer = [&](DeviceId src, DeviceId dst, double share) {
    path_.clear();
    router_.route(src, dst, 0, path_);
    double rate = std::numeric_limits<double>::infinity();
    for (LinkId l : path_) rate = std::min(rate, topo_.resource_capacity(topo_.link(l).resource).value());
    for (LinkId l : path_) {
      const uint32_t pool = pool_of_resource_[topo_.link(l).resource];
      if (load_[pool] == 0.0) touched_.push_back(pool);
      load_[pool] += rate * share;
    }
  };
  // The most loaded pool on `group`'s paths, as a multiple of its capacity (at least 1).
  auto peak = [&](const std::vector<DeviceId>& group) {
    double worst = 1.0;
    for_each_pair(group, [&](DeviceId src, DeviceId dst, double) {
      path_.clear();
      router_.route(src, dst, 0, path_);
      for (LinkId l : path_) {
        const uint32_t pool = pool_of_resource_[topo_.link(l).resource];
        worst = std::max(worst, load_[pool] / pool_capacity_[pool]);
      }
    });
    return worst;
  };
  auto clear = [&] {
    for (uint32_t pool : touched_) load_[pool] = 0.0;
    touched_.clear();
  };

  // On a two-tier fat tree a sibling pair can load a pool on the group's paths only if one of
  // its ends reaches, inside its node or at the first leaf, a device those paths cross: the
  // fabric's pools are per leaf, and nothing transits a GPU. Route only those pairs.
  std::vector<char> on_own_paths;
  if (two_tier_) {
    on_own_paths.assign(topo_.device_count(), 0);
    for_each_pair(groups[own], [&](DeviceId src, DeviceId dst, double) {
      path_.clear();
      router_.route(src, dst, 0, path_);
      for (LinkId l : path_) {
        for (DeviceId d : {topo_.link(l).from, topo_.link(l).to}) {
          if (topo_.device(d).kind != DeviceKind::kGpu) on_own_paths[d.value] = 1;
        }
      }
    });
  }
  auto near = [&](DeviceId gpu) {
    for (uint32_t device : access_[gpu.value]) {
      if (on_own_paths[device]) return true;
    }
    return false;
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    for_each_pair(groups[g], [&](DeviceId src, DeviceId dst, double share) {
      if (g == own || !two_tier_ || near(src) || near(dst)) offer(src, dst, share);
    });
  }
  const double with = peak(groups[own]);
  clear();
  for_each_pair(reference, offer);
  const double alone = peak(reference);
  clear();
  const double slowdown = with / alone;
  // Loads are sums of the same rates in another order: within rounding of 1, it is 1.
  return slowdown < 1.0 + 1e-9 ? 1.0 : slowdown;
}

}  // namespace parallax
