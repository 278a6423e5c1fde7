// Routers: which instance of a pool gets the next request.
//
// Signals: the router's own count of what it has sent each instance and not yet seen finish
// (requests and their prompt tokens) is always fresh, as a real gateway's is; what the engines report
// (waiting queue length, KV-cache use) reaches the router every `refresh_interval` (0: at
// every decision), as llm-d's 50 ms and vLLM's DP coordinator's 100 ms scrapes do
// (../shared/reference/serving.md §3, "signal staleness").
//
// Policies:
//   round_robin      counter mod N
//   random           uniform
//   least_requests   fewest in flight (router-side); ties to the lowest index
//   least_tokens     fewest in-flight prompt tokens (a router cannot know how long the outputs
//                    will be)
//   power_of_two     two distinct instances drawn uniformly, the one with fewer in flight
//   least_waiting    shortest reported waiting queue (Vidur's LOR: the queue only)
//   least_kv         lowest reported KV-cache use
//   session          consistent hash of the request's session id on a ring of 64 virtual
//                    nodes per instance (the same session always lands on the same instance
//                    while the pool is unchanged)
// Prefix-aware ones keep the router's own approximate index of which prompt blocks it sent to
// which instance (the requests' prefix block hashes; without them they balance load only):
//   cache_aware      SGLang's: if the in-flight loads are imbalanced (max − min > 64 and
//                    max > 1.5·min) the least loaded; else the instance matching the most
//                    leading blocks (ties: the less loaded) when it matches more than 30% of the
//                    prompt's blocks, otherwise the least loaded (its launcher's defaults)
//   kv_cost          NVIDIA Dynamo's KV router: argmin of potential prefill blocks
//                    (in-flight prompt tokens not yet prefilled + the uncached part of this
//                    prompt, in blocks) + decode blocks (KV blocks of the requests in flight,
//                    this one included), weight 1, temperature 0
//   least_time       the least (in flight + 1) / rate: Envoy's and NGINX's weighted least
//                    request with each instance's speed as its weight (set_rates: the fleet
//                    gives the requests/s an instance sustains at full batches, rate_bound.h),
//                    for pools of several kinds of GPU; equal rates choose as least_requests
//   weighted         llm-d's default scorers: 2·queue + 2·KV-cache + 3·prefix, each in [0, 1]
//                    (queue (maxQ − Q)/(maxQ − minQ) on the reported waiting queues, 1 when all
//                    equal; 1 − reported KV use; matched / total prompt blocks); the highest,
//                    ties broken at random
// An autoscaled pool's instances come and go: a router chooses among those available only
// (set_available), and forgets what it sent to an instance that stopped (forget).
// The index (prefix_index.h) holds every block it was sent, or with a capacity the most
// recently sent ones, prompts' tails forgotten first (SGLang's router trims its tree likewise).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "serving/prefix_index.h"
#include "serving/random.h"
#include "serving/request.h"

namespace parallax {

enum class RoutingPolicy : uint8_t {
  kRoundRobin, kRandom, kLeastRequests, kLeastTokens, kPowerOfTwo, kLeastWaiting, kLeastKv, kSession,
  kCacheAware, kKvCost, kWeighted, kLeastTime
};
const char* to_string(RoutingPolicy p);
std::optional<RoutingPolicy> routing_policy_from(const std::string& name);
/// Every policy's name, comma-separated (for messages).
std::string routing_policy_names();

/// What an engine last reported.
struct EngineReport {
  int64_t waiting = 0;
  double kv_utilization = 0;
};

class RequestRouter {
 public:
  /// `index_capacity`: prompt blocks the prefix index keeps per instance (0: all).
  RequestRouter(RoutingPolicy policy, int instances, uint64_t seed, int64_t index_capacity = 0);

  /// The instance for `r`, given the engines' last reports (one per instance). Throws
  /// std::logic_error when no instance is available.
  int choose(const Request& r, const std::vector<EngineReport>& reports);
  /// The router's own bookkeeping: a request sent, its first token, and its end.
  void sent(int instance, const Request& r);
  void first_token(int instance, const Request& r);
  void finished(int instance, const Request& r);
  /// Leading prompt blocks of `r` that the router has sent to `instance` before.
  int matched_blocks(int instance, const Request& r) const;

  /// Whether `instance` may be chosen (all may, at first). None may be (a pool scaled to zero):
  /// then choose() must wait until one is again.
  void set_available(int instance, bool available);
  bool available(int instance) const { return up_[static_cast<size_t>(instance)] != 0; }
  bool any_available() const { return up_count_ > 0; }
  /// Drops the prompt blocks recorded for `instance` (its cache is gone).
  void forget(int instance);
  /// Each instance's speed for least_time (requests/s; all 1 until set). Throws
  /// std::invalid_argument for a count that is not the instances' or a rate that is not above 0.
  void set_rates(const std::vector<double>& rates);

  RoutingPolicy policy() const { return policy_; }
  int64_t in_flight(int instance) const { return in_flight_[static_cast<size_t>(instance)]; }

 private:
  int least_of(const std::vector<double>& load) const;
  bool all_up() const { return up_count_ == instances_; }
  /// An available instance drawn uniformly.
  size_t draw_available();
  int cache_aware(const Request& r);
  int kv_cost(const Request& r) const;
  int weighted(const Request& r, const std::vector<EngineReport>& reports);
  static int64_t block_tokens(const Request& r) { return r.prefix_block_tokens > 0 ? r.prefix_block_tokens : 16; }

  RoutingPolicy policy_;
  int instances_;
  Rng rng_;
  uint64_t next_ = 0;
  std::vector<int64_t> in_flight_;
  std::vector<int64_t> in_flight_tokens_;
  std::vector<std::pair<uint64_t, int>> ring_;  ///< (hash, instance), sorted
  std::vector<PrefixIndex> index_;  ///< prompt blocks sent to each instance
  std::vector<int64_t> prefill_tokens_;   ///< in flight, first token not yet out
  std::vector<int64_t> decode_blocks_;    ///< KV blocks of the requests in flight
  int64_t index_capacity_;
  std::vector<char> up_;                  ///< available to choose
  int up_count_ = 0;
  std::vector<double> rates_;             ///< least_time's weights
};

}  // namespace parallax
