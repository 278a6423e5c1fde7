// Typed physical quantities: time, bytes, bandwidth, FLOPs and FLOP rates.
//
// Time is an integer count of picoseconds (±106 days fit in 63 bits), so event ordering is exact
// and runs are deterministic. Everything else is a double in base SI units: bytes, bytes/s,
// FLOP, FLOP/s. Bandwidth is decimal (1 GB/s = 1e9 B/s), as nccl-tests reports it.
// transfer_time() is the one place where bytes over bandwidth becomes time, and the one place
// that rounds.
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <concepts>
#include <limits>

namespace parallax {

/// A point in simulated time or a duration, in integer picoseconds.
class Time {
 public:
  constexpr Time() = default;
  /// Picoseconds; the exact representation.
  static constexpr Time ps(int64_t v) { return Time(v); }
  static constexpr Time ns(double v) { return from_seconds(v * 1e-9); }
  static constexpr Time us(double v) { return from_seconds(v * 1e-6); }
  static constexpr Time ms(double v) { return from_seconds(v * 1e-3); }
  /// Rounds to the nearest picosecond.
  static constexpr Time from_seconds(double s) {
    return Time(static_cast<int64_t>(s * 1e12 + (s >= 0 ? 0.5 : -0.5)));
  }
  static constexpr Time zero() { return Time(0); }
  static constexpr Time max() { return Time(std::numeric_limits<int64_t>::max()); }

  constexpr int64_t picoseconds() const { return ps_; }
  constexpr double seconds() const { return static_cast<double>(ps_) * 1e-12; }
  constexpr double microseconds() const { return static_cast<double>(ps_) * 1e-6; }

  constexpr auto operator<=>(const Time&) const = default;
  constexpr Time operator+(Time o) const { return Time(ps_ + o.ps_); }
  constexpr Time operator-(Time o) const { return Time(ps_ - o.ps_); }
  constexpr Time& operator+=(Time o) { ps_ += o.ps_; return *this; }
  constexpr Time& operator-=(Time o) { ps_ -= o.ps_; return *this; }
  constexpr Time operator*(int64_t k) const { return Time(ps_ * k); }
  // A fractional factor would silently truncate to an integer: scale with Time::from_seconds.
  template <std::floating_point F>
  Time operator*(F) const = delete;

 private:
  constexpr explicit Time(int64_t v) : ps_(v) {}
  int64_t ps_ = 0;
};

/// A base-unit double with arithmetic restricted to what is dimensionally sound for one unit.
/// Tag only distinguishes the types.
template <class Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double v) : v_(v) {}
  constexpr double value() const { return v_; }
  constexpr auto operator<=>(const Quantity&) const = default;
  constexpr Quantity operator+(Quantity o) const { return Quantity(v_ + o.v_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(v_ - o.v_); }
  constexpr Quantity& operator+=(Quantity o) { v_ += o.v_; return *this; }
  constexpr Quantity& operator-=(Quantity o) { v_ -= o.v_; return *this; }
  constexpr Quantity operator*(double k) const { return Quantity(v_ * k); }
  constexpr Quantity operator/(double k) const { return Quantity(v_ / k); }
  constexpr double operator/(Quantity o) const { return v_ / o.v_; }

 private:
  double v_ = 0.0;
};

template <class Tag>
constexpr Quantity<Tag> operator*(double k, Quantity<Tag> q) { return q * k; }

struct BytesTag {};
struct BandwidthTag {};
struct FlopsTag {};
struct FlopRateTag {};
struct OperationRateTag {};

/// A data size in bytes (fractional only inside the fluid network model).
using Bytes = Quantity<BytesTag>;
/// A data rate in bytes per second (decimal prefixes: 1 GB/s = 1e9 B/s).
using Bandwidth = Quantity<BandwidthTag>;
/// An amount of floating-point work, in FLOP.
using Flops = Quantity<FlopsTag>;
/// A compute rate in FLOP per second.
using FlopRate = Quantity<FlopRateTag>;
/// A rate of operations that are not FLOPs (a GPU's exponentials), per second.
using OperationRate = Quantity<OperationRateTag>;

constexpr Bytes bytes(double v) { return Bytes(v); }
constexpr Bytes kib(double v) { return Bytes(v * 1024.0); }
constexpr Bytes mib(double v) { return Bytes(v * 1024.0 * 1024.0); }
constexpr Bytes gib(double v) { return Bytes(v * 1024.0 * 1024.0 * 1024.0); }
/// The size in GiB, for reports.
constexpr double in_gib(Bytes b) { return b.value() / (1024.0 * 1024.0 * 1024.0); }
constexpr Bandwidth bytes_per_second(double v) { return Bandwidth(v); }
constexpr Bandwidth gigabytes_per_second(double v) { return Bandwidth(v * 1e9); }
constexpr Bandwidth gigabits_per_second(double v) { return Bandwidth(v * 1e9 / 8.0); }
constexpr FlopRate teraflops_per_second(double v) { return FlopRate(v * 1e12); }

/// Time to move `size` at `rate`, rounded up to the next picosecond so that a transfer never
/// finishes before the data could have arrived. The single bytes→time conversion of the code.
/// A zero size takes zero time; a non-positive rate, or a time past Time::max(), gives
/// Time::max() (never reached) rather than an overflowing conversion.
inline Time transfer_time(Bytes size, Bandwidth rate) {
  if (size.value() <= 0.0) return Time::zero();
  double ps = std::ceil(size.value() / rate.value() * 1e12);
  if (!(rate.value() > 0.0) || !(ps < 9.2e18)) return Time::max();
  return Time::ps(static_cast<int64_t>(ps));
}

/// Bytes that `rate` moves in `duration`.
inline Bytes bytes_moved(Bandwidth rate, Time duration) {
  return Bytes(rate.value() * duration.seconds());
}

/// Time to execute `work` at `rate`, rounded up to the next picosecond.
inline Time compute_time(Flops work, FlopRate rate) {
  if (work.value() <= 0.0) return Time::zero();
  double ps = std::ceil(work.value() / rate.value() * 1e12);
  if (!(rate.value() > 0.0) || !(ps < 9.2e18)) return Time::max();
  return Time::ps(static_cast<int64_t>(ps));
}

/// Rate achieved when `size` moves in `duration`.
inline Bandwidth achieved_bandwidth(Bytes size, Time duration) {
  return Bandwidth(size.value() / duration.seconds());
}

}  // namespace parallax
