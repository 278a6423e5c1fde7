// Engine: FIFO among equal times, the late phase, lazy cancellation, a million events in order.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engine/batched_events.h"
#include "engine/engine.h"
#include "engine/invariant.h"

namespace parallax {
namespace {

TEST(Engine, EqualTimesRunInInsertionOrder) {
  Engine e;
  std::vector<int> order;
  for (int i = 0; i < 10; ++i) e.schedule_at(Time::us(5), [&order, i] { order.push_back(i); });
  e.run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(e.now(), Time::us(5));
}

TEST(Engine, EventsScheduledAtNowRunAfterThoseAlreadyQueued) {
  Engine e;
  std::vector<int> order;
  e.schedule_at(Time::us(1), [&] {
    order.push_back(0);
    e.schedule_in(Time::zero(), [&] { order.push_back(2); });
  });
  e.schedule_at(Time::us(1), [&] { order.push_back(1); });
  e.run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

TEST(Engine, LatePhaseRunsAfterEveryNormalEventOfItsTimestamp) {
  Engine e;
  std::vector<int> order;
  e.schedule_at(Time::us(1), [&] { order.push_back(1); });
  e.schedule_at(Time::us(1), [&] { order.push_back(9); }, Engine::Phase::kLate);
  e.schedule_at(Time::us(1), [&] {
    order.push_back(2);
    e.schedule_in(Time::zero(), [&] { order.push_back(3); });  // still before the late one
  });
  e.schedule_at(Time::us(2), [&] { order.push_back(10); });
  e.run();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 9, 10}));
}

TEST(Engine, CancelledEventsDoNotRun) {
  Engine e;
  std::vector<int> order;
  EventId a = e.schedule_at(Time::us(1), [&] { order.push_back(1); });
  EventId b = e.schedule_at(Time::us(2), [&] { order.push_back(2); });
  e.schedule_at(Time::us(3), [&] { order.push_back(3); });
  EXPECT_TRUE(e.is_pending(b));
  EXPECT_TRUE(e.cancel(b));
  EXPECT_FALSE(e.cancel(b));  // twice: already gone
  EXPECT_FALSE(e.is_pending(b));
  EXPECT_EQ(e.pending_events(), 2u);
  e.run();
  EXPECT_EQ(order, (std::vector<int>{1, 3}));
  EXPECT_FALSE(e.cancel(a));  // already ran
  EXPECT_EQ(e.events_executed(), 2u);
}

TEST(Engine, StaleIdsDoNotCancelAReusedSlot) {
  Engine e;
  int ran = 0;
  EventId a = e.schedule_at(Time::us(1), [&] { ++ran; });
  e.cancel(a);
  // The freed slot is reused by the next event; the old id must not reach it.
  e.schedule_at(Time::us(2), [&] { ++ran; });
  EXPECT_FALSE(e.cancel(a));
  e.run();
  EXPECT_EQ(ran, 1);
}

TEST(Engine, RunUntilStopsAtTheLimit) {
  Engine e;
  int ran = 0;
  e.schedule_at(Time::us(1), [&] { ++ran; });
  e.schedule_at(Time::us(3), [&] { ++ran; });
  e.run_until(Time::us(2));
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(e.now(), Time::us(2));
  e.run();
  EXPECT_EQ(ran, 2);
}

TEST(Engine, SchedulingInThePastIsAnInternalError) {
  Engine e;
  e.schedule_at(Time::us(5), [&] { e.schedule_at(Time::us(4), [] {}); });
  EXPECT_THROW(e.run(), InternalError);
}

TEST(Engine, AMillionEventsRunInTimeOrder) {
  // Seed 12345: random times in [0, 1 ms); the engine must hand them back sorted by
  // (time, insertion), which we check against the sequence it produces. A fifth of them under
  // the sanitizers, where a million take seconds.
  Engine e;
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<int64_t> t(0, 1'000'000'000);
#ifdef PARALLAX_SANITIZED
  constexpr int kEvents = 200'000;
#else
  constexpr int kEvents = 1'000'000;
#endif
  int64_t last_time = -1;
  int last_index = -1;
  bool ordered = true;
  std::vector<int64_t> times(kEvents);
  for (int i = 0; i < kEvents; ++i) {
    times[static_cast<size_t>(i)] = t(rng);
    e.schedule_at(Time::ps(times[static_cast<size_t>(i)]), [&, i] {
      int64_t now = e.now().picoseconds();
      if (now < last_time || (now == last_time && i < last_index)) ordered = false;
      last_time = now;
      last_index = i;
    });
  }
  e.run();
  EXPECT_TRUE(ordered);
  EXPECT_EQ(e.events_executed(), static_cast<uint64_t>(kEvents));
  EXPECT_EQ(e.now().picoseconds(), *std::max_element(times.begin(), times.end()));
}

TEST(Engine, SameInputsGiveTheSameEventSequence) {
  auto trace = [] {
    Engine e;
    std::vector<int> seen;
    std::mt19937 rng(7);
    for (int i = 0; i < 1000; ++i) {
      e.schedule_at(Time::ns(static_cast<double>(rng() % 50)), [&seen, i] { seen.push_back(i); });
    }
    e.run();
    return seen;
  };
  EXPECT_EQ(trace(), trace());
}

// Items batched into one event run exactly where one event each would: in the order added at
// equal times, after what was scheduled before them and before what was scheduled after, and
// what they schedule while playing comes after every item already due then.
TEST(BatchedEvents, RunWhereOneEventEachWould) {
  auto script = [](Engine& e, auto&& item, std::vector<int>& log) {
    item(Time::ps(10), 1);
    item(Time::ps(10), 2);
    e.schedule_at(Time::ps(10), [&log] { log.push_back(100); });
    item(Time::ps(10), 3);
    item(Time::ps(5), 4);
    item(Time::ps(10), 5);
    item(Time::ps(5), 7);
  };
  std::vector<int> one_each, batched;
  {
    Engine e;
    std::function<void(Time, int)> item = [&](Time at, int i) {
      e.schedule_at(at, [&, i] {
        one_each.push_back(i);
        if (i == 1) {
          e.schedule_at(e.now(), [&] { one_each.push_back(200); });
          item(e.now(), 6);
        }
      });
    };
    script(e, item, one_each);
    e.run();
  }
  {
    Engine e;
    std::function<void(int)> play;
    BatchedEvents<int> b(e, [&](int i) { play(i); });
    play = [&](int i) {
      batched.push_back(i);
      if (i == 1) {
        e.schedule_at(e.now(), [&] { batched.push_back(200); });
        b.schedule_at(e.now(), 6);
      }
    };
    auto item = [&](Time at, int i) { b.schedule_at(at, i); };
    script(e, item, batched);
    const uint64_t scheduled = e.scheduled_count();
    e.run();
    // Seven items, six events: 1 and 2 share one; 100 splits 3 off; 4 (another time) and 5 are
    // alone, and 7 comes after 5 was scheduled, so it cannot join 4.
    EXPECT_EQ(scheduled, 6u);
  }
  EXPECT_EQ(batched, one_each);
  EXPECT_EQ(one_each, (std::vector<int>{4, 7, 1, 2, 100, 3, 5, 200, 6}));
}

}  // namespace
}  // namespace parallax
