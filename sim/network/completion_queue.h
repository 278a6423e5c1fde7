// The flow model's pending finishes: a heap over the flows while they are few, buckets per
// instant while they are many. A heap of a few thousand flows sits in cache and its re-keys are
// cheap, where a bucket would cost misses of its own for the one flow it mostly holds (the
// 100k-flow rail-shift benchmark: 1.4× slower with buckets alone); a heap of millions misses
// cache once per level at every completion (an all-to-all at 1,024 GPUs: 0.7× the time with
// buckets). The switch has hysteresis, so that a count that hovers does not move entries back
// and forth. Both pop in (finish, flow id) order, so the choice never changes a result.
#pragma once

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "network/completion_buckets.h"
#include "network/completion_heap.h"

namespace parallax {

class CompletionQueue {
 public:
  static constexpr size_t kToBuckets = size_t{1} << 18;
  static constexpr size_t kToHeap = size_t{1} << 15;

  CompletionQueue() = default;
  /// Other thresholds (tests): buckets above `to_buckets` pending, the heap again below `to_heap`.
  CompletionQueue(size_t to_buckets, size_t to_heap) : to_buckets_(to_buckets), to_heap_(to_heap) {}

  bool empty() const { return size() == 0; }
  size_t size() const { return bucketed_ ? buckets_.size() : heap_.size(); }
  bool bucketed() const { return bucketed_; }
  bool contains(uint32_t slot) const { return bucketed_ ? buckets_.contains(slot) : heap_.contains(slot); }
  int64_t top_finish() const { return bucketed_ ? buckets_.top_finish() : heap_.top_finish(); }
  uint32_t top_slot() { return bucketed_ ? buckets_.top_slot() : heap_.top_slot(); }

  /// Room for `slots` slots (a count that grows geometrically); the heap's only up to the count
  /// at which the buckets take over.
  void reserve(size_t slots) {
    buckets_.reserve(slots);
    heap_.reserve(std::min(slots, to_buckets_));
  }

  void set(uint32_t slot, int64_t finish, uint64_t id) {
    if (bucketed_) {
      buckets_.set(slot, finish, id);
      return;
    }
    heap_.set(slot, finish, id);
    if (heap_.size() > to_buckets_) {
      heap_.for_each([&](uint32_t s, int64_t f, uint64_t i) { buckets_.set(s, f, i); });
      heap_ = CompletionHeap{};  // its positions span every slot: 4 bytes a flow while the buckets hold them
      bucketed_ = true;
    }
  }

  void erase(uint32_t slot) {
    if (!bucketed_) {
      heap_.erase(slot);
      return;
    }
    buckets_.erase(slot);
    if (buckets_.size() < to_heap_) {
      // The buckets' positions and spare chunks span the burst's flows: freed before the heap
      // sizes its own positions by the largest slot.
      std::vector<std::tuple<uint32_t, int64_t, uint64_t>> left;
      left.reserve(buckets_.size());
      buckets_.for_each([&](uint32_t s, int64_t f, uint64_t i) { left.emplace_back(s, f, i); });
      buckets_ = CompletionBuckets{};
      for (const auto& [s, f, i] : left) heap_.set(s, f, i);
      bucketed_ = false;
    }
  }

 private:
  size_t to_buckets_ = kToBuckets;
  size_t to_heap_ = kToHeap;
  bool bucketed_ = false;
  CompletionHeap heap_;
  CompletionBuckets buckets_;
};

}  // namespace parallax
