// Pipeline-parallel schedules: for p stages, m micro-batches and v model chunks per stage, the
// ordered list of forward and backward passes each stage runs, their dependencies, and a
// free-communication executor on the engine whose bubbles come out of the schedule.
//
// Model chunks: the model is cut into p·v virtual stages in order; virtual stage c·p + s is
// chunk c of stage s (Megatron-LM's interleaving; v = 1 is the plain pipeline), or in ZB-V's V
// chunk 0 of stage s is virtual stage s and chunk 1 is 2p − 1 − s (virtual_stage_of).
// Dependencies (what pipeline_dependency returns), with vs the pass's virtual stage:
//   F(mb, vs) after F(mb, vs − 1) on the stage that holds it; none for vs = 0
//   B(mb, vs) after B(mb, vs + 1) on the stage that holds it, or after F(mb, vs) on the last
//             virtual stage
//   W(mb, vs) after B(mb, vs) on its own stage
// (interleaved: F(mb, c, s) after F(mb, c, s−1), or after F(mb, c−1, p−1) when s = 0.)
// Orders:
//   GPipe (Huang et al. 2019): every forward, then every backward, in micro-batch order.
//   1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs min(p−s−1, m) warm-up
//     forwards, then alternates one forward and one backward, then the remaining backwards.
//   Interleaved 1F1B (Narayanan et al., SC'21 §2.2; Megatron-LM's
//     forward_backward_pipelining_with_interleaving): micro-batches in groups of N (Megatron-Core's
//     microbatch_group_size_per_vp_stage, default p; Llama 3's "N set flexibly"): a stage runs
//     chunk 0 of every micro-batch of a group, then chunk 1, … chunk v−1, then the next group (the
//     last group takes what is left); the k-th backward is the k-th forward's micro-batch in chunk
//     v−1−c; warm-up min((p−s−1)·2 + (v−1)·N, m·v) forwards, then 1F1B, then cool-down. Needs
//     p ≤ N ≤ m and a last group of 0 or at least p micro-batches (m mod N = 0 or ≥ p); with
//     N = p, m a multiple of p (the k-th forward is micro-batch ⌊k/(p·v)⌋·p + k mod p in chunk
//     ⌊(k mod p·v)/p⌋).
//   ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): the backward is split
//     into B (input gradients, which the previous stage waits for) and W (weight gradients,
//     which nothing downstream waits for), and W passes fill what would be bubbles. Built by
//     list scheduling with the stages' pass times (F = B = W when none are given) and the
//     paper's memory rule for ZB-H1: a stage
//     never holds more than p micro-batches whose F has run and W has not (1F1B's peak, on
//     stage 0). When free, a stage runs B if its dependency is met; else W when it is at that
//     limit; else F if its dependency is met and the limit allows; else a pending W; else it
//     waits. With F = B = W = 1 this reaches the paper's makespan 3m + p − 1 (bubble
//     (p−1)(F + B − W)) when m = p; for m > p the greedy order is a few slots longer (p = 4,
//     m = 8: 29 against 27; 1F1B with the backward whole takes 33), not the paper's
//     hand-made order.
//   ZB-H2 (same paper): the same list scheduler with the limit raised to 2p − 1 micro-batches
//     in flight, the paper's ZB-H2 memory: the extra warm-up forwards fill the start-up
//     bubble, so with F = B = W a stage is never idle after its first forward.
//   ZB-V (same authors, "Pipeline Parallelism with Controllable Memory", 2024; the zero-bubble
//     repository's zbv schedule): two chunks per stage placed in a V (v_shaped: chunk 0 of stage
//     s is virtual stage s, chunk 1 is 2p − 1 − s), so stage 0 holds both the first and the last
//     virtual stage and a micro-batch turns round on stage p − 1 without a send. Built by list
//     scheduling at 1F1B's peak memory: a stage holds at most 2p chunks (p micro-batches'
//     activations), each from its F to its W. When free, a stage runs a ready B (the older
//     micro-batch first, chunk 1 before chunk 0); else chunk 1's next F when ready and it fits;
//     else chunk 0's next F when ready and it fits with room left for one chunk-1 forward (so
//     that one can always run; leniently, the last chunk may go to it when a chunk-1
//     activation or a pending W will free one); else a pending W; else it waits. Both ways of
//     admitting are played and the order that ends first is kept. With F = B = W per chunk it
//     reaches the start-up bound (p − 1)·t_F + 6m·t_F for m ≥ p; where B is long beside W (full
//     recomputation) the 2p chunks run short and it can fall behind ZB-H1 and 1F1B.
//   DualPipeV (DeepSeek-AI's DualPipe repository, dualpipev.py: DualPipe "cut in half" by Sea AI
//     Lab): ZB-V's V, in the fixed order of DualPipeV.step on each rank r: 2(p−r−1) chunk-0
//     forwards; r+1 pairs of chunk-0 and chunk-1 forwards; p−r−1 times a chunk-1 B, a W and a
//     chunk-1 forward; m−2p+r+1 times the overlapped pairs F0&B1 then F1&B0; p−r−1 times B1 then
//     F1&B0; r+1 times B1 then B0; p−r−1 times a W and B0; r+1 Ws. Micro-batches go in order in
//     each chunk; a backward is whole (B then its W) except where the code defers its W to a
//     first-in first-out queue (the zero-bubble steps). Its communication as the code ties it
//     (`links`): receives posted since the last batch are waited for before the next pass, so a
//     pass can wait for a later pass's input too (an overlapped pair for its backward's); sends
//     leave at the next batch, so an output can leave only when a later pass ends (a whole
//     backward's input gradient with its W, one autograd call). Needs m ≥ 2p. With F = B = W per
//     chunk it ends at (2p − 2)·t_F + 6m·t_F: its README's bubble (PP/2 − 1)(F&B + B' − 3W) with
//     PP = 2p stages, B' the whole backward (B + W) and F&B = F + B', p − 1 chunk-passes more than
//     ZB-V, at 2p + 1 chunks a stage (the README's PP + 1).
// Bubble with free communication, each forward taking t_f/v and each backward t_b/v on every
// stage, and bubble fraction = idle time / (p × makespan):
//   GPipe, 1F1B   (p−1)/(m+p−1)      makespan (m+p−1)(t_f+t_b)
//   interleaved   (p−1)/(v·m+p−1)    makespan (m+(p−1)/v)(t_f+t_b)
//   ZB-H1, t_f = t_b/2 = t_w, m = p   (p−1)/(3m+p−1)   makespan (3m+p−1)·t_f
// These hold exactly for any ratio t_b/t_f (the tests use 1:2, 1:1, 1:3 and 2:1), because
// every stage is equally loaded: they fail as soon as stages differ (the embedding on the
// first stage, the logits on the last) or communication takes time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "training/parallel_layout.h"
#include "units/units.h"

namespace parallax {

/// kBackward is the whole backward, or under zero-bubble schedules its input-gradient half (B);
/// kWeight is then the weight-gradient half (W), which waits only for B on its own stage.
enum class PassKind : uint8_t { kForward, kBackward, kWeight };

struct PipelineOp {
  PassKind kind = PassKind::kForward;
  int micro_batch = 0;
  int chunk = 0;
  auto operator<=>(const PipelineOp&) const = default;
};

/// "F3.1", "B3.1", "W3.1": kind, micro-batch, chunk (chunk left out when v = 1).
std::string to_string(const PipelineOp& op, bool with_chunk = true);

struct PipelineSchedule {
  PipelineScheduleKind kind = PipelineScheduleKind::kOneFOneB;
  int stages = 1;        ///< p
  int micro_batches = 1; ///< m
  int chunks = 1;        ///< v
  int group = 1;         ///< interleaved: micro-batches per group (N)
  std::vector<std::vector<PipelineOp>> per_stage;  ///< p lists, each of passes_per_micro_batch()·m·v passes
  /// Where the schedule's code ties a pass's communication to the passes around it (DualPipeV):
  /// per stage, per pass_slot. Empty for the other schedules: a pass waits for its own input
  /// alone and its output leaves as it ends; their pairs (moe_a2a_overlap) form where adjacent
  /// passes are ready together.
  struct PassLinks {
    std::vector<PipelineOp> also_waits_for;         ///< passes of its stage whose inputs it waits for too
    std::optional<PipelineOp> output_leaves_after;  ///< a later pass of its stage at whose end its output leaves
    bool overlaps_next = false;                     ///< a forward run as one with the backward after it
  };
  std::vector<std::vector<PassLinks>> links;
  const PassLinks* linked(int stage, const PipelineOp& op) const {
    return links.empty() ? nullptr : &links[static_cast<size_t>(stage)][pass_slot(op)];
  }
  /// Whether the pass at `position` of `stage` runs as one with the next (an overlapped pair).
  bool pairs_with_next(int stage, size_t position) const {
    const PassLinks* l = links.empty() ? nullptr : linked(stage, per_stage[static_cast<size_t>(stage)][position]);
    return l && l->overlaps_next;
  }
  /// Whether the backward is split into B and W passes (zero-bubble schedules).
  bool split_backward() const { return splits_backward(kind); }
  /// The virtual stage that chunk c of stage s holds, and the inverse.
  int virtual_stage(int s, int c) const { return virtual_stage_of(kind, stages, s, c); }
  StageChunk stage_chunk(int vs) const { return stage_chunk_of(kind, stages, vs); }
  int passes_per_micro_batch() const { return split_backward() ? 3 : 2; }
  /// One stage's passes numbered by (kind, micro-batch, chunk), 0 to pass_slots() − 1, for flat
  /// tables indexed by pass; `op` must be in range (as schedule_problem checks).
  size_t pass_slots() const { return 3 * static_cast<size_t>(micro_batches) * static_cast<size_t>(chunks); }
  size_t pass_slot(const PipelineOp& op) const {
    return (static_cast<size_t>(op.kind) * static_cast<size_t>(micro_batches) + static_cast<size_t>(op.micro_batch)) *
               static_cast<size_t>(chunks) +
           static_cast<size_t>(op.chunk);
  }
};

/// One micro-batch's pass times on a stage: what ZB-H1's list scheduler orders by.
struct StagePassTimes {
  Time forward;
  Time input_backward;  ///< B
  Time weight;          ///< W
  bool operator==(const StagePassTimes&) const = default;
};

/// The schedule of `kind` for p stages, m micro-batches and v chunks, interleaved in groups of
/// `group` micro-batches (0: p). The list-scheduled zero-bubble orders are made with `times`
/// (one entry per virtual stage: per stage when v = 1), or with F = B = W when empty. Throws
/// std::invalid_argument when p, m or v < 1, v > 1 without interleaving, v ≠ 2 in a V, m < 2p
/// in DualPipeV, an interleaved group that does not fit (interleaving_problem), or times of the
/// wrong length.
PipelineSchedule make_pipeline_schedule(PipelineScheduleKind kind, int stages, int micro_batches, int chunks = 1,
                                        const std::vector<StagePassTimes>& times = {}, int group = 0);

/// Why p stages cannot interleave m micro-batches in groups of `group` (0: p); empty when they
/// can (Megatron-Core's checks: p ≤ N ≤ m, and m mod N = 0 or ≥ p).
std::string interleaving_problem(int stages, int micro_batches, int group);

/// make_pipeline_schedule's schedule, shared: each thread keeps the schedules it made last, by
/// their inputs (the pass times only for the zero-bubble orders, which read them), and hands
/// the same one out again. A layout search plans thousands of layouts (for their memory, then
/// again to simulate them) with a few hundred distinct schedules. A pure function's cache.
std::shared_ptr<const PipelineSchedule> shared_pipeline_schedule(PipelineScheduleKind kind, int stages,
                                                                 int micro_batches, int chunks,
                                                                 const std::vector<StagePassTimes>& times, int group = 0);

namespace pipeline_detail {
/// ZB-H1/H2's list scheduling (make_pipeline_schedule) as written: every free stage looks at
/// what has finished, waiting stages wake at every pass's end (and again at an instant when a
/// pass of no time ends at it). Any pass times.
std::vector<std::vector<PipelineOp>> zero_bubble_by_turns(int p, int m, int limit, const std::vector<StagePassTimes>& times);
/// DualPipeV's order (dualpipev.py's step) for p ranks and m ≥ 2p micro-batches, with the links
/// its receives and sends make: per_stage and links as make_pipeline_schedule fills them.
struct StageOrders {
  std::vector<std::vector<PipelineOp>> per_stage;
  std::vector<std::vector<PipelineSchedule::PassLinks>> links;
};
StageOrders dual_pipe_v(int p, int m);
/// ZB-V's list scheduling: `times` per virtual stage (2p entries); by events where every forward
/// and backward takes time (as zero_bubble_by_events), unless `by_turns`.
std::vector<std::vector<PipelineOp>> zero_bubble_v(int p, int m, const std::vector<StagePassTimes>& times,
                                                   bool by_turns = false);
/// The same orders, for forward and backward times above zero (weight gradients may take none),
/// by waking a waiting stage only when the pass
/// it waits for ends: O(passes · log p) instead of O(passes · p²).
std::vector<std::vector<PipelineOp>> zero_bubble_by_events(int p, int m, int limit, const std::vector<StagePassTimes>& times);
}  // namespace pipeline_detail

/// The pass (and its stage) that `op` on `stage` waits for; nullopt for the first forward of
/// the first virtual stage.
struct StagedOp {
  int stage = 0;
  PipelineOp op;
};
std::optional<StagedOp> pipeline_dependency(const PipelineSchedule& schedule, int stage, const PipelineOp& op);

/// The passes that must have ended before `op` on `stage` starts: at whose end its input is
/// there (its dependency, or the later pass of the dependency's stage whose end lets the
/// dependency's output leave), and likewise for each pass whose input it also waits for.
std::vector<StagedOp> pipeline_inputs(const PipelineSchedule& schedule, int stage, const PipelineOp& op);

namespace pipeline_detail {
/// pipeline_inputs one by one to `f` (which returns false to stop), without a list.
template <typename F>
void visit_inputs(const PipelineSchedule& sch, int s, const PipelineOp& op, F&& f) {
  const auto visit = [&](const PipelineOp& of) {
    std::optional<StagedOp> dep = pipeline_dependency(sch, s, of);
    if (!dep) return true;
    if (dep->stage != s) {
      const PipelineSchedule::PassLinks* l = sch.linked(dep->stage, dep->op);
      if (l && l->output_leaves_after) dep->op = *l->output_leaves_after;
    }
    return f(*dep);
  };
  if (!visit(op)) return;
  if (const PipelineSchedule::PassLinks* l = sch.linked(s, op)) {
    for (const PipelineOp& other : l->also_waits_for) {
      if (!visit(other)) return;
    }
  }
}
}  // namespace pipeline_detail

/// Empty when every stage lists each (kind, micro-batch, chunk) exactly once, its links (if
/// any) name passes of the stage and pair a forward with the backward after it, and the lists
/// can run to the end, each pass once pipeline_inputs have ended (no stage waits forever);
/// otherwise the first problem ("stage 1 is stuck at B0 waiting for B0 on stage 2 ...").
std::string schedule_problem(const PipelineSchedule& schedule);

/// Every stage's passes as (stage, position in its list), in one sequence where each pass comes
/// after its pipeline_inputs and after the earlier passes of its stage: the order in which a
/// builder adds them to a StreamGraph. Throws std::invalid_argument with schedule_problem's text.
std::vector<std::pair<int, size_t>> pipeline_pass_order(const PipelineSchedule& schedule);

/// The most (micro-batch, chunk) passes whose forward has run on `stage` and whose backward (W
/// when the backward is split) has not, over the stage's list: the activations it must hold. Chunk c counts chunk_weights[c]
/// (e.g. its layers); empty weights count 1 each. 1F1B gives min(p−s, m) on stage s, GPipe m.
/// `until_input_gradient`: count each pass until its B even when W comes later (for tensors
/// that only the input gradient reads, such as the cross-entropy's softmax).
double peak_in_flight(const PipelineSchedule& schedule, int stage, const std::vector<double>& chunk_weights = {},
                      bool until_input_gradient = false);

/// The outcome of the free-communication executor.
struct PipelineRun {
  Time makespan;
  std::vector<Time> busy;  ///< per stage
  Time idle;               ///< Σ_stages (makespan − busy)
  /// idle / (p · makespan)
  double bubble_fraction() const;
  /// Per stage, per pass of its list: start and finish.
  std::vector<std::vector<std::pair<Time, Time>>> timings;
};

/// Runs `schedule` on the engine with free communication (each pass after its pipeline_inputs;
/// an overlapped pair's two passes one after the other): every forward takes forward/v and
/// every backward backward/v on its stage (`forward` and `backward` are one micro-batch's
/// passes over the whole stage); when the backward is split, W takes `weight`/v of it and B the
/// rest. Throws std::invalid_argument when a time is not a multiple of v picoseconds, weight
/// exceeds backward, or the schedule has a problem.
PipelineRun run_pipeline(const PipelineSchedule& schedule, Time forward, Time backward, Time weight = Time::zero());

}  // namespace parallax
