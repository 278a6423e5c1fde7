// Max-min fair rate allocation by progressive filling (Bertsekas & Gallager, "Data Networks",
// §6.5.2): every unfrozen flow's rate rises together; when a resource's remaining capacity
// divided by its unfrozen flows (its fair share) is the smallest, those flows freeze at that
// share and their consumption is removed from every other resource they cross. The result:
// no resource is over capacity, and every flow crosses at least one saturated resource on
// which its rate is the largest (its bottleneck).
//
// The solver knows nothing about links or networks: resources are indices with a capacity,
// flows are lists of resource indices. A flow may stand for several equal flows on one path
// (its weight): it then takes that many shares wherever it is held, and its rate is each
// one's. On large problems, resources that their flows could not fill are left out first. A
// heap indexed by resource, re-keyed as shares grow, finds each next bottleneck in O(log R) —
// the whole solve is O((F·L + R) log R) for F flows crossing L resources each — except on
// small problems (the local repairs of the flow model), where a linear scan of the candidates
// is faster.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace parallax {

class MaxMinSolver {
 public:
  /// A problem in compressed rows: flow f crosses resources
  /// flow_resources[flow_offsets[f] .. flow_offsets[f+1]). Capacities in any consistent unit.
  struct Problem {
    std::vector<double> capacity;
    std::vector<uint32_t> flow_offsets{0};
    std::vector<uint32_t> flow_resources;
    /// Per flow, how many equal flows it stands for; empty while every flow stands for one.
    std::vector<uint32_t> flow_weights;

    void clear() {
      capacity.clear();
      flow_offsets.assign(1, 0);
      flow_resources.clear();
      flow_weights.clear();
    }
    uint32_t add_resource(double cap) {
      capacity.push_back(cap);
      return static_cast<uint32_t>(capacity.size() - 1);
    }
    /// Adds a flow crossing `resources` (each at most once) that stands for `weight` >= 1 equal
    /// flows; returns its index.
    uint32_t add_flow(std::span<const uint32_t> resources, uint32_t weight = 1) {
      flow_resources.insert(flow_resources.end(), resources.begin(), resources.end());
      flow_offsets.push_back(static_cast<uint32_t>(flow_resources.size()));
      weigh_last_flow(weight);
      return static_cast<uint32_t>(flow_count() - 1);
    }
    /// Makes the flow added last stand for `weight` equal flows (for callers that write the
    /// rows themselves); `flow_weights` stays empty until a weight other than 1 appears.
    void weigh_last_flow(uint32_t weight) {
      if (weight == 1 && flow_weights.empty()) return;
      flow_weights.resize(flow_count() - 1, 1);  // the flows before the first weighted one
      flow_weights.push_back(weight);
    }
    size_t flow_count() const { return flow_offsets.size() - 1; }
  };

  /// Fills `rates` (one per flow; a weighted flow's is that of each flow it stands for). A flow
  /// that crosses no resource gets +infinity. When `bottlenecks` is given, it receives for each
  /// flow the resource at which it froze (its bottleneck), or UINT32_MAX for a flow without
  /// resources.
  /// Reuses internal buffers between calls; not thread-safe.
  void solve(const Problem& problem, std::vector<double>& rates,
             std::vector<uint32_t>* bottlenecks = nullptr);

  /// After solve(), per resource: the sum of its flows' rates (times their weights), and the
  /// fastest of them (flows freeze at non-decreasing levels, so the last level seen is the
  /// largest). Valid until the next solve.
  std::span<const double> resource_load() const { return used_; }
  std::span<const double> resource_fastest() const { return fastest_; }

 private:
  struct Share {
    double share;
    uint32_t resource;
  };
  void heap_place(uint32_t at, const Share& e);
  void heap_sift_up(uint32_t at);
  void heap_sift_down(uint32_t at);
  void heap_remove(uint32_t resource);
  std::vector<double> remaining_;
  std::vector<double> used_;
  std::vector<double> fastest_;
  std::vector<uint32_t> unfrozen_;  // per resource: Σ weights of its unfrozen flows
  static constexpr uint32_t kChanged = UINT32_MAX;  // marks a resource re-keyed this step
  static constexpr uint32_t kIdle = UINT32_MAX - 1;  // a resource that can never saturate
  static constexpr double kNeverFull = 1e-9;         // relative margin for "cannot saturate"
  std::vector<double> bound_;  // most its flows could take: Σ of each one's tightest capacity
  std::vector<uint32_t> version_;  // kChanged while listed in changed_, kIdle, else 0
  std::vector<uint32_t> changed_;
  std::vector<uint32_t> resource_offsets_;
  std::vector<uint32_t> resource_flows_;
  std::vector<uint8_t> frozen_;
  std::vector<Share> heap_;         // candidates by (share, resource), smallest first
  static constexpr uint32_t kNotInHeap = UINT32_MAX;
  std::vector<uint32_t> heap_at_;  // per resource: its index in heap_, or kNotInHeap
  static constexpr size_t kScanLimit = 1024;  // candidates up to which a linear scan is used
  std::vector<uint32_t> candidates_;         // resources that may still become a bottleneck
  std::vector<double> share_;                // scan path: remaining / unfrozen, by candidate slot
  std::vector<uint32_t> position_;           // scan path: a candidate resource's slot
};

}  // namespace parallax
