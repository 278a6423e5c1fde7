#include "topology/topology.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include <boost/graph/connected_components.hpp>
#include <boost/graph/undirected_graph.hpp>


namespace parallax {

const char* to_string(DeviceKind k) {
  switch (k) {
    case DeviceKind::kGpu: return "gpu";
    case DeviceKind::kNic: return "nic";
    case DeviceKind::kSwitch: return "switch";
    case DeviceKind::kCpu: return "cpu";
  }
  return "?";
}

const char* to_string(SwitchKind k) {
  switch (k) {
    case SwitchKind::kNone: return "none";
    case SwitchKind::kNVSwitch: return "nvswitch";
    case SwitchKind::kPcie: return "pcie";
    case SwitchKind::kLeaf: return "leaf";
    case SwitchKind::kSpine: return "spine";
  }
  return "?";
}

const char* to_string(LinkClass c) {
  switch (c) {
    case LinkClass::kNVLink: return "nvlink";
    case LinkClass::kPcie: return "pcie";
    case LinkClass::kNetwork: return "network";
    case LinkClass::kCpu: return "cpu";
    case LinkClass::kShm: return "shm";
  }
  return "?";
}

std::optional<LinkClass> link_class_from_string(std::string_view s) {
  for (auto c : {LinkClass::kNVLink, LinkClass::kPcie, LinkClass::kNetwork, LinkClass::kCpu,
                 LinkClass::kShm}) {
    if (s == to_string(c)) return c;
  }
  return std::nullopt;
}

std::optional<SwitchKind> switch_kind_from_string(std::string_view s) {
  for (auto k : {SwitchKind::kNVSwitch, SwitchKind::kPcie, SwitchKind::kLeaf, SwitchKind::kSpine}) {
    if (s == to_string(k)) return k;
  }
  return std::nullopt;
}

int Topology::add_gpu_spec(GpuSpec spec) {
  gpu_specs_.push_back(std::move(spec));
  return static_cast<int>(gpu_specs_.size() - 1);
}

DeviceId Topology::add_device(Device d) {
  if (finalized_) throw std::logic_error("topology already finalized");
  DeviceId id{static_cast<uint32_t>(devices_.size())};
  if (!by_name_.emplace(d.name, id).second) {
    throw std::invalid_argument("duplicate device name \"" + d.name + "\"");
  }
  if (d.kind == DeviceKind::kGpu &&
      (d.gpu_spec < 0 || d.gpu_spec >= static_cast<int>(gpu_specs_.size()))) {
    throw std::invalid_argument("GPU \"" + d.name + "\" has no GPU spec");
  }
  devices_.push_back(std::move(d));
  out_.emplace_back();
  return id;
}

LinkId Topology::add_link(DeviceId a, DeviceId b, LinkClass cls, Bandwidth per_direction,
                          Time latency, Duplex duplex) {
  if (finalized_) throw std::logic_error("topology already finalized");
  if (a == b) throw std::invalid_argument("link from \"" + devices_[a.value].name + "\" to itself");
  if (!(per_direction.value() > 0)) throw std::invalid_argument("link bandwidth must be positive");
  LinkId forward{static_cast<uint32_t>(links_.size())};
  LinkId backward{forward.value + 1};
  auto resource = static_cast<uint32_t>(resource_capacity_.size());
  resource_capacity_.push_back(per_direction);
  if (duplex == Duplex::kFull) resource_capacity_.push_back(per_direction);
  uint32_t back_resource = duplex == Duplex::kFull ? resource + 1 : resource;
  links_.push_back(Link{a, b, cls, per_direction, latency, backward, resource});
  links_.push_back(Link{b, a, cls, per_direction, latency, forward, back_resource});
  out_[a.value].push_back(forward);
  out_[b.value].push_back(backward);
  return forward;
}

const NodeGroup* node_group_of(const TopologyInfo& info, int node) {
  for (const NodeGroup& g : info.node_groups) {
    if (node >= g.first_node && node < g.first_node + g.nodes) return &g;
  }
  return nullptr;
}

const GpuSpec& Topology::gpu_spec_of(DeviceId gpu) const {
  return gpu_specs_.at(static_cast<size_t>(devices_[gpu.value].gpu_spec));
}

std::optional<DeviceId> Topology::find_device(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

void Topology::scale_link_bandwidth(LinkClass cls, double factor) {
  if (!(factor > 0)) throw std::invalid_argument("link bandwidth scale must be positive");
  std::vector<bool> scaled(resource_capacity_.size(), false);
  for (Link& l : links_) {
    if (l.link_class != cls) continue;
    l.bandwidth = l.bandwidth * factor;
    if (!scaled[l.resource]) {
      scaled[l.resource] = true;
      resource_capacity_[l.resource] = resource_capacity_[l.resource] * factor;
    }
  }
}

void Topology::finalize() {
  if (finalized_) return;
  graph_ = Graph(devices_.size());
  for (uint32_t i = 0; i < links_.size(); ++i) {
    boost::add_edge(links_[i].from.value, links_[i].to.value, i, graph_);
  }

  // GPU order: by node, then local index; both must be unique.
  gpus_.clear();
  node_count_ = 0;
  for (uint32_t i = 0; i < devices_.size(); ++i) {
    const Device& d = devices_[i];
    if (d.kind != DeviceKind::kGpu) continue;
    if (d.node < 0 || d.local_index < 0) {
      throw std::invalid_argument("GPU \"" + d.name + "\" needs a node and a local index");
    }
    gpus_.push_back(DeviceId{i});
    node_count_ = std::max(node_count_, d.node + 1);
  }
  if (gpus_.empty()) throw std::invalid_argument("the topology has no GPU");
  std::stable_sort(gpus_.begin(), gpus_.end(), [&](DeviceId x, DeviceId y) {
    const Device &a = devices_[x.value], &b = devices_[y.value];
    return a.node != b.node ? a.node < b.node : a.local_index < b.local_index;
  });
  node_gpus_.assign(static_cast<size_t>(node_count_), {});
  for (size_t i = 0; i < gpus_.size(); ++i) {
    const Device& d = devices_[gpus_[i].value];
    if (i > 0) {
      const Device& p = devices_[gpus_[i - 1].value];
      if (p.node == d.node && p.local_index == d.local_index) {
        throw std::invalid_argument("GPUs \"" + p.name + "\" and \"" + d.name +
                                    "\" have the same node and local index");
      }
    }
    node_gpus_[static_cast<size_t>(d.node)].push_back(gpus_[i]);
  }
  for (int n = 0; n < node_count_; ++n) {
    if (node_gpus_[static_cast<size_t>(n)].empty()) {
      throw std::invalid_argument("node " + std::to_string(n) + " has no GPU (nodes are numbered from 0 without gaps)");
    }
  }

  // Connectivity, ignoring direction.
  std::vector<int> component(devices_.size());
  boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS> undirected(devices_.size());
  for (const Link& l : links_) boost::add_edge(l.from.value, l.to.value, undirected);
  int components = boost::connected_components(undirected, component.data());
  if (components > 1) {
    for (uint32_t i = 0; i < devices_.size(); ++i) {
      if (component[i] != component[0]) {
        throw std::invalid_argument("the graph is not connected: \"" + devices_[i].name +
                                    "\" cannot be reached from \"" + devices_[0].name + "\"");
      }
    }
  }
  check_gpus_reach_each_other();
  finalized_ = true;
}

// GPUs do not forward, so two GPUs talk through a direct link or through the devices that are
// left when every GPU is removed. Let S(g) be the components (of that GPU-free graph) next to
// GPU g: a pair is joined when their sets meet or they are linked directly.
void Topology::check_gpus_reach_each_other() const {
  boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS> fabric(devices_.size());
  for (const Link& l : links_) {
    if (devices_[l.from.value].kind != DeviceKind::kGpu && devices_[l.to.value].kind != DeviceKind::kGpu) {
      boost::add_edge(l.from.value, l.to.value, fabric);
    }
  }
  std::vector<int> component(devices_.size());
  boost::connected_components(fabric, component.data());
  std::vector<std::vector<int>> near(gpus_.size());
  std::vector<size_t> rank_of(devices_.size(), SIZE_MAX);
  for (size_t i = 0; i < gpus_.size(); ++i) rank_of[gpus_[i].value] = i;
  for (size_t i = 0; i < gpus_.size(); ++i) {
    for (LinkId l : out_[gpus_[i].value]) {
      DeviceId to = links_[l.value].to;
      if (devices_[to.value].kind != DeviceKind::kGpu) near[i].push_back(component[to.value]);
    }
    std::sort(near[i].begin(), near[i].end());
    near[i].erase(std::unique(near[i].begin(), near[i].end()), near[i].end());
  }
  // Fast path: one component touches every GPU.
  for (int c : near[0]) {
    bool everywhere = std::all_of(near.begin(), near.end(), [c](const std::vector<int>& v) {
      return std::binary_search(v.begin(), v.end(), c);
    });
    if (everywhere) return;
  }
  for (size_t i = 0; i < gpus_.size(); ++i) {
    std::vector<bool> direct(gpus_.size(), false);
    for (LinkId l : out_[gpus_[i].value]) {
      size_t r = rank_of[links_[l.value].to.value];
      if (r != SIZE_MAX) direct[r] = true;
    }
    for (size_t j = i + 1; j < gpus_.size(); ++j) {
      std::vector<int> common;
      std::set_intersection(near[i].begin(), near[i].end(), near[j].begin(), near[j].end(),
                            std::back_inserter(common));
      if (common.empty() && !direct[j]) {
        throw std::invalid_argument("GPU \"" + devices_[gpus_[i].value].name + "\" reaches \"" +
                                    devices_[gpus_[j].value].name +
                                    "\" only through another GPU (GPUs do not forward traffic)");
      }
    }
  }
}

}  // namespace parallax
