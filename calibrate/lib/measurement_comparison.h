// Measurements against what a topology predicts for them (`parallax calibrate compare`): with
// the topology's calibration block, the fastest (protocol, regime) its fitted parameters know,
// restricted to the measured protocol where the measurement names one (NCCL picks the protocol
// it expects to be fastest); without one, NCCL's model on the datasheet topology (analytical).
// Each point's time and bus bandwidth errors, and the point as a JSON row.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "collective_fit.h"
#include "collectives/calibrated_model.h"
#include "collectives/collective_simulator.h"
#include "measurement_set.h"

namespace parallax {

/// One measurement beside its prediction. Without a prediction (a term the calibration lacks,
/// or a time of zero) only the measured side is set.
struct ComparedPoint {
  Time measured;
  std::optional<Time> predicted;
  double measured_busbw_gbs = 0;   ///< size / time × busbw_factor, in GB/s
  double predicted_busbw_gbs = 0;
  double time_error = 0;           ///< (predicted − measured) / measured
  double busbw_error = 0;          ///< the same of the bus bandwidths; 0 at size 0
  bool predicted_positive() const { return predicted && predicted->seconds() > 0; }
};

class MeasurementComparison {
 public:
  /// `terms`: one per measurement of `set` (CollectiveTermModel on `topology`).
  MeasurementComparison(const Topology& topology, std::vector<CollectiveTerms> terms);
  bool calibrated() const { return !calibrated_.empty(); }
  /// Measurement `m`, the `index`-th of the terms given.
  ComparedPoint compare(const CollectiveMeasurement& m, size_t index);

 private:
  const Topology& topology_;
  CalibratedCollectiveModel calibrated_;
  std::vector<CollectiveTerms> terms_;
  std::map<std::pair<int, int>, std::unique_ptr<CollectiveSimulator>> simulators_;  // by (ranks, per node)
};

/// file, line, op, group, ranks, size, in-place, the times in µs, the time error and both bus
/// bandwidths. Needs a positive prediction.
nlohmann::ordered_json compared_point_json(const CollectiveMeasurement& m, const ComparedPoint& p);

}  // namespace parallax
