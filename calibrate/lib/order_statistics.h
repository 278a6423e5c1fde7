// Order statistics of a sample (median, linear-interpolated quantile) shared by the fits and the
// accuracy reports.
#pragma once

#include <vector>

namespace parallax {

/// The sample median (mean of the two middle values for an even count); NaN for an empty sample.
double median_of(std::vector<double> v);
/// The q-quantile, interpolated linearly between order statistics (R's type 7); NaN when empty.
double quantile_of(std::vector<double> v, double q);

}  // namespace parallax
