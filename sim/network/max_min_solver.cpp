#include "network/max_min_solver.h"

#include <algorithm>
#include <span>

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
  used_.assign(nr, 0.0);
  fastest_.assign(nr, 0.0);
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

  // A resource that its flows could not fill even if each ran at the capacity of the tightest
  // resource on its path never saturates, so it can never be a bottleneck: leave it out of the
  // filling. (Every flow keeps its tightest resource, whose bound includes that flow's own
  // capacity, so each flow stays capped; the rates are the same max-min rates.) It pays on
  // large problems only: on the flow model's small repairs, computing the bounds cost more
  // than the scans it saved (measured: rail shifts −8% without it).
  const bool prune = nr > kScanLimit;
  if (prune) {
    bound_.assign(nr, 0.0);
    for (uint32_t f = 0; f < nf; ++f) {
      double tightest = std::numeric_limits<double>::infinity();
      for (uint32_t i = p.flow_offsets[f]; i < p.flow_offsets[f + 1]; ++i) {
        tightest = std::min(tightest, remaining_[p.flow_resources[i]]);
      }
      for (uint32_t i = p.flow_offsets[f]; i < p.flow_offsets[f + 1]; ++i) bound_[p.flow_resources[i]] += tightest;
    }
  }
  candidates_.clear();
  for (uint32_t r = 0; r < nr; ++r) {
    if (unfrozen_[r] == 0) continue;
    if (prune && bound_[r] < remaining_[r] * (1 - kNeverFull)) {
      version_[r] = kIdle;
      continue;
    }
    candidates_.push_back(r);
  }

  // Freezes every unfrozen flow of `bottleneck` at `level` and collects, once each, the other
  // candidate resources they cross (their shares changed).
  // The changed resources are collected without a branch (a resource is written at the end of
  // the list every time and counted only the first): whether it was seen is a coin toss, and
  // a mispredicted branch there cost more than the store.
  if (changed_.size() <= p.flow_resources.size()) changed_.resize(p.flow_resources.size() + 1);
  size_t changed_count = 0;
  auto freeze = [&](uint32_t bottleneck, double level) {
    changed_count = 0;
    for (uint32_t k = resource_offsets_[bottleneck]; k < resource_offsets_[bottleneck + 1]; ++k) {
      uint32_t f = resource_flows_[k];
      if (frozen_[f]) continue;
      frozen_[f] = 1;
      rates[f] = level;
      if (bottlenecks) (*bottlenecks)[f] = bottleneck;
      for (uint32_t i = p.flow_offsets[f]; i < p.flow_offsets[f + 1]; ++i) {
        uint32_t r = p.flow_resources[i];
        remaining_[r] = std::max(0.0, remaining_[r] - level);
        used_[r] += level;
        fastest_[r] = level;
        --unfrozen_[r];
        const uint32_t version = version_[r];
        const uint32_t first = static_cast<uint32_t>(version != kChanged) & static_cast<uint32_t>(version != kIdle);
        changed_[changed_count] = r;
        changed_count += first;
        version_[r] = version | (0u - first);  // kChanged is all ones
      }
    }
  };
  auto changed = [&] { return std::span<const uint32_t>(changed_.data(), changed_count); };

  // Few candidates (the usual local repair): a scan for the smallest share beats a heap, whose
  // re-keyed entries mostly go stale before they surface (measured: 9 pops per freeze).
  // The shares sit in one array in resource order, so the smallest is found by a branch-free
  // minimum over four independent lanes and then its first occurrence — the lowest resource
  // among equal shares, as the heap breaks ties. A candidate whose flows are all frozen gets an
  // infinite share and stays in place; the array is compacted, in order, once half of it is
  // such.
  if (candidates_.size() <= kScanLimit) {
    constexpr double kDone = std::numeric_limits<double>::infinity();
    constexpr double kDoneOffset[2] = {0.0, kDone};
    size_t n = candidates_.size();
    share_.resize(n);
    position_.resize(nr);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t r = candidates_[i];
      share_[i] = remaining_[r] / unfrozen_[r];
      position_[r] = static_cast<uint32_t>(i);
    }
    size_t live = n;
    while (live > 0) {
      if (2 * live < n) {
        // Branch-free: every candidate is copied down, and only a live one advances `kept`.
        size_t kept = 0;
        for (size_t i = 0; i < n; ++i) {
          const uint32_t r = candidates_[i];
          candidates_[kept] = r;
          share_[kept] = share_[i];
          position_[r] = static_cast<uint32_t>(kept);
          kept += unfrozen_[r] != 0 ? 1 : 0;
        }
        n = kept;
      }
      const double* s = share_.data();
      double m0 = kDone, m1 = kDone, m2 = kDone, m3 = kDone;
      size_t i = 0;
      for (; i + 4 <= n; i += 4) {
        m0 = s[i] < m0 ? s[i] : m0;
        m1 = s[i + 1] < m1 ? s[i + 1] : m1;
        m2 = s[i + 2] < m2 ? s[i + 2] : m2;
        m3 = s[i + 3] < m3 ? s[i + 3] : m3;
      }
      for (; i < n; ++i) m0 = s[i] < m0 ? s[i] : m0;
      const double level = std::min(std::min(m0, m1), std::min(m2, m3));
      if (level == kDone) break;  // only with infinite capacities: nothing left to fill
      size_t best = 0;
      while (s[best] != level) ++best;
      freeze(candidates_[best], level);
      for (uint32_t r : changed()) {
        version_[r] = 0;
        const uint32_t unfrozen = unfrozen_[r];
        const uint32_t done = static_cast<uint32_t>(unfrozen == 0);
        // +infinity once every flow of r is frozen, by a table rather than a branch
        share_[position_[r]] = remaining_[r] / static_cast<double>(unfrozen + done) + kDoneOffset[done];
        live -= done;
      }
    }
    return;
  }

  heap_.clear();
  stamp_ = 0;
  for (uint32_t r : candidates_) heap_.push_back({remaining_[r] / unfrozen_[r], r, 0});
  std::make_heap(heap_.begin(), heap_.end(), later<Share, Share>);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later<Share, Share>);
    Share top = heap_.back();
    heap_.pop_back();
    if (top.version != version_[top.resource] || unfrozen_[top.resource] == 0) continue;
    freeze(top.resource, top.share);
    for (uint32_t r : changed()) {
      version_[r] = ++stamp_;
      if (unfrozen_[r] > 0 && r != top.resource) {
        heap_.push_back({remaining_[r] / unfrozen_[r], r, version_[r]});
        std::push_heap(heap_.begin(), heap_.end(), later<Share, Share>);
      }
    }
  }
}

}  // namespace parallax
