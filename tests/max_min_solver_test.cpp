// The max-min solver alone: textbook cases derived by hand, then properties on random
// problems with fixed, printed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <utility>

#include "network/max_min_solver.h"

namespace parallax {
namespace {

using Problem = MaxMinSolver::Problem;

std::vector<double> solve(const Problem& p) {
  MaxMinSolver s;
  std::vector<double> rates;
  s.solve(p, rates);
  return rates;
}

TEST(MaxMinSolver, TwoFlowsOnOneLinkGetHalfEach) {
  // One link of capacity 10 shared by two flows: 10 / 2 = 5 each.
  Problem p;
  uint32_t link = p.add_resource(10);
  p.add_flow(std::vector<uint32_t>{link});
  p.add_flow(std::vector<uint32_t>{link});
  auto r = solve(p);
  EXPECT_DOUBLE_EQ(r[0], 5);
  EXPECT_DOUBLE_EQ(r[1], 5);
}

TEST(MaxMinSolver, ParkingLot) {
  // Three links of capacity 1 in a row; a long flow crosses all three, and one short flow
  // crosses each link. Every link is shared by 2 flows, so all four flows get 1/2.
  Problem p;
  uint32_t l0 = p.add_resource(1), l1 = p.add_resource(1), l2 = p.add_resource(1);
  p.add_flow(std::vector<uint32_t>{l0, l1, l2});
  p.add_flow(std::vector<uint32_t>{l0});
  p.add_flow(std::vector<uint32_t>{l1});
  p.add_flow(std::vector<uint32_t>{l2});
  auto r = solve(p);
  for (double x : r) EXPECT_DOUBLE_EQ(x, 0.5);
}

TEST(MaxMinSolver, ParkingLotWithAWiderLastLink) {
  // As above but the last link has capacity 2: the long flow is held to 1/2 by l0 and l1,
  // so the short flow on l2 takes the rest, 2 - 1/2 = 3/2.
  Problem p;
  uint32_t l0 = p.add_resource(1), l1 = p.add_resource(1), l2 = p.add_resource(2);
  p.add_flow(std::vector<uint32_t>{l0, l1, l2});
  p.add_flow(std::vector<uint32_t>{l0});
  p.add_flow(std::vector<uint32_t>{l1});
  p.add_flow(std::vector<uint32_t>{l2});
  auto r = solve(p);
  EXPECT_DOUBLE_EQ(r[0], 0.5);
  EXPECT_DOUBLE_EQ(r[3], 1.5);
}

TEST(MaxMinSolver, AFlowBottleneckedElsewhereLeavesItsShareToOthers) {
  // f0 crosses X (capacity 0.5) and Y (capacity 3); f1 and f2 cross only Y. f0 is held to 0.5
  // by X, so f1 and f2 split what is left of Y: (3 - 0.5) / 2 = 1.25 each, not 3/3 = 1.
  Problem p;
  uint32_t x = p.add_resource(0.5), y = p.add_resource(3);
  p.add_flow(std::vector<uint32_t>{x, y});
  p.add_flow(std::vector<uint32_t>{y});
  p.add_flow(std::vector<uint32_t>{y});
  auto r = solve(p);
  EXPECT_DOUBLE_EQ(r[0], 0.5);
  EXPECT_DOUBLE_EQ(r[1], 1.25);
  EXPECT_DOUBLE_EQ(r[2], 1.25);
}

TEST(MaxMinSolver, AFlowWithoutResourcesIsUnbounded) {
  Problem p;
  p.add_resource(1);
  p.add_flow(std::vector<uint32_t>{});
  EXPECT_TRUE(std::isinf(solve(p)[0]));
}

// Equal shares freeze at the lowest resource index, on both search paths: the scan (up to 1,024
// candidates, searched in blocks of 8 shares) and the heap (above). The flow under test crosses
// two resources of capacity 10, listed high index first; every other resource carries one flow
// of its own at capacity 100. Both of its resources then offer a share of 10 / 1 = 10, the
// smallest, so it freezes at 10 — at the lower of the two indices, which must be reported as its
// bottleneck whatever order its path lists them in and wherever they sit in the share array.
void expect_tie_to_lowest(uint32_t resources, uint32_t low) {
  SCOPED_TRACE(std::to_string(resources) + " resources, tie at " + std::to_string(low));
  Problem p;
  for (uint32_t r = 0; r < resources; ++r) p.add_resource(r == low || r == low + 1 ? 10 : 100);
  const uint32_t tied = p.add_flow(std::vector<uint32_t>{low + 1, low});
  for (uint32_t r = 0; r < resources; ++r) {
    if (r != low && r != low + 1) p.add_flow(std::vector<uint32_t>{r});
  }
  MaxMinSolver solver;
  std::vector<double> rates;
  std::vector<uint32_t> bottlenecks;
  solver.solve(p, rates, &bottlenecks);
  EXPECT_DOUBLE_EQ(rates[tied], 10);
  EXPECT_EQ(bottlenecks[tied], low);
}

TEST(MaxMinSolver, EqualSharesFreezeAtTheLowestResource) {
  expect_tie_to_lowest(12, 0);      // first pair of the first block
  expect_tie_to_lowest(12, 9);      // inside the second block, which is padded with +infinity
  expect_tie_to_lowest(12, 7);      // across the boundary between two blocks
  expect_tie_to_lowest(1100, 1090);  // more candidates than the scan takes: the heap
}

// Random problem: R resources with capacities in [1, 100], F flows crossing 1..5 distinct
// resources each.
Problem random_problem(std::mt19937_64& rng, int resources, int flows) {
  Problem p;
  std::uniform_real_distribution<double> cap(1.0, 100.0);
  for (int r = 0; r < resources; ++r) p.add_resource(cap(rng));
  std::uniform_int_distribution<int> len(1, std::min(5, resources));
  std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(resources - 1));
  for (int f = 0; f < flows; ++f) {
    std::vector<uint32_t> path;
    int n = len(rng);
    while (static_cast<int>(path.size()) < n) {
      uint32_t r = pick(rng);
      if (std::find(path.begin(), path.end(), r) == path.end()) path.push_back(r);
    }
    p.add_flow(path);
  }
  return p;
}

class MaxMinProperties : public ::testing::TestWithParam<uint64_t> {};

// The max-min conditions, checked from scratch: no resource over capacity, and the bottleneck
// the solver reports for each flow is saturated and carries no faster flow.
void expect_max_min(const Problem& p) {
  MaxMinSolver solver;
  std::vector<double> rates;
  std::vector<uint32_t> bottlenecks;
  solver.solve(p, rates, &bottlenecks);
  std::vector<double> load(p.capacity.size(), 0.0), max_rate(p.capacity.size(), 0.0);
  for (size_t f = 0; f < p.flow_count(); ++f) {
    ASSERT_GT(rates[f], 0.0);
    for (uint32_t i = p.flow_offsets[f]; i < p.flow_offsets[f + 1]; ++i) {
      load[p.flow_resources[i]] += rates[f];
      max_rate[p.flow_resources[i]] = std::max(max_rate[p.flow_resources[i]], rates[f]);
    }
  }
  constexpr double kTol = 1e-9;
  for (size_t r = 0; r < p.capacity.size(); ++r) EXPECT_LE(load[r], p.capacity[r] * (1 + kTol)) << "resource " << r;
  // The per-resource load and fastest rate the solver reports (the flow model's checks read
  // them) match the ones recomputed here.
  for (size_t r = 0; r < p.capacity.size(); ++r) {
    EXPECT_NEAR(solver.resource_load()[r], load[r], 1e-12 * p.capacity[r]) << "resource " << r;
    EXPECT_EQ(solver.resource_fastest()[r], max_rate[r]) << "resource " << r;
  }
  for (size_t f = 0; f < p.flow_count(); ++f) {
    const uint32_t r = bottlenecks[f];
    ASSERT_LT(r, p.capacity.size()) << "flow " << f;
    EXPECT_GE(load[r], p.capacity[r] * (1 - kTol)) << "flow " << f << ": bottleneck " << r << " not saturated";
    EXPECT_GE(rates[f], max_rate[r] * (1 - kTol)) << "flow " << f << ": a faster flow on its bottleneck " << r;
  }
}

TEST_P(MaxMinProperties, CapacityRespectedAndEveryFlowHasABottleneck) {
  const uint64_t seed = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Dense: every resource is contended.
  expect_max_min(random_problem(rng, 40, 200));
  // Sparse: most resources carry one or two flows and cannot saturate; small, then above the
  // solver's scan limit of resources, where it leaves those out of the filling.
  expect_max_min(random_problem(rng, 400, 150));
  expect_max_min(random_problem(rng, 4000, 1500));
  // Large: more than the solver's scan limit of candidate resources (its heap path).
  expect_max_min(random_problem(rng, 3000, 4000));
}

TEST_P(MaxMinProperties, SameProblemSameRates) {
  std::mt19937_64 rng(GetParam());
  Problem p = random_problem(rng, 30, 100);
  EXPECT_EQ(solve(p), solve(p));
}

// A flow of weight w is w equal flows on one path: the problem with every weighted flow written
// out as that many flows of weight 1 has the same rates, each copy the weighted flow's rate.
TEST_P(MaxMinProperties, AWeightedFlowIsThatManyEqualFlows) {
  const uint64_t seed = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> weight(1, 6);
  for (auto [resources, flows] : {std::pair{40, 120}, std::pair{3000, 2500}}) {
    const Problem plain = random_problem(rng, resources, flows);
    Problem weighted, expanded;
    weighted.capacity = expanded.capacity = plain.capacity;
    std::vector<uint32_t> first_copy;
    for (size_t f = 0; f < plain.flow_count(); ++f) {
      const std::span<const uint32_t> path(plain.flow_resources.data() + plain.flow_offsets[f],
                                           plain.flow_offsets[f + 1] - plain.flow_offsets[f]);
      const uint32_t w = weight(rng);
      weighted.add_flow(path, w);
      first_copy.push_back(static_cast<uint32_t>(expanded.flow_count()));
      for (uint32_t c = 0; c < w; ++c) expanded.add_flow(path);
    }
    const std::vector<double> by_weight = solve(weighted), by_copies = solve(expanded);
    for (size_t f = 0; f < plain.flow_count(); ++f) {
      EXPECT_NEAR(by_weight[f], by_copies[first_copy[f]], 1e-12 * by_copies[first_copy[f]]) << "flow " << f;
    }
  }
}

TEST(MaxMinSolver, AFlowOfWeightThreeTakesThreeSharesOfItsLink) {
  // One link of capacity 8: a flow of weight 3 and one of weight 1 split it 3 : 1, each of the
  // four flows they stand for at 2; the link reports its whole load.
  Problem p;
  const uint32_t link = p.add_resource(8);
  p.add_flow(std::vector<uint32_t>{link}, 3);
  p.add_flow(std::vector<uint32_t>{link});
  MaxMinSolver solver;
  std::vector<double> rates;
  solver.solve(p, rates);
  EXPECT_DOUBLE_EQ(rates[0], 2);
  EXPECT_DOUBLE_EQ(rates[1], 2);
  EXPECT_DOUBLE_EQ(solver.resource_load()[link], 8);
}

INSTANTIATE_TEST_SUITE_P(Seeds, MaxMinProperties, ::testing::Values(1u, 2u, 3u, 42u, 1234u, 99991u));

}  // namespace
}  // namespace parallax
