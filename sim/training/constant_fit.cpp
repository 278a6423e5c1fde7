// Fitting a global constant to runs (constant_fit.h).
#include "training/constant_fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>

#include "engine/parallel_for.h"
#include "training/run_validation.h"

namespace parallax {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Mean |error| over the rows `use` selects that are compared at grid point `s`.
double mape_at(const ConstantSweep& sweep, size_t s, const std::vector<bool>& use) {
  double sum = 0;
  size_t n = 0;
  for (size_t r = 0; r < use.size(); ++r) {
    const double e = sweep.errors[s][r];
    if (!use[r] || std::isnan(e)) continue;
    sum += std::fabs(e);
    ++n;
  }
  return n == 0 ? kNaN : sum / static_cast<double>(n);
}

// The grid point of least MAPE over the selected rows (the first on a tie); the grid's size
// where no row is selected.
size_t best_value(const ConstantSweep& sweep, const std::vector<bool>& use) {
  size_t best = sweep.values.size();
  double least = std::numeric_limits<double>::infinity();
  for (size_t s = 0; s < sweep.values.size(); ++s) {
    const double m = mape_at(sweep, s, use);
    if (!std::isnan(m) && m < least) {
      least = m;
      best = s;
    }
  }
  return best;
}

SourceHoldOut hold_out(const ConstantSweep& sweep, const std::vector<std::string>& row_sources, const std::string& source,
                       const std::vector<bool>& compared) {
  SourceHoldOut h;
  h.source = source;
  std::vector<bool> mine(compared.size()), others(compared.size());
  for (size_t r = 0; r < compared.size(); ++r) {
    mine[r] = compared[r] && row_sources[r] == source;
    others[r] = compared[r] && row_sources[r] != source;
    h.rows += mine[r] ? 1 : 0;
  }
  for (size_t s = 0; s < sweep.values.size(); ++s) h.mape_by_value.push_back(mape_at(sweep, s, mine));
  const size_t own = best_value(sweep, mine);
  h.own_value = sweep.values[own];
  h.own_mape = mape_at(sweep, own, mine);
  const size_t rest = best_value(sweep, others);
  h.others_value = rest < sweep.values.size() ? sweep.values[rest] : kNaN;
  h.held_out_mape = rest < sweep.values.size() ? mape_at(sweep, rest, mine) : kNaN;
  return h;
}

}  // namespace

std::vector<double> sigma_grid(double lo, double hi, double step) {
  if (!(lo > 0 && hi <= 1)) throw std::invalid_argument("sustained-fraction grid: need 0 < lo <= hi <= 1");
  return value_grid(lo, hi, step);
}

std::vector<double> value_grid(double lo, double hi, double step) {
  if (!(lo <= hi) || !(step > 0)) throw std::invalid_argument("grid: need lo <= hi and a positive step");
  std::vector<double> grid;
  for (int i = 0;; ++i) {
    const double s = lo + i * step;
    if (s > hi + 1e-9) break;
    grid.push_back(std::min(s, hi));
  }
  return grid;
}

ConstantSweep sweep_constant(const std::vector<PublishedRun>& runs, const ValidatorAt& at, std::vector<double> values,
                             int threads, const std::function<void(size_t, size_t)>& on_value_done) {
  ConstantSweep sweep;
  sweep.values = std::move(values);
  sweep.errors.assign(sweep.values.size(), std::vector<double>(runs.size(), kNaN));
  std::mutex progress;
  size_t done = 0;
  parallel_for(sweep.values.size(), std::max(1, threads), [&](size_t, size_t v) {
    RunValidator validator = at(sweep.values[v]);
    for (size_t r = 0; r < runs.size(); ++r) {
      const RunPrediction p = validator.predict(runs[r]);
      if (p.problem.empty() && !runs[r].expected_out_of_memory) sweep.errors[v][r] = p.error;
    }
    const std::lock_guard<std::mutex> lock(progress);
    if (on_value_done) on_value_done(++done, sweep.values.size());
  });
  return sweep;
}

ConstantSweep sweep_sustained_fraction(const std::vector<PublishedRun>& runs, const std::string& topologies_dir,
                                       ValidationModel model, std::vector<double> sigmas, int threads,
                                       const std::function<void(size_t, size_t)>& on_value_done) {
  return sweep_constant(
      runs, [&](double sigma) { return RunValidator(topologies_dir, sigma, model); }, std::move(sigmas), threads,
      on_value_done);
}

ConstantSweep sweep_host_time(const std::vector<PublishedRun>& runs, const std::string& topologies_dir,
                              ValidationModel model, Time ValidationModel::*field, double sigma,
                              std::vector<double> microseconds, int threads,
                              const std::function<void(size_t, size_t)>& on_value_done) {
  return sweep_constant(
      runs,
      [&](double us) {
        ValidationModel at = model;
        at.*field = Time::us(us);
        return RunValidator(topologies_dir, sigma, at);
      },
      std::move(microseconds), threads, on_value_done);
}

ConstantFit fit_constant_to_runs(const ConstantSweep& sweep, const std::vector<std::string>& row_sources) {
  if (sweep.values.empty() || sweep.errors.size() != sweep.values.size()) {
    throw std::invalid_argument("constant fit: an empty grid, or errors for a different grid");
  }
  for (const std::vector<double>& row_errors : sweep.errors) {
    if (row_errors.size() != row_sources.size()) throw std::invalid_argument("constant fit: a row without a source");
  }
  // A row is compared at every value or at none: whether it simulates does not depend on either constant.
  std::vector<bool> compared(row_sources.size());
  ConstantFit fit;
  for (size_t r = 0; r < row_sources.size(); ++r) {
    compared[r] = !std::isnan(sweep.errors.front()[r]);
    fit.rows += compared[r] ? 1 : 0;
  }
  if (fit.rows == 0) throw std::invalid_argument("constant fit: no row has a published throughput to compare");
  const size_t best = best_value(sweep, compared);
  fit.value = sweep.values[best];
  fit.mape = mape_at(sweep, best, compared);
  std::vector<double> magnitudes, signed_errors;
  for (size_t r = 0; r < compared.size(); ++r) {
    if (!compared[r]) continue;
    signed_errors.push_back(sweep.errors[best][r]);
    magnitudes.push_back(std::fabs(sweep.errors[best][r]));
  }
  fit.median_abs = median_error(magnitudes);
  fit.median_signed = median_error(signed_errors);
  for (size_t s = 0; s < sweep.values.size(); ++s) fit.mape_by_value.push_back(mape_at(sweep, s, compared));
  std::set<std::string> names;
  for (size_t r = 0; r < compared.size(); ++r) {
    if (compared[r]) names.insert(row_sources[r]);
  }
  for (const std::string& name : names) fit.sources.push_back(hold_out(sweep, row_sources, name, compared));
  return fit;
}

}  // namespace parallax
