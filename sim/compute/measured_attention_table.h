// Measured rates of the attention core, from the `"kind":"attention"` lines of a measurement
// file (calibrate/FORMAT.md; calibrate/scripts/attention-bench.py writes them), in place of the
// compute model's closed form (η_attention and the shape saturation of compute_model.h).
//
// A line gives one fused attention kernel's rate for one pass (forward, or the backward alone)
// at one shape, counted as the compute model counts it: forward FLOPs 2·pairs·heads·batch·
// (d_qk + d_v), pairs s_q·s_kv (half of it when causal), the backward 2.5 times that. Lookup for
// an operator (OperatorCost of kind kAttention):
// - the kernel: "fused", the GPU's own (FlashAttention-2 on Ampere; cuDNN or FlashAttention-3
//   on Hopper and Blackwell), or "flash2", FlashAttention-2 itself (OperatorCost::warp_mma_only).
//   On a GPU without asynchronous tensor cores the two are one kernel, so either kind answers
//   for the other there;
// - the pass: OperatorCost::backward_pass;
// - the head dimension: the measured d_qk nearest to the operator's (ratio, ties to the larger);
// - the sequence: linear in log(s_q·s_kv) between the two measured points around it, the
//   nearest end outside them (no extrapolation); a measured shape returns its rate exactly
//   (several lines of one shape are averaged).
// An operator of a kernel or pass that no line measured gets nullopt: the closed form.
// What this ignores: batch·heads (a measurement should fill the GPU, as the script's does; a
// decode step's few query rows per sequence do not), and causal against full masks (the rate
// per counted FLOP is taken to be the same).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compute/operator_cost.h"
#include "io/json_reader.h"
#include "topology/topology.h"

namespace parallax {

/// One `"kind":"attention"` line, as the compute model reads it.
struct MeasuredAttentionRate {
  bool warp_mma_only = false;  ///< kernel "flash2" (else "fused")
  bool backward = false;       ///< pass "backward" (else "forward")
  double s_q = 0, s_kv = 0, d_qk = 0;
  FlopRate achieved;           ///< `tflops`
};

class MeasuredAttentionTable {
 public:
  /// `measurements` must be non-empty with positive shapes and rates (std::invalid_argument
  /// otherwise).
  explicit MeasuredAttentionTable(std::vector<MeasuredAttentionRate> measurements);

  /// The measured rate for attention operator `op` on `gpu` (header), or nullopt.
  std::optional<FlopRate> rate(const OperatorCost& op, const GpuSpec& gpu) const;
  size_t size() const { return measurements_.size(); }

 private:
  struct Point {
    double log_pairs;  // log(s_q·s_kv)
    double rate;       // FLOP/s, the mean of that shape's lines
  };
  using Key = std::pair<bool, bool>;  // (warp_mma_only, backward)
  std::optional<FlopRate> lookup(const Key& key, double d_qk, double log_pairs) const;

  std::vector<MeasuredAttentionRate> measurements_;
  std::map<Key, std::map<double, std::vector<Point>>> curves_;  // by kernel and pass, then d_qk
};

/// One `"kind":"attention"` line of `file:line` (`line` positioned at its object). Throws
/// InputError naming the field for a missing or invalid one.
MeasuredAttentionRate parse_attention_line(JsonReader& line);

}  // namespace parallax
