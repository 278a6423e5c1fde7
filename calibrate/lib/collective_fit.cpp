#include "collective_fit.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <tuple>

namespace parallax {

CollectiveTermModel::CollectiveTermModel(const Topology& base) : base_(base) {}

const CollectiveSimulator& CollectiveTermModel::simulator(int ranks, int ranks_per_node) {
  auto key = std::make_pair(ranks, ranks_per_node);
  auto it = simulators_.find(key);
  if (it == simulators_.end()) {
    it = simulators_.emplace(key, std::make_unique<CollectiveSimulator>(base_, ranks, ranks_per_node)).first;
  }
  return *it->second;
}

CollectiveTerms CollectiveTermModel::terms(const CollectiveMeasurement& m, bool nccl) {
  const CollectiveSimulator& sim = simulator(m.ranks, std::max(1, m.ranks_per_node));
  Algorithm algo = Algorithm::kRing;
  Protocol proto = Protocol::kSimple;
  if (nccl && m.ranks > 1) {
    // What NCCL ran: the forced algorithm/protocol, or its cost model's choice.
    CollectiveOptions opt;
    opt.model = "analytical";
    opt.use_calibration = false;
    if (m.algo != "auto") {
      opt.algorithm = parse_algorithm(m.algo);
      if (!opt.algorithm) throw std::invalid_argument("unknown algorithm \"" + m.algo + "\"");
    }
    if (m.proto != "auto") {
      opt.protocol = parse_protocol(m.proto);
      if (!opt.protocol) throw std::invalid_argument("unknown protocol \"" + m.proto + "\"");
    }
    CollectiveResult r = sim.run(m.op, m.size, opt);
    algo = r.algorithm;
    proto = r.protocol;
  }
  return collective_terms(sim, m.op, m.size, m.in_place, algo, proto, !nccl);
}

const FittedParameter* CollectiveFit::find(const std::string& name) const {
  for (const FittedParameter& p : parameters) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

CalibratedCollectiveModel CollectiveFit::model() const {
  std::map<std::string, double> values;
  for (const FittedParameter& p : parameters) values[p.name] = p.value;  // folded ones are 0
  values.insert(regime_starts.begin(), regime_starts.end());
  return CalibratedCollectiveModel(std::move(values));
}

std::optional<Time> CollectiveFit::predict(const CollectiveTerms& terms) const { return model().predict(terms); }

namespace {

// Rank test by modified Gram–Schmidt on the rows used, in the order columns are preferred: a
// column whose part orthogonal to the kept ones is below 1e-9 of its norm adds nothing.
std::vector<bool> independent_columns(const std::vector<std::vector<double>>& columns) {
  std::vector<std::vector<double>> basis;
  std::vector<bool> keep(columns.size(), false);
  for (size_t j = 0; j < columns.size(); ++j) {
    std::vector<double> v = columns[j];
    double norm0 = 0;
    for (double x : v) norm0 += x * x;
    norm0 = std::sqrt(norm0);
    if (norm0 == 0) continue;
    for (auto& x : v) x /= norm0;
    for (int pass = 0; pass < 2; ++pass) {
      for (const auto& b : basis) {
        double dot = 0;
        for (size_t i = 0; i < v.size(); ++i) dot += v[i] * b[i];
        for (size_t i = 0; i < v.size(); ++i) v[i] -= dot * b[i];
      }
    }
    double norm = 0;
    for (double x : v) norm += x * x;
    norm = std::sqrt(norm);
    if (norm < 1e-9) continue;
    for (auto& x : v) x /= norm;
    basis.push_back(std::move(v));
    keep[j] = true;
  }
  return keep;
}

int preference(const std::string& name) {
  if (name.rfind("inverse_bandwidth.", 0) == 0) return 0;
  if (name.rfind("alpha.network.", 0) == 0) return 1;
  if (name.rfind("alpha.", 0) == 0) return 2;
  return 3;
}

}  // namespace

CollectiveFit fit_collectives(const std::vector<CollectiveMeasurement>& measurements,
                              const std::vector<CollectiveTerms>& terms, const std::vector<bool>& use,
                              const RobustFitOptions& options) {
  std::vector<size_t> rows;
  for (size_t i = 0; i < measurements.size(); ++i) {
    if (use.empty() || use[i]) rows.push_back(i);
  }
  // Every parameter any used row needs, in order of preference then name (deterministic).
  std::vector<std::string> names;
  for (size_t i : rows) {
    for (const auto& [name, c] : terms[i].coefficients()) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return std::make_tuple(preference(a), a) < std::make_tuple(preference(b), b);
  });
  if (names.empty() || rows.empty()) throw UnderdeterminedFitError("", "no collective measurement to fit");
  // Columns scaled by the row's 1/t (the criterion is relative), so the rank test sees what the
  // solver will.
  std::vector<std::vector<double>> columns(names.size(), std::vector<double>(rows.size(), 0.0));
  for (size_t r = 0; r < rows.size(); ++r) {
    const double t = measurements[rows[r]].typical_time().seconds();
    for (const auto& [name, c] : terms[rows[r]].coefficients()) {
      const size_t j = static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
      columns[j][r] = c / t;
    }
  }
  const std::vector<bool> keep = independent_columns(columns);
  CollectiveFit fit;
  std::vector<std::string> kept;
  for (size_t j = 0; j < names.size(); ++j) {
    if (keep[j]) {
      kept.push_back(names[j]);
    } else {
      fit.folded.push_back(names[j] + ": not separable from the other terms by these measurements (taken as 0)");
    }
  }
  LinearFitProblem problem(kept);
  std::vector<double> row(kept.size());
  for (size_t r : rows) {
    std::fill(row.begin(), row.end(), 0.0);
    for (const auto& [name, c] : terms[r].coefficients()) {
      auto it = std::find(kept.begin(), kept.end(), name);
      if (it != kept.end()) row[static_cast<size_t>(it - kept.begin())] = c;
    }
    problem.add_row(row, measurements[r].typical_time().seconds());
  }
  fit.raw = fit_robust(problem, options);
  for (size_t j = 0; j < names.size(); ++j) {
    FittedParameter p;
    p.name = names[j];
    if (keep[j]) {
      const size_t k = fit.raw.index(names[j]);
      p.value = fit.raw.theta[k];
      p.standard_error = fit.raw.standard_error[k];
      p.at_bound = fit.raw.at_bound[k];
    } else {
      p.identifiable = false;
      p.standard_error = std::numeric_limits<double>::quiet_NaN();
    }
    fit.parameters.push_back(p);
  }
  return fit;
}

namespace {

// The breakpoint searches below try every position while a series has few sizes (a harness
// sweep of powers of two has about 30). Each try is a whole fit, and the two-breakpoint search
// tries pairs, so a fine sweep (a size every MiB up to 1 GiB: 1,024) would take hours; there
// they try a grid of kGridPoints positions, then every position of the grid cells beside the
// best, one breakpoint at a time.
constexpr std::ptrdiff_t kGridPoints = 33;

// The positions of [lo, hi] to try first: all of them, or kGridPoints spread evenly.
std::vector<std::ptrdiff_t> breakpoint_grid(std::ptrdiff_t lo, std::ptrdiff_t hi) {
  std::vector<std::ptrdiff_t> grid;
  if (lo > hi) return grid;
  const std::ptrdiff_t span = hi - lo;
  if (span < kGridPoints) {
    for (std::ptrdiff_t b = lo; b <= hi; ++b) grid.push_back(b);
    return grid;
  }
  for (std::ptrdiff_t i = 0; i < kGridPoints; ++i) grid.push_back(lo + span * i / (kGridPoints - 1));
  return grid;
}

// The grid cells beside position b of [lo, hi]: from the grid point before it to the one after.
std::pair<std::ptrdiff_t, std::ptrdiff_t> cells_beside(std::ptrdiff_t b, std::ptrdiff_t lo, std::ptrdiff_t hi) {
  const std::ptrdiff_t cell = (hi - lo + kGridPoints - 2) / (kGridPoints - 1);
  return {std::max(lo, b - cell), std::min(hi, b + cell)};
}

struct Split {
  std::ptrdiff_t b1, b2;
  double score;
};

// The lowest score(b1, b2) over lo1 ≤ b1 ≤ hi1 and b1 + gap ≤ b2 ≤ hi2 (b2 = hi2 alone when
// `single`), taken only where it beats `best` by more than rounding; ties keep the first tried.
Split search_split(std::ptrdiff_t lo1, std::ptrdiff_t hi1, std::ptrdiff_t gap, std::ptrdiff_t hi2, bool single,
                   Split best, const std::function<double(std::ptrdiff_t, std::ptrdiff_t)>& score) {
  auto consider = [&](std::ptrdiff_t b1, std::ptrdiff_t b2) {
    const double v = score(b1, b2);
    if (v < best.score - 1e-12) best = {b1, b2, v};
  };
  const bool coarse = hi1 - lo1 >= kGridPoints || hi2 - (lo1 + gap) >= kGridPoints;
  for (std::ptrdiff_t b1 : breakpoint_grid(lo1, hi1)) {
    if (single) {
      consider(b1, hi2);
      continue;
    }
    for (std::ptrdiff_t b2 : breakpoint_grid(b1 + gap, hi2)) consider(b1, b2);
  }
  if (!coarse || best.b1 < lo1 || best.b1 > hi1) return best;  // every position tried, or none better
  const auto [from1, to1] = cells_beside(best.b1, lo1, hi1);
  const std::ptrdiff_t b2_now = best.b2;
  for (std::ptrdiff_t b1 = from1; b1 <= to1; ++b1) {
    if (single || b1 + gap <= b2_now) consider(b1, single ? hi2 : b2_now);
  }
  if (single) return best;
  const auto [from2, to2] = cells_beside(best.b2, best.b1 + gap, hi2);
  const std::ptrdiff_t b1_now = best.b1;
  for (std::ptrdiff_t b2 = from2; b2 <= to2; ++b2) consider(b1_now, b2);
  return best;
}

}  // namespace

CollectiveFit fit_collectives_with_regimes(const std::vector<CollectiveMeasurement>& measurements,
                                           std::vector<CollectiveTerms>& terms, const std::vector<bool>& use,
                                           const RobustFitOptions& options) {
  // Series of automatic choices, each with its sorted distinct sizes and candidate protocols.
  using Key = std::tuple<std::string, int, std::string, int, int>;
  struct Series {
    std::vector<double> sizes;
    std::vector<Protocol> candidates;  // in NCCL's order of growing size
    std::vector<size_t> rows;
  };
  std::map<Key, Series> series;
  for (size_t i = 0; i < measurements.size(); ++i) {
    const CollectiveMeasurement& m = measurements[i];
    if (m.algo != "auto" || m.proto != "auto" || m.ranks < 2) continue;
    Series& s = series[Key{m.source.file, static_cast<int>(m.op), m.group, m.ranks, m.nodes}];
    s.sizes.push_back(m.size.value());
    s.rows.push_back(i);
    if (std::find(s.candidates.begin(), s.candidates.end(), terms[i].protocol) == s.candidates.end()) {
      s.candidates.push_back(terms[i].protocol);
    }
  }
  // Mean |relative residual| over the used rows of one series (the one being searched).
  auto score_rows = [&](const CollectiveFit& fit, const std::vector<size_t>& rows) {
    double sum = 0;
    size_t n = 0;
    for (size_t i : rows) {
      if (!use.empty() && !use[i]) continue;
      std::optional<Time> p = fit.predict(terms[i]);
      const double t = measurements[i].typical_time().seconds();
      sum += p ? std::fabs(p->seconds() - t) / t : 1.0;
      ++n;
    }
    return n ? sum / static_cast<double>(n) : 0.0;
  };
  for (auto& [key, s] : series) {
    std::sort(s.sizes.begin(), s.sizes.end());
    s.sizes.erase(std::unique(s.sizes.begin(), s.sizes.end()), s.sizes.end());
    std::sort(s.candidates.begin(), s.candidates.end(),
              [](Protocol a, Protocol b) { return static_cast<int>(a) < static_cast<int>(b); });
  }
  // Coordinate search, one series at a time (usually there is one per file). (A named
  // reference rather than a structured binding: the lambdas below capture it.)
  for (auto& entry : series) {
    auto& s = entry.second;
    if (s.candidates.size() < 2) continue;
    const size_t k = s.sizes.size();
    auto assign = [&](size_t b1, size_t b2) {
      // sizes [0, b1) take candidates[0], [b1, b2) candidates[1], [b2, k) the last.
      for (size_t i : s.rows) {
        const size_t pos = static_cast<size_t>(
            std::lower_bound(s.sizes.begin(), s.sizes.end(), measurements[i].size.value()) - s.sizes.begin());
        const size_t regime = pos < b1 ? 0 : pos < b2 ? 1 : 2;
        terms[i].protocol = s.candidates[std::min(regime, s.candidates.size() - 1)];
      }
    };
    const auto n = static_cast<std::ptrdiff_t>(k);
    const Split best = search_split(0, n, 0, n, s.candidates.size() < 3, {0, 0, std::numeric_limits<double>::infinity()},
                                    [&](std::ptrdiff_t b1, std::ptrdiff_t b2) {
                                      assign(static_cast<size_t>(b1), static_cast<size_t>(b2));
                                      try {
                                        return score_rows(fit_collectives(measurements, terms, use, options), s.rows);
                                      } catch (const std::invalid_argument&) {
                                        // This split leaves a regime without enough points: not a candidate.
                                        return std::numeric_limits<double>::infinity();
                                      }
                                    });
    assign(static_cast<size_t>(best.b1), static_cast<size_t>(best.b2));
  }
  // Bandwidth steps inside the largest protocol's sizes (more channels, another algorithm, or —
  // for MPI over shared memory — eager vs rendezvous and cache-resident vs memory-bound copies):
  // up to two more breakpoints, each kept only if it cuts the mean residual by a fifth.
  for (auto& entry : series) {
    auto& s = entry.second;
    const size_t k = s.sizes.size();
    if (k < 8) continue;
    auto position = [&](size_t i) {
      return static_cast<size_t>(std::lower_bound(s.sizes.begin(), s.sizes.end(), measurements[i].size.value()) -
                                 s.sizes.begin());
    };
    Protocol largest = terms[s.rows.front()].protocol;
    for (size_t i : s.rows) {
      if (position(i) == k - 1) largest = terms[i].protocol;
    }
    size_t first = k;
    for (size_t i : s.rows) {
      if (terms[i].protocol == largest) first = std::min(first, position(i));
    }
    auto assign = [&](size_t b1, size_t b2) {
      for (size_t i : s.rows) {
        const size_t pos = position(i);
        terms[i].regime = terms[i].protocol != largest ? 0 : pos >= b2 ? 2 : pos >= b1 ? 1 : 0;
      }
    };
    auto try_split = [&](std::ptrdiff_t b1, std::ptrdiff_t b2) {
      assign(static_cast<size_t>(b1), static_cast<size_t>(b2));
      try {
        return score_rows(fit_collectives(measurements, terms, use, options), s.rows);
      } catch (const std::invalid_argument&) {
        return std::numeric_limits<double>::infinity();
      }
    };
    constexpr std::ptrdiff_t kMinRegime = 3;  // sizes per regime: enough for launch/α and β with a spare
    const auto n = static_cast<std::ptrdiff_t>(k), start = static_cast<std::ptrdiff_t>(first) + kMinRegime;
    const double none = try_split(n, n);
    const Split one = search_split(start, n - kMinRegime, 0, n, true, {n, n, none}, try_split);
    Split two = one;
    if (one.score < 0.8 * none) {
      two = search_split(start, n - 2 * kMinRegime, kMinRegime, n - kMinRegime, false, one, try_split);
    }
    if (two.score < 0.8 * one.score && one.score < 0.8 * none) {
      assign(static_cast<size_t>(two.b1), static_cast<size_t>(two.b2));
    } else if (one.score < 0.8 * none) {
      assign(static_cast<size_t>(one.b1), k);
    } else {
      assign(k, k);
    }
  }
  CollectiveFit fit = fit_collectives(measurements, terms, use, options);
  // Where each (protocol, regime) of a series starts, over every row (a held-out one takes the
  // regime its neighbours imply), so that the simulator puts a size where the fit did.
  for (const auto& [key, s] : series) {
    for (size_t i : s.rows) {
      const CollectiveMeasurement& m = measurements[i];
      const std::string name = regime_start_key(m.op, m.ranks, m.nodes, terms[i].protocol, terms[i].regime);
      auto [it, fresh] = fit.regime_starts.emplace(name, m.size.value());
      if (!fresh) it->second = std::min(it->second, m.size.value());
    }
  }
  return fit;
}

std::vector<bool> alternate_sizes_split(const std::vector<CollectiveMeasurement>& measurements) {
  using Key = std::tuple<std::string, int, std::string, int, int, bool, std::string, std::string>;
  std::map<Key, std::vector<double>> sizes;
  auto key_of = [](const CollectiveMeasurement& m) {
    return Key{m.source.file, static_cast<int>(m.op), m.group, m.ranks, m.nodes, m.in_place, m.algo, m.proto};
  };
  for (const auto& m : measurements) sizes[key_of(m)].push_back(m.size.value());
  for (auto& [k, v] : sizes) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  std::vector<bool> use(measurements.size());
  for (size_t i = 0; i < measurements.size(); ++i) {
    const auto& v = sizes[key_of(measurements[i])];
    const auto pos = std::lower_bound(v.begin(), v.end(), measurements[i].size.value()) - v.begin();
    use[i] = pos % 2 == 0;
  }
  return use;
}

double PredictionErrors::median_time() const { return median_of(time); }
double PredictionErrors::median_busbw_large() const { return median_of(busbw_large); }
double PredictionErrors::p90_time() const { return quantile_of(time, 0.9); }

PredictionErrors prediction_errors(const std::vector<CollectiveMeasurement>& measurements,
                                   const std::vector<CollectiveTerms>& terms, const CollectiveFit& fit,
                                   const std::vector<bool>& rows) {
  PredictionErrors e;
  for (size_t i = 0; i < measurements.size(); ++i) {
    if (!rows.empty() && !rows[i]) continue;
    std::optional<Time> predicted = fit.predict(terms[i]);
    if (!predicted) {
      ++e.unpredicted;
      continue;
    }
    const double measured = measurements[i].typical_time().seconds();
    const double err = std::fabs(predicted->seconds() - measured) / measured;
    e.time.push_back(err);
    // busbw ∝ 1/t at a fixed size, so its relative error is |t_meas/t_pred − 1|.
    if (measurements[i].size.value() >= 1024.0 * 1024.0) {
      e.busbw_large.push_back(std::fabs(measured / predicted->seconds() - 1.0));
    }
  }
  return e;
}

}  // namespace parallax
