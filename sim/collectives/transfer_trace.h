// Chrome / Perfetto trace (JSON "traceEvents") of one executed transfer graph: a track per GPU
// (what it sent, per channel and step) and a track per busy link (which transfers crossed it).
// Overlapping transfers on one GPU or link go to separate lanes so that every track nests.
#pragma once

#include <string>
#include <vector>

#include "collectives/transfer_graph.h"
#include "topology/router.h"
#include "topology/topology.h"

namespace parallax {

/// The trace as JSON text; times in µs from the graph's start. `title` names the process.
std::string transfer_trace_json(const Topology& topo, const Router& router, const TransferGraph& graph,
                                const std::vector<TaskTiming>& timings, const std::string& title);

}  // namespace parallax
