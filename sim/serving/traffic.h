// Synthetic request streams: arrivals (Poisson, Gamma with a coefficient of variation, or a
// closed loop of users with think time) and token-length distributions (fixed, uniform,
// lognormal, or the joint lengths of a trace's rows), all drawn from one seeded generator
// (random.h).
//
// Gamma arrivals: inter-arrival times Gamma(k = 1/cv², θ = 1/(rate·k)), mean 1/rate, CV cv
// (cv = 1 is Poisson; Vidur's `gamma` generator).
//
// A rate profile makes the rate vary over time, piecewise constant: rate × scale_i from
// `from_i` on. Arrivals are drawn at unit rate in operational time Λ(t) = ∫ rate(t) dt and
// mapped back to wall time (time rescaling: exactly a non-homogeneous Poisson process; Gamma
// gaps stay Gamma in operational time).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "serving/random.h"
#include "serving/request.h"

namespace parallax {

struct LengthDistribution {
  enum class Kind : uint8_t { kFixed, kUniform, kLognormal };
  Kind kind = Kind::kFixed;
  int64_t value = 1;             ///< fixed
  int64_t min = 1, max = 1;      ///< uniform (inclusive); also the clamp of lognormal
  double mean = 1, sigma = 0;    ///< lognormal: the lengths' mean and the log's σ

  /// One length ≥ 1.
  int64_t sample(Rng& rng) const;
  std::string describe() const;
};

/// From `from` on, arrivals come at the base rate × `scale` (until the next step).
struct RateStep {
  Time from;
  double scale = 1;
};

struct TrafficSpec {
  enum class Arrival : uint8_t { kPoisson, kGamma, kClosedLoop };
  Arrival arrival = Arrival::kPoisson;
  double rate_per_s = 1;   ///< open loop: mean arrivals per second
  double cv = 1;           ///< gamma: coefficient of variation of the inter-arrival times
  /// Open loop: the rate over time (the first step from 0, times increasing, the last scale
  /// positive); empty: rate_per_s throughout.
  std::vector<RateStep> rate_profile;
  int users = 1;           ///< closed loop: concurrent users
  Time think_time;         ///< closed loop: a user's pause between a response and its next request
  int64_t requests = 1000;  ///< how many requests in all
  LengthDistribution prompt;
  LengthDistribution output;
  /// Set: each request takes the (prompt, output) lengths of a row drawn uniformly from these
  /// (a trace's rows, keeping their correlation), in place of `prompt` and `output`.
  std::shared_ptr<const std::vector<std::pair<int64_t, int64_t>>> length_rows;
  std::string length_source;  ///< where length_rows came from, for describe()
  int64_t sessions = 0;    ///< open loop: requests get session ids uniform in [0, sessions); 0: id = request

  std::string describe() const;
};

/// The open-loop stream (Poisson or Gamma), in arrival order. Throws std::invalid_argument for
/// a closed-loop spec (the fleet draws those as users finish).
std::vector<Request> open_loop_requests(const TrafficSpec& spec, Rng& rng);

/// The lengths of a closed-loop user's next request.
Request closed_loop_request(const TrafficSpec& spec, Rng& rng, int64_t id, Time arrival, uint64_t user);

}  // namespace parallax
