// One training iteration of a transformer under a parallel layout, simulated on the engine:
// the work of each pipeline stage as a graph of compute kernels and communication on in-order
// streams (stream_graph.h), ordered by the pipeline schedule (pipeline_schedule.h), timed by
// the compute model and the collectives layer; then time, throughput, MFU/HFU, a breakdown of
// each simulated rank's time and its peak memory.
//
// Symmetry: ONE pipeline is simulated, one rank per stage. Stage s's rank stands for the
// tp·cp·dp GPUs of that stage, which run the same kernels at the same times (TP and CP peers
// hold equal shards; DP replicas differ only in data; under router skew EP peers do not, and
// the rank is the slowest of its EP group, see routing). Communication is timed on the groups
// that rank belongs to (TP = consecutive ranks per the rank order, DP, EP and expert DP per
// the expert rank grid, the stage pairs of PP),
// so where a group falls on the topology (in a node, across nodes) matters; that the other
// groups run the same collectives at the same time on other links does not. A simulated GPU's
// own concurrent communication does contend: what it sends inside its node shares its NVLink
// ports, what crosses nodes its NICs (processor sharing, stream_graph.h; a PP send loads the
// sender's side only). Communication kernels do not slow the compute kernels beside them.
//
// What each pass does (per micro-batch and model chunk, layer by layer):
//   compute  forward and backward of layer_operators on the ComputeModel, with ShardingFactors
//            {tp, cp, ep, sp}; the first virtual stage adds the embedding, the last the output
//            layer (final norm, logits, loss). Recomputation adds to the backward: the whole
//            forward (full) or the attention core's forward (selective).
//   TP       Megatron (Shoeybi et al. 2019): 2 all-reduces of S = b·(s/cp)·h elements forward,
//            2 backward; with SP (Korthikanti et al. 2023) each becomes an all-gather plus a
//            reduce-scatter of the same S. Full recomputation repeats the forward's. On the
//            compute stream after the layer's kernels, or with tp_comm_overlap as
//            TransformerEngine pipelines them: (t − 1)/t of it beside the layer's kernels on a
//            TP stream, from when the layer's inputs are ready, and the last of t chunks after
//            both, on the compute stream (it drains the last GEMM chunk). The vocabulary-parallel ends:
//            the embedding's all-reduce (with SP: reduce-scatter, all-gather backward), the
//            output layer's all-gather of the SP shard and reduce-scatter of its gradient
//            (without SP: the gradient's all-reduce), and the cross-entropy's three fp32
//            all-reduces per token (max, Σexp, target logit), on the compute stream.
//   PP       one send of the activations (S/tp elements per TP rank; without SP the receivers
//            then all-gather the S elements over TP: scatter-gather) to the next virtual stage after each forward, and of their gradient back after
//            each backward, on the sender's PP stream; the receiver's pass waits for it.
//            ZB-H1 (pipeline_schedule.h) splits each backward into B — the backward less the
//            GEMMs' weight gradients, which TP, EP, ZeRO-3 and the PP send go with — and W,
//            the weight gradients (each timed as its GEMM's forward), after which the DP
//            reduction of that layer starts; its order is list-scheduled on the stages' own
//            F, B and W compute times (ZB-H2 likewise). ZB-V places two chunks a stage in a V
//            (virtual_stage_of) and its order is made again once the communication is known,
//            each pass's in-line collectives added to its kernels (in_line_pass_times); its
//            memory stays the kernels' order's. DualPipeV, on the same V, ties its sends and
//            receives as dualpipev.py does (PipelineSchedule::links): a send can leave at a
//            later pass's end (a whole backward's with its W) and a pass can wait for a later
//            pass's input too (an overlapped pair for its backward's).
//   EP       Megatron-core's all-to-all token dispatcher with expert TP = tp (layer_operators'
//            assumption), per MoE layer: a dispatch all-to-all before the expert GEMMs and a
//            combine after them in the forward, the same two in the backward (four with full
//            recomputation, which re-runs the dispatcher). Each GPU sends its T_sp = b·(s/cp)
//            tokens (/tp with SP: the dispatcher permutes the sequence-parallel shard and the
//            TP all-gather that follows stands in for the MLP block's SP all-gather, already
//            counted under TP; without SP every TP rank dispatches all T tokens) × top_k slots:
//            a buffer of T_sp·top_k·h·bytes_per_element (nccl-tests' all-to-all size), of which
//            (ep−1)/ep leaves the GPU. Timed on the EP group (the ranks sharing a stage and TP
//            coordinate per Megatron's expert rank generator) on the compute stream, since the
//            expert GEMMs wait for it: kind ep. With moe_shared_expert_overlap the shared
//            experts' kernels (their B part in a zero-bubble B pass) leave the compute stream
//            for a stream of their own that starts with the dispatch and runs beside dispatch
//            and combine on the SMs their kernels leave; the layer ends when both have.
//            With moe_a2a_overlap (Megatron's combined 1F1B) a forward and a backward pass of
//            a stage that follow each other, of different micro-batches, are built as one, unit
//            by unit in turn, their dispatches and combines on an EP stream where only their
//            own pass's next unit waits: each pass's all-to-alls run beside the other's kernels.
//            Under DualPipeV only its overlapped pairs are built so (a whole backward's W
//            then runs after the pair, where DeepSeek's overlapped call interleaves it too).
//   routing  expert_load gives each expert's share of the routed slots; experts sit E/ep in a
//            row per EP rank (Megatron's placement). A capacity factor c caps every expert at
//            c·T·top_k/E of the T·top_k slots of its EP group (Megatron's token-drop, counted
//            per iteration in the result); dropped slots are neither sent nor computed. The
//            simulated rank stands for the SLOWEST rank of its EP group: its grouped expert
//            GEMMs run at the pace of the busiest expert (rows per expert = the busiest
//            expert's processed slots, for every local expert), and its all-to-all buffer is
//            the busiest EP rank's received share. Hardware FLOPs count the processed slots.
//   OFFLOAD  with cpu_offloading_layers = n (pp = 1, no recomputation, as Megatron-Core allows):
//            after each of the first n layers' forward its saved activations go to host memory
//            on a copy stream (activations / the GPU's host_bandwidth); the compute stream
//            waits for layer j's copy at the end of layer cpu_offloading_sync_layers(n, L)[j]
//            and the backward brings layer j back from the start of that layer's backward, on
//            a second copy stream, the layer's backward waiting for it: kind offload. Memory
//            holds, at the forward's peak, the kept layers and the offloaded layers whose
//            window is still open.
//   CP       the attention core of each layer is cut out of its pass (the operators before
//            and after it run as before). Ring attention (TransformerEngine's p2p schedule):
//            cp blocks; block i computes while the CP stream passes the K/V block
//            (T_cp·kv·(d_qk + d_v) elements, T_cp = b·s/cp, kv the KV heads of a TP rank) to the
//            next rank of the CP ring, and block i+1 waits for both — cp−1 passes forward;
//            backward 2(cp−1) blocks (K/V, then K/V with the dK/dV summed so far, then dK/dV),
//            each pass also waiting for the previous block's compute. The ring moves at its
//            slowest pair's send/recv time. Selective recomputation re-runs the core's forward
//            with its ring; full recomputation the whole forward. Ulysses (DeepSpeed): an
//            all-to-all of Q, K, V (T_cp·(H/t·d_qk + kv·(d_qk + d_v))) to head shards before
//            the core and one of the output (T_cp·H/t·d_v) after it, and the same two in the
//            backward, on the compute stream (exposed); cp must divide a TP rank's heads,
//            and KV heads fewer than cp are replicated to one per CP rank (kv → cp above).
//            Gradients and ZeRO shards span the dp·cp ranks that hold the same parameters.
//   DP       per bucket (one layer; the embedding and the output layer are buckets too),
//            gradients in bf16 (fp32 with grad_reduce_in_fp32) over the dp·cp group (a MoE layer's routed-expert gradients over
//            the expert-DP group of dp·cp/ep ranks instead, when ep > 1): all-reduce (ZeRO 0) or reduce-scatter
//            (ZeRO ≥ 1) in the last micro-batch's backward (ZeRO 0/1: gradients accumulate
//            locally) or in every micro-batch's (ZeRO 2/3: only a shard of the gradients is
//            kept). grad_reduce_overlap starts a bucket's reduction when its backward ends;
//            without it, when the whole backward pass ends. ZeRO 1/2 all-gather the updated
//            parameters after the optimizer, or at the start of the iteration before each
//            bucket's first forward with param_gather_prefetch (the previous step's gather,
//            Megatron's overlap_param_gather). ZeRO 3 all-gathers a layer's parameters before
//            its forward and again before its backward, in every micro-batch, issued when the
//            layer before it starts (param_gather_prefetch) or when it ends, on a gather
//            stream of its own (FSDP's), so that it never queues behind a gradient reduction.
//   step     the optimizer waits for every stage (Megatron's global gradient-norm all-reduce
//            for clipping, whose own time is left out), then runs as a memory-bound kernel
//            over the rank's parameter shard: 28 bytes per parameter (read and write an fp32
//            master weight, Adam's two moments and a bf16 weight/gradient).
// Collective times: CollectiveSimulator on the group's GPUs (placed with the group's GPUs per
// node; the model is "analytical" unless options say otherwise), NCCL's choice of algorithm.
// Bytes sent per GPU, counted per collective as the bandwidth-optimal volume: all-reduce
// 2(n−1)/n·S, all-gather and reduce-scatter (n−1)/n·S (S the full buffer), send S.
//
// Breakdown of a simulated rank's time over [0, iteration time]: a moment when a compute
// kernel runs counts as compute; otherwise when communication the rank takes part in is in
// flight, as exposed communication of its kind (tp before cp, ep, pp, dp when several are);
// otherwise as bubble before the last backward of the pipeline ends and idle after it.
//
// Memory per GPU: model states by ZeRO (zero_model_state_bytes; the dp·cp group shards them,
// the expert-DP group the routed experts' when ep > 1); activations by Korthikanti et al. of
// s/cp tokens per layer, FlashAttention's form (no s×s scores; flash_activation_bytes_per_layer),
// × the layers of each chunk × the micro-batches in flight on that stage (peak_in_flight of the
// schedule: p−s on stage s for 1F1B, m for GPipe), plus the output side's (the final norm's and
// the logits' inputs, the cross-entropy's fp32 softmax) and what the recomputation of one layer
// re-creates during its backward (a fully recomputed layer's whole set beyond its input, the
// unfused core's s×s tensors under selective recomputation); and communication buffers (PP send
// and receive, one DP gradient bucket, ZeRO-3's gathered layers: two with prefetch; CP's two K/V
// blocks, or Ulysses' Q, K, V). Not counted: transient gradients, allocator fragmentation, CUDA
// context, workspace.
//
// Not modelled yet: contention with other replicas' traffic on shared switches; the V's
// memory-lean variants (V-Half, V-Min) and DualPipe's bidirectional pipeline; for MoE: the
// imbalance of the all-to-all's senders (only the busiest receiver is modelled), expert routing
// that varies by layer or micro-batch, the all-to-all's buffers and the MoE activations in memory.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/collective_simulator.h"
#include "compute/compute_model.h"
#include "topology/topology.h"
#include "model/model_config.h"
#include "training/parallel_layout.h"
#include "training/pipeline_schedule.h"
#include "training/stream_graph.h"
#include "training/stream_graph_memo.h"

namespace parallax {

class IterationMemo;

struct IterationOptions {
  /// The collectives' network model: "analytical" (closed forms) or a NetworkModel name.
  std::string collective_model = "analytical";
  /// Co-simulation: every collective of the simulated ranks also lowered to flows on its own
  /// group's GPUs and played, when its task starts, on one flow network shared by all of them
  /// (training/cosimulation.h), so that concurrent TP, CP, EP, PP and DP traffic shares the links
  /// it really shares; the channels' processor sharing then gives way to the network. The
  /// sibling replicas' load is still folded in as each collective's slowdown.
  bool cosimulate = false;
  /// With cosimulate: the network model the flows play on ("flow", or "packet" for queues and
  /// lossless flow control, packet by packet: for small jobs).
  std::string cosimulation_network = "flow";
  /// With cosimulate: every replica's communication is played too (each collective of the
  /// simulated ranks together with the same collective of every sibling replica — the other
  /// TP, CP and DP coordinates of its stage — at the same moment, as lockstep replicas run
  /// it), instead of folding the siblings in as slowdowns. Exact for identical replicas and as
  /// costly as the cluster is large: the reference that checks the folding on small cases.
  bool cosimulate_every_replica = false;
  /// Every communication takes zero time (its bytes are still counted): the pipeline alone.
  bool free_communication = false;
  /// Leave out the embedding and the output layer, so that equal stages carry equal work (to
  /// hold the pipeline to its closed forms); the model's parameters still count in memory.
  bool transformer_layers_only = false;
  ComputeModelOptions compute;
  /// GEMM rates: null means the closed-form ShapeEfficiency; a MeasuredGemmTable from the
  /// calibration harness replaces it with the cluster's own measurements.
  std::shared_ptr<const GemmEfficiency> gemm_efficiency;
  /// Link efficiencies for the collectives; nullopt: LinkEfficiency::defaults_for the GPU.
  std::optional<LinkEfficiency> link_efficiency;
  /// Bytes the optimizer reads and writes per parameter it updates.
  double optimizer_bytes_per_parameter = 28.0;
  /// Keep every task's place and time (IterationResult::timeline), for traces and plots.
  bool keep_timeline = false;
  /// With keep_timeline, co-simulated: also each busiest link's load over the iteration and the
  /// tasks that crossed it (LinkUse::load, ::uses), for traces.
  bool keep_link_loads = true;
  /// Each rank's time broken down (StageResult::time: compute, exposed communication by kind,
  /// bubble, idle), the bubble fraction, the compute slowed by communication and the critical
  /// path. Off, they stay zero: a search that ranks by time alone asks for them only for the
  /// layouts it shows.
  bool time_breakdown = true;
  /// Concurrent communication of a simulated GPU shares its links: its collectives and sends
  /// inside a node share its NVLink ports, those across nodes its NICs (processor sharing,
  /// stream_graph.h). false: each is timed as if alone.
  bool communication_contention = true;
  /// A collective's NCCL kernels hold one SM per channel while they run, and the compute kernels
  /// beside them get the SMs left (stream_graph.h); needs the GPU spec's SM count. false:
  /// overlapped communication costs the compute nothing.
  bool sm_contention = true;
  /// Every replica runs the same collectives at the same moments: the simulated replica's are
  /// slowed by the load its siblings put on shared links (an oversubscribed spine, the leaf of
  /// a fabric that is not rail-optimized) and by where its groups really sit
  /// (collectives/sibling_contention.h). false: each group is timed alone, placed from node 0.
  bool replica_contention = true;
  /// Which replica's pipeline is simulated: its TP, CP and DP coordinates (pp is ignored). The
  /// communication of each stage is timed on the groups of that replica's ranks. Any replica
  /// gives the same result where the groups of all replicas sit alike on the topology (tests
  /// check this against every replica of 64-GPU layouts).
  RankCoords replica;
  /// Collective simulators to reuse, built for the same topology and link efficiency (they copy
  /// the topology per group shape, the costly part of timing a small layout): a layout search
  /// gives each thread one for all its layouts. Null: the iteration builds its own.
  CollectiveSimulatorCache* collective_simulators = nullptr;
  /// Timings of the stream graphs played before, reused for an equal graph (analytical network
  /// only; stream_graph.h): a layout search gives each thread one. Null: every graph is played.
  StreamGraphMemo* graph_memo = nullptr;
  /// Results of iterations simulated before, reused for a layout equal but for its rank order
  /// whose communication times alike (analytical network only; iteration_memo.h): a layout
  /// search gives each thread one. Null: every layout is simulated.
  IterationMemo* result_memo = nullptr;
  /// Co-simulated only: called as the iteration's tasks finish (done, in all), for a progress
  /// bar (run_stream_graph); the analytical mode is too quick to need one.
  std::function<void(size_t, size_t)> progress;
};

/// One task of a simulated rank: on which stream, what kind of work, when.
struct TimelineSpan {
  int rank = 0;        ///< the simulated rank (pipeline stage)
  std::string stream;  ///< "compute", "pp", "dp", …
  WorkKind kind = WorkKind::kCompute;
  Time start;
  Time finish;
  size_t task = 0;     ///< its id in the iteration's stream graph (LinkUse names it)
  /// The pipeline pass it belongs to (forward, input or weight gradient, micro-batch, chunk);
  /// none for what runs outside the passes (ZeRO-1/2 parameter prefetch and gathers, optimizer
  /// step, barrier). A ZeRO-3 gather belongs to the pass whose layer it gathers.
  std::optional<PipelineOp> pass;
};

/// Bytes one GPU sends and collectives it joins, per iteration, for one kind of communication.
struct CommunicationVolume {
  Bytes sent;
  int64_t collectives = 0;
  /// How much the sibling replicas' load on shared links slowed these collectives (the
  /// largest factor among them; 1 = not at all). See IterationOptions::replica_contention.
  double replica_slowdown = 1.0;
};

/// Where a simulated rank's iteration time went; the parts add up to the iteration time.
struct RankBreakdown {
  Time compute;
  std::array<Time, kWorkKinds> exposed{};  ///< indexed by WorkKind; kCompute's entry is 0
  /// Of `exposed`, the time while a task of that kind whose group spans nodes was running
  /// (through the NICs and the network; the rest stayed on NVLink or PCIe inside a node).
  std::array<Time, kWorkKinds> exposed_across_nodes{};
  /// Co-simulated: of `exposed`, per link (by name, "from -> to"), the time while the latest
  /// started exposed task of that kind was bound by it alone (its bottleneck link); most first.
  std::array<std::vector<std::pair<std::string, Time>>, kWorkKinds> exposed_by_link{};
  Time bubble;
  Time idle;
  Time exposed_communication() const;
};

struct MemoryBreakdown {
  Bytes parameters;
  Bytes gradients;
  Bytes optimizer_states;
  Bytes activations;
  Bytes communication_buffers;
  Bytes total() const { return parameters + gradients + optimizer_states + activations + communication_buffers; }
};

/// One pipeline stage's simulated rank.
struct StageResult {
  int stage = 0;
  int layers = 0;                ///< transformer layers over all its chunks
  double parameters = 0;         ///< parameters this GPU holds before ZeRO sharding
  Time forward_compute;          ///< one micro-batch's forward kernels over all chunks
  Time backward_compute;         ///< ... backward, recomputation included
  Flops hardware_flops;          ///< FLOPs it executes per iteration (recomputation included)
  double in_flight_micro_batches = 0;  ///< peak, in micro-batches of the whole stage
  RankBreakdown time;
  MemoryBreakdown memory;
  std::array<CommunicationVolume, kWorkKinds> communication{};  ///< indexed by WorkKind
  /// How much longer its compute kernels ran than alone, because collectives beside them held
  /// SMs (IterationOptions::sm_contention), per iteration.
  Time compute_slowed_by_communication;
};

/// A task's transfers over one link: from the first one's start to the last one's end.
struct LinkUse {
  size_t task = 0;  ///< TimelineSpan::task
  Time start, finish;
  Bytes bytes;
};

/// A link of the co-simulated network and how busy the iteration kept it: bytes carried (the
/// simulated ranks' flows, their siblings' load folded in as each collective's slowdown) over
/// what the link could carry in the iteration at its achievable rate.
struct LinkLoad {
  std::string from, to;
  LinkClass link_class = LinkClass::kNetwork;
  Bytes bytes;
  double utilisation = 0;
  /// With IterationOptions::keep_timeline: the link's load over the iteration, as (time,
  /// utilisation) steps, each transfer counted at its mean rate from its start to its end.
  std::vector<std::pair<Time, double>> timeline;
  /// With IterationOptions::keep_timeline: each task that put bytes on the link, in task order.
  std::vector<LinkUse> uses;
};

/// The iteration's critical path (stream_graph.h's critical_path), summed by kind of work:
/// what lengthening or shortening would move the iteration time. `waiting` is time between its
/// tasks (a task that started later than the one it waited for ended).
struct CriticalPath {
  std::array<Time, kWorkKinds> by_kind{};  ///< indexed by WorkKind
  Time waiting;
  size_t tasks = 0;
};

struct IterationResult {
  Time iteration_time;
  CriticalPath critical_path;
  double tokens_per_second = 0;
  double tokens_per_second_per_gpu = 0;
  double mfu = 0;  ///< model FLOPs per second over the GPUs' dense peak in the layout's dtype
  double hfu = 0;  ///< hardware FLOPs (recomputation, FlashAttention's 2.5× backward) likewise
  Flops model_flops_per_token;
  std::string flop_convention;  ///< states the MFU/HFU conventions
  /// Σ_stages bubble / (p × end of the last backward): the pipeline's own idle share.
  double pipeline_bubble_fraction = 0;
  Time pipeline_end;            ///< when the last backward ends
  std::vector<StageResult> stages;
  Bytes peak_memory;            ///< the largest stage's total
  Bytes gpu_memory;             ///< GpuSpec memory
  bool out_of_memory = false;
  int gpus = 0;
  int simulated_ranks = 0;      ///< pp: one per stage
  std::string symmetry;         ///< what the simulated ranks stand for
  /// An uneven pipeline split: its rule and the layers per virtual stage ("automatic: 7, 8×14,
  /// 7"); empty for the even split.
  std::string pipeline_split;
  /// How communication was timed: "analytical" (each collective alone), "flow (co-simulated)" or
  /// "packet (co-simulated)".
  std::string network;
  /// Co-simulated: the busiest link of each link class, busiest first.
  std::vector<LinkLoad> busiest_links;
  size_t tasks = 0;             ///< tasks in the stream graph
  /// Every task of the simulated ranks, when IterationOptions::keep_timeline.
  std::vector<TimelineSpan> timeline;
  /// MoE routing (1, 0, 0 for a dense model): the busiest expert's processed slots over the
  /// uniform share T·top_k/E, the pace factor of the grouped expert GEMMs; the share of the
  /// routed slots dropped by the capacity factor; and those slots per iteration, over all
  /// GPUs and MoE layers (global tokens × top_k × MoE layers × the share).
  double moe_expert_pace = 1;
  double moe_dropped_fraction = 0;
  double moe_dropped_token_slots = 0;
};

/// Memory per GPU of each pipeline stage's rank, without simulating time: the same figures as
/// simulate_iteration's (ZeRO-sharded model states, activations at the schedule's peak in
/// flight, communication buffers), for a layout search to prune with. Throws what
/// simulate_iteration throws for a bad layout.
struct IterationMemory {
  std::vector<MemoryBreakdown> stages;
  std::vector<double> in_flight_micro_batches;  ///< per stage
  Bytes peak_memory;
  Bytes gpu_memory;
  bool out_of_memory = false;
};
IterationMemory estimate_memory(const ModelConfig& model, const ParallelLayout& layout, const GpuSpec& gpu,
                                const IterationOptions& options = {});

/// What one stage plan says of a layout without simulating time: its memory (as
/// estimate_memory) and a lower bound on its iteration time from compute alone — no stage
/// finishes before it has run all its micro-batches' passes, the first of them after the
/// stages ahead of it ran their forward (compute_time_lower_bound in iteration_units.h).
/// Throws what estimate_memory throws.
struct IterationEstimate {
  IterationMemory memory;
  Time time_lower_bound;
};
IterationEstimate estimate_iteration(const ModelConfig& model, const ParallelLayout& layout, const GpuSpec& gpu,
                                     const IterationOptions& options = {});

/// Simulates one iteration. `topology` must have exactly dp·tp·pp·cp GPUs; global rank r is its
/// r-th GPU. Throws InputError (validate's, with pointer "/parallel/...") on a bad layout;
/// std::invalid_argument when the GPU lacks a peak for
/// the layout's dtype (peak_rate of gemm_efficiency.h, with its fallbacks), or on a bad
/// expert_load (wrong length, a negative or non-finite weight, all zero) or capacity factor,
/// or a replica outside the layout.
IterationResult simulate_iteration(const ModelConfig& model, const ParallelLayout& layout, const Topology& topology,
                                   const IterationOptions& options = {});

/// The sustained fraction σ (compute_model.h) at which the simulated iteration takes `measured`:
/// a software stack's σ from one step timed on the user's cluster. The iteration time never
/// grows as σ rises (kernels only get faster), so σ is found by bisection on [0.05, 1] to
/// 1e-4; where communication hides the compute and the time is flat in σ, the largest σ that
/// still takes `measured` is returned. `options.compute.sustained_fraction` is ignored.
/// Throws std::invalid_argument, naming both times, when `measured` is shorter than the
/// iteration at σ = 1 (the kernel model alone is already too slow for this stack) or longer
/// than at σ = 0.05; and what simulate_iteration throws.
double fit_sustained_fraction(const ModelConfig& model, const ParallelLayout& layout, const Topology& topology,
                              IterationOptions options, Time measured);

}  // namespace parallax
