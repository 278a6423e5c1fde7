// Measurements against a topology's predictions (measurement_comparison.h).
#include "measurement_comparison.h"

#include "collectives/collective.h"

namespace parallax {

MeasurementComparison::MeasurementComparison(const Topology& topology, std::vector<CollectiveTerms> terms)
    : topology_(topology), calibrated_(topology.info().calibration), terms_(std::move(terms)) {}

ComparedPoint MeasurementComparison::compare(const CollectiveMeasurement& m, size_t index) {
  ComparedPoint p;
  p.measured = m.typical_time();
  if (calibrated()) {
    std::optional<Protocol> forced;
    if (m.proto != "auto") forced = parse_protocol(m.proto);
    if (auto best = calibrated_.fastest(terms_.at(index), forced)) p.predicted = best->first;
  } else {
    auto& sim = simulators_[{m.ranks, m.ranks_per_node}];
    if (!sim) sim = std::make_unique<CollectiveSimulator>(topology_, m.ranks, m.ranks_per_node);
    CollectiveOptions o;
    o.model = "analytical";
    p.predicted = sim->run(m.op, m.size, o).time;
  }
  const double factor = busbw_factor(m.op, m.ranks);
  p.measured_busbw_gbs = m.size.value() / p.measured.seconds() * factor / 1e9;
  if (!p.predicted_positive()) return p;
  p.predicted_busbw_gbs = m.size.value() / p.predicted->seconds() * factor / 1e9;
  p.time_error = (p.predicted->seconds() - p.measured.seconds()) / p.measured.seconds();
  p.busbw_error = m.size.value() > 0 ? (p.predicted_busbw_gbs - p.measured_busbw_gbs) / p.measured_busbw_gbs : 0.0;
  return p;
}

nlohmann::ordered_json compared_point_json(const CollectiveMeasurement& m, const ComparedPoint& p) {
  nlohmann::ordered_json j;
  j["file"] = m.source.file;
  j["line"] = m.source.line;
  j["op"] = op_name(m.op);
  j["group"] = m.group;
  j["ranks"] = m.ranks;
  j["size_bytes"] = m.size.value();
  j["in_place"] = m.in_place;
  j["measured_time_us"] = p.measured.seconds() * 1e6;
  j["predicted_time_us"] = p.predicted->seconds() * 1e6;
  j["time_error"] = p.time_error;
  j["measured_busbw_gbs"] = p.measured_busbw_gbs;
  j["predicted_busbw_gbs"] = p.predicted_busbw_gbs;
  return j;
}

}  // namespace parallax
