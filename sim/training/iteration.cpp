// One training iteration: per-stage stream graph built from the schedule, run on the engine,
// then breakdown, throughput and memory (the model is described in iteration.h).
#include "training/iteration.h"
#include "training/pipeline_split.h"

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
#include "training/iteration_graph.h"
#include "training/iteration_memo.h"
#include "training/iteration_memory.h"
#include "training/iteration_units.h"
#include "training/pipeline_schedule.h"

namespace parallax {

using namespace iteration_detail;

namespace {

// One task as a rank's breakdown sees it: when, what, and whether it went across nodes.
struct Interval {
  Time start, finish;
  WorkKind kind;
  bool across_nodes;
  int64_t link = -1;  // co-simulated: the task's bottleneck link
};

// An interval's start or end: its time, then its place in the order the edges were added
// (2·interval, +1 for an end), so that same-instant edges keep that order; the iteration's end
// sorts last at its instant.
struct Edge {
  int64_t at;
  uint64_t added;
  bool operator<(const Edge& o) const { return at != o.at ? at < o.at : added < o.added; }
};
constexpr uint64_t kIterationEnd = UINT64_MAX;

std::vector<Edge> sorted_edges(const std::vector<Interval>& intervals, Time iteration_end) {
  std::vector<Edge> edges;
  edges.reserve(2 * intervals.size() + 1);
  for (size_t n = 0; n < intervals.size(); ++n) {
    const Interval& i = intervals[n];
    if (i.finish <= i.start) continue;
    edges.push_back({i.start.picoseconds(), 2 * n});
    edges.push_back({i.finish.picoseconds(), 2 * n + 1});
  }
  edges.push_back({iteration_end.picoseconds(), kIterationEnd});
  std::sort(edges.begin(), edges.end());
  return edges;
}

// The sweep's state: how many intervals of each kind are active (and of them across nodes),
// and, co-simulated, the active ones per kind by start (then index), the latest naming the
// bottleneck link. A stretch goes to compute if any runs, else to the first exposed kind by
// priority, else to the bubble (before the pipeline's end) or idle time.
class BreakdownSweep {
 public:
  BreakdownSweep(const std::vector<Interval>& intervals, Time pipeline_end, bool track_links)
      : intervals_(intervals), pipeline_end_(pipeline_end), track_links_(track_links) {}

  void attribute(Time from, Time to) {
    if (to <= from) return;
    if (active_[kind_index(WorkKind::kCompute)] > 0) {
      b_.compute += to - from;
      return;
    }
    constexpr WorkKind kPriority[] = {WorkKind::kTpComm, WorkKind::kCpComm, WorkKind::kEpComm, WorkKind::kPpComm,
                                      WorkKind::kDpComm, WorkKind::kOffload};
    for (WorkKind k : kPriority) {
      const size_t ki = kind_index(k);
      if (active_[ki] == 0) continue;
      b_.exposed[ki] += to - from;
      if (active_across_[ki] > 0) b_.exposed_across_nodes[ki] += to - from;
      const auto& r = running_[ki];
      if (!r.empty() && intervals_[r.rbegin()->second].link >= 0) by_link_[ki][intervals_[r.rbegin()->second].link] += to - from;
      return;
    }
    // Split a quiet stretch at the end of the pipeline: bubble before, idle after.
    const Time split = std::clamp(pipeline_end_, from, to);
    b_.bubble += split - from;
    b_.idle += to - split;
  }

  void apply(const Edge& e) {
    if (e.added == kIterationEnd) return;
    const size_t n = e.added / 2;
    const Interval& i = intervals_[n];
    const int delta = e.added % 2 ? -1 : +1;
    active_[kind_index(i.kind)] += delta;
    if (i.across_nodes) active_across_[kind_index(i.kind)] += delta;
    if (!track_links_) return;
    if (delta > 0) running_[kind_index(i.kind)].emplace(i.start, n);
    if (delta < 0) running_[kind_index(i.kind)].erase({i.start, n});
  }

  // The breakdown, with each kind's exposed time per bottleneck link named from `links`, the
  // link that bound most first.
  RankBreakdown finish(const Topology* links) {
    for (size_t k = 0; k < kWorkKinds && links; ++k) {
      for (const auto& [link, time] : by_link_[k]) {
        const Link& l = links->link(LinkId{static_cast<uint32_t>(link)});
        b_.exposed_by_link[k].emplace_back(links->device(l.from).name + " -> " + links->device(l.to).name, time);
      }
      std::stable_sort(b_.exposed_by_link[k].begin(), b_.exposed_by_link[k].end(),
                       [](const auto& x, const auto& y) { return x.second > y.second; });
    }
    return std::move(b_);
  }

 private:
  const std::vector<Interval>& intervals_;
  Time pipeline_end_;
  bool track_links_;
  std::array<int, kWorkKinds> active_{}, active_across_{};
  std::array<std::set<std::pair<Time, size_t>>, kWorkKinds> running_;
  std::array<std::map<int64_t, Time>, kWorkKinds> by_link_;
  RankBreakdown b_;
};

// The per-rank breakdown by a sweep over the start and end of every task the rank takes part in.
// An exposed stretch of communication counts as across nodes while a task of its kind that
// crosses nodes is active.
RankBreakdown breakdown(const std::vector<Interval>& intervals, Time pipeline_end, Time iteration_end,
                        const Topology* links) {
  // Bottleneck links exist only co-simulated; without them the running sets are not kept.
  const bool any_link = links && std::any_of(intervals.begin(), intervals.end(), [](const Interval& i) { return i.link >= 0; });
  BreakdownSweep sweep(intervals, pipeline_end, any_link);
  Time t = Time::zero();
  for (const Edge& e : sorted_edges(intervals, iteration_end)) {
    const Time at = Time::ps(e.at);
    sweep.attribute(t, at);
    t = at;
    sweep.apply(e);
  }
  return sweep.finish(links);
}

// The load over time of each of `links` from the transfers played (each routed once): a
// transfer at its mean rate, bytes over its duration, from its start to its end; per link,
// (time, utilisation) steps in time order, and each task's use of it (its transfers' span and
// bytes), into `loads` (one per link, in the same order).
void add_link_timelines(const Topology& topo, const Router& router, const std::vector<LinkId>& links,
                        const std::vector<PlayedTransfer>& played, std::vector<LinkLoad>& loads) {
  std::vector<std::vector<std::pair<Time, double>>> edges(links.size());  // (time, rate change in B/s)
  std::vector<std::map<size_t, LinkUse>> uses(links.size());
  for (const PlayedTransfer& f : played) {
    if (f.finish <= f.start) continue;
    const std::vector<LinkId> path = router.route(f.src, f.dst, f.route_key);
    const double rate = f.bytes.value() / (f.finish - f.start).seconds();
    for (size_t n = 0; n < links.size(); ++n) {
      if (std::find(path.begin(), path.end(), links[n]) == path.end()) continue;
      edges[n].emplace_back(f.start, rate);
      edges[n].emplace_back(f.finish, -rate);
      auto [use, first] = uses[n].try_emplace(f.task, LinkUse{f.task, f.start, f.finish, Bytes(0)});
      use->second.start = std::min(use->second.start, f.start);
      use->second.finish = std::max(use->second.finish, f.finish);
      use->second.bytes += f.bytes;
    }
  }
  for (size_t n = 0; n < links.size(); ++n) {
    std::vector<std::pair<Time, double>>& e = edges[n];
    std::sort(e.begin(), e.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const double capacity = topo.link(links[n]).bandwidth.value();
    double rate = 0;
    for (size_t i = 0; i < e.size(); ++i) {
      rate += e[i].second;
      if (i + 1 < e.size() && e[i + 1].first == e[i].first) continue;  // one step per instant
      loads[n].timeline.emplace_back(e[i].first, std::max(0.0, rate) / capacity);
    }
    for (auto& [task, use] : uses[n]) loads[n].uses.push_back(use);
  }
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
  std::vector<LinkId> ids;
  for (const auto& [cls, use] : best) {
    const Link& link = topo.link(LinkId{use.second});
    out.push_back(LinkLoad{topo.device(link.from).name, topo.device(link.to).name, cls,
                           network.link_bytes(LinkId{use.second}), use.first, {}, {}});
    ids.push_back(LinkId{use.second});
  }
  if (played) add_link_timelines(topo, router, ids, *played, out);
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
  // What the layout asks of the GPU: an input error of the layout (exit 2), not a bug.
  if (!(peak.value() > 0)) {
    throw InputError("", "/parallel/dtype",
                     gpu.name + " has no " + std::string(to_string(layout.dtype)) + " peak: no " + to_string(layout.dtype) +
                         " tensor cores to train on");
  }
  if (layout.cpu_offloading_layers > 0 && !(gpu.host_bandwidth.value() > 0)) {
    throw InputError("", "/parallel/cpu_offloading_layers",
                     gpu.name + " has no link to host memory in the topology (the GPU's host_bandwidth, or a NIC attach link)");
  }
  const ComputeModel cm(gpu, options.compute, options.gemm_efficiency);
  const int p = layout.pp, v = layout.virtual_stages, t = layout.tp, dp = layout.dp;
  const int world = layout.world_size();
  const RankMapping ranks(layout);
  const bool expert_parallel = layout.ep > 1;

  // ---- units of each virtual stage and the schedule -----------------------------------------
  StagePlan plan = plan_stages(model, layout, cm, options);
  const std::vector<std::vector<Unit>>& units = plan.units;
  const std::vector<int>& vs_layers = plan.virtual_stage_layers;
  const int moe_layers = plan.moe_layers;
  const Routing& routing = plan.routing;

  // ---- communication sizes and times ------------------------------------------------------
  // Co-simulated: every collective also as flows on its group's own GPUs, played on one network.
  std::optional<CollectiveSimulatorCache> own_simulators;  // shared by the timer and the co-simulation
  if (!options.collective_simulators) own_simulators.emplace(topo, options.link_efficiency);
  CollectiveSimulatorCache& simulators = options.collective_simulators ? *options.collective_simulators : *own_simulators;
  const std::unique_ptr<CoSimulation> cosim =
      options.cosimulate && !options.free_communication ? std::make_unique<CoSimulation>(simulators) : nullptr;
  const bool every_replica = cosim && options.cosimulate_every_replica;
  CommunicationPlan comm(model, layout, topo, options, plan, every_replica, simulators);
  // ZB-V's micro-batches go down the stages and back before its first stage can go on: its
  // list-scheduled order is made again with what each pass really takes, the collectives in line
  // with the kernels included (DualPipeV's order is fixed). Its memory stays that of the
  // kernels' order, which a search's memory filter (estimate_memory) can compute without the
  // network: both ZB-V orders hold at most 2p chunks a stage, and their peaks can differ by one.
  const std::shared_ptr<const PipelineSchedule> kernels_order = plan.schedule;
  if (layout.schedule == PipelineScheduleKind::kZeroBubbleV) {
    plan.schedule = pipeline_schedule_from(layout, in_line_pass_times(layout, plan, comm));
  }
  // Without co-simulation the rank order acts only through the plan's timings (iteration_memo.h).
  IterationMemo* const memo = cosim ? nullptr : options.result_memo;
  std::vector<double> signature;
  if (memo) {
    signature = comm.timing_signature();
    if (const IterationResult* seen = memo->find(model, topo, layout, signature)) return *seen;
  }
  // ---- the stream graph --------------------------------------------------------------------
  IterationGraph built = build_iteration_graph(layout, options, gpu, cm, plan, comm, cosim.get(), every_replica);
  const StreamGraph& graph = built.graph;
  std::vector<StageResult>& stages = built.stages;
  const std::vector<bool>& across_nodes = built.across_nodes;
  const std::vector<WorkId>& backward_ends = built.backward_ends;

  // ---- run ---------------------------------------------------------------------------------
  Engine engine;
  const std::unique_ptr<NetworkModel> network =
      cosim ? make_network_model(options.cosimulation_network, engine, cosim->topology(), cosim->router()) : nullptr;
  std::vector<PlayedTransfer> played;  // for the trace's link tracks
  const bool record = network && options.keep_timeline && options.keep_link_loads;
  const std::vector<WorkTiming> timings = network || !options.graph_memo
                                              ? run_stream_graph(engine, graph, network.get(), record ? &played : nullptr,
                                                                 network ? options.progress : StreamProgress{})
                                              : options.graph_memo->run(engine, graph);
  IterationResult result;
  result.tasks = graph.size();
  result.network = cosim ? options.cosimulation_network + " (co-simulated)" : "analytical";
  if (options.keep_timeline) {
    result.timeline.reserve(graph.size());
    for (WorkId id = 0; id < graph.size(); ++id) {
      const StreamTask& task = graph.task(id);
      const Stream& stream = graph.stream(task.stream);
      if (timings[id].finish > timings[id].start) {
        result.timeline.push_back(TimelineSpan{stream.rank, stream.name, task.kind, timings[id].start, timings[id].finish, id,
                                               built.pass_of.empty() ? std::nullopt : built.pass_of[id]});
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
  for (const WorkId id : options.time_breakdown ? critical_path(graph, timings) : std::vector<WorkId>{}) {
    const Time start = std::max(timings[id].start, reached);
    result.critical_path.waiting += timings[id].start > reached ? timings[id].start - reached : Time::zero();
    result.critical_path.by_kind[kind_index(graph.task(id).kind)] += timings[id].finish - start;
    reached = timings[id].finish;
    ++result.critical_path.tasks;
  }

  // ---- breakdown -----------------------------------------------------------------------------
  std::vector<std::vector<Interval>> intervals(static_cast<size_t>(p));
  for (WorkId id = 0; id < graph.size() && options.time_breakdown; ++id) {
    const StreamTask& task = graph.task(id);
    const int rank = graph.stream(task.stream).rank;
    if (rank >= 0 && task.channel != kNoChannel && task.channel == built.sm_pool[static_cast<size_t>(rank)]) {
      stages[static_cast<size_t>(rank)].compute_slowed_by_communication +=
          timings[id].finish - timings[id].start - task.duration;
    }
    const bool across = across_nodes[id];
    const int64_t link = built.bottleneck[id];
    if (rank >= 0) intervals[static_cast<size_t>(rank)].push_back({timings[id].start, timings[id].finish, task.kind, across, link});
    if (task.peer_rank >= 0 && task.peer_rank != rank) {
      intervals[static_cast<size_t>(task.peer_rank)].push_back({timings[id].start, timings[id].finish, task.kind, across, link});
    }
  }
  Time bubble_total;
  for (int s = 0; s < p; ++s) {
    StageResult& stage = stages[static_cast<size_t>(s)];
    stage.stage = s;
    if (options.time_breakdown) {
      stage.time = breakdown(intervals[static_cast<size_t>(s)], result.pipeline_end, result.iteration_time,
                             cosim ? &cosim->topology() : nullptr);
    }
    bubble_total += stage.time.bubble;
    for (int c = 0; c < v; ++c) {
      const int vs = layout.virtual_stage(s, c);
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
  plan.schedule = kernels_order;
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
      "MFU: model FLOPs per token 6N + 6·L·s·H·(d_qk+d_v)/2" +
      std::string(model.mamba ? " over the attention layers, + 3 × the chunked scan's per Mamba layer" : "") +
      " (causal, no recomputation, backward = 2× forward) "
      "× tokens / (iteration time × GPUs × dense " + std::string(to_string(layout.dtype)) +
      " peak); HFU: FLOPs of the simulated kernels, recomputation and " +
      (layout.attention == AttentionKernel::kUnfused ? std::string("the unfused attention's full s×s products")
                                                     : std::string("FlashAttention's 2.5× backward")) +
      " included, optimizer excluded, over the same peak";
  if (const PipelineSplit split = split_pipeline_layers(layout, model.layers); split.rule != "even") {
    result.pipeline_split = split.rule + ": " + split_text(split.layers);
  }
  result.symmetry = "one rank per pipeline stage simulated (" + std::to_string(p) + " of " + std::to_string(world) +
                    " GPUs); each stands for the " + std::to_string(dp * t * layout.cp) +
                    " GPUs of its stage (tp·cp·dp), which run the same work at the same times";
  if (expert_parallel && moe_layers > 0) {
    result.symmetry += "; under router skew the slowest rank of each EP group (" + std::to_string(layout.ep) +
                       " ranks) stands for it";
  }
  if (model.moe) {
    result.moe_expert_pace = routing.pace;
    result.moe_dropped_fraction = routing.dropped;
    result.moe_dropped_token_slots =
        result.moe_dropped_fraction * tokens * static_cast<double>(model.moe->top_k) * moe_layers;
  }
  result.stages = std::move(stages);
  if (memo) memo->keep(model, topo, layout, std::move(signature), result);
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
