// The serving simulation's random numbers: one seeded generator (xoshiro256**, seeded through
// splitmix64) and the distributions it draws from, written out here rather than taken from
// <random>, whose distributions differ between standard libraries — same seed, same bytes.
#pragma once

#include <cmath>
#include <cstdint>

namespace parallax {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) s = splitmix64(seed);
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// Uniform in [0, 1), 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in (0, 1]: safe under a logarithm.
  double uniform_open_low() { return 1.0 - uniform(); }
  /// Uniform integer in [0, n), 1 ≤ n < 2⁵³.
  uint64_t below(uint64_t n) {
    const auto k = static_cast<uint64_t>(uniform() * static_cast<double>(n));
    return k < n ? k : n - 1;
  }
  /// Exponential with the given mean.
  double exponential(double mean) { return -mean * std::log(uniform_open_low()); }
  /// Standard normal (Box–Muller, one of the pair).
  double normal() {
    const double u = uniform_open_low(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * 3.14159265358979323846 * v);
  }
  /// Gamma with shape k > 0 and scale θ (Marsaglia and Tsang 2000; k < 1 by the boost
  /// Gamma(k) = Gamma(k + 1) · U^(1/k)).
  double gamma(double shape, double scale) {
    if (shape < 1.0) return gamma(shape + 1.0, scale) * std::pow(uniform_open_low(), 1.0 / shape);
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x = 0, v = 0;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0);
      v = v * v * v;
      const double u = uniform_open_low();
      if (u < 1.0 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) {
        return d * v * scale;
      }
    }
  }
  /// Lognormal whose logarithm has mean mu and standard deviation sigma.
  double lognormal(double mu, double sigma) { return std::exp(mu + sigma * normal()); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

}  // namespace parallax
