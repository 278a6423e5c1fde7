// Engine throughput: the classic "hold" model (each event schedules one successor at a random
// later time, so the queue stays at a fixed size) and a bulk load-then-drain.
#include <benchmark/benchmark.h>

#include <random>

#include "engine/engine.h"

namespace parallax {
namespace {

// Each event schedules its successor, capturing one pointer as model handlers do ([this]).
struct HoldModel {
  Engine& engine;
  std::mt19937_64 rng{1};
  int64_t remaining = 0;
  void fire() {
    if (--remaining > 0) engine.schedule_in(Time::ps(static_cast<int64_t>(rng() % 1'000'000)), [this] { fire(); });
  }
};

void BM_EngineHold(benchmark::State& state) {
  const auto queue_size = static_cast<int>(state.range(0));
  constexpr int64_t kEventsPerRun = 2'000'000;
  uint64_t events = 0;
  for (auto _ : state) {
    Engine engine;
    HoldModel model{engine};
    model.remaining = kEventsPerRun;
    for (int i = 0; i < queue_size; ++i) {
      engine.schedule_in(Time::ps(static_cast<int64_t>(model.rng() % 1'000'000)), [&model] { model.fire(); });
    }
    engine.run();
    events += engine.events_executed();
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EngineHold)->Arg(1 << 10)->Arg(1 << 16)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_EngineBulk(benchmark::State& state) {
  constexpr int kEvents = 1'000'000;
  uint64_t events = 0;
  for (auto _ : state) {
    Engine engine;
    std::mt19937_64 rng(2);
    uint64_t sink = 0;
    for (int i = 0; i < kEvents; ++i) {
      engine.schedule_at(Time::ps(static_cast<int64_t>(rng() % 1'000'000'000)), [&sink, i] { sink += static_cast<uint64_t>(i); });
    }
    engine.run();
    benchmark::DoNotOptimize(sink);
    events += engine.events_executed();
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EngineBulk)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace parallax
