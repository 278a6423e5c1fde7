// Compute sweep shapes, peaks and lines (compute_plan.h).
#include "harness/compute_plan.h"

#include "harness/run_context.h"

namespace parallax::harness {

std::vector<GemmShape> gemm_shapes() {
  struct Model {
    int64_t hidden, ffn, heads, kv_heads;
  };
  struct Moe {
    const char* name;
    int64_t hidden, expert_ffn, experts_per_gpu;
    std::vector<int64_t> tokens_per_expert;
  };
  constexpr int64_t kVocab = 128256;
  constexpr int64_t kHeadDim = 128;
  const Model models[] = {{4096, 14336, 32, 8}, {8192, 28672, 64, 8}, {16384, 53248, 128, 8}};
  const int64_t tokens[] = {2048, 4096, 8192, 16384};
  const Moe moes[] = {{"dsv3", 7168, 2048, 8, {128, 256, 512, 1024}}, {"mixtral", 4096, 14336, 2, {1024, 2048, 4096}}};
  std::vector<GemmShape> shapes;
  auto add = [&](const std::string& label, int64_t m, int64_t n, int64_t k, int64_t batch = 1) {
    for (auto& s : shapes) {
      if (s.m == m && s.n == n && s.k == k && s.batch == batch) {
        s.label += "+" + label;
        return;
      }
    }
    shapes.push_back(GemmShape{label, m, n, k, batch});
  };
  for (const Model& model : models) {
    const int64_t h = model.hidden;
    const std::string prefix = "h" + std::to_string(h) + ".";
    for (int64_t t : tokens) {
      add(prefix + "qkv", t, 3 * h, h);
      add(prefix + "qkv_gqa", t, (model.heads + 2 * model.kv_heads) * kHeadDim, h);
      add(prefix + "attn_out", t, h, h);
      add(prefix + "mlp_up", t, 2 * model.ffn, h);
      add(prefix + "mlp_down", t, h, model.ffn);
      add(prefix + "logits", t, kVocab, h);
    }
  }
  for (int64_t s = 512; s <= 16384; s *= 2) add("square", s, s, s);
  // Last: should a cuBLASLt reject batched products, three failures in a row end the sweep only
  // after every single product is measured.
  for (const Moe& moe : moes) {
    for (int64_t m : moe.tokens_per_expert) {
      add(std::string(moe.name) + ".moe_up", m, 2 * moe.expert_ffn, moe.hidden, moe.experts_per_gpu);
      add(std::string(moe.name) + ".moe_down", m, moe.hidden, moe.expert_ffn, moe.experts_per_gpu);
    }
  }
  return shapes;
}

std::vector<GemmVariant> gemm_variants(const std::vector<std::string>& dtypes) {
  std::vector<GemmVariant> out;
  for (const auto& d : dtypes) {
    if (d == "fp8") {
      out.push_back(GemmVariant{d, true});
      out.push_back(GemmVariant{d, false});
    } else {
      out.push_back(GemmVariant{d, false});
    }
  }
  return out;
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

nlohmann::json gemm_identity(const GemmVariant& variant, const GemmShape& shape) {
  nlohmann::json j = {{"kind", "gemm"}, {"dtype", variant.dtype}, {"m", shape.m}, {"n", shape.n}, {"k", shape.k}};
  if (shape.batch != 1) j["batch"] = shape.batch;
  if (variant.fast_accum) j["fast_accum"] = true;
  return j;
}

nlohmann::json memcpy_identity(const std::string& what, int64_t size_bytes) {
  return {{"kind", "memcpy"}, {"what", what}, {"size_bytes", size_bytes}};
}

nlohmann::ordered_json gemm_line(const std::string& run_id, const GemmVariant& variant, const GemmShape& shape,
                                 int warmup, int iters, const TimeStats& t, std::optional<double> peak) {
  nlohmann::ordered_json j;
  j["kind"] = "gemm";
  j["run"] = run_id;
  j["dtype"] = variant.dtype;
  j["m"] = shape.m;
  j["n"] = shape.n;
  j["k"] = shape.k;
  if (shape.batch != 1) j["batch"] = shape.batch;
  if (variant.fast_accum) j["fast_accum"] = true;
  j["label"] = shape.label;
  j["warmup"] = warmup;
  j["iters"] = iters;
  j["time_us"] = round_decimals(t.mean_us, 3);
  j["time_us_min"] = round_decimals(t.min_us, 3);
  j["time_us_max"] = round_decimals(t.max_us, 3);
  j["time_us_median"] = round_decimals(t.median_us, 3);
  // FLOP/µs ÷ 1e6 = TFLOP/s.
  const double flops = 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.n) *
                       static_cast<double>(shape.k) * static_cast<double>(shape.batch);
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
  // In B/µs ÷ 1e3 = GB/s: a device copy reads and writes HBM (2 × size); a host copy's read and
  // write sit on either side of the link, whose one-way rate is size / time.
  const double moved = (what == "d2d" ? 2.0 : 1.0) * static_cast<double>(size_bytes);
  j["gbs"] = round_decimals(t.mean_us > 0 ? moved / t.mean_us / 1e3 : 0.0, 3);
  return j;
}

}  // namespace parallax::harness
