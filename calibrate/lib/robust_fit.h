// A robust, non-negative, relative-error least-squares solver: the numerical core under the α/β
// fit. It knows nothing about links or collectives; a caller builds the linear model
//
//     t_i ≈ (X θ)_i = Σ_j X_ij θ_j,    θ ≥ 0,
//
// (θ = latencies and inverse bandwidths; X_ij = α-steps or bytes that measurement i puts on
// class j) and the solver minimises the weighted squared relative error
//
//     Σ_i w_i ((X θ)_i − t_i)² / t_i²,
//
// because measured times span six decades (8 B to GiB messages) and an absolute criterion would
// let the largest sizes decide everything.
//
// Method: the rows, scaled by √w_i / t_i, and their columns, scaled to unit norm (θ mixes
// seconds and seconds per byte, 10⁶ apart), are reduced row by row with Givens rotations to an
// n×n triangle R and right-hand side z (a QR factorisation that never stores the m×n matrix).
// Lawson–Hanson NNLS then runs on (R, z), which has the same minimiser as the full system.
// Robustness is iteratively reweighted least squares: a few Huber iterations (convex, so they
// cannot be captured by the outliers' basin), then Tukey's bisquare, whose weight is exactly 0
// beyond c = 4.685 robust standard deviations (95 % efficiency at the normal law), on residuals
// scaled by σ̂ = 1.4826·median|r_i| (the MAD of the residuals about 0, with its consistency factor
// for a normal law; re-estimated at every iteration, as MASS::rlm does). References: Lawson &
// Hanson, "Solving Least Squares Problems" (1974), ch. 23; Holland & Welsch, "Robust regression
// using iteratively reweighted least-squares" (1977); Huber & Ronchetti, "Robust Statistics"
// (2009), §7.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace parallax {

/// The rows of a fit: coefficients X (one value per parameter), a target t > 0 and a prior
/// weight w ≥ 0 per row. Units are the caller's: θ_j has the unit of t divided by the unit of
/// column j (e.g. seconds per α-step, seconds per byte).
class LinearFitProblem {
 public:
  /// One name per parameter, used in errors and reports. Throws std::invalid_argument if there
  /// are none or two are equal.
  explicit LinearFitProblem(std::vector<std::string> parameter_names);

  /// Appends a row. A weight of 0 keeps the row in the result (its residual is reported) but
  /// out of the fit. Throws std::invalid_argument if `coefficients` does not hold one value per
  /// parameter, a value is not finite, the target is not finite and > 0, or the weight is not
  /// finite and ≥ 0.
  void add_row(std::span<const double> coefficients, double target, double weight = 1.0);
  void add_row(std::initializer_list<double> coefficients, double target, double weight = 1.0) {
    add_row(std::span<const double>(coefficients.begin(), coefficients.size()), target, weight);
  }

  size_t parameters() const { return names_.size(); }
  size_t rows() const { return targets_.size(); }
  const std::vector<std::string>& parameter_names() const { return names_; }
  double coefficient(size_t row, size_t parameter) const { return x_[row * names_.size() + parameter]; }
  double target(size_t row) const { return targets_[row]; }
  double weight(size_t row) const { return weights_[row]; }

 private:
  std::vector<std::string> names_;
  std::vector<double> x_;  // row-major, rows() × parameters()
  std::vector<double> targets_;
  std::vector<double> weights_;
};

enum class RobustLoss {
  kNone,            ///< plain weighted least squares (one solve, no reweighting)
  kHuber,           ///< Huber's ψ, k = 1.345: downweights, never rejects
  kTukeyBisquare,   ///< Huber to start, then Tukey's bisquare, c = 4.685: rejects gross outliers
};

struct RobustFitOptions {
  RobustLoss loss = RobustLoss::kTukeyBisquare;
  /// Reweighting iterations at most (Huber start included).
  int max_iterations = 50;
  /// Huber iterations before switching to the bisquare (kTukeyBisquare only).
  int huber_iterations = 3;
  double huber_k = 1.345;
  double tukey_c = 4.685;
  /// Converged when no parameter moves by more than this, relative to the largest scaled
  /// parameter (parameters are compared after column scaling, so units do not matter).
  double tolerance = 1e-10;
  /// Floor of the robust scale (as a relative error). Without it, data that fit exactly (MAD 0)
  /// would make every rounding-level residual an infinite number of scales away; 1e-6 is below
  /// what any timer resolves (nccl-tests prints 4 significant digits).
  double min_scale = 1e-6;
};

/// What a fit found. Vectors indexed by parameter have parameters() entries; by row, rows().
struct RobustFitResult {
  std::vector<std::string> names;
  std::vector<double> theta;           ///< the fitted parameters, ≥ 0
  /// √(σ² [(XᵀWX)⁻¹]_jj) over the free parameters (W = w·robust weight / t²), σ² = Σ W-weighted
  /// squared residuals / (rows used − free parameters). NaN at the bound, or when no degree of
  /// freedom is left.
  std::vector<double> standard_error;
  std::vector<bool> at_bound;          ///< θ_j = 0 held by the constraint (not fitted freely)
  std::vector<double> robust_weight;   ///< final robustness weight per row in [0, 1] (1 for kNone)
  std::vector<double> weight;          ///< prior weight × robust_weight: what the final fit used
  std::vector<double> relative_residual;  ///< ((Xθ)_i − t_i) / t_i, for every row
  std::vector<size_t> rejected_rows;   ///< rows with prior weight > 0 and robust weight 0
  double rms_relative_residual = 0;    ///< √(Σ weight·r² / Σ weight) over the rows used
  double median_abs_relative_residual = 0;  ///< over the rows used (weight > 0)
  double robust_scale = 0;             ///< σ̂ = 1.4826·median|r| at the last reweighting (0 for kNone)
  size_t rows_used = 0;                ///< rows with weight > 0 in the final fit
  int iterations = 0;                  ///< reweighting iterations run (0 for kNone)
  bool converged = false;              ///< parameters settled within max_iterations

  /// The index of `name`; throws std::out_of_range if no parameter has it.
  size_t index(const std::string& name) const;
};

/// Thrown when the rows cannot determine the parameters: fewer usable rows than parameters, a
/// column that is zero on every usable row, or a column that is a linear combination of others.
/// parameter() names the column, or is empty when the problem is the row count.
class UnderdeterminedFitError : public std::invalid_argument {
 public:
  UnderdeterminedFitError(std::string parameter, const std::string& message)
      : std::invalid_argument(message), parameter_(std::move(parameter)) {}
  const std::string& parameter() const { return parameter_; }

 private:
  std::string parameter_;
};

/// Fits θ ≥ 0 to `problem` (see the top of this file). Deterministic: the same rows in the same
/// order give bit-identical results. Throws UnderdeterminedFitError as described above, also
/// when the reweighting has rejected every row that determined a parameter, and
/// std::invalid_argument for options out of range (negative counts, non-positive constants).
RobustFitResult fit_robust(const LinearFitProblem& problem, const RobustFitOptions& options = {});

}  // namespace parallax
