// Measured attention-core rates (measured_attention_table.h).
#include "compute/measured_attention_table.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace parallax {

MeasuredAttentionTable::MeasuredAttentionTable(std::vector<MeasuredAttentionRate> measurements)
    : measurements_(std::move(measurements)) {
  if (measurements_.empty()) throw std::invalid_argument("MeasuredAttentionTable: no measurements");
  struct Sum {
    double total = 0;
    int count = 0;
  };
  std::map<Key, std::map<double, std::map<double, Sum>>> sums;  // kernel and pass, d_qk, log pairs
  for (const MeasuredAttentionRate& m : measurements_) {
    if (!(m.s_q > 0 && m.s_kv > 0 && m.d_qk > 0) || !(m.achieved.value() > 0)) {
      throw std::invalid_argument("MeasuredAttentionTable: shapes and rates must be positive");
    }
    Sum& s = sums[{m.warp_mma_only, m.backward}][m.d_qk][std::log(m.s_q * m.s_kv)];
    s.total += m.achieved.value();
    ++s.count;
  }
  for (const auto& [key, by_dim] : sums) {
    for (const auto& [d, by_pairs] : by_dim) {
      std::vector<Point>& curve = curves_[key][d];
      for (const auto& [log_pairs, sum] : by_pairs) curve.push_back({log_pairs, sum.total / sum.count});
    }
  }
}

std::optional<FlopRate> MeasuredAttentionTable::lookup(const Key& key, double d_qk, double log_pairs) const {
  auto it = curves_.find(key);
  if (it == curves_.end()) return std::nullopt;
  // The nearest measured head dimension by ratio; a tie goes to the larger one.
  const auto& by_dim = it->second;
  auto nearest = by_dim.begin();
  for (auto d = by_dim.begin(); d != by_dim.end(); ++d) {
    if (std::abs(std::log(d->first / d_qk)) <= std::abs(std::log(nearest->first / d_qk))) nearest = d;
  }
  const std::vector<Point>& pts = nearest->second;
  if (log_pairs <= pts.front().log_pairs) return FlopRate(pts.front().rate);
  if (log_pairs >= pts.back().log_pairs) return FlopRate(pts.back().rate);
  auto hi = std::upper_bound(pts.begin(), pts.end(), log_pairs, [](double v, const Point& p) { return v < p.log_pairs; });
  auto lo = hi - 1;
  const double t = (log_pairs - lo->log_pairs) / (hi->log_pairs - lo->log_pairs);
  return FlopRate(lo->rate + t * (hi->rate - lo->rate));
}

std::optional<FlopRate> MeasuredAttentionTable::rate(const OperatorCost& op, const GpuSpec& gpu) const {
  if (op.kind != OperatorKind::kAttention || !(op.shape.m > 0 && op.shape.n > 0 && op.shape.k > 0)) return std::nullopt;
  const double log_pairs = std::log(op.shape.m * op.shape.n);
  if (auto r = lookup({op.warp_mma_only, op.backward_pass}, op.shape.k, log_pairs)) return r;
  // Without asynchronous tensor cores the GPU's own kernel is FlashAttention-2.
  if (has_async_tensor_cores(gpu)) return std::nullopt;
  return lookup({!op.warp_mma_only, op.backward_pass}, op.shape.k, log_pairs);
}

MeasuredAttentionRate parse_attention_line(JsonReader& line) {
  MeasuredAttentionRate m;
  JsonReader kernel = line.at("kernel");
  const std::string k = kernel.as_string();
  if (k != "fused" && k != "flash2") kernel.fail("unknown kernel \"" + k + "\" (expected fused or flash2)");
  m.warp_mma_only = k == "flash2";
  JsonReader pass = line.at("pass");
  const std::string p = pass.as_string();
  if (p != "forward" && p != "backward") pass.fail("unknown pass \"" + p + "\" (expected forward or backward)");
  m.backward = p == "backward";
  m.s_q = positive_number_at(line, "s_q");
  m.s_kv = positive_number_at(line, "s_kv");
  m.d_qk = positive_number_at(line, "d_qk");
  m.achieved = teraflops_per_second(positive_number_at(line, "tflops"));
  return m;
}

}  // namespace parallax
