// Compute sweep shapes, peaks and lines (compute_plan.h).
#include "harness/compute_plan.h"

#include "harness/run_context.h"

namespace parallax::harness {

std::vector<GemmShape> gemm_shapes() {
  struct Model {
    int64_t hidden, ffn;
  };
  constexpr int64_t kVocab = 128256;
  const Model models[] = {{4096, 14336}, {8192, 28672}, {16384, 53248}};
  const int64_t tokens[] = {2048, 4096, 8192, 16384};
  std::vector<GemmShape> shapes;
  auto add = [&](const std::string& label, int64_t m, int64_t n, int64_t k) {
    for (auto& s : shapes) {
      if (s.m == m && s.n == n && s.k == k) {
        s.label += "+" + label;
        return;
      }
    }
    shapes.push_back(GemmShape{label, m, n, k});
  };
  for (const Model& model : models) {
    const int64_t h = model.hidden;
    const std::string prefix = "h" + std::to_string(h) + ".";
    for (int64_t t : tokens) {
      add(prefix + "qkv", t, 3 * h, h);
      add(prefix + "attn_out", t, h, h);
      add(prefix + "mlp_up", t, 2 * model.ffn, h);
      add(prefix + "mlp_down", t, h, model.ffn);
      add(prefix + "logits", t, kVocab, h);
    }
  }
  for (int64_t s = 512; s <= 16384; s *= 2) add("square", s, s, s);
  return shapes;
}

std::optional<double> peak_tflops(const std::string& gpu_name, const std::string& dtype) {
  auto has = [&](const char* part) { return gpu_name.find(part) != std::string::npos; };
  const bool fp8 = dtype == "fp8";
  if (dtype != "bf16" && !fp8) return std::nullopt;
  // PCIe and NVL parts run at lower clocks and power; their peaks differ, so they are unknown.
  if (has("PCIe") || has("NVL")) return std::nullopt;
  if (has("H100") || has("H200")) return fp8 ? 1979.0 : 989.0;
  if (has("B200")) return fp8 ? 4500.0 : 2250.0;
  if (has("A100")) return fp8 ? std::nullopt : std::optional<double>(312.0);
  return std::nullopt;
}

std::vector<int64_t> memcpy_sizes(int64_t max_bytes) {
  std::vector<int64_t> sizes;
  for (int64_t s = int64_t{1} << 20; s <= max_bytes; s *= 2) sizes.push_back(s);
  return sizes;
}

nlohmann::json gemm_identity(const std::string& dtype, const GemmShape& shape) {
  return {{"kind", "gemm"}, {"dtype", dtype}, {"m", shape.m}, {"n", shape.n}, {"k", shape.k}};
}

nlohmann::json memcpy_identity(const std::string& what, int64_t size_bytes) {
  return {{"kind", "memcpy"}, {"what", what}, {"size_bytes", size_bytes}};
}

nlohmann::ordered_json gemm_line(const std::string& run_id, const std::string& dtype, const GemmShape& shape,
                                 int warmup, int iters, const TimeStats& t, std::optional<double> peak) {
  nlohmann::ordered_json j;
  j["kind"] = "gemm";
  j["run"] = run_id;
  j["dtype"] = dtype;
  j["m"] = shape.m;
  j["n"] = shape.n;
  j["k"] = shape.k;
  j["label"] = shape.label;
  j["warmup"] = warmup;
  j["iters"] = iters;
  j["time_us"] = round_decimals(t.mean_us, 3);
  j["time_us_min"] = round_decimals(t.min_us, 3);
  j["time_us_max"] = round_decimals(t.max_us, 3);
  j["time_us_median"] = round_decimals(t.median_us, 3);
  // FLOP/µs ÷ 1e6 = TFLOP/s.
  const double flops = 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.n) * static_cast<double>(shape.k);
  j["tflops"] = round_decimals(t.mean_us > 0 ? flops / t.mean_us / 1e6 : 0.0, 3);
  if (peak) j["peak_tflops"] = *peak;
  return j;
}

nlohmann::ordered_json memcpy_line(const std::string& run_id, const std::string& what, int64_t size_bytes,
                                   int warmup, int iters, const TimeStats& t) {
  nlohmann::ordered_json j;
  j["kind"] = "memcpy";
  j["run"] = run_id;
  j["what"] = what;
  j["size_bytes"] = size_bytes;
  j["warmup"] = warmup;
  j["iters"] = iters;
  j["time_us"] = round_decimals(t.mean_us, 3);
  j["time_us_min"] = round_decimals(t.min_us, 3);
  j["time_us_max"] = round_decimals(t.max_us, 3);
  j["time_us_median"] = round_decimals(t.median_us, 3);
  // Bytes read + bytes written, in B/µs ÷ 1e3 = GB/s.
  j["gbs"] = round_decimals(t.mean_us > 0 ? 2.0 * static_cast<double>(size_bytes) / t.mean_us / 1e3 : 0.0, 3);
  return j;
}

}  // namespace parallax::harness
