// The training co-simulation's network side: every collective of an iteration lowered to flows
// on the GPUs of its own group, on one shared copy of the topology (its links scaled by the
// collectives' efficiencies, as CollectiveSimulator scales its own), so that the stream graph
// can play them all on one network model (stream_graph.h) and concurrent TP, CP, EP, PP and DP
// traffic shares the links it really shares. A communication task is a sequence of phases,
// each a set of collectives that run at once (a ring-attention step: every rank passes its
// block together); phase k + 1 starts when phase k's last transfer lands.
//
// Algorithm, protocol and channels are NCCL's choice for the group's shape (its size and ranks
// per node), as in isolation; only the placement and the sharing differ — and, to keep the flow
// count down, rings are lowered pipelined (one transfer per edge, the steps' latencies as its
// wait) and a group inside one node on one channel (every channel there crosses the same GPU
// ports, so the bytes per port are the same).
#pragma once

#include <map>
#include <optional>
#include <memory>
#include <tuple>
#include <vector>

#include "collectives/collective_simulator.h"
#include "collectives/transfer_graph.h"
#include "topology/router.h"
#include "topology/topology.h"

namespace parallax {

/// One collective of a task: nccl-tests size, over global ranks (indices into the topology's GPUs).
/// `one_way` (send/recv of two ranks only): group[0] sends to group[1] and not back (a pipeline
/// send, a ring-attention pass), where nccl-tests' send/recv has every rank send.
struct CollectiveCall {
  CollectiveOp op = CollectiveOp::kAllReduce;
  Bytes size;
  std::vector<int> group;
  bool one_way = false;
};
using CallPhases = std::vector<std::vector<CollectiveCall>>;

class CoSimulation {
 public:
  /// On the topology of `simulators`, with its link efficiencies; NCCL's choices come from them.
  explicit CoSimulation(CollectiveSimulatorCache& simulators);

  /// The task's transfers, the phases chained; cached by content. Groups of fewer than two
  /// ranks and empty sizes contribute nothing.
  std::shared_ptr<const TransferGraph> transfers(const CallPhases& phases);

  /// The link that bounds `transfers` alone: the one where its bytes over the link's rate are
  /// largest (what stays busiest if nothing else ran); nullopt for a graph without transfers.
  std::optional<LinkId> bottleneck(const TransferGraph& transfers);

  const Topology& topology() const { return *topo_; }
  const Router& router() const { return *router_; }

 private:
  const TransferGraph& lowered(const CollectiveCall& call);

  CollectiveSimulatorCache& simulators_;
  std::unique_ptr<Topology> topo_;
  std::unique_ptr<Router> router_;
  using CallKey = std::tuple<int, double, std::vector<int>, bool>;
  std::map<CallKey, TransferGraph> calls_;
  std::map<std::vector<CallKey>, std::shared_ptr<const TransferGraph>> tasks_;
  std::map<const TransferGraph*, std::optional<LinkId>> bottlenecks_;
};

}  // namespace parallax
