// Robust non-negative relative-error least squares (see robust_fit.h for the model and method).
#include "robust_fit.h"

#include "order_statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace parallax {

LinearFitProblem::LinearFitProblem(std::vector<std::string> parameter_names) : names_(std::move(parameter_names)) {
  if (names_.empty()) throw std::invalid_argument("a fit needs at least one parameter");
  std::set<std::string> seen;
  for (const std::string& name : names_) {
    if (!seen.insert(name).second) throw std::invalid_argument("parameter \"" + name + "\" is named twice");
  }
}

void LinearFitProblem::add_row(std::span<const double> coefficients, double target, double weight) {
  const std::string row = "row " + std::to_string(rows());
  if (coefficients.size() != names_.size()) {
    throw std::invalid_argument(row + ": " + std::to_string(coefficients.size()) + " coefficients for " +
                                std::to_string(names_.size()) + " parameters");
  }
  for (size_t j = 0; j < coefficients.size(); ++j) {
    if (!std::isfinite(coefficients[j])) throw std::invalid_argument(row + ": coefficient of " + names_[j] + " is not finite");
  }
  // The criterion divides by the target, so it must be a positive measurement.
  if (!std::isfinite(target) || !(target > 0)) throw std::invalid_argument(row + ": target must be finite and > 0");
  if (!std::isfinite(weight) || weight < 0) throw std::invalid_argument(row + ": weight must be finite and >= 0");
  x_.insert(x_.end(), coefficients.begin(), coefficients.end());
  targets_.push_back(target);
  weights_.push_back(weight);
}

size_t RobustFitResult::index(const std::string& name) const {
  auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) throw std::out_of_range("no fitted parameter named \"" + name + "\"");
  return static_cast<size_t>(it - names.begin());
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Consistency factor of the MAD for a normal law: 1 / Φ⁻¹(3/4).
constexpr double kMadToSigma = 1.4826;
// A unit-norm column whose distance to the span of the columns before it is below this is
// taken as a combination of them: the data cannot tell the parameters apart. √ε: beyond it the
// solution's digits are rounding noise.
constexpr double kRankTolerance = 1.5e-8;

// A small dense matrix, column-major, for the n×n work of NNLS (n ≤ a few tens).
struct Matrix {
  size_t rows = 0, cols = 0;
  std::vector<double> v;
  Matrix(size_t r, size_t c) : rows(r), cols(c), v(r * c, 0.0) {}
  double& operator()(size_t i, size_t j) { return v[j * rows + i]; }
  double operator()(size_t i, size_t j) const { return v[j * rows + i]; }
};

// Householder QR of `a` (rows ≥ cols, full column rank): overwrites `a`'s upper triangle with
// R and applies Qᵀ to `b`.
void householder_qr(Matrix& a, std::vector<double>& b) {
  for (size_t k = 0; k < a.cols; ++k) {
    double norm = 0;
    for (size_t i = k; i < a.rows; ++i) norm = std::hypot(norm, a(i, k));
    if (norm == 0) continue;
    const double alpha = a(k, k) > 0 ? -norm : norm;
    std::vector<double> u(a.rows - k);
    for (size_t i = k; i < a.rows; ++i) u[i - k] = a(i, k);
    u[0] -= alpha;
    double uu = 0;
    for (double x : u) uu += x * x;
    if (uu == 0) continue;
    for (size_t j = k; j < a.cols; ++j) {
      double dot = 0;
      for (size_t i = k; i < a.rows; ++i) dot += u[i - k] * a(i, j);
      const double f = 2 * dot / uu;
      for (size_t i = k; i < a.rows; ++i) a(i, j) -= f * u[i - k];
    }
    double dot = 0;
    for (size_t i = k; i < a.rows; ++i) dot += u[i - k] * b[i];
    const double f = 2 * dot / uu;
    for (size_t i = k; i < a.rows; ++i) b[i] -= f * u[i - k];
  }
}

// Solves the upper-triangular system R x = y given by the first `n` rows of `r`.
std::vector<double> back_substitute(const Matrix& r, const std::vector<double>& y, size_t n) {
  std::vector<double> x(n);
  for (size_t k = n; k-- > 0;) {
    double s = y[k];
    for (size_t j = k + 1; j < n; ++j) s -= r(k, j) * x[j];
    x[k] = s / r(k, k);
  }
  return x;
}

// min ‖A[:, cols] x − b‖ by QR; A's selected columns must be independent.
std::vector<double> least_squares_on(const Matrix& a, const std::vector<double>& b, const std::vector<size_t>& cols) {
  Matrix sub(a.rows, cols.size());
  for (size_t c = 0; c < cols.size(); ++c) {
    for (size_t i = 0; i < a.rows; ++i) sub(i, c) = a(i, cols[c]);
  }
  std::vector<double> rhs = b;
  householder_qr(sub, rhs);
  return back_substitute(sub, rhs, cols.size());
}

std::vector<double> gradient(const Matrix& a, const std::vector<double>& b, const std::vector<double>& x) {
  std::vector<double> residual = b;
  for (size_t j = 0; j < a.cols; ++j) {
    for (size_t i = 0; i < a.rows; ++i) residual[i] -= a(i, j) * x[j];
  }
  std::vector<double> g(a.cols, 0.0);
  for (size_t j = 0; j < a.cols; ++j) {
    for (size_t i = 0; i < a.rows; ++i) g[j] += a(i, j) * residual[i];
  }
  return g;
}

// Lawson–Hanson NNLS: min ‖A x − b‖ subject to x ≥ 0. `free` returns the passive set (the
// parameters not held at 0 by the constraint). A has full column rank (checked by the caller),
// so every subproblem is well posed.
std::vector<double> nnls(const Matrix& a, const std::vector<double>& b, std::vector<bool>& free) {
  const size_t n = a.cols;
  std::vector<double> x(n, 0.0);
  free.assign(n, false);
  double scale = 0;
  for (double v : a.v) scale = std::max(scale, std::fabs(v));
  double b_norm = 0;
  for (double v : b) b_norm = std::hypot(b_norm, v);
  // A gradient component below this is rounding, not a direction that lowers the residual.
  const double tolerance = 10 * std::numeric_limits<double>::epsilon() * static_cast<double>(n) * scale *
                           std::max(1.0, b_norm);
  // Lawson and Hanson bound the outer loop by 3n; it ends far sooner on these problems.
  std::vector<bool> refused(n, false);  // entered the passive set and left at once (rounding)
  for (size_t outer = 0; outer < 3 * n + 3; ++outer) {
    std::vector<double> g = gradient(a, b, x);
    size_t enter = n;
    for (size_t j = 0; j < n; ++j) {
      if (!free[j] && !refused[j] && g[j] > tolerance && (enter == n || g[j] > g[enter])) enter = j;
    }
    if (enter == n) break;
    free[enter] = true;
    bool first_step = true;
    for (;;) {
      std::vector<size_t> cols;
      for (size_t j = 0; j < n; ++j) {
        if (free[j]) cols.push_back(j);
      }
      std::vector<double> sub = least_squares_on(a, b, cols);
      std::vector<double> s(n, 0.0);
      bool feasible = true;
      for (size_t c = 0; c < cols.size(); ++c) {
        s[cols[c]] = sub[c];
        if (!(sub[c] > 0)) feasible = false;
      }
      if (feasible) {
        x = s;
        break;
      }
      if (first_step && !(s[enter] > 0)) {
        // The entering column's own component came out non-positive: its positive gradient was
        // rounding. Leave it out until the solution next changes.
        free[enter] = false;
        refused[enter] = true;
        break;
      }
      first_step = false;
      // Step from x towards s until the first free component reaches 0.
      double step = 1;
      size_t blocking = n;
      for (size_t j : cols) {
        if (!(s[j] > 0)) {
          const double t = x[j] / (x[j] - s[j]);
          if (t < step) {
            step = t;
            blocking = j;
          }
        }
      }
      for (size_t j = 0; j < n; ++j) x[j] += step * (s[j] - x[j]);
      if (blocking != n) x[blocking] = 0;
      for (size_t j : cols) {
        if (x[j] <= 0) {
          x[j] = 0;
          free[j] = false;
        }
      }
    }
    if (free[enter]) std::fill(refused.begin(), refused.end(), false);
  }
  return x;
}

// One weighted NNLS solve and what the standard errors need from it.
struct Solve {
  std::vector<double> theta;
  std::vector<bool> free;
  std::vector<double> column_scale;  // ‖column j of diag(√w/t) X‖
  Matrix r{0, 0};                    // the n×n triangle of the scaled system
  size_t rows_used = 0;
};

Solve solve_weighted(const LinearFitProblem& p, const std::vector<double>& weights, const std::string& context) {
  const size_t n = p.parameters(), m = p.rows();
  Solve out;
  for (size_t i = 0; i < m; ++i) out.rows_used += weights[i] > 0;
  if (out.rows_used < n) {
    throw UnderdeterminedFitError("", std::to_string(out.rows_used) + " usable rows" + context + " for " +
                                          std::to_string(n) + " parameters: the fit is underdetermined");
  }
  out.column_scale.assign(n, 0.0);
  for (size_t i = 0; i < m; ++i) {
    if (!(weights[i] > 0)) continue;
    const double row_scale = std::sqrt(weights[i]) / p.target(i);
    for (size_t j = 0; j < n; ++j) out.column_scale[j] = std::hypot(out.column_scale[j], row_scale * p.coefficient(i, j));
  }
  for (size_t j = 0; j < n; ++j) {
    if (out.column_scale[j] == 0) {
      const std::string& name = p.parameter_names()[j];
      throw UnderdeterminedFitError(name, "parameter \"" + name + "\" has a zero coefficient on every usable row" +
                                              context + ": no measurement determines it");
    }
  }
  // Givens rotations fold each scaled row into (R, z); the residual norm is not needed.
  Matrix r(n, n);
  std::vector<double> z(n, 0.0), a(n);
  for (size_t i = 0; i < m; ++i) {
    if (!(weights[i] > 0)) continue;
    const double row_scale = std::sqrt(weights[i]) / p.target(i);
    for (size_t j = 0; j < n; ++j) a[j] = row_scale * p.coefficient(i, j) / out.column_scale[j];
    double beta = std::sqrt(weights[i]);
    for (size_t j = 0; j < n; ++j) {
      if (a[j] == 0) continue;
      const double h = std::hypot(r(j, j), a[j]);
      const double c = r(j, j) / h, s = a[j] / h;
      r(j, j) = h;
      for (size_t k = j + 1; k < n; ++k) {
        const double rjk = r(j, k);
        r(j, k) = c * rjk + s * a[k];
        a[k] = -s * rjk + c * a[k];
      }
      const double zj = z[j];
      z[j] = c * zj + s * beta;
      beta = -s * zj + c * beta;
    }
  }
  for (size_t j = 0; j < n; ++j) {
    if (std::fabs(r(j, j)) >= kRankTolerance) continue;
    // Column j ≈ Σ_k c_k column k over k < j, with R[0:j, 0:j] c = R[0:j, j]; name the columns
    // that take part (the columns are unit-norm, so |c_k| compares them).
    std::vector<double> rhs(j);
    for (size_t k = 0; k < j; ++k) rhs[k] = r(k, j);
    const std::vector<double> combination = back_substitute(r, rhs, j);
    std::string others;
    for (size_t k = 0; k < j; ++k) {
      if (std::fabs(combination[k]) > 1e-6) others += (others.empty() ? "" : ", ") + p.parameter_names()[k];
    }
    const std::string& name = p.parameter_names()[j];
    throw UnderdeterminedFitError(name, "parameter \"" + name + "\" is a linear combination of " +
                                            (others.empty() ? std::string("the others") : others) + context +
                                            ": the measurements cannot tell them apart");
  }
  std::vector<double> phi = nnls(r, z, out.free);
  out.theta.resize(n);
  for (size_t j = 0; j < n; ++j) out.theta[j] = phi[j] / out.column_scale[j];
  out.r = std::move(r);
  return out;
}

std::vector<double> relative_residuals(const LinearFitProblem& p, const std::vector<double>& theta) {
  std::vector<double> res(p.rows());
  for (size_t i = 0; i < p.rows(); ++i) {
    double predicted = 0;
    for (size_t j = 0; j < p.parameters(); ++j) predicted += p.coefficient(i, j) * theta[j];
    res[i] = (predicted - p.target(i)) / p.target(i);
  }
  return res;
}

// 1.4826 · median |r| over the rows with a prior weight: the MAD of regression residuals,
// taken about 0 (not about their median) because the weights judge r itself, as MASS::rlm does.
// About the median, two tight clusters of residuals (a systematic misfit) would give a MAD of 0
// and every row would be rejected.
double robust_scale_of(const std::vector<double>& residuals, const LinearFitProblem& p) {
  std::vector<double> magnitudes;
  for (size_t i = 0; i < p.rows(); ++i) {
    if (p.weight(i) > 0) magnitudes.push_back(std::fabs(residuals[i]));
  }
  return kMadToSigma * median_of(std::move(magnitudes));
}

double huber_weight(double u, double k) { return std::fabs(u) <= k ? 1.0 : k / std::fabs(u); }

double bisquare_weight(double u, double c) {
  if (!(std::fabs(u) < c)) return 0.0;
  const double q = 1 - (u / c) * (u / c);
  return q * q;
}

// The largest change of a parameter between two solves, in units of the largest parameter's
// contribution to the relative residuals (θ_j·‖column j‖), so that seconds and seconds per
// byte are compared on one scale.
double relative_change(const std::vector<double>& before, const std::vector<double>& after,
                       const std::vector<double>& column_scale) {
  double largest = 0, change = 0;
  for (size_t j = 0; j < after.size(); ++j) {
    largest = std::max(largest, std::fabs(after[j]) * column_scale[j]);
    change = std::max(change, std::fabs(after[j] - before[j]) * column_scale[j]);
  }
  return largest > 0 ? change / largest : change;
}

// σ²[(XᵀWX)⁻¹]_jj for the free parameters: the free columns of R, re-triangularised, give
// XᵀWX restricted to them as R_Fᵀ R_F in scaled coordinates.
std::vector<double> standard_errors(const Solve& s, double sigma2) {
  const size_t n = s.theta.size();
  std::vector<double> se(n, kNaN);
  std::vector<size_t> cols;
  for (size_t j = 0; j < n; ++j) {
    if (s.free[j]) cols.push_back(j);
  }
  if (cols.empty() || !std::isfinite(sigma2)) return se;
  const size_t f = cols.size();
  Matrix rf(n, f);
  for (size_t c = 0; c < f; ++c) {
    for (size_t i = 0; i < n; ++i) rf(i, c) = s.r(i, cols[c]);
  }
  std::vector<double> unused(n, 0.0);
  householder_qr(rf, unused);
  // (R_FᵀR_F)⁻¹ = R_F⁻¹ R_F⁻ᵀ: its diagonal is the squared norm of each row of R_F⁻¹.
  Matrix inverse(f, f);
  for (size_t col = 0; col < f; ++col) {
    std::vector<double> unit(f, 0.0);
    unit[col] = 1;
    std::vector<double> x = back_substitute(rf, unit, f);
    for (size_t i = 0; i < f; ++i) inverse(i, col) = x[i];
  }
  for (size_t c = 0; c < f; ++c) {
    double sum = 0;
    for (size_t k = 0; k < f; ++k) sum += inverse(c, k) * inverse(c, k);
    se[cols[c]] = std::sqrt(sigma2 * sum) / s.column_scale[cols[c]];
  }
  return se;
}

void check_options(const RobustFitOptions& o) {
  if (o.max_iterations < 0 || o.huber_iterations < 0) throw std::invalid_argument("iteration counts must be >= 0");
  if (!(o.huber_k > 0) || !(o.tukey_c > 0)) throw std::invalid_argument("Huber k and Tukey c must be > 0");
  if (!(o.tolerance > 0) || !(o.min_scale > 0)) throw std::invalid_argument("tolerance and min_scale must be > 0");
}

}  // namespace

RobustFitResult fit_robust(const LinearFitProblem& problem, const RobustFitOptions& options) {
  check_options(options);
  const size_t m = problem.rows();
  std::vector<double> prior(m), robust(m, 1.0), used(m);
  for (size_t i = 0; i < m; ++i) prior[i] = problem.weight(i);

  Solve current = solve_weighted(problem, prior, "");
  const std::vector<double> first_scale = current.column_scale;
  RobustFitResult result;
  result.converged = true;
  if (options.loss != RobustLoss::kNone) {
    result.converged = false;
    bool bisquare = options.loss == RobustLoss::kTukeyBisquare && options.huber_iterations == 0;
    int huber_done = 0;
    while (result.iterations < options.max_iterations) {
      ++result.iterations;
      const std::vector<double> res = relative_residuals(problem, current.theta);
      result.robust_scale = std::max(robust_scale_of(res, problem), options.min_scale);
      for (size_t i = 0; i < m; ++i) {
        const double u = res[i] / result.robust_scale;
        robust[i] = bisquare ? bisquare_weight(u, options.tukey_c) : huber_weight(u, options.huber_k);
        used[i] = prior[i] * robust[i];
      }
      Solve next = solve_weighted(problem, used, " after rejecting outliers");
      const double change = relative_change(current.theta, next.theta, first_scale);
      current = std::move(next);
      if (!bisquare) ++huber_done;
      const bool settled = change <= options.tolerance;
      if (options.loss == RobustLoss::kTukeyBisquare && !bisquare) {
        // The Huber start ends when it settles or has had its iterations; the bisquare then
        // rejects what lies far outside the now reliable fit.
        if (settled || huber_done >= options.huber_iterations) bisquare = true;
        continue;
      }
      if (settled) {
        result.converged = true;
        break;
      }
    }
  }

  const size_t n = problem.parameters();
  result.names = problem.parameter_names();
  result.theta = current.theta;
  result.at_bound.resize(n);
  for (size_t j = 0; j < n; ++j) result.at_bound[j] = !current.free[j];
  result.robust_weight = robust;
  result.weight.resize(m);
  for (size_t i = 0; i < m; ++i) {
    result.weight[i] = prior[i] * robust[i];
    if (prior[i] > 0 && robust[i] == 0) result.rejected_rows.push_back(i);
  }
  result.relative_residual = relative_residuals(problem, result.theta);
  double weighted_sq = 0, weight_sum = 0;
  std::vector<double> abs_used;
  for (size_t i = 0; i < m; ++i) {
    if (!(result.weight[i] > 0)) continue;
    weighted_sq += result.weight[i] * result.relative_residual[i] * result.relative_residual[i];
    weight_sum += result.weight[i];
    abs_used.push_back(std::fabs(result.relative_residual[i]));
  }
  result.rows_used = abs_used.size();
  result.rms_relative_residual = std::sqrt(weighted_sq / weight_sum);
  result.median_abs_relative_residual = median_of(abs_used);
  size_t free_count = 0;
  for (size_t j = 0; j < n; ++j) free_count += current.free[j];
  const double dof = static_cast<double>(result.rows_used) - static_cast<double>(free_count);
  result.standard_error = standard_errors(current, dof > 0 ? weighted_sq / dof : kNaN);
  return result;
}

}  // namespace parallax
