// One of the model's global constants fitted to a set of published or measured runs, the way the
// project fits its own: one value for the whole set, chosen on a grid by the mean |error| (MAPE)
// of its throughput rows, and checked by leaving each source out (the value fitted on the other
// sources, then the held-out source's error at it). Two constants are fitted so: the sustained
// fraction σ and the host's dispatch time t_dispatch (compute_model.h). A stack's own runs give
// its own values; the hold-out says whether they carry to runs they were not fitted on.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "training/published_runs.h"
#include "training/run_validation.h"

namespace parallax {

/// Every row's error (predicted / published tokens/s per GPU − 1) at each value of a grid.
struct ConstantSweep {
  std::vector<double> values;               ///< ascending
  std::vector<std::vector<double>> errors;  ///< [value][row]; NaN: the row is not compared
};

/// σ from lo to hi (both in (0, 1], lo ≤ hi) in steps of `step`, hi included where the steps
/// reach it within 1e-9. Throws std::invalid_argument on a bad range or step.
std::vector<double> sigma_grid(double lo, double hi, double step);
/// The same for any constant: lo ≤ hi, a positive step.
std::vector<double> value_grid(double lo, double hi, double step);

/// A validator for one grid value; each worker thread of a sweep builds its own.
using ValidatorAt = std::function<RunValidator(double value)>;

/// Simulates every row of `runs` at every value of `values` (the validator `at` builds for it),
/// the rows that cannot be compared (not simulated, or published as out of memory) as NaN.
/// `on_value_done(done, total)` is called after each value, one call at a time. The result does
/// not depend on `threads`.
ConstantSweep sweep_constant(const std::vector<PublishedRun>& runs, const ValidatorAt& at, std::vector<double> values,
                             int threads, const std::function<void(size_t, size_t)>& on_value_done = {});

/// The sweep over σ, every row under `model` otherwise.
ConstantSweep sweep_sustained_fraction(const std::vector<PublishedRun>& runs, const std::string& topologies_dir,
                                       ValidationModel model, std::vector<double> sigmas, int threads,
                                       const std::function<void(size_t, size_t)>& on_value_done = {});

/// The sweep over one of the model's host times (`field`: &ValidationModel::host_dispatch,
/// t_dispatch, or &ValidationModel::host_gemm_issue, t_host) in microseconds, every row at
/// σ = `sigma` and under `model` otherwise.
ConstantSweep sweep_host_time(const std::vector<PublishedRun>& runs, const std::string& topologies_dir,
                              ValidationModel model, Time ValidationModel::*field, double sigma,
                              std::vector<double> microseconds, int threads,
                              const std::function<void(size_t, size_t)>& on_value_done = {});

/// One source of the set, fitted alone and held out.
struct SourceHoldOut {
  std::string source;
  size_t rows = 0;
  double own_value = 0;      ///< the value fitted on this source's rows alone
  double own_mape = 0;       ///< its MAPE there
  double others_value = 0;   ///< the value fitted on every other source's rows (NaN with one source)
  double held_out_mape = 0;  ///< this source's MAPE at others_value (NaN with one source)
  std::vector<double> mape_by_value;  ///< this source's MAPE at each grid value
};

struct ConstantFit {
  size_t rows = 0;            ///< rows compared
  double value = 0;           ///< the grid's value of least MAPE (the smallest such value on a tie)
  double mape = 0;            ///< at value
  double median_abs = 0;      ///< median |error| at value
  double median_signed = 0;   ///< median error at value
  std::vector<double> mape_by_value;  ///< over the whole set, one per grid value
  std::vector<SourceHoldOut> sources; ///< by source name
};

/// The fit of the header over `sweep`, `row_sources[i]` naming row i's source (or any other
/// grouping of the rows to hold out one at a time: GPU type and precision). Throws
/// std::invalid_argument when the sweep is empty, the sizes disagree, or no row is compared.
ConstantFit fit_constant_to_runs(const ConstantSweep& sweep, const std::vector<std::string>& row_sources);

}  // namespace parallax
