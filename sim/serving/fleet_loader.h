// Fleet files (workloads/serve/*.json; docs/serving-format.md): the model, the topology, the
// pools of instances, the router, the traffic, the seed and the SLOs, read strictly (unknown
// keys and bad values fail with the file and JSON pointer).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "serving/fleet.h"

namespace parallax {

struct FleetFile {
  FleetConfig config;
  std::string topology_name;  ///< the preset or file it came from, for the report
  /// The same topology loaded again with other node counts: one for a cluster of one kind
  /// (compact forms; an explicit device list throws InputError), one per node group in the
  /// topology's order on node groups.
  std::function<std::shared_ptr<const Topology>(const std::vector<int>& nodes)> topology_with_nodes;
};

/// Reads `path`. Bundled model names are looked up in `models_dir`, topology presets in
/// `topologies_dir`; relative file paths are relative to the fleet file. Throws InputError.
/// `check_shapes` false leaves out whether each pool's shape suits the model and fits its GPUs
/// (for a search that replaces the shape).
FleetFile load_fleet(const std::string& path, const std::string& models_dir, const std::string& topologies_dir,
                     bool check_shapes = true);

}  // namespace parallax
