// The sustained fraction σ (compute_model.h) fitted to a set of published or measured runs, the
// way the project fits its own: one σ for the whole set, chosen on a grid by the mean |error|
// (MAPE) of its throughput rows, and checked by leaving each source out (σ fitted on the other
// sources, then the held-out source's error at it). A stack's own runs give its own σ; the
// hold-out says whether that σ carries to runs it was not fitted on.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "training/published_runs.h"
#include "training/run_validation.h"

namespace parallax {

/// Every row's error (predicted / published tokens/s per GPU − 1) at each σ of a grid.
struct SigmaSweep {
  std::vector<double> sigmas;               ///< ascending
  std::vector<std::vector<double>> errors;  ///< [σ][row]; NaN: the row is not compared
};

/// σ from lo to hi (both in (0, 1], lo ≤ hi) in steps of `step`, hi included where the steps
/// reach it within 1e-9. Throws std::invalid_argument on a bad range or step.
std::vector<double> sigma_grid(double lo, double hi, double step);

/// Simulates every row of `runs` at every σ of `sigmas` (RunValidator, each worker thread its
/// own), the rows that cannot be compared (not simulated, or published as out of memory) as
/// NaN. `on_sigma_done(done, total)` is called after each σ, one call at a time. The result
/// does not depend on `threads`.
SigmaSweep sweep_sustained_fraction(const std::vector<PublishedRun>& runs, const std::string& topologies_dir,
                                    ValidationModel model, std::vector<double> sigmas, int threads,
                                    const std::function<void(size_t, size_t)>& on_sigma_done = {});

/// One source of the set, fitted alone and held out.
struct SourceHoldOut {
  std::string source;
  size_t rows = 0;
  double own_sigma = 0;     ///< σ fitted on this source's rows alone
  double own_mape = 0;      ///< its MAPE there
  double others_sigma = 0;  ///< σ fitted on every other source's rows (NaN with one source)
  double held_out_mape = 0; ///< this source's MAPE at others_sigma (NaN with one source)
  std::vector<double> mape_by_sigma;  ///< this source's MAPE at each grid σ
};

struct SustainedFractionFit {
  size_t rows = 0;            ///< rows compared
  double sigma = 0;           ///< the grid's σ of least MAPE (the smallest such σ on a tie)
  double mape = 0;            ///< at sigma
  double median_abs = 0;      ///< median |error| at sigma
  double median_signed = 0;   ///< median error at sigma
  std::vector<double> mape_by_sigma;  ///< over the whole set, one per grid σ
  std::vector<SourceHoldOut> sources; ///< by source name
};

/// The fit of the header over `sweep`, `row_sources[i]` naming row i's source (or any other
/// grouping of the rows to hold out one at a time: GPU type and precision). Throws
/// std::invalid_argument when the sweep is empty, the sizes disagree, or no row is compared.
SustainedFractionFit fit_sustained_fraction_to_runs(const SigmaSweep& sweep, const std::vector<std::string>& row_sources);

}  // namespace parallax
