// The calibration block that `parallax calibrate fit` writes into a topology file (and, alone,
// to --json): the fitted parameters in SI and in human units, their provenance (the input files
// and each run's metadata), where the fit saw each regime start, the residuals, the measured
// GEMMs the compute model interpolates, and the cross-validation errors. The topology loader
// reads back only the values (topology/topology_loader.cpp); the rest is for people.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "collective_fit.h"
#include "measurement_set.h"

namespace parallax {

/// How well a fit predicts: in sample, on the sizes it was not fitted on (every other size),
/// and, where the measurements have other groups than "all", "all" from a fit without it.
struct FitErrors {
  PredictionErrors in_sample;
  PredictionErrors held_out_alternate_sizes;
  std::optional<PredictionErrors> leave_one_group_out;
};

/// A fitted value in human units: "12.34 GB/s" for an inverse bandwidth (or "unbounded" at 0),
/// "3.210 us" for a time.
std::string parameter_text(const FittedParameter& p, double value);

/// rows, time median and p90 |error|, busbw median |error| at ≥ 1 MiB (null without such rows),
/// and the rows left unpredicted.
nlohmann::ordered_json prediction_errors_json(const PredictionErrors& e);

/// The whole calibration block (format 1).
nlohmann::ordered_json calibration_block(const MeasurementSet& set, const CollectiveFit& fit, const FitErrors& errors);

}  // namespace parallax
