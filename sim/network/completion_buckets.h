// Pending finishes grouped by instant: the slots due at one finish sit in one bucket, and only
// the buckets are ordered (a CompletionHeap over the distinct instants). A collective's flows
// finish at few instants (an all-to-all's 16.8 M flows over 4,096 GPUs at some ten thousand):
// one heap entry per flow costs a cache miss per level at every completion, a bucket a sort of
// the instant's slots, in cache, when the instant comes up. The earliest bucket is kept in
// descending key order, so that completions pop its back. Pops follow (finish, flow id) exactly
// as a heap over the flows does.
//
// A bucket stores its keys in chunks of 8, 16, … 256 keys, then 256 each, taken from and given
// back to per-size spares: thousands of arrays that double as they grow would leave the
// allocator's free lists fragmented (an all-to-all over 4,096 GPUs grew 110 MiB past its live
// size that way), and a bucket wastes at most half its keys or one chunk.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <memory>
#include <vector>

#include "network/completion_heap.h"
#include "network/instant_index.h"

namespace parallax {

class CompletionBuckets {
 public:
  static constexpr uint32_t kAbsent = CompletionHeap::kAbsent;

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  bool contains(uint32_t slot) const { return slot < position_.size() && position_[slot].bucket != kAbsent; }
  /// The earliest finish; only when not empty.
  int64_t top_finish() const { return buckets_[instants_.top_slot()].finish; }
  /// The slot with the earliest (finish, id); only when not empty. Orders the earliest
  /// instant's slots by id if they are not.
  uint32_t top_slot() {
    Bucket& b = buckets_[instants_.top_slot()];
    if (!b.sorted) sort(b);
    return slot_of(b.key(b.size - 1));
  }

  /// Room for `slots` slots, exactly: the caller's count grows geometrically already.
  void reserve(size_t slots) { position_.reserve(slots); }

  /// Calls f(slot, finish, id) for every slot in, in no particular order.
  template <class F>
  void for_each(F f) const {
    instants_.for_each([&](uint32_t b, int64_t finish, uint64_t) {
      const Bucket& bucket = buckets_[b];
      for (uint32_t i = 0; i < bucket.size; ++i) {
        f(slot_of(bucket.key(i)), finish, bucket.key(i) >> CompletionHeap::kSlotBits);
      }
    });
  }
  /// Inserts `slot` or moves it to its new key. Throws std::length_error past CompletionHeap's
  /// limits on slots and ids.
  void set(uint32_t slot, int64_t finish, uint64_t id) {
    CompletionHeap::check_limits(slot, id);
    if (slot >= position_.size()) position_.resize(slot + 1);
    if (contains(slot)) erase(slot);
    const uint32_t b = bucket_for(finish);
    Bucket& bucket = buckets_[b];
    const uint64_t key = (id << CompletionHeap::kSlotBits) | slot;
    if (bucket.size > 0 && key > bucket.key(bucket.size - 1)) bucket.sorted = false;
    position_[slot] = Where{b, bucket.size};
    push(bucket, key);
    ++size_;
  }

  /// Takes `slot` out if it is in.
  void erase(uint32_t slot) {
    if (!contains(slot)) return;
    const Where at = position_[slot];
    position_[slot].bucket = kAbsent;
    --size_;
    Bucket& bucket = buckets_[at.bucket];
    const uint64_t last = pop(bucket);
    if (at.index < bucket.size) {
      bucket.key(at.index) = last;
      position_[slot_of(last)].index = at.index;
      bucket.sorted = false;
    }
    if (bucket.size == 0) release(at.bucket);
  }

 private:
  // Chunk c holds 8·2^c keys up to kLargestClass, then 2^kChunkBits each.
  static constexpr uint32_t kSmallestBits = 3;
  static constexpr uint32_t kChunkBits = 8;
  static constexpr uint32_t kLargestClass = kChunkBits - kSmallestBits;
  static constexpr uint32_t kGrowingKeys = ((1u << (kLargestClass + 1)) - 1) << kSmallestBits;  // 504
  using Chunk = std::unique_ptr<uint64_t[]>;

  struct Place {
    uint32_t chunk;
    uint32_t offset;
  };
  static Place place_of(uint32_t i) {
    if (i < kGrowingKeys) {
      const uint32_t c = static_cast<uint32_t>(std::bit_width((i >> kSmallestBits) + 1)) - 1;
      return Place{c, i - (((1u << c) - 1) << kSmallestBits)};
    }
    const uint32_t beyond = i - kGrowingKeys;
    return Place{kLargestClass + 1 + (beyond >> kChunkBits), beyond & ((1u << kChunkBits) - 1)};
  }
  static uint32_t class_of(uint32_t chunk) { return std::min(chunk, kLargestClass); }

  struct Bucket {
    int64_t finish = 0;
    uint32_t size = 0;
    bool sorted = true;  // keys descending: the earliest id at the back
    std::vector<Chunk> chunks;
    uint64_t& key(uint32_t i) {
      const Place p = place_of(i);
      return chunks[p.chunk][p.offset];
    }
    uint64_t key(uint32_t i) const {
      const Place p = place_of(i);
      return chunks[p.chunk][p.offset];
    }
  };
  struct Where {
    uint32_t bucket = kAbsent;
    uint32_t index = 0;
  };
  static uint32_t slot_of(uint64_t key) { return static_cast<uint32_t>(key & (CompletionHeap::kMaxSlots - 1)); }

  void push(Bucket& bucket, uint64_t key) {
    const Place p = place_of(bucket.size);
    if (p.chunk == bucket.chunks.size()) {
      auto& spare = spare_[class_of(p.chunk)];
      if (spare.empty()) {
        bucket.chunks.push_back(std::make_unique_for_overwrite<uint64_t[]>(size_t{1} << (kSmallestBits + class_of(p.chunk))));
      } else {
        bucket.chunks.push_back(std::move(spare.back()));
        spare.pop_back();
      }
    }
    bucket.chunks[p.chunk][p.offset] = key;
    ++bucket.size;
  }
  uint64_t pop(Bucket& bucket) {
    const Place p = place_of(--bucket.size);
    const uint64_t key = bucket.chunks[p.chunk][p.offset];
    if (p.offset == 0) {
      spare_[class_of(p.chunk)].push_back(std::move(bucket.chunks.back()));
      bucket.chunks.pop_back();
    }
    return key;
  }

  void sort(Bucket& bucket) {
    scratch_.resize(bucket.size);
    for (uint32_t i = 0; i < bucket.size; ++i) scratch_[i] = bucket.key(i);
    std::sort(scratch_.begin(), scratch_.end(), [](uint64_t x, uint64_t y) { return x > y; });
    for (uint32_t i = 0; i < bucket.size; ++i) {
      bucket.key(i) = scratch_[i];
      position_[slot_of(scratch_[i])].index = i;
    }
    bucket.sorted = true;
  }

  // The bucket of `finish`, opened (and ordered among the instants) when there is none.
  uint32_t bucket_for(int64_t finish) {
    if (uint32_t* found = index_.find(finish)) return *found;
    uint32_t b;
    if (!free_buckets_.empty()) {
      b = free_buckets_.back();
      free_buckets_.pop_back();
    } else {
      b = static_cast<uint32_t>(buckets_.size());
      buckets_.emplace_back();
    }
    buckets_[b].finish = finish;
    buckets_[b].sorted = true;
    index_.insert(finish, b);
    instants_.set(b, finish, 0);
    return b;
  }

  // An empty bucket leaves the instants.
  void release(uint32_t b) {
    index_.erase(buckets_[b].finish);
    instants_.erase(b);
    free_buckets_.push_back(b);
  }

  std::vector<Bucket> buckets_;
  std::vector<uint32_t> free_buckets_;
  std::array<std::vector<Chunk>, kLargestClass + 1> spare_;  // chunks by class, for reuse
  InstantIndex index_;
  CompletionHeap instants_;  // the buckets in use, by finish (distinct, so the id is 0)
  std::vector<Where> position_;  // per slot: its bucket and index there, or kAbsent
  std::vector<uint64_t> scratch_;  // sort's
  size_t size_ = 0;
};

}  // namespace parallax
