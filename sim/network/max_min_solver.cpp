#include "network/max_min_solver.h"

#include <algorithm>

namespace parallax {
namespace {
// Min-heap order on (share, resource): equal shares break by resource index, so the filling
// order — and with it the floating-point result — is deterministic.
bool later(const auto& a, const auto& b) {
  return a.share != b.share ? a.share > b.share : a.resource > b.resource;
}
}  // namespace

void MaxMinSolver::solve(const Problem& p, std::vector<double>& rates, std::vector<uint32_t>* bottlenecks) {
  const size_t nf = p.flow_count();
  const size_t nr = p.capacity.size();
  rates.assign(nf, std::numeric_limits<double>::infinity());
  if (bottlenecks) bottlenecks->assign(nf, UINT32_MAX);
  remaining_.assign(p.capacity.begin(), p.capacity.end());
  unfrozen_.assign(nr, 0);
  version_.assign(nr, 0);
  frozen_.assign(nf, 0);

  // Resource → flows, as compressed rows (counting sort).
  for (uint32_t r : p.flow_resources) ++unfrozen_[r];
  resource_offsets_.assign(nr + 1, 0);
  for (size_t r = 0; r < nr; ++r) resource_offsets_[r + 1] = resource_offsets_[r] + unfrozen_[r];
  resource_flows_.resize(p.flow_resources.size());
  {
    std::vector<uint32_t>& fill = version_;  // borrowed as a cursor, reset below
    std::copy(resource_offsets_.begin(), resource_offsets_.end() - 1, fill.begin());
    for (uint32_t f = 0; f < nf; ++f) {
      for (uint32_t i = p.flow_offsets[f]; i < p.flow_offsets[f + 1]; ++i) {
        resource_flows_[fill[p.flow_resources[i]]++] = f;
      }
    }
    std::fill(version_.begin(), version_.end(), 0);
  }

  heap_.clear();
  stamp_ = 0;
  for (uint32_t r = 0; r < nr; ++r) {
    if (unfrozen_[r] > 0) heap_.push_back({remaining_[r] / unfrozen_[r], r, 0});
  }
  std::make_heap(heap_.begin(), heap_.end(), later<Share, Share>);

  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later<Share, Share>);
    Share top = heap_.back();
    heap_.pop_back();
    if (top.version != version_[top.resource] || unfrozen_[top.resource] == 0) continue;
    double level = top.share;
    // Freeze every unfrozen flow of the bottleneck, then re-key each other resource they
    // cross once, rather than once per flow.
    changed_.clear();
    for (uint32_t k = resource_offsets_[top.resource]; k < resource_offsets_[top.resource + 1]; ++k) {
      uint32_t f = resource_flows_[k];
      if (frozen_[f]) continue;
      frozen_[f] = 1;
      rates[f] = level;
      if (bottlenecks) (*bottlenecks)[f] = top.resource;
      for (uint32_t i = p.flow_offsets[f]; i < p.flow_offsets[f + 1]; ++i) {
        uint32_t r = p.flow_resources[i];
        remaining_[r] = std::max(0.0, remaining_[r] - level);
        --unfrozen_[r];
        if (version_[r] != kChanged) {
          version_[r] = kChanged;
          changed_.push_back(r);
        }
      }
    }
    for (uint32_t r : changed_) {
      version_[r] = ++stamp_;
      if (unfrozen_[r] > 0 && r != top.resource) {
        heap_.push_back({remaining_[r] / unfrozen_[r], r, version_[r]});
        std::push_heap(heap_.begin(), heap_.end(), later<Share, Share>);
      }
    }
  }
}

}  // namespace parallax
