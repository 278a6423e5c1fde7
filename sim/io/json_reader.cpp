#include "io/json_reader.h"

#include <cctype>
#include <climits>
#include <cmath>
#include <fstream>
#include <sstream>

#include "units/unit_parse.h"

namespace parallax {
namespace {

// nlohmann reports a byte offset; people want line and column.
std::string line_column(const std::string& text, size_t byte) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

const char* type_name(const nlohmann::json& v) { return v.type_name(); }

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& name) {
  // Deeper documents are refused while they are read: every reader here walks them by
  // recursion, and no input of this project nests more than a few levels.
  bool too_deep = false;
  auto depth_guard = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  try {
    nlohmann::json doc = nlohmann::json::parse(text, depth_guard);
    if (too_deep) throw InputError(name, "", "nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    return doc;
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond a double ("1e400"): nlohmann names the number but not where it is.
    std::string what = e.what();
    const auto pos = what.find("] ");
    throw InputError(name, "", "malformed JSON: " + (pos == std::string::npos ? what : what.substr(pos + 2)));
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: " prefix.
    auto pos = what.find(": ");
    std::string detail = pos == std::string::npos ? what : what.substr(pos + 2);
    if (auto pos2 = detail.find(": "); pos2 != std::string::npos &&
                                        detail.rfind("syntax error", 0) != 0) {
      detail = detail.substr(pos2 + 2);
    }
    throw InputError(name, "", "malformed JSON at " + line_column(text, e.byte > 0 ? e.byte - 1 : 0) +
                                   ": " + detail);
  }
}

std::string preset_name_problem(const std::string& name) {
  if (name.empty() || name.size() > 128) return "a preset name has 1 to 128 characters";
  if (name.front() == '.') return "a preset name does not start with '.'";
  for (unsigned char c : name) {
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-')) {
      return "a preset name has only letters, digits, '.', '_' and '-'";
    }
  }
  return "";
}

std::string preset_file(const std::string& dir, const JsonReader& r) {
  const std::string name = r.as_string();
  if (const std::string why = preset_name_problem(name); !why.empty()) r.fail(why);
  return dir + "/" + name + ".json";
}

nlohmann::json load_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), path);
}

JsonReader::JsonReader(const nlohmann::json& value, std::string file, std::string pointer)
    : value_(&value), file_(std::move(file)), pointer_(std::move(pointer)) {}

void JsonReader::fail(const std::string& reason) const { throw InputError(file_, pointer(), reason); }

void JsonReader::fail_at(const std::string& key, const std::string& reason) const {
  throw InputError(file_, child_pointer(key), reason);
}

std::string JsonReader::escape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string JsonReader::child_pointer(const std::string& key) const { return pointer_ + "/" + escape(key); }

void JsonReader::require_object() const {
  if (!value_->is_object()) fail(std::string("expected an object, found ") + type_name(*value_));
}

bool JsonReader::has(const std::string& key) const {
  return value_->is_object() && value_->contains(key);
}

JsonReader JsonReader::at(const std::string& key) {
  require_object();
  read_.insert(key);
  auto it = value_->find(key);
  if (it == value_->end()) fail("missing required key \"" + key + "\"");
  return JsonReader(*it, file_, child_pointer(key));
}

std::optional<JsonReader> JsonReader::find(const std::string& key) {
  require_object();
  read_.insert(key);
  auto it = value_->find(key);
  if (it == value_->end()) return std::nullopt;
  return JsonReader(*it, file_, child_pointer(key));
}

std::vector<JsonReader> JsonReader::elements() const {
  if (!value_->is_array()) fail(std::string("expected an array, found ") + type_name(*value_));
  std::vector<JsonReader> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i) {
    out.emplace_back((*value_)[i], file_, pointer_ + "/" + std::to_string(i));
  }
  return out;
}

std::vector<std::string> JsonReader::keys() {
  require_object();
  std::vector<std::string> out;
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    out.push_back(it.key());
    read_.insert(it.key());
  }
  return out;
}

std::string JsonReader::as_string() const {
  if (!value_->is_string()) fail(std::string("expected a string, found ") + type_name(*value_));
  return value_->get<std::string>();
}

int64_t JsonReader::as_int() const {
  // Range first: a float beyond int64 converted is undefined behaviour, an unsigned beyond
  // it wraps negative (both found by fuzzing).
  constexpr double kLimit = 9.2e18;  // below 2^63
  if (value_->is_number_unsigned() && value_->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail("is too large for an integer, found " + value_->dump());
  }
  if (value_->is_number_integer()) return value_->get<int64_t>();
  if (value_->is_number_float()) {
    const double d = value_->get<double>();
    if (!(std::fabs(d) < kLimit)) fail("is too large for an integer, found " + value_->dump());
    if (d == std::trunc(d)) return static_cast<int64_t>(d);
  }
  fail(std::string("expected an integer, found ") +
       (value_->is_number() ? value_->dump() : std::string(type_name(*value_))));
}

double JsonReader::as_number() const {
  if (!value_->is_number()) fail(std::string("expected a number, found ") + type_name(*value_));
  return value_->get<double>();
}

bool JsonReader::as_bool() const {
  if (!value_->is_boolean()) fail(std::string("expected true or false, found ") + type_name(*value_));
  return value_->get<bool>();
}

namespace {
template <class F>
auto parse_unit(const JsonReader& r, const char* what, const char* example, F&& parse) {
  if (!r.is_string()) {
    r.fail(std::string("expected ") + what + " with a unit as a string, e.g. " + example +
           ", found " + (r.is_number() ? "a bare number " + r.raw().dump() : std::string(r.raw().type_name())));
  }
  try {
    return parse(r.raw().template get<std::string>());
  } catch (const UnitError& e) {
    r.fail(e.what());
  }
}
}  // namespace

Bandwidth JsonReader::as_bandwidth() const {
  return parse_unit(*this, "a bandwidth", "\"400 Gb/s\"", parse_bandwidth);
}
Time JsonReader::as_time() const { return parse_unit(*this, "a time", "\"1.5 us\"", parse_time); }
Bytes JsonReader::as_bytes() const {
  if (value_->is_number_integer()) {
    if (value_->get<int64_t>() < 0) fail("a size must be zero or more, found " + value_->dump());
    return Bytes(static_cast<double>(value_->get<int64_t>()));
  }
  return parse_unit(*this, "a size", "\"64 MiB\"", parse_bytes);
}
FlopRate JsonReader::as_flop_rate() const {
  return parse_unit(*this, "a compute rate", "\"989 TFLOP/s\"", parse_flop_rate);
}
OperationRate JsonReader::as_operation_rate() const {
  return parse_unit(*this, "an operation rate", "\"3865 Gop/s\"", parse_operation_rate);
}
double JsonReader::as_ratio() const { return parse_unit(*this, "a ratio", "\"2:1\"", parse_ratio); }

void JsonReader::finish() const {
  require_object();
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    if (!read_.count(it.key())) {
      std::string accepted;
      for (const auto& k : read_) accepted += (accepted.empty() ? "" : ", ") + k;
      throw InputError(file_, child_pointer(it.key()),
                       "unknown key \"" + it.key() + "\" (accepted here: " + accepted + ")");
    }
  }
}

double positive_number_at(JsonReader& r, const std::string& key) {
  JsonReader v = r.at(key);
  const double x = v.as_number();
  if (!(x > 0)) v.fail("must be greater than zero, found " + v.raw().dump());
  return x;
}

}  // namespace parallax
