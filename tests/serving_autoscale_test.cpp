// Autoscaling (serving/autoscaler.h and the fleet's instance life cycle) and time-varying
// traffic: the HPA rule by hand (the ratio, its tolerance, the scale-down window), start-up
// times, routers that never choose an instance that is off, rate profiles' arrival counts, and a
// fleet that follows a step in load without losing a request, accounting GPU-hours exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "serving/autoscaler.h"
#include "serving/fleet.h"
#include "serving/fleet_loader.h"
#include "serving/fleet_report.h"
#include "serving/rate_bound.h"
#include "serving/request_router.h"
#include "serving/traffic.h"
#include "serving_test_support.h"
#include "test_support.h"

namespace parallax {
namespace {

AutoscaleConfig hpa(int min, int max, double target) {
  AutoscaleConfig a;
  a.min = min;
  a.max = max;
  a.target = target;
  return a;
}

TEST(ServingAutoscaler, DesiredIsTheLoadOverTheTargetRoundedUpWithinMinAndMax) {
  Autoscaler up(hpa(1, 8, 10));
  EXPECT_EQ(up.decide(Time::zero(), 2, 55), 6);    // ⌈55 / 10⌉
  Autoscaler capped(hpa(1, 8, 10));
  EXPECT_EQ(capped.decide(Time::zero(), 2, 500), 8);
  Autoscaler floor(hpa(2, 8, 10));
  EXPECT_EQ(floor.decide(Time::zero(), 2, 0), 2);
}

TEST(ServingAutoscaler, WithinTheToleranceNothingChanges) {
  Autoscaler a(hpa(1, 8, 10));
  EXPECT_EQ(a.decide(Time::zero(), 4, 43), 4);      // ratio 1.075: within 10%
  EXPECT_EQ(a.decide(Time::from_seconds(15), 4, 45), 5);  // ratio 1.125: ⌈4.5⌉
}

TEST(ServingAutoscaler, ScaleDownWaitsForTheWindowsLargestRecommendation) {
  AutoscaleConfig c = hpa(1, 16, 10);
  c.scale_down_window = Time::from_seconds(300);
  Autoscaler a(c);
  EXPECT_EQ(a.decide(Time::zero(), 8, 80), 8);
  // The load falls to a fifth: ⌈20 / 10⌉ = 2 is recommended, but 8 was 100 s ago.
  EXPECT_EQ(a.decide(Time::from_seconds(100), 8, 20), 8);
  EXPECT_EQ(a.decide(Time::from_seconds(300), 8, 20), 8);
  // Past 300 s the 8 has left the window; the largest left is 2.
  EXPECT_EQ(a.decide(Time::from_seconds(301), 8, 20), 2);
  // Up at once whatever the window holds.
  EXPECT_EQ(a.decide(Time::from_seconds(302), 2, 120), 12);
}

TEST(ServingAutoscaler, AForcedMinimumIsRememberedByTheScaleDownWindow) {
  // Min 0: a decision forced to one (requests waiting at the activator) holds that one through
  // the window, though the load says none.
  AutoscaleConfig c = hpa(0, 4, 1);
  c.scale_down_window = Time::from_seconds(60);
  Autoscaler a(c);
  EXPECT_EQ(a.decide(Time::from_seconds(0), 0, 0.0, 1), 1);
  EXPECT_EQ(a.decide(Time::from_seconds(30), 1, 0.0), 1);  // within the window
  EXPECT_EQ(a.decide(Time::from_seconds(61), 1, 0.0), 0);  // past it
  EXPECT_EQ(Autoscaler(hpa(0, 4, 1)).decide(Time::zero(), 0, 0.0), 0);
}

TEST(ServingAutoscaler, StartUpIsInitialisationPlusOneGpusWeightsAtTheLoadRate) {
  AutoscaleConfig c;
  c.engine_init = Time::from_seconds(30);
  c.load_bandwidth = gigabytes_per_second(2);
  EXPECT_NEAR(startup_time(c, Bytes(16e9)).seconds(), 38.0, 1e-9);
  c.startup = Time::from_seconds(90);
  EXPECT_NEAR(startup_time(c, Bytes(16e9)).seconds(), 90.0, 1e-9);
}

TEST(ServingRouter, NoPolicyChoosesAnInstanceThatIsOff) {
  for (const char* name : {"round_robin", "random", "least_requests", "least_tokens", "power_of_two", "least_waiting",
                           "least_kv", "session", "cache_aware", "kv_cost", "weighted", "least_time"}) {
    RequestRouter router(*routing_policy_from(name), 5, 3);
    router.set_available(1, false);
    router.set_available(3, false);
    std::vector<EngineReport> reports(5);
    reports[1] = {0, 0.0};  // the idlest on every signal, but off
    reports[0] = reports[2] = reports[4] = {4, 0.5};
    for (int i = 0; i < 500; ++i) {
      Request r;
      r.id = i;
      r.session = static_cast<uint64_t>(i);
      r.prompt_tokens = 100 + i % 7;
      r.prefix_blocks = {static_cast<uint64_t>(i % 11), 99};
      const int k = router.choose(r, reports);
      ASSERT_TRUE(k == 0 || k == 2 || k == 4) << name << " chose " << k;
      router.sent(k, r);
      if (i % 3 == 0) router.finished(k, r);
    }
    // All off (a pool scaled to zero): nothing may be chosen until one is back.
    router.set_available(0, false);
    router.set_available(2, false);
    router.set_available(4, false);
    EXPECT_FALSE(router.any_available());
    EXPECT_THROW(router.choose(Request{}, reports), std::logic_error) << name;
    router.set_available(2, true);
    EXPECT_EQ(router.choose(Request{}, reports), 2) << name;
  }
}

TEST(ServingRouter, LeastTimeSharesRequestsInProportionToTheRates) {
  // Nothing finishes: each choice is the least (n + 1) / rate, so after 400 requests the
  // instances hold 400 · rate / Σ rates each (within one, ties going to the lower index).
  RequestRouter router(RoutingPolicy::kLeastTime, 3, 1);
  router.set_rates({1.0, 3.0, 4.0});
  const Request r;
  for (int i = 0; i < 400; ++i) router.sent(router.choose(r, std::vector<EngineReport>(3)), r);
  EXPECT_NEAR(static_cast<double>(router.in_flight(0)), 50, 1);
  EXPECT_NEAR(static_cast<double>(router.in_flight(1)), 150, 1);
  EXPECT_NEAR(static_cast<double>(router.in_flight(2)), 200, 1);
  // Equal rates choose as least_requests does.
  RequestRouter time(RoutingPolicy::kLeastTime, 4, 1), requests(RoutingPolicy::kLeastRequests, 4, 1);
  time.set_rates({2.5, 2.5, 2.5, 2.5});
  for (int i = 0; i < 200; ++i) {
    Request q;
    q.prompt_tokens = 1 + i % 13;
    const int a = time.choose(q, std::vector<EngineReport>(4)), b = requests.choose(q, std::vector<EngineReport>(4));
    ASSERT_EQ(a, b) << i;
    time.sent(a, q);
    requests.sent(b, q);
    if (i % 3 == 0) {
      time.finished(a, q);
      requests.finished(b, q);
    }
  }
  EXPECT_THROW(router.set_rates({1.0, 2.0}), std::invalid_argument);
  EXPECT_THROW(router.set_rates({1.0, 0.0, 2.0}), std::invalid_argument);
}

// Two H100s and two A100s 40GB behind one router: least_time weighs each by what its pool
// sustains (rate_bound.h), so the faster H100s take a larger share than least_requests, which
// sees only what is in flight, gives them, and the fleet meets the SLO at least as often.
TEST(ServingRouter, LeastTimeGivesTheFasterKindMore) {
  FleetConfig c;
  c.model = test::bundled("llama3-8b");
  c.topology = test::two_kinds();
  PoolConfig h100, a100;
  h100.name = "h100";
  a100.name = "a100";
  h100.count = a100.count = 2;
  h100.first_gpu = 0;
  a100.first_gpu = 2;
  c.pools = {h100, a100};
  c.traffic.rate_per_s = 30;
  c.traffic.requests = 600;
  c.traffic.prompt.value = 1500;
  c.traffic.output.value = 150;
  c.slo_ttft = Time::ms(1000);
  c.slo_tpot = Time::ms(40);
  const auto run = [&](RoutingPolicy policy) {
    FleetConfig f = c;
    f.router = policy;
    const FleetResult r = simulate_fleet(f);
    double fast = 0;
    for (const RequestRecord& q : r.requests) fast += q.instance < 2 ? 1 : 0;
    return std::pair(fast / static_cast<double>(r.requests.size()), summarize(f, r).slo_attainment);
  };
  const auto [time_share, time_slo] = run(RoutingPolicy::kLeastTime);
  const auto [requests_share, requests_slo] = run(RoutingPolicy::kLeastRequests);
  EXPECT_GT(time_share, requests_share);
  EXPECT_GT(requests_share, 0.5);  // least_requests leans to the faster kind too: they finish sooner
  EXPECT_GE(time_slo, requests_slo);
}

TEST(ServingRouter, RoundRobinSkipsWhatIsOffAndResumesItWhenBack) {
  RequestRouter router(RoutingPolicy::kRoundRobin, 3, 1);
  router.set_available(1, false);
  const Request r;
  std::vector<int> order;
  for (int i = 0; i < 4; ++i) order.push_back(router.choose(r, std::vector<EngineReport>(3)));
  EXPECT_EQ(order, (std::vector<int>{0, 2, 0, 2}));
  router.set_available(1, true);
  order.clear();
  for (int i = 0; i < 3; ++i) order.push_back(router.choose(r, std::vector<EngineReport>(3)));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));  // the counter went on while 1 was off
}

TEST(ServingTraffic, ARateProfileDrawsEachStepsRateTimesItsLength) {
  TrafficSpec spec;
  spec.rate_per_s = 10;
  spec.requests = 6000;
  spec.rate_profile = {{Time::zero(), 1.0}, {Time::from_seconds(100), 4.0}, {Time::from_seconds(200), 0.0},
                       {Time::from_seconds(250), 0.5}};
  Rng rng(42);
  const std::vector<Request> stream = open_loop_requests(spec, rng);
  int first = 0, second = 0, silent = 0, last = 0;
  for (const Request& r : stream) {
    const double t = r.arrival.seconds();
    (t < 100 ? first : t < 200 ? second : t < 250 ? silent : last) += 1;
  }
  // Poisson counts: 1,000 ± 4·√1000 and 4,000 ± 4·√4000; none while the scale is 0; the rest at 5/s.
  EXPECT_NEAR(first, 1000, 4 * std::sqrt(1000.0));
  EXPECT_NEAR(second, 4000, 4 * std::sqrt(4000.0));
  EXPECT_EQ(silent, 0);
  const double tail = stream.back().arrival.seconds() - 250;
  EXPECT_NEAR(last / tail, 5.0, 4 * std::sqrt(5.0 / tail));
}

// Single-server instances (one 1-token request per 10 ms step: μ = 100/s each) under 50/s, then
// 400/s from 300 s to 600 s, then 50/s again; concurrency target 0.6 an instance, 5 s start-ups.
FleetConfig stepped_load(int min, int max) {
  FleetConfig c = test::queue(max, 50, 180000, RoutingPolicy::kLeastRequests);
  AutoscaleConfig a = hpa(min, max, 0.6);
  a.interval = Time::from_seconds(5);
  a.scale_down_window = Time::from_seconds(60);
  a.startup = Time::from_seconds(5);
  c.pools[0].autoscale = a;
  c.traffic.rate_profile = {{Time::zero(), 1.0}, {Time::from_seconds(300), 8.0}, {Time::from_seconds(600), 1.0}};
  c.seed = 7;
  return c;
}

StepTimerFactory ten_ms() {
  return [](const PoolConfig&, int) { return std::make_unique<test::ConstantTimer>(Time::ms(10)); };
}

int holding(const InstanceCountPoint& p) { return p.serving + p.starting + p.draining; }

// The instances at time t: the last change at or before it.
InstanceCountPoint at(const std::vector<InstanceCountPoint>& line, double t) {
  InstanceCountPoint now = line.front();
  for (const InstanceCountPoint& p : line) {
    if (p.at.seconds() <= t) now = p;
  }
  return now;
}

TEST(ServingAutoscale, AFleetFollowsAStepInLoadAndLosesNothing) {
  const FleetConfig c = stepped_load(1, 8);
  const FleetResult r = simulate_fleet(c, ten_ms());
  for (const RequestRecord& rec : r.requests) ASSERT_TRUE(rec.completed) << rec.id;
  ASSERT_TRUE(r.pools[0].scaling);
  const PoolScaling& s = *r.pools[0].scaling;
  int before = 0;
  for (const InstanceCountPoint& p : s.timeline) {
    EXPECT_GE(p.serving + p.starting, 1);
    EXPECT_LE(holding(p), 8);
    if (p.at.seconds() < 300) before = std::max(before, p.serving);
  }
  EXPECT_LE(before, 3);  // 50/s: about half of one instance
  // 400/s needs more than 4 servers of 100/s: within two intervals and a start-up of the step.
  for (const double t : {320.0, 450.0, 599.0}) EXPECT_GE(at(s.timeline, t).serving, 5) << t;
  EXPECT_GE(holding(at(s.timeline, 655)), 5);  // nothing released within 60 s of the drop
  EXPECT_LE(s.timeline.back().serving, 3);
  EXPECT_GT(s.started, 0);
  EXPECT_EQ(s.started - s.cancelled, s.drained + (s.timeline.back().serving + s.timeline.back().starting - 1));
  // GPU-hours are the integral of the instances holding GPUs, one GPU each.
  double area = 0;
  for (size_t i = 0; i < s.timeline.size(); ++i) {
    const Time end = i + 1 < s.timeline.size() ? s.timeline[i + 1].at : r.duration;
    area += holding(s.timeline[i]) * (end - s.timeline[i].at).seconds();
  }
  EXPECT_NEAR(r.pools[0].gpu_hours, area / 3600, 1e-9 * area);
  EXPECT_NEAR(r.pools[0].mean_instances, area / r.duration.seconds(), 1e-9);
}

TEST(ServingAutoscale, ScalingOnTimeToFirstTokenFollowsTheStepToo) {
  // The same step in load scaled on the interval's mean TTFT, target 30 ms: one 10 ms server at
  // 50/s waits ρ·D/(2(1 − ρ)) = 5 ms (TTFT 15 ms, no change); at 400/s queues grow until
  // enough servers run; after the drop TTFTs fall to ~10 ms and instances go, a window later.
  FleetConfig c = stepped_load(1, 8);
  c.pools[0].autoscale->metric = AutoscaleMetric::kTtft;
  c.pools[0].autoscale->target = 0.03;
  const FleetResult r = simulate_fleet(c, ten_ms());
  for (const RequestRecord& rec : r.requests) ASSERT_TRUE(rec.completed) << rec.id;
  const std::vector<InstanceCountPoint>& line = r.pools[0].scaling->timeline;
  EXPECT_EQ(at(line, 299).serving, 1);
  EXPECT_GE(at(line, 450).serving, 5);
  EXPECT_LT(line.back().serving, at(line, 599).serving);
}

TEST(ServingAutoscale, ScalingOnTheArrivalRateRunsEachInstanceAtTheTargetShareOfItsRate) {
  // Llama 3 8B at TP 1, fixed lengths, 4/s then 24/s from 300 s: arrival_rate wants
  // ⌈λ / (target · r)⌉ instances, r what one sustains at full batches (rate_bound.h), as Dynamo's
  // planner divides the request rate by a replica's throughput. Poisson counts over 15 s
  // intervals move it by about one.
  FleetConfig c;
  c.model = test::bundled("llama3-8b");
  c.topology = test::shared_dgx_h100();
  PoolConfig pool;
  pool.name = "chat";
  pool.count = 8;
  pool.batching.max_sequences = 64;
  AutoscaleConfig a;
  a.min = 1;
  a.max = 8;
  a.metric = AutoscaleMetric::kArrivalRate;
  a.target = 0.25;
  a.interval = Time::from_seconds(15);
  a.scale_down_window = Time::from_seconds(60);
  a.startup = Time::from_seconds(10);
  pool.autoscale = a;
  c.pools = {pool};
  c.traffic.rate_per_s = 4;
  c.traffic.requests = 9000;
  c.traffic.prompt.value = 2000;
  c.traffic.output.value = 200;
  c.traffic.rate_profile = {{Time::zero(), 1.0}, {Time::from_seconds(300), 6.0}};
  const TrafficMeans means = traffic_means(c);
  const StepModel model(c.model, *c.topology, pool.shape, pool.step);
  const BatchingConfig b = instance_batching(pool);
  const double rate = std::min(prefill_rate_bound(model, b, means),
                               decode_rate_bound(model, b, pool_kv_capacity(c, pool).blocks, means, Time::zero()));
  const auto wanted = [&](double lambda) { return static_cast<int>(std::ceil(lambda / (a.target * rate))); };
  ASSERT_EQ(wanted(4), 1);   // one instance sustains some 17/s here
  ASSERT_GE(wanted(24), 5);  // and within max, so the count is the formula's
  ASSERT_LT(wanted(24), 8);
  const FleetResult r = simulate_fleet(c);
  const std::vector<InstanceCountPoint>& line = r.pools[0].scaling->timeline;
  for (const double t : {200.0, 280.0}) EXPECT_NEAR(at(line, t).serving, std::max(1, wanted(4)), 1) << t;
  for (const double t : {400.0, 500.0}) EXPECT_NEAR(at(line, t).serving, wanted(24), 1) << t;
}

TEST(ServingAutoscale, APoolScaledToZeroWakesForTheNextRequest) {
  // min 0, one 10 ms server, 5 s start-ups: 20 s of 50/s, 200 s of nothing, then 20 s more.
  // In the lull the pool goes to zero after its 60 s window; the first request after it waits
  // at the activator for a whole start-up, the ones behind it less, and every one completes.
  FleetConfig c = test::queue(2, 50, 2000, RoutingPolicy::kLeastRequests);
  AutoscaleConfig a = hpa(0, 2, 0.6);
  a.interval = Time::from_seconds(5);
  a.scale_down_window = Time::from_seconds(60);
  a.startup = Time::from_seconds(5);
  c.pools[0].autoscale = a;
  c.traffic.rate_profile = {{Time::zero(), 1.0}, {Time::from_seconds(20), 0.0}, {Time::from_seconds(220), 1.0}};
  const FleetResult r = simulate_fleet(c, ten_ms());
  const std::vector<InstanceCountPoint>& line = r.pools[0].scaling->timeline;
  // It starts at zero (min 0, no initial): the first request wakes it.
  EXPECT_EQ(holding(line.front()), 0);
  double first_after = -1, ttft_after = 0;
  for (const RequestRecord& rec : r.requests) {
    ASSERT_TRUE(rec.completed) << rec.id;
    if (rec.id == 0) {
      EXPECT_GE(rec.ttft().seconds(), 5.0);
    }
    if (rec.arrival.seconds() >= 220 && first_after < 0) {
      first_after = rec.arrival.seconds();
      ttft_after = rec.ttft().seconds();
    }
  }
  EXPECT_EQ(holding(at(line, 200)), 0);  // released in the lull
  ASSERT_GE(first_after, 220.0);
  EXPECT_GE(ttft_after, 5.0);            // a whole cold start
  EXPECT_LT(ttft_after, 5.5);
  EXPECT_GE(at(line, 230).serving, 1);
  // Held GPU time, one GPU an instance: at most both instances through each burst (20 s), its
  // start-up (5 s), the window after it (60 s) and the decision interval that ends it (5 s),
  // twice: 2 × 90 s × 2 bursts. Held throughout the 240 s it would be 480 GPU-seconds.
  EXPECT_LT(r.pools[0].gpu_hours * 3600, 2 * (20 + 5 + 60 + 5) * 2);
  // A decode pool cannot go to zero (a prefilled request would have nowhere to go), nor a pool
  // beside others behind one router (nothing would send it load to wake it).
  const auto refused = [](const FleetConfig& f, const std::string& why) {
    try {
      simulate_fleet(f, ten_ms());
      ADD_FAILURE() << "ran: " << why;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  FleetFile pd = load_fleet(test::source_path("tests/data/serve/pd-split.json"), test::source_path("workloads/models"),
                            test::source_path("topologies"));
  for (PoolConfig& pool : pd.config.pools) {
    if (pool.role == PoolRole::kDecode) pool.autoscale = hpa(0, pool.count, 4);
  }
  refused(pd.config, "a decode pool cannot scale to zero");
  FleetConfig two = c;
  two.pools.push_back(two.pools[0]);
  two.pools[1].autoscale.reset();
  two.pools[1].count = 1;
  refused(two, "only as the one pool behind its router");
}

TEST(ServingAutoscale, ARequestDuringTheLastDrainRevivesTheInstance) {
  // One 2 s server scaled on arrivals (target 1 a second): A at 0.5 s keeps it at the 1 s
  // decision; none in (1, 2] s releases it at 2 s while A still runs (to 2.5 s); B at 2.2 s
  // finds nothing serving and waits at the activator, which takes the draining instance back at
  // once rather than a start of 100 s. Both complete, B within its step of arriving.
  FleetConfig c = test::queue(1, 1, 2);
  auto trace = std::make_shared<std::vector<Request>>(2);
  for (size_t i = 0; i < 2; ++i) {
    (*trace)[i].id = static_cast<int64_t>(i);
    (*trace)[i].prompt_tokens = 1;
    (*trace)[i].output_tokens = 1;
  }
  (*trace)[0].arrival = Time::from_seconds(0.5);
  (*trace)[1].arrival = Time::from_seconds(2.2);
  c.replay = trace;
  AutoscaleConfig a = hpa(0, 1, 1);
  a.initial = 1;
  a.metric = AutoscaleMetric::kArrivalRate;
  a.interval = Time::from_seconds(1);
  a.scale_down_window = Time::zero();
  a.startup = Time::from_seconds(100);
  c.pools[0].autoscale = a;
  const FleetResult r = simulate_fleet(c, [](const PoolConfig&, int) {
    return std::make_unique<test::ConstantTimer>(Time::from_seconds(2));
  });
  ASSERT_EQ(r.requests.size(), 2u);
  for (const RequestRecord& rec : r.requests) ASSERT_TRUE(rec.completed) << rec.id;
  const PoolScaling& s = *r.pools[0].scaling;
  EXPECT_TRUE(std::any_of(s.timeline.begin(), s.timeline.end(),
                          [](const InstanceCountPoint& p) { return p.draining == 1 && p.serving == 0; }));
  EXPECT_EQ(s.started, 0);  // no cold start: the draining instance came back
  EXPECT_LT(r.requests[1].ttft().seconds(), 2.5);
}

TEST(ServingAutoscale, ScalingUpAtMaxWhileInstancesDrainRevivesThem) {
  // No scale-down window and 1 s decisions: a lull releases instances still finishing long
  // answers, and the surge after it wants all 8 back while some drain. They serve again (warm,
  // their GPUs still held) instead of a start past the pool's GPUs.
  const FleetFile f = load_fleet(test::source_path("tests/data/serve/autoscale-revive.json"),
                                 test::source_path("workloads/models"), test::source_path("topologies"));
  const FleetResult r = simulate_fleet(f.config);
  for (const RequestRecord& rec : r.requests) ASSERT_TRUE(rec.completed) << rec.id;
  const PoolScaling& s = *r.pools[0].scaling;
  bool revived = false;
  for (size_t i = 1; i < s.timeline.size(); ++i) {
    EXPECT_LE(holding(s.timeline[i]), 8);
    revived |= s.timeline[i - 1].draining > 0 && s.timeline[i].serving == 8;
  }
  EXPECT_TRUE(revived);
}

TEST(ServingAutoscale, AStartServesAfterItsStartUpTime) {
  const FleetResult r = simulate_fleet(stepped_load(1, 8), ten_ms());
  const std::vector<InstanceCountPoint>& line = r.pools[0].scaling->timeline;
  // The first start: its instance serves 5 s later, the first change after it.
  size_t i = 1;
  while (line[i].starting == 0) ++i;
  ASSERT_LT(i + 1, line.size());
  EXPECT_EQ(line[i + 1].at - line[i].at, Time::from_seconds(5));
  EXPECT_EQ(line[i + 1].serving, line[i].serving + line[i].starting);
}

TEST(ServingAutoscale, MinEqualToMaxIsAFixedPool) {
  FleetConfig scaled = stepped_load(4, 4);
  scaled.traffic.requests = 40000;
  FleetConfig fixed = scaled;
  fixed.pools[0].autoscale.reset();
  const FleetResult a = simulate_fleet(scaled, ten_ms()), b = simulate_fleet(fixed, ten_ms());
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t i = 0; i < a.requests.size(); ++i) {
    ASSERT_EQ(a.requests[i].instance, b.requests[i].instance) << i;
    ASSERT_EQ(a.requests[i].completion, b.requests[i].completion) << i;
  }
  EXPECT_EQ(a.pools[0].scaling->started, 0);
  EXPECT_NEAR(a.pools[0].mean_instances, 4.0, 1e-12);
}

TEST(ServingAutoscale, RerunsAreIdentical) {
  FleetConfig c = stepped_load(1, 8);
  c.traffic.requests = 60000;
  const FleetResult a = simulate_fleet(c, ten_ms()), b = simulate_fleet(c, ten_ms());
  ASSERT_EQ(a.pools[0].scaling->timeline.size(), b.pools[0].scaling->timeline.size());
  for (size_t i = 0; i < a.pools[0].scaling->timeline.size(); ++i) {
    EXPECT_EQ(a.pools[0].scaling->timeline[i].at, b.pools[0].scaling->timeline[i].at);
  }
  for (size_t i = 0; i < a.requests.size(); ++i) ASSERT_EQ(a.requests[i].completion, b.requests[i].completion);
}

}  // namespace
}  // namespace parallax

namespace parallax {
namespace {

TEST(ServingCost, GpuHoursAtTheirPricesOverTheTokens) {
  // A fixed pool of 3 one-GPU instances and an autoscaled one: GPU-hours are the fixed pool's
  // instances throughout the run plus what the autoscaled pool held.
  FleetConfig c = stepped_load(1, 4);
  c.traffic.requests = 20000;
  PoolConfig fixed = c.pools[0];
  fixed.name = "fixed";
  fixed.autoscale.reset();
  fixed.count = 3;
  c.pools.push_back(fixed);
  const FleetResult r = simulate_fleet(c, ten_ms());
  const FleetSummary s = summarize(c, r);
  const FleetCost cost = fleet_cost(c, r, s, GpuHourPrices{{"H100-SXM5-80GB", 2.0}});
  EXPECT_NEAR(r.pools[1].gpu_hours, 3 * r.duration.seconds() / 3600, 1e-12);  // 3 one-GPU instances throughout
  const double hours = r.pools[0].gpu_hours + r.pools[1].gpu_hours;
  EXPECT_NEAR(cost.gpu_hours, hours, 1e-12);
  EXPECT_NEAR(cost.dollars, 2.0 * hours, 1e-12);
  EXPECT_NEAR(cost.per_million_output_tokens, 2.0 * hours / 20000 * 1e6, 1e-9);  // one output token each
  EXPECT_NEAR(cost.per_million_tokens, 2.0 * hours / 40000 * 1e6, 1e-9);         // and one prompt token
  EXPECT_EQ(unpriced_gpu(c, GpuHourPrices{{"A100-SXM4-80GB", 1.0}}), "H100-SXM5-80GB (pool pool)");
  EXPECT_TRUE(unpriced_gpu(c, GpuHourPrices{{"*", 1.0}}).empty());
}

}  // namespace
}  // namespace parallax
