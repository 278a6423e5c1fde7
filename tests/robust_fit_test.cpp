// The robust non-negative least-squares solver: textbook simple regression, recovery of a known
// α/β from noisy ring-like timings with gross outliers, the non-negativity bound, and the errors
// for systems that cannot be solved.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <numbers>
#include <numeric>
#include <random>

#include "robust_fit.h"

namespace parallax {
namespace {

// Random numbers that are the same on every standard library: std::mt19937_64's sequence is
// fixed by the standard, but the distributions are not, so uniform and normal draws are made
// here from its raw 64-bit output.
class PortableRandom {
 public:
  explicit PortableRandom(uint64_t seed) : engine_(seed) {}
  /// Uniform in (0, 1): the top 53 bits, offset by half a step so that 0 never comes out.
  double uniform() { return (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-53; }
  /// Standard normal by Box–Muller (both values of a pair used).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 2.0 * std::numbers::pi * uniform();
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }
  /// Uniform integer in [0, n); the modulo bias (n / 2⁶⁴) is immaterial here.
  size_t below(size_t n) { return static_cast<size_t>(engine_() % n); }

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0;
};

TEST(RobustFit, SimpleRegressionMatchesTheTextbook) {
  // Ordinary least squares of t = a + b·x on m points has the closed form (e.g. Montgomery,
  // Peck & Vining, "Introduction to Linear Regression Analysis", §2.2–2.3):
  //   x̄ = Σx/m, t̄ = Σt/m, Sxx = Σ(x − x̄)², Sxt = Σ(x − x̄)(t − t̄),
  //   b = Sxt / Sxx, a = t̄ − b·x̄,
  //   s² = Σ(t − a − b·x)² / (m − 2),
  //   se(b) = √(s² / Sxx), se(a) = √(s² (1/m + x̄² / Sxx)).
  // The solver minimises Σ w (pred − t)² / t²; a prior weight w = t² makes that Σ (pred − t)²,
  // i.e. uniform weights on absolute residuals. Then XᵀWX = XᵀX with W = w / t² = 1, and its
  // σ² = Σ w r² / (m − 2) = Σ (pred − t)² / (m − 2) = s², so σ²(XᵀX)⁻¹ is the textbook covariance.
  const std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::vector<double> t = {3.1, 4.9, 7.2, 8.8, 11.1, 13.2, 14.8, 17.1, 19.0, 20.9};
  const double m = static_cast<double>(x.size());
  const double x_bar = std::accumulate(x.begin(), x.end(), 0.0) / m;
  const double t_bar = std::accumulate(t.begin(), t.end(), 0.0) / m;
  double sxx = 0, sxt = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - x_bar) * (x[i] - x_bar);
    sxt += (x[i] - x_bar) * (t[i] - t_bar);
  }
  const double b = sxt / sxx, a = t_bar - b * x_bar;
  double sse = 0;
  for (size_t i = 0; i < x.size(); ++i) sse += (t[i] - a - b * x[i]) * (t[i] - a - b * x[i]);
  const double s2 = sse / (m - 2);
  const double se_b = std::sqrt(s2 / sxx), se_a = std::sqrt(s2 * (1 / m + x_bar * x_bar / sxx));
  // For these numbers: b = 1.98848…, a = 1.06…; both positive, so the bound θ ≥ 0 is inactive.
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);

  LinearFitProblem problem({"intercept", "slope"});
  for (size_t i = 0; i < x.size(); ++i) problem.add_row({1.0, x[i]}, t[i], t[i] * t[i]);
  RobustFitResult fit = fit_robust(problem, RobustFitOptions{.loss = RobustLoss::kNone});
  EXPECT_NEAR(fit.theta[fit.index("intercept")], a, 1e-12);
  EXPECT_NEAR(fit.theta[fit.index("slope")], b, 1e-12);
  EXPECT_NEAR(fit.standard_error[0], se_a, 1e-12);
  EXPECT_NEAR(fit.standard_error[1], se_b, 1e-12);
  EXPECT_FALSE(fit.at_bound[0]);
  EXPECT_FALSE(fit.at_bound[1]);
  EXPECT_TRUE(fit.converged);
  EXPECT_EQ(fit.iterations, 0);
  EXPECT_EQ(fit.rows_used, x.size());
  EXPECT_TRUE(fit.rejected_rows.empty());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(fit.relative_residual[i], (a + b * x[i] - t[i]) / t[i], 1e-12);
  }
}

// A ring-like design: t = k1·α + k2·S/β over S = 8 B … 1 GiB in steps of 2, for three ring
// sizes n ∈ {2, 8, 64} with ring all-reduce's step counts k1 = 2(n−1), k2 = 2(n−1)/n. The
// unknowns are θ = (α, 1/β).
struct RingDesign {
  LinearFitProblem problem{{"alpha", "inverse_beta"}};
  std::vector<size_t> outliers;  // rows made slower, ascending
};

constexpr double kAlpha = 5e-6;    // 5 µs per step
constexpr double kBeta = 100e9;    // 100 GB/s

RingDesign ring_design(uint64_t seed, double noise, double outlier_fraction) {
  PortableRandom random(seed);
  std::vector<std::vector<double>> rows;
  std::vector<double> times;
  for (int n : {2, 8, 64}) {
    const double k1 = 2.0 * (n - 1), k2 = 2.0 * (n - 1) / n;
    for (double size = 8; size <= 1073741824.0; size *= 2) {
      rows.push_back({k1, k2 * size});
      times.push_back((k1 * kAlpha + k2 * size / kBeta) * (1 + noise * random.normal()));
    }
  }
  RingDesign d;
  // Exactly round(fraction · m) distinct rows, chosen by a partial Fisher–Yates shuffle.
  std::vector<size_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t outliers = static_cast<size_t>(std::lround(outlier_fraction * static_cast<double>(rows.size())));
  for (size_t i = 0; i < outliers; ++i) {
    std::swap(order[i], order[i + random.below(order.size() - i)]);
    d.outliers.push_back(order[i]);
    times[order[i]] *= 3 + 5 * random.uniform();  // 3× to 8× slower
  }
  std::sort(d.outliers.begin(), d.outliers.end());
  for (size_t i = 0; i < rows.size(); ++i) d.problem.add_row(rows[i], times[i]);
  return d;
}

TEST(RobustFit, RecoversAlphaAndBetaDespiteOutliers) {
  // 28 sizes (2³ … 2³⁰) × 3 ring sizes = 84 rows; 5 % of them (4 rows) are 3–8× slower.
  for (uint64_t seed : {1u, 2u, 3u, 42u, 2024u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RingDesign d = ring_design(seed, 0.01, 0.05);
    ASSERT_EQ(d.problem.rows(), 84u);
    ASSERT_EQ(d.outliers.size(), 4u);
    RobustFitResult fit = fit_robust(d.problem);
    EXPECT_TRUE(fit.converged);
    const double alpha = fit.theta[fit.index("alpha")];
    const double beta = 1 / fit.theta[fit.index("inverse_beta")];
    EXPECT_NEAR(alpha / kAlpha, 1.0, 0.05);
    EXPECT_NEAR(beta / kBeta, 1.0, 0.02);
    // Every outlier is rejected (its relative residual is 1/f − 1 ≤ −2/3, ≥ 60 robust σ away),
    // and the 1 % noise leaves the median |residual| near 0.6745 × 1 %.
    for (size_t row : d.outliers) EXPECT_EQ(fit.robust_weight[row], 0.0) << "row " << row;
    EXPECT_GE(fit.rejected_rows.size(), 4u);
    EXPECT_LE(fit.rejected_rows.size(), 6u);  // at most a couple of > 4.7σ noise draws besides
    EXPECT_LT(fit.median_abs_relative_residual, 0.012);
    EXPECT_LT(fit.rms_relative_residual, 0.02);
    EXPECT_NEAR(fit.robust_scale, 0.01, 0.004);
    // The standard errors are those of 1 % noise on ~80 rows: a fraction of a percent, and the
    // truth lies within a few of them.
    EXPECT_LT(fit.standard_error[0] / alpha, 0.01);
    EXPECT_LT(fit.standard_error[1] / fit.theta[1], 0.01);
    EXPECT_LT(std::fabs(alpha - kAlpha), 5 * fit.standard_error[0]);
  }
}

TEST(RobustFit, OneSlowPointDoesNotMoveTheFit) {
  RingDesign clean = ring_design(7, 0.01, 0.0);
  RobustFitResult reference = fit_robust(clean.problem);
  // The same rows, one of them (a 1 MiB point of the 8-ring) measured 5× slower.
  LinearFitProblem spoiled({"alpha", "inverse_beta"});
  const size_t slow = 28 + 17;
  for (size_t i = 0; i < clean.problem.rows(); ++i) {
    spoiled.add_row({clean.problem.coefficient(i, 0), clean.problem.coefficient(i, 1)},
                    clean.problem.target(i) * (i == slow ? 5.0 : 1.0));
  }
  RobustFitResult fit = fit_robust(spoiled);
  EXPECT_EQ(fit.robust_weight[slow], 0.0);
  ASSERT_NE(std::find(fit.rejected_rows.begin(), fit.rejected_rows.end(), slow), fit.rejected_rows.end());
  // What is left of the difference is that the reference still holds the noisy row: one of 84
  // rows with 1 % noise moves a parameter by about 1 %/84 ≈ 1e-4.
  const double robust_shift = std::max(std::fabs(fit.theta[0] / reference.theta[0] - 1.0),
                                       std::fabs(fit.theta[1] / reference.theta[1] - 1.0));
  EXPECT_LT(robust_shift, 5e-4);
  // Plain least squares is pulled by the same point. Relative errors already bound a slow
  // point's residual (1/5 − 1 = −0.8, never below −1), so the pull is only ~0.1–0.2 %, but the
  // bisquare removes even that.
  RobustFitResult plain = fit_robust(spoiled, RobustFitOptions{.loss = RobustLoss::kNone});
  const double plain_shift = std::max(std::fabs(plain.theta[0] / reference.theta[0] - 1.0),
                                      std::fabs(plain.theta[1] / reference.theta[1] - 1.0));
  EXPECT_GT(plain_shift, 5 * robust_shift);
}

TEST(RobustFit, NonNegativeBoundHoldsWhenTheTruthIsZero) {
  // t = S/β with no latency, but the small sizes measured 2 % fast and the large ones 2 % slow:
  // unconstrained, the intercept comes out negative. With θ ≥ 0 it must stay at 0, and the slope
  // is then the one-parameter fit: minimise Σ (x_i·b / t_i − 1)²  ⇒  b = Σ q_i / Σ q_i² with
  // q_i = x_i / t_i.
  LinearFitProblem problem({"alpha", "inverse_beta"});
  std::vector<double> xs, ts;
  for (double size = 1024; size <= 1048576.0; size *= 2) {
    const double t = size / kBeta * (size < 32768 ? 0.98 : 1.02);
    xs.push_back(size);
    ts.push_back(t);
    problem.add_row({1.0, size}, t);
  }
  // The unconstrained relative fit, from its 2×2 normal equations with rows (1, x)/t and
  // right-hand side 1: [Σ1/t² Σx/t²; Σx/t² Σx²/t²] θ = [Σ1/t; Σx/t].
  double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    s11 += 1 / (ts[i] * ts[i]);
    s12 += xs[i] / (ts[i] * ts[i]);
    s22 += xs[i] * xs[i] / (ts[i] * ts[i]);
    r1 += 1 / ts[i];
    r2 += xs[i] / ts[i];
  }
  const double unconstrained_alpha = (r1 * s22 - r2 * s12) / (s11 * s22 - s12 * s12);
  ASSERT_LT(unconstrained_alpha, 0);
  double sum_q = 0, sum_q2 = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    sum_q += xs[i] / ts[i];
    sum_q2 += (xs[i] / ts[i]) * (xs[i] / ts[i]);
  }

  RobustFitResult fit = fit_robust(problem, RobustFitOptions{.loss = RobustLoss::kNone});
  EXPECT_EQ(fit.theta[0], 0.0);
  EXPECT_TRUE(fit.at_bound[0]);
  EXPECT_TRUE(std::isnan(fit.standard_error[0]));
  EXPECT_FALSE(fit.at_bound[1]);
  EXPECT_NEAR(fit.theta[1] / (sum_q / sum_q2), 1.0, 1e-12);
  EXPECT_TRUE(std::isfinite(fit.standard_error[1]));

  // The robust fit keeps the bound too.
  RobustFitResult robust = fit_robust(problem);
  EXPECT_EQ(robust.theta[0], 0.0);
  EXPECT_TRUE(robust.at_bound[0]);
}

TEST(RobustFit, NonNegativeSolutionsSatisfyTheOptimalityConditions) {
  // Karush–Kuhn–Tucker conditions of min f(θ) = Σ w_i ((Xθ)_i − t_i)² / t_i² subject to θ ≥ 0:
  // θ ≥ 0; ∂f/∂θ_j = 0 where θ_j > 0 and ≥ 0 where θ_j = 0. Checked on random problems whose
  // truth has zeros and whose targets are perturbed by ±30 %, so that the bound is often active.
  // The gradient is compared after scaling column j to unit norm (g_j / ‖column j‖), so 1e-9
  // means "zero" whatever the column's unit.
  PortableRandom random(20240611);
  int bound_hits = 0;
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial) + " of seed 20240611");
    const size_t n = 2 + random.below(5), m = n + 3 + random.below(30);
    std::vector<std::string> names;
    for (size_t j = 0; j < n; ++j) names.push_back("p" + std::to_string(j));
    std::vector<double> truth(n);
    for (double& v : truth) v = random.uniform() < 0.3 ? 0.0 : random.uniform() * std::pow(10.0, -3.0 * random.uniform());
    LinearFitProblem problem(names);
    std::vector<std::vector<double>> xs;
    for (size_t i = 0; i < m; ++i) {
      std::vector<double> x(n);
      for (double& v : x) v = random.uniform() < 0.3 ? 0.0 : random.uniform() * std::pow(10.0, 3.0 * random.uniform());
      x[i % n] += 1.0;  // every column non-zero somewhere
      double t = 1e-6;
      for (size_t j = 0; j < n; ++j) t += x[j] * truth[j];
      t *= 0.7 + 0.6 * random.uniform();
      problem.add_row(x, t, 0.5 + random.uniform());
      xs.push_back(x);
    }
    RobustFitResult fit;
    try {
      fit = fit_robust(problem, RobustFitOptions{.loss = RobustLoss::kNone});
    } catch (const UnderdeterminedFitError&) {
      continue;  // a random design may be (nearly) rank deficient; that has its own test
    }
    for (size_t j = 0; j < n; ++j) {
      ASSERT_GE(fit.theta[j], 0.0);
      double gradient = 0, norm = 0;
      for (size_t i = 0; i < m; ++i) {
        const double w = problem.weight(i) / (problem.target(i) * problem.target(i));
        double predicted = 0;
        for (size_t k = 0; k < n; ++k) predicted += xs[i][k] * fit.theta[k];
        gradient += w * xs[i][j] * (predicted - problem.target(i));
        norm += w * xs[i][j] * xs[i][j];
      }
      gradient /= std::sqrt(norm);
      if (fit.at_bound[j]) {
        ++bound_hits;
        EXPECT_EQ(fit.theta[j], 0.0);
        EXPECT_GE(gradient, -1e-9) << "parameter " << j;
      } else {
        EXPECT_NEAR(gradient, 0.0, 1e-9) << "parameter " << j;
      }
    }
  }
  EXPECT_GT(bound_hits, 50);  // the bound was exercised, not just the interior
}

TEST(RobustFit, ExactDataFitExactly) {
  // No noise: every residual is rounding, the robust scale sits at its floor, nothing is rejected.
  RingDesign d = ring_design(5, 0.0, 0.0);
  RobustFitResult fit = fit_robust(d.problem);
  EXPECT_TRUE(fit.converged);
  EXPECT_TRUE(fit.rejected_rows.empty());
  EXPECT_NEAR(fit.theta[0] / kAlpha, 1.0, 1e-9);
  EXPECT_NEAR(fit.theta[1] * kBeta, 1.0, 1e-9);
  EXPECT_LT(fit.rms_relative_residual, 1e-12);
}

TEST(RobustFit, ZeroColumnIsNamed) {
  // Three link classes, but no measurement crossed the network.
  LinearFitProblem problem({"nvlink_alpha", "nvlink_inverse_beta", "network_inverse_beta"});
  for (double size : {1e3, 1e6, 1e9}) problem.add_row({2.0, size, 0.0}, 1e-6 + size / 1e11);
  try {
    fit_robust(problem);
    ADD_FAILURE() << "no error";
  } catch (const UnderdeterminedFitError& e) {
    EXPECT_EQ(e.parameter(), "network_inverse_beta");
    EXPECT_NE(std::string(e.what()).find("\"network_inverse_beta\" has a zero coefficient on every usable row"),
              std::string::npos)
        << e.what();
  }
  // A column that is non-zero only on rows of weight 0 is just as undetermined.
  LinearFitProblem weighted({"alpha", "inverse_beta"});
  weighted.add_row({1.0, 0.0}, 1.0);
  weighted.add_row({1.0, 0.0}, 1.1);
  weighted.add_row({1.0, 5.0}, 2.0, 0.0);
  try {
    fit_robust(weighted);
    ADD_FAILURE() << "no error";
  } catch (const UnderdeterminedFitError& e) {
    EXPECT_EQ(e.parameter(), "inverse_beta");
  }
}

TEST(RobustFit, UnderdeterminedSystemsAreRefused) {
  LinearFitProblem few({"a", "b", "c"});
  few.add_row({1.0, 2.0, 3.0}, 1.0);
  few.add_row({1.0, 4.0, 1.0}, 2.0);
  try {
    fit_robust(few);
    ADD_FAILURE() << "no error";
  } catch (const UnderdeterminedFitError& e) {
    EXPECT_TRUE(e.parameter().empty());
    EXPECT_NE(std::string(e.what()).find("2 usable rows for 3 parameters"), std::string::npos) << e.what();
  }
  // Two classes that every measurement crosses in the same proportion cannot be told apart.
  LinearFitProblem tied({"alpha", "pcie_inverse_beta", "nvlink_inverse_beta"});
  for (double size : {1e3, 1e6, 1e9}) tied.add_row({1.0, size, 2 * size}, 1e-6 + size / 1e10);
  try {
    fit_robust(tied);
    ADD_FAILURE() << "no error";
  } catch (const UnderdeterminedFitError& e) {
    EXPECT_EQ(e.parameter(), "nvlink_inverse_beta");
    EXPECT_NE(std::string(e.what()).find("\"nvlink_inverse_beta\" is a linear combination of pcie_inverse_beta:"),
              std::string::npos)
        << e.what();
  }
}

TEST(RobustFit, BadRowsAreRefusedWhenAdded) {
  LinearFitProblem p({"a", "b"});
  EXPECT_THROW(p.add_row({1.0}, 1.0), std::invalid_argument);
  EXPECT_THROW(p.add_row({1.0, 2.0}, 0.0), std::invalid_argument);
  EXPECT_THROW(p.add_row({1.0, 2.0}, -1.0), std::invalid_argument);
  EXPECT_THROW(p.add_row({1.0, NAN}, 1.0), std::invalid_argument);
  EXPECT_THROW(p.add_row({1.0, 2.0}, 1.0, -1.0), std::invalid_argument);
  EXPECT_EQ(p.rows(), 0u);
  EXPECT_THROW(LinearFitProblem({"a", "a"}), std::invalid_argument);
  EXPECT_THROW(LinearFitProblem({}), std::invalid_argument);
}

TEST(RobustFit, DeterministicAcrossRuns) {
  RingDesign d = ring_design(99, 0.01, 0.05);
  RobustFitResult first = fit_robust(d.problem);
  RobustFitResult second = fit_robust(d.problem);
  EXPECT_EQ(first.theta, second.theta);
  EXPECT_EQ(first.rejected_rows, second.rejected_rows);
  EXPECT_EQ(first.iterations, second.iterations);
}

}  // namespace
}  // namespace parallax
