// The flow model's pending finishes against a sorted reference: random inserts, re-keys (earlier
// and later) and erasures with a fixed seed, for the heap, the buckets per instant and the queue
// that switches between them (with thresholds small enough to switch often); the top is always
// the smallest (finish, id) still present. And the instant index against std::map.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <type_traits>

#include "network/completion_buckets.h"
#include "network/completion_heap.h"
#include "network/completion_queue.h"
#include "network/instant_index.h"

namespace parallax {
namespace {

template <class Queue>
Queue make_queue() {
  if constexpr (std::is_same_v<Queue, CompletionQueue>) {
    // Filling phases settle near 225 slots in (inserts 6/8 of steps on 300 slots: 6(1 − n/300) =
    // 2n/300), emptying ones near 75 (2(1 − n/300) = 6n/300): each phase crosses a threshold.
    return CompletionQueue(/*to_buckets=*/150, /*to_heap=*/100);
  } else {
    return Queue{};
  }
}

template <class Queue>
class PendingFinishes : public ::testing::Test {};
using QueueTypes = ::testing::Types<CompletionHeap, CompletionBuckets, CompletionQueue>;
TYPED_TEST_SUITE(PendingFinishes, QueueTypes);

TYPED_TEST(PendingFinishes, TopIsAlwaysTheEarliestOfWhatIsIn) {
  std::mt19937_64 rng(5);
  TypeParam queue = make_queue<TypeParam>();
  std::map<uint32_t, std::pair<int64_t, uint64_t>> in;  // slot -> (finish, id)
  auto earliest = [&] {
    auto best = in.begin();
    for (auto it = in.begin(); it != in.end(); ++it) {
      if (it->second < best->second) best = it;
    }
    return best;
  };
  int switches = 0;
  bool bucketed = false;
  for (int step = 0; step < 20'000; ++step) {
    const uint32_t slot = static_cast<uint32_t>(rng() % 300);
    // Phases that mostly insert, then mostly erase, so that the queue crosses its thresholds.
    const bool filling = (step / 1000) % 2 == 0;
    const bool erase = rng() % 8 < (filling ? 2u : 6u);
    if (erase) {
      queue.erase(slot);
      in.erase(slot);
    } else {
      // Few distinct finishes, so that ties fall to the id.
      const int64_t finish = static_cast<int64_t>(rng() % 50);
      const uint64_t id = rng() % 1000;
      queue.set(slot, finish, id);
      in[slot] = {finish, id};
    }
    ASSERT_EQ(queue.size(), in.size());
    ASSERT_EQ(queue.contains(slot), in.contains(slot));
    if constexpr (std::is_same_v<TypeParam, CompletionQueue>) {
      if (queue.bucketed() != bucketed) ++switches;
      bucketed = queue.bucketed();
    }
    if (in.empty()) continue;
    auto best = earliest();
    ASSERT_EQ(queue.top_finish(), best->second.first) << "step " << step;
    // Equal (finish, id) pairs may sit in either order; compare keys, not slots, then.
    const auto& top = in.at(queue.top_slot());
    ASSERT_EQ(top, best->second) << "step " << step;
  }
  // Draining in order gives non-decreasing keys.
  std::pair<int64_t, uint64_t> last{-1, 0};
  while (!queue.empty()) {
    const uint32_t slot = queue.top_slot();
    const auto key = in.at(slot);
    EXPECT_LE(last, key);
    last = key;
    in.erase(slot);
    queue.erase(slot);
  }
  EXPECT_TRUE(in.empty());
  // 20 phases of 1,000 steps: the queue went to buckets and back in (nearly) every pair.
  if constexpr (std::is_same_v<TypeParam, CompletionQueue>) {
    EXPECT_GE(switches, 10);
  }
}

// Ids and slots share a word: at equal finishes the smaller id comes first whatever the slots,
// up to the largest id and slot the packing holds, and past them the queue refuses.
TYPED_TEST(PendingFinishes, EqualFinishesPopInIdOrderUpToTheLimits) {
  TypeParam queue = make_queue<TypeParam>();
  const uint64_t big = CompletionHeap::kMaxIds - 1;
  queue.set(7, 100, big);
  queue.set(3, 100, big - 1);
  queue.set(9, 100, 0);
  queue.set(5, 99, big);
  EXPECT_EQ(queue.top_slot(), 5u);
  queue.erase(5);
  EXPECT_EQ(queue.top_slot(), 9u);
  queue.erase(9);
  EXPECT_EQ(queue.top_slot(), 3u);
  queue.erase(3);
  EXPECT_EQ(queue.top_slot(), 7u);
  EXPECT_EQ(queue.top_finish(), 100);
  EXPECT_THROW(queue.set(1, 1, CompletionHeap::kMaxIds), std::length_error);
  EXPECT_THROW(queue.set(static_cast<uint32_t>(CompletionHeap::kMaxSlots), 1, 1), std::length_error);
}

// An all-to-all's shape: many slots at each of a few instants, set in an order unrelated to
// their ids, popped one instant after another across the chunk sizes of a bucket (8 … 256
// keys, then 256 each) and through the queue's switch to buckets and back.
TEST(CompletionQueue, BurstAtFewInstantsPopsInFinishThenIdOrder) {
  CompletionQueue queue(/*to_buckets=*/1000, /*to_heap=*/100);
  std::mt19937_64 rng(11);
  const uint32_t slots = 5000;
  std::vector<std::pair<int64_t, uint64_t>> key(slots);
  for (uint32_t slot = 0; slot < slots; ++slot) {
    key[slot] = {static_cast<int64_t>(rng() % 7) * 1000, rng() % 100'000};
    queue.set(slot, key[slot].first, key[slot].second);
  }
  EXPECT_TRUE(queue.bucketed());
  std::pair<int64_t, uint64_t> last{-1, 0};
  size_t popped = 0;
  while (!queue.empty()) {
    const uint32_t slot = queue.top_slot();
    ASSERT_LE(last, key[slot]);
    last = key[slot];
    queue.erase(slot);
    ++popped;
  }
  EXPECT_EQ(popped, slots);
  EXPECT_FALSE(queue.bucketed());
}

TEST(InstantIndex, AgreesWithAMapUnderInsertsAndErasures) {
  std::mt19937_64 rng(3);
  InstantIndex index;
  std::map<int64_t, uint32_t> reference;
  for (int step = 0; step < 50'000; ++step) {
    // Instants a picosecond apart and far apart, so that probes run through clusters.
    const int64_t instant = rng() % 2 == 0 ? static_cast<int64_t>(rng() % 400)
                                           : static_cast<int64_t>(rng() % 400) << 40;
    const auto it = reference.find(instant);
    if (it != reference.end() && rng() % 2 == 0) {
      index.erase(instant);
      reference.erase(it);
    } else if (it == reference.end()) {
      const uint32_t value = static_cast<uint32_t>(rng() % 1000);
      index.insert(instant, value);
      reference[instant] = value;
    }
    ASSERT_EQ(index.size(), reference.size());
    const uint32_t* found = index.find(instant);
    ASSERT_EQ(found != nullptr, reference.contains(instant)) << "step " << step;
    if (found) {
      ASSERT_EQ(*found, reference.at(instant));
    }
  }
  for (const auto& [instant, value] : reference) {
    const uint32_t* found = index.find(instant);
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(*found, value);
  }
}

}  // namespace
}  // namespace parallax
