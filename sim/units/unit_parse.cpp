// Grammar: optional spaces, a non-negative decimal number (with optional exponent), optional
// spaces, a unit made of an SI or IEC prefix and a base symbol. Prefix letters are case-exact
// (M is mega, m would be milli and is refused) except that `k`/`K` both mean kilo.
#include "units/unit_parse.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>

namespace parallax {
namespace {

struct NumberAndUnit {
  double number;
  std::string unit;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string quoted(std::string_view s) {
  std::string out(1, '"');
  out.append(s).push_back('"');
  return out;
}

// Splits "400 Gb/s" into 400 and "Gb/s". Throws with `what` (e.g. "a bandwidth") in the message.
NumberAndUnit split(std::string_view text, const char* what, const char* example) {
  std::string_view s = trim(text);
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E') && i + 1 < s.size() &&
      ((s[i + 1] >= '0' && s[i + 1] <= '9') || s[i + 1] == '-' || s[i + 1] == '+')) {
    i += 2;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  }
  std::string_view num = s.substr(0, i);
  double value = 0.0;
  std::string_view digits = num;
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() ||
      !std::isfinite(value)) {
    throw UnitError(quoted(text) + " is not " + what + " (expected a number and a unit such as " +
                    example + ")");
  }
  if (value < 0) {
    throw UnitError(quoted(text) + " is negative; " + what + " must be zero or more");
  }
  return {value, std::string(trim(s.substr(i)))};
}

// Decimal prefix multiplier for a leading letter, or nullopt.
std::optional<double> decimal_prefix(char c) {
  switch (c) {
    case 'k': case 'K': return 1e3;
    case 'M': return 1e6;
    case 'G': return 1e9;
    case 'T': return 1e12;
    case 'P': return 1e15;
    case 'E': return 1e18;
    default: return std::nullopt;
  }
}

// Splits a unit into (multiplier, rest), accepting "", SI ("G") and IEC ("Gi") prefixes.
std::pair<double, std::string_view> strip_prefix(std::string_view unit, bool allow_binary) {
  if (unit.size() >= 2 && allow_binary && unit[1] == 'i') {
    constexpr std::array<std::pair<char, int>, 5> iec{
        {{'K', 10}, {'M', 20}, {'G', 30}, {'T', 40}, {'P', 50}}};
    for (auto [letter, shift] : iec) {
      if (unit[0] == letter || (letter == 'K' && unit[0] == 'k')) {
        return {std::ldexp(1.0, shift), unit.substr(2)};
      }
    }
  }
  if (!unit.empty()) {
    if (auto m = decimal_prefix(unit[0]); m && unit.size() > 1) return {*m, unit.substr(1)};
  }
  return {1.0, unit};
}

}  // namespace

Bandwidth parse_bandwidth(std::string_view text) {
  constexpr const char* kWhat = "a bandwidth";
  constexpr const char* kExample = "\"400 Gb/s\" or \"50 GB/s\"";
  auto [number, unit] = split(text, kWhat, kExample);
  auto [mult, base] = strip_prefix(unit, true);
  double per_unit = 0.0;
  if (base == "B/s" || base == "Bps") per_unit = 1.0;
  else if (base == "b/s" || base == "bps" || base == "bit/s") per_unit = 1.0 / 8.0;
  else {
    throw UnitError(quoted(text) + " is not " + kWhat + " (expected a number and a unit such as " +
                    kExample + "; b = bit, B = byte, and the rate needs /s or ps)");
  }
  return Bandwidth(number * mult * per_unit);
}

Time parse_time(std::string_view text) {
  constexpr const char* kWhat = "a time";
  auto [number, unit] = split(text, kWhat, "\"1.5 us\" or \"800ns\"");
  double scale = 0.0;
  if (unit == "ps") scale = 1e-12;
  else if (unit == "ns") scale = 1e-9;
  else if (unit == "us" || unit == "\xC2\xB5s" || unit == "\xCE\xBCs") scale = 1e-6;
  else if (unit == "ms") scale = 1e-3;
  else if (unit == "s") scale = 1.0;
  else {
    throw UnitError(quoted(text) + " is not " + kWhat +
                    " (expected a number and one of ps, ns, us, ms, s, e.g. \"1.5 us\")");
  }
  // Time counts picoseconds in 64 bits (about 106 days); beyond that a conversion is undefined.
  const double seconds = number * scale;
  if (!(std::fabs(seconds) < 9.2e6)) {
    throw UnitError(quoted(text) + " is too long a time (at most 9,200,000 s)");
  }
  return Time::from_seconds(seconds);
}

Bytes parse_bytes(std::string_view text) {
  constexpr const char* kWhat = "a size";
  constexpr const char* kExample = "\"80 GiB\" or \"64MB\"";
  auto [number, unit] = split(text, kWhat, kExample);
  auto [mult, base] = strip_prefix(unit, true);
  if (base == "B" || (mult == 1.0 && (unit == "bytes" || unit == "byte"))) {
    return Bytes(number * mult);
  }
  if (base == "b" || base == "bit") {
    throw UnitError(quoted(text) + " is in bits; sizes are in bytes (use B, e.g. " + kExample + ")");
  }
  throw UnitError(quoted(text) + " is not " + kWhat + " (expected a number and a unit such as " +
                  kExample + ")");
}

FlopRate parse_flop_rate(std::string_view text) {
  constexpr const char* kWhat = "a compute rate";
  auto [number, unit] = split(text, kWhat, "\"989 TFLOP/s\"");
  auto [mult, base] = strip_prefix(unit, false);
  if (base == "FLOP/s" || base == "FLOPS" || base == "flop/s") return FlopRate(number * mult);
  throw UnitError(quoted(text) + " is not " + kWhat +
                  " (expected a number and a unit such as \"989 TFLOP/s\" or \"67 TFLOPS\")");
}

OperationRate parse_operation_rate(std::string_view text) {
  constexpr const char* kWhat = "an operation rate";
  auto [number, unit] = split(text, kWhat, "\"3865 Gop/s\"");
  auto [mult, base] = strip_prefix(unit, false);
  if (base == "op/s" || base == "ops") return OperationRate(number * mult);
  throw UnitError(quoted(text) + " is not " + kWhat + " (expected a number and a unit such as \"3865 Gop/s\")");
}

double parse_ratio(std::string_view text) {
  std::string_view s = trim(text);
  size_t colon = s.find(':');
  auto bad = [&] {
    return UnitError(quoted(text) + " is not a ratio (expected \"down:up\" such as \"2:1\")");
  };
  if (colon == std::string_view::npos) throw bad();
  double a = 0, b = 0;
  std::string_view lhs = trim(s.substr(0, colon)), rhs = trim(s.substr(colon + 1));
  auto r1 = std::from_chars(lhs.data(), lhs.data() + lhs.size(), a);
  auto r2 = std::from_chars(rhs.data(), rhs.data() + rhs.size(), b);
  if (r1.ec != std::errc() || r1.ptr != lhs.data() + lhs.size() || r2.ec != std::errc() ||
      r2.ptr != rhs.data() + rhs.size()) {
    throw bad();
  }
  if (!(a > 0) || !(b > 0)) throw UnitError(quoted(text) + ": both sides of a ratio must be positive");
  return a / b;
}

namespace {
std::string with_suffix(double v, const char* suffix) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g %s", v, suffix);
  return buf;
}
}  // namespace

std::string format_bandwidth(Bandwidth bw) {
  double v = bw.value();
  if (v >= 1e12) return with_suffix(v / 1e12, "TB/s");
  if (v >= 1e9) return with_suffix(v / 1e9, "GB/s");
  if (v >= 1e6) return with_suffix(v / 1e6, "MB/s");
  return with_suffix(v, "B/s");
}

std::string format_time(Time t) {
  if (t == Time::zero()) return "0 s";
  double s = t.seconds();
  double a = std::fabs(s);
  if (a >= 1.0) return with_suffix(s, "s");
  if (a >= 1e-3) return with_suffix(s * 1e3, "ms");
  if (a >= 1e-6) return with_suffix(s * 1e6, "us");
  if (a >= 1e-9) return with_suffix(s * 1e9, "ns");
  return with_suffix(s * 1e12, "ps");
}

std::string format_bytes(Bytes b) {
  double v = b.value();
  constexpr std::array<const char*, 5> names{"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (v < 1024.0) return with_suffix(v, "B");
  int i = -1;
  while (v >= 1024.0 && i + 1 < static_cast<int>(names.size())) {
    v /= 1024.0;
    ++i;
  }
  return with_suffix(v, names[static_cast<size_t>(i)]);
}

std::string format_flop_rate(FlopRate r) {
  double v = r.value();
  if (v >= 1e15) return with_suffix(v / 1e15, "PFLOP/s");
  if (v >= 1e12) return with_suffix(v / 1e12, "TFLOP/s");
  return with_suffix(v / 1e9, "GFLOP/s");
}

}  // namespace parallax
