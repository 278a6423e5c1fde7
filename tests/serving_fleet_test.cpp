// The serving fleet simulation (serving/fleet.h) against queueing theory and its own rules:
// M/M/1 and M/D/1 waiting times, join-shortest-queue against round-robin, Little's law,
// preemption that loses and duplicates nothing, KV capacity from memory by hand, rejection of
// what can never fit, and byte-identical reruns.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "model/model_loader.h"
#include "model/parameter_count.h"
#include "serving/data_parallel_scheduler.h"
#include "serving/fleet.h"
#include "serving/fleet_loader.h"
#include "serving/rate_bound.h"
#include "serving/fleet_search.h"
#include "serving/fleet_sweep.h"
#include "serving_test_support.h"
#include "test_support.h"
#include "topology/topology_loader.h"

namespace parallax {
namespace {

using test::bundled;

using test::shared_dgx_h100;

using test::ConstantTimer;

class ExponentialTimer final : public StepTimer {
 public:
  ExponentialTimer(double mean_s, uint64_t seed) : mean_(mean_s), rng_(seed) {}
  Time step_time(const RaggedBatch&) override { return Time::from_seconds(rng_.exponential(mean_)); }

 private:
  double mean_;
  Rng rng_;
};

using test::queue;

double mean_wait(const FleetResult& r) {
  double sum = 0;
  for (const RequestRecord& rec : r.requests) sum += rec.queueing().seconds();
  return sum / static_cast<double>(r.requests.size());
}

StepTimerFactory exponential(double mean_s) {
  return [mean_s](const PoolConfig&, int instance) {
    return std::make_unique<ExponentialTimer>(mean_s, 77 + static_cast<uint64_t>(instance));
  };
}

TEST(ServingQueue, MM1WaitingTimeIsRhoOverMuMinusLambda) {
  // μ = 1000/s (1 ms mean service). Wq = ρ / (μ − λ): ρ = 0.5 → 1 ms; ρ = 0.8 → 4 ms.
  for (const double rho : {0.5, 0.8}) {
    const double mu = 1000, lambda = rho * mu;
    const FleetResult r = simulate_fleet(queue(1, lambda, 400000), exponential(1.0 / mu));
    const double expected = rho / (mu - lambda);
    EXPECT_NEAR(mean_wait(r) / expected, 1.0, 0.02) << "rho " << rho;
    EXPECT_NEAR(r.mean_in_system / r.arrival_rate_times_mean_e2e, 1.0, 1e-9);  // Little's law
  }
}

TEST(ServingQueue, MD1WaitingTimeIsPollaczekKhinchine) {
  // Deterministic service D = 1 ms: Wq = ρ·D / (2(1 − ρ)): ρ = 0.5 → 0.5 ms; ρ = 0.8 → 2 ms.
  for (const double rho : {0.5, 0.8}) {
    const double d = 1e-3;
    const FleetResult r = simulate_fleet(queue(1, rho / d, 200000), [d](const PoolConfig&, int) {
      return std::make_unique<ConstantTimer>(Time::from_seconds(d));
    });
    EXPECT_NEAR(mean_wait(r) / (rho * d / (2 * (1 - rho))), 1.0, 0.02) << "rho " << rho;
    EXPECT_NEAR(r.mean_in_system / r.arrival_rate_times_mean_e2e, 1.0, 1e-9);
  }
}

TEST(ServingQueue, JoinShortestQueueWaitsLessThanPowerOfTwoThanRoundRobin) {
  // 4 exponential servers at ρ = 0.85 each.
  const double mu = 1000, lambda = 0.85 * 4 * mu;
  const double rr = mean_wait(simulate_fleet(queue(4, lambda, 200000, RoutingPolicy::kRoundRobin), exponential(1e-3)));
  const double p2 = mean_wait(simulate_fleet(queue(4, lambda, 200000, RoutingPolicy::kPowerOfTwo), exponential(1e-3)));
  const double jsq =
      mean_wait(simulate_fleet(queue(4, lambda, 200000, RoutingPolicy::kLeastRequests), exponential(1e-3)));
  EXPECT_LT(jsq, p2);
  EXPECT_LT(p2, rr);
  // Round-robin splits a Poisson stream into four Erlang-4 streams: each server is an E4/M/1
  // queue, whose wait lies below M/M/1's ρ/(μ − λ_i) = 5.67 ms.
  EXPECT_LT(rr, 0.85 / (mu - lambda / 4));
}

TEST(ServingBatching, PreemptionLosesAndDuplicatesNothing) {
  FleetConfig c = queue(1, 50, 300);
  PoolConfig& pool = c.pools[0];
  pool.batching.max_sequences = 64;
  pool.batching.token_budget = 512;
  pool.batching.kv_blocks = 60;  // 960 tokens: about three of these requests at their longest
  c.traffic.prompt = LengthDistribution{LengthDistribution::Kind::kUniform, 1, 50, 300, 1, 0};
  c.traffic.output = LengthDistribution{LengthDistribution::Kind::kUniform, 1, 50, 300, 1, 0};
  for (const BatchingPolicy policy : {BatchingPolicy::kChunked, BatchingPolicy::kPrefillFirst, BatchingPolicy::kStatic}) {
    pool.batching.policy = policy;
    const FleetResult r = simulate_fleet(c, [](const PoolConfig&, int) {
      return std::make_unique<ConstantTimer>(Time::ms(5));
    });
    int64_t completed = 0;
    for (const RequestRecord& rec : r.requests) {
      ASSERT_TRUE(rec.completed) << to_string(policy) << " request " << rec.id;
      EXPECT_EQ(rec.tokens_out, rec.output_tokens) << to_string(policy) << " request " << rec.id;
      EXPECT_GE(rec.first_token, rec.first_scheduled);
      EXPECT_GE(rec.completion, rec.first_token);
      ++completed;
    }
    EXPECT_EQ(completed, 300);
    // Chunked and prefill-first admit by what fits now, so the cache runs out and they preempt;
    // static batching reserves every request's whole life and never does.
    if (policy == BatchingPolicy::kStatic) {
      EXPECT_EQ(r.preemptions, 0);
    } else {
      EXPECT_GT(r.preemptions, 0) << to_string(policy);
    }
  }
}

TEST(ServingBatching, DataParallelRanksScheduleTheirOwnShareAndKeepTheirRequests) {
  // 2 ranks of an instance of 8 sequences, 1,000 tokens a step and 100 KV blocks of 16: each
  // rank 4 sequences, 500 tokens and 50 blocks.
  BatchingConfig b;
  b.max_sequences = 8;
  b.token_budget = 1000;
  b.kv_blocks = 100;
  b.block_size = 16;
  DataParallelScheduler s(b, 2);
  EXPECT_EQ(s.kv_blocks(), 100);
  // 900 + 0 tokens need 57 blocks: the instance has them, a rank does not.
  EXPECT_TRUE(BatchScheduler(b).never_fits(900, 1).empty());
  EXPECT_NE(s.never_fits(900, 1).find("data-parallel rank"), std::string::npos);
  // Requests go to the ranks in turn and stay there; each rank plans its own.
  for (int64_t id = 0; id < 6; ++id) s.enqueue(id, 200, 10, {}, 0);
  for (int64_t id = 0; id < 6; ++id) EXPECT_EQ(s.rank_of(id), static_cast<int>(id % 2));
  const StepPlan plan = s.plan();
  ASSERT_EQ(plan.parts.size(), 2u);
  // A rank's 500 tokens: two whole prompts of 200 and 100 of the third.
  for (const StepPlan& part : plan.parts) ASSERT_EQ(part.chunks.size(), 3u);
  for (const PlannedChunk& c : plan.chunks) EXPECT_EQ(c.rank, s.rank_of(c.request));
  const std::vector<RaggedBatch> ranks = attention_ranks(plan.batch(), 2);
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].sequences.size(), 3u);
  EXPECT_EQ(ranks[1].sequences.size(), 3u);
  const StepOutcome out = s.complete(plan);
  EXPECT_EQ(out.first_token.size(), 4u);  // the whole prompts sampled their first token
  EXPECT_EQ(s.used_blocks(), 2 * (13 + 13 + 7));  // ⌈200/16⌉ twice and ⌈100/16⌉ a rank
  EXPECT_THROW(DataParallelScheduler(b, 1), std::invalid_argument);
}

TEST(ServingBatching, ShortestQueueDispatchSendsARequestToTheEmptierRank) {
  // Request 0 decodes for long on rank 0, request 1 finishes at its first token on rank 1; the
  // next request goes to rank 0 in turn, to rank 1 by the shortest queue.
  for (const DpDispatch d : {DpDispatch::kRoundRobin, DpDispatch::kShortestQueue}) {
    BatchingConfig b;
    b.kv_blocks = 100;
    b.dp_dispatch = d;
    DataParallelScheduler s(b, 2);
    s.enqueue(0, 10, 100, {}, 0);
    s.enqueue(1, 10, 1, {}, 0);
    const StepOutcome out = s.complete(s.plan());
    ASSERT_EQ(out.finished, std::vector<int64_t>{1});
    s.enqueue(2, 10, 10, {}, 0);
    EXPECT_EQ(s.rank_of(2), d == DpDispatch::kRoundRobin ? 0 : 1);
  }
}

TEST(ServingStep, TaggedSequencesRunOnTheirRank) {
  // Mixtral with 2 data-parallel attention ranks: two sequences of 8,192 tokens of context both on
  // rank 0 make a slower step than shared out one a rank.
  const ModelConfig m = bundled("mixtral-8x7b");
  const auto node = shared_dgx_h100();
  const StepModel model(m, *node, InstanceShape{1, 1, 2, 2}, StepModelOptions{});
  RaggedBatch shared, stacked;
  shared.sequences = {SequenceChunk{1, 8192, true}, SequenceChunk{1, 8192, true}};
  stacked.sequences = {SequenceChunk{1, 8192, true, 0, 0}, SequenceChunk{1, 8192, true, 0, 0}};
  EXPECT_GT(model.step(stacked).attention.seconds(), 1.3 * model.step(shared).attention.seconds());
  EXPECT_GT(model.step(stacked).total, model.step(shared).total);
  RaggedBatch partly = stacked;
  partly.sequences.push_back(SequenceChunk{1, 64, true});
  EXPECT_THROW(model.step(partly), std::invalid_argument);
}

// A hybrid allocator (vLLM's since 0.10): on the windowed layers' share s of the KV bytes a
// sequence keeps only the blocks its last w tokens straddle. GPT-OSS's 128-token window on half
// the layers, blocks of 16 (w + b − 1 = 143 tokens, 9 blocks): 1,000 tokens hold
// ⌈0.5·63 + 0.5·9⌉ = 36 blocks instead of 63; 100 tokens, all in the window, hold 7 either way.
TEST(ServingBatching, AHybridAllocatorKeepsOnlyTheWindowsBlocksOnWindowedLayers) {
  BatchingConfig b;
  b.kv_blocks = 1000;
  b.block_size = 16;
  EXPECT_EQ(sequence_blocks(1000, b), 63);
  b.bounded_kv_share = 0.5;
  b.bounded_kv_span = 128 + 16 - 1;
  EXPECT_EQ(sequence_blocks(1000, b), 36);
  EXPECT_EQ(sequence_blocks(100, b), 7);
  EXPECT_EQ(sequence_blocks(143, b), 9);
  // The scheduler holds that much for a running sequence, and gives it all back at the end.
  BatchScheduler s(b);
  s.enqueue(1, 1000, 2);
  StepPlan plan = s.plan();
  s.complete(plan);
  EXPECT_EQ(s.used_blocks(), 36);
  while (s.used_blocks() > 0) {
    plan = s.plan();
    if (plan.chunks.empty()) break;
    s.complete(plan);
  }
  EXPECT_EQ(s.used_blocks(), 0);
}

// The same fleet with the hybrid allocator and without (kv_cache.hybrid_allocator false): under
// prompts of thousands of tokens GPT-OSS's windowed half of the layers keeps 143 tokens' blocks,
// so the cache holds about half as much; the steps, which do not depend on it here, are the same.
TEST(ServingFleet, AHybridAllocatorHalvesGptOssCacheUnderLongPrompts) {
  FleetFile f = load_fleet(test::source_path("tests/data/serve/gpt-oss-windowed.json"),
                           test::source_path("workloads/models"), test::source_path("topologies"));
  const FleetResult on = simulate_fleet(f.config);
  f.config.pools.front().hybrid_kv_allocator = false;
  const FleetResult off = simulate_fleet(f.config);
  ASSERT_EQ(on.pools.size(), 1u);
  EXPECT_EQ(on.pools.front().kv_blocks, off.pools.front().kv_blocks);
  EXPECT_NEAR(on.pools.front().kv_occupancy / off.pools.front().kv_occupancy, 0.5, 0.03);
  EXPECT_EQ(on.pools.front().steps, off.pools.front().steps);
  EXPECT_EQ(on.preemptions, 0);
}

// Where the cache binds (24k-token prompts at 20 requests/s), the freed blocks carry more
// sequences: more requests completed, fewer preemptions; the decode rate bound, which prunes
// fleet searches, rises with them and stays above what the simulation reaches.
TEST(ServingFleet, AHybridAllocatorCarriesMoreWhereTheCacheBinds) {
  FleetFile f = load_fleet(test::source_path("tests/data/serve/gpt-oss-windowed.json"),
                           test::source_path("workloads/models"), test::source_path("topologies"));
  f.config.traffic.rate_per_s = 20;
  f.config.traffic.prompt.mean = 24000;
  const FleetResult on = simulate_fleet(f.config);
  const double bound_on = instance_rate_bound(f.config, f.config.pools.front(), traffic_means(f.config));
  f.config.pools.front().hybrid_kv_allocator = false;
  const FleetResult off = simulate_fleet(f.config);
  const double bound_off = instance_rate_bound(f.config, f.config.pools.front(), traffic_means(f.config));
  const auto completed = [](const FleetResult& r) {
    return static_cast<double>(r.requests.size()) / r.duration.seconds();
  };
  EXPECT_GT(completed(on), 1.2 * completed(off));
  EXPECT_LT(on.preemptions, off.preemptions);
  EXPECT_GT(bound_on, bound_off);
  EXPECT_GE(2 * bound_on, completed(on));  // two instances
  EXPECT_GE(2 * bound_off, completed(off));
}

TEST(ServingBatching, SpeculationYieldsItsExpectedTokensAndKeepsOnlyAcceptedKv) {
  // One request, 10 prompt tokens and 100 output, 3 drafts a step accepted with 0.5 each:
  // a decode step yields 1 + 0.5 + 0.25 + 0.125 = 1.875 tokens on average, so the 99 tokens
  // after the first take 99 / 1.875 = 52.8 steps (the last ones draft less, near the end).
  BatchingConfig b;
  b.kv_blocks = 100;
  b.block_size = 16;
  b.speculative_tokens = 3;
  b.acceptance = 0.5;
  BatchScheduler s(b);
  s.enqueue(7, 10, 100);
  int64_t produced = 0, steps = 0;
  bool done = false;
  while (!done) {
    const StepPlan plan = s.plan();
    ASSERT_EQ(plan.chunks.size(), 1u);
    const PlannedChunk& c = plan.chunks.front();
    if (produced > 0) {
      EXPECT_EQ(c.q_len, 1 + c.drafts);
      EXPECT_EQ(c.drafts, std::min<int64_t>(3, 100 - produced - 1));
      ++steps;
    }
    const StepOutcome out = s.complete(plan);
    ASSERT_EQ(out.produced.size(), out.sampled.size());
    for (const int n : out.produced) {
      EXPECT_GE(n, 1);
      EXPECT_LE(n, 1 + c.drafts);
      produced += n;
    }
    // The KV held is the prompt's and the tokens generated but the newest (rejected drafts dropped).
    if (!out.finished.empty()) {
      done = true;
    } else {
      EXPECT_EQ(s.used_blocks(), blocks_for(10 + produced - 1, 16));
    }
  }
  EXPECT_EQ(produced, 100);
  EXPECT_NEAR(static_cast<double>(steps), 99 / 1.875, 2.0);
  EXPECT_EQ(s.used_blocks(), 0);
}

TEST(ServingBatching, SwapPreemptionKeepsTheKvAndPaysItsCopiesOverPcie) {
  FleetConfig c = queue(1, 50, 300);
  PoolConfig& pool = c.pools[0];
  pool.batching.max_sequences = 64;
  pool.batching.token_budget = 512;
  pool.batching.kv_blocks = 60;
  pool.swap_bandwidth = gigabytes_per_second(1);
  c.traffic.prompt = LengthDistribution{LengthDistribution::Kind::kUniform, 1, 50, 300, 1, 0};
  c.traffic.output = LengthDistribution{LengthDistribution::Kind::kUniform, 1, 50, 300, 1, 0};
  auto run = [&](PreemptionMode mode) {
    pool.batching.preemption = mode;
    return simulate_fleet(c, [](const PoolConfig&, int) { return std::make_unique<ConstantTimer>(Time::ms(5)); });
  };
  const FleetResult recompute = run(PreemptionMode::kRecompute);
  const FleetResult swap = run(PreemptionMode::kSwap);
  for (const RequestRecord& rec : swap.requests) {
    ASSERT_TRUE(rec.completed) << rec.id;
    EXPECT_EQ(rec.tokens_out, rec.output_tokens) << rec.id;
  }
  EXPECT_EQ(recompute.swaps, 0);
  ASSERT_GT(swap.swaps, 0);
  // 4 GiB of host space holds every block here, so every preemption swaps.
  EXPECT_EQ(swap.swaps, swap.preemptions);
  // A block of Llama-3 8B on one GPU (TP 1): 16 tokens × 32 layers × 8 KV heads × 2 × 128 × 2 B
  // = 2 MiB; at 1 GB/s every block copied costs 2.097 ms, on the step that copies it.
  const double block = 16.0 * 32 * 8 * 2 * 128 * 2;
  EXPECT_EQ(std::fmod(swap.swap_bytes.value(), block), 0.0);
  EXPECT_NEAR(swap.swap_time.seconds(), swap.swap_bytes.value() / 1e9, 1e-9);
  const PoolStats& s = swap.pools[0];
  EXPECT_NEAR(s.busy_fraction * swap.duration.seconds(),
              static_cast<double>(s.steps) * 0.005 + swap.swap_time.seconds(), 1e-6);
  // Swapped sequences keep their tokens: fewer are computed than when they are recomputed.
  const auto computed = [](const FleetResult& r) { return r.pools[0].mean_tokens * static_cast<double>(r.pools[0].steps); };
  EXPECT_LT(computed(swap), computed(recompute));
  // Without room on the host it falls back to recompute.
  pool.swap_space = Bytes(block * 2);
  const FleetResult small = run(PreemptionMode::kSwap);
  EXPECT_LT(small.swaps, small.preemptions);
  for (const RequestRecord& rec : small.requests) ASSERT_TRUE(rec.completed) << rec.id;
}

TEST(ServingBatching, APromptChunkedOverStepsQueuesOnlyUntilItsFirstChunk) {
  // Two 1,000-token prompts at t = 0, a 512-token budget, 10 ms steps: step 1 gives request 0
  // 512 tokens; step 2 its last 488 and request 1 the 24 left; step 3 request 0's decode and
  // 511 of request 1; step 4 request 1's last 465.
  FleetConfig c = queue(1, 1, 2);
  c.pools[0].batching.max_sequences = 8;
  c.pools[0].batching.token_budget = 512;
  auto trace = std::make_shared<std::vector<Request>>();
  for (int i = 0; i < 2; ++i) {
    Request r;
    r.id = i;
    r.prompt_tokens = 1000;
    r.output_tokens = 2;
    trace->push_back(r);
  }
  c.replay = trace;
  const FleetResult r = simulate_fleet(c, [](const PoolConfig&, int) { return std::make_unique<ConstantTimer>(Time::ms(10)); });
  EXPECT_EQ(r.requests[0].queueing(), Time::zero());
  EXPECT_EQ(r.requests[0].ttft(), Time::ms(20));   // two chunks
  EXPECT_EQ(r.requests[1].queueing(), Time::ms(10));  // 24 tokens of its prompt ride in step 2
  EXPECT_EQ(r.requests[1].ttft(), Time::ms(40));
}

// A step of latency L whose first stage frees after L/2, as two balanced pipeline stages.
class TwoStageTimer final : public StepTimer {
 public:
  explicit TwoStageTimer(Time latency) : latency_(latency) {}
  Time step_time(const RaggedBatch&) override { return latency_; }
  StepTiming timing(const RaggedBatch&) override { return {latency_, Time::from_seconds(latency_.seconds() / 2)}; }

 private:
  Time latency_;
};

std::shared_ptr<std::vector<Request>> burst(int n, int64_t prompt, int64_t output) {
  auto trace = std::make_shared<std::vector<Request>>();
  for (int i = 0; i < n; ++i) {
    Request r;
    r.id = i;
    r.prompt_tokens = prompt;
    r.output_tokens = output;
    trace->push_back(r);
  }
  return trace;
}

TEST(ServingPipeline, PipelineStagesKeepStepsInFlight) {
  // 100 one-token requests at t = 0, one per step (a 1-token budget; two may run, one in each
  // step in flight), 10 ms steps whose first stage frees after 5 ms. With pp = 2 a step starts every 5 ms, two in flight: step j runs
  // [5j, 5j + 10] ms and the last ends at 5·99 + 10 = 505 ms. With pp = 1 the same timer runs
  // one step at a time: 100 · 10 = 1000 ms.
  FleetConfig c = queue(1, 1, 100);
  c.replay = burst(100, 1, 1);
  c.pools[0].batching.max_sequences = 2;
  c.pools[0].batching.token_budget = 1;
  auto run = [&](int pp) {
    c.pools[0].shape.pp = pp;
    return simulate_fleet(c, [](const PoolConfig&, int) { return std::make_unique<TwoStageTimer>(Time::ms(10)); });
  };
  const FleetResult two = run(2);
  EXPECT_EQ(two.duration, Time::ms(505));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(two.requests[static_cast<size_t>(i)].completion, Time::ms(5 * i + 10)) << i;
  EXPECT_EQ(run(1).duration, Time::ms(1000));
  // Four stages' worth of depth but the same 5 ms interval: still one start per 5 ms.
  EXPECT_EQ(run(4).duration, Time::ms(505));
}

TEST(ServingPipeline, StepsInFlightAreNeverPreemptedAndNothingIsLost) {
  // A cache of ~3 long requests, two steps in flight: preemption may only take sequences that
  // are not in a running step, and every request still completes once with all its tokens.
  FleetConfig c = queue(1, 50, 300);
  PoolConfig& pool = c.pools[0];
  pool.shape.pp = 2;
  pool.batching.max_sequences = 64;
  pool.batching.token_budget = 512;
  pool.batching.kv_blocks = 60;
  c.traffic.prompt = LengthDistribution{LengthDistribution::Kind::kUniform, 1, 50, 300, 1, 0};
  c.traffic.output = LengthDistribution{LengthDistribution::Kind::kUniform, 1, 50, 300, 1, 0};
  for (const BatchingPolicy policy : {BatchingPolicy::kChunked, BatchingPolicy::kPrefillFirst, BatchingPolicy::kStatic}) {
    pool.batching.policy = policy;
    const FleetResult r =
        simulate_fleet(c, [](const PoolConfig&, int) { return std::make_unique<TwoStageTimer>(Time::ms(10)); });
    for (const RequestRecord& rec : r.requests) {
      ASSERT_TRUE(rec.completed) << to_string(policy) << " request " << rec.id;
      EXPECT_EQ(rec.tokens_out, rec.output_tokens) << to_string(policy) << " request " << rec.id;
    }
    if (policy != BatchingPolicy::kStatic) {
      EXPECT_GT(r.preemptions, 0) << to_string(policy);
    }
  }
}

TEST(ServingBatching, ARequestThatCanNeverFitIsRejected) {
  FleetConfig c = queue(1, 10, 3);
  c.pools[0].batching.kv_blocks = 10;  // 160 tokens
  c.traffic.prompt = LengthDistribution{LengthDistribution::Kind::kFixed, 200, 1, 1, 1, 0};
  const FleetResult r = simulate_fleet(c, [](const PoolConfig&, int) { return std::make_unique<ConstantTimer>(Time::ms(1)); });
  for (const RequestRecord& rec : r.requests) {
    EXPECT_TRUE(rec.rejected);
    EXPECT_FALSE(rec.completed);
    EXPECT_EQ(rec.rejection, "200 + 1 tokens need 13 KV blocks; the instance has 10");
  }
}

TEST(ServingMemory, KvBlocksFromMemoryByHand) {
  // H100: 80 GiB; reserve 10%: 72 GiB usable = 77,309,411,328 B.
  const double usable = 0.9 * 80.0 * 1024 * 1024 * 1024;
  const GpuSpec h100 = shared_dgx_h100()->gpu_spec_of(shared_dgx_h100()->gpus().front());
  // Llama-3 8B, TP 1: 8,030,261,248 parameters, 16,060,522,496 B of bf16 weights; a block of
  // 16 tokens keeps 32 layers × K,V × 8 heads × 128 × 2 B × 16 = 2,097,152 B.
  const ModelConfig m8 = bundled("llama3-8b");
  ASSERT_EQ(count_parameters(m8).total, 8030261248);
  const KvCapacity c8 = kv_capacity(m8, h100, InstanceShape{1, 1}, 16, 0.10, Bytes(0), 256);
  EXPECT_EQ(c8.block_bytes.value(), 2097152.0);
  EXPECT_EQ(c8.blocks, static_cast<int64_t>(std::floor((usable - 16060522496.0) / 2097152.0)));  // 29,206
  // Llama-3 70B, TP 4: 70,553,706,496 parameters, a quarter of 141,107,412,992 B per GPU; 8 KV
  // heads over 4 ranks: 2 per GPU, so a block is 80 × 2 × 2 × 128 × 2 B × 16 = 1,310,720 B.
  const ModelConfig m70 = bundled("llama3-70b");
  ASSERT_EQ(count_parameters(m70).total, 70553706496);
  const KvCapacity c70 = kv_capacity(m70, h100, InstanceShape{4, 1}, 16, 0.10, Bytes(0), 256);
  EXPECT_EQ(c70.block_bytes.value(), 1310720.0);
  EXPECT_EQ(c70.blocks, static_cast<int64_t>(std::floor((usable - 141107412992.0 / 4) / 1310720.0)));  // 32,069
  // At TP 1 the 70B weights alone exceed the GPU: refused, with the numbers.
  try {
    kv_capacity(m70, h100, InstanceShape{1, 1}, 16, 0.10, Bytes(0), 256);
    FAIL() << "70B on one H100 must not fit";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
  }
}

TEST(ServingMemory, Fp8WeightsAndCacheHalveWhatTheyHold) {
  const double usable = 0.9 * 80.0 * 1024 * 1024 * 1024;
  const GpuSpec h100 = shared_dgx_h100()->gpu_spec_of(shared_dgx_h100()->gpus().front());
  // Llama-3 70B, TP 4, fp8 weights: the layers' matrices at 1 B (80 × (2·8192² + 2·8192·1024 +
  // 3·8192·28672) = 68,451,041,280), their norm gains (80 × 16,384), the embedding and head
  // (2 × 128256 × 8192) and the final norm at 2 B; an fp8 cache halves a block to 655,360 B.
  const ModelConfig m70 = bundled("llama3-70b");
  const double matrices = 80.0 * (2 * 8192.0 * 8192 + 2 * 8192.0 * 1024 + 3 * 8192.0 * 28672);
  const double others = 80.0 * 16384 + 2 * 128256.0 * 8192 + 8192;
  EXPECT_DOUBLE_EQ(matrices + others, 70553706496.0);
  const double weights = (matrices + 2 * others) / 4;
  EXPECT_DOUBLE_EQ(stage_weight_bytes(m70, InstanceShape{4, 1}, DType::kFp8).front().value(), weights);
  const KvCapacity c = kv_capacity(m70, h100, InstanceShape{4, 1}, 16, 0.10, Bytes(0), 256,
                                   ServingPrecision{DType::kFp8, DType::kFp8});
  EXPECT_EQ(c.block_bytes.value(), 655360.0);
  EXPECT_EQ(c.blocks, static_cast<int64_t>(std::floor((usable - weights) / 655360.0)));
  // DeepSeek-V3's fp8 checkpoint keeps its router in bf16 with the norms: per stage the same
  // split, layer by layer (pp 2), adds up to the whole model's.
  const ModelConfig ds = bundled("deepseek-v3");
  const std::vector<Bytes> stages = stage_weight_bytes(ds, InstanceShape{8, 2}, DType::kFp8);
  const ParameterCounts p = count_parameters(ds);
  const double ds_matrices = static_cast<double>(p.attention + p.dense_mlp + p.shared_experts + p.routed_experts);
  const double ds_others = static_cast<double>(p.total) - ds_matrices;
  EXPECT_NEAR((stages[0] + stages[1]).value() * 8, ds_matrices + 2 * ds_others, 1e-6 * ds_matrices);
}

TEST(ServingFleet, TheCostModelRunsAFleetAndRerunsIdentically) {
  FleetConfig c;
  c.model = bundled("llama3-8b");
  c.topology = shared_dgx_h100();
  PoolConfig pool;
  pool.count = 2;
  pool.shape = InstanceShape{2, 1};
  c.pools = {pool};
  c.router = RoutingPolicy::kLeastTokens;
  c.traffic.rate_per_s = 20;
  c.traffic.requests = 400;
  c.traffic.prompt = LengthDistribution{LengthDistribution::Kind::kLognormal, 1, 16, 8192, 1500, 0.8};
  c.traffic.output = LengthDistribution{LengthDistribution::Kind::kLognormal, 1, 1, 2048, 250, 0.8};
  const FleetResult a = simulate_fleet(c);
  const FleetResult b = simulate_fleet(c);
  ASSERT_EQ(a.requests.size(), 400u);
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_TRUE(a.requests[i].completed);
    EXPECT_EQ(a.requests[i].completion, b.requests[i].completion);
    EXPECT_EQ(a.requests[i].first_token, b.requests[i].first_token);
    EXPECT_GT(a.requests[i].ttft(), Time::zero());
  }
  EXPECT_EQ(a.itl_histogram, b.itl_histogram);
  ASSERT_EQ(a.pools.size(), 1u);
  EXPECT_GT(a.pools[0].kv_blocks, 1000);
  EXPECT_GT(a.pools[0].busy_fraction, 0.0);
  EXPECT_LE(a.pools[0].busy_fraction, 1.0);
  EXPECT_NEAR(a.mean_in_system / a.arrival_rate_times_mean_e2e, 1.0, 1e-9);
  // A fleet larger than the topology is refused, naming the numbers.
  c.pools[0].count = 5;
  EXPECT_THROW(simulate_fleet(c), std::invalid_argument);
}

TEST(ServingSearch, EveryShapeFillsTheGpusAndTheRankingIsTheCapacitysWhateverTheThreads) {
  // Llama-3 8B on one DGX H100: tp and pp powers of two whose product divides 8, 10 shapes; a
  // MoE model adds its experts spread over the TP group, and data-parallel attention.
  const std::vector<InstanceShape> dense = candidate_shapes(bundled("llama3-8b"), 8);
  EXPECT_EQ(dense.size(), 10u);
  for (const InstanceShape& s : dense) EXPECT_EQ(8 % s.gpus(), 0);
  const std::vector<InstanceShape> moe = candidate_shapes(bundled("mixtral-8x7b"), 8);
  EXPECT_GT(moe.size(), dense.size());
  bool spread = false, data_parallel = false;
  for (const InstanceShape& s : moe) {
    spread = spread || (s.dp == 1 && s.ep == s.tp && s.tp > 1);
    data_parallel = data_parallel || (s.dp > 1 && s.ep == s.tp * s.dp && s.pp == 1);
  }
  EXPECT_TRUE(spread && data_parallel);
  FleetConfig c;
  c.model = bundled("llama3-8b");
  c.topology = shared_dgx_h100();
  PoolConfig pool;
  pool.batching.max_sequences = 64;
  c.pools = {pool};
  c.traffic.rate_per_s = 20;
  c.traffic.requests = 120;
  c.slo_ttft = Time::ms(1500);
  c.slo_tpot = Time::ms(60);
  ShapeSearchOptions serial, parallel, every;
  parallel.threads = 2;
  every.threads = 2;
  every.prune = false;
  const ShapeSearch one = search_shapes(c, serial), two = search_shapes(c, parallel), all = search_shapes(c, every);
  EXPECT_TRUE(one.by_capacity);
  EXPECT_EQ(one.enumerated, one.rejected_by_rule + one.rejected_by_memory + one.pruned_by_bound + one.ranked.size());
  EXPECT_EQ(all.pruned_by_bound, 0u);
  // Pruning by the rate bound keeps the best of simulating every shape, and no capacity beats its
  // bound by the margin.
  ASSERT_FALSE(all.ranked.empty());
  EXPECT_EQ(one.ranked.front().capacity, all.ranked.front().capacity);
  EXPECT_EQ(describe_shape(one.ranked.front().shape), describe_shape(all.ranked.front().shape));
  for (const ShapeRun& r : all.ranked) EXPECT_LE(r.capacity, r.bound * (1 + kBoundMargin)) << describe_shape(r.shape);
  ASSERT_EQ(one.ranked.size(), two.ranked.size());
  for (size_t i = 0; i < one.ranked.size(); ++i) {
    EXPECT_EQ(one.ranked[i].shape.tp, two.ranked[i].shape.tp);
    EXPECT_EQ(one.ranked[i].shape.pp, two.ranked[i].shape.pp);
    EXPECT_EQ(one.ranked[i].capacity, two.ranked[i].capacity);
    if (i > 0) {
      EXPECT_GE(one.ranked[i - 1].capacity, one.ranked[i].capacity);
    }
    EXPECT_EQ(one.ranked[i].instances * one.ranked[i].shape.gpus(), 8);
    // At its capacity a shape meets the SLO for 90% of the requests.
    if (one.ranked[i].capacity > 0) {
      EXPECT_GE(one.ranked[i].summary.slo_attainment, 0.9);
    }
  }
  // The best is what capacity_at_slo says of it alone.
  FleetConfig best = c;
  best.pools[0].shape = one.ranked[0].shape;
  best.pools[0].count = one.ranked[0].instances;
  EXPECT_EQ(capacity_at_slo(best, 0.9).first, one.ranked[0].capacity);
  // A disaggregated fleet is not re-shaped.
  FleetConfig pd = c;
  pd.pools = {pool, pool};
  pd.pools[0].role = PoolRole::kPrefill;
  pd.pools[1].role = PoolRole::kDecode;
  EXPECT_THROW(search_shapes(pd), std::invalid_argument);
}

TEST(ServingSweep, RatesAndTheHighestRateMeetingTheSlos) {
  EXPECT_EQ(parse_rates("1:64:x2"), (std::vector<double>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(parse_rates("10:30:+10"), (std::vector<double>{10, 20, 30}));
  EXPECT_EQ(parse_rates("0.5,3"), (std::vector<double>{0.5, 3}));
  for (const char* bad : {"", "1:64", "1:64:x1", "8:4:x2", "0:4:x2", "a,b", "1:64:*2"}) {
    EXPECT_THROW(parse_rates(bad), std::invalid_argument) << bad;
  }
  // One exponential server of mean 1 ms behind a 5 ms TTFT objective: the wait alone is
  // ρ/(μ − λ), past 4 ms at ρ = 0.8, so attainment falls with the load.
  FleetConfig c = queue(1, 1, 20000);
  c.slo_ttft = Time::ms(5);
  std::vector<RatePoint> points;
  for (const double rate : {200.0, 500.0, 900.0}) {
    c.traffic.rate_per_s = rate;
    points.push_back(RatePoint{rate, summarize(c, simulate_fleet(c, exponential(1e-3))), std::nullopt, 0.0, std::nullopt});
  }
  EXPECT_GT(points[0].summary.slo_attainment, points[1].summary.slo_attainment);
  EXPECT_GT(points[1].summary.slo_attainment, points[2].summary.slo_attainment);
  EXPECT_EQ(highest_rate_meeting(points, points[1].summary.slo_attainment), 500.0);
  EXPECT_EQ(highest_rate_meeting(points, 1.01), 0.0);
}

}  // namespace
}  // namespace parallax
