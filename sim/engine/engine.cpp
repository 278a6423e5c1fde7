#include "engine/engine.h"

#include <algorithm>
#include <string>

#include "engine/invariant.h"

namespace parallax {

EventId Engine::schedule_at(Time at, Handler handler, Phase phase) {
  PARALLAX_INVARIANT(at >= now_, "engine", now_,
                     "event scheduled in the past at " + std::to_string(at.picoseconds()) + " ps");
  PARALLAX_INVARIANT(handler != nullptr, "engine", now_, "empty event handler");
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[slot];
  s.handler = std::move(handler);
  uint64_t order = (static_cast<uint64_t>(phase) << 63) | sequence_++;
  heap_push(Entry{at.picoseconds(), order, slot, s.generation});
  ++live_;
  return EventId{slot, s.generation};
}

void Engine::heap_push(const Entry& e) {
  size_t i = heap_.size();
  heap_.push_back(e);
  while (i > 0) {
    size_t parent = (i - 1) / 4;
    if (!earlier(e, heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = e;
}

// Bottom-up deletion (Wegener): the hole left by the root sinks along the path of smallest
// children to a leaf without comparing against the displaced last entry, which then rises the
// few levels it needs. The last entry almost always belongs near the bottom, so this does about
// half the comparisons of the textbook sift-down; the choice among four full children is made
// without branches, since which child is smallest is a coin toss the predictor cannot learn.
Engine::Entry Engine::heap_pop() {
  Entry top = heap_.front();
  Entry last = heap_.back();
  heap_.pop_back();
  const size_t n = heap_.size();
  if (n == 0) return top;
  Entry* h = heap_.data();
  size_t i = 0;
  while (true) {
    size_t first = 4 * i + 1;
    size_t best;
    if (first + 4 <= n) {
      size_t b01 = first + static_cast<size_t>(earlier(h[first + 1], h[first]));
      size_t b23 = first + 2 + static_cast<size_t>(earlier(h[first + 3], h[first + 2]));
      best = earlier(h[b23], h[b01]) ? b23 : b01;
    } else if (first < n) {
      best = first;
      for (size_t c = first + 1; c < n; ++c) {
        if (earlier(h[c], h[best])) best = c;
      }
    } else {
      break;
    }
    h[i] = h[best];
    i = best;
  }
  while (i > 0) {
    size_t parent = (i - 1) / 4;
    if (!earlier(last, h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = last;
  return top;
}

void Engine::release(uint32_t slot) {
  Slot& s = slots_[slot];
  s.handler = nullptr;
  ++s.generation;
  free_slots_.push_back(slot);
  --live_;
}

bool Engine::cancel(EventId id) {
  if (!is_pending(id)) return false;
  release(id.slot);
  return true;
}

bool Engine::is_pending(EventId id) const {
  return id.valid() && id.slot < slots_.size() && slots_[id.slot].generation == id.generation &&
         slots_[id.slot].handler != nullptr;
}

// Pops the earliest entry if its time is ≤ limit; runs it unless it is a tombstone.
// Returns false when nothing is left to pop within the limit.
bool Engine::pop_and_run(int64_t limit) {
  if (heap_.empty() || heap_.front().time > limit) return false;
  Entry e = heap_pop();
  Slot& s = slots_[e.slot];
  if (s.generation != e.generation) return true;  // cancelled
  // Moved out before running: the handler may schedule events, which can grow slots_.
  Handler handler = std::move(s.handler);
  release(e.slot);
  now_ = Time::ps(e.time);
  ++executed_;
  handler();
  return true;
}

void Engine::run() {
  stop_requested_ = false;
  while (!stop_requested_ && pop_and_run(Time::max().picoseconds())) {
  }
}

void Engine::run_until(Time limit) {
  stop_requested_ = false;
  while (!stop_requested_ && pop_and_run(limit.picoseconds())) {
  }
  if (!stop_requested_ && now_ < limit) now_ = limit;
}

}  // namespace parallax
