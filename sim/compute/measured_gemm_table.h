// Measured GEMM rates from the calibration harness, as a replacement for the closed-form
// efficiency model. The input is the harness's JSON-lines file (calibrate/FORMAT.md): every
// `"kind":"gemm"` line gives a dtype, a shape m, n, k and the achieved `tflops`; lines of other
// kinds are skipped.
//
// Lookup, per dtype:
// - a shape that was measured returns its measured rate exactly (several measurements of one
//   shape are averaged; `batch`, when a line gives it, is part of the shape);
// - fp8 measured both with cuBLASLt's fast accumulation and without (the harness measures
//   both) gives a training step's rate: TransformerEngine runs the forward GEMM with fast
//   accumulation and the two backward GEMMs (dgrad, wgrad) without, so the time of the three
//   is t_fast + 2·t_precise and the rate 3 / (1/r_fast + 2/r_precise);
// - any other shape is placed by its volume V = m·n·k·batch: the rate is interpolated linearly
//   in log V between the two measured volumes around it (measurements of different shapes with
//   the same volume are averaged into one point), and outside the measured range it is the
//   rate of the nearest end (no extrapolation);
// - a dtype with no measurement is answered by the fallback model (by default ShapeEfficiency);
// - the file's `"kind":"attention"` lines, where it has them, are the attention core's measured
//   rates (measured_attention_table.h), which attention_rate gives the compute model.
// What this ignores: two shapes of equal volume but different aspect (8192×8192×128 against
// 2048³) get the same interpolated rate unless one of them was measured. Measure the shapes the
// workload uses (the harness's `label` field names them) to make this exact.
//
// The rates are absolute: the table describes the GPU it was measured on, and peak_tflops is
// kept only so that a report can show the measured efficiency.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "compute/gemm_efficiency.h"
#include "compute/measured_attention_table.h"

namespace parallax {

/// One `"kind":"gemm"` line, as the compute model reads it (the calibration library's
/// GemmMeasurement is the harness's record of it; one name each, or the two would clash).
struct MeasuredGemmRate {
  DType dtype = DType::kBf16;
  GemmShape shape;       ///< batch > 1: a strided batch (a balanced grouped GEMM)
  bool fast_accum = false;  ///< fp8 with fast accumulation
  FlopRate achieved;     ///< `tflops`
  FlopRate peak;         ///< `peak_tflops`, or 0 when the line has none
  std::string label;
};

class MeasuredGemmTable : public GemmEfficiency {
 public:
  /// `measurements` must have positive shapes and rates, and be non-empty unless `attention`
  /// is given (std::invalid_argument otherwise). `fallback` answers dtypes that were not
  /// measured; null means ShapeEfficiency{}. `attention`: the file's attention lines, if any.
  MeasuredGemmTable(std::vector<MeasuredGemmRate> measurements, std::string source,
                    std::shared_ptr<const GemmEfficiency> fallback = nullptr,
                    std::shared_ptr<const MeasuredAttentionTable> attention = nullptr);

  FlopRate achieved_rate(const GemmShape& shape, DType dtype, const GpuSpec& gpu) const override;
  std::string describe() const override;
  std::optional<FlopRate> attention_rate(const OperatorCost& op, const GpuSpec& gpu) const override;

  const std::vector<MeasuredGemmRate>& measurements() const { return measurements_; }
  /// True when at least one line measured `dtype`.
  bool covers(DType dtype) const { return by_dtype_.count(dtype) != 0; }

 private:
  struct Point {
    double log_volume;
    double rate;  // FLOP/s
  };
  using ShapeKey = std::tuple<double, double, double, double>;  // (m, n, k, batch)
  struct Curve {
    std::map<ShapeKey, double> exact;  // a shape's rate (fp8: fast and precise combined)
    std::vector<Point> points;         // by log volume, one per volume
  };

  std::vector<MeasuredGemmRate> measurements_;
  std::string source_;
  std::shared_ptr<const GemmEfficiency> fallback_;
  std::shared_ptr<const MeasuredAttentionTable> attention_;
  std::map<DType, Curve> by_dtype_;
};

/// Reads the `"kind":"gemm"` and `"kind":"attention"` lines of a measurement file. Blank lines
/// are skipped; a line that does not parse, lacks `kind`, or is a gemm or attention line with a
/// missing or invalid field throws InputError naming "file:line" and the JSON pointer. A file
/// with neither kind of line is an error too.
MeasuredGemmTable load_gemm_measurements(const std::string& path,
                                         std::shared_ptr<const GemmEfficiency> fallback = nullptr);
/// Same from text; `name` stands for the file in errors.
MeasuredGemmTable parse_gemm_measurements(const std::string& text, const std::string& name,
                                          std::shared_ptr<const GemmEfficiency> fallback = nullptr);

}  // namespace parallax
