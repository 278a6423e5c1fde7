// Group formation (see rank_groups.h for what each group isolates).
#include "harness/rank_groups.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace parallax::harness {

const std::vector<std::string>& group_names() {
  static const std::vector<std::string> names = {"all", "node", "pair-intra", "one-per-node", "rail", "self"};
  return names;
}

std::vector<int> node_indices(const std::vector<RankPlace>& places) {
  std::map<std::string, int> index;
  std::vector<int> out;
  out.reserve(places.size());
  for (const auto& p : places) {
    auto [it, inserted] = index.emplace(p.host, static_cast<int>(index.size()));
    out.push_back(it->second);
  }
  return out;
}

int node_count(const std::vector<RankPlace>& places) {
  const auto nodes = node_indices(places);
  return nodes.empty() ? 0 : *std::max_element(nodes.begin(), nodes.end()) + 1;
}

RankGroup form_group(const std::string& name, const std::vector<RankPlace>& places) {
  if (std::find(group_names().begin(), group_names().end(), name) == group_names().end()) {
    throw std::invalid_argument("unknown group '" + name + "' (all, node, pair-intra, one-per-node, rail, self)");
  }
  if (places.empty()) throw std::invalid_argument("form_group: no ranks");
  const std::vector<int> node = node_indices(places);
  const int nodes = *std::max_element(node.begin(), node.end()) + 1;
  // Ranks of each node in rank order: the k-th entry of a node's list is its k-th rank.
  std::vector<std::vector<int>> on_node(static_cast<size_t>(nodes));
  for (size_t r = 0; r < places.size(); ++r) on_node[static_cast<size_t>(node[r])].push_back(static_cast<int>(r));

  RankGroup g;
  g.name = name;
  if (name == "all") {
    for (size_t r = 0; r < places.size(); ++r) g.ranks.push_back(static_cast<int>(r));
  } else if (name == "node") {
    g.ranks = on_node[0];
  } else if (name == "pair-intra") {
    if (on_node[0].size() < 2) {
      g.why_not = "pair-intra needs two ranks on one node (rank 0's node has " + std::to_string(on_node[0].size()) + ")";
    } else {
      g.ranks = {on_node[0][0], on_node[0][1]};
    }
  } else if (name == "one-per-node" || name == "rail") {
    if (nodes < 2) {
      g.why_not = name + " needs at least two nodes (all ranks are on " + places[0].host + ")";
    } else {
      for (size_t n = 0; n < on_node.size(); ++n) {
        const auto& local = on_node[n];
        // Node 0 contributes its first rank either way, so rank 0 stays a member.
        const size_t pick = name == "rail" ? 0 : n % local.size();
        g.ranks.push_back(local[pick]);
      }
      std::sort(g.ranks.begin(), g.ranks.end());
    }
  } else {  // self
    g.ranks = {0};
  }

  std::map<int, int> per_node;
  for (int r : g.ranks) ++per_node[node[static_cast<size_t>(r)]];
  g.nodes = static_cast<int>(per_node.size());
  for (const auto& [n, count] : per_node) g.ranks_per_node = std::max(g.ranks_per_node, count);
  return g;
}

std::vector<std::string> member_labels(const RankGroup& group, const std::vector<RankPlace>& places) {
  std::vector<std::string> out;
  out.reserve(group.ranks.size());
  for (int r : group.ranks) {
    const auto& p = places.at(static_cast<size_t>(r));
    out.push_back(p.host + ":" + std::to_string(p.local));
  }
  return out;
}

}  // namespace parallax::harness
