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
  heap_.push_back(Entry{at.picoseconds(), order, slot, s.generation});
  std::push_heap(heap_.begin(), heap_.end(), later);
  ++live_;
  return EventId{slot, s.generation};
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
  std::pop_heap(heap_.begin(), heap_.end(), later);
  Entry e = heap_.back();
  heap_.pop_back();
  Slot& s = slots_[e.slot];
  if (s.generation != e.generation) return true;  // cancelled
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
