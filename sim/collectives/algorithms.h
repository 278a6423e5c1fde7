// Collective algorithms lowered to transfer graphs: NCCL's ring, double binary tree, NVLS and
// CollNet (SHARP) patterns, and the MPI-style recursive halving-doubling, recursive doubling,
// pairwise and direct exchanges, plus the hierarchical all-reduce. Each algorithm states the
// bytes every rank sends at every step; the network model decides how long they take.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "collectives/transfer_graph.h"
#include "topology/router.h"
#include "topology/topology.h"

namespace parallax {

/// The ranks of a collective: GPUs in rank order, grouped by node in order of appearance.
class Communicator {
 public:
  /// Throws std::invalid_argument for an empty list, a non-GPU or a GPU listed twice.
  Communicator(const Topology& topo, std::vector<DeviceId> ranks);

  int size() const { return static_cast<int>(ranks_.size()); }
  DeviceId device(int rank) const { return ranks_[static_cast<size_t>(rank)]; }
  const std::vector<DeviceId>& devices() const { return ranks_; }
  /// Ranks of each node, in rank order; nodes in order of their first rank.
  const std::vector<std::vector<int>>& nodes() const { return nodes_; }
  int node_count() const { return static_cast<int>(nodes_.size()); }
  int node_of(int rank) const { return node_of_[static_cast<size_t>(rank)]; }
  /// True when every node holds the same number of ranks.
  bool uniform() const;
  /// Ranks per node (the largest, when not uniform).
  int ranks_per_node() const;
  const Topology& topology() const { return topo_; }

 private:
  const Topology& topo_;
  std::vector<DeviceId> ranks_;
  std::vector<std::vector<int>> nodes_;
  std::vector<int> node_of_;
};

/// `gpus` ranks on the topology's GPUs, filling node after node with at most `per_node` ranks
/// each (mpirun -npernode). Throws std::invalid_argument when the topology has too few GPUs.
Communicator place_ranks(const Topology& topo, int gpus, std::optional<int> per_node = std::nullopt);

struct LoweringOptions {
  int channels = 1;             ///< parallel rings / trees over distinct links where the topology has them
  Time base_latency;            ///< once per collective, before its first step (NCCL baseLatencies)
  Time step_latency_intra;      ///< software latency of a step within a node (NCCL hwLatencies)
  Time step_latency_inter;      ///< ... of a step that crosses nodes
  double wire_efficiency = 1.0; ///< payload fraction of the bytes on the wire (protocol)
  double switch_reduction_efficiency = 1.0;  ///< NVLS / SHARP achievable fraction of the link rate
  enum class Granularity { kAuto, kSteps, kPipelined };
  /// kSteps: one transfer per rank, step and channel, each waiting for the data it forwards.
  /// kPipelined: one transfer per ring edge carrying all its steps' bytes, with the per-step
  /// latencies as its wait: the steady state of NCCL's slice pipeline, exact on an idle ring and
  /// n× fewer transfers. kAuto takes steps up to `max_step_transfers`.
  Granularity granularity = Granularity::kAuto;
  size_t max_step_transfers = 50'000;
  Bytes pipeline_chunk = Bytes(512 * 1024);  ///< chunk of chain and tree pipelines (NCCL Simple step)
  int max_pipeline_chunks = 64;
};

struct CollectiveSpec {
  CollectiveOp op = CollectiveOp::kAllReduce;
  Algorithm algorithm = Algorithm::kRing;
  /// nccl-tests' size: per-rank buffer for all-reduce, broadcast, reduce and send/recv; the
  /// total buffer (n × per-rank) for all-gather, reduce-scatter and all-to-all.
  Bytes size;
  int root = 0;
  /// all-to-all-v: bytes[i][j] from rank i to rank j (overrides `size` when not empty).
  std::vector<std::vector<double>> matrix;
};

/// Why `algo` cannot run `op` on `comm`, or nullopt when it can. `router` must route
/// comm.topology() (NVLS and CollNet look for a reduction-capable switch on the paths).
std::optional<std::string> unsupported_reason(CollectiveOp op, Algorithm algo, const Communicator& comm,
                                              const Router& router);

/// The transfer graph of one collective. Throws std::invalid_argument with the reason when
/// the algorithm cannot run the operation here (see unsupported_reason).
TransferGraph lower_collective(const CollectiveSpec& spec, const Communicator& comm, const Router& router,
                               const LoweringOptions& options);

/// The ring of channel `c`: nodes in order; inside each node the ranks rotated by c (by c·k where
/// k of the node's ranks share each of their NICs, so that channels take turns on the NICs), and
/// every other node reversed, so that the ring leaves and enters nodes on the same rail.
std::vector<int> ring_order(const Communicator& comm, int channel);

}  // namespace parallax
