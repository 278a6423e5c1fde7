// The flow model's pending finishes: a 4-ary min-heap of flow slots on (finish, flow id) that
// knows where each slot sits, so a finish that moves is re-keyed in place and a flow that leaves
// is taken out. A lazy heap (push the new finish, skip the stale one when it surfaces) pushed
// and popped ~6.6 M dead entries on the 100k-flow benchmark, for ~46 re-keys per re-solve.
// Keys live in the heap entries and positions in a dense array, so sifting touches neither the
// flow records nor more than two small arrays. Four children per node halve the depth that each
// completion's sift-down walks (one cache miss per level on a million pending flows); the order of
// (finish, id) keys is total, so the arity never changes what is popped.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace parallax {

class CompletionHeap {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  /// The slot with the earliest (finish, id) and its finish; only when not empty.
  uint32_t top_slot() const { return heap_.front().slot; }
  int64_t top_finish() const { return heap_.front().finish; }
  bool contains(uint32_t slot) const { return slot < position_.size() && position_[slot] != kAbsent; }

  /// Room for `slots` slots without growing one entry at a time (a growing array briefly holds
  /// its old copy too); at least doubles when it grows, so that calls with a count that creeps
  /// up cost amortised constant time.
  void reserve(size_t slots) {
    if (slots <= heap_.capacity()) return;
    const size_t room = std::max(slots, 2 * heap_.capacity());
    heap_.reserve(room);
    position_.reserve(room);
  }

  /// Inserts `slot` or moves it to its new key.
  void set(uint32_t slot, int64_t finish, uint64_t id) {
    if (slot >= position_.size()) position_.resize(slot + 1, kAbsent);
    uint32_t at = position_[slot];
    if (at == kAbsent) {
      at = static_cast<uint32_t>(heap_.size());
      heap_.push_back(Entry{finish, id, slot});
      position_[slot] = at;
      sift_up(at);
      return;
    }
    const Entry old = heap_[at];
    heap_[at].finish = finish;
    heap_[at].id = id;
    if (earlier(heap_[at], old)) sift_up(at);
    else sift_down(at);
  }

  /// Takes `slot` out if it is in.
  void erase(uint32_t slot) {
    if (!contains(slot)) return;
    const uint32_t at = position_[slot];
    position_[slot] = kAbsent;
    const Entry last = heap_.back();
    heap_.pop_back();
    if (at == heap_.size()) return;
    heap_[at] = last;
    position_[last.slot] = at;
    if (at > 0 && earlier(heap_[at], heap_[(at - 1) / kArity])) sift_up(at);
    else sift_down(at);
  }

 private:
  static constexpr uint32_t kArity = 4;
  struct Entry {
    int64_t finish;
    uint64_t id;
    uint32_t slot;
  };
  static bool earlier(const Entry& a, const Entry& b) {
    return a.finish != b.finish ? a.finish < b.finish : a.id < b.id;
  }
  void place(uint32_t at, const Entry& e) {
    heap_[at] = e;
    position_[e.slot] = at;
  }
  void sift_up(uint32_t at) {
    const Entry e = heap_[at];
    while (at > 0) {
      const uint32_t parent = (at - 1) / kArity;
      if (!earlier(e, heap_[parent])) break;
      place(at, heap_[parent]);
      at = parent;
    }
    place(at, e);
  }
  void sift_down(uint32_t at) {
    const Entry e = heap_[at];
    const uint32_t n = static_cast<uint32_t>(heap_.size());
    while (true) {
      const uint32_t first = kArity * at + 1;
      if (first >= n) break;
      const uint32_t last = std::min(first + kArity, n);
      uint32_t child = first;
      for (uint32_t c = first + 1; c < last; ++c) {
        if (earlier(heap_[c], heap_[child])) child = c;
      }
      if (!earlier(heap_[child], e)) break;
      place(at, heap_[child]);
      at = child;
    }
    place(at, e);
  }

  std::vector<Entry> heap_;
  std::vector<uint32_t> position_;  // per slot: index in heap_, or kAbsent
};

}  // namespace parallax
