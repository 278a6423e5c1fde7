// Synthetic request streams (traffic.h).
#include "serving/traffic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace parallax {

int64_t LengthDistribution::sample(Rng& rng) const {
  switch (kind) {
    case Kind::kFixed: return std::max<int64_t>(1, value);
    case Kind::kUniform: return min + static_cast<int64_t>(rng.below(static_cast<uint64_t>(max - min + 1)));
    case Kind::kLognormal: {
      // mean = exp(mu + σ²/2), so mu = ln(mean) − σ²/2.
      const double mu = std::log(mean) - 0.5 * sigma * sigma;
      const double x = std::round(rng.lognormal(mu, sigma));
      return std::clamp(static_cast<int64_t>(std::min(x, 9e15)), std::max<int64_t>(1, min), std::max<int64_t>(1, max));
    }
  }
  return 1;
}

std::string LengthDistribution::describe() const {
  char buf[128];
  switch (kind) {
    case Kind::kFixed: std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(value)); break;
    case Kind::kUniform:
      std::snprintf(buf, sizeof buf, "uniform %lld-%lld", static_cast<long long>(min), static_cast<long long>(max));
      break;
    case Kind::kLognormal:
      std::snprintf(buf, sizeof buf, "lognormal mean %.0f sigma %.2f in [%lld, %lld]", mean, sigma,
                    static_cast<long long>(min), static_cast<long long>(max));
      break;
  }
  return buf;
}

std::string TrafficSpec::describe() const {
  char buf[256];
  if (arrival == Arrival::kClosedLoop) {
    std::snprintf(buf, sizeof buf, "closed loop: %d users, think time %.3f s, %lld requests", users, think_time.seconds(),
                  static_cast<long long>(requests));
  } else {
    std::string profile;
    if (!rate_profile.empty()) {
      double lo = rate_profile.front().scale, hi = lo;
      for (const RateStep& step : rate_profile) {
        lo = std::min(lo, step.scale);
        hi = std::max(hi, step.scale);
      }
      char p[128];
      std::snprintf(p, sizeof p, " x a profile of %zu steps (%.2f-%.2f)", rate_profile.size(), lo, hi);
      profile = p;
    }
    std::snprintf(buf, sizeof buf, "%s arrivals at %.3f/s%s%s, %lld requests", arrival == Arrival::kPoisson ? "Poisson" : "Gamma",
                  rate_per_s, arrival == Arrival::kGamma ? (" (cv " + std::to_string(cv) + ")").c_str() : "", profile.c_str(),
                  static_cast<long long>(requests));
  }
  if (length_rows) {
    return std::string(buf) + "; prompt and output lengths of the " + std::to_string(length_rows->size()) +
           " rows of " + length_source;
  }
  return std::string(buf) + "; prompt " + prompt.describe() + ", output " + output.describe() + " tokens";
}

namespace {

void draw_lengths(const TrafficSpec& spec, Rng& rng, Request& r) {
  if (spec.length_rows && !spec.length_rows->empty()) {
    const auto& row = (*spec.length_rows)[static_cast<size_t>(rng.below(spec.length_rows->size()))];
    r.prompt_tokens = row.first;
    r.output_tokens = row.second;
    return;
  }
  r.prompt_tokens = spec.prompt.sample(rng);
  r.output_tokens = spec.output.sample(rng);
}

}  // namespace

namespace {

// Maps operational time (arrivals at unit rate) to wall time under a rate profile.
class OperationalClock {
 public:
  // Throws std::invalid_argument for a profile that does not start at 0, goes back in time or
  // ends with no arrivals (it would never reach its requests).
  explicit OperationalClock(const TrafficSpec& spec) : spec_(spec) {
    const std::vector<RateStep>& steps = spec.rate_profile;
    for (size_t i = 0; i < steps.size(); ++i) {
      const bool ordered = i == 0 ? steps[i].from == Time::zero() : steps[i].from > steps[i - 1].from;
      if (!ordered || !(steps[i].scale >= 0)) {
        throw std::invalid_argument("a rate profile starts at 0 s, its steps later and later, each scale >= 0");
      }
    }
    if (!steps.empty() && !(spec.rate_per_s * steps.back().scale > 0)) {
      throw std::invalid_argument("a rate profile's last step needs arrivals (a positive rate)");
    }
  }

  // The wall time once `units` more of operational time have passed.
  double advance(double units) {
    const std::vector<RateStep>& steps = spec_.rate_profile;
    for (;;) {
      const double rate = spec_.rate_per_s * steps[step_].scale;
      const double end = step_ + 1 < steps.size() ? steps[step_ + 1].from.seconds() : INFINITY;
      if (rate > 0 && wall_ + units / rate < end) {
        wall_ += units / rate;
        return wall_;
      }
      units -= rate * (end - wall_);
      wall_ = end;
      ++step_;
    }
  }

 private:
  const TrafficSpec& spec_;
  size_t step_ = 0;
  double wall_ = 0;
};

}  // namespace

std::vector<Request> open_loop_requests(const TrafficSpec& spec, Rng& rng) {
  if (spec.arrival == TrafficSpec::Arrival::kClosedLoop) throw std::invalid_argument("a closed loop has no fixed stream");
  std::vector<Request> out;
  out.reserve(static_cast<size_t>(spec.requests));
  const double mean_gap = 1.0 / spec.rate_per_s;
  const double shape = 1.0 / (spec.cv * spec.cv);
  double t = 0;
  OperationalClock clock(spec);
  for (int64_t i = 0; i < spec.requests; ++i) {
    const double gap = spec.arrival == TrafficSpec::Arrival::kPoisson ? rng.exponential(mean_gap) : rng.gamma(shape, mean_gap / shape);
    t = spec.rate_profile.empty() ? t + gap : clock.advance(gap * spec.rate_per_s);
    if (!(t < 9e6)) {  // the picosecond clock ends after ~104 days
      throw std::invalid_argument("the stream would last more than 100 days of simulated time (" +
                                  std::to_string(spec.requests) + " requests at " + std::to_string(spec.rate_per_s) +
                                  "/s); raise the rate or lower the requests");
    }
    Request r;
    r.id = i;
    r.arrival = Time::from_seconds(t);
    draw_lengths(spec, rng, r);
    r.session = spec.sessions > 0 ? rng.below(static_cast<uint64_t>(spec.sessions)) : static_cast<uint64_t>(i);
    out.push_back(r);
  }
  return out;
}

Request closed_loop_request(const TrafficSpec& spec, Rng& rng, int64_t id, Time arrival, uint64_t user) {
  Request r;
  r.id = id;
  r.arrival = arrival;
  draw_lengths(spec, rng, r);
  r.session = user;
  return r;
}

}  // namespace parallax
