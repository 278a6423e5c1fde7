// The stream graph of a training iteration (iteration_graph.h).
#include "training/iteration_graph.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "training/iteration_memory.h"
#include "training/pipeline_schedule.h"

namespace parallax::iteration_detail {

IterationGraph build_iteration_graph(const ParallelLayout& layout, const IterationOptions& options, const GpuSpec& gpu,
                                     const ComputeModel& cm, const StagePlan& plan, CommunicationPlan& comm,
                                     CoSimulation* cosim, bool every_replica) {
  const int p = layout.pp, v = layout.virtual_stages, t = layout.tp, cp = layout.cp, dp = layout.dp;
  const RankMapping ranks(layout);
  const bool expert_parallel = layout.ep > 1;
  const bool ring_attention = cp > 1 && layout.cp_comm == ContextParallelComm::kRing;
  const int data_parallel = dp * cp;  // ranks sharing the model states
  const ZeroStage zero = layout.zero_stage;
  const std::vector<std::vector<Unit>>& units = plan.units;
  const PipelineSchedule& schedule = plan.schedule;
  const std::vector<CommTask>&tp_forward = comm.tp_forward, &tp_backward = comm.tp_backward,
                        &embedding_tp_forward = comm.embedding_tp_forward, &embedding_tp_backward = comm.embedding_tp_backward,
                        &output_tp_forward = comm.output_tp_forward, &output_tp_backward = comm.output_tp_backward,
                        &pp_send_forward = comm.pp_send_forward, &pp_send_backward = comm.pp_send_backward,
                        &ep_forward = comm.ep_forward, &ep_backward = comm.ep_backward, &cp_ring_step = comm.cp_ring_step,
                        &cp_scatter_heads = comm.cp_scatter_heads, &cp_gather_heads = comm.cp_gather_heads;
  const std::vector<std::array<double, kWorkKinds>>& slowdown_of = comm.slowdown_of;
  auto gradient_reduction = [&](int s, const Unit& u) { return comm.gradient_reduction(s, u); };
  auto parameter_gather = [&](int s, const Unit& u) { return comm.parameter_gather(s, u); };
  IterationGraph built;
  StreamGraph& graph = built.graph;
  // Each simulated GPU's communication shares two channels: its NVLink ports (groups inside
  // a node) and its NICs (groups across nodes). Collectives that overlap on one share it.
  // Its compute kernels run on its SMs, of which the collectives beside them hold some.
  // ZeRO-3 parameter gathers have a stream of their own (FSDP's all-gather stream, DeepSpeed's
  // prefetch stream): on the gradient-reduction stream a prefetched gather would queue behind
  // the previous layer's reduce-scatter. The two still share the GPU's links (channels).
  struct StageStreams {
    StreamId compute, tp, pp, dp, cp, gather;
    ChannelId scale_up, scale_out, sms;
  };
  std::vector<StageStreams> streams;
  const bool sm_pools = options.sm_contention && gpu.sms > 0;
  for (int s = 0; s < p; ++s) {
    streams.push_back({graph.add_stream(s, "compute"), graph.add_stream(s, "tp"), graph.add_stream(s, "pp"),
                       graph.add_stream(s, "dp"), ring_attention ? graph.add_stream(s, "cp") : StreamId{},
                       zero == ZeroStage::kStage3 ? graph.add_stream(s, "dp_gather") : StreamId{}, graph.add_channel(),
                       graph.add_channel(), sm_pools ? graph.add_sm_pool(gpu.sms) : kNoChannel});
  }
  auto channel_of = [&](int s, const CommTask& c) {
    if (!options.communication_contention) return kNoChannel;
    return c.across_nodes ? streams[static_cast<size_t>(s)].scale_out : streams[static_cast<size_t>(s)].scale_up;
  };
  std::vector<StageResult>& stages = built.stages;
  stages.resize(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    for (size_t k = 0; k < kWorkKinds; ++k) {
      stages[static_cast<size_t>(s)].communication[k].replica_slowdown = slowdown_of[static_cast<size_t>(s)][k];
    }
  }
  // Every replica's copy of a task's calls (cosimulate_every_replica): each call's group shifted
  // to every other (tp, cp, dp) coordinate of its stage, each distinct group once, all of a
  // phase at once.
  auto with_siblings = [&](const CallPhases& phases) {
    if (!every_replica) return phases;
    CallPhases out;
    for (const auto& phase : phases) {
      std::vector<CollectiveCall> all;
      std::set<std::vector<int>> seen;
      for (const CollectiveCall& call : phase) {
        for (int dt = 0; dt < t; ++dt) {
          for (int dc = 0; dc < cp; ++dc) {
            for (int dd = 0; dd < layout.dp; ++dd) {
              CollectiveCall shifted = call;
              for (int& r : shifted.group) {
                RankCoords c = ranks.coords_of(r);
                c.tp = (c.tp + dt) % t;
                c.cp = (c.cp + dc) % cp;
                c.dp = (c.dp + dd) % layout.dp;
                r = ranks.rank_of(c);
              }
              // A collective's group is a set (a rotated ring is the same ring); a send has a direction.
              std::vector<int> members = shifted.group;
              if (!call.one_way) std::sort(members.begin(), members.end());
              members.push_back(call.one_way ? 1 : 0);
              members.push_back(static_cast<int>(call.op));
              if (seen.insert(members).second) all.push_back(std::move(shifted));
            }
          }
        }
      }
      out.push_back(std::move(all));
    }
    return out;
  };
  std::vector<bool>& across_nodes = built.across_nodes;
  auto note_across = [&](WorkId id, bool across) {
    if (across_nodes.size() <= id) across_nodes.resize(id + 1, false);
    across_nodes[id] = across;
  };
  auto add_comm = [&](int s, StreamId stream, const CommTask& c, WorkKind kind, std::span<const WorkId> deps,
                      int peer = -1) {
    auto& volume = stages[static_cast<size_t>(s)].communication[kind_index(kind)];
    volume.sent += c.sent;
    volume.collectives += c.collectives;
    const WorkId id = graph.add(stream, c.time, kind, deps, peer, channel_of(s, c));
    note_across(id, c.across_nodes);
    if (cosim && !c.calls.empty()) graph.set_transfers(id, cosim->transfers(with_siblings(c.calls)));
    const ChannelId pool = streams[static_cast<size_t>(s)].sms;
    if (pool != kNoChannel && c.sms > 0) graph.occupy(id, pool, c.sms);
    return id;
  };
  std::vector<std::optional<WorkId>> last_compute(static_cast<size_t>(p));
  auto add_compute = [&](int s, Time duration, WorkKind kind, std::span<const WorkId> deps,
                         ChannelId channel = kNoChannel) {
    if (kind == WorkKind::kCompute && channel == kNoChannel) channel = streams[static_cast<size_t>(s)].sms;
    const WorkId id = graph.add(streams[static_cast<size_t>(s)].compute, duration, kind, deps, -1, channel);
    last_compute[static_cast<size_t>(s)] = id;
    return id;
  };

  // Communication on the compute stream (the kernels after it need its result): counted
  // here, since add_comm's stream is its own.
  auto add_blocking_comm = [&](int s, const CommTask& c, WorkKind kind, std::span<const WorkId> deps = {}) {
    auto& volume = stages[static_cast<size_t>(s)].communication[kind_index(kind)];
    volume.sent += c.sent;
    volume.collectives += c.collectives;
    const WorkId id = add_compute(s, c.time, kind, deps, channel_of(s, c));
    note_across(id, c.across_nodes);
    if (cosim && !c.calls.empty()) graph.set_transfers(id, cosim->transfers(with_siblings(c.calls)));
    return id;
  };
  // One pass of a unit: its segments in order; returns the task that ends it. Ring attention
  // (TransformerEngine's schedule) splits the core into cp blocks; step i computes on the i-th
  // K/V block while the CP stream passes it on to the next rank, and step i+1 waits for that.
  // Forward: cp−1 passes of a K/V block. Backward: the pass of step i also carries the dK/dV
  // summed so far, so it waits for step i−1's block: K/V at step 0, K/V + dK/dV at steps
  // 1..cp−2, dK/dV alone at step cp−1 — 2(cp−1) blocks. Ulysses brackets the core with its
  // two all-to-alls.
  auto add_segments = [&](int s, const std::vector<Segment>& segments, std::vector<WorkId> deps) {
    std::optional<WorkId> end;
    for (const Segment& seg : segments) {
      if (seg.attention == AttentionPass::kNone || cp == 1) {
        end = add_compute(s, seg.compute, WorkKind::kCompute, deps);
      } else if (ring_attention) {
        const bool backward = seg.attention == AttentionPass::kBackward;
        const CommTask& kv = cp_ring_step[static_cast<size_t>(s)];
        const StreamId stream = streams[static_cast<size_t>(s)].cp;
        const Time block = Time::ps(seg.compute.picoseconds() / cp);
        std::optional<WorkId> computed, passed;
        for (int i = 0; i < cp; ++i) {
          std::vector<WorkId> ready = deps;
          if (computed) ready = {*computed, *passed};
          if (backward) {
            passed = add_comm(s, stream, i == 0 || i == cp - 1 ? kv : twice(kv), WorkKind::kCpComm,
                              computed ? std::vector<WorkId>{*computed} : deps);
          } else if (i < cp - 1) {
            passed = add_comm(s, stream, kv, WorkKind::kCpComm, deps);
          }
          computed = add_compute(s, block, WorkKind::kCompute, ready);
        }
        end = backward ? add_compute(s, Time::zero(), WorkKind::kCompute, std::vector<WorkId>{*computed, *passed}) : *computed;
      } else {
        const bool forward = seg.attention == AttentionPass::kForward;
        const CommTask& into = forward ? cp_scatter_heads[static_cast<size_t>(s)] : cp_gather_heads[static_cast<size_t>(s)];
        const CommTask& back = forward ? cp_gather_heads[static_cast<size_t>(s)] : cp_scatter_heads[static_cast<size_t>(s)];
        add_blocking_comm(s, into, WorkKind::kCpComm);
        add_compute(s, seg.compute, WorkKind::kCompute, deps);
        end = add_blocking_comm(s, back, WorkKind::kCpComm);
      }
      deps = {*end};
    }
    return *end;
  };

  // ZeRO 1/2 with prefetch: the parameter gathers lead the iteration, one per bucket.
  const bool zero12 = zero == ZeroStage::kStage1 || zero == ZeroStage::kStage2;
  const bool zero3 = zero == ZeroStage::kStage3;
  const bool dp_comm = data_parallel > 1;
  std::map<std::pair<int, size_t>, WorkId> prefetched;  // (virtual stage, unit) → gather
  if (zero12 && dp_comm && layout.param_gather_prefetch) {
    for (int s = 0; s < p; ++s) {
      for (int c = 0; c < v; ++c) {
        const int vs = c * p + s;
        for (size_t k = 0; k < units[static_cast<size_t>(vs)].size(); ++k) {
          prefetched[{vs, k}] = add_comm(s, streams[static_cast<size_t>(s)].dp,
                                         parameter_gather(s, units[static_cast<size_t>(vs)][k]), WorkKind::kDpComm, {});
        }
      }
    }
  }
  // The pass that yields the weight gradients: the backward, or W when it is split. The
  // micro-batch of each (stage, chunk)'s last such pass is where ZeRO 0/1 reduce.
  const bool split = schedule.split_backward();
  const PassKind gradient_kind = split ? PassKind::kWeight : PassKind::kBackward;
  std::map<std::pair<int, int>, int> last_backward;
  for (int s = 0; s < p; ++s) {
    for (const PipelineOp& op : schedule.per_stage[static_cast<size_t>(s)]) {
      if (op.kind == gradient_kind) last_backward[{s, op.chunk}] = op.micro_batch;
    }
  }

  struct PassTasks {
    std::vector<WorkId> done;
    std::optional<WorkId> send;
  };
  std::map<std::tuple<int, PipelineOp>, PassTasks> passes;
  std::vector<WorkId>& backward_ends = built.backward_ends;
  std::vector<WorkId> reductions;
  for (auto [s, position] : pipeline_pass_order(schedule)) {
    const PipelineOp& op = schedule.per_stage[static_cast<size_t>(s)][position];
    const StageStreams& st = streams[static_cast<size_t>(s)];
    StageResult& stage = stages[static_cast<size_t>(s)];
    const int vs = op.chunk * p + s;
    const auto& list = units[static_cast<size_t>(vs)];
    const bool forward = op.kind == PassKind::kForward;
    const bool weight = op.kind == PassKind::kWeight;  // W: no communication but the reduction
    const bool gradients = op.kind == gradient_kind;

    std::vector<WorkId> input;
    if (auto dep = pipeline_dependency(schedule, s, op)) {
      const PassTasks& before = passes.at({dep->stage, dep->op});
      if (dep->stage != s) {
        input.push_back(*before.send);
      } else {
        input = before.done;
      }
    }
    const bool reducing = dp_comm && gradients &&
                          (zero == ZeroStage::kStage2 || zero3 || last_backward.at({s, op.chunk}) == op.micro_batch);
    const std::optional<WorkId> before_pass = last_compute[static_cast<size_t>(s)];
    std::vector<WorkId> prev = input;
    std::vector<WorkId> compute_ids;  // of this pass, in execution order
    const size_t n = list.size();
    for (size_t step = 0; step < n; ++step) {
      const size_t k = forward ? step : n - 1 - step;
      const Unit& u = list[k];
      std::vector<WorkId> deps = prev;
      if (zero3 && dp_comm && !weight) {
        // Issued when the layer before the previous one is done (prefetch: it overlaps the
        // previous layer) or when the previous one is done.
        std::vector<WorkId> when;
        const size_t lag = layout.param_gather_prefetch ? 2 : 1;
        if (step >= lag) {
          when.push_back(compute_ids[step - lag]);
        } else if (layout.param_gather_prefetch) {
          if (before_pass) when.push_back(*before_pass);
        } else {
          when = input;
          if (before_pass) when.push_back(*before_pass);
        }
        deps.push_back(add_comm(s, st.gather, parameter_gather(s, u), WorkKind::kDpComm, when));
      }
      if (forward && prefetched.count({vs, k})) deps.push_back(prefetched.at({vs, k}));
      const std::vector<Segment> weight_segments{{u.weight_gradient}};
      const WorkId c = add_segments(s,
                                    forward  ? u.forward_segments
                                    : weight ? weight_segments
                                    : split  ? u.input_gradient_segments
                                             : u.backward_segments,
                                    deps);
      stage.hardware_flops += forward  ? u.forward_flops
                              : weight ? u.weight_gradient_flops
                              : split  ? u.backward_flops - u.weight_gradient_flops
                                       : u.backward_flops;
      compute_ids.push_back(c);
      prev = {c};
      if (u.moe_layer && expert_parallel && !weight) {
        // Dispatch and combine on the compute stream, in line with the layer's kernels.
        prev = {add_blocking_comm(s, forward ? ep_forward[static_cast<size_t>(s)] : ep_backward[static_cast<size_t>(s)],
                                  WorkKind::kEpComm)};
      }
      if ((u.embedding || u.output_layer) && t > 1 && !weight) {
        // In line with the kernels that need them (the next layer's input, the logits).
        const size_t i = static_cast<size_t>(s);
        const CommTask& tp = u.embedding ? (forward ? embedding_tp_forward[i] : embedding_tp_backward[i])
                                         : (forward ? output_tp_forward[i] : output_tp_backward[i]);
        if (tp.collectives > 0) prev = {add_blocking_comm(s, tp, WorkKind::kTpComm)};
      }
      if (u.transformer_layer && t > 1 && !weight) {
        const CommTask& tp = forward ? tp_forward[static_cast<size_t>(s)] : tp_backward[static_cast<size_t>(s)];
        if (layout.tp_comm_overlap) {
          // TransformerEngine's overlap: each all-gather / reduce-scatter is cut into t chunks
          // pipelined with the GEMM it feeds or drains, so all but one chunk of it can hide
          // behind the layer's kernels (and no more than they last); the last chunk waits for
          // the last GEMM chunk and is exposed. Its kernels hold SMs meanwhile (add_comm).
          const double hidden = static_cast<double>(t - 1) / static_cast<double>(t);
          const WorkId beside = add_comm(s, st.tp, share(tp, hidden), WorkKind::kTpComm, deps);
          std::vector<WorkId> after = prev;
          after.push_back(beside);
          prev = {add_blocking_comm(s, share(tp, 1.0 - hidden), WorkKind::kTpComm, after)};
        } else {
          prev = {add_blocking_comm(s, tp, WorkKind::kTpComm)};
        }
      }
      if (reducing && layout.grad_reduce_overlap) {
        reductions.push_back(add_comm(s, st.dp, gradient_reduction(s, u), WorkKind::kDpComm, prev));
      }
    }
    if (reducing && !layout.grad_reduce_overlap) {
      for (size_t step = 0; step < n; ++step) {
        reductions.push_back(add_comm(s, st.dp, gradient_reduction(s, list[n - 1 - step]), WorkKind::kDpComm, prev));
      }
    }
    PassTasks tasks;
    tasks.done = prev;
    if (forward && vs < p * v - 1) {
      const int next = (s + 1) % p;
      tasks.send = add_comm(s, st.pp, pp_send_forward[static_cast<size_t>(s)], WorkKind::kPpComm, prev, next);
    } else if (op.kind == PassKind::kBackward && vs > 0) {
      const int next = (s + p - 1) % p;
      tasks.send = add_comm(s, st.pp, pp_send_backward[static_cast<size_t>(s)], WorkKind::kPpComm, prev, next);
    }
    if (!forward) backward_ends.insert(backward_ends.end(), prev.begin(), prev.end());
    passes[{s, op}] = std::move(tasks);
  }

  // Global barrier (gradient-norm all-reduce), optimizer step, ZeRO 1/2 parameter gathers.
  const StreamId barrier_stream = graph.add_stream(-1, "barrier");
  std::vector<WorkId> before_step = backward_ends;
  before_step.insert(before_step.end(), reductions.begin(), reductions.end());
  const WorkId barrier = graph.add(barrier_stream, Time::zero(), WorkKind::kCompute, before_step);
  const int expert_dp = layout.expert_data_parallel();
  std::vector<double> stage_expert_parameters(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    double parameters = 0, experts = 0;
    for (int c = 0; c < v; ++c) {
      for (const Unit& u : units[static_cast<size_t>(c * p + s)]) {
        parameters += u.parameters;
        experts += u.expert_parameters;
      }
    }
    StageResult& stage = stages[static_cast<size_t>(s)];
    stage.parameters = parameters;
    stage_expert_parameters[static_cast<size_t>(s)] = experts;
    const double shard =
        zero == ZeroStage::kStage0 ? parameters : (parameters - experts) / data_parallel + experts / expert_dp;
    const Time step = cm.time(memory_bound_cost(Bytes(shard * options.optimizer_bytes_per_parameter)));
    const WorkId optimizer = add_compute(s, step, WorkKind::kCompute, std::vector<WorkId>{barrier});
    if (zero12 && dp_comm && !layout.param_gather_prefetch) {
      for (int c = 0; c < v; ++c) {
        for (const Unit& u : units[static_cast<size_t>(c * p + s)]) {
          add_comm(s, streams[static_cast<size_t>(s)].dp, parameter_gather(s, u), WorkKind::kDpComm,
                   std::vector<WorkId>{optimizer});
        }
      }
    }
  }
  across_nodes.resize(graph.size(), false);
  built.bottleneck.assign(graph.size(), -1);
  for (WorkId id = 0; id < graph.size() && cosim; ++id) {
    if (const auto& played = graph.task(id).transfers) {
      if (const std::optional<LinkId> l = cosim->bottleneck(*played)) built.bottleneck[id] = l->value;
    }
  }
  for (const StageStreams& st : streams) built.sm_pool.push_back(st.sms);
  return built;
}

}  // namespace parallax::iteration_detail
