// The flow model's pending finishes: a 4-ary min-heap of flow slots on (finish, flow id) that
// knows where each slot sits, so a finish that moves is re-keyed in place and a flow that leaves
// is taken out. A lazy heap (push the new finish, skip the stale one when it surfaces) pushed
// and popped ~6.6 M dead entries on the 100k-flow benchmark, for ~46 re-keys per re-solve.
// Keys live in the heap entries and positions in a dense array, so sifting touches neither the
// flow records nor more than two small arrays. Four children per node halve the depth that each
// completion's sift-down walks (one cache miss per level on millions of pending flows); an entry
// of 16 bytes (the id and the slot packed in one word) and an array laid out so that each node's
// four children fill one 64-byte line make that miss one line, not two. The order of (finish, id)
// keys is total (ids are unique), so neither the arity nor the packing changes what is popped.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace parallax {

class CompletionHeap {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;
  /// Slots and ids share one 64-bit word: at most 2^28 (268 M) flows pending at once and 2^36
  /// (68.7 G) flows in one simulation.
  static constexpr unsigned kSlotBits = 28;
  static constexpr uint64_t kMaxSlots = uint64_t{1} << kSlotBits;
  static constexpr uint64_t kMaxIds = uint64_t{1} << (64 - kSlotBits);

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  /// The slot with the earliest (finish, id) and its finish; only when not empty.
  uint32_t top_slot() const { return slot_of(entry(0)); }
  int64_t top_finish() const { return entry(0).finish; }
  bool contains(uint32_t slot) const { return slot < position_.size() && position_[slot] != kAbsent; }

  /// Room for `slots` slots without growing one entry at a time (a growing array briefly holds
  /// its old copy too); at least doubles when it grows, so that calls with a count that creeps
  /// up cost amortised constant time.
  void reserve(size_t slots) {
    const size_t lines = lines_for(slots);
    if (lines <= lines_.capacity()) return;
    const size_t room = std::max(lines, 2 * lines_.capacity());
    lines_.reserve(room);
    position_.reserve(std::max(slots, 2 * position_.capacity()));
  }

  /// Inserts `slot` or moves it to its new key. Throws std::length_error past the limits above.
  void set(uint32_t slot, int64_t finish, uint64_t id) {
    check_limits(slot, id);
    if (slot >= position_.size()) position_.resize(slot + 1, kAbsent);
    const Entry e{finish, (id << kSlotBits) | slot};
    uint32_t at = position_[slot];
    if (at == kAbsent) {
      at = static_cast<uint32_t>(size_++);
      if (lines_for(size_) > lines_.size()) lines_.emplace_back();
      place(at, e);
      sift_up(at);
      return;
    }
    const Entry old = entry(at);
    entry(at) = e;
    if (earlier(e, old)) sift_up(at);
    else sift_down(at);
  }

  /// Calls f(slot, finish, id) for every slot in, in heap order.
  template <class F>
  void for_each(F f) const {
    for (uint32_t k = 0; k < size_; ++k) f(slot_of(entry(k)), entry(k).finish, entry(k).key >> kSlotBits);
  }
  /// Throws std::length_error when a slot or an id does not fit the packing above.
  static void check_limits(uint32_t slot, uint64_t id) {
    if (slot >= kMaxSlots || id >= kMaxIds) {
      throw std::length_error("flow model: more than " + std::to_string(kMaxSlots) + " flows at once or " +
                              std::to_string(kMaxIds) + " in one simulation");
    }
  }

  /// Takes `slot` out if it is in.
  void erase(uint32_t slot) {
    if (!contains(slot)) return;
    const uint32_t at = position_[slot];
    position_[slot] = kAbsent;
    const Entry last = entry(static_cast<uint32_t>(--size_));
    if (lines_for(size_) < lines_.size()) lines_.pop_back();
    if (at == size_) return;
    place(at, last);
    if (at > 0 && earlier(last, entry((at - 1) / kArity))) sift_up(at);
    else sift_down(at);
  }

 private:
  static constexpr uint32_t kArity = 4;
  struct Entry {
    int64_t finish;
    uint64_t key;  // id << kSlotBits | slot: ids are unique, so comparing keys compares ids
  };
  // Node k sits at flat index k + 3 of an array of 64-byte lines: the children of node k,
  // 4k + 1 … 4k + 4, are then flat 4(k + 1) … 4(k + 1) + 3, exactly line k + 1.
  struct alignas(64) Line {
    Entry e[kArity];
  };
  static constexpr uint32_t kLead = kArity - 1;
  static size_t lines_for(size_t entries) { return (entries + kLead + kArity - 1) / kArity; }
  Entry& entry(uint32_t k) { return lines_[(k + kLead) / kArity].e[(k + kLead) % kArity]; }
  const Entry& entry(uint32_t k) const { return lines_[(k + kLead) / kArity].e[(k + kLead) % kArity]; }
  static uint32_t slot_of(const Entry& e) { return static_cast<uint32_t>(e.key & (kMaxSlots - 1)); }
  static bool earlier(const Entry& a, const Entry& b) {
    return a.finish != b.finish ? a.finish < b.finish : a.key < b.key;
  }
  void place(uint32_t at, const Entry& e) {
    entry(at) = e;
    position_[slot_of(e)] = at;
  }
  void sift_up(uint32_t at) {
    const Entry e = entry(at);
    while (at > 0) {
      const uint32_t parent = (at - 1) / kArity;
      if (!earlier(e, entry(parent))) break;
      place(at, entry(parent));
      at = parent;
    }
    place(at, e);
  }
  void sift_down(uint32_t at) {
    const Entry e = entry(at);
    const uint32_t n = static_cast<uint32_t>(size_);
    while (true) {
      const uint32_t first = kArity * at + 1;
      if (first >= n) break;
      const uint32_t last = std::min(first + kArity, n);
      uint32_t child = first;
      for (uint32_t c = first + 1; c < last; ++c) {
        if (earlier(entry(c), entry(child))) child = c;
      }
      if (!earlier(entry(child), e)) break;
      place(at, entry(child));
      at = child;
    }
    place(at, e);
  }

  std::vector<Line> lines_;
  size_t size_ = 0;
  std::vector<uint32_t> position_;  // per slot: index in the heap, or kAbsent
};

}  // namespace parallax
