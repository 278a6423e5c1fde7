// The stream graph of a training iteration (iteration_graph.h).
#include "training/iteration_graph.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "engine/invariant.h"
#include "training/iteration_memory.h"
#include "training/pipeline_schedule.h"
#include "training/work_id_list.h"

namespace parallax::iteration_detail {
namespace {

// Each simulated GPU's communication shares two channels: its NVLink ports (groups inside a
// node) and its NICs (groups across nodes). Collectives that overlap on one share it. Its
// compute kernels run on its SMs, of which the collectives beside them hold some. ZeRO-3
// parameter gathers have a stream of their own (FSDP's all-gather stream, DeepSpeed's
// prefetch stream): on the gradient-reduction stream a prefetched gather would queue behind
// the previous layer's reduce-scatter. The two still share the GPU's links (channels).
struct StageStreams {
  StreamId compute, tp, pp, dp, cp, gather;
  ChannelId scale_up, scale_out, sms;
  StreamId shared_expert;  // with moe_shared_expert_overlap
  StreamId d2h, h2d;       // with cpu_offloading_layers: the copy engines to and from the host
  StreamId ep;             // with moe_a2a_overlap: the dispatch and combine of passes run as one
};

// The tasks of one pass: what the next pass of the stage waits for, and its send (PP).
struct PassTasks {
  WorkIdList done;
  std::optional<WorkId> send;
};

// Takes `shared` out of the pass's longest stretch outside the attention core (the MoE part,
// where the shared experts run) and returns what it took: the compute stream runs the rest.
Time take_shared_expert(SegmentList& segments, Time shared) {
  std::optional<size_t> longest;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].attention == AttentionPass::kNone && (!longest || segments[i].compute > segments[*longest].compute)) {
      longest = i;
    }
  }
  if (!longest) return Time::zero();
  Segment& seg = segments[*longest];
  const Time taken = std::min(shared, seg.compute);
  seg.compute = seg.compute - taken;
  return taken;
}

// What a pass of unit u on stage s runs in line with its kernels, as add_layer_communication
// adds it: the dispatch and combine (MoE, ep > 1), the embedding's or output layer's TP, the
// layer's TP.
const CommTask& ep_task(const CommunicationPlan& comm, int s, const Unit& u, bool forward) {
  const size_t i = static_cast<size_t>(s);
  const bool moe_recomputed = !forward && (u.recomputed || u.moe_recomputed);
  return forward ? comm.ep_forward[i] : moe_recomputed ? comm.ep_recomputed_backward[i] : comm.ep_backward[i];
}

const CommTask& end_tp_task(const CommunicationPlan& comm, int s, const Unit& u, bool forward) {
  const size_t i = static_cast<size_t>(s);
  return u.embedding ? (forward ? comm.embedding_tp_forward[i] : comm.embedding_tp_backward[i])
                     : (forward ? comm.output_tp_forward[i] : comm.output_tp_backward[i]);
}

const CommTask& layer_tp_task(const CommunicationPlan& comm, const ParallelLayout& layout, int s, const Unit& u,
                              bool forward) {
  const bool op_checkpointed = !forward && layout.recompute == Recomputation::kSelectiveOp;
  return comm.layer_tp(s, u, forward, !forward && u.recomputed, op_checkpointed,
                       !forward && (u.recomputed || u.moe_recomputed));
}

// Their time alone, TP under tp_comm_overlap only its exposed last chunk; with Ulysses' context
// parallelism also the all-to-alls around each attention core of the pass (a zero-bubble
// schedule's B: its input-gradient segments).
Time in_line_communication(const CommunicationPlan& comm, const ParallelLayout& layout, int s, const Unit& u,
                           bool forward) {
  Time t;
  if (layout.cp > 1 && layout.cp_comm == ContextParallelComm::kUlysses) {
    const size_t i = static_cast<size_t>(s);
    for (const Segment& seg : forward ? u.forward_segments : u.input_gradient_segments) {
      if (seg.attention != AttentionPass::kNone) t += comm.cp_scatter_heads[i].time + comm.cp_gather_heads[i].time;
    }
  }
  if (u.moe_layer && layout.ep > 1 && !layout.moe_a2a_overlap) t += ep_task(comm, s, u, forward).time;
  if ((u.embedding || u.output_layer) && layout.tp > 1) t += end_tp_task(comm, s, u, forward).time;
  if (u.transformer_layer) {
    const Time tp = layer_tp_task(comm, layout, s, u, forward).time;
    t += layout.tp_comm_overlap ? Time::from_seconds(tp.seconds() / layout.tp) : tp;
  }
  return t;
}

class IterationGraphBuilder {
 public:
  IterationGraphBuilder(const ParallelLayout& layout, const IterationOptions& options, const GpuSpec& gpu,
                        const ComputeModel& cm, const StagePlan& plan, CommunicationPlan& comm, CoSimulation* cosim,
                        bool every_replica);
  IterationGraph build();

 private:
  CallPhases with_siblings(const CallPhases& phases) const;
  ChannelId channel_of(int s, const CommTask& c) const;
  void note_across(WorkId id, bool across);
  void load_scale_up(int s, WorkId id, const CommTask& c);
  void count(int s, const CommTask& c, WorkKind kind);
  WorkId add_comm(int s, StreamId stream, const CommTask& c, WorkKind kind, std::span<const WorkId> deps, int peer = -1);
  WorkId add_compute(int s, Time duration, WorkKind kind, std::span<const WorkId> deps, ChannelId channel = kNoChannel);
  WorkId add_blocking_comm(int s, const CommTask& c, WorkKind kind, std::span<const WorkId> deps = {});
  WorkId add_segments(int s, std::span<const Segment> segments, WorkIdList deps);
  WorkId add_ring_attention(int s, const Segment& seg, const WorkIdList& deps);
  void prefetch_zero12_gathers();
  // A pass under construction: add_pass builds one, add_pass_pair two at once, unit by unit.
  struct PassBuild {
    int s = 0;
    PipelineOp op;
    int vs = 0;
    const std::vector<Unit>* list = nullptr;
    bool forward = false, weight = false, reducing = false;
    bool overlapped = false;  // run as one with another pass: its all-to-alls on the EP stream
    std::optional<WorkId> before_pass;
    WorkIdList input, prev;
    std::vector<WorkId> compute_ids;  // of this pass, in execution order
    std::vector<WorkId> copies;       // offloaded layers' copies, out (forward) or back
    std::vector<const Unit*> offloaded;
  };
  void add_pass(int s, const PipelineOp& op);
  void tag_pass(size_t from, const PipelineOp& op);
  void add_pass_pair(int s, const PipelineOp& first, const PipelineOp& second);
  bool pairs_with(int s, size_t position) const;
  WorkIdList pass_input(int s, const PipelineOp& op) const;
  PassBuild begin_pass(int s, const PipelineOp& op);
  void add_unit(PassBuild& b, size_t step);
  void finish_pass(PassBuild& b);
  Time overlapped_shared_expert(const Unit& u, const PipelineOp& op) const;
  WorkIdList add_layer_communication(int s, const Unit& u, bool forward, const WorkIdList& deps, WorkIdList prev,
                                     Time shared_expert, bool overlapped);
  void add_optimizer_steps();
  Time copy_time(const Unit& u) const;
  void copy_out(int s, const Unit& u, WorkId c, std::vector<WorkId>& copies, WorkIdList& prev);
  void bring_back(int s, const Unit& u, const std::vector<const Unit*>& offloaded, std::vector<WorkId>& copies,
                  WorkIdList& deps);

  const ParallelLayout& layout_;
  const IterationOptions& options_;
  const ComputeModel& cm_;
  const StagePlan& plan_;
  CommunicationPlan& comm_;
  CoSimulation* cosim_;
  const bool every_replica_;
  const int p_, v_, t_, cp_;
  const RankMapping ranks_;
  const bool ring_attention_, zero12_, zero3_, dp_comm_;
  const bool split_;             // B and W passes (zero bubble)
  const bool shared_expert_overlap_;  // shared experts beside the dispatch (MoE layers, ep > 1)
  const bool offload_;                // activations of the first layers to host memory (pp = 1)
  const bool a2a_overlap_;            // moe_a2a_overlap: forward and backward passes run as one (MoE, ep > 1)
  const Bandwidth host_bandwidth_;
  std::vector<int> offload_sync_layer_;  // per offloaded layer: the layer whose end waits for its copy
  const PassKind gradient_kind_;  // the pass that yields the weight gradients

  IterationGraph built_;
  StreamGraph& graph_ = built_.graph;
  std::vector<StageStreams> streams_;
  std::vector<std::optional<WorkId>> last_compute_;
  std::map<std::pair<int, size_t>, WorkId> prefetched_;  // (virtual stage, unit) → ZeRO 1/2 gather
  std::map<std::pair<int, int>, int> last_backward_;     // (stage, chunk) → micro-batch of its last gradient pass
  std::vector<PassTasks> passes_;  // by pass_slot(stage, pass)
  std::vector<char> built_passes_;  // by pass_slot(stage, pass): added to the graph
  // By pass_slot(stage, pass): the earlier passes of the stage whose outputs leave as it ends
  // (PipelineSchedule::PassLinks::output_leaves_after).
  std::vector<std::vector<PipelineOp>> leaving_after_;
  size_t pass_slot(int s, const PipelineOp& op) const;
  std::optional<WorkId> add_send(int s, const PipelineOp& op, const WorkIdList& after);
  std::vector<WorkId> reductions_;
};

IterationGraphBuilder::IterationGraphBuilder(const ParallelLayout& layout, const IterationOptions& options,
                                             const GpuSpec& gpu, const ComputeModel& cm, const StagePlan& plan,
                                             CommunicationPlan& comm, CoSimulation* cosim, bool every_replica)
    : layout_(layout), options_(options), cm_(cm), plan_(plan), comm_(comm), cosim_(cosim), every_replica_(every_replica),
      p_(layout.pp), v_(layout.virtual_stages), t_(layout.tp), cp_(layout.cp), ranks_(layout),
      ring_attention_(layout.cp > 1 && layout.cp_comm == ContextParallelComm::kRing),
      zero12_(layout.zero_stage == ZeroStage::kStage1 || layout.zero_stage == ZeroStage::kStage2),
      zero3_(layout.zero_stage == ZeroStage::kStage3), dp_comm_(layout.dp * layout.cp > 1),
      split_(plan.schedule->split_backward()),
      shared_expert_overlap_(layout.moe_shared_expert_overlap && layout.ep > 1 && plan.moe_layers > 0),
      offload_(layout.cpu_offloading_layers > 0),
      a2a_overlap_(layout.moe_a2a_overlap && layout.ep > 1 && plan.moe_layers > 0), host_bandwidth_(gpu.host_bandwidth),
      offload_sync_layer_(cpu_offloading_sync_layers(layout.cpu_offloading_layers, plan.virtual_stage_layers.front())),
      gradient_kind_(split_ ? PassKind::kWeight : PassKind::kBackward),
      last_compute_(static_cast<size_t>(layout.pp)),
      passes_(static_cast<size_t>(plan.schedule->stages) * plan.schedule->pass_slots()),
      built_passes_(passes_.size(), 0), leaving_after_(plan.schedule->links.empty() ? 0 : passes_.size()) {
  const bool sm_pools = options.sm_contention && gpu.sms > 0;
  for (int s = 0; s < p_; ++s) {
    streams_.push_back({graph_.add_stream(s, "compute"), graph_.add_stream(s, "tp"), graph_.add_stream(s, "pp"),
                        graph_.add_stream(s, "dp"), ring_attention_ ? graph_.add_stream(s, "cp") : StreamId{},
                        zero3_ ? graph_.add_stream(s, "dp_gather") : StreamId{}, graph_.add_channel(), graph_.add_channel(),
                        sm_pools ? graph_.add_sm_pool(gpu.sms) : kNoChannel,
                        shared_expert_overlap_ ? graph_.add_stream(s, "shared_expert") : StreamId{},
                        offload_ ? graph_.add_stream(s, "offload_d2h") : StreamId{},
                        offload_ ? graph_.add_stream(s, "offload_h2d") : StreamId{},
                        a2a_overlap_ ? graph_.add_stream(s, "ep") : StreamId{}});
  }
  built_.stages.resize(static_cast<size_t>(p_));
  for (int s = 0; s < p_; ++s) {
    for (size_t k = 0; k < kWorkKinds; ++k) {
      built_.stages[static_cast<size_t>(s)].communication[k].replica_slowdown = comm.slowdown_of[static_cast<size_t>(s)][k];
    }
  }
  for (int s = 0; s < p_; ++s) {
    for (const PipelineOp& op : plan.schedule->per_stage[static_cast<size_t>(s)]) {
      if (op.kind == gradient_kind_) last_backward_[{s, op.chunk}] = op.micro_batch;
      const PipelineSchedule::PassLinks* l = plan.schedule->linked(s, op);
      if (l && l->output_leaves_after) leaving_after_[pass_slot(s, *l->output_leaves_after)].push_back(op);
    }
  }
}

// Every replica's copy of a task's calls (cosimulate_every_replica): each call's group shifted
// to every other (tp, cp, dp) coordinate of its stage, each distinct group once, all of a
// phase at once.
CallPhases IterationGraphBuilder::with_siblings(const CallPhases& phases) const {
  if (!every_replica_) return phases;
  CallPhases out;
  for (const auto& phase : phases) {
    std::vector<CollectiveCall> all;
    std::set<std::vector<int>> seen;
    for (const CollectiveCall& call : phase) {
      for (int dt = 0; dt < t_; ++dt) {
        for (int dc = 0; dc < cp_; ++dc) {
          for (int dd = 0; dd < layout_.dp; ++dd) {
            CollectiveCall shifted = call;
            for (int& r : shifted.group) {
              RankCoords c = ranks_.coords_of(r);
              c.tp = (c.tp + dt) % t_;
              c.cp = (c.cp + dc) % cp_;
              c.dp = (c.dp + dd) % layout_.dp;
              r = ranks_.rank_of(c);
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
}

// Stage, then the schedule's own numbering of the pass (pipeline_pass_order has checked it).
size_t IterationGraphBuilder::pass_slot(int s, const PipelineOp& op) const {
  return static_cast<size_t>(s) * plan_.schedule->pass_slots() + plan_.schedule->pass_slot(op);
}

ChannelId IterationGraphBuilder::channel_of(int s, const CommTask& c) const {
  if (!options_.communication_contention) return kNoChannel;
  return c.across_nodes ? streams_[static_cast<size_t>(s)].scale_out : streams_[static_cast<size_t>(s)].scale_up;
}

// Co-simulated, the transfers share the NVLink themselves.
void IterationGraphBuilder::load_scale_up(int s, WorkId id, const CommTask& c) {
  if (!options_.communication_contention || cosim_ || !c.across_nodes || !(c.scale_up_load > 0)) return;
  graph_.load(id, streams_[static_cast<size_t>(s)].scale_up, c.scale_up_load);
}

void IterationGraphBuilder::note_across(WorkId id, bool across) {
  // Grown by doubling (one task in four or so is communication); build() trims it.
  if (built_.across_nodes.size() <= id) built_.across_nodes.resize(std::max<size_t>(id + 1, 2 * built_.across_nodes.size()), false);
  built_.across_nodes[id] = across;
}

void IterationGraphBuilder::count(int s, const CommTask& c, WorkKind kind) {
  auto& volume = built_.stages[static_cast<size_t>(s)].communication[kind_index(kind)];
  volume.sent += c.sent;
  volume.collectives += c.collectives;
}

WorkId IterationGraphBuilder::add_comm(int s, StreamId stream, const CommTask& c, WorkKind kind,
                                       std::span<const WorkId> deps, int peer) {
  count(s, c, kind);
  const WorkId id = graph_.add(stream, c.time, kind, deps, peer, channel_of(s, c));
  note_across(id, c.across_nodes);
  load_scale_up(s, id, c);
  if (cosim_ && !c.calls.empty()) graph_.set_transfers(id, cosim_->transfers(with_siblings(c.calls)));
  const ChannelId pool = streams_[static_cast<size_t>(s)].sms;
  if (pool != kNoChannel && c.sms > 0) graph_.occupy(id, pool, c.sms);
  return id;
}

WorkId IterationGraphBuilder::add_compute(int s, Time duration, WorkKind kind, std::span<const WorkId> deps,
                                          ChannelId channel) {
  if (kind == WorkKind::kCompute && channel == kNoChannel) channel = streams_[static_cast<size_t>(s)].sms;
  const WorkId id = graph_.add(streams_[static_cast<size_t>(s)].compute, duration, kind, deps, -1, channel);
  last_compute_[static_cast<size_t>(s)] = id;
  return id;
}

// Communication on the compute stream (the kernels after it need its result).
WorkId IterationGraphBuilder::add_blocking_comm(int s, const CommTask& c, WorkKind kind, std::span<const WorkId> deps) {
  count(s, c, kind);
  const WorkId id = add_compute(s, c.time, kind, deps, channel_of(s, c));
  note_across(id, c.across_nodes);
  load_scale_up(s, id, c);
  if (cosim_ && !c.calls.empty()) graph_.set_transfers(id, cosim_->transfers(with_siblings(c.calls)));
  return id;
}

// One pass of a unit: its segments in order; returns the task that ends it. Ulysses brackets
// the attention core with its two all-to-alls.
WorkId IterationGraphBuilder::add_segments(int s, std::span<const Segment> segments, WorkIdList deps) {
  std::optional<WorkId> end;
  for (const Segment& seg : segments) {
    if (seg.attention == AttentionPass::kNone || cp_ == 1) {
      end = add_compute(s, seg.compute, WorkKind::kCompute, deps);
    } else if (ring_attention_) {
      end = add_ring_attention(s, seg, deps);
    } else {
      const bool forward = seg.attention == AttentionPass::kForward;
      const CommTask& scatter = comm_.cp_scatter_heads[static_cast<size_t>(s)];
      const CommTask& gather = comm_.cp_gather_heads[static_cast<size_t>(s)];
      add_blocking_comm(s, forward ? scatter : gather, WorkKind::kCpComm);
      add_compute(s, seg.compute, WorkKind::kCompute, deps);
      end = add_blocking_comm(s, forward ? gather : scatter, WorkKind::kCpComm);
    }
    deps = {*end};
  }
  return *end;
}

// Ring attention (TransformerEngine's schedule) splits the core into cp blocks; step i
// computes on the i-th K/V block while the CP stream passes it on to the next rank, and step
// i+1 waits for that. Forward: cp−1 passes of a K/V block. Backward: the pass of step i also
// carries the dK/dV summed so far, so it waits for step i−1's block: K/V at step 0, K/V +
// dK/dV at steps 1..cp−2, dK/dV alone at step cp−1 — 2(cp−1) blocks.
WorkId IterationGraphBuilder::add_ring_attention(int s, const Segment& seg, const WorkIdList& deps) {
  const bool backward = seg.attention == AttentionPass::kBackward;
  const CommTask& kv = comm_.cp_ring_step[static_cast<size_t>(s)];
  const StreamId stream = streams_[static_cast<size_t>(s)].cp;
  const Time block = Time::ps(seg.compute.picoseconds() / cp_);
  std::optional<WorkId> computed, passed;
  for (int i = 0; i < cp_; ++i) {
    WorkIdList ready = deps;
    if (computed) ready = {*computed, *passed};
    if (backward) {
      passed = add_comm(s, stream, i == 0 || i == cp_ - 1 ? kv : twice(kv), WorkKind::kCpComm,
                        computed ? WorkIdList{*computed} : deps);
    } else if (i < cp_ - 1) {
      passed = add_comm(s, stream, kv, WorkKind::kCpComm, deps);
    }
    computed = add_compute(s, block, WorkKind::kCompute, ready);
  }
  return backward ? add_compute(s, Time::zero(), WorkKind::kCompute, WorkIdList{*computed, *passed}) : *computed;
}

// The shared experts' kernels that a pass of `u` runs beside its dispatch and combine: none
// but in MoE layers with moe_shared_expert_overlap; in a zero-bubble schedule's B pass those of
// the input gradients (the W pass has no dispatch to hide behind).
Time IterationGraphBuilder::overlapped_shared_expert(const Unit& u, const PipelineOp& op) const {
  if (!shared_expert_overlap_ || !u.moe_layer || op.kind == PassKind::kWeight) return Time::zero();
  if (op.kind == PassKind::kForward) return u.shared_expert_forward;
  return split_ ? u.shared_expert_backward - u.shared_expert_weight_gradient : u.shared_expert_backward;
}

// ZeRO 1/2 with prefetch: the parameter gathers lead the iteration, one per bucket.
void IterationGraphBuilder::prefetch_zero12_gathers() {
  if (!zero12_ || !dp_comm_ || !layout_.param_gather_prefetch) return;
  for (int s = 0; s < p_; ++s) {
    for (int c = 0; c < v_; ++c) {
      const int vs = layout_.virtual_stage(s, c);
      for (size_t k = 0; k < plan_.units[static_cast<size_t>(vs)].size(); ++k) {
        prefetched_[{vs, k}] = add_comm(s, streams_[static_cast<size_t>(s)].dp,
                                        comm_.parameter_gather(s, plan_.units[static_cast<size_t>(vs)][k]),
                                        WorkKind::kDpComm, {});
      }
    }
  }
}

// A layer's communication after its kernels (EP, the embedding's and output layer's TP, the
// transformer layer's TP); `deps` are what the layer's kernels waited for, `prev` the task that
// ends them. Returns what the layer's end now is.
WorkIdList IterationGraphBuilder::add_layer_communication(int s, const Unit& u, bool forward, const WorkIdList& deps,
                                                          WorkIdList prev, Time shared_expert, bool overlapped) {
  const size_t i = static_cast<size_t>(s);
  const CommTask& ep = ep_task(comm_, s, u, forward);
  if (u.moe_layer && layout_.ep > 1 && overlapped) {
    // On the EP stream: the other pass's kernels, next on the compute stream, run beside them.
    prev = {add_comm(s, streams_[i].ep, ep, WorkKind::kEpComm, prev)};
  } else if (u.moe_layer && layout_.ep > 1) {
    // Dispatch and combine on the compute stream, in line with the layer's kernels; the shared
    // experts, when overlapped, beside them on their own stream, on the SMs the dispatch's
    // kernels leave.
    if (shared_expert > Time::zero()) {
      const StageStreams& st = streams_[i];
      const WorkId shared = graph_.add(st.shared_expert, shared_expert, WorkKind::kCompute, prev, -1, st.sms);
      const WorkId a2a = add_blocking_comm(s, ep, WorkKind::kEpComm);
      if (st.sms != kNoChannel && ep.sms > 0) graph_.occupy(a2a, st.sms, ep.sms);
      prev = {a2a, shared};
    } else {
      prev = {add_blocking_comm(s, ep, WorkKind::kEpComm)};
    }
  }
  if ((u.embedding || u.output_layer) && t_ > 1) {
    // In line with the kernels that need them (the next layer's input, the logits).
    const CommTask& tp = end_tp_task(comm_, s, u, forward);
    if (tp.collectives > 0) prev = {add_blocking_comm(s, tp, WorkKind::kTpComm)};
  }
  const CommTask& tp = layer_tp_task(comm_, layout_, s, u, forward);
  if (u.transformer_layer && tp.collectives > 0) {
    if (!layout_.tp_comm_overlap) return {add_blocking_comm(s, tp, WorkKind::kTpComm)};
    // TransformerEngine's overlap: each all-gather / reduce-scatter is cut into t chunks
    // pipelined with the GEMM it feeds or drains, so all but one chunk of it can hide behind
    // the layer's kernels (and no more than they last); the last chunk waits for the last GEMM
    // chunk and is exposed. Its kernels hold SMs meanwhile (add_comm).
    const double hidden = static_cast<double>(t_ - 1) / static_cast<double>(t_);
    const WorkId beside = add_comm(s, streams_[i].tp, share(tp, hidden), WorkKind::kTpComm, deps);
    WorkIdList after = prev;
    after.push_back(beside);
    prev = {add_blocking_comm(s, share(tp, 1.0 - hidden), WorkKind::kTpComm, after)};
  }
  return prev;
}

// One pass of the schedule on stage s: each unit's ZeRO-3 gather, kernels and communication in
// the pass's order, the gradient reductions it starts, and its PP send.
void IterationGraphBuilder::add_pass(int s, const PipelineOp& op) {
  const size_t from = graph_.size();
  PassBuild pass = begin_pass(s, op);
  for (size_t step = 0; step < pass.list->size(); ++step) add_unit(pass, step);
  finish_pass(pass);
  tag_pass(from, op);
}

// For the timeline: the tasks added since `from` belong to pass `op`.
// (A send that leaves at its end for an earlier pass is tagged with that pass already.)
void IterationGraphBuilder::tag_pass(size_t from, const PipelineOp& op) {
  if (!options_.keep_timeline) return;
  built_.pass_of.resize(graph_.size());
  for (size_t id = from; id < graph_.size(); ++id) {
    if (!built_.pass_of[id]) built_.pass_of[id] = op;
  }
}

// moe_a2a_overlap (Megatron's combined 1F1B): two adjacent passes of a stage, a forward and a
// backward of different micro-batches, run as one, unit by unit in turn on the compute stream;
// each one's dispatch and combine go to the EP stream, where only its own next unit waits for
// them, so they run beside the other pass's kernels.
void IterationGraphBuilder::add_pass_pair(int s, const PipelineOp& first, const PipelineOp& second) {
  PassBuild a = begin_pass(s, first);
  PassBuild b = begin_pass(s, second);
  a.overlapped = b.overlapped = true;
  for (size_t step = 0; step < std::max(a.list->size(), b.list->size()); ++step) {
    for (PassBuild* pass : {&a, &b}) {
      if (step >= pass->list->size()) continue;
      const size_t from = graph_.size();
      add_unit(*pass, step);
      tag_pass(from, pass->op);
    }
  }
  for (PassBuild* pass : {&a, &b}) {
    const size_t from = graph_.size();
    finish_pass(*pass);
    tag_pass(from, pass->op);
  }
}

// Whether the pass at `position` of stage s and the one after it run as one (add_pass_pair):
// DualPipeV's overlapped pairs (the first waits for the second's input too), or else a forward
// and a backward side by side, with what the second waits for on other stages already built.
bool IterationGraphBuilder::pairs_with(int s, size_t position) const {
  const PipelineSchedule& sch = *plan_.schedule;
  const std::vector<PipelineOp>& ops = sch.per_stage[static_cast<size_t>(s)];
  if (!a2a_overlap_ || position + 1 >= ops.size()) return false;
  if (!sch.links.empty()) return sch.pairs_with_next(s, position);
  const PipelineOp& first = ops[position];
  const PipelineOp& second = ops[position + 1];
  if ((first.kind == PassKind::kForward) == (second.kind == PassKind::kForward)) return false;
  const std::optional<StagedOp> dep = pipeline_dependency(sch, s, second);
  return !dep || built_passes_[pass_slot(dep->stage, dep->op)];
}

// What pass `op` of stage s waits for: the send from the stage before it, or its dependency on
// its own stage; nothing for the first forward. Under DualPipeV also the inputs of the later
// passes whose receives its batch waits for (PassLinks::also_waits_for).
WorkIdList IterationGraphBuilder::pass_input(int s, const PipelineOp& op) const {
  WorkIdList inputs;
  const auto add = [&](const PipelineOp& of) {
    const std::optional<StagedOp> dep = pipeline_dependency(*plan_.schedule, s, of);
    if (!dep) return;
    const PassTasks& before = passes_[pass_slot(dep->stage, dep->op)];
    // Built before `op` (pipeline_pass_order), and its send with it, or with the later pass its
    // output leaves with (which pipeline_inputs put first too).
    PARALLAX_INVARIANT(dep->stage == s || before.send.has_value(), "training/iteration_graph", Time::zero(),
                       "stage " + std::to_string(s) + " builds " + to_string(op) + " before the send of " +
                           to_string(dep->op) + " on stage " + std::to_string(dep->stage));
    for (WorkId id : dep->stage != s ? WorkIdList{*before.send} : before.done) inputs.push_back(id);
  };
  add(op);
  if (const PipelineSchedule::PassLinks* l = plan_.schedule->linked(s, op)) {
    for (const PipelineOp& other : l->also_waits_for) add(other);
  }
  return inputs;
}

IterationGraphBuilder::PassBuild IterationGraphBuilder::begin_pass(int s, const PipelineOp& op) {
  PassBuild b;
  b.s = s;
  b.op = op;
  b.vs = layout_.virtual_stage(s, op.chunk);
  b.list = &plan_.units[static_cast<size_t>(b.vs)];
  b.forward = op.kind == PassKind::kForward;
  b.weight = op.kind == PassKind::kWeight;  // W: no communication but the reduction
  b.input = pass_input(s, op);
  b.reducing = dp_comm_ && op.kind == gradient_kind_ &&
               (layout_.zero_stage == ZeroStage::kStage2 || zero3_ || last_backward_.at({s, op.chunk}) == op.micro_batch);
  b.before_pass = last_compute_[static_cast<size_t>(s)];
  b.prev = b.input;
  // Activation offloading: this pass's copies of each offloaded layer, out (forward) or back.
  b.copies.resize(offload_sync_layer_.size());
  b.offloaded.resize(offload_sync_layer_.size());
  for (const Unit& u : *b.list) {
    if (u.offloaded) b.offloaded[static_cast<size_t>(u.layer)] = &u;
  }
  built_passes_[pass_slot(s, op)] = 1;
  return b;
}

// The pass's `step`-th unit (in the pass's order: the backward runs the units last to first).
void IterationGraphBuilder::add_unit(PassBuild& b, size_t step) {
  const int s = b.s;
  const StageStreams& st = streams_[static_cast<size_t>(s)];
  StageResult& stage = built_.stages[static_cast<size_t>(s)];
  const std::vector<Unit>& list = *b.list;
  const size_t n = list.size();
  const size_t k = b.forward ? step : n - 1 - step;
  const Unit& u = list[k];
  WorkIdList deps = b.prev;
  if (zero3_ && dp_comm_ && !b.weight) {
    // Issued when the layer before the previous one is done (prefetch: it overlaps the
    // previous layer) or when the previous one is done.
    WorkIdList when;
    const size_t lag = layout_.param_gather_prefetch ? 2 : 1;
    if (step >= lag) {
      when.push_back(b.compute_ids[step - lag]);
    } else if (layout_.param_gather_prefetch) {
      if (b.before_pass) when.push_back(*b.before_pass);
    } else {
      when = b.input;
      if (b.before_pass) when.push_back(*b.before_pass);
    }
    deps.push_back(add_comm(s, st.gather, comm_.parameter_gather(s, u), WorkKind::kDpComm, when));
  }
  if (b.forward && prefetched_.count({b.vs, k})) deps.push_back(prefetched_.at({b.vs, k}));
  if (offload_ && b.op.kind == PassKind::kBackward && u.transformer_layer) bring_back(s, u, b.offloaded, b.copies, deps);
  const Segment weight_segment{u.weight_gradient};
  std::span<const Segment> segments = b.forward  ? std::span<const Segment>(u.forward_segments)
                                      : b.weight ? std::span<const Segment>(&weight_segment, 1)
                                      : split_   ? std::span<const Segment>(u.input_gradient_segments)
                                                 : std::span<const Segment>(u.backward_segments);
  SegmentList trimmed;  // the segments less the shared experts that run beside the dispatch
  Time shared_expert = b.overlapped ? Time::zero() : overlapped_shared_expert(u, b.op);
  if (shared_expert > Time::zero()) {
    for (const Segment& seg : segments) trimmed.push_back(seg);
    shared_expert = take_shared_expert(trimmed, shared_expert);
    segments = trimmed;
  }
  const WorkId c = add_segments(s, segments, deps);
  stage.hardware_flops += b.forward  ? u.forward_flops
                          : b.weight ? u.weight_gradient_flops
                          : split_   ? u.backward_flops - u.weight_gradient_flops
                                     : u.backward_flops;
  b.compute_ids.push_back(c);
  b.prev = b.weight ? WorkIdList{c} : add_layer_communication(s, u, b.forward, deps, {c}, shared_expert, b.overlapped);
  if (offload_ && b.forward && u.transformer_layer) copy_out(s, u, c, b.copies, b.prev);
  if (b.reducing && layout_.grad_reduce_overlap) {
    reductions_.push_back(add_comm(s, st.dp, comm_.gradient_reduction(s, u), WorkKind::kDpComm, b.prev));
  }
}

// The gradient reductions left to the pass's end, and its PP send.
void IterationGraphBuilder::finish_pass(PassBuild& b) {
  const int s = b.s;
  const StageStreams& st = streams_[static_cast<size_t>(s)];
  const std::vector<Unit>& list = *b.list;
  const size_t n = list.size();
  if (b.reducing && !layout_.grad_reduce_overlap) {
    for (size_t step = 0; step < n; ++step) {
      reductions_.push_back(add_comm(s, st.dp, comm_.gradient_reduction(s, list[n - 1 - step]), WorkKind::kDpComm, b.prev));
    }
  }
  PassTasks tasks;
  tasks.done = b.prev;
  // Its output leaves as it ends, unless the schedule's code sends it at a later pass's end
  // (DualPipeV); then so do the outputs of the earlier passes that leave with this one.
  const PipelineSchedule::PassLinks* l = plan_.schedule->linked(s, b.op);
  if (!(l && l->output_leaves_after)) tasks.send = add_send(s, b.op, b.prev);
  if (!b.forward) built_.backward_ends.insert(built_.backward_ends.end(), b.prev.begin(), b.prev.end());
  passes_[pass_slot(s, b.op)] = std::move(tasks);
  if (!leaving_after_.empty()) {
    for (const PipelineOp& earlier : leaving_after_[pass_slot(s, b.op)]) {
      const std::optional<WorkId> send = add_send(s, earlier, b.prev);
      passes_[pass_slot(s, earlier)].send = send;
      if (send && options_.keep_timeline) {
        built_.pass_of.resize(graph_.size());
        built_.pass_of[*send] = earlier;
      }
    }
  }
}

// Pass `op`'s PP send after `after`: to the stage of the next virtual stage (the previous one's,
// backward); none from a W, or where a V turns round on one stage.
std::optional<WorkId> IterationGraphBuilder::add_send(int s, const PipelineOp& op, const WorkIdList& after) {
  const int vs = layout_.virtual_stage(s, op.chunk);
  const int to = op.kind == PassKind::kForward && vs < p_ * v_ - 1 ? layout_.stage_of(vs + 1)
                 : op.kind == PassKind::kBackward && vs > 0       ? layout_.stage_of(vs - 1)
                                                                  : s;
  if (to == s) return std::nullopt;
  const CommTask& send = to == (s + 1) % p_ ? comm_.pp_send_forward[static_cast<size_t>(s)]
                                            : comm_.pp_send_backward[static_cast<size_t>(s)];
  return add_comm(s, streams_[static_cast<size_t>(s)].pp, send, WorkKind::kPpComm, after, to);
}

// One offloaded layer's saved activations over the GPU's link to host memory.
Time IterationGraphBuilder::copy_time(const Unit& u) const {
  return Time::from_seconds(u.activations.value() / host_bandwidth_.value());
}

// Forward, after layer u's kernels `c`: its activations go out when it is offloaded, and the
// compute stream waits for each copy whose window ends with u.
void IterationGraphBuilder::copy_out(int s, const Unit& u, WorkId c, std::vector<WorkId>& copies, WorkIdList& prev) {
  if (u.offloaded) {
    copies[static_cast<size_t>(u.layer)] = graph_.add(streams_[static_cast<size_t>(s)].d2h, copy_time(u), WorkKind::kOffload, {c});
  }
  for (size_t j = 0; j < offload_sync_layer_.size(); ++j) {
    if (offload_sync_layer_[j] == u.layer) prev.push_back(copies[j]);
  }
}

// Backward, before layer u: brings back each layer whose window starts here (from what u waits
// for), then makes u wait for its own.
void IterationGraphBuilder::bring_back(int s, const Unit& u, const std::vector<const Unit*>& offloaded,
                                       std::vector<WorkId>& copies, WorkIdList& deps) {
  for (size_t j = offload_sync_layer_.size(); j-- > 0;) {
    if (offload_sync_layer_[j] == u.layer) {
      copies[j] = graph_.add(streams_[static_cast<size_t>(s)].h2d, copy_time(*offloaded[j]), WorkKind::kOffload,
                             std::span<const WorkId>(deps));
    }
  }
  if (u.offloaded) deps.push_back(copies[static_cast<size_t>(u.layer)]);
}

// Global barrier (gradient-norm all-reduce), optimizer step, ZeRO 1/2 parameter gathers.
void IterationGraphBuilder::add_optimizer_steps() {
  const StreamId barrier_stream = graph_.add_stream(-1, "barrier");
  std::vector<WorkId> before_step = built_.backward_ends;
  before_step.insert(before_step.end(), reductions_.begin(), reductions_.end());
  const WorkId barrier = graph_.add(barrier_stream, Time::zero(), WorkKind::kCompute, before_step);
  const int data_parallel = layout_.zero_shard_ranks();  // ranks sharing the model states
  const int expert_dp = layout_.expert_data_parallel();
  for (int s = 0; s < p_; ++s) {
    double parameters = 0, experts = 0, ends = 0;
    Time orthogonalisation;  // Muon's, beside the state it moves
    for (int c = 0; c < v_; ++c) {
      for (const Unit& u : plan_.units[static_cast<size_t>(layout_.virtual_stage(s, c))]) {
        parameters += u.parameters;
        experts += u.expert_parameters;
        if (!u.transformer_layer) ends += u.parameters;
        orthogonalisation += u.optimizer_compute;
      }
    }
    // The option counts fp32 state, read and written once each; smaller state moves less. The
    // dense parameters (Adam on the ends under Muon) and the experts each their own state, over
    // the ranks that share it (as iteration_memory.cpp's model_states sizes them).
    const auto traffic = [&](double params, double adam_params) {
      return options_.optimizer_bytes_per_parameter -
             2.0 * (kAdamOptimizerBytesPerParameter - optimizer_state_bytes_per_parameter(layout_, params, adam_params));
    };
    built_.stages[static_cast<size_t>(s)].parameters = parameters;
    const bool zero0 = layout_.zero_stage == ZeroStage::kStage0;
    const double dense = parameters - experts;
    const double moved = dense / (zero0 ? 1 : data_parallel) * traffic(dense, ends) +
                         experts / (zero0 ? 1 : expert_dp) * traffic(experts, 0.0);
    const Time step = cm_.time(memory_bound_cost(Bytes(moved))) + orthogonalisation;
    const WorkId optimizer = add_compute(s, step, WorkKind::kCompute, WorkIdList{barrier});
    if (!zero12_ || !dp_comm_ || layout_.param_gather_prefetch) continue;
    for (int c = 0; c < v_; ++c) {
      for (const Unit& u : plan_.units[static_cast<size_t>(layout_.virtual_stage(s, c))]) {
        add_comm(s, streams_[static_cast<size_t>(s)].dp, comm_.parameter_gather(s, u), WorkKind::kDpComm,
                 WorkIdList{optimizer});
      }
    }
  }
}

IterationGraph IterationGraphBuilder::build() {
  // Each unit's pass adds its kernels and about two tasks of communication: room for them up
  // front spares the graph's arrays their regrowth.
  size_t unit_passes = 0;
  for (int s = 0; s < p_; ++s) {
    for (const PipelineOp& op : plan_.schedule->per_stage[static_cast<size_t>(s)]) {
      unit_passes += plan_.units[static_cast<size_t>(layout_.virtual_stage(s, op.chunk))].size();
    }
  }
  graph_.reserve(3 * unit_passes);
  built_.across_nodes.reserve(3 * unit_passes);
  prefetch_zero12_gathers();
  for (auto [s, position] : pipeline_pass_order(*plan_.schedule)) {
    const std::vector<PipelineOp>& ops = plan_.schedule->per_stage[static_cast<size_t>(s)];
    if (built_passes_[pass_slot(s, ops[position])]) continue;  // run with the pass before it
    // (A DualPipeV pair without the all-to-all overlap: its forward, then its backward.)
    if (pairs_with(s, position)) {
      add_pass_pair(s, ops[position], ops[position + 1]);
    } else {
      add_pass(s, ops[position]);
    }
  }
  add_optimizer_steps();
  if (options_.keep_timeline) built_.pass_of.resize(graph_.size());
  built_.across_nodes.resize(graph_.size(), false);
  built_.bottleneck.assign(graph_.size(), -1);
  for (WorkId id = 0; id < graph_.size() && cosim_; ++id) {
    if (const auto& played = graph_.transfers(id)) {
      if (const std::optional<LinkId> l = cosim_->bottleneck(*played)) built_.bottleneck[id] = l->value;
    }
  }
  for (const StageStreams& st : streams_) built_.sm_pool.push_back(st.sms);
  return std::move(built_);
}

}  // namespace

std::vector<StagePassTimes> in_line_pass_times(const ParallelLayout& layout, const StagePlan& plan,
                                               const CommunicationPlan& comm) {
  std::vector<StagePassTimes> times = compute_pass_times(plan.units);
  for (size_t vs = 0; vs < times.size(); ++vs) {
    const int s = layout.stage_of(static_cast<int>(vs));
    for (const Unit& u : plan.units[vs]) {
      times[vs].forward += in_line_communication(comm, layout, s, u, true);
      times[vs].input_backward += in_line_communication(comm, layout, s, u, false);
    }
  }
  return times;
}

IterationGraph build_iteration_graph(const ParallelLayout& layout, const IterationOptions& options, const GpuSpec& gpu,
                                     const ComputeModel& cm, const StagePlan& plan, CommunicationPlan& comm,
                                     CoSimulation* cosim, bool every_replica) {
  return IterationGraphBuilder(layout, options, gpu, cm, plan, comm, cosim, every_replica).build();
}

}  // namespace parallax::iteration_detail
