// Sizing a fleet for a target load (serving/fleet_sizing.h): the fleet it picks meets the SLO at
// the target and one instance fewer does not; the nodes follow the GPUs.
#include <gtest/gtest.h>

#include <algorithm>

#include "serving/fleet_sizing.h"
#include "test_support.h"
#include "topology/topology_loader.h"

namespace parallax {
namespace {

using test::bundled;

std::shared_ptr<const Topology> dgx_h100_nodes(int nodes) {
  return std::make_shared<const Topology>(
      load_topology(test::source_path("topologies/dgx-h100.json"), TopologyLoadOptions{nodes}));
}

FleetConfig two_instances() {
  FleetConfig c;
  c.model = bundled("llama3-8b");
  c.topology = dgx_h100_nodes(1);
  PoolConfig pool;
  pool.shape = InstanceShape{2, 1};
  pool.count = 2;
  pool.batching.max_sequences = 64;
  c.pools = {pool};
  c.traffic.rate_per_s = 10;
  c.traffic.requests = 200;
  c.traffic.prompt.value = 1000;
  c.traffic.output.value = 100;
  c.slo_ttft = Time::ms(1000);
  c.slo_tpot = Time::ms(40);
  return c;
}

TEST(ServingSizing, TheChosenFleetMeetsTheTargetAndOneInstanceFewerDoesNot) {
  const FleetConfig c = two_instances();
  const double given = capacity_at_slo(c, 0.9).first;
  ASSERT_GT(given, 0.0);
  // Three times the load two instances carry: about six instances, on one or two nodes.
  const FleetSizing s = size_fleet(c, 3 * given, 0.9, dgx_h100_nodes);
  EXPECT_DOUBLE_EQ(s.capacity, given);
  ASSERT_TRUE(s.chosen.has_value());
  const SizedFleet& chosen = s.tried[*s.chosen];
  EXPECT_TRUE(chosen.meets);
  EXPECT_GE(chosen.summary.slo_attainment, 0.9);
  EXPECT_GE(chosen.counts[0], 4);
  EXPECT_LE(chosen.counts[0], 9);
  EXPECT_EQ(chosen.gpus, 2 * chosen.counts[0]);
  EXPECT_EQ(chosen.nodes, (chosen.gpus + 7) / 8);
  const bool fewer_tried = std::any_of(s.tried.begin(), s.tried.end(), [&](const SizedFleet& f) {
    return f.counts[0] == chosen.counts[0] - 1 && !f.meets;
  });
  EXPECT_TRUE(fewer_tried);
  // A load the fleet as given carries needs no more of it.
  const FleetSizing same = size_fleet(c, 0.5 * given, 0.9, dgx_h100_nodes);
  ASSERT_TRUE(same.chosen.has_value());
  EXPECT_LE(same.tried[*same.chosen].counts[0], 2);
  // Refused: no SLO, a closed loop.
  FleetConfig no_slo = c;
  no_slo.slo_ttft = no_slo.slo_tpot = Time::zero();
  EXPECT_THROW(size_fleet(no_slo, 10, 0.9, dgx_h100_nodes), std::invalid_argument);
  FleetConfig closed = c;
  closed.traffic.arrival = TrafficSpec::Arrival::kClosedLoop;
  EXPECT_THROW(size_fleet(closed, 10, 0.9, dgx_h100_nodes), std::invalid_argument);
}

}  // namespace
}  // namespace parallax
