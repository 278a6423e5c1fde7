#include "network/flow_network.h"

#include <algorithm>
#include <cmath>

#include "engine/invariant.h"

namespace parallax {
namespace {
bool due_later(const auto& a, const auto& b) {
  return a.finish != b.finish ? a.finish > b.finish : a.flow_id > b.flow_id;
}
}  // namespace

FlowNetwork::FlowNetwork(Engine& engine, const Topology& topo, const Router& router, Options options)
    : NetworkModel(engine, topo, router), options_(options), resources_(topo.resource_count()),
      local_of_resource_(topo.resource_count(), 0) {
  for (uint32_t r = 0; r < resources_.size(); ++r) resources_[r].capacity = topo.resource_capacity(r).value();
}

uint32_t FlowNetwork::allocate_slot() {
  if (!free_slots_.empty()) {
    uint32_t s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  flows_.emplace_back();
  return static_cast<uint32_t>(flows_.size() - 1);
}

void FlowNetwork::begin(FlowStart&& start) {
  uint32_t slot = allocate_slot();
  Flow& f = flows_[slot];
  f.id = start.id;
  f.start = start.start;
  f.on_done = std::move(start.on_done);
  f.resources.clear();
  for (LinkId l : *start.path) f.resources.push_back(topo_.link(l).resource);
  f.position.assign(f.resources.size(), 0);
  f.size = f.remaining = start.size.value();
  f.delivered = 0;
  f.rate = 0;
  f.finish = Time::max();
  f.in_fluid = false;
  engine_.schedule_in(start.latency, [this, slot] { enter(slot); });
}

void FlowNetwork::enter(uint32_t slot) {
  Flow& f = flows_[slot];
  if (f.remaining <= 0) {  // zero bytes: nothing to share, done after the latency
    FlowCallback cb = std::move(f.on_done);
    uint64_t id = f.id;
    Time start = f.start;
    free_slots_.push_back(slot);
    complete(id, start, cb);
    return;
  }
  f.in_fluid = true;
  f.last_update = engine_.now();
  ++active_;
  for (size_t i = 0; i < f.resources.size(); ++i) {
    auto& list = resources_[f.resources[i]].flows;
    f.position[i] = static_cast<uint32_t>(list.size());
    list.push_back(slot);
    mark_dirty(f.resources[i]);
  }
  request_solve();
}

void FlowNetwork::leave(uint32_t slot) {
  Flow& f = flows_[slot];
  for (size_t i = 0; i < f.resources.size(); ++i) {
    uint32_t r = f.resources[i];
    auto& list = resources_[r].flows;
    uint32_t pos = f.position[i];
    uint32_t moved = list.back();
    list[pos] = moved;
    list.pop_back();
    if (moved != slot) {
      Flow& m = flows_[moved];
      for (size_t j = 0; j < m.resources.size(); ++j) {
        if (m.resources[j] == r) {
          m.position[j] = pos;
          break;
        }
      }
    }
    mark_dirty(r);
  }
  f.in_fluid = false;
  ++f.version;  // invalidates its pending finish
  --active_;
}

void FlowNetwork::mark_dirty(uint32_t resource) { dirty_.push_back(resource); }

void FlowNetwork::request_solve() {
  if (solve_pending_) return;
  solve_pending_ = true;
  engine_.schedule_in(Time::zero(), [this] { solve(); }, Engine::Phase::kLate);
}

void FlowNetwork::settle(Flow& f) {
  Time now = engine_.now();
  double moved = f.rate * (now - f.last_update).seconds();
  f.remaining = std::max(0.0, f.remaining - moved);
  if (options_.audit) f.delivered += moved;
  f.last_update = now;
}

// Marks are 64-bit and never reused, so no flow or link carries a stale one by accident.
uint64_t FlowNetwork::next_mark() { return ++mark_; }

void FlowNetwork::add_to_subset(uint32_t slot, uint64_t subset_mark) {
  Flow& f = flows_[slot];
  if (f.in_subset == subset_mark) return;
  f.in_subset = subset_mark;
  subset_.push_back(slot);
}

// Load and fastest rate on resource r, with the tentative rates of the subset's flows.
void FlowNetwork::compute_stats(uint32_t r, uint64_t subset_mark, uint64_t stats_mark) {
  Resource& res = resources_[r];
  if (res.stats == stats_mark) return;
  res.stats = stats_mark;
  res.load = 0;
  res.max_rate = 0;
  for (uint32_t slot : res.flows) {
    const Flow& f = flows_[slot];
    double rate = f.in_subset == subset_mark ? f.tentative : f.rate;
    res.load += rate;
    res.max_rate = std::max(res.max_rate, rate);
  }
}

bool FlowNetwork::is_bottleneck(uint32_t r, double rate) const {
  constexpr double kTolerance = 1e-9;
  const Resource& res = resources_[r];
  return res.load >= res.capacity * (1 - kTolerance) && rate >= res.max_rate * (1 - kTolerance);
}

// Max-min by local repair. The max-min fair allocation is the unique feasible one in which every
// flow crosses a saturated link where no flow is faster (its bottleneck). After flows enter or
// leave, only the flows on the changed links are re-solved at first (the subset), by
// progressive filling on what the other flows leave of each link; then every flow whose
// bottleneck could have moved is checked. Flows that lost their bottleneck, and flows that now
// outrun a subset flow on its bottleneck, join the subset and it is solved again. When nothing
// is left to add, every flow has a bottleneck and no link is over capacity: the allocation is
// exactly the max-min one, found without touching the rest of the network. In the worst case
// the subset grows to the whole connected component.
void FlowNetwork::solve() {
  solve_pending_ = false;
  const uint64_t subset_mark = next_mark();
  subset_.clear();
  for (uint32_t r : dirty_) {
    for (uint32_t slot : resources_[r].flows) add_to_subset(slot, subset_mark);
  }
  dirty_.clear();
  if (subset_.empty()) {
    reschedule_completion();
    return;
  }

  constexpr double kTolerance = 1e-9;
  while (true) {
    const uint64_t touch_mark = next_mark();
    const uint64_t stats_mark = touch_mark;
    touched_.clear();
    for (uint32_t slot : subset_) {
      for (uint32_t r : flows_[slot].resources) {
        if (resources_[r].touched != touch_mark) {
          resources_[r].touched = touch_mark;
          touched_.push_back(r);
        }
      }
    }
    // The subproblem: the subset's flows on what the other flows leave of each touched link.
    problem_.clear();
    for (uint32_t r : touched_) {
      double residual = resources_[r].capacity;
      for (uint32_t slot : resources_[r].flows) {
        if (flows_[slot].in_subset != subset_mark) residual -= flows_[slot].rate;
      }
      local_of_resource_[r] = problem_.add_resource(std::max(0.0, residual));
    }
    for (uint32_t slot : subset_) {
      local_path_.clear();
      for (uint32_t r : flows_[slot].resources) local_path_.push_back(local_of_resource_[r]);
      problem_.add_flow(local_path_);
    }
    solver_.solve(problem_, rates_, &bottlenecks_);
    for (size_t i = 0; i < subset_.size(); ++i) {
      flows_[subset_[i]].tentative = rates_[i];
      flows_[subset_[i]].tentative_bottleneck = touched_[bottlenecks_[i]];
    }
    for (uint32_t r : touched_) compute_stats(r, subset_mark, stats_mark);

    const size_t before = subset_.size();
    const uint64_t check_mark = next_mark();
    // A subset flow must be the fastest on some saturated link; if a flow outside the subset
    // outruns it on its solver bottleneck, that flow must give way: it joins.
    for (size_t i = 0; i < before; ++i) {
      Flow& f = flows_[subset_[i]];
      if (is_bottleneck(f.tentative_bottleneck, f.tentative)) continue;
      bool ok = false;
      for (uint32_t r : f.resources) {
        if (is_bottleneck(r, f.tentative)) {
          f.tentative_bottleneck = r;  // remember a link that holds, for later solves
          ok = true;
          break;
        }
      }
      if (ok) continue;
      for (uint32_t slot : resources_[f.tentative_bottleneck].flows) {
        const Flow& h = flows_[slot];
        if (h.in_subset != subset_mark && h.rate > f.tentative * (1 + kTolerance)) add_to_subset(slot, subset_mark);
      }
    }
    // A flow outside the subset keeps its rate; it is still right if its bottleneck is
    // untouched or still a bottleneck for it, or if another of its links now is.
    for (size_t t = 0; t < touched_.size(); ++t) {
      for (uint32_t slot : resources_[touched_[t]].flows) {
        Flow& g = flows_[slot];
        if (g.in_subset == subset_mark || g.checked == check_mark) continue;
        g.checked = check_mark;
        if (resources_[g.bottleneck].touched != touch_mark || is_bottleneck(g.bottleneck, g.rate)) continue;
        bool ok = false;
        for (uint32_t r : g.resources) {
          compute_stats(r, subset_mark, stats_mark);
          if (is_bottleneck(r, g.rate)) {
            // Its rate stands, held by another link now: later solves must look there.
            g.bottleneck = r;
            ok = true;
            break;
          }
        }
        if (!ok) add_to_subset(slot, subset_mark);
      }
    }
    if (subset_.size() == before) break;
    ++repairs_;
  }
  ++solves_;
  solved_flow_count_ += subset_.size();

  Time now = engine_.now();
  for (uint32_t slot : subset_) {
    Flow& f = flows_[slot];
    f.bottleneck = f.tentative_bottleneck;
    if (f.tentative == f.rate && f.finish != Time::max()) continue;  // unchanged: finish stands
    settle(f);
    f.rate = f.tentative;
    PARALLAX_INVARIANT(f.rate > 0, "flow network", now, "a flow got no bandwidth");
    f.finish = now + transfer_time(Bytes(f.remaining), Bandwidth(f.rate));
    ++f.version;
    due_.push_back(Due{f.finish.picoseconds(), f.id, slot, f.version});
    std::push_heap(due_.begin(), due_.end(), due_later<Due, Due>);
  }
  if (options_.audit) check_allocation();
  reschedule_completion();
}

// Audit: over every link with flows, the load must not exceed capacity, and every flow must
// have a bottleneck (the max-min optimality condition), checked from scratch.
void FlowNetwork::check_allocation() {
  const uint64_t none = next_mark();  // no flow carries this mark: committed rates are used
  const uint64_t stats_mark = next_mark();
  for (uint32_t r = 0; r < resources_.size(); ++r) {
    if (resources_[r].flows.empty()) continue;
    compute_stats(r, none, stats_mark);
    audit_.worst_overload = std::max(audit_.worst_overload, resources_[r].load / resources_[r].capacity - 1.0);
  }
  for (const Flow& f : flows_) {
    if (!f.in_fluid) continue;
    bool ok = false;
    for (uint32_t r : f.resources) ok = ok || is_bottleneck(r, f.rate);
    if (!ok) ++audit_.flows_without_bottleneck;
  }
  ++audit_.solves_checked;
}

void FlowNetwork::reschedule_completion() {
  while (!due_.empty()) {
    const Due& top = due_.front();
    const Flow& f = flows_[top.slot];
    if (f.in_fluid && f.version == top.version) break;
    std::pop_heap(due_.begin(), due_.end(), due_later<Due, Due>);
    due_.pop_back();
  }
  Time want = due_.empty() ? Time::max() : Time::ps(due_.front().finish);
  if (want == completion_at_ && engine_.is_pending(completion_event_)) return;
  engine_.cancel(completion_event_);
  completion_at_ = want;
  if (!due_.empty()) completion_event_ = engine_.schedule_at(want, [this] { on_completion_event(); });
}

void FlowNetwork::on_completion_event() {
  completion_at_ = Time::max();
  const int64_t now = engine_.now().picoseconds();
  struct Done {
    uint64_t id;
    Time start;
    FlowCallback cb;
  };
  std::vector<Done> done;
  while (!due_.empty() && due_.front().finish <= now) {
    Due top = due_.front();
    std::pop_heap(due_.begin(), due_.end(), due_later<Due, Due>);
    due_.pop_back();
    Flow& f = flows_[top.slot];
    if (!f.in_fluid || f.version != top.version) continue;
    if (options_.audit) {
      settle(f);
      audit_.worst_bytes_error = std::max(audit_.worst_bytes_error, std::fabs(f.delivered - f.size) / f.size);
    }
    leave(top.slot);
    done.push_back(Done{f.id, f.start, std::move(f.on_done)});
    free_slots_.push_back(top.slot);
  }
  if (!dirty_.empty()) request_solve();
  for (Done& d : done) complete(d.id, d.start, d.cb);
  reschedule_completion();
}

std::optional<Bandwidth> FlowNetwork::rate_of(uint64_t flow_id) const {
  for (const Flow& f : flows_) {
    if (f.in_fluid && f.id == flow_id) return Bandwidth(f.rate);
  }
  return std::nullopt;
}

}  // namespace parallax
