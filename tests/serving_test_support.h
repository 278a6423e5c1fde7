// What the serving tests share: a step timer of a fixed time, a fleet of single-server
// instances for closed-form queues, and a small cluster of two kinds of node.
#pragma once

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "serving/fleet.h"
#include "test_support.h"
#include "topology/topology_loader.h"

namespace parallax::test {

/// Every engine step takes `t`, whatever the batch.
class ConstantTimer final : public StepTimer {
 public:
  explicit ConstantTimer(Time t) : t_(t) {}
  Time step_time(const RaggedBatch&) override { return t_; }

 private:
  Time t_;
};

/// One request per step (a 1-token prompt that samples its only output): each instance is a
/// single server whose service time is the timer's.
inline FleetConfig queue(int instances, double rate, int64_t requests, RoutingPolicy router = RoutingPolicy::kRoundRobin) {
  FleetConfig c;
  c.model = bundled("llama3-8b");
  c.topology = shared_dgx_h100();
  PoolConfig pool;
  pool.count = instances;
  pool.batching.max_sequences = 1;
  pool.batching.kv_blocks = 1000;
  c.pools = {pool};
  c.router = router;
  c.traffic.rate_per_s = rate;
  c.traffic.requests = requests;
  c.seed = 20261201;
  return c;
}

/// Two kinds of node of two GPUs each (a DGX H100's node and a DGX A100 40GB's, each cut to two
/// GPUs and two NICs) on one fabric, with `nodes` nodes in each group ("h100", "a100").
inline std::shared_ptr<const Topology> two_kinds(const std::vector<int>& nodes = {1, 1}) {
  const auto node_of = [](const std::string& preset) {
    std::ifstream in(source_path("topologies/" + preset + ".json"));
    nlohmann::json node = nlohmann::json::parse(in)["node"];
    node["gpus"] = 2;
    node["nics"]["count"] = 2;
    return node;
  };
  const nlohmann::json doc{{"name", "H100 + A100 40GB, two GPUs a node"},
                           {"node_groups",
                            {{{"name", "h100"}, {"nodes", 1}, {"node", node_of("dgx-h100")}},
                             {{"name", "a100"}, {"nodes", 1}, {"node", node_of("dgx-a100-40gb")}}}},
                           {"network", {{"kind", "fat_tree"}, {"tiers", 2}, {"nodes_per_leaf", 4}, {"link_latency", "0.6 us"}}}};
  TopologyLoadOptions options;
  options.group_nodes = nodes;
  return std::make_shared<const Topology>(topology_from_json(doc, source_path("topologies/two-kinds.json"), options));
}

}  // namespace parallax::test
