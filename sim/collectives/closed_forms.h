// Closed-form α–β costs of collective algorithms (Thakur, Rabenseifner & Gropp 2005; Chan et
// al. 2007; Patarasuk & Yuan 2009): p ranks, α the latency of one step, B the bandwidth of one
// rank's port (β = 1/B), full duplex, one port per rank, no contention. They are the reference
// the simulation must reproduce on an idle topology, and the `analytical` answer for the
// algorithms NCCL's own model does not cover. Sizes follow nccl-tests (see CollectiveSpec).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>

#include "units/units.h"

namespace parallax::closed_form {

inline double lg(int p) { return std::log2(static_cast<double>(p)); }
inline Time steps(double count, Time alpha, double bytes, Bandwidth bw) {
  return Time::from_seconds(count * (alpha.seconds() + bytes / bw.value()));
}

/// Ring all-reduce: 2(p−1) steps of S/p each.
inline Time ring_all_reduce(int p, Bytes s, Time alpha, Bandwidth bw) {
  return steps(2.0 * (p - 1), alpha, s.value() / p, bw);
}
/// Ring reduce-scatter or all-gather of a total buffer S: p−1 steps of S/p.
inline Time ring_gather_scatter(int p, Bytes total, Time alpha, Bandwidth bw) {
  return steps(p - 1.0, alpha, total.value() / p, bw);
}
/// Pipelined chain (ring broadcast/reduce) in k chunks, where only the first chunk pays each
/// hop's software latency `o` and every chunk pays the wire latency λ: the first chunk crosses
/// p−1 hops, the other k−1 follow one hop-time apart: (p−1)·o + (p+k−2)(λ + S/(kB)).
inline Time chain(int p, Bytes s, int k, Time o, Time lambda, Bandwidth bw) {
  return o * (p - 1) + steps(p - 2.0 + k, lambda, s.value() / k, bw);
}
/// Rabenseifner all-reduce for p = 2^q: 2 lg p α + 2(p−1)/p · S/B. For other p the p − 2^⌊lg p⌋
/// extra ranks fold into neighbours first and get the result back after: two more steps of S.
inline Time rhd_all_reduce(int p, Bytes s, Time alpha, Bandwidth bw) {
  const int p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(p)));
  double t = 2 * lg(p2) * alpha.seconds() + 2.0 * (p2 - 1) / p2 * s.value() / bw.value();
  if (p2 != p) t += 2 * (alpha.seconds() + s.value() / bw.value());
  return Time::from_seconds(t);
}
/// Recursive halving reduce-scatter or recursive doubling all-gather (p = 2^q): lg p α + (p−1)/p · S/B.
inline Time recursive_gather_scatter(int p, Bytes total, Time alpha, Bandwidth bw) {
  return Time::from_seconds(lg(p) * alpha.seconds() + (p - 1.0) / p * total.value() / bw.value());
}
/// Recursive doubling all-reduce (p = 2^q): lg p (α + S/B).
inline Time recursive_doubling_all_reduce(int p, Bytes s, Time alpha, Bandwidth bw) {
  return steps(lg(p), alpha, s.value(), bw);
}
/// Pairwise all-to-all, each rank sending S in total (S/p to every rank, itself included):
/// p−1 steps of S/p.
inline Time pairwise_all_to_all(int p, Bytes s, Time alpha, Bandwidth bw) {
  return steps(p - 1.0, alpha, s.value() / p, bw);
}
/// Direct all-to-all, every pair at once on a non-blocking switch: α + (p−1)/p · S/B.
inline Time direct_all_to_all(int p, Bytes s, Time alpha, Bandwidth bw) {
  return Time::from_seconds(alpha.seconds() + (p - 1.0) / p * s.value() / bw.value());
}
/// Direct all-to-all of p ranks, k on each node: a rank's NIC carries (p−k)/p · S, while its
/// links inside the node carry, at the same time, (k−1)/p · S to its node's peers — and with
/// NCCL's PXN over NVLink (`relayed`) what it relays to their rails too, (k−1)/k · S in all (the
/// NIC then carries what its node sends to the other nodes' ranks on its rail, as much). The
/// slower of the two sets the time; k = p is the one-node form.
inline Time direct_all_to_all_across_nodes(int p, int k, bool relayed, Bytes s, Time alpha, Bandwidth intra,
                                           Bandwidth inter) {
  const double network = (p - static_cast<double>(k)) / p * s.value() / inter.value();
  const double inside = (k - 1.0) / (relayed ? k : p) * s.value() / intra.value();
  return Time::from_seconds(alpha.seconds() + std::max(network, inside));
}
/// Lower bound of any all-reduce: 2(p−1)/p · S/B_injection (every rank must send and receive
/// that much; Chan et al. 2007).
inline Time all_reduce_lower_bound(int p, Bytes s, Bandwidth injection) {
  return Time::from_seconds(2.0 * (p - 1) / p * s.value() / injection.value());
}

}  // namespace parallax::closed_form
