// Prefix caching (serving/prefix_cache.h inside the batch scheduler) and prefix-aware routing
// on the real Mooncake conversation trace (tests/data/serving-traces): with an unbounded cache
// the hit ratio is the trace's own block reuse, and with bounded caches on four instances the
// cache-aware routers hit more than round-robin.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <unordered_set>

#include "model/model_loader.h"
#include "serving/fleet.h"
#include "serving/fleet_report.h"
#include "serving/prefix_cache.h"
#include "serving/prefix_index.h"
#include "serving/trace_reader.h"
#include "test_support.h"
#include "topology/topology_loader.h"

namespace parallax {
namespace {

class MillisecondTimer final : public StepTimer {
 public:
  Time step_time(const RaggedBatch&) override { return Time::ms(1); }
};

std::shared_ptr<const std::vector<Request>> mooncake(size_t requests) {
  Trace t = read_trace(test::source_path("tests/data/serving-traces/mooncake-conversation.jsonl"));
  t.requests.resize(requests);
  return std::make_shared<const std::vector<Request>>(std::move(t.requests));
}

FleetConfig fleet(std::shared_ptr<const std::vector<Request>> trace, int instances, int64_t kv_blocks) {
  FleetConfig c;
  c.model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  c.topology = std::make_shared<const Topology>(load_topology(test::source_path("topologies/dgx-h100.json")));
  PoolConfig pool;
  pool.count = instances;
  pool.batching.kv_blocks = kv_blocks;
  pool.batching.prefix_caching = true;
  pool.batching.token_budget = 1 << 20;
  c.pools = {pool};
  c.replay = std::move(trace);
  return c;
}

FleetSummary run(const FleetConfig& c) {
  return summarize(c, simulate_fleet(c, [](const PoolConfig&, int) { return std::make_unique<MillisecondTimer>(); }));
}

// The reuse in a trace itself: hash ids seen in an earlier request, over all hash ids.
double own_reuse(const std::vector<Request>& trace) {
  std::unordered_set<uint64_t> seen;
  int64_t reused = 0, total = 0;
  for (const Request& r : trace) {
    for (uint64_t id : r.prefix_blocks) reused += static_cast<int64_t>(seen.count(id));
    total += static_cast<int64_t>(r.prefix_blocks.size());
    seen.insert(r.prefix_blocks.begin(), r.prefix_blocks.end());
  }
  return static_cast<double>(reused) / static_cast<double>(total);
}

TEST(ServingPrefixCache, AnUnboundedCacheHitsTheTracesOwnBlockReuse) {
  const auto trace = mooncake(2000);
  // One sequence at a time, so every earlier prompt is in the cache when the next is admitted.
  FleetConfig c = fleet(trace, 1, int64_t{1} << 40);
  c.pools[0].batching.max_sequences = 1;
  const FleetSummary s = run(c);
  EXPECT_EQ(s.completed, 2000);
  EXPECT_DOUBLE_EQ(s.prefix_block_hit_ratio, own_reuse(*trace));
  EXPECT_GT(s.prefix_block_hit_ratio, 0.2);  // the conversation trace reuses a good third of its blocks
  EXPECT_GT(s.prefix_token_hit_ratio, 0.2);
  // Without prefix caching nothing is skipped and the same requests complete.
  c.pools[0].batching.prefix_caching = false;
  const FleetSummary off = run(c);
  EXPECT_EQ(off.completed, 2000);
  EXPECT_FALSE(off.has_prefix_blocks);
}

TEST(ServingPrefixCache, AHostTierGivesBackWhatASmallGpuCacheEvicts) {
  const auto trace = mooncake(2000);
  // 10,000 blocks (160k tokens, about a dozen of the trace's prompts) on the GPU: most of what
  // the trace reuses has been evicted by the time it comes back.
  FleetConfig c = fleet(trace, 1, 10000);
  c.pools[0].batching.max_sequences = 1;
  const FleetSummary gpu_only = run(c);
  EXPECT_LT(gpu_only.prefix_block_hit_ratio, own_reuse(*trace));
  // An unbounded host tier keeps every evicted block: the hit ratio is the trace's own reuse
  // again, and every block found there was copied back over PCIe on its step.
  c.pools[0].host_cache = Bytes(1e15);
  const FleetResult r = simulate_fleet(c, [](const PoolConfig&, int) { return std::make_unique<MillisecondTimer>(); });
  const FleetSummary tiered = summarize(c, r);
  EXPECT_DOUBLE_EQ(tiered.prefix_block_hit_ratio, own_reuse(*trace));
  EXPECT_GT(tiered.prefix_host_hit_ratio, 0.5 * (tiered.prefix_block_hit_ratio - gpu_only.prefix_block_hit_ratio));
  EXPECT_GT(tiered.prefix_token_hit_ratio, gpu_only.prefix_token_hit_ratio);
  // Llama-3 8B at TP 1: a KV block is 16 tokens × 32 layers × 2 × 8 KV heads × 128 × 2 B =
  // 2 MiB, a hashed Mooncake block of 512 tokens 32 of them, copied at 85% of the DGX H100's
  // 64 GB/s PCIe link.
  int64_t host_blocks = 0;
  for (const RequestRecord& rec : r.requests) host_blocks += rec.prefix_host_blocks;
  EXPECT_GT(host_blocks, 0);
  EXPECT_DOUBLE_EQ(r.host_cache_bytes.value(), static_cast<double>(host_blocks) * 32 * 2 * 1024 * 1024);
  // (each copy's time in whole picoseconds)
  EXPECT_NEAR(r.host_cache_time.seconds(), r.host_cache_bytes.value() / (0.85 * 64e9), 1e-6 * r.host_cache_time.seconds());
  // A host tier of 20,000 blocks (40 GiB) holds less of it.
  c.pools[0].host_cache = Bytes(20000.0 * 2 * 1024 * 1024);
  const FleetSummary bounded = run(c);
  EXPECT_GT(bounded.prefix_block_hit_ratio, gpu_only.prefix_block_hit_ratio);
  EXPECT_LT(bounded.prefix_block_hit_ratio, tiered.prefix_block_hit_ratio);
}

TEST(ServingPrefixCache, TheHostTierTakesEvictedEntriesLeastRecentlyUsedFirst) {
  PrefixCache cache(3);
  cache.insert_pinned(1, 16, 1);
  cache.insert_pinned(2, 32, 2);
  cache.unpin(1);
  cache.unpin(2);
  EXPECT_EQ(cache.evict(3), 3);  // both to the host: 3 blocks of its 3
  EXPECT_EQ(cache.kv_blocks(), 0);
  EXPECT_EQ(cache.host_kv_blocks(), 3);
  EXPECT_EQ(cache.host_match({1, 2, 9}, 0), 2);
  EXPECT_EQ(cache.tokens(2), 32);
  // Copied back, an entry is on the GPU again, pinned, and gone from the host.
  EXPECT_EQ(cache.promote(1), 1);
  EXPECT_TRUE(cache.contains(1));
  EXPECT_FALSE(cache.in_host(1));
  EXPECT_EQ(cache.host_kv_blocks(), 2);
  // Evicted again with a third entry of 2 blocks: 1 (the older) goes first and fits beside 2
  // (2 + 1 = 3); then 3 needs 2 blocks of a full tier, and 2, the least recently used there,
  // is dropped for it.
  cache.unpin(1);
  cache.insert_pinned(3, 32, 2);
  cache.unpin(3);
  EXPECT_EQ(cache.evict(2), 3);
  EXPECT_TRUE(cache.in_host(1));
  EXPECT_TRUE(cache.in_host(3));
  EXPECT_FALSE(cache.in_host(2));
  EXPECT_EQ(cache.host_kv_blocks(), 3);
  // Recomputed on the GPU, an entry's host copy is dropped.
  cache.insert_pinned(3, 32, 2);
  EXPECT_FALSE(cache.in_host(3));
  // Without a host tier eviction drops entries, as before.
  PrefixCache plain;
  plain.insert_pinned(1, 16, 1);
  plain.unpin(1);
  plain.evict(1);
  EXPECT_FALSE(plain.in_host(1));
}

TEST(ServingPrefixCache, CacheAwareRoutersHitMoreThanRoundRobin) {
  // Four instances of 40,000 blocks (640k tokens, some 50 of the trace's ~12k-token prompts).
  FleetConfig c = fleet(mooncake(3000), 4, 40000);
  c.router = RoutingPolicy::kRoundRobin;
  const double rr = run(c).prefix_block_hit_ratio;
  for (const RoutingPolicy p : {RoutingPolicy::kCacheAware, RoutingPolicy::kKvCost, RoutingPolicy::kWeighted}) {
    c.router = p;
    const FleetSummary s = run(c);
    std::printf("%s: block hit ratio %.4f (round_robin %.4f)\n", to_string(p), s.prefix_block_hit_ratio, rr);
    EXPECT_EQ(s.completed, 3000) << to_string(p);
    // Dynamo's cost weighs the KV blocks in flight as much as the blocks saved, so with
    // decode-heavy load it balances more and keeps less affinity than the other two.
    EXPECT_GT(s.prefix_block_hit_ratio, rr + (p == RoutingPolicy::kKvCost ? 0.02 : 0.05))
        << to_string(p) << " against round-robin's " << rr;
  }
}

TEST(ServingPrefixIndex, ABoundedIndexForgetsPromptTailsFirst) {
  PrefixIndex index(4);
  index.insert({1, 2, 3});  // a prompt of blocks 1, 2, 3
  index.insert({1, 4});     // one sharing block 1: 1 becomes the most recent
  EXPECT_EQ(index.size(), 4u);
  index.insert({5});        // over capacity: the oldest tail, block 3, goes
  EXPECT_FALSE(index.contains(3));
  for (uint64_t b : {1, 2, 4, 5}) EXPECT_TRUE(index.contains(b)) << b;
  PrefixIndex all;
  for (uint64_t b = 0; b < 10000; ++b) all.insert({b});
  EXPECT_EQ(all.size(), 10000u);
}

TEST(ServingPrefixIndex, AForgetfulRouterIndexLosesAffinity) {
  // The cache-aware router of the test above with its index cut to 64 blocks per instance
  // (a few prompts of the trace's ~24 blocks) matches less, so the engines hit less.
  FleetConfig c = fleet(mooncake(3000), 4, 40000);
  c.router = RoutingPolicy::kCacheAware;
  const double full = run(c).prefix_block_hit_ratio;
  c.router_index_blocks = 64;
  const FleetSummary small = run(c);
  EXPECT_EQ(small.completed, 3000);
  EXPECT_LT(small.prefix_block_hit_ratio, full);
  c.router_index_blocks = int64_t{1} << 30;  // bounded but never full: the same as unbounded
  EXPECT_DOUBLE_EQ(run(c).prefix_block_hit_ratio, full);
}

TEST(ServingPrefixCache, APromptThatCouldOnlyFitWithoutTheCacheIsRejectedNotStuck) {
  // 20 prompt tokens (one hashed block of 32, partial) and 13 outputs in 2 blocks of 16: without
  // a cache ⌈32/16⌉ = 2 blocks hold its whole life; with one, the prompt's block goes to the
  // cache (⌈20/16⌉ = 2) and the outputs need one more, so it can never run there.
  auto trace = std::make_shared<std::vector<Request>>();
  Request r;
  r.prompt_tokens = 20;
  r.output_tokens = 13;
  r.prefix_blocks = {7};
  r.prefix_block_tokens = 32;
  trace->push_back(r);
  FleetConfig c = fleet(trace, 1, 2);
  const FleetResult result = simulate_fleet(c, [](const PoolConfig&, int) { return std::make_unique<MillisecondTimer>(); });
  EXPECT_TRUE(result.requests[0].rejected);
  EXPECT_NE(result.requests[0].rejection.find("need 3 KV blocks"), std::string::npos) << result.requests[0].rejection;
  c.pools[0].batching.prefix_caching = false;
  EXPECT_TRUE(simulate_fleet(c, [](const PoolConfig&, int) { return std::make_unique<MillisecondTimer>(); }).requests[0].completed);
}

}  // namespace
}  // namespace parallax
