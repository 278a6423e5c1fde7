// Reads topology files (docs/topology-format.md): the compact form, which generates the graph
// of N identical nodes and their fat tree, and the explicit form, a list of devices and links.
// Everything is validated here, before any simulation: errors are InputError with the file,
// the JSON pointer and the reason.
#pragma once

#include <optional>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "topology/topology.h"

namespace parallax {

/// The most nodes and GPUs a topology may have (a topology of 131,072 GPUs builds in seconds;
/// the simulations on it are what take time).
inline constexpr int kMaxNodes = 16384;
inline constexpr int64_t kMaxGpus = 131072;

struct TopologyLoadOptions {
  TopologyLoadOptions() = default;
  explicit TopologyLoadOptions(std::optional<int> node_count) : nodes(node_count) {}
  /// Overrides the compact form's `nodes` (the command line's --nodes). An error for an
  /// explicit topology, whose node count is fixed by its device list.
  std::optional<int> nodes;
  /// A job on part of each node (compact form): only its first k GPUs, and the NICs that
  /// serve them, are built (4 of a DGX's 8; 64 of an NVL72 rack's 72). Not for PCIe trees.
  std::optional<int> gpus_per_node;
  /// On a cluster of node groups: each group's node count, in the file's group order, in place
  /// of the file's (empty: the file's). An error for any other topology.
  std::vector<int> group_nodes;
};

/// How a launcher spreads a job of `gpus` GPUs over nodes (scale-up domains) of `node_gpus`:
/// the same count on every node, the most that divides the job — whole nodes when they divide
/// it, 64 of a 72-GPU NVL72 rack for 64, 128 or 256 GPUs, 4 of a DGX's 8 for a 4-GPU job.
struct JobPlacement {
  int nodes = 1;
  int gpus_per_node = 1;
};
JobPlacement place_job(int gpus, int node_gpus);
/// The load options of that placement (gpus_per_node left unset for whole nodes).
TopologyLoadOptions load_options_for(int gpus, int node_gpus);

/// Loads and finalizes a topology from a file. Throws InputError.
Topology load_topology(const std::string& path, const TopologyLoadOptions& options = {});
/// Same from an already parsed document; `file` names it in errors.
Topology topology_from_json(const nlohmann::json& doc, const std::string& file,
                            const TopologyLoadOptions& options = {});

}  // namespace parallax
