// Measured scaling points (measured_scaling.h).
#include "planning/measured_scaling.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "io/input_error.h"

namespace parallax {
namespace {

[[noreturn]] void bad(const std::string& source, int line, const std::string& reason) {
  throw InputError(source + ":" + std::to_string(line), "", reason);
}

std::string trimmed(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) out.push_back(trimmed(cell));
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

std::optional<MeasuredQuantity> quantity_named(const std::string& name) {
  for (MeasuredQuantity q : {MeasuredQuantity::kStepTimeSeconds, MeasuredQuantity::kStepTimeMilliseconds,
                             MeasuredQuantity::kTokensPerSecond, MeasuredQuantity::kTokensPerSecondPerGpu}) {
    if (name == to_string(q)) return q;
  }
  return std::nullopt;
}

struct Header {
  size_t gpus = SIZE_MAX, value = SIZE_MAX, strategy = SIZE_MAX;
  MeasuredQuantity quantity = MeasuredQuantity::kStepTimeSeconds;
  size_t columns = 0;
};

Header read_header(const std::string& line, const std::string& source, int line_number) {
  Header h;
  const auto names = cells_of(line);
  h.columns = names.size();
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    size_t* slot = nullptr;
    if (n == "gpus") slot = &h.gpus;
    else if (n == "strategy") slot = &h.strategy;
    else if (auto q = quantity_named(n)) {
      if (h.value != SIZE_MAX) bad(source, line_number, "two measured columns; give one of step_time_s, step_time_ms, tokens_per_s, tokens_per_s_per_gpu");
      h.quantity = *q;
      slot = &h.value;
    } else {
      bad(source, line_number, "unknown column \"" + n + "\" (expected gpus, strategy, and one of step_time_s, step_time_ms, tokens_per_s, tokens_per_s_per_gpu)");
    }
    if (*slot != SIZE_MAX) bad(source, line_number, "column \"" + n + "\" given twice");
    *slot = i;
  }
  if (h.gpus == SIZE_MAX) bad(source, line_number, "no \"gpus\" column");
  if (h.value == SIZE_MAX) bad(source, line_number, "no measured column (step_time_s, step_time_ms, tokens_per_s or tokens_per_s_per_gpu)");
  return h;
}

int gpus_of(const std::string& cell, const std::string& source, int line) {
  long long v = 0;
  const char* end = cell.data() + cell.size();
  const auto [p, ec] = std::from_chars(cell.data(), end, v);
  if (ec != std::errc() || p != end || v < 1 || v > kMaxMeasuredGpus) {
    bad(source, line, "gpus: expected a whole number from 1 to " + std::to_string(kMaxMeasuredGpus) + ", found \"" + cell + "\"");
  }
  return static_cast<int>(v);
}

double value_of(const std::string& cell, MeasuredQuantity q, const std::string& source, int line) {
  double v = 0;
  const char* end = cell.data() + cell.size();
  const auto [p, ec] = std::from_chars(cell.data(), end, v);
  if (ec != std::errc() || p != end || !std::isfinite(v) || !(v > 0) || v > 1e15) {
    bad(source, line, std::string(to_string(q)) + ": expected a positive number, found \"" + cell + "\"");
  }
  return v;
}

// Tokens/s per GPU of a measurement, at `gpus` GPUs and `tokens_per_step` tokens a step.
double throughput_per_gpu(MeasuredQuantity q, double value, int gpus, double tokens_per_step) {
  switch (q) {
    case MeasuredQuantity::kStepTimeSeconds: return tokens_per_step / value / gpus;
    case MeasuredQuantity::kStepTimeMilliseconds: return tokens_per_step / (value * 1e-3) / gpus;
    case MeasuredQuantity::kTokensPerSecond: return value / gpus;
    case MeasuredQuantity::kTokensPerSecondPerGpu: return value;
  }
  return value;
}

const std::string& strategy_of(const MeasuredScalingPoint& p, const std::string& own) {
  return p.strategy.empty() ? own : p.strategy;
}

}  // namespace

const char* to_string(MeasuredQuantity q) {
  switch (q) {
    case MeasuredQuantity::kStepTimeSeconds: return "step_time_s";
    case MeasuredQuantity::kStepTimeMilliseconds: return "step_time_ms";
    case MeasuredQuantity::kTokensPerSecond: return "tokens_per_s";
    case MeasuredQuantity::kTokensPerSecondPerGpu: return "tokens_per_s_per_gpu";
  }
  return "?";
}

MeasuredScaling parse_measured_scaling(const std::string& text, const std::string& source) {
  MeasuredScaling m;
  m.source = source;
  std::istringstream in(text);
  std::optional<Header> header;
  std::set<std::pair<std::string, int>> seen;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const std::string content = trimmed(line);
    if (content.empty() || content.front() == '#') continue;
    if (!header) {
      header = read_header(content, source, line_number);
      continue;
    }
    const auto cells = cells_of(content);
    if (cells.size() != header->columns) {
      bad(source, line_number, "expected " + std::to_string(header->columns) + " columns, found " + std::to_string(cells.size()));
    }
    MeasuredScalingPoint p;
    p.line = line_number;
    p.gpus = gpus_of(cells[header->gpus], source, line_number);
    p.value = value_of(cells[header->value], header->quantity, source, line_number);
    if (header->strategy != SIZE_MAX) {
      p.strategy = cells[header->strategy];
      if (!p.strategy.empty() && !scaling_strategy_from(p.strategy)) {
        bad(source, line_number, "strategy: \"" + p.strategy + "\" (expected ddp, zero1, zero2, zero3, fsdp or hsdp, or empty)");
      }
    }
    if (!seen.emplace(p.strategy, p.gpus).second) {
      bad(source, line_number, "a second measurement of " + (p.strategy.empty() ? std::string("the workload's strategy") : p.strategy) +
                                   " at " + std::to_string(p.gpus) + " GPUs");
    }
    m.points.push_back(std::move(p));
  }
  if (!header) throw InputError(source, "", "no header line (e.g. \"gpus,step_time_s\")");
  if (m.points.empty()) bad(source, line_number, "no measurement after the header");
  m.quantity = header->quantity;
  return m;
}

MeasuredScaling load_measured_scaling(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path, "", "cannot be read");
  std::ostringstream text;
  text << f.rdbuf();
  return parse_measured_scaling(text.str(), path);
}

std::vector<int> gpu_counts_with(const std::vector<int>& gpus, const MeasuredScaling& measured) {
  std::set<int> all(gpus.begin(), gpus.end());
  for (const MeasuredScalingPoint& p : measured.points) all.insert(p.gpus);
  return {all.begin(), all.end()};
}

std::vector<std::string> strategies_missing(const std::vector<std::string>& names, const MeasuredScaling& measured,
                                            const std::string& own_strategy) {
  std::vector<std::string> missing;
  for (const MeasuredScalingPoint& p : measured.points) {
    const std::string& s = strategy_of(p, own_strategy);
    if (std::find(names.begin(), names.end(), s) == names.end() &&
        std::find(missing.begin(), missing.end(), s) == missing.end()) {
      missing.push_back(s);
    }
  }
  return missing;
}

void attach_measurements(ScalingStudy& study, const MeasuredScaling& measured, const std::string& own_strategy) {
  study.measured_source = measured.source;
  study.measured_column = to_string(measured.quantity);
  for (const MeasuredScalingPoint& p : measured.points) {
    const std::string& name = strategy_of(p, own_strategy);
    auto row = std::find_if(study.rows.begin(), study.rows.end(), [&](const ScalingRow& r) { return r.strategy.name == name; });
    if (row == study.rows.end()) bad(measured.source, p.line, "strategy " + name + " is not in the study");
    auto cell = std::find_if(row->cells.begin(), row->cells.end(), [&](const ScalingCell& c) { return c.gpus == p.gpus; });
    if (cell == row->cells.end()) bad(measured.source, p.line, std::to_string(p.gpus) + " GPUs are not in the study");
    MeasuredCell m;
    m.line = p.line;
    m.value = p.value;
    m.tokens_per_s_per_gpu = throughput_per_gpu(measured.quantity, p.value, p.gpus, cell->tokens_per_step);
    if (cell->result && !cell->result->out_of_memory) {
      m.error = cell->result->tokens_per_second_per_gpu / m.tokens_per_s_per_gpu - 1.0;
    }
    cell->measured = m;
  }
}

MeasuredSummary measured_summary(const ScalingStudy& study) {
  MeasuredSummary s;
  std::vector<double> errors;
  for (const ScalingRow& row : study.rows) {
    for (const ScalingCell& c : row.cells) {
      if (!c.measured) continue;
      if (!c.measured->error) {
        ++s.not_compared;
        continue;
      }
      errors.push_back(*c.measured->error);
    }
  }
  s.compared = static_cast<int>(errors.size());
  if (errors.empty()) return s;
  for (double e : errors) s.mean_abs_error += std::abs(e);
  s.mean_abs_error /= static_cast<double>(errors.size());
  std::sort(errors.begin(), errors.end());
  const size_t n = errors.size();
  s.median_error = n % 2 ? errors[n / 2] : 0.5 * (errors[n / 2 - 1] + errors[n / 2]);
  return s;
}

}  // namespace parallax
