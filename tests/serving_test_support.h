// What the serving tests share: a step timer of a fixed time and a fleet of single-server
// instances, for closed-form queues.
#pragma once

#include "serving/fleet.h"
#include "test_support.h"

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

}  // namespace parallax::test
