// A list of point-to-point flows to run on a topology (the input of `parallax flows`), and the
// runner that plays it on a network model. Format:
//   { "description": "...",
//     "flows": [ { "src": "n0.gpu0", "dst": 9, "bytes": "64 MiB", "start": "0 us",
//                  "label": "optional" } ] }
// An endpoint is a device name or a GPU rank (an integer, GPUs ordered by node then index).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "network/network_model.h"

namespace parallax {

struct FlowSpec {
  std::string label;
  DeviceId src, dst;
  Bytes size;
  Time start;
};

/// Reads and validates a flow list against the router's topology: every endpoint must exist and
/// every destination must be reachable from its source. Throws InputError.
std::vector<FlowSpec> load_flow_list(const std::string& path, const Router& router);
std::vector<FlowSpec> flow_list_from_json(const nlohmann::json& doc, const std::string& file,
                                          const Router& router);

struct FlowOutcome {
  FlowSpec spec;
  uint64_t flow_id = 0;
  Time finish;
};

/// Starts every flow at its start time on `network` (built on `engine`), runs the engine to
/// the end and returns the outcomes in input order.
std::vector<FlowOutcome> run_flow_list(const std::vector<FlowSpec>& flows, Engine& engine,
                                       NetworkModel& network);

}  // namespace parallax
