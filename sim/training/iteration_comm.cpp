// The communication of a training iteration's simulated ranks (iteration_comm.h).
#include "training/iteration_comm.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "collectives/sibling_contention.h"
#include "engine/invariant.h"
#include "model/parameter_count.h"
#include "training/iteration_memory.h"

namespace parallax::iteration_detail {
namespace {

CallPhases concatenated(CallPhases a, const CallPhases& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Each parameter tensor's share of a dense transformer layer: the fused QKV and the output
// projection (by their sizes), the MLP's matrices (gate, up, down or fc1, fc2: equal), and
// the biases and norm gains, evenly over their count.
std::vector<double> dense_layer_tensor_shares(const ModelConfig& model) {
  const LayerParameterCounts counts = layer_parameters(model, 0);
  const double total = static_cast<double>(counts.total());
  if (!(total > 0) || model.mla) return {};
  const double qkv = static_cast<double>(model.hidden) * static_cast<double>(model.qkv_projection_width());
  const double proj = static_cast<double>(model.heads) * model.head_dim * model.hidden;
  std::vector<double> shares;
  for (double m : {qkv, proj}) shares.push_back(static_cast<double>(counts.attention) * m / (qkv + proj) / total);
  const int mlp_matrices = model.mlp == MlpKind::kGated ? 3 : 2;
  for (int i = 0; i < mlp_matrices; ++i) shares.push_back(static_cast<double>(counts.mlp) / mlp_matrices / total);
  const int vectors = (model.qkv_bias ? 1 : 0) + (model.attention_output_bias ? 1 : 0) + (model.mlp_bias ? mlp_matrices : 0) +
                      2 * (model.norm == NormKind::kLayerNorm ? 2 : 1) + (model.qk_norm ? 2 : 0);
  for (int i = 0; i < vectors && counts.vectors > 0; ++i) {
    shares.push_back(static_cast<double>(counts.vectors) / vectors / total);
  }
  return shares;
}

// The seconds of NVLink that two tasks' scale-up loads amount to.
double scale_up_seconds(const CommTask& a, const CommTask& b) {
  return a.scale_up_load * a.time.seconds() + b.scale_up_load * b.time.seconds();
}

}  // namespace

double groups_reached(int experts, int groups, int top_k) {
  if (groups < 2) return 1.0;
  const double e = static_cast<double>(experts), per_group = e / groups;
  double miss = 1.0;  // C(E − E/g, k) / C(E, k)
  for (int i = 0; i < top_k; ++i) miss *= std::max(0.0, e - per_group - i) / (e - i);
  return groups * (1.0 - miss);
}

CommTask twice(CommTask c) {
  return CommTask{c.time + c.time, c.sent + c.sent, 2 * c.collectives, c.across_nodes, c.sms,
                  concatenated(c.calls, c.calls), c.scale_up_load};
}

CommTask plus(CommTask a, CommTask b) {
  // One after the other: the load is the parts' average over the time they take.
  const double total = a.time.seconds() + b.time.seconds();
  const double load = total > 0 ? scale_up_seconds(a, b) / total : 0.0;
  return CommTask{a.time + b.time, a.sent + b.sent, a.collectives + b.collectives, a.across_nodes || b.across_nodes,
                  std::max(a.sms, b.sms), concatenated(a.calls, b.calls), load};
}

CommTask beside(CommTask a, CommTask b) {
  // At once: the slower sets the time; the load is both parts' NVLink time over it.
  const Time time = std::max(a.time, b.time);
  const double load = time > Time::zero() ? std::min(1.0, scale_up_seconds(a, b) / time.seconds()) : 0.0;
  CallPhases calls = std::move(a.calls);
  calls.resize(std::max(calls.size(), b.calls.size()));
  for (size_t i = 0; i < b.calls.size(); ++i) calls[i].insert(calls[i].end(), b.calls[i].begin(), b.calls[i].end());
  return CommTask{time, a.sent + b.sent, a.collectives + b.collectives, a.across_nodes || b.across_nodes,
                  a.sms + b.sms, std::move(calls), load};
}

CommTask share(CommTask c, double f) {
  for (auto& phase : c.calls) {
    for (CollectiveCall& call : phase) call.size = call.size * f;
  }
  return CommTask{Time::from_seconds(c.time.seconds() * f), c.sent * f, f >= 0.5 ? c.collectives : 0, c.across_nodes,
                  c.sms, std::move(c.calls), c.scale_up_load};
}

Bytes bytes_sent(CollectiveOp op, int n, Bytes size) {
  const double share = static_cast<double>(n - 1) / n;
  switch (op) {
    case CollectiveOp::kAllReduce: return size * (2.0 * share);
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllToAll: return size * share;
    default: return size;
  }
}

bool CommunicationPlan::spans_nodes(const std::vector<int>& group) const {
  auto node = [&](int r) { return topo_.device(topo_.gpus()[static_cast<size_t>(r)]).node; };
  return std::any_of(group.begin(), group.end(), [&](int r) { return node(r) != node(group.front()); });
}

// DeepEP / HybridEP (MoeDispatcher::kFlex) over an EP group on n nodes of g ranks each: a
// token goes once to each other node holding one of its top-k experts — with the experts spread
// evenly, P(a node is hit) = 1 − C(E − E/n, k) / C(E, k) — over the rail group (this rank's peers
// at its place on every node), and over the node's NVLink once to each GPU holding one of its
// experts (groups_reached over the group's n·g ranks; the receiver permutes it into its experts'
// slots). One kernel forwards what arrives by RDMA over NVLink while
// more arrives (DeepEP's "NVLink and RDMA forwarding", whose throughput it gives as the
// bottleneck domain's bandwidth): the two stages run at once. `load` scales what the busiest
// rank receives; nullopt when the nodes hold unequal shares of the group (the flat all-to-all
// then stands).
std::optional<CommTask> CommunicationPlan::flex_dispatch(int rank, const std::vector<int>& ep_group, Bytes tokens,
                                                         int experts, int top_k, double load, double processed) {
  auto node = [&](int r) { return topo_.device(topo_.gpus()[static_cast<size_t>(r)]).node; };
  std::map<int64_t, std::vector<int>> by_node;
  for (int r : ep_group) by_node[static_cast<int64_t>(node(r))].push_back(r);
  const std::vector<int>& local = by_node.at(static_cast<int64_t>(node(rank)));
  for (const auto& [n, ranks] : by_node) {
    if (ranks.size() != local.size()) return std::nullopt;
  }
  const auto place = static_cast<size_t>(std::find(local.begin(), local.end(), rank) - local.begin());
  std::vector<int> rail;
  for (const auto& [n, ranks] : by_node) rail.push_back(ranks[place]);
  const Bytes across = tokens * groups_reached(experts, static_cast<int>(by_node.size()), top_k);
  const Bytes inside = tokens * groups_reached(experts, static_cast<int>(ep_group.size()), top_k);
  CommTask a = collective(CollectiveOp::kAllToAll, across * load, rail);
  CommTask b = collective(CollectiveOp::kAllToAll, inside * load, local);
  a.sent = bytes_sent(CollectiveOp::kAllToAll, static_cast<int>(rail.size()), across * processed);
  b.sent = bytes_sent(CollectiveOp::kAllToAll, static_cast<int>(local.size()), inside * processed);
  return beside(a, b);
}

CommTask CommunicationPlan::collective(CollectiveOp op, Bytes size, const std::vector<int>& group, double slowdown) {
  const int n = static_cast<int>(group.size());
  if (n < 2) return CommTask{};
  const CollectiveTimer::Timing timed = timer_.timing(op, size * slowdown, group);
  CommTask c{timed.time, bytes_sent(op, n, size), 1, spans_nodes(group), timed.channels,
             CallPhases{{CollectiveCall{op, size * slowdown, group}}}};
  if (c.across_nodes) c.scale_up_load = scale_up_load(op, group, c);
  return c;
}

// A collective across nodes also runs over NVLink wherever its group has several ranks on a
// node: a ring's hop to a rank of the same node (k − 1 of every k, channels taking turns on
// the NICs), an all-to-all's chunks to the k − 1 local peers of its n − 1. That traffic, over
// the collective's time, is the share of the GPU's NVLink it takes from the TP (or CP, EP)
// collectives beside it: on a 72-GPU rack, a data-parallel ring crossing racks runs near
// NVLink speed, on an 8-GPU node with a NIC per GPU at most the NICs' rate.
double CommunicationPlan::scale_up_load(CollectiveOp op, const std::vector<int>& group, const CommTask& c) const {
  const auto [n, k] = timer_.shape_of(group);
  if (k < 2 || c.time <= Time::zero() || !(scale_up_bandwidth_ > 0)) return 0.0;
  const double local_share = op == CollectiveOp::kAllToAll ? static_cast<double>(k - 1) / (n - 1)
                                                            : static_cast<double>(k - 1) / k;
  return std::min(1.0, c.sent.value() * local_share / (c.time.seconds() * scale_up_bandwidth_));
}

CommTask CommunicationPlan::per_bucket(int s, const Unit& u, CollectiveOp op, double bytes_per_parameter) {
  const size_t i = static_cast<size_t>(s);
  const Bytes dense((u.parameters - u.expert_parameters) * bytes_per_parameter);
  CommTask c;
  if (!shard_group_[i].empty() && op != CollectiveOp::kAllReduce) {
    // Hybrid sharding: the shard group reduce-scatters (all-gathers) the states, and the
    // replicas then all-reduce each gradient shard, 1/dp_shard of the bucket.
    c = collective(op, dense, shard_group_[i], shard_slowdown_[i]);
    if (op == CollectiveOp::kReduceScatter) {
      c = plus(c, collective(CollectiveOp::kAllReduce, dense / static_cast<double>(shard_group_[i].size()),
                             replica_group_[i], replica_slowdown_[i]));
    }
  } else {
    c = collective(op, dense, dp_group_[i], dp_slowdown_[i]);
  }
  if (u.expert_parameters > 0) {
    c = plus(c, collective(op, Bytes(u.expert_parameters * bytes_per_parameter), expert_dp_group_[static_cast<size_t>(s)],
                           expert_dp_slowdown_[static_cast<size_t>(s)]));
  }
  return c;
}

const CommTask& CommunicationPlan::gradient_reduction(int s, const Unit& u) {
  auto [it, added] = per_unit_.try_emplace({s, true, u.parameters, u.expert_parameters, u.transformer_layer});
  if (added) {
    // Muon's layer-wise distributed optimizer leaves the gradients whole: Megatron's DDP
    // all-reduces them, and each rank updates the matrices it owns (layer_wise_optimizer.py).
    const bool whole = layout_.zero_stage == ZeroStage::kStage0 || layout_.optimizer == OptimizerKind::kMuon;
    it->second = per_bucket(s, u, whole ? CollectiveOp::kAllReduce : CollectiveOp::kReduceScatter, gradient_bytes(layout_));
  }
  return it->second;
}

const CommTask& CommunicationPlan::parameter_gather(int s, const Unit& u) {
  auto [it, added] = per_unit_.try_emplace({s, false, u.parameters, u.expert_parameters, u.transformer_layer});
  if (added) it->second = gather_parameters(s, u);
  return it->second;
}

CommTask CommunicationPlan::gather_parameters(int s, const Unit& u) {
  if (layer_tensor_shares_.empty() || !u.transformer_layer || u.expert_parameters > 0 ||
      layout_.zero_stage != ZeroStage::kStage3) {
    return per_bucket(s, u, CollectiveOp::kAllGather, parameter_bytes(layout_));
  }
  const size_t i = static_cast<size_t>(s);
  const bool hybrid = !shard_group_[i].empty();
  CommTask c;  // one all-gather per tensor, one after the other
  for (double share : layer_tensor_shares_) {
    c = plus(c, collective(CollectiveOp::kAllGather, Bytes(u.parameters * share * parameter_bytes(layout_)),
                           hybrid ? shard_group_[i] : dp_group_[i], hybrid ? shard_slowdown_[i] : dp_slowdown_[i]));
  }
  return c;
}

CommunicationPlan::CommunicationPlan(const ModelConfig& model, const ParallelLayout& layout, const Topology& topo,
                                     const IterationOptions& options, const StagePlan& plan, bool every_replica,
                                     CollectiveSimulatorCache& simulators)
    : tp_forward(static_cast<size_t>(layout.pp)), tp_backward(tp_forward.size()), moe_tp_forward(tp_forward.size()),
      moe_tp_backward(tp_forward.size()), embedding_tp_forward(tp_forward.size()),
      embedding_tp_backward(tp_forward.size()), output_tp_forward(tp_forward.size()), output_tp_backward(tp_forward.size()),
      pp_send_forward(tp_forward.size()), pp_send_backward(tp_forward.size()), ep_forward(tp_forward.size()),
      ep_backward(tp_forward.size()), tp_recomputed_backward(tp_forward.size()),
      moe_tp_recomputed_backward(tp_forward.size()), ep_recomputed_backward(tp_forward.size()),
      tp_op_checkpointed_backward(tp_forward.size()), cp_ring_step(tp_forward.size()), cp_scatter_heads(tp_forward.size()),
      cp_gather_heads(tp_forward.size()), slowdown_of(tp_forward.size()), topo_(topo), layout_(layout),
      timer_(simulators, options), dp_group_(tp_forward.size()), expert_dp_group_(tp_forward.size()),
      dp_slowdown_(tp_forward.size(), 1.0), expert_dp_slowdown_(tp_forward.size(), 1.0),
      shard_group_(tp_forward.size()), replica_group_(tp_forward.size()), shard_slowdown_(tp_forward.size(), 1.0),
      replica_slowdown_(tp_forward.size(), 1.0) {
  for (auto* per_stage : {&block_tp_forward, &block_tp_recomputed_backward, &moe_block_tp_forward,
                          &moe_block_tp_recomputed_backward, &moe_module_recomputed_backward}) {
    per_stage->resize(tp_forward.size());
  }
  // At the rate the collectives' own times assume (their links' NCCL figure, not line rate), so
  // that a ring as fast as NVLink lets it takes all of it.
  if (!topo.gpus().empty()) {
    for (LinkId l : topo.out_links(topo.gpus().front())) {
      if (topo.link(l).link_class == LinkClass::kNVLink) scale_up_bandwidth_ += topo.link(l).bandwidth.value();
    }
    scale_up_bandwidth_ *= link_efficiency_of(topo, simulators.efficiency()).nvlink;
  }
  if (layout.param_gather_per_tensor && layout.zero_stage == ZeroStage::kStage3) {
    layer_tensor_shares_ = dense_layer_tensor_shares(model);
  }
  const int p = layout.pp, t = layout.tp, cp = layout.cp;
  const RankMapping ranks(layout);
  const bool expert_parallel = layout.ep > 1;
  const bool folded_experts = layout.expert_tensor_parallel() != layout.tp;  // their own TP degree
  const bool ring_attention = cp > 1 && layout.cp_comm == ContextParallelComm::kRing;
  const int moe_layers = plan.moe_layers;
  const Routing& routing = plan.routing;
  const MessageSizes sizes = message_sizes(model, layout);
  const Bytes activation_message = sizes.activation;
  const Bytes pp_message = sizes.pp;
  // The T_sp tokens as a MoE's experts see them: a latent MoE dispatches them in its latent width.
  const Bytes expert_tokens = model.moe ? pp_message * (static_cast<double>(model.moe->expert_width(model.hidden)) /
                                                         static_cast<double>(model.hidden))
                                        : Bytes();
  const RankCoords replica = options.replica;
  if (replica.tp < 0 || replica.tp >= t || replica.cp < 0 || replica.cp >= cp || replica.dp < 0 ||
      replica.dp >= layout.dp) {
    throw std::invalid_argument("replica (tp " + std::to_string(replica.tp) + ", cp " + std::to_string(replica.cp) +
                                ", dp " + std::to_string(replica.dp) + ") is outside the layout");
  }
  auto stage_rank = [&](int s) { return ranks.rank_of(RankCoords{replica.tp, replica.cp, replica.dp, s}); };

  // Every replica runs the same collectives at the same moments, so the simulated replica's
  // are slowed by what its siblings put on the links they share, and by where the group
  // really sits rather than where its time was taken (sibling_contention.h). A collective
  // slowed n-fold is timed as one of n times the bytes: latency-bound sizes barely change.
  SiblingContention* contention = nullptr;
  if (options.replica_contention && !options.free_communication) {
    PARALLAX_INVARIANT(&simulators.topology() == &topo, "training/iteration_comm", Time::zero(),
                       "the collective simulators are of another topology than the iteration's");
    contention = &simulators.sibling_contention();
  }
  // The slowdown of `own`, stage s's group of the simulated replica, among the groups that
  // `group_of` gives every rank of stage s (each group once).
  auto sibling_slowdown = [&](int s, const std::vector<int>& own, const auto& group_of, TrafficPattern pattern) {
    if (every_replica) return 1.0;  // the siblings' flows are played, not folded in
    if (!contention || contention->non_blocking() || own.size() < 2) return 1.0;  // no groups to build
    std::map<int, std::vector<int>> by_lowest_rank;
    for (int tp_rank = 0; tp_rank < t; ++tp_rank) {
      for (int c = 0; c < cp; ++c) {
        for (int d = 0; d < layout.dp; ++d) {
          std::vector<int> group = group_of(ranks.rank_of(RankCoords{tp_rank, c, d, s}));
          const int lowest = *std::min_element(group.begin(), group.end());
          by_lowest_rank.emplace(lowest, std::move(group));
        }
      }
    }
    const int own_lowest = *std::min_element(own.begin(), own.end());
    std::vector<std::vector<DeviceId>> groups;
    size_t own_index = 0;
    for (const auto& [lowest, group] : by_lowest_rank) {
      if (lowest == own_lowest) own_index = groups.size();
      std::vector<DeviceId> devices;
      for (int r : group) devices.push_back(topo.gpus()[static_cast<size_t>(r)]);
      groups.push_back(std::move(devices));
    }
    return contention->slowdown(groups, own_index, timer_.placement(own), pattern);
  };

  const Bytes kv_block = sizes.kv_block;
  const Bytes ulysses_qkv = sizes.ulysses_qkv;
  const Bytes ulysses_output = sizes.ulysses_output;
  for (auto& kinds : slowdown_of) kinds.fill(1.0);
  auto note_slowdown = [&](int s, WorkKind kind, double slowdown) {
    double& worst = slowdown_of[static_cast<size_t>(s)][static_cast<size_t>(kind)];
    worst = std::max(worst, slowdown);
    return slowdown;
  };
  auto group_in = [&](ParallelDim dim) { return [&ranks, dim](int r) { return ranks.group(dim, r); }; };
  // The DP group of a rank: its stage's ranks of its TP coordinate (all CP and DP ones).
  auto dp_group_of = [&](int r) {
    const RankCoords at = ranks.coords_of(r);
    std::vector<int> group;
    for (int c = 0; c < cp; ++c) {
      for (int d = 0; d < layout.dp; ++d) group.push_back(ranks.rank_of(RankCoords{at.tp, c, d, at.pp}));
    }
    return group;
  };
  // Hybrid sharding's groups of a rank, from its DP group in rank order: the dp_shard ranks of
  // its block (shard), and the ranks at its place in every block (replica).
  const int shard = layout.zero_shard_ranks();
  auto hybrid_group_of = [&, shard](int r, bool across) {
    std::vector<int> all = dp_group_of(r);
    std::sort(all.begin(), all.end());
    const auto at = static_cast<int>(std::find(all.begin(), all.end(), r) - all.begin());
    std::vector<int> group;
    for (int k = 0; k < static_cast<int>(all.size()); ++k) {
      if (across ? k % shard == at % shard : k / shard == at / shard) group.push_back(all[static_cast<size_t>(k)]);
    }
    return group;
  };
  auto shard_group_of = [&](int r) { return hybrid_group_of(r, false); };
  auto replica_group_of = [&](int r) { return hybrid_group_of(r, true); };
  // The expert-DP group of a rank: the stage's ranks of its TP and EP coordinate in the expert grid.
  auto expert_dp_group_of = [&](int r) {
    ExpertRankCoords c = ranks.expert_coords_of(r);
    std::vector<int> group;
    for (c.expert_dp = 0; c.expert_dp < layout.expert_data_parallel(); ++c.expert_dp) group.push_back(ranks.expert_rank_of(c));
    return group;
  };
  for (int s = 0; s < p; ++s) {
    if (cp > 1) {
      const std::vector<int> cp_group = ranks.group(ParallelDim::kCp, stage_rank(s));
      if (ring_attention) {
        // All ranks pass their block at once; the ring moves at its slowest pair's pace.
        const double slowdown =
            note_slowdown(s, WorkKind::kCpComm, sibling_slowdown(s, cp_group, group_in(ParallelDim::kCp), TrafficPattern::kRing));
        CommTask step;
        std::vector<CollectiveCall> passes;  // co-simulated: every pair at once
        for (int i = 0; i < cp; ++i) {
          const CommTask pair = collective(CollectiveOp::kSendRecv, kv_block,
                                           {cp_group[static_cast<size_t>(i)], cp_group[static_cast<size_t>((i + 1) % cp)]},
                                           slowdown);
          passes.push_back(pair.calls.front().front());
          passes.back().one_way = true;  // rank i passes its block to i + 1 only
          if (i == 0 || pair.time > step.time) step = pair;
        }
        step.calls = {passes};
        cp_ring_step[static_cast<size_t>(s)] = step;
      } else {
        const double slowdown = note_slowdown(
            s, WorkKind::kCpComm, sibling_slowdown(s, cp_group, group_in(ParallelDim::kCp), TrafficPattern::kAllPairs));
        cp_scatter_heads[static_cast<size_t>(s)] = collective(CollectiveOp::kAllToAll, ulysses_qkv, cp_group, slowdown);
        cp_gather_heads[static_cast<size_t>(s)] = collective(CollectiveOp::kAllToAll, ulysses_output, cp_group, slowdown);
      }
    }
    if (expert_parallel && moe_layers > 0) {
      // Every GPU dispatches T_sp·top_k slots (pp_message holds T_sp tokens); the slowest rank
      // receives busiest_rank times the average, the average GPU sends the processed share.
      // DeepEP / HybridEP send a token once to each rank that holds one of its experts.
      const std::vector<int> ep_group = ranks.group(ParallelDim::kEp, stage_rank(s));
      const bool flex = layout.moe_dispatcher == MoeDispatcher::kFlex;
      const double copies = flex ? groups_reached(model.moe->experts, layout.ep, model.moe->top_k)
                                 : static_cast<double>(model.moe->top_k);
      const Bytes buffer = expert_tokens * copies;
      const double slowdown = note_slowdown(
          s, WorkKind::kEpComm, sibling_slowdown(s, ep_group, group_in(ParallelDim::kEp), TrafficPattern::kAllPairs));
      std::optional<CommTask> a2a;
      if (layout.moe_dispatcher == MoeDispatcher::kFlex && spans_nodes(ep_group)) {
        a2a = flex_dispatch(stage_rank(s), ep_group, expert_tokens, model.moe->experts, model.moe->top_k,
                            routing.busiest_rank * slowdown, routing.processed);
      }
      if (!a2a) {
        const CollectiveTimer::Timing timed =
            timer_.timing(CollectiveOp::kAllToAll, buffer * routing.busiest_rank * slowdown, ep_group);
        a2a = CommTask{timed.time,
                       bytes_sent(CollectiveOp::kAllToAll, layout.ep, buffer * routing.processed),
                       1,
                       spans_nodes(ep_group),
                       timed.channels,
                       {{CollectiveCall{CollectiveOp::kAllToAll, buffer * routing.busiest_rank * slowdown, ep_group}}}};
      }
      ep_backward[static_cast<size_t>(s)] = twice(*a2a);  // dispatch and combine
      ep_forward[static_cast<size_t>(s)] = ep_backward[static_cast<size_t>(s)];
      if (flex) {
        // HybridEP's preprocessing all-gathers every rank's routing map (T_sp × E booleans) over
        // the group before each forward dispatch; the backward reuses its handle.
        const double tokens =
            pp_message.value() / (static_cast<double>(model.hidden) * bytes_per_element(activation_dtype(layout.dtype)));
        const Bytes routing_maps(static_cast<double>(layout.ep) * tokens * static_cast<double>(model.moe->experts));
        ep_forward[static_cast<size_t>(s)] =
            plus(collective(CollectiveOp::kAllGather, routing_maps, ep_group), ep_backward[static_cast<size_t>(s)]);
      }
      ep_recomputed_backward[static_cast<size_t>(s)] =
          flex ? plus(ep_forward[static_cast<size_t>(s)], ep_backward[static_cast<size_t>(s)])
               : twice(ep_forward[static_cast<size_t>(s)]);
    }
    if ((expert_parallel || folded_experts) && moe_layers > 0) {
      expert_dp_group_[static_cast<size_t>(s)] = expert_dp_group_of(stage_rank(s));
      expert_dp_slowdown_[static_cast<size_t>(s)] = note_slowdown(
          s, WorkKind::kDpComm,
          sibling_slowdown(s, expert_dp_group_[static_cast<size_t>(s)], expert_dp_group_of, TrafficPattern::kRing));
    }
    const std::vector<int> tp_group = ranks.group(ParallelDim::kTp, stage_rank(s));
    const double tp_slowdown =
        note_slowdown(s, WorkKind::kTpComm, sibling_slowdown(s, tp_group, group_in(ParallelDim::kTp), TrafficPattern::kRing));
    auto tp_collective = [&](CollectiveOp op, Bytes size) { return collective(op, size, tp_group, tp_slowdown); };
    const CommTask one_block = layout.sequence_parallel
                                   ? plus(tp_collective(CollectiveOp::kAllGather, activation_message),
                                          tp_collective(CollectiveOp::kReduceScatter, activation_message))
                                   : tp_collective(CollectiveOp::kAllReduce, activation_message);
    // The vocabulary-parallel ends (Megatron): the embedding's partial lookups are summed
    // (all-reduce; reduce-scatter onto the SP shard with SP, whose backward all-gathers); the
    // output layer gathers the SP shard before the logits and reduce-scatters its gradient
    // (without SP: its input gradient is all-reduced); the cross-entropy all-reduces, in fp32
    // per token, the logits' max, the sum of exponentials and the target's logit.
    const Bytes cross_entropy_message(static_cast<double>(layout.micro_batch) *
                                      static_cast<double>(layout.sequence_length / cp) * 4.0);
    const CommTask cross_entropy = plus(twice(tp_collective(CollectiveOp::kAllReduce, cross_entropy_message)),
                                        tp_collective(CollectiveOp::kAllReduce, cross_entropy_message));
    if (layout.sequence_parallel) {
      embedding_tp_forward[static_cast<size_t>(s)] = tp_collective(CollectiveOp::kReduceScatter, activation_message);
      embedding_tp_backward[static_cast<size_t>(s)] = tp_collective(CollectiveOp::kAllGather, activation_message);
      output_tp_forward[static_cast<size_t>(s)] =
          plus(tp_collective(CollectiveOp::kAllGather, activation_message), cross_entropy);
      output_tp_backward[static_cast<size_t>(s)] = tp_collective(CollectiveOp::kReduceScatter, activation_message);
    } else {
      embedding_tp_forward[static_cast<size_t>(s)] = tp_collective(CollectiveOp::kAllReduce, activation_message);
      output_tp_forward[static_cast<size_t>(s)] = cross_entropy;
      output_tp_backward[static_cast<size_t>(s)] = tp_collective(CollectiveOp::kAllReduce, activation_message);
    }
    // The attention block and the MLP block; a parallel block reduces their sum once.
    tp_forward[static_cast<size_t>(s)] = model.parallel_block ? one_block : twice(one_block);
    tp_backward[static_cast<size_t>(s)] = tp_forward[static_cast<size_t>(s)];
    tp_recomputed_backward[static_cast<size_t>(s)] = twice(tp_forward[static_cast<size_t>(s)]);
    // torchtitan's op-level policy saves each block's reduce-scatter output but not its
    // all-gather's (its TP plan always shards the norms' sequence): the backward gathers each
    // block's input again for the weight gradients of the GEMMs it feeds.
    const CommTask regathered = tp_collective(CollectiveOp::kAllGather, activation_message);
    tp_op_checkpointed_backward[static_cast<size_t>(s)] =
        plus(tp_backward[static_cast<size_t>(s)], model.parallel_block ? regathered : twice(regathered));
    moe_tp_forward[static_cast<size_t>(s)] = tp_forward[static_cast<size_t>(s)];
    block_tp_forward[static_cast<size_t>(s)] = one_block;
    block_tp_recomputed_backward[static_cast<size_t>(s)] = twice(one_block);
    moe_block_tp_forward[static_cast<size_t>(s)] = one_block;
    if (folded_experts && moe_layers > 0) {
      // The attention block over TP (a shared expert's MLP too); the routed experts' slots
      // gathered over the expert-TP group after the dispatch and reduce-scattered before the
      // combine (Megatron's MoE parallel folding): etp·T_sp·k_top tokens of the experts' width,
      // none at etp = 1.
      // A hybrid model's MoE layer has no attention block: the same without it.
      const bool shared = model.moe->shared_experts > 0 && t > 1;
      CommTask moe = t > 1 ? one_block : CommTask{};
      CommTask experts = shared ? one_block : CommTask{};
      if (shared) moe = plus(moe, one_block);
      const std::vector<int> etp_group = ranks.expert_tp_group(stage_rank(s));
      if (etp_group.size() > 1) {
        const Bytes slots = expert_tokens * static_cast<double>(model.moe->top_k) * routing.busiest_rank *
                            static_cast<double>(etp_group.size());
        const CommTask gathered = plus(collective(CollectiveOp::kAllGather, slots, etp_group),
                                       collective(CollectiveOp::kReduceScatter, slots, etp_group));
        moe = plus(moe, gathered);
        experts = plus(experts, gathered);
      }
      moe_tp_forward[static_cast<size_t>(s)] = moe;
      moe_block_tp_forward[static_cast<size_t>(s)] = experts;
    }
    moe_block_tp_recomputed_backward[static_cast<size_t>(s)] = twice(moe_block_tp_forward[static_cast<size_t>(s)]);
    moe_tp_backward[static_cast<size_t>(s)] = moe_tp_forward[static_cast<size_t>(s)];
    moe_module_recomputed_backward[static_cast<size_t>(s)] =
        plus(moe_block_tp_forward[static_cast<size_t>(s)], moe_tp_backward[static_cast<size_t>(s)]);
    moe_tp_recomputed_backward[static_cast<size_t>(s)] = twice(moe_tp_forward[static_cast<size_t>(s)]);
    if (model.sparse_attention && t > 1) {
      // DSA's indexer, whole on every TP rank (Megatron-Core's DSAttention): its loss's target,
      // the attention's probabilities summed over the rank's heads at each query's top-k keys,
      // all-reduced in fp32; under SP it gathers the hidden state and the query latent first.
      // Forward only (DeepSeek's sparse stage detaches the indexer's input); recomputed with it.
      // On every attention layer of the stage, dense or MoE (GLM-5's layers that reuse a top-k
      // are charged it too: the collectives are per stage, not per layer).
      const double q_in = static_cast<double>(model.mla->q_lora_rank > 0 ? model.mla->q_lora_rank : model.hidden);
      const Bytes kl_target(static_cast<double>(layout.micro_batch) * static_cast<double>(layout.sequence_length) *
                            static_cast<double>(std::min<int64_t>(model.sparse_attention->topk, layout.sequence_length)) * 4.0);
      CommTask indexer = tp_collective(CollectiveOp::kAllReduce, kl_target);
      if (layout.sequence_parallel) {
        indexer = plus(indexer, plus(tp_collective(CollectiveOp::kAllGather, activation_message),
                                     tp_collective(CollectiveOp::kAllGather,
                                                   activation_message * (q_in / static_cast<double>(model.hidden)))));
      }
      const auto s_ = static_cast<size_t>(s);
      tp_forward[s_] = plus(tp_forward[s_], indexer);
      tp_recomputed_backward[s_] = plus(tp_recomputed_backward[s_], indexer);
      moe_tp_forward[s_] = plus(moe_tp_forward[s_], indexer);
      moe_tp_recomputed_backward[s_] = plus(moe_tp_recomputed_backward[s_], indexer);
    }
    if (p > 1) {
      // Every rank of the stage sends to its peer of the next (previous) stage at once.
      auto send = [&](int to) {
        auto pair_of = [&](int r) {
          RankCoords peer = ranks.coords_of(r);
          peer.pp = to;
          return std::vector<int>{r, ranks.rank_of(peer)};
        };
        const std::vector<int> pair = pair_of(stage_rank(s));
        CommTask sent =
            collective(CollectiveOp::kSendRecv, sizes.pp_send, pair,
                       note_slowdown(s, WorkKind::kPpComm, sibling_slowdown(s, pair, pair_of, TrafficPattern::kRing)));
        for (auto& phase : sent.calls) {
          for (CollectiveCall& call : phase) call.one_way = true;  // to the peer only
        }
        if (sizes.pp_send < pp_message) {
          // Scatter-gather: each TP rank sent its 1/t slice; the receivers all-gather the tensor.
          sent = plus(sent, collective(CollectiveOp::kAllGather, pp_message, ranks.group(ParallelDim::kTp, pair[1])));
        }
        return sent;
      };
      pp_send_forward[static_cast<size_t>(s)] = send((s + 1) % p);
      pp_send_backward[static_cast<size_t>(s)] = send((s + p - 1) % p);
    }
    // CP ranks hold the same parameters: gradients and ZeRO shards span dp·cp ranks.
    dp_group_[static_cast<size_t>(s)] = dp_group_of(stage_rank(s));
    // Hybrid sharding reduces over its shard and replica groups: the whole DP group's slowdown
    // is kept for an all-reduce over it but not reported as the DP traffic's.
    const double dp_slowdown = sibling_slowdown(s, dp_group_[static_cast<size_t>(s)], dp_group_of, TrafficPattern::kRing);
    dp_slowdown_[static_cast<size_t>(s)] =
        layout.hybrid_sharded() ? dp_slowdown : note_slowdown(s, WorkKind::kDpComm, dp_slowdown);
    if (layout.hybrid_sharded()) {
      const size_t i = static_cast<size_t>(s);
      shard_group_[i] = shard_group_of(stage_rank(s));
      replica_group_[i] = replica_group_of(stage_rank(s));
      shard_slowdown_[i] =
          note_slowdown(s, WorkKind::kDpComm, sibling_slowdown(s, shard_group_[i], shard_group_of, TrafficPattern::kRing));
      replica_slowdown_[i] = note_slowdown(
          s, WorkKind::kDpComm, sibling_slowdown(s, replica_group_[i], replica_group_of, TrafficPattern::kRing));
    }
  }
}

const CommTask& CommunicationPlan::layer_tp(int s, const Unit& u, bool forward, bool recomputed, bool op_checkpointed,
                                            bool moe_recomputed) const {
  const size_t i = static_cast<size_t>(s);
  // A layer's backward runs the same collectives as its forward (their transposes).
  switch (u.kind) {
    case LayerKind::kTransformer: break;
    case LayerKind::kMoe: return moe_recomputed ? moe_block_tp_recomputed_backward[i] : moe_block_tp_forward[i];
    default: return recomputed ? block_tp_recomputed_backward[i] : block_tp_forward[i];
  }
  if (u.moe_layer) {
    return forward          ? moe_tp_forward[i]
           : recomputed     ? moe_tp_recomputed_backward[i]
           : moe_recomputed ? moe_module_recomputed_backward[i]
                            : moe_tp_backward[i];
  }
  return forward           ? tp_forward[i]
         : recomputed      ? tp_recomputed_backward[i]
         : op_checkpointed ? tp_op_checkpointed_backward[i]
                           : tp_backward[i];
}

std::vector<double> CommunicationPlan::timing_signature() const {
  std::vector<double> out;
  auto add_task = [&out](const CommTask& c) {
    out.insert(out.end(), {static_cast<double>(c.time.picoseconds()), c.sent.value(), static_cast<double>(c.collectives),
                           c.across_nodes ? 1.0 : 0.0, static_cast<double>(c.sms), c.scale_up_load});
  };
  auto add_shape = [&](const std::vector<int>& group) {
    const auto [n, per_node] = timer_.shape_of(group);
    out.insert(out.end(), {static_cast<double>(n), static_cast<double>(per_node)});
  };
  for (const std::vector<CommTask>* per_stage :
       {&tp_forward, &tp_backward, &moe_tp_forward, &moe_tp_backward, &embedding_tp_forward, &embedding_tp_backward,
        &output_tp_forward, &output_tp_backward, &pp_send_forward, &pp_send_backward, &ep_forward, &ep_backward,
        &tp_recomputed_backward, &moe_tp_recomputed_backward, &ep_recomputed_backward, &tp_op_checkpointed_backward, &cp_ring_step,
        &cp_scatter_heads, &cp_gather_heads, &block_tp_forward, &block_tp_recomputed_backward, &moe_block_tp_forward,
        &moe_block_tp_recomputed_backward, &moe_module_recomputed_backward}) {
    for (const CommTask& c : *per_stage) add_task(c);
  }
  for (const auto& kinds : slowdown_of) out.insert(out.end(), kinds.begin(), kinds.end());
  for (size_t s = 0; s < dp_group_.size(); ++s) {
    add_shape(dp_group_[s]);
    add_shape(expert_dp_group_[s]);
    if (!shard_group_[s].empty()) {
      add_shape(shard_group_[s]);
      add_shape(replica_group_[s]);
      out.insert(out.end(), {shard_slowdown_[s], replica_slowdown_[s]});
    }
    out.insert(out.end(), {dp_slowdown_[s], expert_dp_slowdown_[s]});
  }
  return out;
}

}  // namespace parallax::iteration_detail
