// Which ranks a sweep runs on. A group is chosen to isolate one link class (FORMAT.md):
//   all           every rank;
//   node          the ranks of rank 0's node (NVLink/PCIe, or shared memory for MPI);
//   pair-intra    rank 0 and the next rank on its node (one intra-node link);
//   one-per-node  one rank per node, the k-th node contributing its (k mod ranks-per-node)-th
//                 rank, so that on a rail-optimised fabric the traffic crosses rails (the
//                 network through the spine); with one rank per node it equals `rail`;
//   rail          local rank 0 of every node (one rail of the network);
//   self          rank 0 alone (launch and software overhead; valid with one GPU).
// Every group holds world rank 0 and lists it first, so rank 0 is always a member and the
// group's rank 0: it times, reduces and writes. Only one instance of a group is measured at a
// time (one pair, one rail), so that nothing else shares the links it measures.
#pragma once

#include <string>
#include <vector>

namespace parallax::harness {

/// Where a world rank runs: its host and its index among the ranks of that host (for GPUs:
/// the CUDA device index it drives).
struct RankPlace {
  std::string host;
  int local = 0;
};

/// A group formed on a set of places; `ranks` is empty when it cannot be formed, and `why_not`
/// says why ("pair-intra needs two ranks on one node").
struct RankGroup {
  std::string name;
  std::vector<int> ranks;  ///< world ranks, ascending, world rank 0 first
  int nodes = 0;           ///< distinct hosts among the members
  int ranks_per_node = 0;  ///< the most members on one host
  std::string why_not;
};

/// "all", "node", "pair-intra", "one-per-node", "rail", "self".
const std::vector<std::string>& group_names();

/// Node index of every rank: hosts numbered in order of first appearance.
std::vector<int> node_indices(const std::vector<RankPlace>& places);

/// Number of distinct hosts.
int node_count(const std::vector<RankPlace>& places);

/// Forms group `name` over `places` (one per world rank). Throws std::invalid_argument for an
/// unknown name or no places; a group that cannot be formed comes back with `why_not`.
RankGroup form_group(const std::string& name, const std::vector<RankPlace>& places);

/// "host:local" of each member, in rank order (FORMAT.md's `members`).
std::vector<std::string> member_labels(const RankGroup& group, const std::vector<RankPlace>& places);

}  // namespace parallax::harness
