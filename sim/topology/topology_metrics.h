// Figures that describe a topology as a whole: link classes, per-GPU injection bandwidth,
// bisection bandwidth and diameter, and a Graphviz rendering.
//
// Bisection bandwidth here is the maximum flow, in one direction, from the first half of the
// GPUs (in rank order: by node, then local index) to the second half, with every directed link
// at its capacity and GPUs allowed only as sources (first half) or sinks (second half), never
// as relays. For the symmetric fabrics of the compact form, that split is the worst balanced
// cut; for hand-written graphs it is the cut between the first and second halves of the ranks.
#pragma once

#include <string>
#include <vector>

#include "topology/router.h"
#include "topology/topology.h"

namespace parallax {

struct LinkClassSummary {
  LinkClass link_class;
  Bandwidth bandwidth;  ///< per direction
  Time latency;
  size_t cables = 0;    ///< full-duplex pairs (two directed links each)
};

struct InjectionBandwidth {
  Bandwidth scale_up;   ///< sum of a GPU's links to its scale-up fabric (NVLink, PCIe peers)
  Bandwidth scale_out;  ///< the node's network uplinks divided by its GPUs; 0 on one node
};

/// Groups cables by (class, bandwidth, latency), in order of first appearance.
std::vector<LinkClassSummary> summarize_links(const Topology& topo);
/// Per-GPU injection, the minimum over GPUs (they are alike in a compact topology).
InjectionBandwidth injection_bandwidth(const Topology& topo);
/// One-direction max flow between the halves of the GPUs (Boost's push-relabel).
Bandwidth bisection_bandwidth(const Topology& topo);
/// The largest hop count between two GPUs on shortest non-GPU-transit paths.
int gpu_diameter(const Topology& topo);
/// Graphviz DOT: one cluster per node, fabric switches outside, one edge per cable labelled
/// with its bandwidth per direction.
std::string to_dot(const Topology& topo);

}  // namespace parallax
