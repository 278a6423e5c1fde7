// Fitting a constant to runs: the grid, the fit and the leave-one-source-out check against their
// closed forms on synthetic errors, and the sweeps (σ, t_dispatch, t_host) against RunValidator on real
// published rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "training/published_runs.h"
#include "training/run_validation.h"
#include "training/constant_fit.h"
#include "training/validation_plots.h"

using namespace parallax;

namespace {

const std::string kFitRepository = PARALLAX_SOURCE_DIR;
constexpr double kNotCompared = std::numeric_limits<double>::quiet_NaN();

// A row that only computes: its throughput is proportional to σ, so at σ its error is
// σ / σ_row − 1, σ_row being the σ that reproduces it exactly.
ConstantSweep compute_bound_sweep(const std::vector<double>& row_sigmas, const std::vector<double>& grid) {
  ConstantSweep sweep;
  sweep.values = grid;
  for (double s : grid) {
    std::vector<double> errors;
    for (double r : row_sigmas) errors.push_back(std::isnan(r) ? kNotCompared : s / r - 1.0);
    sweep.errors.push_back(errors);
  }
  return sweep;
}

}  // namespace

TEST(SigmaGrid, EndsIncludedInEvenSteps) {
  const std::vector<double> grid = sigma_grid(0.40, 1.00, 0.01);
  ASSERT_EQ(grid.size(), 61u);
  EXPECT_DOUBLE_EQ(grid.front(), 0.40);
  EXPECT_DOUBLE_EQ(grid.back(), 1.00);
  EXPECT_NEAR(grid[34], 0.74, 1e-12);
  EXPECT_EQ(sigma_grid(0.5, 0.5, 0.1).size(), 1u);
  EXPECT_THROW(sigma_grid(0.0, 1.0, 0.01), std::invalid_argument);
  EXPECT_THROW(sigma_grid(0.5, 1.2, 0.01), std::invalid_argument);
  EXPECT_THROW(sigma_grid(0.8, 0.5, 0.01), std::invalid_argument);
  EXPECT_THROW(sigma_grid(0.5, 0.8, 0.0), std::invalid_argument);
  // Any constant's: the host's dispatch time from 0 to 200 µs by 1, both ends included.
  const std::vector<double> us = value_grid(0, 200, 1);
  ASSERT_EQ(us.size(), 201u);
  EXPECT_DOUBLE_EQ(us.front(), 0);
  EXPECT_DOUBLE_EQ(us[74], 74);
  EXPECT_DOUBLE_EQ(us.back(), 200);
  EXPECT_THROW(value_grid(2, 1, 1), std::invalid_argument);
  EXPECT_THROW(value_grid(0, 1, 0), std::invalid_argument);
}

// Three compute-bound rows of three sources, reproduced exactly at σ 0.70, 0.74 and 0.80. The
// MAPE Σ|σ/σ_r − 1|/3 is piecewise linear with slopes ±1/σ_r: below 0.74 it falls (1/0.70 <
// 1/0.74 + 1/0.80), above it rises (1/0.70 + 1/0.74 > 1/0.80), so the fit is 0.74, MAPE
// (0.74/0.70 − 1 + 1 − 0.74/0.80)/3 = 0.044048. Held out, each source meets the σ the other two
// fit: without C the slope between 0.70 and 0.74 is 1/0.70 − 1/0.74 > 0, so 0.70 and C's error
// 1 − 0.70/0.80 = 0.125; without B likewise 0.70, B's error 1 − 0.70/0.74 = 0.054054; without A
// 0.74 (slope 1/0.74 − 1/0.80 > 0 above it), A's error 0.74/0.70 − 1 = 0.057143.
TEST(ConstantFit, LeastMapeAndEachSourceHeldOutMatchTheClosedForm) {
  const ConstantSweep sweep = compute_bound_sweep({0.70, 0.74, 0.80}, sigma_grid(0.60, 0.90, 0.01));
  const ConstantFit fit = fit_constant_to_runs(sweep, {"A", "B", "C"});
  EXPECT_EQ(fit.rows, 3u);
  EXPECT_NEAR(fit.value, 0.74, 1e-9);
  EXPECT_NEAR(fit.mape, (0.74 / 0.70 - 1 + 1 - 0.74 / 0.80) / 3, 1e-9);
  EXPECT_NEAR(fit.median_signed, 0.0, 1e-9);
  EXPECT_NEAR(fit.median_abs, 0.74 / 0.70 - 1, 1e-9);  // the middle of 0.0571, 0, 0.075
  ASSERT_EQ(fit.mape_by_value.size(), sweep.values.size());
  ASSERT_EQ(fit.sources.size(), 3u);
  const double own[] = {0.70, 0.74, 0.80}, others[] = {0.74, 0.70, 0.70};
  const double held_out[] = {0.74 / 0.70 - 1, 1 - 0.70 / 0.74, 1 - 0.70 / 0.80};
  for (size_t i = 0; i < 3; ++i) {
    const SourceHoldOut& h = fit.sources[i];
    EXPECT_EQ(h.source, std::string(1, static_cast<char>('A' + i)));
    EXPECT_EQ(h.rows, 1u);
    EXPECT_NEAR(h.own_value, own[i], 1e-9) << h.source;
    EXPECT_NEAR(h.own_mape, 0.0, 1e-9) << h.source;
    EXPECT_NEAR(h.others_value, others[i], 1e-9) << h.source;
    EXPECT_NEAR(h.held_out_mape, held_out[i], 1e-9) << h.source;
  }
}

TEST(ConstantFit, RowsNotComparedAreLeftOutAndOneSourceHasNoHoldOut) {
  const ConstantSweep sweep = compute_bound_sweep({0.80, kNotCompared, 0.80}, sigma_grid(0.60, 0.90, 0.01));
  const ConstantFit fit = fit_constant_to_runs(sweep, {"A", "B", "A"});
  EXPECT_EQ(fit.rows, 2u);
  EXPECT_NEAR(fit.value, 0.80, 1e-9);
  EXPECT_NEAR(fit.mape, 0.0, 1e-9);
  ASSERT_EQ(fit.sources.size(), 1u);  // B has no compared row
  EXPECT_EQ(fit.sources[0].rows, 2u);
  EXPECT_TRUE(std::isnan(fit.sources[0].others_value));
  EXPECT_TRUE(std::isnan(fit.sources[0].held_out_mape));
}

TEST(ConstantFit, BadSweepsAreRefused) {
  EXPECT_THROW(fit_constant_to_runs(ConstantSweep{}, {}), std::invalid_argument);
  const ConstantSweep sweep = compute_bound_sweep({0.7, 0.8}, {0.7, 0.8});
  EXPECT_THROW(fit_constant_to_runs(sweep, {"A"}), std::invalid_argument);
  EXPECT_THROW(fit_constant_to_runs(compute_bound_sweep({kNotCompared}, {0.7, 0.8}), {"A"}), std::invalid_argument);
}

// On real rows (llm-foundry's H100 FP8 table, 7 rows): the sweep gives what RunValidator gives
// at each σ, whatever the thread count, and no row's predicted throughput falls as σ rises.
TEST(SustainedFractionSweep, EqualsTheValidatorAtEachSigmaOnAnyThreadCount) {
  const std::vector<PublishedRun> runs =
      read_published_runs(kFitRepository + "/workloads/validation/mpt-h100-fp8-holdout.json", kFitRepository + "/workloads/models");
  const std::string topologies = kFitRepository + "/topologies";
  const std::vector<double> grid = {0.60, 0.74, 0.90};
  const ConstantSweep one = sweep_sustained_fraction(runs, topologies, {}, grid, 1);
  size_t calls = 0;
  const ConstantSweep three = sweep_sustained_fraction(runs, topologies, {}, grid, 3, [&](size_t done, size_t total) {
    ++calls;
    EXPECT_EQ(total, grid.size());
    EXPECT_LE(done, total);
  });
  EXPECT_EQ(calls, grid.size());
  ASSERT_EQ(one.errors.size(), grid.size());
  RunValidator at_default(topologies, 0.74);
  for (size_t r = 0; r < runs.size(); ++r) {
    const RunPrediction p = at_default.predict(runs[r]);
    ASSERT_TRUE(p.problem.empty()) << runs[r].id << ": " << p.problem;
    EXPECT_EQ(one.errors[1][r], p.error) << runs[r].id;
    for (size_t s = 0; s < grid.size(); ++s) EXPECT_EQ(one.errors[s][r], three.errors[s][r]) << runs[r].id;
    EXPECT_LT(one.errors[0][r], one.errors[1][r]) << runs[r].id;
    EXPECT_LT(one.errors[1][r], one.errors[2][r]) << runs[r].id;
  }
}

// The plots' data: rows grouped by source in name order, rows not compared left out; the fit's
// curve one line per σ with every source's MAPE beside the whole set's.
TEST(ValidationPlots, ParityDataGroupsComparedRowsBySource) {
  std::vector<PublishedRun> runs(3);
  runs[0].expected_tokens_per_sec_per_gpu = 1000;
  runs[1].expected_out_of_memory = true;
  runs[2].expected_tokens_per_sec_per_gpu = 250;
  std::vector<RunPrediction> predictions(3);
  predictions[0].predicted = 1100;
  predictions[2].predicted = 200;
  std::vector<std::string> groups;
  const std::string data = parity_data(runs, predictions, {"Zeta", "Alpha", "Alpha"}, groups);
  EXPECT_EQ(groups, (std::vector<std::string>{"Alpha", "Zeta"}));
  EXPECT_EQ(data, "# Alpha\n250 200\n\n\n# Zeta\n1000 1100\n\n\n");
  const std::string script = parity_script("v.dat", "v.png", "t", groups);
  EXPECT_NE(script.find("'v.dat' index 1 using 1:2 with points pt 7 ps 0.8 title \"Zeta\""), std::string::npos);
}

TEST(ValidationPlots, SigmaCurveHasEverySourcesMape) {
  const ConstantSweep sweep = compute_bound_sweep({0.80, 0.80}, {0.70, 0.80});
  const ConstantFit fit = fit_constant_to_runs(sweep, {"A", "B"});
  EXPECT_EQ(constant_fit_data(sweep, fit),
            "# the constant, MAPE of every row, then of each source's rows (%)\n0.7 12.5000 12.5000 12.5000\n"
            "0.8 0.0000 0.0000 0.0000\n");
  const std::string script = constant_fit_script("s.dat", "s.png", "t", "sustained fraction (sigma)", fit);
  EXPECT_NE(script.find("using 1:4 with lines lw 1.5 title \"B\""), std::string::npos);
  EXPECT_NE(script.find("set xlabel \"sustained fraction (sigma)\""), std::string::npos);
}

// The host's dispatch time over the first rows of vTrain's single-node file (small layers, where
// it matters): the sweep gives what RunValidator gives at the default and at none, whatever the
// thread count, and no row's predicted throughput rises as the host gets slower.
TEST(HostDispatchSweep, EqualsTheValidatorAndSlowsEveryRowAsItGrows) {
  std::vector<PublishedRun> runs = read_published_runs(kFitRepository + "/workloads/validation/vtrain-a100-single-node.json",
                                                       kFitRepository + "/workloads/models");
  runs.resize(6);
  const std::string topologies = kFitRepository + "/topologies";
  const std::vector<double> grid = {0, 74, 150};
  const ConstantSweep one = sweep_host_time(runs, topologies, {}, &ValidationModel::host_dispatch, 0.74, grid, 1);
  const ConstantSweep two = sweep_host_time(runs, topologies, {}, &ValidationModel::host_dispatch, 0.74, grid, 2);
  RunValidator at_default(topologies, 0.74);
  ValidationModel none;
  none.host_dispatch = Time::zero();
  RunValidator eager_free(topologies, 0.74, none);
  bool host_bound = false;
  for (size_t r = 0; r < runs.size(); ++r) {
    EXPECT_EQ(one.errors[1][r], at_default.predict(runs[r]).error) << runs[r].id;
    EXPECT_EQ(one.errors[0][r], eager_free.predict(runs[r]).error) << runs[r].id;
    for (size_t v = 0; v < grid.size(); ++v) EXPECT_EQ(one.errors[v][r], two.errors[v][r]) << runs[r].id;
    EXPECT_GE(one.errors[0][r], one.errors[1][r]) << runs[r].id;
    EXPECT_GE(one.errors[1][r], one.errors[2][r]) << runs[r].id;
    host_bound = host_bound || one.errors[2][r] < one.errors[0][r];
  }
  EXPECT_TRUE(host_bound);
}

// The host's time to issue a per-expert GEMM over two Megatron-Bridge Qwen3 MoE rows whose experts
// are issued one by one: the sweep gives what RunValidator gives at the default (55 us) and at
// none, and no row's predicted throughput rises as the host gets slower.
TEST(HostGemmIssueSweep, EqualsTheValidatorAndSlowsPerExpertRowsAsItGrows) {
  std::vector<PublishedRun> runs = read_published_runs(kFitRepository + "/workloads/validation/mbridge-qwen3-moe-dev.json",
                                                       kFitRepository + "/workloads/models");
  runs.erase(std::remove_if(runs.begin(), runs.end(),
                            [](const PublishedRun& r) { return r.id.find("30b_a3b_dgx-gb200") == std::string::npos &&
                                                               r.id.find("30b_a3b_dgx-b300") == std::string::npos; }),
             runs.end());
  ASSERT_EQ(runs.size(), 2u);
  const std::string topologies = kFitRepository + "/topologies";
  const std::vector<double> grid = {0, 55, 110};
  const ConstantSweep sweep =
      sweep_host_time(runs, topologies, {}, &ValidationModel::host_gemm_issue, 0.74, grid, 2);
  RunValidator at_default(topologies, 0.74);
  ValidationModel none;
  none.host_gemm_issue = Time::zero();
  RunValidator device_side(topologies, 0.74, none);
  for (size_t r = 0; r < runs.size(); ++r) {
    EXPECT_EQ(sweep.errors[1][r], at_default.predict(runs[r]).error) << runs[r].id;
    EXPECT_EQ(sweep.errors[0][r], device_side.predict(runs[r]).error) << runs[r].id;
    EXPECT_GT(sweep.errors[0][r], sweep.errors[2][r]) << runs[r].id;
    EXPECT_GE(sweep.errors[1][r], sweep.errors[2][r]) << runs[r].id;
  }
}
