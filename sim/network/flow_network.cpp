#include "network/flow_network.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>
#include <utility>

#include "engine/invariant.h"

namespace parallax {
namespace {
constexpr double kTolerance = 1e-9;  // relative, for "saturated" and "no flow is faster"
constexpr double kRateScale = 1024.0;  // fixed-point units per byte/s in link loads

// A link A is redundant when another link B carries every flow that A carries, at no more
// capacity: A's load never exceeds B's, and when A is saturated so is B with the same flows,
// so whatever A holds B holds too. Dropping A from every path leaves the max-min allocation
// unchanged (it stays feasible on A, and every flow keeps a bottleneck), and the solves get
// smaller: on a GPU's PCIe attach to its own NIC (64 GB/s against a 50 GB/s line) a third of
// a fabric flow's links go. Found from the graph alone, where a NIC joins exactly two links:
// a NIC is never a flow's end (start_flow refuses it) and routes are simple, so a flow that
// enters the NIC by one link leaves it by the other. A is dropped for B only when
// (capacity, index) of A exceeds B's, so two links never drop each other, and a chain ends
// at a kept link on the same path.
std::vector<uint8_t> redundant_resources(const Topology& topo) {
  std::vector<uint32_t> links_of_resource(topo.resource_count(), 0);
  for (uint32_t l = 0; l < topo.link_count(); ++l) ++links_of_resource[topo.link(LinkId{l}).resource];
  // The one link other than `except` leaving the NIC `nic`, if there is exactly one.
  auto only_other_out = [&](DeviceId nic, LinkId except) -> std::optional<LinkId> {
    std::optional<LinkId> other;
    for (LinkId o : topo.out_links(nic)) {
      if (o == except) continue;
      if (other) return std::nullopt;
      other = o;
    }
    return other;
  };
  auto drops_for = [&](uint32_t a, uint32_t b) {
    const double ca = topo.resource_capacity(a).value(), cb = topo.resource_capacity(b).value();
    return ca > cb || (ca == cb && a > b);
  };
  std::vector<uint8_t> redundant(topo.resource_count(), 0);
  for (uint32_t l = 0; l < topo.link_count(); ++l) {
    const Link& link = topo.link(LinkId{l});
    if (links_of_resource[link.resource] != 1) continue;  // a half-duplex cable: both directions
    // Into a NIC: every flow on it goes on by the NIC's only other way out.
    if (topo.device(link.to).kind == DeviceKind::kNic) {
      if (auto next = only_other_out(link.to, link.reverse)) {
        if (drops_for(link.resource, topo.link(*next).resource)) redundant[link.resource] = 1;
      }
    }
    // Out of a NIC: every flow on it came in by the NIC's only other way in.
    if (topo.device(link.from).kind == DeviceKind::kNic) {
      if (auto other_out = only_other_out(link.from, LinkId{l})) {
        const uint32_t prev = topo.link(topo.link(*other_out).reverse).resource;
        if (drops_for(link.resource, prev)) redundant[link.resource] = 1;
      }
    }
  }
  return redundant;
}
}  // namespace

FlowNetwork::FlowNetwork(Engine& engine, const Topology& topo, const Router& router, Options options)
    : NetworkModel(engine, topo, router),
      options_(options),
      resources_(topo.resource_count()),
      touched_(topo.resource_count() + 1) {
  for (uint32_t r = 0; r < resources_.size(); ++r) resources_[r].capacity = topo.resource_capacity(r).value();
  redundant_ = options_.skip_redundant_links ? redundant_resources(topo) : std::vector<uint8_t>(resources_.size(), 0);
}

size_t FlowNetwork::redundant_resource_count() const {
  return static_cast<size_t>(std::count(redundant_.begin(), redundant_.end(), uint8_t{1}));
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

void FlowNetwork::begin(const FlowStart& start) {
  uint32_t slot = allocate_slot();
  Flow& f = flows_[slot];
  f.id = start.id;
  f.sink = start.sink;
  f.tag = start.tag;
  f.weight = static_cast<uint8_t>(start.weight);
  path_scratch_.clear();
  for (LinkId l : *start.path) {
    const uint32_t r = topo_.link(l).resource;
    if (!redundant_[r]) path_scratch_.push_back(r);
  }
  if (f.path_size > kInlinePath) free_long_paths_.push_back(f.long_index);  // the slot's last flow's
  if (path_scratch_.size() > UINT8_MAX) throw std::length_error("a route of more than 255 shared links");
  f.path_size = static_cast<uint8_t>(path_scratch_.size());
  if (f.path_size <= kInlinePath) {
    std::copy(path_scratch_.begin(), path_scratch_.end(), f.short_path.begin());
  } else {
    if (free_long_paths_.empty()) {
      f.long_index = static_cast<uint32_t>(long_paths_.size());
      long_paths_.emplace_back();
    } else {
      f.long_index = free_long_paths_.back();
      free_long_paths_.pop_back();
    }
    long_paths_[f.long_index] = std::make_unique<uint32_t[]>(2 * size_t{f.path_size});
    std::copy(path_scratch_.begin(), path_scratch_.end(), long_paths_[f.long_index].get());
  }
  f.remaining = start.size.value();
  if (options_.audit) {
    if (audit_bytes_.size() <= slot) audit_bytes_.resize(slot + 1);
    audit_bytes_[slot] = AuditBytes{start.size.value(), 0.0};
  }
  f.rate = 0;
  f.in_fluid = false;
  entering_at_.schedule_at(engine_.now() + start.latency, slot);
}

void FlowNetwork::enter(uint32_t slot) {
  Flow& f = flows_[slot];
  if (f.remaining <= 0) {  // zero bytes: nothing to share, done after the latency
    free_slots_.push_back(slot);
    complete(f.sink, f.tag);
    return;
  }
  f.in_fluid = true;
  f.last_update = engine_.now();
  ++active_;
  for (size_t i = 0; i < f.path_size; ++i) {
    Resource& res = resources_[path(f)[i]];
    position(f, i) = static_cast<uint32_t>(res.flows.size());
    res.flows.push_back(slot);
    res.shares += f.weight;
    mark_dirty(path(f)[i]);
  }
  entering_.push_back(slot);
  request_solve();
}

void FlowNetwork::leave(uint32_t slot) {
  Flow& f = flows_[slot];
  drop_bottleneck(slot);
  const int64_t rate_fixed = fixed(f.rate) * f.weight;
  for (size_t i = 0; i < f.path_size; ++i) {
    uint32_t r = path(f)[i];
    Resource& res = resources_[r];
    res.load_fixed -= rate_fixed;
    res.shares -= f.weight;
    if (f.rate >= res.max_rate) res.max_stale = true;
    auto& list = res.flows;
    uint32_t pos = position(f, i);
    uint32_t moved = list.back();
    list[pos] = moved;
    list.pop_back();
    if (moved != slot) {
      Flow& m = flows_[moved];
      for (size_t j = 0; j < m.path_size; ++j) {
        if (path(m)[j] == r) {
          position(m, j) = pos;
          break;
        }
      }
    }
    mark_dirty(r);
  }
  f.in_fluid = false;
  f.rate = 0;
  due_.erase(slot);
  --active_;
}

// Once per resource and solve: an all-to-all's entering flows would otherwise list each of
// their links, four entries a flow, millions at the first solve.
void FlowNetwork::mark_dirty(uint32_t resource) {
  Resource& res = resources_[resource];
  if (res.dirty) return;
  res.dirty = true;
  dirty_.push_back(resource);
}

void FlowNetwork::request_solve() {
  if (solve_pending_) return;
  solve_pending_ = true;
  engine_.schedule_in(Time::zero(), [this] { solve(); }, Engine::Phase::kLate);
}

void FlowNetwork::settle(uint32_t slot) {
  Flow& f = flows_[slot];
  Time now = engine_.now();
  double moved = f.rate * f.weight * (now - f.last_update).seconds();
  f.remaining = std::max(0.0, f.remaining - moved);
  if (options_.audit) audit_bytes_[slot].delivered += moved;
  f.last_update = now;
}

// Marks are 64-bit and never reused, so no link carries a stale one by accident. A flow keeps
// the low half (4 bytes a record): when that half wraps, every flow's is cleared and 0 skipped,
// so a flow's mark never equals a later solve's unless that solve set it.
uint64_t FlowNetwork::next_mark() {
  ++mark_;
  if (static_cast<uint32_t>(mark_) == 0) {
    for (Flow& f : flows_) f.in_subset = 0;
    ++mark_;
  }
  return mark_;
}

void FlowNetwork::add_to_subset(uint32_t slot, uint64_t subset_mark) {
  Flow& f = flows_[slot];
  if (f.in_subset == static_cast<uint32_t>(subset_mark)) return;
  f.in_subset = static_cast<uint32_t>(subset_mark);
  subset_.push_back(slot);
}

void FlowNetwork::add_held(Resource& res, uint64_t subset_mark) {
  if (res.expanded == subset_mark) return;
  res.expanded = subset_mark;
  for (uint32_t slot : res.bottlenecked) add_to_subset(slot, subset_mark);
}

// The flows that a new flow will make give way, predicted so that they join before the first
// round rather than as its repair. On each link of the new flow, the water level it would reach
// there with every other flow's rate fixed: L with Σ min(rate_i, L) + L·(flows still without a
// rate) = capacity, found by raising L from capacity/n while flows slower than L leave it their
// share (at most one pass per distinct rate; they are few). The lowest level is the new flow's
// likely bottleneck, and the flows there faster than it must slow down: they join now. A
// prediction only: a subset may be any superset of what it must hold, so a wrong one costs
// time, never exactness. (Measured on 100k rail-shift flows: repairs 71.5k → 47.3k, flows per
// solve 50.7 → 45.8, 0.93× paired; seeding every flow on the new flow's links instead: 2.2×.)
void FlowNetwork::add_predicted_givers(uint32_t slot, uint64_t subset_mark) {
  double lowest = std::numeric_limits<double>::infinity();
  uint32_t tightest = 0;
  for (uint32_t r : path(flows_[slot])) {
    const double level = predicted_level(r, subset_mark);
    if (level < lowest) {
      lowest = level;
      tightest = r;
    }
  }
  // Every new flow whose tightest link is this one finds the same givers: once per solve.
  Resource& res = resources_[tightest];
  if (res.givers_mark == subset_mark) return;
  res.givers_mark = subset_mark;
  for (uint32_t other : res.flows) {
    if (flows_[other].rate > lowest * (1 + kTolerance)) add_to_subset(other, subset_mark);
  }
}

// The level depends on the link's flows alone, which stay as they are while a solve seeds its
// subset, so it is computed once per link and solve: an all-to-all's thousands of flows that
// enter one link together would otherwise each walk its whole list.
double FlowNetwork::predicted_level(uint32_t r, uint64_t subset_mark) {
  Resource& res = resources_[r];
  if (res.level_mark == subset_mark) return res.level;
  double level = res.capacity / static_cast<double>(res.shares);
  for (size_t pass = 0; pass < res.flows.size(); ++pass) {
    double below = 0;
    size_t wanting = 0;
    for (uint32_t other : res.flows) {
      const Flow& h = flows_[other];
      const double rate = h.rate;  // 0: entered at this instant, not yet solved
      if (rate > 0 && rate < level) {
        below += rate * h.weight;
      } else {
        wanting += h.weight;
      }
    }
    const double raised = (res.capacity - below) / static_cast<double>(wanting);
    if (!(raised > level * (1 + kTolerance))) break;
    level = raised;
  }
  res.level_mark = subset_mark;
  res.level = level;
  return level;
}

// Rates are never negative, so adding a half and truncating rounds to nearest (ties up) without
// a call into libm.
int64_t FlowNetwork::fixed(double rate) { return static_cast<int64_t>(rate * kRateScale + 0.5); }

double FlowNetwork::committed_max(uint32_t r) {
  Resource& res = resources_[r];
  if (res.max_stale) {
    res.max_rate = 0;
    for (uint32_t slot : res.flows) res.max_rate = std::max(res.max_rate, flows_[slot].rate);
    res.max_stale = false;
  }
  return res.max_rate;
}

// The fastest committed rate on r among flows outside the subset; walks the list only when the
// link's fastest flow could be a subset flow (whose committed rate no longer counts).
double FlowNetwork::outside_max(uint32_t r, uint64_t subset_mark, uint64_t round_mark) {
  Resource& res = resources_[r];
  if (res.outside_max_mark != round_mark) {
    res.outside_max_mark = round_mark;
    double fastest = 0;
    for (uint32_t slot : res.flows) {
      const Flow& h = flows_[slot];
      const double outside = static_cast<double>(h.in_subset != static_cast<uint32_t>(subset_mark));  // 0 or 1: no branch
      fastest = std::max(fastest, h.rate * outside);
    }
    res.outside_max = fastest;
  }
  return res.outside_max;
}

// A link holds a flow at `rate` (is its bottleneck) when it is saturated and no flow on it is
// faster; this reads the state that the solve in progress proposes on a touched link.
bool FlowNetwork::holds_tentative(uint32_t r, double rate, uint64_t subset_mark, uint64_t round_mark) {
  const Resource& res = resources_[r];
  const double load =
      static_cast<double>(res.load_fixed - res.subset_committed_fixed) / kRateScale + solver_.resource_load()[res.local];
  if (load < res.capacity * (1 - kTolerance) || rate < solver_.resource_fastest()[res.local] * (1 - kTolerance)) {
    return false;
  }
  if (rate >= committed_max(r) * (1 - kTolerance)) return true;  // nobody outside is faster either
  return rate >= outside_max(r, subset_mark, round_mark) * (1 - kTolerance);
}

void FlowNetwork::commit_rate(Flow& f, double rate) {
  const int64_t delta = (fixed(rate) - fixed(f.rate)) * f.weight;
  for (uint32_t r : path(f)) {
    Resource& res = resources_[r];
    res.load_fixed += delta;
    // Without branches (which way they go is a coin toss here): the maximum goes stale when
    // the fastest flow slows down, and the next reader rescans; a stale maximum's value is
    // never read, so raising it meanwhile is harmless.
    const double max = res.max_rate;
    res.max_stale = res.max_stale | ((rate < max) & (f.rate >= max));
    res.max_rate = std::max(rate, max);
  }
  f.rate = rate;
}

void FlowNetwork::set_bottleneck(uint32_t slot, uint32_t r) {
  Flow& f = flows_[slot];
  if (f.has_bottleneck && f.bottleneck == r) return;
  drop_bottleneck(slot);
  auto& list = resources_[r].bottlenecked;
  f.bottleneck = r;
  f.bottleneck_pos = static_cast<uint32_t>(list.size());
  f.has_bottleneck = true;
  list.push_back(slot);
}

void FlowNetwork::drop_bottleneck(uint32_t slot) {
  Flow& f = flows_[slot];
  if (!f.has_bottleneck) return;
  auto& list = resources_[f.bottleneck].bottlenecked;
  const uint32_t moved = list.back();
  list[f.bottleneck_pos] = moved;
  flows_[moved].bottleneck_pos = f.bottleneck_pos;
  list.pop_back();
  f.has_bottleneck = false;
}

// Max-min by local repair. The max-min fair allocation is the unique feasible one in which every
// flow crosses a saturated link where no flow is faster (its bottleneck). Each flow records the
// link that holds it, and each link lists the flows it holds. After flows enter or leave, the
// subset to re-solve is the new flows and the flows held by a changed link, closed over the
// flows held by every link a subset flow crosses: a subset flow may change rate, and with it
// the state of each of its links. The subset is solved by progressive filling on what the
// other flows leave of each link. A flow outside it keeps its rate and its bottleneck — a link
// no subset flow crosses, whose state is unchanged. What can break is a subset flow's
// bottleneck: a flow outside the subset may be faster there. Such flows must give way, so they
// join (with the closure of what their links hold) and the subset is solved again. When none
// joins, every flow has a bottleneck and no link is over capacity: the allocation is exactly
// the max-min one, found without touching the rest of the network. In the worst case the
// subset grows to the whole connected component.
//
// The checks read each link's maintained aggregates (load, fastest rate) plus what the subset
// changes on it, so a solve costs what the subset's paths cost, not the length of the flow
// lists of the links it touches.
void FlowNetwork::solve() {
  solve_pending_ = false;
  const uint64_t subset_mark = next_mark();
  subset_.clear();
  // The first subset: the flows that entered and the flows held by a link that a flow entered
  // or left — then, transitively, the flows held by any link a subset flow crosses, since a
  // subset flow may change rate and with it the state of each of its links. A flow on those
  // links that is held elsewhere keeps its rate unless the new rates disturb its own
  // bottleneck; the checks below bring such flows in. (Measured on 100k rail-shift flows:
  // 7.1 s seeding every flow of the changed links, 4.2 s with this closure at the seed only,
  // 3.4 s with the joiners' closure below as well; random peers 3.3 s → 1.1 s.)
  for (uint32_t slot : entering_) {
    if (!flows_[slot].in_fluid) continue;
    add_to_subset(slot, subset_mark);
    add_predicted_givers(slot, subset_mark);
  }
  entering_.clear();
  for (uint32_t r : dirty_) {
    resources_[r].dirty = false;
    add_held(resources_[r], subset_mark);
  }
  dirty_.clear();
  if (subset_.empty()) {
    reschedule_completion();
    return;
  }

  // The subproblem, built in one pass over the subset's paths: the subset's flows on what the
  // other flows leave of each link they touch. The same pass closes the subset: the flows held
  // by each link it meets join at the end and are walked in turn (each link's held list once
  // per solve). A repair round adds only the joiners' rows; the capacities of every touched link
  // are then recomputed, since the joiners' committed rates no longer count as the others'.
  uint32_t touched = 0;  // touched_[0, touched): the links of the subproblem, by local index
  problem_.clear();
  size_t built = 0;  // subset_[0, built) have their rows in problem_
  while (true) {
    const uint64_t round_mark = next_mark();
    for (size_t i = built; i < subset_.size(); ++i) {
      const Flow& f = flows_[subset_[i]];
      const int64_t rate_fixed = fixed(f.rate) * f.weight;
      const uint32_t first_new = touched;
      for (uint32_t r : path(f)) {
        Resource& res = resources_[r];
        // Without a branch (whether a link is new to this solve is a coin toss): a link is
        // written at the end of the list every time and counted only the first time.
        const uint32_t fresh = static_cast<uint32_t>(res.touched != subset_mark);
        res.touched = subset_mark;
        touched_[touched] = r;
        res.local += fresh * (touched - res.local);  // arithmetic: GCC turns a ?: here into a branch
        res.subset_committed_fixed = res.subset_committed_fixed * (1 - fresh) + rate_fixed;
        touched += fresh;
        problem_.flow_resources.push_back(res.local);
      }
      for (uint32_t t = first_new; t < touched; ++t) add_held(resources_[touched_[t]], subset_mark);
      problem_.flow_offsets.push_back(static_cast<uint32_t>(problem_.flow_resources.size()));
      problem_.weigh_last_flow(f.weight);
    }
    built = subset_.size();
    problem_.capacity.clear();
    for (uint32_t r : std::span<const uint32_t>(touched_.data(), touched)) {
      const Resource& res = resources_[r];
      const double others = static_cast<double>(res.load_fixed - res.subset_committed_fixed) / kRateScale;
      problem_.add_resource(std::max(0.0, res.capacity - others));
    }
    solver_.solve(problem_, rates_, &bottlenecks_);
    for (size_t i = 0; i < subset_.size(); ++i) bottlenecks_[i] = touched_[bottlenecks_[i]];  // local → link

    const size_t before = subset_.size();
    // A subset flow must be the fastest on some saturated link; if a flow outside the subset
    // outruns it on its solver bottleneck, that flow must give way: it joins.
    for (size_t i = 0; i < before; ++i) {
      const double tentative = rates_[i];
      if (holds_tentative(bottlenecks_[i], tentative, subset_mark, round_mark)) continue;
      bool ok = false;
      for (uint32_t r : path(flows_[subset_[i]])) {
        if (holds_tentative(r, tentative, subset_mark, round_mark)) {
          bottlenecks_[i] = r;  // remember a link that holds, for later solves
          ok = true;
          break;
        }
      }
      if (ok) continue;
      for (uint32_t slot : resources_[bottlenecks_[i]].flows) {
        const Flow& h = flows_[slot];
        if (h.in_subset != static_cast<uint32_t>(subset_mark) && h.rate > tentative * (1 + kTolerance)) {
          add_to_subset(slot, subset_mark);
        }
      }
    }
    // A flow outside the subset keeps its rate, and its recorded bottleneck still holds it:
    // the subset is closed over the flows that the links it touches hold, so that bottleneck is
    // a link no subset flow crosses, whose load and flows this solve leaves as they were.
    if (subset_.size() == before) break;
    // A flow that joins will change rate, so the flows held by its links may too: the next
    // round's build brings them in, and theirs in turn, rather than one round later each.
    ++repairs_;
  }
  ++solves_;
  solved_flow_count_ += subset_.size();

  Time now = engine_.now();
  // Every slot may be pending at once: room for all of them before the first of a solve's
  // million new finishes, rather than doubling while the solve's own arrays are largest.
  due_.reserve(flows_.capacity());
  for (size_t i = 0; i < subset_.size(); ++i) {
    const uint32_t slot = subset_[i];
    Flow& f = flows_[slot];
    set_bottleneck(slot, bottlenecks_[i]);
    if (rates_[i] == f.rate && due_.contains(slot)) continue;  // unchanged: finish stands
    settle(slot);
    commit_rate(f, rates_[i]);
    PARALLAX_INVARIANT(f.rate > 0, "flow network", now, "a flow got no bandwidth");
    due_.set(slot, (now + transfer_time(Bytes(f.remaining), Bandwidth(f.rate * f.weight))).picoseconds(), f.id);
  }
  if (options_.audit) check_allocation();
  reschedule_completion();
}

// Audit: over every link with flows, the load must not exceed capacity, and every flow must
// have a bottleneck (the max-min optimality condition), checked from scratch — not from the
// maintained aggregates, which this also checks.
void FlowNetwork::check_allocation() {
  audit_totals_.resize(resources_.size());
  for (uint32_t r = 0; r < resources_.size(); ++r) {
    const Resource& res = resources_[r];
    AuditTotals& sums = audit_totals_[r];
    sums = AuditTotals{};
    if (res.flows.empty()) continue;
    for (uint32_t slot : res.flows) {
      sums.load += flows_[slot].rate * flows_[slot].weight;
      sums.max = std::max(sums.max, flows_[slot].rate);
    }
    audit_.worst_overload = std::max(audit_.worst_overload, sums.load / res.capacity - 1.0);
    const double aggregate = static_cast<double>(res.load_fixed) / kRateScale;
    audit_.worst_aggregate_error =
        std::max(audit_.worst_aggregate_error, std::fabs(aggregate - sums.load) / res.capacity);
    if (!res.max_stale && res.max_rate != sums.max) ++audit_.stale_maxima;
  }
  // A resource holds a flow at `rate` when it is saturated and no flow on it is faster.
  auto holds = [&](uint32_t r, double rate) {
    const AuditTotals& sums = audit_totals_[r];
    return sums.load >= resources_[r].capacity * (1 - kTolerance) && rate >= sums.max * (1 - kTolerance);
  };
  for (uint32_t slot = 0; slot < flows_.size(); ++slot) {
    const Flow& f = flows_[slot];
    if (!f.in_fluid) continue;
    bool ok = false;
    for (uint32_t r : path(f)) ok = ok || holds(r, f.rate);
    if (!ok) ++audit_.flows_without_bottleneck;
    // The recorded bottleneck is what later solves trust: it must hold too.
    if (!f.has_bottleneck || !holds(f.bottleneck, f.rate)) ++audit_.wrong_recorded_bottlenecks;
  }
  ++audit_.solves_checked;
}

void FlowNetwork::reschedule_completion() {
  Time want = due_.empty() ? Time::max() : Time::ps(due_.top_finish());
  if (want == completion_at_ && engine_.is_pending(completion_event_)) return;
  engine_.cancel(completion_event_);
  completion_at_ = want;
  if (!due_.empty()) completion_event_ = engine_.schedule_at(want, [this] { on_completion_event(); });
}

void FlowNetwork::on_completion_event() {
  completion_at_ = Time::max();
  const int64_t now = engine_.now().picoseconds();
  struct Done {
    FlowSink* sink;
    uint32_t tag;
  };
  std::vector<Done> done;
  while (!due_.empty() && due_.top_finish() <= now) {
    const uint32_t slot = due_.top_slot();
    Flow& f = flows_[slot];
    if (options_.audit) {
      settle(slot);
      const AuditBytes& bytes = audit_bytes_[slot];
      audit_.worst_bytes_error = std::max(audit_.worst_bytes_error, std::fabs(bytes.delivered - bytes.size) / bytes.size);
    }
    leave(slot);
    done.push_back(Done{f.sink, f.tag});
    free_slots_.push_back(slot);
  }
  if (!dirty_.empty() || !entering_.empty()) request_solve();
  for (const Done& d : done) complete(d.sink, d.tag);
  reschedule_completion();
}

std::optional<Bandwidth> FlowNetwork::rate_of(uint64_t flow_id) const {
  for (const Flow& f : flows_) {
    if (f.in_fluid && f.id == flow_id) return Bandwidth(f.rate * f.weight);
  }
  return std::nullopt;
}

}  // namespace parallax
