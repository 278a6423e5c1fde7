// Helpers shared by the tests: fixture paths from CMake and small topologies built in code.
#pragma once

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "model/model_loader.h"
#include "topology/topology.h"
#include "topology/topology_loader.h"

namespace parallax::test {

inline std::string source_path(const std::string& relative) {
  return std::string(PARALLAX_SOURCE_DIR) + "/" + relative;
}

/// DGX H100 nodes, shared (as the serving fleet holds its topology).
inline std::shared_ptr<const Topology> shared_dgx_h100(int nodes = 1) {
  return std::make_shared<const Topology>(load_topology(source_path("topologies/dgx-h100.json"), TopologyLoadOptions{nodes}));
}

/// A bundled model (workloads/models/<name>.json).
inline ModelConfig bundled(const std::string& name) { return load_bundled_model(source_path("workloads/models"), name); }

inline Topology load_preset(const std::string& name, std::optional<int> nodes = std::nullopt) {
  return load_topology(source_path("topologies/" + name + ".json"), TopologyLoadOptions{nodes});
}

/// A bundled preset with its fabric's `oversubscription` replaced ("4:1"); with
/// `without_stack_latency`, its NICs report no latency of their own (only the links').
inline Topology load_preset_oversubscribed(const std::string& name, int nodes, const std::string& oversubscription,
                                           bool without_stack_latency = false) {
  std::ifstream in(source_path("topologies/" + name + ".json"));
  nlohmann::json doc = nlohmann::json::parse(in);
  doc["network"]["oversubscription"] = oversubscription;
  if (without_stack_latency) doc["node"]["nics"].erase("reported_latency");
  return topology_from_json(doc, name + ".json", TopologyLoadOptions{nodes});
}

inline GpuSpec toy_gpu() {
  return GpuSpec{"toy", FlopRate(1e12), FlopRate(0), FlopRate(1e12), FlopRate(1e12), FlopRate(0), FlopRate(0), gib(1),
                 gigabytes_per_second(100), 0, "", FlopRate(0), FlopRate(0), FlopRate(0), Bandwidth{}, OperationRate{}};
}

/// `n` GPUs (of `gpu`) each joined to one switch by a link of `bw` per direction and latency `lat`.
inline Topology star(int n, Bandwidth bw, Time lat, const GpuSpec& gpu = toy_gpu()) {
  Topology t;
  int spec = t.add_gpu_spec(gpu);
  DeviceId sw = t.add_device(Device{"sw", DeviceKind::kSwitch, SwitchKind::kNVSwitch, 0, -1, -1, false, false, {}});
  for (int i = 0; i < n; ++i) {
    DeviceId g = t.add_device(Device{"g" + std::to_string(i), DeviceKind::kGpu, SwitchKind::kNone, 0, i, spec,
                                     false, false, {}});
    t.add_link(g, sw, LinkClass::kNVLink, bw, lat);
  }
  t.finalize();
  return t;
}

}  // namespace parallax::test
