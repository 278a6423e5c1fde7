#include "network/max_min_solver.h"

#include <algorithm>
#include <limits>
#include <span>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace parallax {
namespace {
// Min-heap order on (share, resource): equal shares break by resource index, so the filling
// order — and with it the floating-point result — is deterministic.
bool later(const auto& a, const auto& b) {
  return a.share != b.share ? a.share > b.share : a.resource > b.resource;
}

// The share arrays are padded with +infinity to a multiple of this, so that the search below
// reads whole blocks.
constexpr size_t kBlock = 8;
size_t padded(size_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

// The smallest of shares[0, n) (padded to a multiple of kBlock with +infinity) into `level`, and
// the first position that holds it: the lowest resource among equal shares, as the heap breaks
// ties. Two doubles at a time where SSE2 is there (every x86-64), four scalar lanes elsewhere.
size_t first_minimum(const double* shares, size_t n, double& level) {
  const size_t end = padded(n);
#if defined(__SSE2__)
  __m128d a = _mm_set1_pd(std::numeric_limits<double>::infinity()), b = a, c = a, d = a;
  for (size_t i = 0; i < end; i += kBlock) {
    a = _mm_min_pd(a, _mm_loadu_pd(shares + i));
    b = _mm_min_pd(b, _mm_loadu_pd(shares + i + 2));
    c = _mm_min_pd(c, _mm_loadu_pd(shares + i + 4));
    d = _mm_min_pd(d, _mm_loadu_pd(shares + i + 6));
  }
  a = _mm_min_pd(_mm_min_pd(a, b), _mm_min_pd(c, d));
  level = _mm_cvtsd_f64(_mm_min_sd(a, _mm_unpackhi_pd(a, a)));
  const __m128d wanted = _mm_set1_pd(level);
  for (size_t i = 0; i < end; i += 2) {
    const int equal = _mm_movemask_pd(_mm_cmpeq_pd(_mm_loadu_pd(shares + i), wanted));
    if (equal != 0) return i + ((equal & 1) != 0 ? 0 : 1);
  }
  return 0;  // level is +infinity and no share is finite: the caller stops
#else
  double m0 = shares[0], m1 = shares[1], m2 = shares[2], m3 = shares[3];
  for (size_t i = 4; i < end; i += 4) {
    m0 = shares[i] < m0 ? shares[i] : m0;
    m1 = shares[i + 1] < m1 ? shares[i + 1] : m1;
    m2 = shares[i + 2] < m2 ? shares[i + 2] : m2;
    m3 = shares[i + 3] < m3 ? shares[i + 3] : m3;
  }
  level = std::min(std::min(m0, m1), std::min(m2, m3));
  size_t best = 0;
  while (best < end && shares[best] != level) ++best;
  return best < end ? best : 0;
#endif
}
}  // namespace

void MaxMinSolver::heap_place(uint32_t at, const Share& e) {
  heap_[at] = e;
  heap_at_[e.resource] = at;
}

void MaxMinSolver::heap_sift_up(uint32_t at) {
  const Share e = heap_[at];
  while (at > 0) {
    const uint32_t parent = (at - 1) / 2;
    if (!later(heap_[parent], e)) break;
    heap_place(at, heap_[parent]);
    at = parent;
  }
  heap_place(at, e);
}

void MaxMinSolver::heap_sift_down(uint32_t at) {
  const Share e = heap_[at];
  const uint32_t n = static_cast<uint32_t>(heap_.size());
  while (true) {
    uint32_t child = 2 * at + 1;
    if (child >= n) break;
    if (child + 1 < n && later(heap_[child], heap_[child + 1])) ++child;
    if (!later(e, heap_[child])) break;
    heap_place(at, heap_[child]);
    at = child;
  }
  heap_place(at, e);
}

void MaxMinSolver::heap_remove(uint32_t resource) {
  const uint32_t at = heap_at_[resource];
  heap_at_[resource] = kNotInHeap;
  const Share last = heap_.back();
  heap_.pop_back();
  if (at == heap_.size()) return;
  heap_place(at, last);
  if (at > 0 && later(heap_[(at - 1) / 2], last)) heap_sift_up(at);
  else heap_sift_down(at);
}

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
  const bool weighted = !p.flow_weights.empty();
  if (weighted) {  // from here on a resource counts the flows its flows stand for
    std::fill(unfrozen_.begin(), unfrozen_.end(), 0);
    for (uint32_t f = 0; f < nf; ++f) {
      for (uint32_t i = p.flow_offsets[f]; i < p.flow_offsets[f + 1]; ++i) {
        unfrozen_[p.flow_resources[i]] += p.flow_weights[f];
      }
    }
  }
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
      const double weight = weighted ? p.flow_weights[f] : 1.0;
      for (uint32_t i = p.flow_offsets[f]; i < p.flow_offsets[f + 1]; ++i) {
        bound_[p.flow_resources[i]] += tightest * weight;
      }
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

  // The changed resources are collected without a branch (a resource is written at the end of
  // the list every time and counted only the first): whether it was seen is a coin toss, and
  // a mispredicted branch there cost more than the store.
  // A freeze lists each resource once and writes one spare slot past the last.
  if (changed_.size() <= nr) changed_.resize(nr + 1);
  size_t changed_count = 0;
  // Freezes every unfrozen flow of `bottleneck` at `level` and collects, once each, the other
  // candidate resources they cross (their shares changed).
  auto freeze = [&](uint32_t bottleneck, double level) {
    changed_count = 0;
    for (uint32_t k = resource_offsets_[bottleneck]; k < resource_offsets_[bottleneck + 1]; ++k) {
      uint32_t f = resource_flows_[k];
      if (frozen_[f]) continue;
      frozen_[f] = 1;
      rates[f] = level;
      if (bottlenecks) (*bottlenecks)[f] = bottleneck;
      const uint32_t weight = weighted ? p.flow_weights[f] : 1;
      const double taken = level * weight;  // exactly `level` when unweighted
      for (uint32_t i = p.flow_offsets[f]; i < p.flow_offsets[f + 1]; ++i) {
        uint32_t r = p.flow_resources[i];
        remaining_[r] = std::max(0.0, remaining_[r] - taken);
        used_[r] += taken;
        fastest_[r] = level;
        unfrozen_[r] -= weight;
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
  // minimum and then its first occurrence (first_minimum) — the lowest resource among equal
  // shares, as the heap breaks ties. A candidate whose flows are all frozen gets an
  // infinite share and stays in place; the array is compacted, in order, once half of it is
  // such.
  if (candidates_.size() <= kScanLimit) {
    constexpr double kDone = std::numeric_limits<double>::infinity();
    constexpr double kDoneOffset[2] = {0.0, kDone};
    size_t n = candidates_.size();
    share_.resize(padded(n));
    std::fill(share_.begin() + static_cast<std::ptrdiff_t>(n), share_.end(), kDone);
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
        std::fill(share_.begin() + static_cast<std::ptrdiff_t>(kept), share_.begin() + static_cast<std::ptrdiff_t>(padded(kept)), kDone);
        n = kept;
      }
      double level;
      const size_t best = first_minimum(share_.data(), n, level);
      if (level == kDone) break;  // only with infinite capacities: nothing left to fill
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

  // Many candidates (a first solve of an all-to-all): the shares in a heap that knows where
  // each resource sits, re-keyed in place as freezes change them, so that it holds one entry per
  // resource. (A lazy heap, pushing every new share, held one per change: 16 bytes for each flow
  // of a million-flow solve.) Pops follow (share, resource), as the scan's minimum does.
  heap_.clear();
  heap_at_.assign(nr, kNotInHeap);
  for (uint32_t r : candidates_) {
    heap_at_[r] = static_cast<uint32_t>(heap_.size());
    heap_.push_back({remaining_[r] / unfrozen_[r], r});
  }
  for (size_t i = heap_.size() / 2; i-- > 0;) heap_sift_down(static_cast<uint32_t>(i));
  while (!heap_.empty()) {
    const Share top = heap_.front();
    heap_remove(top.resource);
    freeze(top.resource, top.share);
    for (uint32_t r : changed()) {
      version_[r] = 0;
      if (heap_at_[r] == kNotInHeap) continue;
      if (unfrozen_[r] == 0) {
        heap_remove(r);
      } else {
        // Shares only grow, but rounding may take the last bit back: either way.
        const uint32_t at = heap_at_[r];
        heap_[at].share = remaining_[r] / unfrozen_[r];
        if (at > 0 && later(heap_[(at - 1) / 2], heap_[at])) heap_sift_up(at);
        else heap_sift_down(at);
      }
    }
  }
}

}  // namespace parallax
