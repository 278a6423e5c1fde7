#include "topology/topology_metrics.h"

#include <algorithm>
#include <map>
#include <sstream>

#include <boost/graph/push_relabel_max_flow.hpp>

#include "units/unit_parse.h"

namespace parallax {

std::vector<LinkClassSummary> summarize_links(const Topology& topo) {
  std::vector<LinkClassSummary> out;
  for (uint32_t i = 0; i < topo.link_count(); ++i) {
    const Link& l = topo.link(LinkId{i});
    if (l.reverse.value < i) continue;  // count each cable once
    auto it = std::find_if(out.begin(), out.end(), [&](const LinkClassSummary& s) {
      return s.link_class == l.link_class && s.bandwidth == l.bandwidth && s.latency == l.latency;
    });
    if (it == out.end()) out.push_back({l.link_class, l.bandwidth, l.latency, 1});
    else ++it->cables;
  }
  return out;
}

InjectionBandwidth injection_bandwidth(const Topology& topo) {
  InjectionBandwidth best{Bandwidth(1e300), Bandwidth(1e300)};
  for (DeviceId g : topo.gpus()) {
    Bandwidth up;
    for (LinkId l : topo.out_links(g)) {
      const Link& link = topo.link(l);
      // A GPU's own NIC attach link is its path out of the node, not scale-up.
      if (topo.device(link.to).kind != DeviceKind::kNic) up += link.bandwidth;
    }
    best.scale_up = std::min(best.scale_up, up);
  }
  std::vector<Bandwidth> node_out(static_cast<size_t>(topo.node_count()));
  bool any_network = false;
  for (uint32_t i = 0; i < topo.link_count(); ++i) {
    const Link& l = topo.link(LinkId{i});
    const Device& from = topo.device(l.from);
    if (from.kind == DeviceKind::kNic && l.link_class == LinkClass::kNetwork && from.node >= 0) {
      node_out[static_cast<size_t>(from.node)] += l.bandwidth;
      any_network = true;
    }
  }
  if (!any_network) {
    best.scale_out = Bandwidth(0);
  } else {
    for (int n = 0; n < topo.node_count(); ++n) {
      double per_gpu = node_out[static_cast<size_t>(n)].value() / static_cast<double>(topo.gpus_of_node(n).size());
      best.scale_out = std::min(best.scale_out, Bandwidth(per_gpu));
    }
  }
  return best;
}

Bandwidth bisection_bandwidth(const Topology& topo) {
  using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
  using FlowGraph = boost::adjacency_list<
      boost::vecS, boost::vecS, boost::directedS, boost::no_property,
      boost::property<boost::edge_capacity_t, double,
                      boost::property<boost::edge_residual_capacity_t, double,
                                      boost::property<boost::edge_reverse_t, Traits::edge_descriptor>>>>;
  size_t n = topo.device_count();
  FlowGraph g(n + 2);
  auto capacity = boost::get(boost::edge_capacity, g);
  auto reverse = boost::get(boost::edge_reverse, g);
  auto add = [&](size_t u, size_t v, double c) {
    auto e = boost::add_edge(u, v, g).first;
    auto r = boost::add_edge(v, u, g).first;
    capacity[e] = c;
    capacity[r] = 0.0;
    reverse[e] = r;
    reverse[r] = e;
  };
  auto gpus = topo.gpus();
  size_t half = gpus.size() / 2;
  if (half == 0) return Bandwidth(0);
  // side: 0 = not a GPU, 1 = source half, 2 = sink half (an odd GPU out is neither).
  std::vector<int> side(n, 0);
  for (size_t i = 0; i < 2 * half; ++i) side[gpus[i].value] = i < half ? 1 : 2;
  for (size_t i = 2 * half; i < gpus.size(); ++i) side[gpus[i].value] = 3;
  double total_out = 0;
  for (uint32_t i = 0; i < topo.link_count(); ++i) {
    const Link& l = topo.link(LinkId{i});
    int from = side[l.from.value], to = side[l.to.value];
    bool from_ok = topo.device(l.from).kind != DeviceKind::kGpu ? true : from == 1;
    bool to_ok = topo.device(l.to).kind != DeviceKind::kGpu ? true : to == 2;
    if (from_ok && to_ok) add(l.from.value, l.to.value, l.bandwidth.value());
    if (from == 1) total_out += l.bandwidth.value();
  }
  size_t source = n, sink = n + 1;
  for (size_t i = 0; i < half; ++i) add(source, gpus[i].value, total_out + 1.0);
  for (size_t i = half; i < 2 * half; ++i) add(gpus[i].value, sink, total_out + 1.0);
  double flow = boost::push_relabel_max_flow(g, source, sink);
  return Bandwidth(flow);
}

int gpu_diameter(const Topology& topo) {
  int worst = 0;
  const HopDistances distances(topo);
  for (DeviceId dst : topo.gpus()) {
    // One BFS per destination, not cached: a Router's cache would hold them all at once.
    auto dist = distances.to(dst);
    for (DeviceId src : topo.gpus()) worst = std::max(worst, static_cast<int>(dist[src.value]));
  }
  return worst;
}

std::string to_dot(const Topology& topo) {
  std::ostringstream out;
  auto id = [](DeviceId d) { return std::string("d").append(std::to_string(d.value)); };
  out << "graph \"" << topo.info().name << "\" {\n  graph [rankdir=TB, fontname=\"Helvetica\"];\n"
      << "  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=8];\n";
  std::map<int, std::vector<DeviceId>> by_node;
  for (uint32_t i = 0; i < topo.device_count(); ++i) by_node[topo.device(DeviceId{i}).node].push_back(DeviceId{i});
  for (const auto& [node, devices] : by_node) {
    std::string indent = "  ";
    if (node >= 0) {
      out << "  subgraph cluster_n" << node << " {\n    label=\"node " << node << "\";\n";
      indent = "    ";
    }
    for (DeviceId d : devices) {
      const Device& dev = topo.device(d);
      const char* shape = dev.kind == DeviceKind::kGpu ? "box" : dev.kind == DeviceKind::kNic ? "ellipse"
                                                                                         : "hexagon";
      const char* color = dev.kind == DeviceKind::kGpu ? "#76b900" : dev.kind == DeviceKind::kNic ? "#9ecae1"
                                                                                            : "#dddddd";
      out << indent << id(d) << " [label=\"" << dev.name << "\", shape=" << shape
          << ", style=filled, fillcolor=\"" << color << "\"];\n";
    }
    if (node >= 0) out << "  }\n";
  }
  for (uint32_t i = 0; i < topo.link_count(); ++i) {
    const Link& l = topo.link(LinkId{i});
    if (l.reverse.value < i) continue;
    out << "  " << id(l.from) << " -- " << id(l.to) << " [label=\"" << format_bandwidth(l.bandwidth)
        << "\", tooltip=\"" << to_string(l.link_class) << "\"];\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace parallax
