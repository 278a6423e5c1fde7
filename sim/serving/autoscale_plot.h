// The picture of an autoscaled run (`parallax serve --plot`): each autoscaled pool's instances
// over time (serving, and holding GPUs: starting and draining too) beside the arrival rate, and
// below it the share of each interval's arrivals that met the SLO, to see what a slow start-up
// or an eager scale-down costs.
#pragma once

#include <string>

#include "serving/fleet.h"

namespace parallax {

/// The instance counts as gnuplot steps: one block per autoscaled pool (minutes, serving,
/// holding GPUs), separated by two blank lines, each ending at the run's end.
std::string autoscale_instances_data(const FleetResult& result);

/// Per bin of arrival time (a minute, or a twentieth of a run shorter than 20 minutes): its
/// start in minutes, arrivals per second, and the share of those arrivals that met the SLO.
std::string autoscale_arrivals_data(const FleetConfig& config, const FleetResult& result);

std::string autoscale_gnuplot(const FleetConfig& config, const FleetResult& result, const std::string& instances_file,
                              const std::string& arrivals_file, const std::string& png);

}  // namespace parallax
