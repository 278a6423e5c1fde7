// The calibration block of a calibrated topology (calibration_record.h).
#include "calibration_record.h"

#include <cmath>

#include "io/text_format.h"

namespace parallax {
namespace {

using Json = nlohmann::ordered_json;

Json provenance(const MeasurementSet& set) {
  Json inputs = Json::array();
  for (const std::string& f : set.files) inputs.push_back(f);
  Json runs = Json::array();
  for (const RunMetadata& r : set.runs) {
    Json j;
    j["run"] = r.run;
    if (!r.harness.empty()) j["harness"] = r.harness;
    if (!r.date.empty()) j["date"] = r.date;
    if (!r.gpu.empty()) j["gpu"] = r.gpu;
    if (!r.nccl.empty()) j["nccl"] = r.nccl;
    if (!r.cuda_runtime.empty()) j["cuda_runtime"] = r.cuda_runtime;
    if (!r.mpi.empty()) j["mpi"] = r.mpi;
    if (!r.hosts.empty()) j["hosts"] = r.hosts;
    runs.push_back(j);
  }
  Json p;
  p["inputs"] = inputs;
  p["runs"] = runs;
  p["fitted_by"] = "parallax 0.1.0 calibrate fit";
  return p;
}

Json parameters_json(const CollectiveFit& fit) {
  Json params = Json::array();
  for (const FittedParameter& p : fit.parameters) {
    Json j;
    j["name"] = p.name;
    j["identifiable"] = p.identifiable;
    if (p.identifiable) {
      j["value"] = parameter_text(p, p.value);
      j["value_si"] = p.value;
      j["standard_error_si"] = std::isnan(p.standard_error) ? Json() : Json(p.standard_error);
      j["at_bound"] = p.at_bound;
    }
    params.push_back(j);
  }
  return params;
}

// The measured GEMMs travel with the calibration as measured: they are the table the compute
// model interpolates (sim/compute/measured_gemm_table.h).
Json gemms_json(const MeasurementSet& set) {
  Json gemms = Json::array();
  for (const GemmMeasurement& g : set.gemms) {
    Json j;
    j["dtype"] = g.dtype;
    j["m"] = g.m;
    j["n"] = g.n;
    j["k"] = g.k;
    if (g.batch != 1) j["batch"] = g.batch;
    if (g.fast_accum) j["fast_accum"] = true;
    j["tflops"] = g.achieved().value() / 1e12;
    if (g.peak) j["efficiency"] = g.achieved().value() / g.peak->value();
    gemms.push_back(j);
  }
  return gemms;
}

}  // namespace

std::string parameter_text(const FittedParameter& p, double value) {
  if (p.name.rfind("inverse_bandwidth.", 0) == 0) return value > 0 ? format_text("%.2f GB/s", 1e-9 / value) : "unbounded";
  return format_text("%.3f us", value * 1e6);
}

Json prediction_errors_json(const PredictionErrors& e) {
  Json j;
  j["rows"] = e.time.size();
  j["time_median_abs_error"] = e.median_time();
  j["time_p90_abs_error"] = e.p90_time();
  j["busbw_median_abs_error_ge_1MiB"] = e.busbw_large.empty() ? Json() : Json(e.median_busbw_large());
  j["unpredicted"] = e.unpredicted;
  return j;
}

Json calibration_block(const MeasurementSet& set, const CollectiveFit& fit, const FitErrors& errors) {
  Json cal;
  cal["format"] = 1;
  cal["model"] = "t = launch_p + n_intra*alpha_intra_p + n_inter*alpha_network_p + bus_bytes/beta_class_p (calibrate/lib/collective_fit.h)";
  cal["provenance"] = provenance(set);
  cal["parameters"] = parameters_json(fit);
  // Where the fit saw each (protocol, regime) start, per collective and communicator shape: the
  // simulator puts a size in the regime the fit did.
  Json regimes = Json::array();
  for (const auto& [name, bytes] : fit.regime_starts) regimes.push_back({{"name", name}, {"from_bytes", bytes}});
  cal["regimes"] = regimes;
  Json residuals;
  residuals["in_sample"] = prediction_errors_json(errors.in_sample);
  Json rejected = Json::array();
  const auto& ms = set.collectives;
  for (size_t r : fit.raw.rejected_rows) rejected.push_back(ms[r].source.file + ":" + std::to_string(ms[r].source.line));
  residuals["rejected_rows"] = rejected;
  cal["residuals"] = residuals;
  if (!set.gemms.empty()) cal["compute_efficiency"] = gemms_json(set);
  cal["cross_validation"]["held_out_alternate_sizes"] = prediction_errors_json(errors.held_out_alternate_sizes);
  if (errors.leave_one_group_out) cal["cross_validation"]["leave_one_group_out"] = prediction_errors_json(*errors.leave_one_group_out);
  return cal;
}

}  // namespace parallax
