// One training iteration: per-stage stream graph built from the schedule, run on the engine,
// then breakdown, throughput and memory (the model is described in iteration.h).
#include "training/iteration.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <stdexcept>
#include <tuple>

#include "collectives/sibling_contention.h"
#include "engine/engine.h"
#include "engine/invariant.h"
#include "io/input_error.h"
#include "topology/router.h"
#include "model/layer_operators.h"
#include "training/memory_model.h"
#include "model/parameter_count.h"
#include "training/cosimulation.h"
#include "training/iteration_comm.h"
#include "training/iteration_memory.h"
#include "training/iteration_units.h"
#include "training/pipeline_schedule.h"

namespace parallax {

using namespace iteration_detail;

namespace {


size_t kind_index(WorkKind k) { return static_cast<size_t>(k); }

// One task as a rank's breakdown sees it: when, what, and whether it went across nodes.
struct Interval {
  Time start, finish;
  WorkKind kind;
  bool across_nodes;
};

// The per-rank breakdown by a sweep over the start and end of every task the rank takes part in.
// An exposed stretch of communication counts as across nodes while a task of its kind that
// crosses nodes is active.
RankBreakdown breakdown(const std::vector<Interval>& intervals, Time pipeline_end, Time iteration_end) {
  struct Edge {
    Time at;
    int delta;
    WorkKind kind;
    bool across;
  };
  std::vector<Edge> edges;
  for (const Interval& i : intervals) {
    if (i.finish <= i.start) continue;
    edges.push_back({i.start, +1, i.kind, i.across_nodes});
    edges.push_back({i.finish, -1, i.kind, i.across_nodes});
  }
  edges.push_back({iteration_end, 0, WorkKind::kCompute, false});
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.at < b.at; });
  std::array<int, kWorkKinds> active{}, active_across{};
  constexpr WorkKind kPriority[] = {WorkKind::kTpComm, WorkKind::kCpComm, WorkKind::kEpComm, WorkKind::kPpComm,
                                    WorkKind::kDpComm};
  RankBreakdown b;
  Time t = Time::zero();
  auto attribute = [&](Time from, Time to) {
    if (to <= from) return;
    if (active[kind_index(WorkKind::kCompute)] > 0) {
      b.compute += to - from;
      return;
    }
    for (WorkKind k : kPriority) {
      if (active[kind_index(k)] > 0) {
        b.exposed[kind_index(k)] += to - from;
        if (active_across[kind_index(k)] > 0) b.exposed_across_nodes[kind_index(k)] += to - from;
        return;
      }
    }
    // Split a quiet stretch at the end of the pipeline: bubble before, idle after.
    const Time split = std::clamp(pipeline_end, from, to);
    b.bubble += split - from;
    b.idle += to - split;
  };
  for (const Edge& e : edges) {
    attribute(t, e.at);
    t = e.at;
    active[kind_index(e.kind)] += e.delta;
    if (e.across) active_across[kind_index(e.kind)] += e.delta;
  }
  return b;
}

// The load of `link` over time from the transfers played: each at its mean rate, bytes over
// its duration, from its start to its end; steps in time order.
std::vector<std::pair<Time, double>> link_timeline(const Topology& topo, const Router& router, LinkId link,
                                                   const std::vector<PlayedTransfer>& played) {
  std::vector<std::pair<Time, double>> edges;  // (time, rate change in B/s)
  for (const PlayedTransfer& f : played) {
    if (f.finish <= f.start) continue;
    const std::vector<LinkId> path = router.route(f.src, f.dst, f.route_key);
    if (std::find(path.begin(), path.end(), link) == path.end()) continue;
    const double rate = f.bytes.value() / (f.finish - f.start).seconds();
    edges.emplace_back(f.start, rate);
    edges.emplace_back(f.finish, -rate);
  }
  std::sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<Time, double>> steps;
  const double capacity = topo.link(link).bandwidth.value();
  double rate = 0;
  for (size_t i = 0; i < edges.size(); ++i) {
    rate += edges[i].second;
    if (i + 1 < edges.size() && edges[i + 1].first == edges[i].first) continue;  // one step per instant
    steps.emplace_back(edges[i].first, std::max(0.0, rate) / capacity);
  }
  return steps;
}

// The busiest link of each link class (bytes over what it could carry in `span`), busiest
// first; among equals the first in link order; with `played`, each with its timeline.
std::vector<LinkLoad> busiest_links(const Topology& topo, const Router& router, const NetworkModel& network, Time span,
                                    const std::vector<PlayedTransfer>* played) {
  std::map<LinkClass, std::pair<double, uint32_t>> best;
  for (uint32_t l = 0; l < topo.link_count() && span > Time::zero(); ++l) {
    const Link& link = topo.link(LinkId{l});
    const double bytes = network.link_bytes(LinkId{l}).value();
    if (!(bytes > 0)) continue;
    const double used = bytes / (link.bandwidth.value() * span.seconds());
    auto it = best.find(link.link_class);
    if (it == best.end() || used > it->second.first) best[link.link_class] = {used, l};
  }
  std::vector<LinkLoad> out;
  for (const auto& [cls, use] : best) {
    const Link& link = topo.link(LinkId{use.second});
    out.push_back(LinkLoad{topo.device(link.from).name, topo.device(link.to).name, cls,
                           network.link_bytes(LinkId{use.second}), use.first,
                           played ? link_timeline(topo, router, LinkId{use.second}, *played)
                                  : std::vector<std::pair<Time, double>>{}});
  }
  std::stable_sort(out.begin(), out.end(), [](const LinkLoad& a, const LinkLoad& b) { return a.utilisation > b.utilisation; });
  return out;
}

}  // namespace

Time RankBreakdown::exposed_communication() const {
  Time sum;
  for (Time t : exposed) sum += t;
  return sum;
}

IterationResult simulate_iteration(const ModelConfig& model, const ParallelLayout& layout, const Topology& topo,
                                   const IterationOptions& options) {
  validate(layout, model, static_cast<int>(topo.gpu_count()));
  const GpuSpec& gpu = topo.gpu_spec_of(topo.gpus()[0]);
  const FlopRate peak = peak_rate(gpu, layout.dtype);
  if (!(peak.value() > 0)) {
    throw std::invalid_argument(gpu.name + " has no " + to_string(layout.dtype) + " peak for MFU");
  }
  const ComputeModel cm(gpu, options.compute, options.gemm_efficiency);
  const int p = layout.pp, v = layout.virtual_stages, t = layout.tp;
  const int world = layout.world_size();
  const RankMapping ranks(layout);
  const bool expert_parallel = layout.ep > 1;
  const int cp = layout.cp;
  const bool ring_attention = cp > 1 && layout.cp_comm == ContextParallelComm::kRing;

  // ---- units of each virtual stage and the schedule -----------------------------------------
  const StagePlan plan = plan_stages(model, layout, cm, options);
  const std::vector<std::vector<Unit>>& units = plan.units;
  const std::vector<int>& vs_layers = plan.virtual_stage_layers;
  const int moe_layers = plan.moe_layers;
  const Routing& routing = plan.routing;
  const PipelineSchedule& schedule = plan.schedule;

  // ---- communication sizes and times ------------------------------------------------------
  // Co-simulated: every collective also as flows on its group's own GPUs, played on one network.
  const std::unique_ptr<CoSimulation> cosim = options.cosimulate && !options.free_communication
                                                  ? std::make_unique<CoSimulation>(topo, options.link_efficiency)
                                                  : nullptr;
  const bool every_replica = cosim && options.cosimulate_every_replica;
  CommunicationPlan comm(model, layout, topo, options, plan, every_replica);
  const std::vector<CommTask>&tp_forward = comm.tp_forward, &tp_backward = comm.tp_backward,
                        &embedding_tp_forward = comm.embedding_tp_forward, &embedding_tp_backward = comm.embedding_tp_backward,
                        &output_tp_forward = comm.output_tp_forward, &output_tp_backward = comm.output_tp_backward,
                        &pp_send_forward = comm.pp_send_forward, &pp_send_backward = comm.pp_send_backward,
                        &ep_forward = comm.ep_forward, &ep_backward = comm.ep_backward, &cp_ring_step = comm.cp_ring_step,
                        &cp_scatter_heads = comm.cp_scatter_heads, &cp_gather_heads = comm.cp_gather_heads;
  const std::vector<std::array<double, kWorkKinds>>& slowdown_of = comm.slowdown_of;
  auto gradient_reduction = [&](int s, const Unit& u) { return comm.gradient_reduction(s, u); };
  auto parameter_gather = [&](int s, const Unit& u) { return comm.parameter_gather(s, u); };
  const int dp = layout.dp;
  const int data_parallel = dp * cp;  // ranks sharing the model states
  const ZeroStage zero = layout.zero_stage;

  // ---- the stream graph --------------------------------------------------------------------
  StreamGraph graph;
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
  std::vector<StageResult> stages(static_cast<size_t>(p));
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
  std::vector<bool> across_nodes;  // per task: communication whose group spans nodes
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
  std::vector<WorkId> backward_ends;
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

  // ---- run ---------------------------------------------------------------------------------
  Engine engine;
  const std::unique_ptr<NetworkModel> network =
      cosim ? make_network_model("flow", engine, cosim->topology(), cosim->router()) : nullptr;
  std::vector<PlayedTransfer> played;  // for the trace's link tracks
  const bool record = network && options.keep_timeline;
  const std::vector<WorkTiming> timings = run_stream_graph(engine, graph, network.get(), record ? &played : nullptr);
  IterationResult result;
  result.tasks = graph.size();
  result.network = cosim ? "flow (co-simulated)" : "analytical";
  if (options.keep_timeline) {
    result.timeline.reserve(graph.size());
    for (WorkId id = 0; id < graph.size(); ++id) {
      const StreamTask& task = graph.task(id);
      const Stream& stream = graph.stream(task.stream);
      if (timings[id].finish > timings[id].start) {
        result.timeline.push_back(TimelineSpan{stream.rank, stream.name, task.kind, timings[id].start, timings[id].finish});
      }
    }
  }
  for (const WorkTiming& w : timings) result.iteration_time = std::max(result.iteration_time, w.finish);
  if (network) {
    result.busiest_links =
        busiest_links(cosim->topology(), cosim->router(), *network, result.iteration_time, record ? &played : nullptr);
  }
  for (WorkId id : backward_ends) result.pipeline_end = std::max(result.pipeline_end, timings[id].finish);
  Time reached;
  for (const WorkId id : critical_path(graph, timings)) {
    const Time start = std::max(timings[id].start, reached);
    result.critical_path.waiting += timings[id].start > reached ? timings[id].start - reached : Time::zero();
    result.critical_path.by_kind[kind_index(graph.task(id).kind)] += timings[id].finish - start;
    reached = timings[id].finish;
    ++result.critical_path.tasks;
  }

  // ---- breakdown -----------------------------------------------------------------------------
  across_nodes.resize(graph.size(), false);
  std::vector<std::vector<Interval>> intervals(static_cast<size_t>(p));
  for (WorkId id = 0; id < graph.size(); ++id) {
    const StreamTask& task = graph.task(id);
    const int rank = graph.stream(task.stream).rank;
    if (rank >= 0 && task.channel != kNoChannel && task.channel == streams[static_cast<size_t>(rank)].sms) {
      stages[static_cast<size_t>(rank)].compute_slowed_by_communication +=
          timings[id].finish - timings[id].start - task.duration;
    }
    const bool across = across_nodes[id];
    if (rank >= 0) intervals[static_cast<size_t>(rank)].push_back({timings[id].start, timings[id].finish, task.kind, across});
    if (task.peer_rank >= 0 && task.peer_rank != rank) {
      intervals[static_cast<size_t>(task.peer_rank)].push_back({timings[id].start, timings[id].finish, task.kind, across});
    }
  }
  Time bubble_total;
  for (int s = 0; s < p; ++s) {
    StageResult& stage = stages[static_cast<size_t>(s)];
    stage.stage = s;
    stage.time = breakdown(intervals[static_cast<size_t>(s)], result.pipeline_end, result.iteration_time);
    bubble_total += stage.time.bubble;
    for (int c = 0; c < v; ++c) {
      const int vs = c * p + s;
      stage.layers += vs_layers[static_cast<size_t>(vs)];
      for (const Unit& u : units[static_cast<size_t>(vs)]) {
        stage.forward_compute += u.forward;
        stage.backward_compute += u.backward;
      }
    }
  }
  result.pipeline_bubble_fraction =
      result.pipeline_end > Time::zero() ? bubble_total.seconds() / (p * result.pipeline_end.seconds()) : 0.0;

  // ---- memory --------------------------------------------------------------------------------
  const std::vector<StageMemory> memory = stage_memory(model, layout, plan);
  for (int s = 0; s < p; ++s) {
    StageResult& stage = stages[static_cast<size_t>(s)];
    const StageMemory& m = memory[static_cast<size_t>(s)];
    stage.memory = m.memory;
    stage.in_flight_micro_batches = m.in_flight_micro_batches;
    result.peak_memory = std::max(result.peak_memory, m.memory.total());
  }
  result.gpu_memory = gpu.memory;
  result.out_of_memory = result.peak_memory > gpu.memory;

  // ---- throughput and utilisation ------------------------------------------------------------
  const double seconds = result.iteration_time.seconds();
  const double tokens = static_cast<double>(layout.global_batch) * static_cast<double>(layout.sequence_length);
  result.gpus = world;
  result.simulated_ranks = p;
  result.tokens_per_second = seconds > 0 ? tokens / seconds : 0.0;
  result.tokens_per_second_per_gpu = result.tokens_per_second / world;
  result.model_flops_per_token = model_flops_per_token(model, layout.sequence_length, true);
  const double capacity = seconds * world * peak.value();
  result.mfu = capacity > 0 ? result.model_flops_per_token.value() * tokens / capacity : 0.0;
  // Every stage's rank stands for dp·tp·cp GPUs doing the same FLOPs.
  double hardware = 0;
  for (const StageResult& stage : stages) hardware += stage.hardware_flops.value() * dp * t * layout.cp;
  result.hfu = capacity > 0 ? hardware / capacity : 0.0;
  result.flop_convention =
      "MFU: model FLOPs per token 6N + 6·L·s·H·(d_qk+d_v)/2 (causal, no recomputation, backward = 2× forward) "
      "× tokens / (iteration time × GPUs × dense " + std::string(to_string(layout.dtype)) +
      " peak); HFU: FLOPs of the simulated kernels, recomputation and " +
      (layout.attention == AttentionKernel::kUnfused ? std::string("the unfused attention's full s×s products")
                                                     : std::string("FlashAttention's 2.5× backward")) +
      " included, optimizer excluded, over the same peak";
  result.symmetry = "one rank per pipeline stage simulated (" + std::to_string(p) + " of " + std::to_string(world) +
                    " GPUs); each stands for the " + std::to_string(dp * t * layout.cp) +
                    " GPUs of its stage (tp·cp·dp), which run the same work at the same times";
  if (expert_parallel && moe_layers > 0) {
    result.symmetry += "; under router skew the slowest rank of each EP group (" + std::to_string(layout.ep) +
                       " ranks) stands for it";
  }
  if (model.moe) {
    result.moe_expert_pace = routing.pace;
    result.moe_dropped_fraction = 1.0 - routing.processed;
    result.moe_dropped_token_slots =
        result.moe_dropped_fraction * tokens * static_cast<double>(model.moe->top_k) * moe_layers;
  }
  result.stages = std::move(stages);
  return result;
}

double fit_sustained_fraction(const ModelConfig& model, const ParallelLayout& layout, const Topology& topology,
                              IterationOptions options, Time measured) {
  constexpr double kSlowest = 0.05, kFastest = 1.0, kResolution = 1e-4;
  auto time_at = [&](double sigma) {
    options.compute.sustained_fraction = sigma;
    return simulate_iteration(model, layout, topology, options).iteration_time;
  };
  auto text = [](Time t) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f s", t.seconds());
    return std::string(buf);
  };
  const Time fastest = time_at(kFastest);
  if (measured < fastest) {
    throw std::invalid_argument("the measured step (" + text(measured) + ") is shorter than the simulated one with every " +
                                "kernel at its stand-alone speed (" + text(fastest) + ", σ = 1): the kernel model is " +
                                "slower than this stack; measure its GEMMs (--gemm-table) rather than fit σ");
  }
  if (fastest == measured) return kFastest;
  const Time slowest = time_at(kSlowest);
  if (measured > slowest) {
    throw std::invalid_argument("the measured step (" + text(measured) + ") is longer than the simulated one at σ = " +
                                "0.05 (" + text(slowest) + "): something other than kernel speed dominates it");
  }
  // Invariant: time_at(lo) >= measured > time_at(hi).
  double lo = kSlowest, hi = kFastest;
  while (hi - lo > kResolution) {
    const double mid = 0.5 * (lo + hi);
    if (time_at(mid) >= measured) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace parallax
