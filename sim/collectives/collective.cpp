// Names, parsing and nccl-tests conventions for collectives.
#include "collectives/collective.h"

#include <algorithm>
#include <cctype>

namespace parallax {
namespace {

// Lower case with '-' and ' ' read as '_', so "All-Reduce" and "all reduce" parse.
std::string normalize(std::string_view text) {
  std::string out;
  for (char c : text) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.push_back(l == '-' || l == ' ' ? '_' : l);
  }
  return out;
}

// One enum value with its canonical name and the other spellings parse accepts.
template <typename Value>
struct Named {
  Value value;
  std::string_view name;
  std::vector<std::string_view> aliases;
};

const std::vector<Named<CollectiveOp>>& op_names() {
  static const std::vector<Named<CollectiveOp>> names = {
      {CollectiveOp::kAllReduce, "all_reduce", {"allreduce", "all_reduce_perf"}},
      {CollectiveOp::kAllGather, "all_gather", {"allgather", "all_gather_perf"}},
      {CollectiveOp::kReduceScatter, "reduce_scatter", {"reducescatter", "reduce_scatter_perf"}},
      {CollectiveOp::kAllToAll, "all_to_all", {"alltoall", "alltoall_perf", "all_to_all_perf"}},
      {CollectiveOp::kBroadcast, "broadcast", {"bcast", "broadcast_perf"}},
      {CollectiveOp::kReduce, "reduce", {"reduce_perf"}},
      {CollectiveOp::kSendRecv, "send_recv", {"sendrecv", "sendrecv_perf", "send_recv_perf", "p2p"}},
  };
  return names;
}

const std::vector<Named<Algorithm>>& algo_names() {
  static const std::vector<Named<Algorithm>> names = {
      {Algorithm::kRing, "ring", {}},
      {Algorithm::kTree, "tree", {"double_binary_tree"}},
      {Algorithm::kNvls, "nvls", {}},
      {Algorithm::kNvlsTree, "nvls_tree", {"nvlstree"}},
      {Algorithm::kCollNetDirect, "collnet_direct", {"collnet", "collnetdirect", "sharp"}},
      {Algorithm::kCollNetChain, "collnet_chain", {"collnetchain"}},
      {Algorithm::kPat, "pat", {}},
      {Algorithm::kRecursiveHalvingDoubling, "rhd", {"recursive_halving_doubling", "rabenseifner"}},
      {Algorithm::kRecursiveDoubling, "recursive_doubling", {"rd"}},
      {Algorithm::kPairwise, "pairwise", {"pairwise_exchange"}},
      {Algorithm::kDirect, "direct", {}},
      {Algorithm::kHierarchical, "hierarchical", {"hier"}},
  };
  return names;
}

template <typename Value>
std::optional<Value> lookup(const std::vector<Named<Value>>& table, std::string_view text) {
  const std::string key = normalize(text);
  for (const auto& entry : table) {
    if (entry.name == key || std::find(entry.aliases.begin(), entry.aliases.end(), key) != entry.aliases.end()) {
      return entry.value;
    }
  }
  return std::nullopt;
}

template <typename Value>
std::string_view name_of(const std::vector<Named<Value>>& table, Value v) {
  for (const auto& entry : table) {
    if (entry.value == v) return entry.name;
  }
  return "?";
}

}  // namespace

std::string_view op_name(CollectiveOp op) { return name_of(op_names(), op); }

std::string_view algorithm_name(Algorithm algo) { return name_of(algo_names(), algo); }

std::string_view protocol_name(Protocol proto) {
  switch (proto) {
    case Protocol::kLL: return "LL";
    case Protocol::kLL128: return "LL128";
    case Protocol::kSimple: return "Simple";
  }
  return "?";
}

std::optional<CollectiveOp> parse_op(std::string_view text) { return lookup(op_names(), text); }

std::optional<Algorithm> parse_algorithm(std::string_view text) { return lookup(algo_names(), text); }

std::optional<Protocol> parse_protocol(std::string_view text) {
  const std::string key = normalize(text);
  for (Protocol p : all_protocols()) {
    if (normalize(protocol_name(p)) == key) return p;
  }
  return std::nullopt;
}

const std::vector<CollectiveOp>& all_ops() {
  static const std::vector<CollectiveOp> ops = {CollectiveOp::kAllReduce, CollectiveOp::kAllGather,
                                                CollectiveOp::kReduceScatter, CollectiveOp::kAllToAll,
                                                CollectiveOp::kBroadcast, CollectiveOp::kReduce,
                                                CollectiveOp::kSendRecv};
  return ops;
}

const std::vector<Algorithm>& all_algorithms() {
  static const std::vector<Algorithm> algos = [] {
    std::vector<Algorithm> out;
    for (const auto& n : algo_names()) out.push_back(n.value);
    return out;
  }();
  return algos;
}

const std::vector<Protocol>& all_protocols() {
  static const std::vector<Protocol> protos = {Protocol::kLL, Protocol::kLL128, Protocol::kSimple};
  return protos;
}

double busbw_factor(CollectiveOp op, int ranks) {
  const double n = ranks;
  switch (op) {
    case CollectiveOp::kAllReduce: return 2.0 * (n - 1) / n;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllToAll: return (n - 1) / n;
    case CollectiveOp::kBroadcast:
    case CollectiveOp::kReduce:
    case CollectiveOp::kSendRecv: return 1.0;
  }
  return 1.0;
}

bool size_is_total_buffer(CollectiveOp op) {
  return op == CollectiveOp::kAllGather || op == CollectiveOp::kReduceScatter || op == CollectiveOp::kAllToAll;
}

bool reduces(CollectiveOp op) {
  return op == CollectiveOp::kAllReduce || op == CollectiveOp::kReduceScatter || op == CollectiveOp::kReduce;
}

bool has_root(CollectiveOp op) { return op == CollectiveOp::kBroadcast || op == CollectiveOp::kReduce; }

}  // namespace parallax
