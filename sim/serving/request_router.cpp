// Routing policies (request_router.h).
#include "serving/request_router.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

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
    {RoutingPolicy::kCacheAware, "cache_aware"},     {RoutingPolicy::kKvCost, "kv_cost"},
    {RoutingPolicy::kWeighted, "weighted"},         {RoutingPolicy::kLeastTime, "least_time"},
};

constexpr double kBalanceAbs = 64;     // SGLang launcher: balance_abs_threshold
constexpr double kBalanceRel = 1.5;    // balance_rel_threshold
constexpr double kCacheThreshold = 0.3;
constexpr double kQueueWeight = 2, kKvWeight = 2, kPrefixWeight = 3;  // llm-d's default profile

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

RequestRouter::RequestRouter(RoutingPolicy policy, int instances, uint64_t seed, int64_t index_capacity)
    : policy_(policy), instances_(instances), rng_(seed), in_flight_(static_cast<size_t>(instances), 0),
      in_flight_tokens_(static_cast<size_t>(instances), 0),
      index_(static_cast<size_t>(instances), PrefixIndex(index_capacity)),
      prefill_tokens_(static_cast<size_t>(instances), 0), decode_blocks_(static_cast<size_t>(instances), 0),
      index_capacity_(index_capacity), up_(static_cast<size_t>(instances), 1), up_count_(instances),
      rates_(static_cast<size_t>(instances), 1.0) {
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
  int best = -1;
  for (size_t i = 0; i < load.size(); ++i) {
    if (up_[i] && (best < 0 || load[i] < load[static_cast<size_t>(best)])) best = static_cast<int>(i);
  }
  return best;
}

void RequestRouter::set_available(int instance, bool available) {
  char& up = up_.at(static_cast<size_t>(instance));
  if ((up != 0) == available) return;
  up = available ? 1 : 0;
  up_count_ += available ? 1 : -1;
}

void RequestRouter::forget(int instance) {
  index_.at(static_cast<size_t>(instance)) = PrefixIndex(index_capacity_);
}

void RequestRouter::set_rates(const std::vector<double>& rates) {
  if (rates.size() != rates_.size()) {
    throw std::invalid_argument("least_time needs a rate for each of the " + std::to_string(rates_.size()) + " instances");
  }
  for (const double r : rates) {
    if (!(r > 0 && std::isfinite(r))) throw std::invalid_argument("least_time's instance rates must be finite and above 0");
  }
  rates_ = rates;
}

size_t RequestRouter::draw_available() {
  if (all_up()) return rng_.below(static_cast<size_t>(instances_));
  size_t k = rng_.below(static_cast<size_t>(up_count_));
  for (size_t i = 0;; ++i) {
    if (up_[i] && k-- == 0) return i;
  }
}

int RequestRouter::choose(const Request& r, const std::vector<EngineReport>& reports) {
  if (up_count_ == 0) throw std::logic_error("no instance is available to route to");
  const auto n = static_cast<size_t>(instances_);
  std::vector<double> load(n);
  switch (policy_) {
    case RoutingPolicy::kRoundRobin:
      for (;;) {
        const size_t k = next_++ % n;
        if (up_[k]) return static_cast<int>(k);
      }
    case RoutingPolicy::kRandom: return static_cast<int>(draw_available());
    case RoutingPolicy::kLeastRequests:
      for (size_t i = 0; i < n; ++i) load[i] = static_cast<double>(in_flight_[i]);
      return least_of(load);
    case RoutingPolicy::kLeastTokens:
      for (size_t i = 0; i < n; ++i) load[i] = static_cast<double>(in_flight_tokens_[i]);
      return least_of(load);
    case RoutingPolicy::kLeastTime:
      for (size_t i = 0; i < n; ++i) load[i] = static_cast<double>(in_flight_[i] + 1) / rates_[i];
      return least_of(load);
    case RoutingPolicy::kPowerOfTwo: {
      if (up_count_ == 1) return least_of(load);
      if (all_up()) {
        const auto a = rng_.below(n);
        auto b = rng_.below(n - 1);
        if (b >= a) ++b;  // two distinct instances
        return static_cast<int>(in_flight_[b] < in_flight_[a] ? b : a);
      }
      const size_t a = draw_available();
      size_t b = a;
      while (b == a) b = draw_available();
      return static_cast<int>(in_flight_[b] < in_flight_[a] ? b : a);
    }
    case RoutingPolicy::kLeastWaiting:
      for (size_t i = 0; i < n; ++i) load[i] = static_cast<double>(reports[i].waiting);
      return least_of(load);
    case RoutingPolicy::kLeastKv:
      for (size_t i = 0; i < n; ++i) load[i] = reports[i].kv_utilization;
      return least_of(load);
    case RoutingPolicy::kCacheAware: return cache_aware(r);
    case RoutingPolicy::kKvCost: return kv_cost(r);
    case RoutingPolicy::kWeighted: return weighted(r, reports);
    case RoutingPolicy::kSession: {
      const uint64_t h = mix(r.session + 0x9e3779b97f4a7c15ULL);
      auto it = std::lower_bound(ring_.begin(), ring_.end(), std::make_pair(h, 0));
      // The next virtual node clockwise whose instance is available.
      for (;;) {
        if (it == ring_.end()) it = ring_.begin();
        if (up_[static_cast<size_t>(it->second)]) return it->second;
        ++it;
      }
    }
  }
  return 0;
}

int RequestRouter::matched_blocks(int instance, const Request& r) const {
  const auto& sent = index_[static_cast<size_t>(instance)];
  int n = 0;
  while (n < static_cast<int>(r.prefix_blocks.size()) && sent.contains(r.prefix_blocks[static_cast<size_t>(n)])) ++n;
  return n;
}

int RequestRouter::cache_aware(const Request& r) {
  const auto n = static_cast<size_t>(instances_);
  int least = -1;  // the first available instance of the fewest in flight
  int64_t hi = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!up_[i]) continue;
    if (least < 0 || in_flight_[i] < in_flight_[static_cast<size_t>(least)]) least = static_cast<int>(i);
    hi = std::max(hi, in_flight_[i]);
  }
  const int64_t lo = in_flight_[static_cast<size_t>(least)];
  if (static_cast<double>(hi - lo) > kBalanceAbs && static_cast<double>(hi) > kBalanceRel * static_cast<double>(lo)) {
    return least;
  }
  if (r.prefix_blocks.empty()) return least;
  int best = least, best_match = -1;
  for (size_t i = 0; i < n; ++i) {
    if (!up_[i]) continue;
    const int m = matched_blocks(static_cast<int>(i), r);
    if (m > best_match || (m == best_match && in_flight_[i] < in_flight_[static_cast<size_t>(best)])) {
      best = static_cast<int>(i);
      best_match = m;
    }
  }
  const double rate = static_cast<double>(best_match) / static_cast<double>(r.prefix_blocks.size());
  return rate > kCacheThreshold ? best : least;
}

int RequestRouter::kv_cost(const Request& r) const {
  const double b = static_cast<double>(block_tokens(r));
  const double isl = static_cast<double>(r.prompt_tokens);
  int best = -1;
  double best_logit = 0;
  for (int i = 0; i < instances_; ++i) {
    const auto k = static_cast<size_t>(i);
    if (!up_[k]) continue;
    const double overlap = static_cast<double>(matched_blocks(i, r));
    const double prefill_blocks = (static_cast<double>(prefill_tokens_[k]) + std::max(0.0, isl - overlap * b)) / b;
    const double decode_blocks = static_cast<double>(decode_blocks_[k]) + std::ceil(isl / b);
    const double logit = prefill_blocks + decode_blocks;
    if (best < 0 || logit < best_logit) {
      best = i;
      best_logit = logit;
    }
  }
  return best;
}

int RequestRouter::weighted(const Request& r, const std::vector<EngineReport>& reports) {
  const auto n = static_cast<size_t>(instances_);
  int64_t min_q = INT64_MAX, max_q = INT64_MIN;
  for (size_t i = 0; i < n; ++i) {
    if (!up_[i]) continue;
    min_q = std::min(min_q, reports[i].waiting);
    max_q = std::max(max_q, reports[i].waiting);
  }
  std::vector<int> best;
  double best_score = -1;
  for (size_t i = 0; i < n; ++i) {
    if (!up_[i]) continue;
    const double queue = max_q == min_q ? 1.0
                                        : static_cast<double>(max_q - reports[i].waiting) / static_cast<double>(max_q - min_q);
    const double kv = 1.0 - std::clamp(reports[i].kv_utilization, 0.0, 1.0);
    const double prefix = r.prefix_blocks.empty() ? 0.0
                                                  : static_cast<double>(matched_blocks(static_cast<int>(i), r)) /
                                                        static_cast<double>(r.prefix_blocks.size());
    const double score = kQueueWeight * queue + kKvWeight * kv + kPrefixWeight * prefix;
    if (score > best_score + 1e-12) {
      best.assign(1, static_cast<int>(i));
      best_score = score;
    } else if (std::abs(score - best_score) <= 1e-12) {
      best.push_back(static_cast<int>(i));
    }
  }
  return best[best.size() == 1 ? 0 : rng_.below(best.size())];
}

void RequestRouter::sent(int instance, const Request& r) {
  const auto k = static_cast<size_t>(instance);
  in_flight_[k] += 1;
  in_flight_tokens_[k] += r.prompt_tokens;
  prefill_tokens_[k] += r.prompt_tokens;
  decode_blocks_[k] += (r.prompt_tokens + block_tokens(r) - 1) / block_tokens(r);
  if (policy_ == RoutingPolicy::kCacheAware || policy_ == RoutingPolicy::kKvCost || policy_ == RoutingPolicy::kWeighted) {
    index_[k].insert(r.prefix_blocks);
  }
}

void RequestRouter::first_token(int instance, const Request& r) {
  prefill_tokens_[static_cast<size_t>(instance)] -= r.prompt_tokens;
}

void RequestRouter::finished(int instance, const Request& r) {
  const auto k = static_cast<size_t>(instance);
  in_flight_[k] -= 1;
  in_flight_tokens_[k] -= r.prompt_tokens;
  decode_blocks_[k] -= (r.prompt_tokens + block_tokens(r) - 1) / block_tokens(r);
}

}  // namespace parallax
