// CompletionHeap against a sorted reference: random inserts, re-keys (earlier and later) and
// erasures with a fixed seed; the top is always the smallest (finish, id) still present.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "network/completion_heap.h"

namespace parallax {
namespace {

TEST(CompletionHeap, TopIsAlwaysTheEarliestOfWhatIsIn) {
  std::mt19937_64 rng(5);
  CompletionHeap heap;
  std::map<uint32_t, std::pair<int64_t, uint64_t>> in;  // slot -> (finish, id)
  auto earliest = [&] {
    auto best = in.begin();
    for (auto it = in.begin(); it != in.end(); ++it) {
      if (it->second < best->second) best = it;
    }
    return best;
  };
  for (int step = 0; step < 20'000; ++step) {
    const uint32_t slot = static_cast<uint32_t>(rng() % 300);
    const int op = static_cast<int>(rng() % 4);
    if (op == 3) {
      heap.erase(slot);
      in.erase(slot);
    } else {
      // Few distinct finishes, so that ties fall to the id.
      const int64_t finish = static_cast<int64_t>(rng() % 50);
      const uint64_t id = rng() % 1000;
      heap.set(slot, finish, id);
      in[slot] = {finish, id};
    }
    ASSERT_EQ(heap.size(), in.size());
    ASSERT_EQ(heap.contains(slot), in.contains(slot));
    if (in.empty()) continue;
    auto best = earliest();
    ASSERT_EQ(heap.top_finish(), best->second.first) << "step " << step;
    // Equal (finish, id) pairs may sit in either order; compare keys, not slots, then.
    const auto& top = in.at(heap.top_slot());
    ASSERT_EQ(top, best->second) << "step " << step;
  }
  // Draining in order gives non-decreasing keys.
  std::pair<int64_t, uint64_t> last{-1, 0};
  while (!heap.empty()) {
    const auto key = in.at(heap.top_slot());
    EXPECT_LE(last, key);
    last = key;
    in.erase(heap.top_slot());
    heap.erase(heap.top_slot());
  }
  EXPECT_TRUE(in.empty());
}

// Ids and slots share a word: at equal finishes the smaller id comes first whatever the slots,
// up to the largest id and slot the packing holds, and past them the heap refuses.
TEST(CompletionHeap, EqualFinishesPopInIdOrderUpToTheLimits) {
  CompletionHeap heap;
  const uint64_t big = CompletionHeap::kMaxIds - 1;
  const uint32_t last_slot = static_cast<uint32_t>(CompletionHeap::kMaxSlots - 1);
  heap.set(7, 100, big);
  heap.set(3, 100, big - 1);
  heap.set(9, 100, 0);
  heap.set(5, 99, big);
  EXPECT_EQ(heap.top_slot(), 5u);
  heap.erase(5);
  EXPECT_EQ(heap.top_slot(), 9u);
  heap.erase(9);
  EXPECT_EQ(heap.top_slot(), 3u);
  heap.erase(3);
  EXPECT_EQ(heap.top_slot(), 7u);
  EXPECT_EQ(heap.top_finish(), 100);
  EXPECT_THROW(heap.set(1, 1, CompletionHeap::kMaxIds), std::length_error);
  EXPECT_THROW(heap.set(last_slot + 1, 1, 1), std::length_error);
}

}  // namespace
}  // namespace parallax
