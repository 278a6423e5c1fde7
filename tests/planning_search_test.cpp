// The layout search (planning/layout_search.h): on the small case, a 1.3B GPT on 16 A100s, its
// best layout is the best of simulating every valid layout, its counts add up, the memory it
// prunes by is the memory a full simulation reports, its ranking does not depend on the
// threads, and a bad space fails with its JSON pointer before anything is simulated. The
// scaling study (planning/scaling_study.h). And the published findings a search must
// reproduce in direction: Narayanan et al. 2021 (SC21) and Rajbhandari et al. 2020 (ZeRO).
#include <gtest/gtest.h>

#include <array>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>
#include <fstream>

#include "io/input_error.h"
#include "io/json_reader.h"
#include "planning/layout_search.h"
#include "planning/rank_order_study.h"
#include "planning/scaling_study.h"
#include "planning/search_report.h"
#include "training/iteration_memo.h"
#include "training/iteration_report.h"
#include "topology/topology_loader.h"
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
// sanitizers: every dimension still has a choice. Its schedules include ZB-V, whose simulated
// order is made with the communication's times while its memory stays the kernels' order's, as
// the search's filter estimates it, and DualPipeV.
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
  EXPECT_EQ(found.ranked.front().result.simulated, 1);
  for (size_t i = 1; i < found.ranked.size(); ++i) EXPECT_GE(found.ranked[i - 1].score, found.ranked[i].score);
}

// Every rank order of layouts on the small case's two nodes, simulated with one memo and each
// on its own: the same results, down to each stage's breakdown. Some orders place the groups
// alike (the memo answers them), others do not (simulated, and different).
TEST(IterationMemo, ARankOrderThatTimesAlikeGetsItsTwinsResultAndOneThatDoesNotIsSimulated) {
  const TrainingWorkload job = small_case();
  IterationMemo memo;
  IterationOptions with_memo;
  with_memo.result_memo = &memo;
  std::set<double> distinct_times;
  size_t simulated = 0;
  for (auto [tp, pp, dp] : {std::array<int, 3>{2, 2, 4}, {4, 2, 2}, {8, 2, 1}}) {
    ParallelLayout layout = job.layout;
    layout.tp = tp;
    layout.pp = pp;
    layout.dp = dp;
    for (const std::string& order : distinct_rank_orders(layout)) {
      layout.rank_order = order;
      const IterationResult alone = simulate_iteration(job.model, layout, job.topology, IterationOptions{});
      const IterationResult remembered = simulate_iteration(job.model, layout, job.topology, with_memo);
      ++simulated;
      distinct_times.insert(alone.iteration_time.seconds());
      const std::string what = layout_description(layout) + " " + order;
      EXPECT_EQ(alone.iteration_time, remembered.iteration_time) << what;
      EXPECT_EQ(alone.peak_memory, remembered.peak_memory) << what;
      EXPECT_EQ(alone.tasks, remembered.tasks) << what;
      EXPECT_EQ(alone.critical_path.tasks, remembered.critical_path.tasks) << what;
      ASSERT_EQ(alone.stages.size(), remembered.stages.size()) << what;
      for (size_t s = 0; s < alone.stages.size(); ++s) {
        EXPECT_EQ(alone.stages[s].time.bubble, remembered.stages[s].time.bubble) << what;
        for (size_t k = 0; k < kWorkKinds; ++k) {
          EXPECT_EQ(alone.stages[s].time.exposed[k], remembered.stages[s].time.exposed[k]) << what;
          EXPECT_EQ(alone.stages[s].communication[k].replica_slowdown, remembered.stages[s].communication[k].replica_slowdown) << what;
        }
      }
    }
  }
  EXPECT_GT(memo.hits(), 0u);
  EXPECT_LT(memo.hits(), simulated);
  EXPECT_GT(distinct_times.size(), 3u);  // orders that differ were not answered from the memo
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

// Ranking by time alone and breaking the time down only for the layouts shown (the top) gives
// the same ranking and, for those, the same bubble and exposed communication as breaking down
// every layout.
TEST(LayoutSearch, DetailsOfTheTopAloneMatchDetailsOfEveryLayout) {
  const TrainingWorkload job = small_case();
  const SearchSpace space = small_space(job);
  SearchOptions every;
  every.top = 5;
  every.details_for_every_layout = true;
  SearchOptions top = every;
  top.details_for_every_layout = false;
  const SearchOutcome a = search_layouts(job.model, job.layout, job.topology, space, every);
  const SearchOutcome b = search_layouts(job.model, job.layout, job.topology, space, top);
  ASSERT_EQ(a.ranked.size(), b.ranked.size());
  ASSERT_GT(a.ranked.size(), every.top);
  bool any_detail = false;
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    EXPECT_EQ(layout_description(a.ranked[i].layout), layout_description(b.ranked[i].layout)) << i;
    EXPECT_EQ(a.ranked[i].result.iteration_time_s, b.ranked[i].result.iteration_time_s) << i;
    if (i < every.top) {
      EXPECT_EQ(a.ranked[i].result.pipeline_bubble_fraction, b.ranked[i].result.pipeline_bubble_fraction) << i;
      EXPECT_EQ(a.ranked[i].result.most_exposed_s, b.ranked[i].result.most_exposed_s) << i;
      EXPECT_EQ(a.ranked[i].result.most_exposed_kind, b.ranked[i].result.most_exposed_kind) << i;
      any_detail = any_detail || a.ranked[i].result.most_exposed_s > 0;
    } else {
      EXPECT_EQ(b.ranked[i].result.most_exposed_s, 0.0) << i;  // not broken down
    }
  }
  EXPECT_TRUE(any_detail);  // the check compared something
}

// Two processes of a distributed search played by two threads: each all_gather waits for both
// and returns both shares in rank order.
class ThreadPair {
 public:
  class Side : public SearchPartition {
   public:
    Side(ThreadPair& pair, int rank) : pair_(pair), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return 2; }
    std::vector<LayoutSummary> all_gather(const std::vector<LayoutSummary>& mine) override {
      return pair_.exchange(rank_, mine);
    }

   private:
    ThreadPair& pair_;
    int rank_;
  };

  std::vector<LayoutSummary> exchange(int rank, const std::vector<LayoutSummary>& mine) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t round = round_;
    shares_[rank] = mine;
    if (++arrived_ == 2) {
      result_ = shares_[0];
      result_.insert(result_.end(), shares_[1].begin(), shares_[1].end());
      arrived_ = 0;
      ++round_;
      done_.notify_all();
    } else {
      done_.wait(lock, [&] { return round_ != round; });
    }
    return result_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<LayoutSummary> shares_[2], result_;
  int arrived_ = 0;
  int64_t round_ = 0;
};

TEST(LayoutSearch, TwoProcessesRankAsOne) {
  const TrainingWorkload job = small_case();
  const SearchSpace space = small_space(job);
  SearchOptions alone;
  alone.top = 5;
  const std::string expected = search_json(search_layouts(job.model, job.layout, job.topology, space, alone)).dump();
  ThreadPair pair;
  ThreadPair::Side zero(pair, 0), one(pair, 1);
  std::string got[2];
  auto side = [&](SearchPartition* p, std::string* out) {
    SearchOptions o = alone;
    o.partition = p;
    *out = search_json(search_layouts(job.model, job.layout, job.topology, space, o)).dump();
  };
  std::thread other(side, &one, &got[1]);
  side(&zero, &got[0]);
  other.join();
  EXPECT_EQ(got[0], expected);
  EXPECT_EQ(got[1], expected);
}

TEST(LayoutSearch, TheBoundNeverExceedsTheSimulatedTime) {
  const TrainingWorkload job = small_case();
  const SearchOutcome found = search_layouts(job.model, job.layout, job.topology, small_space(job), SearchOptions{});
  const GpuSpec& gpu = job.topology.gpu_spec_of(job.topology.gpus()[0]);
  for (const SearchedLayout& s : found.ranked) {
    EXPECT_LE(estimate_iteration(job.model, s.layout, gpu, IterationOptions{}).time_lower_bound.seconds(), s.result.iteration_time_s)
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
      read_search_space(path, defaults, 16);
      ADD_FAILURE() << text << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(pointer), std::string::npos) << e.what();
    }
  };
  fails_at(R"({"tp": []})", "/tp");
  fails_at(R"({"tp": [0]})", "/tp/0");
  fails_at(R"({"zero": [4]})", "/zero/0");
  fails_at(R"({"dp_shard": [8, 0]})", "/dp_shard/1");
  fails_at(R"({"recompute": ["some"]})", "/recompute/0");
  fails_at(R"({"rank_order": ["tp-dp-tp"]})", "/rank_order/0");
  fails_at(R"({"tpp": [1]})", "tpp");
  fails_at(R"({"pp": [1, 3]})", "/pp/1: 3 does not divide the 16 GPUs");
  fails_at(R"({"expert_gemm": ["per_expert", "batched"]})", "/expert_gemm/1");
  // A space whose every layout breaks a rule fails before any simulation.
  std::ofstream(path) << R"({"tp": [16], "pp": [16]})";
  EXPECT_THROW(search_layouts(job.model, job.layout, job.topology, read_search_space(path, defaults, 16), SearchOptions{}),
               InputError);
  std::ofstream(path) << R"({"tp": [2], "micro_batch": [2], "dp_shard": [4]})";
  const SearchSpace s = read_search_space(path, defaults, 16);
  EXPECT_EQ(s.tp, std::vector<int>{2});
  EXPECT_EQ(s.dp_shard, std::vector<int>{4});
  EXPECT_EQ(s.micro_batch, std::vector<int64_t>{2});
  EXPECT_EQ(s.pp, defaults.pp);
}

TEST(LayoutSearch, WhenNothingFitsItNamesTheLeanestLayout) {
  // Micro-batches of 512 sequences of 2,048 without recomputation overflow an A100's 80 GiB at
  // every degree: nothing is simulated, and the report names the layout that needs least.
  TrainingWorkload job = small_case();
  job.layout.global_batch = 8192;
  SearchSpace space = small_space(job);
  space.micro_batch = {512};
  space.recompute = {Recomputation::kNone};
  const SearchOutcome o = search_layouts(job.model, job.layout, job.topology, space, SearchOptions{});
  EXPECT_TRUE(o.ranked.empty());
  EXPECT_TRUE(o.none_fits);
  EXPECT_EQ(o.simulated, 0u);
  ASSERT_TRUE(o.leanest_out_of_memory.has_value());
  EXPECT_GT(o.leanest_peak_memory, o.gpu_memory);
  const IterationEstimate leanest = estimate_iteration(job.model, *o.leanest_out_of_memory,
                                                       job.topology.gpu_spec_of(job.topology.gpus()[0]), IterationOptions{});
  EXPECT_EQ(leanest.memory.peak_memory, o.leanest_peak_memory);
  const std::string why = no_layout_fits(o);
  EXPECT_NE(why.find(layout_description(*o.leanest_out_of_memory)), std::string::npos) << why;
  EXPECT_NE(why.find("of 80.0 GiB"), std::string::npos) << why;
}

TEST(LayoutSearch, TheEmittedWorkloadRunsTheBestLayout) {
  const TrainingWorkload job = small_case();
  const SearchOutcome found = search_layouts(job.model, job.layout, job.topology, small_space(job), SearchOptions{});
  const std::string original = test::source_path("tests/data/workloads/gpt-1.3b-16xa100.json");
  const std::string emitted = ::testing::TempDir() + "/best.json";
  std::ofstream(emitted) << workload_with_layout(load_json_file(original), original, job.topology_file,
                                                 found.ranked.front().layout)
                                .dump(2);
  const TrainingWorkload again =
      load_training_workload(emitted, test::source_path("workloads/models"), test::source_path("topologies"));
  EXPECT_EQ(layout_description(again.layout), layout_description(found.ranked.front().layout));
  EXPECT_EQ(simulate_iteration(again.model, again.layout, again.topology, IterationOptions{}).iteration_time.seconds(),
            found.ranked.front().result.iteration_time_s);
}


TEST(LayoutSearch, MoeSpacesVaryExpertTensorParallelismWhereItDiffersFromTp) {
  WorkloadOverrides o;
  const TrainingWorkload job =
      load_training_workload(test::source_path("workloads/train/mixtral-8x7b-8xdgx-h100-ep8.json"),
                             test::source_path("workloads/models"), test::source_path("topologies"), o);
  SearchSpace space = default_search_space(job.model, job.layout, 64, 8);
  EXPECT_EQ(space.expert_tp, (std::vector<int>{0, 1}));
  // The all-to-alls overlapped across micro-batches are tried both ways (checked below).
  EXPECT_EQ(space.moe_a2a_overlap, (std::vector<bool>{false, true}));
  space.moe_a2a_overlap = {false};
  space.pp = {1};
  space.zero = {ZeroStage::kStage1};
  space.micro_batch = {1};
  space.recompute = {Recomputation::kSelective};
  const Enumeration e = enumerate_layouts(space, job.model, job.layout, 64);
  size_t folded = 0;
  for (const ParallelLayout& l : e.valid) {
    EXPECT_TRUE(l.expert_tp == 0 || l.tp > 1) << layout_description(l);  // tp 1: etp 1 is tp
    if (l.expert_tp == 1) {
      ++folded;
      EXPECT_NE(layout_description(l).find("etp 1"), std::string::npos);
    }
  }
  EXPECT_GT(folded, 0u);
  // How the experts' GEMMs are issued: the workload's, or both when the space asks; each layout
  // of a MoE model comes in both, a dense model's in one.
  EXPECT_EQ(space.expert_gemms, std::vector<ExpertGemms>{ExpertGemms::kPerExpert});
  space.expert_gemms = {ExpertGemms::kPerExpert, ExpertGemms::kGrouped};
  EXPECT_EQ(enumerate_layouts(space, job.model, job.layout, 64).valid.size(), 2 * e.valid.size());
  // The all-to-alls overlapped across micro-batches: only where Megatron allows it (ep > 1, no
  // full recomputation, 1F1B on one stage), every such layout both ways.
  space.expert_gemms = {ExpertGemms::kPerExpert};
  space.moe_a2a_overlap = {false, true};
  size_t allowed = 0;
  for (const ParallelLayout& l : e.valid) allowed += l.ep > 1 && l.schedule == PipelineScheduleKind::kOneFOneB;
  EXPECT_GT(allowed, 0u);
  const Enumeration both = enumerate_layouts(space, job.model, job.layout, 64);
  EXPECT_EQ(both.valid.size(), e.valid.size() + allowed);
  for (const ParallelLayout& l : both.valid) EXPECT_TRUE(!l.moe_a2a_overlap || l.ep > 1) << layout_description(l);
  // A workload that sets the overlap does not carry it where it cannot run (ep 1 here): those
  // layouts stay, with it off, as from a workload without it.
  ParallelLayout overlapped = job.layout;
  overlapped.moe_a2a_overlap = true;
  EXPECT_EQ(enumerate_layouts(space, job.model, overlapped, 64).valid.size(), both.valid.size());
  // Dense models have no expert TP to vary.
  EXPECT_EQ(default_search_space(small_case().model, small_case().layout, 16, 8).expert_tp, std::vector<int>{0});
}

TEST(LayoutSearch, ActivationOffloadingStaysWhereMegatronAllowsIt) {
  // The workload offloads 40 layers: layouts with pp 1 and no recomputation keep that (or the
  // space's values), the others run without it instead of being rejected.
  const TrainingWorkload job =
      load_training_workload(test::source_path("workloads/train/llama3-70b-64xgb200-fsdp-offload.json"),
                             test::source_path("workloads/models"), test::source_path("topologies"), WorkloadOverrides{});
  SearchSpace space = default_search_space(job.model, job.layout, 64, 72);
  EXPECT_EQ(space.cpu_offloading_layers, std::vector<int>{40});
  space.tp = {1, 2};
  space.pp = {1, 2};
  space.zero = {ZeroStage::kStage3};
  space.micro_batch = {1};
  space.cpu_offloading_layers = {0, 40};
  const Enumeration e = enumerate_layouts(space, job.model, job.layout, 64);
  EXPECT_EQ(e.rejected_by_rule, 0u);
  size_t offloading = 0;
  for (const ParallelLayout& l : e.valid) {
    if (l.cpu_offloading_layers > 0) {
      ++offloading;
      EXPECT_EQ(l.pp, 1) << layout_description(l);
      EXPECT_EQ(l.recompute, Recomputation::kNone) << layout_description(l);
    }
  }
  // tp 1 and 2 at pp 1 without recomputation, each with and without offloading.
  EXPECT_EQ(offloading, 2u);
}

TEST(LayoutSearch, BlocksOfRecomputedLayersAreFullRecomputationOnly) {
  // recompute_layers 0, 2 and 8 on the 1.3B GPT (24 layers): full recomputation takes each value,
  // none and selective only 0; a block as deep as a stage's layers (8 at pp 4: 6 layers each) is
  // the same layout as 0 and counted as rejected; with 0 absent from the list it stays, as 0.
  const TrainingWorkload job = small_case();
  SearchSpace space = small_space(job);
  space.tp = {1};
  space.pp = {1, 4};
  space.zero = {ZeroStage::kStage1};
  space.micro_batch = {1};
  space.schedule = {PipelineScheduleKind::kOneFOneB};
  space.rank_order = {"tp-cp-ep-dp-pp"};
  space.recompute = {Recomputation::kNone, Recomputation::kSelective, Recomputation::kFull};
  space.recompute_layers = {0, 2, 8};
  Enumeration e = enumerate_layouts(space, job.model, job.layout, 16);
  std::multiset<std::pair<int, int>> full;  // (pp, recompute_layers)
  for (const ParallelLayout& l : e.valid) {
    if (l.recompute == Recomputation::kFull) {
      full.insert({l.pp, l.recompute_layers});
    } else {
      EXPECT_EQ(l.recompute_layers, 0) << layout_description(l);
    }
  }
  EXPECT_EQ(full, (std::multiset<std::pair<int, int>>{{1, 0}, {1, 2}, {1, 8}, {4, 0}, {4, 2}}));
  EXPECT_EQ(e.enumerated, 2u * (2 + 3));  // per pp: none and selective once, full with each of 3 blocks
  EXPECT_EQ(e.rejected_by_rule, 1u);
  space.recompute_layers = {2, 8};
  e = enumerate_layouts(space, job.model, job.layout, 16);
  full.clear();
  for (const ParallelLayout& l : e.valid) {
    if (l.recompute == Recomputation::kFull) full.insert({l.pp, l.recompute_layers});
  }
  EXPECT_EQ(full, (std::multiset<std::pair<int, int>>{{1, 2}, {1, 8}, {4, 2}, {4, 0}}));
  EXPECT_EQ(e.rejected_by_rule, 0u);
}

TEST(LayoutSearch, ShardGroupsAreTriedBesideFullShardingWhereTheySplitTheRanks) {
  // dp_shard 4 on 16 GPUs: each ZeRO 1 or 3 layout whose dp·cp is 8 or 16 is tried a second
  // time with hybrid sharding in groups of 4; dp·cp 4 (one group) and ZeRO 0 are not.
  const TrainingWorkload job = small_case();
  SearchSpace space = small_space(job);
  space.pp = {1};
  space.cp = {1};
  space.micro_batch = {1};
  space.recompute = {Recomputation::kNone};
  space.rank_order = {"tp-cp-ep-dp-pp"};
  const Enumeration plain = enumerate_layouts(space, job.model, job.layout, 16);
  space.dp_shard = {4};
  const Enumeration hybrid = enumerate_layouts(space, job.model, job.layout, 16);
  size_t splittable = 0;
  for (const ParallelLayout& l : plain.valid) {
    EXPECT_EQ(l.dp_shard, 0);
    if (l.zero_stage != ZeroStage::kStage0 && l.dp * l.cp > 4) ++splittable;
  }
  EXPECT_GT(splittable, 0u);
  EXPECT_EQ(hybrid.enumerated, plain.enumerated + splittable);
  EXPECT_EQ(hybrid.valid.size(), plain.valid.size() + splittable);
  for (const ParallelLayout& l : hybrid.valid) {
    if (l.dp_shard == 0) continue;
    EXPECT_EQ(l.dp_shard, 4);
    EXPECT_TRUE(l.hybrid_sharded()) << layout_description(l);
    EXPECT_NE(l.zero_stage, ZeroStage::kStage0);
  }
}

// ---- published findings, in direction ------------------------------------------------------------

IterationResult run(const TrainingWorkload& job, const ParallelLayout& l, int nodes) {
  const Topology topo = load_topology(job.topology_file, TopologyLoadOptions{nodes});
  return simulate_iteration(job.model, l, topo, IterationOptions{});
}

ParallelLayout with(const TrainingWorkload& job, int tp, int pp, int dp, int64_t gbs) {
  ParallelLayout l = job.layout;
  l.tp = tp;
  l.pp = pp;
  l.dp = dp;
  l.global_batch = gbs;
  return l;
}

TEST(PublishedFindings, TensorParallelismInsideANodeBeatsItAcrossNodes) {
  // Narayanan et al. 2021, Fig. 13 (and §3.3, takeaway #1): with tp·pp fixed, TP beyond the
  // 8 GPUs of a DGX A100 node sends its all-reduces over the NICs and loses to TP 8 with a
  // deeper pipeline. 32 GPUs, TP 8 · PP 4 against TP 16 · PP 2.
  const TrainingWorkload job = small_case();
  const Time inside = run(job, with(job, 8, 4, 1, 64), 4).iteration_time;
  const Time across = run(job, with(job, 16, 2, 1, 64), 4).iteration_time;
  EXPECT_LT(inside, across);
}

TEST(PublishedFindings, InterleavingBeatsOneFOneBMostAtSmallBatches) {
  // Narayanan et al. 2021, Fig. 12: the interleaved schedule is faster than 1F1B, by more at
  // small batch sizes (fewer micro-batches, a larger bubble to shrink). PP 4 · DP 4 on 16 GPUs,
  // 4 or 128 micro-batches per pipeline.
  const TrainingWorkload job = small_case();
  auto gain = [&](int64_t gbs) {
    ParallelLayout plain = with(job, 1, 4, 4, gbs);
    ParallelLayout interleaved = plain;
    interleaved.schedule = PipelineScheduleKind::kInterleavedOneFOneB;
    interleaved.virtual_stages = 2;
    return run(job, plain, 2).iteration_time.seconds() / run(job, interleaved, 2).iteration_time.seconds();
  };
  const double small = gain(16), large = gain(512);
  EXPECT_GT(small, 1.0);
  EXPECT_GT(small, large);
}

TEST(PublishedFindings, LargerMicroBatchesHelpUntilMemoryRunsOut) {
  // Narayanan et al. 2021, Fig. 16 (§3.5): throughput grows with the micro-batch size (larger
  // GEMMs), and so does the activation memory, which ends the growth. DP 16, micro-batches 1–8.
  const TrainingWorkload job = small_case();
  double previous_speed = 0;
  Bytes previous_memory;
  for (int64_t mbs : {1, 2, 4, 8}) {
    ParallelLayout l = with(job, 1, 1, 16, 128);
    l.micro_batch = mbs;
    const IterationResult r = run(job, l, 2);
    EXPECT_GT(r.tokens_per_second, previous_speed) << mbs;
    EXPECT_GT(r.peak_memory, previous_memory) << mbs;
    previous_speed = r.tokens_per_second;
    previous_memory = r.peak_memory;
  }
}

TEST(PublishedFindings, ZeroThreeMovesOneAndAHalfTimesTheBytesOfDdp) {
  // Rajbhandari et al. 2020 (ZeRO), §7.2: ZeRO-3 all-gathers the parameters for the forward and
  // again for the backward and reduce-scatters the gradients, 3·(n−1)/n·Ψ against DDP's
  // all-reduce of 2·(n−1)/n·Ψ: 1.5× the data-parallel communication. One micro-batch per step
  // (with accumulation ZeRO-3 repeats all three per micro-batch; DDP reduces once).
  const TrainingWorkload job = small_case();
  auto dp_bytes = [&](ZeroStage zero) {
    ParallelLayout l = with(job, 1, 1, 16, 16);
    l.zero_stage = zero;
    return run(job, l, 2).stages[0].communication[static_cast<size_t>(WorkKind::kDpComm)].sent.value();
  };
  EXPECT_NEAR(dp_bytes(ZeroStage::kStage3) / dp_bytes(ZeroStage::kStage0), 1.5, 1e-9);
}

TEST(PublishedFindings, DeepSpeedsPerTensorZeroThreeGathersCostTheirLatencies) {
  // DeepSpeed's ZeRO-3 before late 2021 gathered each parameter tensor by its own all-gather and
  // waited for it (DeepSpeed issue #1069; batched in PR #1188): the same bytes as one gather per
  // layer, in 12 collectives per GPT layer (QKV, projection, fc1, fc2, their 4 biases and the two
  // LayerNorms' gains and biases), each paying its latency — the reason Narayanan et al. 2021's
  // Table 2 ZeRO-3 runs fall behind as the DP group grows.
  const TrainingWorkload job = small_case();
  auto run_zero3 = [&](bool per_tensor) {
    ParallelLayout l = with(job, 1, 1, 16, 16);
    l.zero_stage = ZeroStage::kStage3;
    l.param_gather_prefetch = false;
    l.param_gather_per_tensor = per_tensor;
    return run(job, l, 2);
  };
  const IterationResult layer = run_zero3(false), tensor = run_zero3(true);
  const auto& dp_layer = layer.stages[0].communication[static_cast<size_t>(WorkKind::kDpComm)];
  const auto& dp_tensor = tensor.stages[0].communication[static_cast<size_t>(WorkKind::kDpComm)];
  EXPECT_NEAR(dp_tensor.sent.value(), dp_layer.sent.value(), 1e-6 * dp_layer.sent.value());
  // 24 layers, gathered for the forward and again for the backward: 11 more collectives each time.
  EXPECT_EQ(dp_tensor.collectives - dp_layer.collectives, 2 * 24 * 11);
  EXPECT_GT(tensor.iteration_time, layer.iteration_time);
}

// ---- the scaling study ----------------------------------------------------------------------

TEST(ScalingStudy, StrongScalingKeepsTheBatchAndShardingShrinksTheMemory) {
  const TrainingWorkload job = small_case();
  auto topology_for = [&](int g) { return load_topology(job.topology_file, TopologyLoadOptions{g / 8}); };
  const std::vector<ScalingStrategy> strategies{*scaling_strategy_from("ddp"), *scaling_strategy_from("fsdp")};
  ParallelLayout base = with(job, 1, 1, 8, 64);
  const ScalingStudy strong = run_scaling_study(job.model, base, topology_for, {8, 16, 32}, strategies, false, IterationOptions{});
  ASSERT_EQ(strong.rows.size(), 2u);
  for (const ScalingRow& row : strong.rows) {
    ASSERT_TRUE(row.cells.front().result.has_value());
    EXPECT_DOUBLE_EQ(row.cells.front().efficiency, 1.0);
    for (const ScalingCell& c : row.cells) {
      ASSERT_TRUE(c.result.has_value()) << c.problem;
      EXPECT_NEAR(c.result->tokens_per_second * c.result->iteration_time.seconds(), 64.0 * 2048, 1e-6);  // one batch
      EXPECT_LE(c.efficiency, 1.0 + 1e-9);
    }
  }
  // DDP replicates the model states: the same memory at every count; FSDP shards them.
  EXPECT_EQ(strong.rows[0].cells[0].result->peak_memory, strong.rows[0].cells[2].result->peak_memory);
  EXPECT_GT(strong.rows[1].cells[0].result->peak_memory, strong.rows[1].cells[2].result->peak_memory);
  // Weak scaling grows the batch with the GPUs; a count the model-parallel degrees do not divide
  // is reported, not run.
  ParallelLayout tp2 = with(job, 2, 1, 4, 64);
  const ScalingStudy weak = run_scaling_study(job.model, tp2, topology_for, {8, 16, 20}, strategies, true, IterationOptions{});
  ASSERT_TRUE(weak.rows[0].cells[1].result.has_value());
  EXPECT_NEAR(weak.rows[0].cells[1].result->tokens_per_second * weak.rows[0].cells[1].result->iteration_time.seconds(),
              128.0 * 2048, 1e-6);
  EXPECT_FALSE(weak.rows[0].cells[2].result.has_value());
  EXPECT_FALSE(weak.rows[0].cells[2].problem.empty());
}

// HSDP shards within one node's data-parallel ranks (8 on DGX A100 at TP 1) and replicates across
// nodes: on one node it is FSDP; on four, its memory stays at FSDP-over-8's while FSDP's shrinks,
// and its all-gathers stay inside the node.
TEST(ScalingStudy, HybridShardingShardsWithinANode) {
  const TrainingWorkload job = small_case();
  auto topology_for = [&](int g) { return load_topology(job.topology_file, TopologyLoadOptions{g / 8}); };
  const std::vector<ScalingStrategy> strategies{*scaling_strategy_from("fsdp"), *scaling_strategy_from("hsdp")};
  const ScalingStudy study =
      run_scaling_study(job.model, with(job, 1, 1, 8, 64), topology_for, {8, 32}, strategies, false, IterationOptions{});
  const ScalingRow &fsdp = study.rows[0], &hsdp = study.rows[1];
  ASSERT_TRUE(hsdp.cells[0].result && hsdp.cells[1].result && fsdp.cells[1].result);
  EXPECT_EQ(hsdp.cells[0].result->iteration_time, fsdp.cells[0].result->iteration_time);
  EXPECT_EQ(hsdp.cells[1].result->peak_memory, hsdp.cells[0].result->peak_memory);
  EXPECT_LT(fsdp.cells[1].result->peak_memory, hsdp.cells[1].result->peak_memory);
  EXPECT_EQ(scaling_strategy_from("hsdp")->zero, ZeroStage::kStage3);
}

}  // namespace
}  // namespace parallax
