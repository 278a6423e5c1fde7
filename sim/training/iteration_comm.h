// The communication of a training iteration's simulated ranks (internal to iteration.cpp):
// what each stage sends per micro-batch and layer — TP/SP collectives, the vocabulary-parallel
// ends, PP sends, CP ring passes or Ulysses all-to-alls, EP dispatch and combine — and per
// gradient bucket (DP/ZeRO reductions and gathers), each timed on its group alone (analytical
// closed forms by default, CollectiveSimulator), slowed by what the sibling replicas put on
// the links they share (sibling_contention.h), and carrying its calls for the co-simulation.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "collectives/collective_simulator.h"
#include "model/model_config.h"
#include "topology/topology.h"
#include "training/cosimulation.h"
#include "training/iteration.h"
#include "training/iteration_units.h"
#include "training/parallel_layout.h"

namespace parallax::iteration_detail {

/// One communication task of a rank: its time alone, the bytes it sends, the collectives it
/// counts, whether its group spans nodes, the share of the GPU's NVLink it keeps busy if it
/// does, the SMs its kernels hold, and what it runs.
struct CommTask {
  Time time;
  Bytes sent;
  int collectives = 0;
  bool across_nodes = false;  ///< its group spans nodes: it goes through the NICs
  int sms = 0;                ///< SMs its kernels hold (NCCL channels), the most of its parts
  CallPhases calls;           ///< what it runs, for the co-simulation (cosimulation.h)
  /// Across nodes, with other ranks of its group on this GPU's node: the share of the GPU's
  /// scale-up bandwidth (one direction) that its hops to them take while it runs, in [0, 1].
  double scale_up_load = 0;
};

/// Of `groups` equal groups of an EP group's `experts` (ranks, or nodes), how many hold at least
/// one of a token's `top_k` experts, routed uniformly without repeats: g·(1 − C(E − E/g, k)/C(E, k));
/// 1 for one group. What DeepEP and HybridEP send a token to, once each.
double groups_reached(int experts, int groups, int top_k);

/// Both, one after the other.
CommTask twice(CommTask c);
CommTask plus(CommTask a, CommTask b);
/// Both at once (their calls in the same phases, co-simulated).
CommTask beside(CommTask a, CommTask b);
/// The share `f` of a task's time and bytes (its collectives counted once, in the f ≥ ½ part);
/// co-simulated, each of its collectives at f of its size (a chunk of it).
CommTask share(CommTask c, double f);

// Times collectives on groups of global ranks, alone, on the simulators of their shapes.
class CollectiveTimer {
 public:
  CollectiveTimer(CollectiveSimulatorCache& simulators, const IterationOptions& options)
      : simulators_(simulators), options_(options) {}

  /// The collective's time and the NCCL channels it runs on (one SM each).
  struct Timing {
    Time time;
    int channels = 0;
  };
  Timing timing(CollectiveOp op, Bytes size, const std::vector<int>& ranks) {
    if (options_.free_communication || ranks.size() < 2 || size.value() <= 0) return {};
    const auto shape = simulators_.shape_of(ranks);
    auto key = std::make_tuple(shape.first, shape.second, static_cast<int>(op), size.value());
    if (auto it = times_.find(key); it != times_.end()) return it->second;
    CollectiveOptions co;
    co.model = options_.collective_model;
    const CollectiveResult r = simulators_.for_group(ranks).run(op, size, co);
    const Timing t{r.time, r.channels};
    times_[key] = t;
    return t;
  }

  /// The group's shape: its size and the most of its ranks on one node.
  std::pair<int, int> shape_of(const std::vector<int>& ranks) const { return simulators_.shape_of(ranks); }

  /// Where the group's collectives are timed: its shape placed from the first node on.
  std::vector<DeviceId> placement(const std::vector<int>& ranks) const {
    const auto [n, per_node] = simulators_.shape_of(ranks);
    return place_ranks(simulators_.topology(), n, per_node).devices();
  }

 private:
  CollectiveSimulatorCache& simulators_;
  const IterationOptions& options_;
  std::map<std::tuple<int, int, int, double>, Timing> times_;
};

/// Bytes one GPU sends in a bandwidth-optimal collective of nccl-tests size S over n ranks.
Bytes bytes_sent(CollectiveOp op, int n, Bytes size);

class CommunicationPlan {
 public:
  /// `every_replica`: the siblings are played in the co-simulation, not folded in as slowdowns.
  /// `simulators` is of `topo`.
  CommunicationPlan(const ModelConfig& model, const ParallelLayout& layout, const Topology& topo,
                    const IterationOptions& options, const StagePlan& plan, bool every_replica,
                    CollectiveSimulatorCache& simulators);

  /// A bucket's gradient reduction (all-reduce under ZeRO 0, else reduce-scatter) and its
  /// parameter all-gather, over the DP group, plus the expert-DP group for its experts.
  /// Asked once per layer and micro-batch, each answered once per stage and kind of unit.
  const CommTask& gradient_reduction(int s, const Unit& u);
  const CommTask& parameter_gather(int s, const Unit& u);

  // Per stage: a transformer layer's TP collectives (forward, backward; a MoE layer's with its
  // experts' TP group, the same unless expert_tp ≠ tp), the ends', the PP
  // sends to the next and previous stage, EP dispatch+combine, the backward of a fully
  // recomputed layer (its forward's collectives again, then the backward's), the backward of a
  // layer under op-level checkpointing (each block's input gathered again, then the backward's),
  // one ring-attention step, and Ulysses' two all-to-alls. A hybrid model's single-block layers
  // (LayerKind) have one block's: `block_tp_*` (Mamba, attention or MLP) and `moe_block_tp_*`.
  std::vector<CommTask> tp_forward, tp_backward, moe_tp_forward, moe_tp_backward, embedding_tp_forward, embedding_tp_backward, output_tp_forward,
      output_tp_backward, pp_send_forward, pp_send_backward, ep_forward, ep_backward, tp_recomputed_backward,
      moe_tp_recomputed_backward, ep_recomputed_backward, tp_op_checkpointed_backward, cp_ring_step, cp_scatter_heads,
      cp_gather_heads, block_tp_forward, block_tp_recomputed_backward, moe_block_tp_forward,
      moe_block_tp_recomputed_backward, moe_module_recomputed_backward;
  /// The TP collectives of unit `u`'s pass on stage s: forward, a fully recomputed layer's
  /// backward, an op-checkpointed layer's backward, a backward whose MoE block is recomputed
  /// (`moe_recomputed`: its block's collectives again first), or the plain backward.
  const CommTask& layer_tp(int s, const Unit& u, bool forward, bool recomputed, bool op_checkpointed,
                           bool moe_recomputed) const;
  /// The largest sibling slowdown applied per stage and kind, for the report.
  std::vector<std::array<double, kWorkKinds>> slowdown_of;

  /// Everything of the plan that the graph builder reads, but the calls (which name the ranks):
  /// every task's time, bytes, collectives, node span and SMs, the slowdowns, and what the
  /// per-unit gradient tasks are timed from (the DP and expert-DP groups' shapes and slowdowns).
  /// Two plans of one model and layout (rank order aside) with equal signatures build the same
  /// graph without co-simulation (iteration_memo.h).
  std::vector<double> timing_signature() const;

 private:
  CommTask collective(CollectiveOp op, Bytes size, const std::vector<int>& group, double slowdown = 1.0);
  CommTask per_bucket(int s, const Unit& u, CollectiveOp op, double bytes_per_parameter);
  CommTask gather_parameters(int s, const Unit& u);
  // (stage, reduction or gather, the unit's parameters, its experts', transformer layer or not)
  std::map<std::tuple<int, bool, double, double, bool>, CommTask> per_unit_;
  bool spans_nodes(const std::vector<int>& group) const;
  double scale_up_load(CollectiveOp op, const std::vector<int>& group, const CommTask& c) const;
  std::optional<CommTask> flex_dispatch(int rank, const std::vector<int>& ep_group, Bytes tokens, int experts,
                                        int top_k, double load, double processed);

  const Topology& topo_;
  const ParallelLayout& layout_;
  CollectiveTimer timer_;
  std::vector<std::vector<int>> dp_group_, expert_dp_group_;
  std::vector<double> dp_slowdown_, expert_dp_slowdown_;
  /// Hybrid sharding (ParallelLayout::dp_shard): each stage's shard group (the dp_shard nearest
  /// of its DP ranks) and replica group (its peers in the other shard groups); empty otherwise.
  std::vector<std::vector<int>> shard_group_, replica_group_;
  std::vector<double> shard_slowdown_, replica_slowdown_;
  double scale_up_bandwidth_ = 0;  ///< bytes/s one GPU's NVLink carries in one direction, as collectives see it
  /// With param_gather_per_tensor: each parameter tensor's share of a dense transformer layer.
  std::vector<double> layer_tensor_shares_;
};

}  // namespace parallax::iteration_detail
