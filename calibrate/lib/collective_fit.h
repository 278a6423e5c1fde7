// The α/β calibration of collectives: the terms of each measured point (the model and its
// terms are in sim/collectives/calibrated_model.h), the robust fit of launch, latency and
// bandwidth per link class and protocol over many points, with data-driven protocol and
// bandwidth regimes, held-out splits and prediction errors.
//
// The algorithm and protocol of a point are those forced by the measurement (NCCL_ALGO /
// NCCL_PROTO), or what NCCL's cost model picks on the uncalibrated topology — what NCCL itself
// would run; MPI measurements count as ring/simple with per-collective link classes.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/calibrated_model.h"
#include "collectives/collective_simulator.h"
#include "measurement_set.h"
#include "order_statistics.h"
#include "robust_fit.h"

namespace parallax {

/// Derives the terms of measurements on one base topology. Measurements from the MPI harness
/// (no NCCL) count as ring/simple: MPI's algorithms are not NCCL's, but on a given group the
/// step count only rescales α.
class CollectiveTermModel {
 public:
  explicit CollectiveTermModel(const Topology& base);
  /// Throws std::invalid_argument when the measurement cannot be placed on the topology (more
  /// ranks or nodes than it has) or its forced algorithm cannot run there.
  CollectiveTerms terms(const CollectiveMeasurement& m, bool nccl = true);

 private:
  const CollectiveSimulator& simulator(int ranks, int ranks_per_node);
  const Topology& base_;
  std::map<std::pair<int, int>, std::unique_ptr<CollectiveSimulator>> simulators_;
};

/// A parameter's fitted value, or why it has none.
struct FittedParameter {
  std::string name;
  double value = 0;                  ///< SI units (s, s per step, s per byte)
  double standard_error = 0;         ///< NaN when at the bound or without degrees of freedom
  bool at_bound = false;             ///< held at 0 by the non-negativity constraint
  bool identifiable = true;          ///< false: no measurement separates it from the others
};

struct CollectiveFit {
  std::vector<FittedParameter> parameters;
  RobustFitResult raw;               ///< the solver's answer over the identifiable columns
  std::vector<std::string> folded;   ///< parameters dropped as not identifiable, with the reason
  /// regime_start_key → bytes, for the series whose regimes were found from the data.
  std::map<std::string, double> regime_starts;

  const FittedParameter* find(const std::string& name) const;
  /// The predicted time, or nullopt when a term needs a parameter the fit could not determine
  /// (e.g. a protocol no measurement used).
  std::optional<Time> predict(const CollectiveTerms& terms) const;
  /// The fitted values as the simulator uses them (folded parameters as 0).
  CalibratedCollectiveModel model() const;
};

/// Fits launch/α/β to the measurements whose `use` flag is set (all when empty), robustly, on
/// relative time error. Columns no row separates from the others (e.g. launch and α when every
/// point has the same step count) are folded: bandwidth first, then α (network, then intra), and
/// launch last are kept. Throws UnderdeterminedFitError when nothing can be fitted.
CollectiveFit fit_collectives(const std::vector<CollectiveMeasurement>& measurements,
                              const std::vector<CollectiveTerms>& terms, const std::vector<bool>& use = {},
                              const RobustFitOptions& options = {});

/// The fit with data-driven protocol regimes. For every series measured with NCCL's automatic
/// choice (algo and proto "auto"), the protocol of each size is not taken from the uncalibrated
/// model but found: NCCL switches LL → LL128 → Simple as sizes grow, so the sizes of a series
/// (file, op, group, ranks, nodes) split at two breakpoints, searched exhaustively for the
/// smallest mean |relative residual| of the fitted model over the rows used. Only the protocols
/// NCCL's model would use somewhere in that series are candidates. Then the largest-size regime
/// may split up to twice more (regimes 1, 2: own launch, α, β), each split kept only where it
/// lowers the mean residual by a fifth or more — the data then shows a bandwidth step that no
/// protocol explains. `terms` is updated in place
/// (for every row, used or held out: a held-out size takes the regime its neighbours imply).
CollectiveFit fit_collectives_with_regimes(const std::vector<CollectiveMeasurement>& measurements,
                                           std::vector<CollectiveTerms>& terms, const std::vector<bool>& use = {},
                                           const RobustFitOptions& options = {});

/// Held-out split: within each series (file, op, group, ranks, in-place), the sizes in sorted
/// order alternate fit / hold-out, so that both halves span the whole range. true = used to fit.
std::vector<bool> alternate_sizes_split(const std::vector<CollectiveMeasurement>& measurements);

/// Relative errors of predictions against measurements (rows without a prediction are skipped).
struct PredictionErrors {
  std::vector<double> time;           ///< |pred − meas| / meas, every predicted row
  std::vector<double> busbw_large;    ///< the same on bus bandwidth, sizes ≥ 1 MiB
  size_t unpredicted = 0;
  double median_time() const;
  double median_busbw_large() const;
  double p90_time() const;
};
PredictionErrors prediction_errors(const std::vector<CollectiveMeasurement>& measurements,
                                   const std::vector<CollectiveTerms>& terms, const CollectiveFit& fit,
                                   const std::vector<bool>& rows);

}  // namespace parallax
