// median_of and quantile_of (see order_statistics.h).
#include "order_statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace parallax {

double quantile_of(std::vector<double> v, double q) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double median_of(std::vector<double> v) { return quantile_of(std::move(v), 0.5); }

}  // namespace parallax
