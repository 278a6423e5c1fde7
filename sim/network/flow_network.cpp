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

void FlowNetwork::solve() {
  solve_pending_ = false;
  if (++visit_epoch_ == 0) {  // wrapped: reset marks so stale ones cannot collide
    for (auto& r : resources_) r.visit = 0;
    for (auto& f : flows_) f.visit = 0;
    visit_epoch_ = 1;
  }
  const uint32_t epoch = visit_epoch_;

  // The affected component: everything linked to a dirty resource through shared flows.
  component_flows_.clear();
  component_resources_.clear();
  stack_.clear();
  for (uint32_t r : dirty_) {
    if (resources_[r].visit != epoch) {
      resources_[r].visit = epoch;
      stack_.push_back(r);
    }
  }
  dirty_.clear();
  while (!stack_.empty()) {
    uint32_t r = stack_.back();
    stack_.pop_back();
    component_resources_.push_back(r);
    for (uint32_t slot : resources_[r].flows) {
      Flow& f = flows_[slot];
      if (f.visit == epoch) continue;
      f.visit = epoch;
      component_flows_.push_back(slot);
      for (uint32_t r2 : f.resources) {
        if (resources_[r2].visit != epoch) {
          resources_[r2].visit = epoch;
          stack_.push_back(r2);
        }
      }
    }
  }
  if (component_flows_.empty()) {
    reschedule_completion();
    return;
  }
  // Slot order, so the solve does not depend on how the search happened to walk.
  std::sort(component_flows_.begin(), component_flows_.end());
  std::sort(component_resources_.begin(), component_resources_.end());

  problem_.clear();
  for (uint32_t r : component_resources_) local_of_resource_[r] = problem_.add_resource(resources_[r].capacity);
  for (uint32_t slot : component_flows_) {
    local_path_.clear();
    for (uint32_t r : flows_[slot].resources) local_path_.push_back(local_of_resource_[r]);
    problem_.add_flow(local_path_);
  }
  solver_.solve(problem_, rates_);
  ++solves_;
  solved_flow_count_ += component_flows_.size();

  Time now = engine_.now();
  for (size_t i = 0; i < component_flows_.size(); ++i) {
    uint32_t slot = component_flows_[i];
    Flow& f = flows_[slot];
    if (rates_[i] == f.rate && f.finish != Time::max()) continue;  // unchanged: finish stands
    settle(f);
    f.rate = rates_[i];
    PARALLAX_INVARIANT(f.rate > 0, "flow network", now, "a flow got no bandwidth");
    f.finish = now + transfer_time(Bytes(f.remaining), Bandwidth(f.rate));
    ++f.version;
    due_.push_back(Due{f.finish.picoseconds(), f.id, slot, f.version});
    std::push_heap(due_.begin(), due_.end(), due_later<Due, Due>);
  }
  if (options_.audit) check_capacity();
  reschedule_completion();
}

void FlowNetwork::check_capacity() {
  for (uint32_t r : component_resources_) {
    double sum = 0;
    for (uint32_t slot : resources_[r].flows) sum += flows_[slot].rate;
    audit_.worst_overload = std::max(audit_.worst_overload, sum / resources_[r].capacity - 1.0);
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
