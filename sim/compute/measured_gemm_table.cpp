#include "compute/measured_gemm_table.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "io/json_reader.h"

namespace parallax {

MeasuredGemmTable::MeasuredGemmTable(std::vector<MeasuredGemmRate> measurements, std::string source,
                                     std::shared_ptr<const GemmEfficiency> fallback,
                                     std::shared_ptr<const MeasuredAttentionTable> attention)
    : measurements_(std::move(measurements)),
      source_(std::move(source)),
      fallback_(std::move(fallback)),
      attention_(std::move(attention)) {
  if (!fallback_) fallback_ = std::make_shared<ShapeEfficiency>();
  if (measurements_.empty() && !attention_) throw std::invalid_argument("MeasuredGemmTable: no measurements");

  struct Sum {
    double total = 0;
    int count = 0;
    double mean() const { return total / count; }
  };
  struct Variants {
    Sum fast, precise;
    double rate() const {
      if (fast.count == 0) return precise.mean();
      if (precise.count == 0) return fast.mean();
      // One forward GEMM with fast accumulation, two backward ones without (header).
      return 3.0 / (1.0 / fast.mean() + 2.0 / precise.mean());
    }
  };
  std::map<DType, std::map<ShapeKey, Variants>> by_shape;
  for (const auto& m : measurements_) {
    const GemmShape& s = m.shape;
    if (!(s.m > 0 && s.n > 0 && s.k > 0 && s.batch > 0) || !(m.achieved.value() > 0)) {
      throw std::invalid_argument("MeasuredGemmTable: shapes and rates must be positive");
    }
    Variants& v = by_shape[m.dtype][{s.m, s.n, s.k, s.batch}];
    Sum& e = m.fast_accum ? v.fast : v.precise;
    e.total += m.achieved.value();
    ++e.count;
  }
  for (auto& [dtype, shapes] : by_shape) {
    Curve& c = by_dtype_[dtype];
    std::map<double, Sum> by_volume;
    for (auto& [key, variants] : shapes) {
      const double rate = variants.rate();
      c.exact[key] = rate;
      const auto& [m, n, k, batch] = key;
      Sum& v = by_volume[m * n * k * batch];
      v.total += rate;
      ++v.count;
    }
    for (auto& [volume, sum] : by_volume) c.points.push_back({std::log(volume), sum.mean()});
  }
}

FlopRate MeasuredGemmTable::achieved_rate(const GemmShape& shape, DType dtype, const GpuSpec& gpu) const {
  auto it = by_dtype_.find(dtype);
  if (it == by_dtype_.end()) return fallback_->achieved_rate(shape, dtype, gpu);
  const Curve& c = it->second;
  if (auto e = c.exact.find({shape.m, shape.n, shape.k, shape.batch}); e != c.exact.end()) return FlopRate(e->second);
  if (!(shape.volume() > 0)) return FlopRate(c.points.front().rate);
  double x = std::log(shape.volume());
  const auto& pts = c.points;
  if (x <= pts.front().log_volume) return FlopRate(pts.front().rate);
  if (x >= pts.back().log_volume) return FlopRate(pts.back().rate);
  auto hi = std::upper_bound(pts.begin(), pts.end(), x, [](double v, const Point& p) { return v < p.log_volume; });
  auto lo = hi - 1;
  double t = (x - lo->log_volume) / (hi->log_volume - lo->log_volume);
  return FlopRate(lo->rate + t * (hi->rate - lo->rate));
}

std::optional<FlopRate> MeasuredGemmTable::attention_rate(const OperatorCost& op, const GpuSpec& gpu) const {
  if (attention_) return attention_->rate(op, gpu);
  return fallback_->attention_rate(op, gpu);
}

std::string MeasuredGemmTable::describe() const {
  std::string dtypes;
  for (const auto& [dtype, curve] : by_dtype_) dtypes += (dtypes.empty() ? "" : ", ") + std::string(to_string(dtype));
  const std::string attention =
      attention_ ? "attention kernels measured (" + std::to_string(attention_->size()) + " points)" : "";
  if (measurements_.empty()) return fallback_->describe() + "; " + attention + " from " + source_;
  return "measured GEMM table (" + std::to_string(measurements_.size()) + " shapes, " + dtypes + ") from " + source_ +
         (attention.empty() ? "" : "; " + attention) + "; other dtypes: " + fallback_->describe();
}

namespace {

double positive_dimension(JsonReader& line, const std::string& key) {
  JsonReader v = line.at(key);
  int64_t x = v.as_int();
  if (x <= 0) v.fail("must be a positive integer, found " + std::to_string(x));
  return static_cast<double>(x);
}

}  // namespace

MeasuredGemmTable parse_gemm_measurements(const std::string& text, const std::string& name,
                                          std::shared_ptr<const GemmEfficiency> fallback) {
  std::vector<MeasuredGemmRate> out;
  std::vector<MeasuredAttentionRate> attention;
  std::istringstream in(text);
  std::string raw_line;
  int line_number = 0;
  while (std::getline(in, raw_line)) {
    ++line_number;
    if (raw_line.find_first_not_of(" \t\r") == std::string::npos) continue;
    // "file:line" in the file slot reads like a compiler's message and keeps one error type.
    const std::string where = name + ":" + std::to_string(line_number);
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(raw_line);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError(where, "", "malformed JSON at column " + std::to_string(e.byte));
    }
    JsonReader line(doc, where);
    std::string kind = line.at("kind").as_string();
    if (kind == "attention") attention.push_back(parse_attention_line(line));
    if (kind != "gemm") continue;
    MeasuredGemmRate m;
    JsonReader dtype = line.at("dtype");
    auto parsed = dtype_from_string(dtype.as_string());
    if (!parsed) dtype.fail("unknown dtype \"" + dtype.as_string() + "\" (expected fp32, tf32, bf16, fp16 or fp8)");
    m.dtype = *parsed;
    m.shape.m = positive_dimension(line, "m");
    m.shape.n = positive_dimension(line, "n");
    m.shape.k = positive_dimension(line, "k");
    if (line.has("batch")) m.shape.batch = positive_dimension(line, "batch");
    if (auto fast = line.find("fast_accum")) m.fast_accum = fast->as_bool();
    m.achieved = teraflops_per_second(positive_number_at(line, "tflops"));
    if (line.has("peak_tflops")) m.peak = teraflops_per_second(positive_number_at(line, "peak_tflops"));
    if (auto label = line.find("label")) m.label = label->as_string();
    out.push_back(std::move(m));
  }
  if (out.empty() && attention.empty()) {
    throw InputError(name, "", "no \"kind\":\"gemm\" or \"kind\":\"attention\" measurements in the file");
  }
  auto attention_table =
      attention.empty() ? nullptr : std::make_shared<const MeasuredAttentionTable>(std::move(attention));
  return MeasuredGemmTable(std::move(out), name, std::move(fallback), std::move(attention_table));
}

MeasuredGemmTable load_gemm_measurements(const std::string& path, std::shared_ptr<const GemmEfficiency> fallback) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_gemm_measurements(ss.str(), path, std::move(fallback));
}

}  // namespace parallax
