#include "collectives/calibrated_model.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "collectives/collective_simulator.h"

namespace parallax {
namespace {

std::string proto_key(Protocol p, int regime) {
  std::string s(protocol_name(p));
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s + std::string(static_cast<size_t>(std::max(0, regime)), '+');
}

int log2_floor(int n) {
  int l = 0;
  while ((1 << (l + 1)) <= n) ++l;
  return l;
}

// The link class that bounds the path between two GPUs: the class of its slowest link.
std::string bottleneck_class(const Topology& topo, const Router& router, DeviceId a, DeviceId b) {
  std::vector<LinkId> path;
  router.route(a, b, 0, path);
  if (path.empty()) return "local";
  const Link* slowest = &topo.link(path.front());
  for (LinkId l : path) {
    if (topo.link(l).bandwidth < slowest->bandwidth) slowest = &topo.link(l);
  }
  return to_string(slowest->link_class);
}

}  // namespace

std::string launch_parameter(Protocol p, int regime) { return "launch." + proto_key(p, regime); }
std::string alpha_parameter(const std::string& link_class, Protocol p, int regime) {
  return "alpha." + link_class + "." + proto_key(p, regime);
}
std::string inverse_bandwidth_parameter(const std::string& link_class, Protocol p, int regime) {
  return "inverse_bandwidth." + link_class + "." + proto_key(p, regime);
}

std::string regime_start_key(CollectiveOp op, int ranks, int nodes, Protocol p, int regime) {
  return "from_bytes." + std::string(op_name(op)) + "." + std::to_string(ranks) + "x" + std::to_string(nodes) + "." +
         proto_key(p, regime);
}

std::vector<std::pair<std::string, double>> CollectiveTerms::coefficients() const {
  std::vector<std::pair<std::string, double>> c;
  c.emplace_back(launch_parameter(protocol, regime), 1.0);
  if (intra_steps > 0) c.emplace_back(alpha_parameter(intra_class, protocol, regime), intra_steps);
  if (inter_steps > 0) c.emplace_back(alpha_parameter("network", protocol, regime), inter_steps);
  if (bus_bytes > 0) c.emplace_back(inverse_bandwidth_parameter(bandwidth_class, protocol, regime), bus_bytes);
  return c;
}

CollectiveTerms collective_terms(const CollectiveSimulator& sim, CollectiveOp op, Bytes size, bool in_place,
                                 Algorithm algo, Protocol proto, bool per_collective_classes) {
  CollectiveTerms t;
  const Communicator& comm = sim.communicator();
  const int n = comm.size();
  const int nodes = comm.node_count();
  const int ppn = std::max(1, comm.ranks_per_node());
  const double S = size.value();
  t.algorithm = algo;
  t.protocol = proto;
  if (n == 1) {
    // One rank: NCCL copies (out of place) or does nothing; what is left is the launch and a
    // local copy through device memory.
    t.protocol = Protocol::kSimple;
    t.bandwidth_class = "local";
    t.bus_bytes = in_place ? 0.0 : S;
    return t;
  }
  // Intra class: between the first two ranks of the fullest node; bandwidth class: the network
  // once the ranks span nodes.
  for (const auto& node_ranks : comm.nodes()) {
    if (node_ranks.size() >= 2) {
      t.intra_class = bottleneck_class(sim.topology(), sim.router(), comm.device(node_ranks[0]), comm.device(node_ranks[1]));
      break;
    }
  }
  t.bandwidth_class = nodes > 1 ? std::string("network") : t.intra_class;
  // Latency steps (NCCL's latency table, reference §2.4) and bus bytes (§2.3's algBw ratios).
  const double nsteps = op == CollectiveOp::kAllReduce                                        ? 2.0 * (n - 1)
                        : (op == CollectiveOp::kAllGather || op == CollectiveOp::kReduceScatter) ? n - 1.0
                                                                                                  : 1.0 * n;
  double inter = 0;
  double steps = nsteps;
  double bus = S * nsteps / n;
  switch (t.algorithm) {
    case Algorithm::kTree:
      steps = 2.0 * ((ppn - 1) + log2_floor(nodes));
      inter = 2.0 * log2_floor(nodes);
      bus = 2.0 * S;
      break;
    case Algorithm::kNvls:
    case Algorithm::kNvlsTree:
      // The reduction runs in the NVSwitch: its bandwidth is the switch's, not a GPU link's.
      steps = nodes > 1 ? 2.0 : 1.0;
      inter = nodes > 1 ? 1.0 : 0.0;
      if (nodes == 1) t.bandwidth_class = "nvls";
      break;
    case Algorithm::kCollNetDirect:
    case Algorithm::kCollNetChain:
      steps = 2.0 * (ppn - 1) + 1.0;
      inter = 1.0;
      t.bandwidth_class = "collnet";
      break;
    default:
      if (op == CollectiveOp::kAllToAll) {
        steps = n - 1.0;
        inter = nodes > 1 ? n - ppn : 0.0;
        bus = S * (n - 1.0) / n;
      } else if (op == CollectiveOp::kSendRecv) {
        steps = 1.0;
        inter = nodes > 1 ? 1.0 : 0.0;
        bus = S;
      } else if (op == CollectiveOp::kBroadcast || op == CollectiveOp::kReduce) {
        steps = n - 1.0;
        inter = nodes > 1 ? nodes - 1.0 : 0.0;
        bus = S;
      } else {
        inter = nodes > 1 ? (op == CollectiveOp::kAllReduce ? 2.0 * (nodes - 1) : nodes - 1.0) : 0.0;
      }
      break;
  }
  if (per_collective_classes) {
    // MPI picks its algorithm per collective (and per size, within the regimes the fit finds):
    // each collective gets its own α and β on the link class.
    const std::string suffix = ":" + std::string(op_name(op));
    if (!t.intra_class.empty()) t.intra_class += suffix;
    t.bandwidth_class += suffix;
  }
  t.inter_steps = inter;
  t.intra_steps = t.intra_class.empty() ? 0.0 : std::max(0.0, steps - inter);
  if (t.intra_class.empty()) t.inter_steps = steps;  // one rank per node: every step crosses
  t.bus_bytes = bus;
  return t;
}

std::optional<Time> CalibratedCollectiveModel::predict(const CollectiveTerms& terms) const {
  double seconds = 0;
  for (const auto& [name, coefficient] : terms.coefficients()) {
    auto it = parameters_.find(name);
    if (it == parameters_.end()) return std::nullopt;
    seconds += coefficient * it->second;
  }
  if (!(seconds > 0)) return std::nullopt;
  return Time::from_seconds(seconds);
}

std::optional<std::pair<Time, CollectiveTerms>> CalibratedCollectiveModel::fastest(CollectiveTerms terms,
                                                                                   std::optional<Protocol> forced) const {
  std::optional<std::pair<Time, CollectiveTerms>> best;
  for (Protocol p : {Protocol::kLL, Protocol::kLL128, Protocol::kSimple}) {
    if (forced && *forced != p) continue;
    for (int regime : {0, 1, 2}) {
      terms.protocol = p;
      terms.regime = regime;
      std::optional<Time> v = predict(terms);
      if (v && (!best || *v < best->first)) best = std::make_pair(*v, terms);
    }
  }
  return best;
}

std::optional<std::pair<Time, CollectiveTerms>> CalibratedCollectiveModel::at_size(CollectiveTerms terms, CollectiveOp op,
                                                                                   int ranks, int nodes, Bytes size,
                                                                                   std::optional<Protocol> forced) const {
  std::optional<std::pair<double, std::pair<Protocol, int>>> regime;  // (start, label)
  for (Protocol p : {Protocol::kLL, Protocol::kLL128, Protocol::kSimple}) {
    if (forced && *forced != p) continue;
    for (int r : {0, 1, 2}) {
      const auto it = parameters_.find(regime_start_key(op, ranks, nodes, p, r));
      if (it == parameters_.end() || it->second > size.value()) continue;
      if (!regime || it->second > regime->first) regime = std::make_pair(it->second, std::make_pair(p, r));
    }
  }
  if (regime) {
    terms.protocol = regime->second.first;
    terms.regime = regime->second.second;
    if (std::optional<Time> t = predict(terms)) return std::make_pair(*t, terms);
  }
  return fastest(terms, forced);
}

}  // namespace parallax
