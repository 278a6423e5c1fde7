// Strict reading of JSON input documents. A JsonReader is a view of one JSON value together
// with the file it came from and its JSON pointer; every accessor that fails throws
// InputError naming both. Objects track which keys were read, so finish() can reject the
// keys nobody asked for (a misspelt key must never fall back silently to a default).
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/input_error.h"
#include "units/units.h"

namespace parallax {

/// The deepest nesting a JSON input may have.
inline constexpr int kMaxJsonDepth = 256;

/// Parses `path` as JSON; syntax errors name the line and column. Throws InputError.
nlohmann::json load_json_file(const std::string& path);
/// Parses `text` as JSON, reporting errors against `name`. Throws InputError.
nlohmann::json parse_json_text(const std::string& text, const std::string& name);

class JsonReader {
 public:
  /// `value` must outlive the reader and all readers derived from it.
  JsonReader(const nlohmann::json& value, std::string file, std::string pointer = "");

  const nlohmann::json& raw() const { return *value_; }
  const std::string& file() const { return file_; }
  const std::string& pointer() const { return pointer_; }

  /// Throws InputError at this value's pointer (or the child `key`'s, when given).
  [[noreturn]] void fail(const std::string& reason) const;
  [[noreturn]] void fail_at(const std::string& key, const std::string& reason) const;

  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }
  bool is_string() const { return value_->is_string(); }
  bool is_number() const { return value_->is_number(); }
  bool has(const std::string& key) const;

  /// The child under `key`; fails when missing or when this is not an object.
  JsonReader at(const std::string& key);
  /// The child under `key` if present.
  std::optional<JsonReader> find(const std::string& key);
  /// Elements of an array (fails if this is not an array).
  std::vector<JsonReader> elements() const;
  /// Keys of an object in sorted order, as nlohmann::json stores them (fails if this is not an
  /// object); marks them read.
  std::vector<std::string> keys();

  // Leaf conversions of this value; fail with the expected type in the message.
  std::string as_string() const;
  int64_t as_int() const;
  double as_number() const;
  bool as_bool() const;
  Bandwidth as_bandwidth() const;
  Time as_time() const;
  Bytes as_bytes() const;  ///< a size string or a non-negative integer of bytes
  FlopRate as_flop_rate() const;
  OperationRate as_operation_rate() const;
  double as_ratio() const;

  /// Requires this to be an object whose every key was read; fails on the first unread key
  /// with the list of keys that are accepted here.
  void finish() const;

 private:
  void require_object() const;
  std::string child_pointer(const std::string& key) const;
  static std::string escape(const std::string& key);

  const nlohmann::json* value_;
  std::string file_;
  std::string pointer_;
  std::set<std::string> read_;  // keys asked for, whether present or not
};

/// Why `name` cannot name a bundled preset (empty when it can): 1–128 letters, digits, '.',
/// '_' or '-', not starting with '.'; so that no path, control character or over-long name
/// reaches the file system.
std::string preset_name_problem(const std::string& name);
/// The file of preset `name` in `dir`; a bad name fails at `r` (InputError with its pointer).
std::string preset_file(const std::string& dir, const JsonReader& r);

/// Requires `value` to be strictly positive (bandwidths, latencies where zero is meaningless)
/// and finite ("1e308 GiB" overflows to infinity in bytes).
template <class Q>
Q require_positive(const JsonReader& r, Q value) {
  if (!(value.value() > 0)) r.fail("must be greater than zero");
  if (!std::isfinite(static_cast<double>(value.value()))) r.fail("is too large to be represented");
  return value;
}

/// The number under `key` of object `r`, which must be greater than zero (fails at the child
/// with the value found).
double positive_number_at(JsonReader& r, const std::string& key);

}  // namespace parallax
