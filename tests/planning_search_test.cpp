// The layout search (planning/layout_search.h): on the small case, a 1.3B GPT on 16 A100s, its
// best layout is the best of simulating every valid layout, its counts add up, the memory it
// prunes by is the memory a full simulation reports, its ranking does not depend on the
// threads, and a bad space fails with its JSON pointer before anything is simulated.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "io/input_error.h"
#include "io/json_reader.h"
#include "planning/layout_search.h"
#include "planning/search_report.h"
#include "training/iteration_report.h"
#include "training/workload_loader.h"
#include "test_support.h"

namespace parallax {
namespace {

TrainingWorkload small_case() {
  WorkloadOverrides o;
  o.validate_layout = false;
  return load_training_workload(test::source_path("tests/data/workloads/gpt-1.3b-16xa100.json"),
                                test::source_path("workloads/models"), test::source_path("topologies"), o);
}

// A smaller space than the default, so that the exhaustive check stays quick under the
// sanitizers: every dimension still has a choice.
SearchSpace small_space(const TrainingWorkload& job) {
  SearchSpace s = default_search_space(job.model, job.layout, 16, 8);
  s.zero = {ZeroStage::kStage0, ZeroStage::kStage1, ZeroStage::kStage3};
  s.micro_batch = {1, 4};
  s.recompute = {Recomputation::kNone, Recomputation::kFull};
  s.vpp = {2};
  return s;
}

TEST(LayoutSearch, BestEqualsTheBestOfSimulatingEveryLayoutAndTheCountsAddUp) {
  const TrainingWorkload job = small_case();
  const SearchSpace space = small_space(job);
  SearchOptions options;
  options.top = 3;
  const SearchOutcome found = search_layouts(job.model, job.layout, job.topology, space, options);
  ASSERT_FALSE(found.ranked.empty());
  EXPECT_EQ(found.enumerated, found.rejected_by_rule + found.rejected_by_memory + found.pruned_by_bound + found.simulated);
  EXPECT_EQ(found.simulated, found.ranked.size());
  EXPECT_GT(found.rejected_by_rule, 0u);  // e.g. tp 16 over 16 heads is fine, pp 16 over 24 layers is not

  const Enumeration every = enumerate_layouts(space, job.model, job.layout, 16);
  const GpuSpec& gpu = job.topology.gpu_spec_of(job.topology.gpus()[0]);
  double best = 0;
  std::string best_layout;
  size_t fits = 0;
  for (const ParallelLayout& l : every.valid) {
    const IterationResult r = simulate_iteration(job.model, l, job.topology, IterationOptions{});
    // The memory the search prunes by is the memory the simulation reports.
    const IterationMemory m = estimate_memory(job.model, l, gpu, IterationOptions{});
    EXPECT_EQ(m.peak_memory, r.peak_memory) << layout_description(l);
    EXPECT_EQ(m.out_of_memory, r.out_of_memory) << layout_description(l);
    if (r.out_of_memory) continue;
    ++fits;
    if (r.tokens_per_second > best) {
      best = r.tokens_per_second;
      best_layout = layout_description(l);
    }
  }
  EXPECT_EQ(fits, found.simulated + found.pruned_by_bound);
  EXPECT_DOUBLE_EQ(found.ranked.front().result.tokens_per_second, best) << best_layout;
  for (size_t i = 1; i < found.ranked.size(); ++i) EXPECT_GE(found.ranked[i - 1].score, found.ranked[i].score);
}

TEST(LayoutSearch, TheRankingDoesNotDependOnTheThreads) {
  const TrainingWorkload job = small_case();
  const SearchSpace space = small_space(job);
  SearchOptions one;
  one.top = 5;
  SearchOptions three = one;
  three.threads = 3;
  const SearchOutcome a = search_layouts(job.model, job.layout, job.topology, space, one);
  const SearchOutcome b = search_layouts(job.model, job.layout, job.topology, space, three);
  EXPECT_EQ(search_json(a).dump(), search_json(b).dump());
}

TEST(LayoutSearch, TheBoundNeverExceedsTheSimulatedTime) {
  const TrainingWorkload job = small_case();
  const SearchOutcome found = search_layouts(job.model, job.layout, job.topology, small_space(job), SearchOptions{});
  const GpuSpec& gpu = job.topology.gpu_spec_of(job.topology.gpus()[0]);
  for (const SearchedLayout& s : found.ranked) {
    EXPECT_LE(iteration_time_lower_bound(job.model, s.layout, gpu, IterationOptions{}), s.result.iteration_time)
        << layout_description(s.layout);
  }
}

TEST(LayoutSearch, ABadSpaceFailsWithItsPointer) {
  const TrainingWorkload job = small_case();
  const SearchSpace defaults = default_search_space(job.model, job.layout, 16, 8);
  const std::string path = ::testing::TempDir() + "/space.json";
  auto fails_at = [&](const std::string& text, const std::string& pointer) {
    std::ofstream(path) << text;
    try {
      read_search_space(path, defaults);
      ADD_FAILURE() << text << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(pointer), std::string::npos) << e.what();
    }
  };
  fails_at(R"({"tp": []})", "/tp");
  fails_at(R"({"tp": [0]})", "/tp/0");
  fails_at(R"({"zero": [4]})", "/zero/0");
  fails_at(R"({"recompute": ["some"]})", "/recompute/0");
  fails_at(R"({"rank_order": ["tp-dp-tp"]})", "/rank_order/0");
  fails_at(R"({"tpp": [1]})", "tpp");
  std::ofstream(path) << R"({"tp": [2], "micro_batch": [2]})";
  const SearchSpace s = read_search_space(path, defaults);
  EXPECT_EQ(s.tp, std::vector<int>{2});
  EXPECT_EQ(s.micro_batch, std::vector<int64_t>{2});
  EXPECT_EQ(s.pp, defaults.pp);
}

TEST(LayoutSearch, TheEmittedWorkloadRunsTheBestLayout) {
  const TrainingWorkload job = small_case();
  const SearchOutcome found = search_layouts(job.model, job.layout, job.topology, small_space(job), SearchOptions{});
  const std::string original = test::source_path("tests/data/workloads/gpt-1.3b-16xa100.json");
  const std::string emitted = ::testing::TempDir() + "/best.json";
  std::ofstream(emitted) << workload_with_layout(load_json_file(original), original, job.topology_file, 2,
                                                 found.ranked.front().layout)
                                .dump(2);
  const TrainingWorkload again =
      load_training_workload(emitted, test::source_path("workloads/models"), test::source_path("topologies"));
  EXPECT_EQ(layout_description(again.layout), layout_description(found.ranked.front().layout));
  EXPECT_EQ(simulate_iteration(again.model, again.layout, again.topology, IterationOptions{}).iteration_time,
            found.ranked.front().result.iteration_time);
}

}  // namespace
}  // namespace parallax
