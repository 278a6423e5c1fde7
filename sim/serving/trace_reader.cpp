// Request traces (trace_reader.h).
#include "serving/trace_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "io/input_error.h"
#include "io/json_reader.h"

namespace parallax {
namespace {

constexpr int64_t kMooncakeBlockTokens = 512;
constexpr int64_t kMaxTokens = 100000000;

[[noreturn]] void bad(const std::string& name, int line, const std::string& reason) {
  throw InputError(name + ":" + std::to_string(line), "", reason);
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  bool quoted = false;
  for (char ch : line) {
    if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      out.push_back(cell);
      cell.clear();
    } else if (ch != '\r') {
      cell += ch;
    }
  }
  out.push_back(cell);
  return out;
}

int64_t tokens_of(const std::string& cell, const std::string& name, int line, const std::string& column) {
  int64_t v = -1;
  const char* end = cell.data() + cell.size();
  const auto [p, ec] = std::from_chars(cell.data(), end, v);
  if (ec != std::errc() || p != end || v < 0 || v > kMaxTokens) {
    bad(name, line, column + ": expected a token count from 0 to " + std::to_string(kMaxTokens) + ", found \"" + cell + "\"");
  }
  return v;
}

double seconds_of(const std::string& cell, const std::string& name, int line, const std::string& column) {
  double v = 0;
  const char* end = cell.data() + cell.size();
  const auto [p, ec] = std::from_chars(cell.data(), end, v);
  if (ec != std::errc() || p != end || !std::isfinite(v) || v < 0 || v > 1e10) {
    bad(name, line, column + ": expected a time in seconds, found \"" + cell + "\"");
  }
  return v;
}

// Days from 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// FNV-1a: the same session id hashes the same with every standard library.
uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

struct Columns {
  std::map<std::string, size_t> index;
  size_t at(const std::string& name) const { return index.at(name); }
  bool has(const std::string& name) const { return index.count(name) != 0; }
};

Columns header(const std::string& line) {
  Columns c;
  const auto cells = split_csv(line);
  for (size_t i = 0; i < cells.size(); ++i) c.index[cells[i]] = i;
  return c;
}

// Arrivals past this (about 100 days) would overflow the picosecond clock.
constexpr double kLatestArrivalPs = 9e18;

// `arrival_ps` is exact for the traces' own resolutions (100 ns, 1 ms, decimal seconds).
Request make(double arrival_ps, int64_t prompt, int64_t output, double rate_scale, const std::string& name, int line) {
  const double at = arrival_ps / rate_scale;
  if (!(std::abs(at) < kLatestArrivalPs)) bad(name, line, "arrives more than 100 days into the trace (after rate scaling)");
  Request r;
  r.arrival = Time::ps(std::llround(at));
  r.prompt_tokens = std::max<int64_t>(prompt, 1);
  r.output_tokens = std::max<int64_t>(output, 1);
  return r;
}

void read_csv(std::istringstream& in, const std::string& name, const Columns& cols, Trace& t, double scale) {
  const bool azure = t.format == TraceFormat::kAzure;
  const std::string time_col = azure ? "TIMESTAMP" : "Timestamp";
  const std::string in_col = azure ? "ContextTokens" : "Request tokens";
  const std::string out_col = azure ? "GeneratedTokens" : "Response tokens";
  const size_t need = std::max({cols.at(time_col), cols.at(in_col), cols.at(out_col)}) + 1;
  int64_t first = -1;  // Azure: 100 ns ticks of the first row
  int line_number = 1;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto cells = split_csv(line);
    if (cells.size() < need) bad(name, line_number, "expected at least " + std::to_string(need) + " columns");
    int64_t ticks = 0;
    double seconds = 0;
    if (azure) {
      ticks = parse_azure_ticks(cells[cols.at(time_col)]);
      if (ticks < 0) bad(name, line_number, "TIMESTAMP: expected YYYY-MM-DD HH:MM:SS.fraction, found \"" + cells[cols.at(time_col)] + "\"");
    } else {
      seconds = seconds_of(cells[cols.at(time_col)], name, line_number, time_col);
    }
    const int64_t prompt = tokens_of(cells[cols.at(in_col)], name, line_number, in_col);
    const int64_t output = tokens_of(cells[cols.at(out_col)], name, line_number, out_col);
    if (!azure && output == 0) {
      ++t.skipped;  // BurstGPT's failed requests
      continue;
    }
    if (first < 0) first = ticks;
    Request r = make(azure ? static_cast<double>(ticks - first) * 1e5 : seconds * 1e12, prompt, output, scale, name,
                     line_number);
    if (!azure && cols.has("Session ID")) r.session = fnv1a(cells[cols.at("Session ID")]);
    t.requests.push_back(std::move(r));
  }
}

void read_mooncake(std::istringstream& in, const std::string& name, Trace& t, double scale) {
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = name + ":" + std::to_string(line_number);
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      bad(name, line_number, "not a JSON object (malformed line)");
    }
    JsonReader row(doc, where);
    if (!row.is_object()) bad(name, line_number, "expected a JSON object");
    const double ms = row.at("timestamp").as_number();
    if (!(std::isfinite(ms) && ms >= 0 && ms <= 1e13)) row.at("timestamp").fail("must be milliseconds from 0");
    const int64_t prompt = row.at("input_length").as_int();
    const int64_t output = row.at("output_length").as_int();
    if (prompt < 0 || prompt > kMaxTokens) row.at("input_length").fail("out of range");
    if (output < 0 || output > kMaxTokens) row.at("output_length").fail("out of range");
    Request r = make(ms * 1e9, prompt, output, scale, name, line_number);
    if (auto ids = row.find("hash_ids")) {
      for (const JsonReader& id : ids->elements()) {
        const int64_t v = id.as_int();
        if (v < 0) id.fail("a hash id is a non-negative integer");
        r.prefix_blocks.push_back(static_cast<uint64_t>(v));
      }
      r.prefix_block_tokens = kMooncakeBlockTokens;
    }
    row.finish();
    t.requests.push_back(std::move(r));
  }
}

}  // namespace

const char* to_string(TraceFormat f) {
  switch (f) {
    case TraceFormat::kAzure: return "Azure LLM CSV";
    case TraceFormat::kBurstGpt: return "BurstGPT CSV";
    case TraceFormat::kMooncake: return "Mooncake JSON lines";
  }
  return "?";
}

int64_t parse_azure_ticks(const std::string& text) {
  // YYYY-MM-DD HH:MM:SS[.f…], each field its exact width; up to 7 fractional digits.
  auto digits = [&](size_t at, size_t n, int& out) {
    if (at + n > text.size()) return false;
    out = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
      out = out * 10 + (text[i] - '0');
    }
    return true;
  };
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  if (!digits(0, 4, y) || text.size() < 19 || text[4] != '-' || !digits(5, 2, mo) || text[7] != '-' ||
      !digits(8, 2, d) || (text[10] != ' ' && text[10] != 'T') || !digits(11, 2, h) || text[13] != ':' ||
      !digits(14, 2, mi) || text[16] != ':' || !digits(17, 2, s)) {
    return -1;
  }
  int64_t fraction = 0;
  if (text.size() > 19) {
    const size_t n = text.size() - 20;
    if (text[19] != '.' || n < 1 || n > 7) return -1;
    int f = 0;
    if (!digits(20, n, f)) return -1;
    fraction = f;
    for (size_t i = n; i < 7; ++i) fraction *= 10;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return -1;
  const int64_t seconds = days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) * 86400 +
                          int64_t{h} * 3600 + int64_t{mi} * 60 + s;
  return seconds * 10000000 + fraction;
}

Trace parse_trace(const std::string& text, const std::string& name, double rate_scale) {
  if (!(rate_scale > 0 && rate_scale <= 1e6)) throw InputError(name, "", "the rate scale must be in (0, 1e6]");
  Trace t;
  std::istringstream in(text);
  std::string first;
  while (std::getline(in, first) && first.find_first_not_of(" \t\r") == std::string::npos) {
  }
  if (first.empty()) throw InputError(name, "", "empty trace");
  if (first.find_first_not_of(" \t") != std::string::npos && first[first.find_first_not_of(" \t")] == '{') {
    t.format = TraceFormat::kMooncake;
    std::istringstream all(text);
    read_mooncake(all, name, t, rate_scale);
  } else {
    const Columns cols = header(first);
    if (cols.has("TIMESTAMP") && cols.has("ContextTokens") && cols.has("GeneratedTokens")) {
      t.format = TraceFormat::kAzure;
    } else if (cols.has("Timestamp") && cols.has("Request tokens") && cols.has("Response tokens")) {
      t.format = TraceFormat::kBurstGpt;
    } else {
      throw InputError(name + ":1", "",
                       "not a known trace: expected an Azure (TIMESTAMP,ContextTokens,GeneratedTokens) or BurstGPT "
                       "(Timestamp,...,Request tokens,Response tokens,...) header, or Mooncake JSON lines");
    }
    read_csv(in, name, cols, t, rate_scale);
  }
  std::stable_sort(t.requests.begin(), t.requests.end(),
                   [](const Request& a, const Request& b) { return a.arrival < b.arrival; });
  // Arrivals count from the earliest row (an Azure trace's rows need not be in order).
  if (!t.requests.empty() && t.requests.front().arrival < Time::zero()) {
    const Time shift = t.requests.front().arrival;
    for (Request& r : t.requests) r.arrival -= shift;
  }
  for (size_t i = 0; i < t.requests.size(); ++i) {
    t.requests[i].id = static_cast<int64_t>(i);
    if (t.requests[i].session == 0) t.requests[i].session = i;
  }
  if (t.requests.empty()) throw InputError(name, "", "the trace has no request");
  return t;
}

std::vector<Request> repeat_trace(const std::vector<Request>& requests, size_t n) {
  std::vector<Request> out;
  if (requests.empty()) return out;
  out.reserve(n);
  const int64_t span = requests.back().arrival.picoseconds() - requests.front().arrival.picoseconds();
  const int64_t gap = requests.size() > 1 ? span / static_cast<int64_t>(requests.size() - 1) : 0;
  for (size_t i = 0; i < n; ++i) {
    Request r = requests[i % requests.size()];
    const auto copy = static_cast<int64_t>(i / requests.size());
    r.arrival = Time::ps(r.arrival.picoseconds() + copy * (span + gap));
    r.id = static_cast<int64_t>(i);
    if (copy > 0) r.session = r.session + static_cast<uint64_t>(copy) * requests.size();
    out.push_back(std::move(r));
  }
  return out;
}

Trace read_trace(const std::string& path, double rate_scale) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open the trace");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_trace(text.str(), path, rate_scale);
}

}  // namespace parallax
