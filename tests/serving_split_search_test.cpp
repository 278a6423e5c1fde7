// The prefill/decode split search (serving/fleet_split_search.h): the traffic's means and each
// side's rate bound against their closed forms, and the search against an exhaustive one.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "serving/fleet_search.h"
#include "serving/fleet_split_search.h"
#include "serving/step_model.h"
#include "serving_test_support.h"
#include "test_support.h"
#include "topology/topology_loader.h"

namespace parallax {
namespace {

using test::bundled;
using test::shared_dgx_h100;

TEST(ServingSplitSearch, TrafficMeansWeightTheContextByDecodeSteps) {
  FleetConfig c;
  auto trace = std::make_shared<std::vector<Request>>(2);
  (*trace)[0].prompt_tokens = 100, (*trace)[0].output_tokens = 11;
  (*trace)[1].prompt_tokens = 300, (*trace)[1].output_tokens = 1;
  c.replay = trace;
  const TrafficMeans m = traffic_means(c);
  EXPECT_DOUBLE_EQ(m.prompt, 200);
  EXPECT_DOUBLE_EQ(m.decode, 5);
  // Only the first decodes: 10 steps at contexts 100 … 110, on average P + D/2.
  EXPECT_DOUBLE_EQ(m.decode_context, (100.0 * 10 + 10.0 * 10 / 2) / 10);
  // A synthetic stream of fixed lengths.
  FleetConfig fixed;
  fixed.traffic.requests = 50;
  fixed.traffic.prompt.value = 1000;
  fixed.traffic.output.value = 101;
  const TrafficMeans f = traffic_means(fixed);
  EXPECT_DOUBLE_EQ(f.prompt, 1000);
  EXPECT_DOUBLE_EQ(f.decode, 100);
  EXPECT_DOUBLE_EQ(f.decode_context, 1050);
}

TEST(ServingSplitSearch, RateBoundsAreFullBatchesOverTheirStepTime) {
  const auto topology = shared_dgx_h100();
  const StepModel model(bundled("llama3-8b"), *topology, InstanceShape{2, 1});
  const TrafficMeans means{1000, 100, 1050};
  BatchingConfig b;
  b.token_budget = 4096;
  b.max_sequences = 256;
  // Prefill: four whole prompts fill the budget.
  RaggedBatch prompts;
  prompts.sequences.assign(4, SequenceChunk{1000, 1000, true, 0});
  EXPECT_DOUBLE_EQ(prefill_rate_bound(model, b, means), 4000.0 / model.step(prompts).total.seconds() / 1000);
  // Decode, bound by the KV blocks: ten sequences of ⌈1051/16⌉ = 66 blocks.
  const auto decode_step = [&](int n) {
    RaggedBatch d;
    d.sequences.assign(static_cast<size_t>(n), SequenceChunk{1, 1051, true, 0});
    return model.step(d).total.seconds();
  };
  EXPECT_DOUBLE_EQ(decode_rate_bound(model, b, 10 * 66 + 65, means, Time::zero()), 10 / decode_step(10) / 100);
  // Bound by the TPOT objective: the largest batch whose step meets it.
  const Time slo = Time::from_seconds(0.5 * (decode_step(5) + decode_step(6)));
  EXPECT_DOUBLE_EQ(decode_rate_bound(model, b, 100000, means, slo), 5 / decode_step(5) / 100);
  // One sequence alone misses it: nothing meets it.
  EXPECT_EQ(decode_rate_bound(model, b, 100000, means, Time::from_seconds(0.5 * decode_step(1))), 0.0);
  // Speculation: each sequence verifies 2 drafts (3 tokens) and yields 1 + a + a² tokens a step.
  b.speculative_tokens = 2;
  b.acceptance = 0.5;
  RaggedBatch verify;
  verify.sequences.assign(10, SequenceChunk{3, 1053, true, 2});
  EXPECT_DOUBLE_EQ(decode_rate_bound(model, b, 10 * 66 + 65, means, Time::zero()),
                   10 * 1.75 / model.step(verify).total.seconds() / 100);
}

TEST(ServingSplitSearch, BoundsAreInTheLoadsUnitsAndCountTheRanksShares) {
  // A replayed trace's loads are speed-ups: one unit is the trace's own rate, 3 requests over 2 s.
  FleetConfig c;
  auto trace = std::make_shared<std::vector<Request>>(3);
  for (size_t i = 0; i < 3; ++i) (*trace)[i].arrival = Time::from_seconds(static_cast<double>(i));
  c.replay = trace;
  EXPECT_DOUBLE_EQ(requests_per_load_unit(c), 1.0);
  (*trace)[2].arrival = Time::from_seconds(4);
  EXPECT_DOUBLE_EQ(requests_per_load_unit(c), 0.5);
  EXPECT_DOUBLE_EQ(requests_per_load_unit(FleetConfig{}), 1.0);
  // 32 data-parallel ranks of a pool of 16 sequences and 1,000 tokens: each rank takes one
  // sequence and 32 tokens (rounded up), 32 and 1,024 in all.
  PoolConfig pool;
  pool.shape = InstanceShape{1, 1, 32, 32};
  pool.batching.max_sequences = 16;
  pool.batching.token_budget = 1000;
  const BatchingConfig b = instance_batching(pool);
  EXPECT_EQ(b.max_sequences, 32);
  EXPECT_EQ(b.token_budget, 1024);
  EXPECT_EQ(b.token_budget / 32, 32);  // a rank's budget, which caps a prompt's chunk
}

FleetConfig split_fleet() {
  FleetConfig c;
  c.model = bundled("llama3-8b");
  TopologyLoadOptions half_node(1);
  half_node.gpus_per_node = 4;
  c.topology = std::make_shared<const Topology>(load_topology(test::source_path("topologies/dgx-h100.json"), half_node));
  PoolConfig prefill, decode;
  prefill.name = "prefill";
  prefill.role = PoolRole::kPrefill;
  decode.name = "decode";
  decode.role = PoolRole::kDecode;
  decode.batching.max_sequences = 64;
  c.pools = {prefill, decode};
  c.traffic.rate_per_s = 10;
  c.traffic.requests = 80;
  c.traffic.prompt.value = 2000;
  c.traffic.output.value = 100;
  c.slo_ttft = Time::ms(1000);
  c.slo_tpot = Time::ms(30);
  return c;
}

TEST(ServingSplitSearch, PruningKeepsTheExhaustiveBestAndTheCountsAddUp) {
  const FleetConfig c = split_fleet();
  const SplitSearch all = search_splits(c, 2, 0.9, false), pruned = search_splits(c, 1, 0.9, true),
                    pruned2 = search_splits(c, 2, 0.9, true);
  ASSERT_TRUE(all.by_capacity);
  // 4 GPUs: tp · pp of 1, 2 or 4 dividing them, six shapes a pool (tp 1 · pp 1 fits llama3-8b).
  EXPECT_EQ(all.prefill_shapes, 6u);
  EXPECT_EQ(all.pruned_by_bound, 0u);
  for (const SplitSearch* s : {&all, &pruned}) {
    EXPECT_EQ(s->splits, s->unplaceable + s->pruned_by_bound + s->refused + s->ranked.size());
  }
  EXPECT_GT(pruned.pruned_by_bound, 0u);
  ASSERT_FALSE(pruned.ranked.empty());
  EXPECT_EQ(pruned.ranked.front().capacity, all.ranked.front().capacity);
  EXPECT_EQ(describe_shape(pruned.ranked.front().prefill.shape), describe_shape(all.ranked.front().prefill.shape));
  EXPECT_EQ(pruned.ranked.front().decode.instances, all.ranked.front().decode.instances);
  // The threads change nothing.
  ASSERT_EQ(pruned.ranked.size(), pruned2.ranked.size());
  for (size_t i = 0; i < pruned.ranked.size(); ++i) {
    EXPECT_EQ(pruned.ranked[i].capacity, pruned2.ranked[i].capacity);
    EXPECT_EQ(pruned.ranked[i].bound, pruned2.ranked[i].bound);
  }
  for (const SplitRun& r : all.ranked) {
    // Every split fills the four GPUs, and no capacity beats its bound by the pruning margin.
    EXPECT_EQ(r.prefill.instances * r.prefill.shape.gpus() + r.decode.instances * r.decode.shape.gpus(), 4);
    EXPECT_LE(r.capacity, r.bound * (1 + kBoundMargin));
    if (r.capacity > 0) {
      EXPECT_GE(r.summary.slo_attainment, 0.9);
    }
  }
  // The best is what capacity_at_slo says of that fleet alone.
  FleetConfig best = c;
  best.pools[0].shape = all.ranked.front().prefill.shape;
  best.pools[0].count = all.ranked.front().prefill.instances;
  best.pools[1].shape = all.ranked.front().decode.shape;
  best.pools[1].count = all.ranked.front().decode.instances;
  EXPECT_EQ(capacity_at_slo(best, 0.9).first, all.ranked.front().capacity);
  // A colocated fleet is not split.
  FleetConfig colocated = c;
  colocated.pools = {PoolConfig{}};
  EXPECT_THROW(search_splits(colocated, 1), std::invalid_argument);
}

// A colocated pool of `split_fleet`'s traffic on two kinds of node, placed at `first_gpu`.
FleetConfig colocated_on_two_kinds(int first_gpu) {
  FleetConfig c = split_fleet();
  c.topology = test::two_kinds();
  PoolConfig pool;
  pool.name = "llm";
  pool.first_gpu = first_gpu;
  pool.batching.max_sequences = 64;
  c.pools = {pool};
  return c;
}

TEST(ServingSplitSearch, OnNodeGroupsEachPoolRunsOnOneGroup) {
  FleetConfig c = split_fleet();
  c.topology = test::two_kinds();
  c.pools[0].first_gpu = 0;  // as a fleet file on node groups places them; the search re-places
  c.pools[1].first_gpu = 2;
  const SplitSearch all = search_splits(c, 2, 0.9, false), pruned = search_splits(c, 2, 0.9, true);
  ASSERT_TRUE(all.node_groups);
  // Per pool and group: tp 1, tp 2 and pp 2 on two GPUs (llama3-8b fits an A100 40GB whole).
  EXPECT_EQ(all.prefill_shapes, 6u);
  EXPECT_EQ(all.rejected_by_memory + all.rejected_by_rule, 0u);
  // On two groups each shape fills its group (3 × 3 pairs, twice); on one, only tp 1 + tp 1.
  EXPECT_EQ(all.splits, 2u * 9u + 2u);
  for (const SplitSearch* s : {&all, &pruned}) {
    EXPECT_EQ(s->splits, s->unplaceable + s->pruned_by_bound + s->refused + s->ranked.size());
  }
  EXPECT_EQ(all.unplaceable + all.refused, 0u);
  std::set<std::pair<std::string, std::string>> pairs;
  for (const SplitRun& r : all.ranked) {
    pairs.insert({r.prefill.group, r.decode.group});
    ASSERT_TRUE(r.prefill.first_gpu && r.decode.first_gpu);
    const auto group_start = [](const std::string& g) { return g == "h100" ? 0 : 2; };
    const int p = r.prefill.instances * r.prefill.shape.gpus(), d = r.decode.instances * r.decode.shape.gpus();
    if (r.prefill.group == r.decode.group) {
      EXPECT_EQ(p + d, 2);
      EXPECT_EQ(*r.prefill.first_gpu, group_start(r.prefill.group));
      EXPECT_EQ(*r.decode.first_gpu, group_start(r.decode.group) + 1);
    } else {
      EXPECT_EQ(p, 2);
      EXPECT_EQ(d, 2);
      EXPECT_EQ(*r.prefill.first_gpu, group_start(r.prefill.group));
      EXPECT_EQ(*r.decode.first_gpu, group_start(r.decode.group));
    }
    EXPECT_LE(r.capacity, r.bound * (1 + kBoundMargin));
  }
  EXPECT_EQ(pairs.size(), 4u);  // both ways round, and each group alone
  // The summary per pair of groups adds up, and the best pair holds the best split.
  ASSERT_EQ(pruned.group_pairs.size(), 4u);
  size_t splits = 0, simulated = 0;
  for (const GroupOutcome& g : pruned.group_pairs) {
    ASSERT_EQ(g.groups.size(), 2u);
    splits += g.candidates;
    simulated += g.simulated;
    EXPECT_EQ(g.candidates, g.groups[0] == g.groups[1] ? 1u : 9u);
    if (g.groups[0] == pruned.ranked.front().prefill.group && g.groups[1] == pruned.ranked.front().decode.group) {
      EXPECT_EQ(g.best, pruned.ranked.front().capacity);
    }
  }
  EXPECT_EQ(splits, pruned.splits - pruned.unplaceable);
  EXPECT_EQ(simulated, pruned.ranked.size());
  ASSERT_FALSE(pruned.ranked.empty());
  EXPECT_EQ(pruned.ranked.front().capacity, all.ranked.front().capacity);
  EXPECT_EQ(pruned.ranked.front().prefill.group, all.ranked.front().prefill.group);
  // The best is what capacity_at_slo says of that fleet placed so.
  const SplitRun& best = all.ranked.front();
  FleetConfig placed = c;
  placed.pools[0].shape = best.prefill.shape;
  placed.pools[0].count = best.prefill.instances;
  placed.pools[0].first_gpu = best.prefill.first_gpu;
  placed.pools[1].shape = best.decode.shape;
  placed.pools[1].count = best.decode.instances;
  placed.pools[1].first_gpu = best.decode.first_gpu;
  EXPECT_EQ(capacity_at_slo(placed, 0.9).first, best.capacity);
  // The fleet written places each pool on its group's node.
  const nlohmann::json original{{"pools", {{{"name", "prefill"}}, {{"name", "decode"}}}}};
  const nlohmann::json out = fleet_with_split(original, c, best);
  EXPECT_EQ(out["pools"][0]["placement"]["node"], *best.prefill.first_gpu / 2);
  EXPECT_EQ(out["pools"][0]["placement"]["gpu"], *best.prefill.first_gpu % 2);
  EXPECT_EQ(out["pools"][1]["placement"]["node"], *best.decode.first_gpu / 2);
}

TEST(ServingShapeSearch, OnNodeGroupsThePoolTriesEachGroup) {
  const FleetConfig c = colocated_on_two_kinds(2);
  ShapeSearchOptions exhaustive;
  exhaustive.prune = false;
  exhaustive.threads = 2;
  const ShapeSearch all = search_shapes(c, exhaustive), pruned = search_shapes(c);
  ASSERT_TRUE(all.node_groups);
  EXPECT_EQ(all.enumerated, 6u);  // tp 1, tp 2 and pp 2 on each group's two GPUs
  EXPECT_EQ(all.ranked.size(), 6u);
  EXPECT_EQ(pruned.enumerated, pruned.rejected_by_rule + pruned.rejected_by_memory + pruned.pruned_by_bound + pruned.ranked.size());
  std::set<std::string> groups;
  for (const ShapeRun& r : all.ranked) {
    groups.insert(r.group);
    ASSERT_TRUE(r.first_gpu);
    EXPECT_EQ(*r.first_gpu, r.group == "h100" ? 0 : 2);
    EXPECT_EQ(r.instances * r.shape.gpus(), 2);
  }
  EXPECT_EQ(groups, (std::set<std::string>{"h100", "a100"}));
  ASSERT_EQ(all.groups.size(), 2u);
  for (const GroupOutcome& g : all.groups) {
    EXPECT_EQ(g.candidates, 3u);
    EXPECT_EQ(g.simulated, 3u);
  }
  ASSERT_FALSE(pruned.ranked.empty());
  EXPECT_EQ(pruned.ranked.front().capacity, all.ranked.front().capacity);
  // The best is what capacity_at_slo says of that pool placed on its group.
  const ShapeRun& best = all.ranked.front();
  FleetConfig placed = c;
  placed.pools[0].shape = best.shape;
  placed.pools[0].count = best.instances;
  placed.pools[0].first_gpu = best.first_gpu;
  EXPECT_EQ(capacity_at_slo(placed, 0.9).first, best.capacity);
  // The same shape on the H100s carries at least what it carries on the A100s 40GB.
  const auto on = [&](const std::string& group, const std::string& shape) {
    for (const ShapeRun& r : all.ranked) {
      if (r.group == group && describe_shape(r.shape) == shape) return r.capacity;
    }
    return -1.0;
  };
  EXPECT_GE(on("h100", "tp 2 · pp 1"), on("a100", "tp 2 · pp 1"));
  const nlohmann::json out = fleet_with_shape(nlohmann::json{{"pools", {{{"name", "llm"}}}}}, c, best);
  EXPECT_EQ(out["pools"][0]["placement"]["node"], *best.first_gpu / 2);
}

TEST(ServingSearchCost, PricedSearchesRankByCapacityPerDollarAnHour) {
  // Per million output tokens at a capacity of 2 requests/s of 100 output tokens, at $36 an
  // hour: 720,000 tokens an hour for $36, $50 a million; unranked by capacity, at the measured
  // output throughput.
  FleetSummary f;
  f.output_tokens_per_s = 400;
  EXPECT_DOUBLE_EQ(dollars_per_million_output(36, true, 2, 1, 100, f), 50);
  EXPECT_DOUBLE_EQ(dollars_per_million_output(36, false, 2, 1, 100, f), 36 / (400.0 * 3600) * 1e6);
  EXPECT_DOUBLE_EQ(dollars_per_million_output(0, true, 2, 1, 100, f), 0);
  EXPECT_DOUBLE_EQ(per_dollar_hour(6, 3), 2);
  EXPECT_DOUBLE_EQ(per_dollar_hour(6, 0), 6);

  // The colocated pool on two kinds of GPU: with the A100s nearly free, they win per dollar.
  const FleetConfig c = colocated_on_two_kinds(0);
  ShapeSearchOptions options;
  options.threads = 2;
  options.prune = false;
  options.prices = {{"H100-SXM5-80GB", 100.0}, {"A100-SXM4-40GB", 0.01}};
  const ShapeSearch priced = search_shapes(c, options);
  ASSERT_TRUE(priced.by_cost);
  ASSERT_FALSE(priced.ranked.empty());
  EXPECT_EQ(priced.ranked.front().group, "a100");
  double last = std::numeric_limits<double>::infinity();
  for (const ShapeRun& r : priced.ranked) {
    EXPECT_DOUBLE_EQ(r.dollars_per_hour, r.instances * r.shape.gpus() * (r.group == "h100" ? 100.0 : 0.01));
    const double figure = r.capacity / r.dollars_per_hour;
    EXPECT_LE(figure, last);
    last = figure;
  }
  // Pruned per dollar, the same best.
  ShapeSearchOptions pruned_options = options;
  pruned_options.prune = true;
  const ShapeSearch pruned = search_shapes(c, pruned_options);
  ASSERT_FALSE(pruned.ranked.empty());
  EXPECT_EQ(pruned.ranked.front().capacity, priced.ranked.front().capacity);
  EXPECT_EQ(pruned.ranked.front().group, priced.ranked.front().group);
  // Unpriced, the same candidates rank by capacity alone.
  options.prices.clear();
  const ShapeSearch unpriced = search_shapes(c, options);
  EXPECT_FALSE(unpriced.by_cost);
  EXPECT_EQ(unpriced.ranked.front().dollars_per_hour, 0.0);

  // A split pays for both pools' GPUs, and an unpriced GPU is refused.
  FleetConfig split = split_fleet();
  split.topology = test::two_kinds();
  split.pools[0].first_gpu = 0;
  split.pools[1].first_gpu = 2;
  const SplitSearch s = search_splits(split, 2, 0.9, true, nullptr, {{"H100-SXM5-80GB", 3.0}, {"A100-SXM4-40GB", 1.0}});
  ASSERT_TRUE(s.by_cost);
  for (const SplitRun& r : s.ranked) {
    const auto price = [](const PoolShape& p) { return p.instances * p.shape.gpus() * (p.group == "h100" ? 3.0 : 1.0); };
    EXPECT_DOUBLE_EQ(r.dollars_per_hour, price(r.prefill) + price(r.decode));
  }
  EXPECT_THROW(search_splits(split, 1, 0.9, true, nullptr, {{"H100-SXM5-80GB", 3.0}}), std::invalid_argument);
}

}  // namespace
}  // namespace parallax
