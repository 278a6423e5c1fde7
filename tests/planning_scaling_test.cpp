// `parallax scale`'s comparisons: measured scaling points (planning/measured_scaling.h) read
// from CSV, converted to throughput by their closed forms and set beside the predictions; and
// rank orders (planning/rank_order_study.h): which orders are distinct, and where each puts
// the groups of a 16-GPU layout on two 8-GPU nodes.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "io/input_error.h"
#include "planning/measured_scaling.h"
#include "planning/rank_order_study.h"
#include "topology/topology_loader.h"
#include "training/workload_loader.h"
#include "test_support.h"

namespace parallax {
namespace {

TrainingWorkload gpt_1_3b() {
  WorkloadOverrides o;
  o.validate_layout = false;
  return load_training_workload(test::source_path("tests/data/workloads/gpt-1.3b-16xa100.json"),
                                test::source_path("workloads/models"), test::source_path("topologies"), o);
}

std::string error_of(const std::string& text) {
  try {
    parse_measured_scaling(text, "runs.csv");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(MeasuredScaling, ReadsEachQuantityWithItsStrategyAndLine) {
  const MeasuredScaling m = parse_measured_scaling(
      "# our cluster\n\ngpus, step_time_ms ,strategy\n8,1500,ddp\n16,800,\n 16 , 900 , fsdp\n", "runs.csv");
  EXPECT_EQ(m.quantity, MeasuredQuantity::kStepTimeMilliseconds);
  ASSERT_EQ(m.points.size(), 3u);
  EXPECT_EQ(m.points[0].line, 4);
  EXPECT_EQ(m.points[0].strategy, "ddp");
  EXPECT_EQ(m.points[1].strategy, "");
  EXPECT_EQ(m.points[2].gpus, 16);
  EXPECT_DOUBLE_EQ(m.points[2].value, 900);
  EXPECT_EQ(gpu_counts_with({32, 8}, m), (std::vector<int>{8, 16, 32}));
  EXPECT_EQ(strategies_missing({"ddp"}, m, "zero1"), (std::vector<std::string>{"zero1", "fsdp"}));
}

TEST(MeasuredScaling, EachZeroStageNamesTheStrategyItIs) {
  for (ZeroStage z : {ZeroStage::kStage0, ZeroStage::kStage1, ZeroStage::kStage2, ZeroStage::kStage3}) {
    EXPECT_EQ(scaling_strategy_from(scaling_strategy_name(z))->zero, z);
  }
}

TEST(MeasuredScaling, BadFilesNameTheLineAndTheReason) {
  EXPECT_EQ(error_of("# only a comment\n"), "runs.csv: no header line (e.g. \"gpus,step_time_s\")");
  EXPECT_EQ(error_of("gpus,step_time_s\n"), "runs.csv:1: no measurement after the header");
  EXPECT_EQ(error_of("gpus,seconds\n"),
            "runs.csv:1: unknown column \"seconds\" (expected gpus, strategy, and one of step_time_s, step_time_ms, "
            "tokens_per_s, tokens_per_s_per_gpu)");
  EXPECT_EQ(error_of("gpus\n8\n"), "runs.csv:1: no measured column (step_time_s, step_time_ms, tokens_per_s or tokens_per_s_per_gpu)");
  EXPECT_EQ(error_of("gpus,step_time_s,tokens_per_s\n"),
            "runs.csv:1: two measured columns; give one of step_time_s, step_time_ms, tokens_per_s, tokens_per_s_per_gpu");
  EXPECT_EQ(error_of("gpus,step_time_s\n8,1\n0,2\n"), "runs.csv:3: gpus: expected a whole number from 1 to 1048576, found \"0\"");
  EXPECT_EQ(error_of("gpus,step_time_s\n8,nan\n"), "runs.csv:2: step_time_s: expected a positive number, found \"nan\"");
  EXPECT_EQ(error_of("gpus,step_time_s\n8,-1\n"), "runs.csv:2: step_time_s: expected a positive number, found \"-1\"");
  EXPECT_EQ(error_of("gpus,step_time_s\n8\n"), "runs.csv:2: expected 2 columns, found 1");
  EXPECT_EQ(error_of("gpus,tokens_per_s,strategy\n8,1,zero4\n"),
            "runs.csv:2: strategy: \"zero4\" (expected ddp, zero1, zero2, zero3, fsdp or hsdp, or empty)");
  EXPECT_EQ(error_of("gpus,tokens_per_s\n8,1\n8,2\n"), "runs.csv:3: a second measurement of the workload's strategy at 8 GPUs");
}

// A measured step time of T seconds at g GPUs is B·s/(T·g) tokens/s per GPU; the error is the
// predicted throughput over that, minus 1.
TEST(MeasuredScaling, AttachedPointsCarryTheirThroughputAndTheErrorOfThePrediction) {
  const TrainingWorkload job = gpt_1_3b();
  auto topology_for = [&](int g) { return load_topology(job.topology_file, TopologyLoadOptions{g / 8}); };
  ParallelLayout base = job.layout;
  base.tp = base.pp = base.cp = 1;
  base.global_batch = 64;
  ScalingStudy study = run_scaling_study(job.model, base, topology_for, {8, 16}, {*scaling_strategy_from("ddp")}, false,
                                         IterationOptions{});
  const MeasuredScaling m = parse_measured_scaling("gpus,step_time_s\n8,2.0\n16,1.0\n", "runs.csv");
  attach_measurements(study, m, "ddp");
  EXPECT_EQ(study.measured_column, "step_time_s");
  for (const ScalingCell& c : study.rows[0].cells) {
    ASSERT_TRUE(c.measured && c.result);
    EXPECT_DOUBLE_EQ(c.tokens_per_step, 64.0 * 2048);
    const double measured = 64.0 * 2048 / (c.gpus == 8 ? 2.0 : 1.0) / c.gpus;
    EXPECT_DOUBLE_EQ(c.measured->tokens_per_s_per_gpu, measured);
    EXPECT_DOUBLE_EQ(*c.measured->error, c.result->tokens_per_second_per_gpu / measured - 1.0);
  }
  const MeasuredSummary s = measured_summary(study);
  EXPECT_EQ(s.compared, 2);
  const double e8 = *study.rows[0].cells[0].measured->error, e16 = *study.rows[0].cells[1].measured->error;
  EXPECT_DOUBLE_EQ(s.median_error, 0.5 * (e8 + e16));
  EXPECT_DOUBLE_EQ(s.mean_abs_error, 0.5 * (std::abs(e8) + std::abs(e16)));
  // The same runs as whole-job tokens/s give the same throughput per GPU.
  ScalingStudy again = study;
  attach_measurements(again, parse_measured_scaling("gpus,tokens_per_s\n8,65536\n", "runs.csv"), "ddp");
  EXPECT_DOUBLE_EQ(again.rows[0].cells[0].measured->tokens_per_s_per_gpu, 65536.0 / 8);
  // A point of a strategy or count the study lacks is refused with its line.
  EXPECT_THROW(attach_measurements(study, parse_measured_scaling("gpus,tokens_per_s\n24,1\n", "runs.csv"), "ddp"), InputError);
  EXPECT_THROW(attach_measurements(study, parse_measured_scaling("gpus,tokens_per_s,strategy\n8,1,zero3\n", "r.csv"), "ddp"),
               InputError);
}

TEST(RankOrders, EveryDistinctPlacementOnceTheLayoutsOwnFirst) {
  ParallelLayout l;
  l.tp = 2;
  l.dp = 2;
  l.pp = 2;
  l.rank_order = "tp-dp-pp";
  const std::vector<std::string> orders = distinct_rank_orders(l);
  ASSERT_EQ(orders.size(), 6u);  // 3! orders of the three dimensions above 1
  EXPECT_EQ(orders.front(), "tp-dp-pp-cp-ep");
  EXPECT_EQ(std::set<std::string>(orders.begin(), orders.end()).size(), 6u);
  l.dp = 1;
  EXPECT_EQ(distinct_rank_orders(l).size(), 2u);
  l.pp = 1;
  EXPECT_EQ(distinct_rank_orders(l), (std::vector<std::string>{"tp-dp-pp-cp-ep"}));
}

// 16 GPUs on two DGX A100 nodes, TP 8 · DP 2: TP innermost keeps each TP group in a node and
// sends only DP's gradients across; DP innermost puts every TP group across both nodes.
TEST(RankOrders, WhereEachOrderPutsTheGroups) {
  const TrainingWorkload job = gpt_1_3b();
  ParallelLayout l = job.layout;
  l.tp = 8;
  l.dp = 2;
  l.pp = 1;
  l.cp = 1;
  l.global_batch = 16;
  const RankOrderStudy study = run_rank_order_study(job.model, l, load_topology(job.topology_file, TopologyLoadOptions{2}),
                                                    {"tp-dp-pp", "dp-tp-pp"}, IterationOptions{});
  EXPECT_EQ(study.gpus_per_node, 8);
  ASSERT_EQ(study.cases.size(), 2u);
  for (const RankOrderCase& c : study.cases) ASSERT_TRUE(c.result.has_value()) << c.problem;
  const RankOrderCase& inside = study.cases[0];
  const RankOrderCase& across = study.cases[1];
  ASSERT_EQ(inside.dims.size(), 2u);
  EXPECT_EQ(inside.dims[0].dim, ParallelDim::kTp);
  EXPECT_EQ(inside.dims[0].nodes_spanned, 1);
  EXPECT_EQ(inside.dims[1].dim, ParallelDim::kDp);
  EXPECT_EQ(inside.dims[1].nodes_spanned, 2);
  EXPECT_EQ(inside.sent_across_nodes, inside.dims[1].sent_per_gpu);
  EXPECT_EQ(across.dims[0].nodes_spanned, 2);
  EXPECT_EQ(across.dims[1].nodes_spanned, 1);
  EXPECT_EQ(across.sent_across_nodes, across.dims[0].sent_per_gpu);
  // The same bytes either way; where they go decides the time (TP across the NICs is slower).
  EXPECT_EQ(inside.dims[0].sent_per_gpu, across.dims[0].sent_per_gpu);
  EXPECT_GT(across.result->iteration_time, inside.result->iteration_time);
  EXPECT_EQ(inside.dims[0].exposed_across_nodes, Time::zero());
  EXPECT_GT(across.dims[0].exposed_across_nodes, Time::zero());
}

}  // namespace
}  // namespace parallax
