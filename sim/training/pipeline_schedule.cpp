// Pipeline schedules (GPipe, 1F1B, interleaved 1F1B, ZB-H1/H2, ZB-V, DualPipeV), their dependency
// check and the free-communication executor.
#include "training/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <vector>
#include <tuple>
#include <stdexcept>

#include "engine/engine.h"
#include "training/stream_graph.h"

namespace parallax {
namespace {

std::vector<PipelineOp> gpipe_stage(int m) {
  std::vector<PipelineOp> ops;
  for (int i = 0; i < m; ++i) ops.push_back({PassKind::kForward, i, 0});
  for (int i = 0; i < m; ++i) ops.push_back({PassKind::kBackward, i, 0});
  return ops;
}

std::vector<PipelineOp> one_f_one_b_stage(int p, int m, int s) {
  std::vector<PipelineOp> ops;
  const int warmup = std::min(p - s - 1, m);
  int f = 0, b = 0;
  while (f < warmup) ops.push_back({PassKind::kForward, f++, 0});
  while (f < m) {
    ops.push_back({PassKind::kForward, f++, 0});
    ops.push_back({PassKind::kBackward, b++, 0});
  }
  while (b < m) ops.push_back({PassKind::kBackward, b++, 0});
  return ops;
}

// Megatron-Core's interleaved order (schedules.py get_schedule_table): groups of n micro-batches,
// each run chunk by chunk, the last group taking what is left; backwards in the forwards' order
// on the mirrored chunk.
std::vector<PipelineOp> interleaved_stage(int p, int m, int v, int n, int s) {
  std::vector<PipelineOp> table;  // the forwards, in order
  for (int first = 0; first < m; first += n) {
    const int end = std::min(first + n, m);  // the last group takes what is left
    for (int c = 0; c < v; ++c) {
      for (int mb = first; mb < end; ++mb) table.push_back({PassKind::kForward, mb, c});
    }
  }
  const int total = m * v;
  auto backward = [&](int k) {
    const PipelineOp& f = table[static_cast<size_t>(k)];
    return PipelineOp{PassKind::kBackward, f.micro_batch, v - 1 - f.chunk};
  };
  const int warmup = std::min((p - s - 1) * 2 + (v - 1) * n, total);
  std::vector<PipelineOp> ops(table.begin(), table.begin() + warmup);
  for (int k = 0; k < total - warmup; ++k) {
    ops.push_back(table[static_cast<size_t>(warmup + k)]);
    ops.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(backward(k));
  return ops;
}

}  // namespace

namespace pipeline_detail {
namespace {

// What both ZB list schedulers track: each stage's passes so far and when each F and B ends,
// and the rule by which a free stage picks its next pass (the header's): B when it is ready,
// W when the stage holds its limit of micro-batches, else F, else a pending W.
struct ZeroBubbleState {
  ZeroBubbleState(int stages, int micro_batches, int in_flight, const std::vector<StagePassTimes>& pass_times)
      : p(stages), m(micro_batches), limit(in_flight), times(pass_times),
        f_done(static_cast<size_t>(p), std::vector<Time>(static_cast<size_t>(m), Time::max())), b_done(f_done),
        order(static_cast<size_t>(p)), f(static_cast<size_t>(p), 0), b(f), w(f) {}

  static bool finished(Time at, Time now) { return at != Time::max() && at <= now; }
  bool work_left(size_t i) const { return w[i] < m; }
  // What idle stage i waits for, if it is scheduled: the earliest end among them, else never.
  Time awaited(size_t i) const {
    Time at = Time::max();
    if (b[i] < f[i] && static_cast<int>(i) + 1 < p) at = std::min(at, b_done[i + 1][static_cast<size_t>(b[i])]);
    if (f[i] < m && f[i] - w[i] < limit && i > 0) at = std::min(at, f_done[i - 1][static_cast<size_t>(f[i])]);
    return at;
  }
  // The stage that may wait for the pass stage i has just scheduled: the next one for a
  // forward, the one before for a backward; -1 for none.
  int waiter(size_t i) const {
    const PassKind k = order[i].back().kind;
    const int s = static_cast<int>(i);
    if (k == PassKind::kForward) return s + 1 < p ? s + 1 : -1;
    return k == PassKind::kBackward ? s - 1 : -1;
  }

  // Stage i, free at `now`, starts its next pass if one is ready: how long it takes and what
  // it was; nullopt when none can start.
  std::optional<std::pair<Time, PassKind>> act(size_t i, Time now) {
    const int s = static_cast<int>(i);
    const bool b_ready = b[i] < m && finished(f_done[i][static_cast<size_t>(b[i])], now) &&
                         (s == p - 1 || finished(b_done[i + 1][static_cast<size_t>(b[i])], now));
    const bool f_ready = f[i] < m && (s == 0 || finished(f_done[i - 1][static_cast<size_t>(f[i])], now));
    const bool w_pending = w[i] < b[i] && finished(b_done[i][static_cast<size_t>(w[i])], now);
    const bool at_limit = f[i] - w[i] >= limit;
    const StagePassTimes& t = times[i];
    if (b_ready) {
      b_done[i][static_cast<size_t>(b[i])] = now + t.input_backward;
      order[i].push_back({PassKind::kBackward, b[i]++, 0});
      return std::pair{t.input_backward, PassKind::kBackward};
    }
    if (f_ready && !at_limit) {
      f_done[i][static_cast<size_t>(f[i])] = now + t.forward;
      order[i].push_back({PassKind::kForward, f[i]++, 0});
      return std::pair{t.forward, PassKind::kForward};
    }
    if (w_pending) {
      order[i].push_back({PassKind::kWeight, w[i]++, 0});
      return std::pair{t.weight, PassKind::kWeight};
    }
    return std::nullopt;
  }

  const int p, m, limit;
  const std::vector<StagePassTimes>& times;
  std::vector<std::vector<Time>> f_done, b_done;
  std::vector<std::vector<PipelineOp>> order;
  std::vector<int> f, b, w;
};

// ZB-V's state and rule (the header's): per stage and chunk the passes so far, per virtual
// stage when each F and B ends, the chunks a stage holds (one per F until its W), the chunk-1
// weight gradients it has run, and its B passes whose W is pending, in order.
struct VShapeState {
  VShapeState(int stages, int micro_batches, const std::vector<StagePassTimes>& pass_times, bool last_chunk_freely)
      : p(stages), m(micro_batches), limit(2 * stages), lenient(last_chunk_freely), times(pass_times),
        f_done(static_cast<size_t>(2 * p), std::vector<Time>(static_cast<size_t>(m), Time::max())), b_done(f_done),
        order(static_cast<size_t>(p)), f(static_cast<size_t>(p), {0, 0}), b(f), held(static_cast<size_t>(p), 0),
        pending_w(static_cast<size_t>(p)), w_run(static_cast<size_t>(p), 0), w1_run(w_run) {}

  int vs(int s, int c) const { return c == 0 ? s : 2 * p - 1 - s; }
  int stage_of(int v) const { return v < p ? v : 2 * p - 1 - v; }
  // Whether stage i holds room for its next forward of chunk c. A new micro-batch (chunk 0)
  // leaves room for one chunk-1 forward, which can then always run; leniently, it may take the
  // last chunk when something held will be freed without this stage's next chunk-1 forward (a
  // chunk-1 activation, whose backward comes from the stages before it, or a pending W).
  bool fits(size_t i, int c) const {
    const bool frees = lenient && (f[i][1] > w1_run[i] || !pending_w[i].empty());
    return held[i] + (c == 0 && !frees ? 2 : 1) <= limit;
  }
  bool work_left(size_t i) const { return w_run[i] < 2 * m; }
  // What idle stage i waits for (it has no W pending, or it would run it): the earliest end
  // among the passes after which a B or an F of its could start, else never.
  Time awaited(size_t i) const {
    Time at = Time::max();
    const int s = static_cast<int>(i);
    for (int c : {0, 1}) {
      const int v = vs(s, c), nb = b[i][static_cast<size_t>(c)], nf = f[i][static_cast<size_t>(c)];
      if (nb < nf && v < 2 * p - 1) at = std::min(at, b_done[static_cast<size_t>(v + 1)][static_cast<size_t>(nb)]);
      if (nf < m && (c == 0 || nf < f[i][0]) && fits(i, c) && v > 0) {
        at = std::min(at, f_done[static_cast<size_t>(v - 1)][static_cast<size_t>(nf)]);
      }
    }
    return at;
  }
  // The stage that may wait for the pass stage i has just scheduled: the one holding the next
  // virtual stage for a forward, the one before for a backward; -1 for none.
  int waiter(size_t i) const {
    const PipelineOp& op = order[i].back();
    const int v = vs(static_cast<int>(i), op.chunk);
    if (op.kind == PassKind::kForward) return v + 1 < 2 * p ? stage_of(v + 1) : -1;
    return op.kind == PassKind::kBackward && v > 0 ? stage_of(v - 1) : -1;
  }

  std::optional<std::pair<Time, PassKind>> act(size_t i, Time now) {
    const int s = static_cast<int>(i);
    auto done = [&](const std::vector<std::vector<Time>>& at, int v, int mb) {
      return ZeroBubbleState::finished(at[static_cast<size_t>(v)][static_cast<size_t>(mb)], now);
    };
    // B of chunk c: its F ran here, and the B after it (or, last, its own F) has ended.
    auto b_ready = [&](int c) {
      const int mb = b[i][static_cast<size_t>(c)], v = vs(s, c);
      if (mb >= f[i][static_cast<size_t>(c)] || !done(f_done, v, mb)) return false;
      return v == 2 * p - 1 || done(b_done, v + 1, mb);
    };
    auto f_ready = [&](int c) {
      const int mb = f[i][static_cast<size_t>(c)], v = vs(s, c);
      if (mb >= m || (c == 1 && mb >= f[i][0])) return false;
      return v == 0 || done(f_done, v - 1, mb);
    };
    int chosen_b = -1;
    for (int c : {1, 0}) {
      if (b_ready(c) && (chosen_b < 0 || b[i][static_cast<size_t>(c)] < b[i][static_cast<size_t>(chosen_b)])) chosen_b = c;
    }
    if (chosen_b >= 0) {
      const int mb = b[i][static_cast<size_t>(chosen_b)]++, v = vs(s, chosen_b);
      const Time t = times[static_cast<size_t>(v)].input_backward;
      b_done[static_cast<size_t>(v)][static_cast<size_t>(mb)] = now + t;
      order[i].push_back({PassKind::kBackward, mb, chosen_b});
      pending_w[i].push_back({PassKind::kWeight, mb, chosen_b});
      return std::pair{t, PassKind::kBackward};
    }
    for (int c : {1, 0}) {
      if (!f_ready(c) || !fits(i, c)) continue;
      const int mb = f[i][static_cast<size_t>(c)]++, v = vs(s, c);
      const Time t = times[static_cast<size_t>(v)].forward;
      f_done[static_cast<size_t>(v)][static_cast<size_t>(mb)] = now + t;
      ++held[i];
      order[i].push_back({PassKind::kForward, mb, c});
      return std::pair{t, PassKind::kForward};
    }
    if (!pending_w[i].empty()) {  // its B ran on this stage, which is free: it has ended
      const PipelineOp op = pending_w[i].front();
      pending_w[i].pop_front();
      --held[i];
      ++w_run[i];
      if (op.chunk == 1) ++w1_run[i];
      order[i].push_back(op);
      return std::pair{times[static_cast<size_t>(vs(s, op.chunk))].weight, PassKind::kWeight};
    }
    return std::nullopt;
  }

  const int p, m, limit;
  const bool lenient;
  const std::vector<StagePassTimes>& times;
  std::vector<std::vector<Time>> f_done, b_done;  // by virtual stage, micro-batch
  std::vector<std::vector<PipelineOp>> order;
  std::vector<std::array<int, 2>> f, b;  // per stage and chunk: the next micro-batch
  std::vector<int> held;
  std::vector<std::deque<PipelineOp>> pending_w;
  std::vector<int> w_run, w1_run;
};

// A list scheduler played in continuous time with each stage's pass times: a stage that is
// free picks its next pass (State::act) from what has finished by then, or waits for the next
// pass to finish anywhere.
template <typename State>
std::vector<std::vector<PipelineOp>> list_schedule_by_turns(int p, State& zb, Time* makespan = nullptr) {
  const Time never = Time::max();
  const size_t stages = static_cast<size_t>(p);
  std::vector<Time> free_at(stages, Time::zero());
  std::vector<bool> waiting(stages, false);
  std::set<Time> finishes;  // every pass's end, to wake waiting stages
  // The stages with work left by (free at, has just found nothing to do, index): the first
  // acts next.
  std::set<std::tuple<Time, bool, int>> by_turn;
  for (int i = 0; i < p; ++i) by_turn.emplace(Time::zero(), false, i);
  while (!by_turn.empty()) {
    const int s = std::get<2>(*by_turn.begin());
    const size_t i = static_cast<size_t>(s);
    const Time now = free_at[i];
    by_turn.erase(by_turn.begin());
    if (const auto acted = zb.act(i, now)) {
      waiting[i] = false;
      free_at[i] = now + acted->first;
      if (zb.work_left(i)) by_turn.emplace(free_at[i], false, s);
      finishes.insert(free_at[i]);
      if (acted->first == Time::zero()) {
        // It ended at once: the stages waiting at this instant may now have something to do.
        for (size_t j = 0; j < stages; ++j) {
          if (!waiting[j] || free_at[j] != now) continue;
          by_turn.erase({now, true, static_cast<int>(j)});
          by_turn.emplace(now, false, static_cast<int>(j));
          waiting[j] = false;
        }
      }
      continue;
    }
    // Nothing can start: wait for the next pass to end anywhere, or another stage to move
    // (one free now that has not just waited, else the next to be free).
    auto later = finishes.upper_bound(now);
    Time next = later == finishes.end() ? never : *later;
    for (const auto& [at, waits, o] : by_turn) {
      if (at == now && waits) continue;
      next = std::min(next, at);
      break;
    }
    if (next == never) throw std::logic_error("zero bubble: the list scheduler is stuck");
    waiting[i] = next == now;  // another stage acts at this instant first
    free_at[i] = next;
    by_turn.emplace(next, waiting[i], s);
  }
  if (makespan) *makespan = finishes.empty() ? Time::zero() : *finishes.rbegin();
  return std::move(zb.order);
}

// The same list scheduling when every forward and backward takes some time. A stage's choice
// then reads only other stages' passes that ended before the instant it chooses at, so stages
// choosing at one instant do not affect one another, and an idle stage (it has no weight
// gradient pending: those are always ready) can start nothing until a pass it waits for ends
// (State::awaited). It sleeps until then instead of waking at every pass's end anywhere; a
// stage that schedules such a pass wakes it (State::waiter).
template <typename State>
std::vector<std::vector<PipelineOp>> list_schedule_by_events(int p, State& zb, Time* makespan = nullptr) {
  const Time never = Time::max();
  const size_t stages = static_cast<size_t>(p);
  std::vector<Time> wake(stages, Time::zero());  // never: asleep until a neighbour schedules
  std::vector<bool> idle(stages, false);
  using Event = std::pair<Time, int>;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  for (int i = 0; i < p; ++i) events.emplace(Time::zero(), i);
  Time end;
  int finished_stages = 0;
  while (!events.empty()) {
    const auto [now, s] = events.top();
    events.pop();
    const size_t i = static_cast<size_t>(s);
    if (wake[i] != now) continue;  // superseded
    const auto acted = zb.act(i, now);
    if (!acted) {
      idle[i] = true;
      wake[i] = zb.awaited(i);
      if (wake[i] != never) events.emplace(wake[i], s);
      continue;
    }
    end = std::max(end, now + acted->first);
    if (const int j = zb.waiter(i); j >= 0 && j != s && idle[static_cast<size_t>(j)]) {
      // It may wait for this pass: wake it when that (or anything else it waits for) ends.
      const size_t w = static_cast<size_t>(j);
      if (const Time next = zb.awaited(w); next < wake[w]) {
        wake[w] = next;
        events.emplace(next, j);
      }
    }
    idle[i] = false;
    if (!zb.work_left(i)) {
      ++finished_stages;
      wake[i] = never;
      continue;
    }
    wake[i] = now + acted->first;
    events.emplace(wake[i], s);
  }
  if (finished_stages != p) throw std::logic_error("zero bubble: the list scheduler is stuck");
  if (makespan) *makespan = end;
  return std::move(zb.order);
}

}  // namespace

// ZB-H1 and ZB-H2 by list scheduling (the rules are in the header). `limit`: micro-batches a
// stage may hold (F run, W not): p for ZB-H1, 2p − 1 for ZB-H2.
std::vector<std::vector<PipelineOp>> zero_bubble_by_turns(int p, int m, int limit, const std::vector<StagePassTimes>& times) {
  ZeroBubbleState zb(p, m, limit, times);
  return list_schedule_by_turns(p, zb);
}

// Neither way of admitting micro-batches wins everywhere (the lenient one where backward passes
// are long beside W, as under full recomputation): both are played and the order that ends
// first is kept, the strict one on a tie (as the zero-bubble repository's zbv tries its
// variants and keeps the least bubble).
std::vector<std::vector<PipelineOp>> zero_bubble_v(int p, int m, const std::vector<StagePassTimes>& times, bool by_turns) {
  // By events where every forward and backward takes time (the same orders, tested), else by turns.
  by_turns = by_turns || !std::all_of(times.begin(), times.end(), [](const StagePassTimes& t) {
    return t.forward > Time::zero() && t.input_backward > Time::zero();
  });
  Time strict_end, lenient_end;
  VShapeState strict(p, m, times, false), lenient(p, m, times, true);
  std::vector<std::vector<PipelineOp>> strict_order =
      by_turns ? list_schedule_by_turns(p, strict, &strict_end) : list_schedule_by_events(p, strict, &strict_end);
  std::vector<std::vector<PipelineOp>> lenient_order =
      by_turns ? list_schedule_by_turns(p, lenient, &lenient_end) : list_schedule_by_events(p, lenient, &lenient_end);
  return lenient_end < strict_end ? lenient_order : strict_order;
}

// ZB-H1 and ZB-H2 by events (list_schedule_by_events): forward and backward times above zero.
std::vector<std::vector<PipelineOp>> zero_bubble_by_events(int p, int m, int limit, const std::vector<StagePassTimes>& times) {
  ZeroBubbleState zb(p, m, limit, times);
  return list_schedule_by_events(p, zb);
}

namespace {

// One rank of DualPipeV.step, call for call as dualpipev.py makes them: the passes it computes
// and the links its communication makes. A receive posted since the last batch (commit) is
// waited for before the next pass computes, whoever's input it is; a send queued since the last
// batch leaves at the next one, when the last pass computed so far has ended.
class DualPipeVRank {
 public:
  DualPipeVRank(int p, int r, int m, std::vector<PipelineOp>& passes, std::vector<PipelineSchedule::PassLinks>& links)
      : first_(r == 0), last_(r == p - 1), m_(m), passes_(passes), links_(links) {
    links_.assign(3 * static_cast<size_t>(m) * 2, {});
  }

  // The sends and receives that stay on the rank (the V's ends and its turn) are none.
  void recv_forward(int c) {
    if (!((first_ && c == 0) || (last_ && c == 1))) receives_.push_back({PassKind::kForward, received_f_[index(c)]++, c});
  }
  void send_forward(int c) {
    if (!((first_ && c == 1) || (last_ && c == 0))) sends_.push_back({PassKind::kForward, sent_f_[index(c)]++, c});
  }
  void recv_backward(int c) {
    if (!((first_ && c == 1) || (last_ && c == 0))) receives_.push_back({PassKind::kBackward, received_b_[index(c)]++, c});
  }
  void send_backward(int c) {
    if (!((first_ && c == 0) || (last_ && c == 1))) sends_.push_back({PassKind::kBackward, sent_b_[index(c)]++, c});
  }
  void commit() {
    for (const PipelineOp& op : sends_) {
      if (!(op == passes_.back())) link(op).output_leaves_after = passes_.back();
    }
    sends_.clear();
    waiting_.insert(waiting_.end(), receives_.begin(), receives_.end());
    receives_.clear();
  }
  // _forward_chunk, _backward_chunk (`defer`: enable_zb, its W queued), _forward_backward_chunk,
  // _weight_chunk (the queue is first in, first out).
  void forward_chunk(int c, bool recv = true, bool send = true) {
    if (recv) recv_forward(c);
    commit();
    compute({PassKind::kForward, forwards_[index(c)]++, c});
    if (send) send_forward(c);
  }
  void backward_chunk(int c, bool defer = false, bool recv = true, bool send = true) {
    if (recv) recv_backward(c);
    commit();
    backward(c, defer);
    if (send) send_backward(c);
  }
  void forward_backward_chunk(int c0, int c1, bool recv0 = true) {
    if (recv0) recv_forward(c0);
    recv_backward(c1);
    commit();
    const PipelineOp f{PassKind::kForward, forwards_[index(c0)]++, c0};
    compute(f);
    link(f).overlaps_next = true;
    backward(c1, false);
    send_forward(c0);
    send_backward(c1);
  }
  void weight_chunk() {
    commit();
    const PipelineOp w = deferred_.front();
    deferred_.pop_front();
    compute(w);
  }

 private:
  static size_t index(int c) { return static_cast<size_t>(c); }
  PipelineSchedule::PassLinks& link(const PipelineOp& op) {
    return links_[(static_cast<size_t>(op.kind) * static_cast<size_t>(m_) + static_cast<size_t>(op.micro_batch)) * 2 +
                  static_cast<size_t>(op.chunk)];
  }
  // A whole backward is one autograd call: its W right after its B.
  void backward(int c, bool defer) {
    const int mb = backwards_[index(c)]++;
    compute({PassKind::kBackward, mb, c});
    if (defer) {
      deferred_.push_back({PassKind::kWeight, mb, c});
    } else {
      compute({PassKind::kWeight, mb, c});
    }
  }
  void compute(const PipelineOp& op) {
    passes_.push_back(op);
    for (const PipelineOp& input : waiting_) {
      if (!(input == op)) link(op).also_waits_for.push_back(input);
    }
    waiting_.clear();
  }

  bool first_, last_;
  int m_;
  std::vector<PipelineOp>& passes_;
  std::vector<PipelineSchedule::PassLinks>& links_;
  std::array<int, 2> forwards_{}, backwards_{}, received_f_{}, received_b_{}, sent_f_{}, sent_b_{};
  std::vector<PipelineOp> receives_, sends_, waiting_;  // receives and sends since the last batch
  std::deque<PipelineOp> deferred_;
};

}  // namespace

// dualpipev.py's step (its steps 1-8), for each rank r (rank 0 holds the first and the last
// virtual stage).
StageOrders dual_pipe_v(int p, int m) {
  if (p < 1 || m < 2 * p) throw std::invalid_argument("dualpipe_v needs at least 2·p micro-batches for p stages");
  StageOrders orders;
  orders.per_stage.resize(static_cast<size_t>(p));
  orders.links.resize(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    DualPipeVRank o(p, r, m, orders.per_stage[static_cast<size_t>(r)], orders.links[static_cast<size_t>(r)]);
    const bool last = r == p - 1;
    const int after = p - r - 1;  // ranks after this one
    for (int i = 0; i < 2 * after; ++i) o.forward_chunk(0);
    o.recv_forward(0);
    for (int i = 0; i < r + 1; ++i) {
      o.forward_chunk(0, false, false);
      o.recv_forward(0);
      o.forward_chunk(1, true, !last || i < r);
      o.send_forward(0);
    }
    for (int i = 0; i < after; ++i) {
      o.backward_chunk(1, true);
      o.recv_forward(1);
      o.weight_chunk();
      o.forward_chunk(1, false);
    }
    for (int i = 0; i < m - 2 * p + r + 1; ++i) {
      if (i == 0 && last) {
        // Not overlapped on the last rank, "to further reduce bubble size".
        o.forward_chunk(0, false, false);
        o.send_forward(1);
        o.backward_chunk(1, false, true, false);
        o.send_forward(0);
        o.send_backward(1);
      } else {
        o.forward_backward_chunk(0, 1, i > 0);
      }
      o.forward_backward_chunk(1, 0);
    }
    for (int i = 0; i < after; ++i) {
      o.backward_chunk(1);
      o.forward_backward_chunk(1, 0);
    }
    bool defer = false;  // the second half of these backwards leave their W for later
    for (int i = 0; i < r + 1; ++i) {
      if (i == (r + 1) / 2 && r % 2 == 1) defer = true;
      o.backward_chunk(1, defer);
      if (i == (r + 1) / 2 && r % 2 == 0) defer = true;
      o.backward_chunk(0, defer);
    }
    for (int i = 0; i < after; ++i) {
      o.weight_chunk();
      o.backward_chunk(0, true);
    }
    for (int i = 0; i < r + 1; ++i) o.weight_chunk();
    o.commit();
  }
  return orders;
}

}  // namespace pipeline_detail

namespace {

// Zero-bubble orders for forward and backward times above zero by events; weight gradients may
// take no time (a stage of the embedding alone): no other stage reads them.
std::vector<std::vector<PipelineOp>> zero_bubble(int p, int m, int limit, const std::vector<StagePassTimes>& times) {
  const bool timed = std::all_of(times.begin(), times.end(), [](const StagePassTimes& t) {
    return t.forward > Time::zero() && t.input_backward > Time::zero() && t.weight >= Time::zero();
  });
  return timed ? pipeline_detail::zero_bubble_by_events(p, m, limit, times)
               : pipeline_detail::zero_bubble_by_turns(p, m, limit, times);
}

// A stage-and-position pair in an order where every pass comes after its dependency and after
// the earlier passes of its stage; `problem` says why no such order exists.
struct AdditionOrder {
  std::vector<std::pair<int, size_t>> order;
  std::string problem;
};

// Why the schedule's links cannot hold: a stage whose links are not one per pass, a link to a
// pass outside the schedule or (for an output's leaving) not after it on its stage, or an
// overlapped pair that is not a forward followed by a backward.
std::string links_problem(const PipelineSchedule& sch) {
  if (sch.links.empty()) return {};
  if (static_cast<int>(sch.links.size()) != sch.stages) {
    return "the schedule links passes on " + std::to_string(sch.links.size()) + " stage lists of " + std::to_string(sch.stages);
  }
  const bool chunked = sch.chunks > 1;
  const auto outside = [&](const PipelineOp& op) {
    return op.micro_batch < 0 || op.micro_batch >= sch.micro_batches || op.chunk < 0 || op.chunk >= sch.chunks;
  };
  for (int s = 0; s < sch.stages; ++s) {
    const auto& ops = sch.per_stage[static_cast<size_t>(s)];
    if (sch.links[static_cast<size_t>(s)].size() != sch.pass_slots()) {
      return "stage " + std::to_string(s) + " has links for " + std::to_string(sch.links[static_cast<size_t>(s)].size()) +
             " passes, not " + std::to_string(sch.pass_slots());
    }
    std::vector<size_t> position(sch.pass_slots(), 0);
    for (size_t i = 0; i < ops.size(); ++i) position[sch.pass_slot(ops[i])] = i;
    for (size_t i = 0; i < ops.size(); ++i) {
      const PipelineSchedule::PassLinks& l = *sch.linked(s, ops[i]);
      const std::string at = "stage " + std::to_string(s) + " links " + to_string(ops[i], chunked);
      for (const PipelineOp& other : l.also_waits_for) {
        if (outside(other)) return at + " to " + to_string(other, chunked) + ", outside the schedule";
      }
      if (l.output_leaves_after) {
        if (outside(*l.output_leaves_after) || position[sch.pass_slot(*l.output_leaves_after)] <= i) {
          return at + "'s output to the end of " + to_string(*l.output_leaves_after, chunked) + ", which is not after it";
        }
      }
      if (l.overlaps_next && (i + 1 == ops.size() || ops[i].kind != PassKind::kForward || ops[i + 1].kind != PassKind::kBackward)) {
        return "stage " + std::to_string(s) + " pairs " + to_string(ops[i], chunked) +
               " with what follows it, which is not a forward and then a backward";
      }
    }
  }
  return {};
}

AdditionOrder addition_order(const PipelineSchedule& sch) {
  AdditionOrder out;
  const int p = sch.stages;
  const size_t per_stage = static_cast<size_t>(sch.passes_per_micro_batch()) *
                           static_cast<size_t>(sch.micro_batches) * static_cast<size_t>(sch.chunks);
  // Each stage must list every pass once.
  for (int s = 0; s < p; ++s) {
    const auto& ops = sch.per_stage[static_cast<size_t>(s)];
    std::vector<PipelineOp> sorted = ops;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      out.problem = "stage " + std::to_string(s) + " lists " +
                    to_string(*std::adjacent_find(sorted.begin(), sorted.end()), sch.chunks > 1) + " twice";
      return out;
    }
    for (const PipelineOp& op : ops) {
      if (op.micro_batch < 0 || op.micro_batch >= sch.micro_batches || op.chunk < 0 || op.chunk >= sch.chunks) {
        out.problem = "stage " + std::to_string(s) + " lists " + to_string(op, sch.chunks > 1) + ", outside the schedule";
        return out;
      }
    }
    if (ops.size() != per_stage) {
      out.problem = "stage " + std::to_string(s) + " lists " + std::to_string(ops.size()) + " passes, not " +
                    std::to_string(sch.passes_per_micro_batch()) + "·m·v=" + std::to_string(per_stage);
      return out;
    }
    if (!sch.split_backward()) {
      for (const PipelineOp& op : ops) {
        if (op.kind == PassKind::kWeight) {
          out.problem = "stage " + std::to_string(s) + " lists " + to_string(op, sch.chunks > 1) +
                        ", but " + to_string(sch.kind) + " does not split the backward";
          return out;
        }
      }
    }
  }
  if (const std::string why = links_problem(sch); !why.empty()) {
    out.problem = why;
    return out;
  }
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  // Per stage, which passes are placed (all in range, checked above).
  std::vector<std::vector<char>> done(static_cast<size_t>(p), std::vector<char>(sch.pass_slots(), 0));
  // The first of the passes `op` waits for that has not ended, if any.
  const auto awaited = [&](int s, const PipelineOp& op) {
    std::optional<StagedOp> first;
    pipeline_detail::visit_inputs(sch, s, op, [&](const StagedOp& input) {
      if (!done[static_cast<size_t>(input.stage)][sch.pass_slot(input.op)]) first = input;
      return !first;
    });
    return first;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const auto& ops = sch.per_stage[static_cast<size_t>(s)];
      auto& i = next[static_cast<size_t>(s)];
      while (i < ops.size() && !awaited(s, ops[i])) {
        done[static_cast<size_t>(s)][sch.pass_slot(ops[i])] = 1;
        out.order.emplace_back(s, i++);
        progress = true;
      }
    }
  }
  // Every stuck stage, with what its head waits for: together they show the cycle.
  const bool chunked = sch.chunks > 1;
  for (int s = 0; s < p; ++s) {
    const size_t i = next[static_cast<size_t>(s)];
    if (i < per_stage) {
      const PipelineOp& op = sch.per_stage[static_cast<size_t>(s)][i];
      const StagedOp input = *awaited(s, op);
      out.problem += (out.problem.empty() ? "deadlock: " : "; ") + std::string("stage ") + std::to_string(s) +
                     " is stuck at " + to_string(op, chunked) + ", waiting for " + to_string(input.op, chunked) +
                     " on stage " + std::to_string(input.stage);
    }
  }
  return out;
}

}  // namespace

std::string to_string(const PipelineOp& op, bool with_chunk) {
  const char* kind = op.kind == PassKind::kForward ? "F" : op.kind == PassKind::kBackward ? "B" : "W";
  std::string s = kind + std::to_string(op.micro_batch);
  if (with_chunk) s += "." + std::to_string(op.chunk);
  return s;
}

std::string interleaving_problem(int p, int m, int group) {
  const int n = group > 0 ? group : p;
  const std::string N = "the micro-batch group (" + std::to_string(n) + (group > 0 ? ")" : ", pp by default)");
  if (m < p) {
    return "interleaved 1F1B needs at least as many micro-batches (" + std::to_string(m) + ") as stages (" +
           std::to_string(p) + ")";
  }
  if (n < p || n > m) {
    if (group == 0) {
      return "interleaved 1F1B needs the micro-batches (" + std::to_string(m) + ") to be a multiple of the stages (" +
             std::to_string(p) + "), or a micro-batch group between them";
    }
    return N + " must lie between the stages (" + std::to_string(p) + ") and the micro-batches (" + std::to_string(m) + ")";
  }
  if (const int r = m % n; r > 0 && r < p) {
    if (group == 0) {
      return "interleaved 1F1B needs the micro-batches (" + std::to_string(m) + ") to be a multiple of the stages (" +
             std::to_string(p) + "), or a micro-batch group that leaves 0 or at least " + std::to_string(p);
    }
    return N + " leaves a last group of " + std::to_string(r) + " micro-batches, fewer than the stages (" +
           std::to_string(p) + "): give m mod N = 0 or at least pp";
  }
  return {};
}

PipelineSchedule make_pipeline_schedule(PipelineScheduleKind kind, int p, int m, int v,
                                        const std::vector<StagePassTimes>& times, int group) {
  if (p < 1 || m < 1 || v < 1) throw std::invalid_argument("stages, micro-batches and chunks must be at least 1");
  const bool interleaved = kind == PipelineScheduleKind::kInterleavedOneFOneB;
  if (splits_backward(kind)) {
    const std::string name = to_string(kind);
    const int chunks = v_shaped(kind) ? 2 : 1;
    if (v != chunks) {
      throw std::invalid_argument(name + " runs " + std::to_string(chunks) + " model chunk" + (chunks > 1 ? "s" : "") +
                                  " per stage, not " + std::to_string(v));
    }
    PipelineSchedule sch;
    sch.kind = kind;
    sch.stages = p;
    sch.micro_batches = m;
    sch.chunks = v;
    const size_t virtual_stages = static_cast<size_t>(p * v);
    if (!times.empty() && times.size() != virtual_stages) {
      throw std::invalid_argument(name + " needs the pass times of all " + std::to_string(virtual_stages) +
                                  (v > 1 ? " virtual stages" : " stages"));
    }
    const StagePassTimes unit{Time::ps(1), Time::ps(1), Time::ps(1)};
    const std::vector<StagePassTimes> timed = times.empty() ? std::vector<StagePassTimes>(virtual_stages, unit) : times;
    if (kind == PipelineScheduleKind::kDualPipeV) {
      pipeline_detail::StageOrders orders = pipeline_detail::dual_pipe_v(p, m);
      sch.per_stage = std::move(orders.per_stage);
      sch.links = std::move(orders.links);
    } else if (v_shaped(kind)) {
      sch.per_stage = pipeline_detail::zero_bubble_v(p, m, timed);
    } else {
      sch.per_stage = zero_bubble(p, m, kind == PipelineScheduleKind::kZeroBubbleH1 ? p : 2 * p - 1, timed);
    }
    return sch;
  }
  if (!interleaved && v != 1) {
    throw std::invalid_argument(std::string(to_string(kind)) + " runs one model chunk per stage, not " + std::to_string(v));
  }
  if (interleaved) {
    if (const std::string why = interleaving_problem(p, m, group); !why.empty()) throw std::invalid_argument(why);
  }
  PipelineSchedule sch;
  sch.kind = kind;
  sch.stages = p;
  sch.micro_batches = m;
  sch.chunks = v;
  sch.group = group > 0 ? group : p;
  for (int s = 0; s < p; ++s) {
    switch (kind) {
      case PipelineScheduleKind::kGpipe: sch.per_stage.push_back(gpipe_stage(m)); break;
      case PipelineScheduleKind::kOneFOneB: sch.per_stage.push_back(one_f_one_b_stage(p, m, s)); break;
      case PipelineScheduleKind::kInterleavedOneFOneB: sch.per_stage.push_back(interleaved_stage(p, m, v, sch.group, s)); break;
      case PipelineScheduleKind::kZeroBubbleH1:
      case PipelineScheduleKind::kZeroBubbleH2:
      case PipelineScheduleKind::kZeroBubbleV:
      case PipelineScheduleKind::kDualPipeV: break;  // built above
    }
  }
  return sch;
}

std::shared_ptr<const PipelineSchedule> shared_pipeline_schedule(PipelineScheduleKind kind, int p, int m, int v,
                                                                 const std::vector<StagePassTimes>& times, int group) {
  struct Kept {
    PipelineScheduleKind kind;
    int p, m, v, group;
    std::vector<StagePassTimes> times;
    std::shared_ptr<const PipelineSchedule> schedule;
    size_t passes;
  };
  // Bounded by entries and by passes held (about 12 bytes each: some 25 MB per thread at most).
  constexpr size_t kEntries = 64, kPasses = size_t{1} << 21;
  thread_local std::vector<Kept> kept;  // least recently used first
  thread_local size_t passes_kept = 0;
  const bool reads_times = splits_backward(kind) && kind != PipelineScheduleKind::kDualPipeV;
  for (auto it = kept.begin(); it != kept.end(); ++it) {
    if (it->kind == kind && it->p == p && it->m == m && it->v == v && it->group == group &&
        (!reads_times || it->times == times)) {
      std::rotate(it, it + 1, kept.end());
      return kept.back().schedule;
    }
  }
  auto schedule = std::make_shared<const PipelineSchedule>(make_pipeline_schedule(kind, p, m, v, times, group));
  size_t passes = 0;
  for (const auto& stage : schedule->per_stage) passes += stage.size();
  while (!kept.empty() && (kept.size() >= kEntries || passes_kept + passes > kPasses)) {
    passes_kept -= kept.front().passes;
    kept.erase(kept.begin());
  }
  if (passes <= kPasses) {
    kept.push_back(Kept{kind, p, m, v, group, reads_times ? times : std::vector<StagePassTimes>{}, schedule, passes});
    passes_kept += passes;
  }
  return schedule;
}

std::vector<StagedOp> pipeline_inputs(const PipelineSchedule& sch, int s, const PipelineOp& op) {
  std::vector<StagedOp> inputs;
  pipeline_detail::visit_inputs(sch, s, op, [&](const StagedOp& input) {
    inputs.push_back(input);
    return true;
  });
  return inputs;
}

std::optional<StagedOp> pipeline_dependency(const PipelineSchedule& sch, int s, const PipelineOp& op) {
  if (op.kind == PassKind::kWeight) return StagedOp{s, {PassKind::kBackward, op.micro_batch, op.chunk}};
  const int vs = sch.virtual_stage(s, op.chunk);
  const int neighbour = op.kind == PassKind::kForward ? vs - 1 : vs + 1;
  if (op.kind == PassKind::kForward && neighbour < 0) return std::nullopt;
  if (op.kind == PassKind::kBackward && neighbour == sch.stages * sch.chunks) {
    return StagedOp{s, {PassKind::kForward, op.micro_batch, op.chunk}};
  }
  const StageChunk at = sch.stage_chunk(neighbour);
  return StagedOp{at.stage, {op.kind, op.micro_batch, at.chunk}};
}

namespace {

// The order, or a problem: a stage-list count that is not the stage count, or addition_order's.
AdditionOrder checked_addition_order(const PipelineSchedule& schedule) {
  if (static_cast<int>(schedule.per_stage.size()) != schedule.stages) {
    AdditionOrder out;
    out.problem = "the schedule has " + std::to_string(schedule.per_stage.size()) + " stage lists for " +
                  std::to_string(schedule.stages) + " stages";
    return out;
  }
  return addition_order(schedule);
}

}  // namespace

std::string schedule_problem(const PipelineSchedule& schedule) { return checked_addition_order(schedule).problem; }

std::vector<std::pair<int, size_t>> pipeline_pass_order(const PipelineSchedule& schedule) {
  AdditionOrder order = checked_addition_order(schedule);
  if (!order.problem.empty()) throw std::invalid_argument(order.problem);
  return std::move(order.order);
}

double peak_in_flight(const PipelineSchedule& sch, int stage, const std::vector<double>& chunk_weights,
                      bool until_input_gradient) {
  double now = 0, peak = 0;
  const PassKind releases = sch.split_backward() && !until_input_gradient ? PassKind::kWeight : PassKind::kBackward;
  for (const PipelineOp& op : sch.per_stage.at(static_cast<size_t>(stage))) {
    const double w = chunk_weights.empty() ? 1.0 : chunk_weights.at(static_cast<size_t>(op.chunk));
    if (op.kind == PassKind::kForward) now += w;
    if (op.kind == releases) now -= w;
    peak = std::max(peak, now);
  }
  return peak;
}

double PipelineRun::bubble_fraction() const {
  const double total = static_cast<double>(busy.size()) * makespan.seconds();
  return total > 0 ? idle.seconds() / total : 0.0;
}

PipelineRun run_pipeline(const PipelineSchedule& sch, Time forward, Time backward, Time weight) {
  const int64_t v = sch.chunks;
  if (forward.picoseconds() % v != 0 || backward.picoseconds() % v != 0 || weight.picoseconds() % v != 0) {
    throw std::invalid_argument("the forward, backward and weight times must be multiples of v=" + std::to_string(v) +
                                " picoseconds, so that every chunk takes the same whole time");
  }
  if (weight < Time::zero() || weight > backward) {
    throw std::invalid_argument("the weight-gradient time must be between 0 and the backward time");
  }
  const Time f = Time::ps(forward.picoseconds() / v);
  const Time w = sch.split_backward() ? Time::ps(weight.picoseconds() / v) : Time::zero();
  const Time b = Time::ps(backward.picoseconds() / v) - w;
  auto duration = [&](PassKind k) { return k == PassKind::kForward ? f : k == PassKind::kBackward ? b : w; };

  // One compute stream per stage; passes are added in an order where dependencies come first.
  StreamGraph graph;
  for (int s = 0; s < sch.stages; ++s) graph.add_stream(s, "compute");
  std::vector<std::map<PipelineOp, WorkId>> ids(static_cast<size_t>(sch.stages));
  std::vector<std::vector<WorkId>> by_position(static_cast<size_t>(sch.stages));
  for (int s = 0; s < sch.stages; ++s) by_position[static_cast<size_t>(s)].resize(sch.per_stage[static_cast<size_t>(s)].size());
  for (auto [s, i] : pipeline_pass_order(sch)) {
    const PipelineOp& op = sch.per_stage[static_cast<size_t>(s)][i];
    std::vector<WorkId> deps;
    for (const StagedOp& input : pipeline_inputs(sch, s, op)) {
      deps.push_back(ids[static_cast<size_t>(input.stage)].at(input.op));
    }
    const WorkId id = graph.add(static_cast<StreamId>(s), duration(op.kind), WorkKind::kCompute, deps);
    ids[static_cast<size_t>(s)][op] = id;
    by_position[static_cast<size_t>(s)][i] = id;
  }
  Engine engine;
  std::vector<WorkTiming> timings = run_stream_graph(engine, graph);

  PipelineRun run;
  run.busy.assign(static_cast<size_t>(sch.stages), Time::zero());
  run.timings.resize(static_cast<size_t>(sch.stages));
  for (int s = 0; s < sch.stages; ++s) {
    for (WorkId id : by_position[static_cast<size_t>(s)]) {
      run.busy[static_cast<size_t>(s)] += graph.task(id).duration;
      run.makespan = std::max(run.makespan, timings[id].finish);
      run.timings[static_cast<size_t>(s)].emplace_back(timings[id].start, timings[id].finish);
    }
  }
  for (Time busy : run.busy) run.idle += run.makespan - busy;
  return run;
}

}  // namespace parallax
