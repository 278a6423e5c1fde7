// Reads topology files (docs/topology-format.md): the compact form, which generates the graph
// of N identical nodes and their fat tree, and the explicit form, a list of devices and links.
// Everything is validated here, before any simulation: errors are InputError with the file,
// the JSON pointer and the reason.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "topology/topology.h"

namespace parallax {

struct TopologyLoadOptions {
  /// Overrides the compact form's `nodes` (the command line's --nodes). An error for an
  /// explicit topology, whose node count is fixed by its device list.
  std::optional<int> nodes;
};

/// Loads and finalizes a topology from a file. Throws InputError.
Topology load_topology(const std::string& path, const TopologyLoadOptions& options = {});
/// Same from an already parsed document; `file` names it in errors.
Topology topology_from_json(const nlohmann::json& doc, const std::string& file,
                            const TopologyLoadOptions& options = {});

}  // namespace parallax
