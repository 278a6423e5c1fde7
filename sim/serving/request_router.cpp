// Routing policies (request_router.h).
#include "serving/request_router.h"

#include <algorithm>
#include <stdexcept>

namespace parallax {
namespace {

struct Named {
  RoutingPolicy policy;
  const char* name;
};
constexpr Named kPolicies[] = {
    {RoutingPolicy::kRoundRobin, "round_robin"},     {RoutingPolicy::kRandom, "random"},
    {RoutingPolicy::kLeastRequests, "least_requests"}, {RoutingPolicy::kLeastTokens, "least_tokens"},
    {RoutingPolicy::kPowerOfTwo, "power_of_two"},    {RoutingPolicy::kLeastWaiting, "least_waiting"},
    {RoutingPolicy::kLeastKv, "least_kv"},           {RoutingPolicy::kSession, "session"},
};

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

constexpr int kVirtualNodes = 64;

}  // namespace

const char* to_string(RoutingPolicy p) {
  for (const Named& n : kPolicies) {
    if (n.policy == p) return n.name;
  }
  return "?";
}

std::optional<RoutingPolicy> routing_policy_from(const std::string& name) {
  for (const Named& n : kPolicies) {
    if (name == n.name) return n.policy;
  }
  return std::nullopt;
}

std::string routing_policy_names() {
  std::string out;
  for (const Named& n : kPolicies) out += (out.empty() ? "" : ", ") + std::string(n.name);
  return out;
}

RequestRouter::RequestRouter(RoutingPolicy policy, int instances, uint64_t seed)
    : policy_(policy), instances_(instances), rng_(seed), in_flight_(static_cast<size_t>(instances), 0),
      in_flight_tokens_(static_cast<size_t>(instances), 0) {
  if (instances < 1) throw std::invalid_argument("a router needs at least one instance");
  if (policy_ == RoutingPolicy::kSession) {
    for (int i = 0; i < instances; ++i) {
      for (int v = 0; v < kVirtualNodes; ++v) {
        ring_.emplace_back(mix((static_cast<uint64_t>(i) << 20) ^ static_cast<uint64_t>(v) ^ 0x5e55ULL), i);
      }
    }
    std::sort(ring_.begin(), ring_.end());
  }
}

int RequestRouter::least_of(const std::vector<double>& load) const {
  return static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
}

int RequestRouter::choose(const Request& r, const std::vector<EngineReport>& reports) {
  const auto n = static_cast<size_t>(instances_);
  std::vector<double> load(n);
  switch (policy_) {
    case RoutingPolicy::kRoundRobin: return static_cast<int>(next_++ % n);
    case RoutingPolicy::kRandom: return static_cast<int>(rng_.below(n));
    case RoutingPolicy::kLeastRequests:
      for (size_t i = 0; i < n; ++i) load[i] = static_cast<double>(in_flight_[i]);
      return least_of(load);
    case RoutingPolicy::kLeastTokens:
      for (size_t i = 0; i < n; ++i) load[i] = static_cast<double>(in_flight_tokens_[i]);
      return least_of(load);
    case RoutingPolicy::kPowerOfTwo: {
      if (n == 1) return 0;
      const auto a = rng_.below(n);
      auto b = rng_.below(n - 1);
      if (b >= a) ++b;  // two distinct instances
      return static_cast<int>(in_flight_[b] < in_flight_[a] ? b : a);
    }
    case RoutingPolicy::kLeastWaiting:
      for (size_t i = 0; i < n; ++i) load[i] = static_cast<double>(reports[i].waiting);
      return least_of(load);
    case RoutingPolicy::kLeastKv:
      for (size_t i = 0; i < n; ++i) load[i] = reports[i].kv_utilization;
      return least_of(load);
    case RoutingPolicy::kSession: {
      const uint64_t h = mix(r.session + 0x9e3779b97f4a7c15ULL);
      auto it = std::lower_bound(ring_.begin(), ring_.end(), std::make_pair(h, 0));
      if (it == ring_.end()) it = ring_.begin();
      return it->second;
    }
  }
  return 0;
}

void RequestRouter::sent(int instance, const Request& r) {
  in_flight_[static_cast<size_t>(instance)] += 1;
  in_flight_tokens_[static_cast<size_t>(instance)] += r.prompt_tokens + r.output_tokens;
}

void RequestRouter::finished(int instance, const Request& r) {
  in_flight_[static_cast<size_t>(instance)] -= 1;
  in_flight_tokens_[static_cast<size_t>(instance)] -= r.prompt_tokens + r.output_tokens;
}

}  // namespace parallax
