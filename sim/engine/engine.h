// The discrete-event engine: a clock in integer picoseconds and a queue of typed callbacks.
//
// Ordering: events run by (time, phase, sequence). Equal times run in insertion order (FIFO),
// so a run is deterministic. Phase `kLate` runs after every normal event of the same
// timestamp, including those scheduled while that timestamp is being processed; models use it
// to coalesce work (e.g. one bandwidth re-solve per timestamp). Cancellation is lazy: a
// cancelled event stays in the heap as a tombstone (its slot's generation moved on) and is
// skipped when popped, so cancel is O(1). The queue is a 4-ary implicit heap: half the depth
// of a binary heap, and the four children of a node share a cache line or two.
//
// The engine knows nothing about what events mean. It is a value: pass it by reference to
// whatever schedules events; one process may hold many engines (sweeps, search).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "units/units.h"

namespace parallax {

/// Identifies a scheduled event for cancellation. Stale ids are harmless.
struct EventId {
  uint32_t slot = UINT32_MAX;
  uint32_t generation = 0;
  bool valid() const { return slot != UINT32_MAX; }
};

class Engine {
 public:
  using Handler = std::function<void()>;
  enum class Phase : uint8_t { kNormal = 0, kLate = 1 };

  Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Current simulated time.
  Time now() const { return now_; }

  /// Schedules `handler` at absolute time `at` (≥ now; earlier is an internal error).
  EventId schedule_at(Time at, Handler handler, Phase phase = Phase::kNormal);
  /// Schedules `handler` after `delay` (≥ 0).
  EventId schedule_in(Time delay, Handler handler, Phase phase = Phase::kNormal) {
    return schedule_at(now_ + delay, std::move(handler), phase);
  }
  /// Cancels a pending event; returns false if it already ran or was cancelled.
  bool cancel(EventId id);
  /// True while `id` is scheduled and has not run.
  bool is_pending(EventId id) const;

  /// Runs events until the queue is empty or stop() is called.
  void run();
  /// Runs every event with time ≤ `limit`, then sets the clock to `limit` if it is later.
  void run_until(Time limit);
  /// Makes run()/run_until() return after the current event.
  void stop() { stop_requested_ = true; }

  /// Events executed so far (cancelled ones excluded).
  uint64_t events_executed() const { return executed_; }
  /// Events scheduled and neither run nor cancelled.
  size_t pending_events() const { return live_; }
  /// Events scheduled so far, cancelled or not: whoever reads the same count twice knows that
  /// nothing was scheduled in between (BatchedEvents relies on it).
  uint64_t scheduled_count() const { return sequence_; }

 private:
  struct Entry {
    int64_t time;
    uint64_t order;  // phase in the top bit, then the insertion sequence
    uint32_t slot;
    uint32_t generation;
  };
  struct Slot {
    Handler handler;
    uint32_t generation = 0;
  };
  static bool earlier(const Entry& a, const Entry& b) {
    return a.time != b.time ? a.time < b.time : a.order < b.order;
  }
  void heap_push(const Entry& e);
  Entry heap_pop();
  void release(uint32_t slot);
  bool pop_and_run(int64_t limit);

  Time now_ = Time::zero();
  uint64_t sequence_ = 0;
  uint64_t executed_ = 0;
  size_t live_ = 0;
  bool stop_requested_ = false;
  std::vector<Entry> heap_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
};

}  // namespace parallax
