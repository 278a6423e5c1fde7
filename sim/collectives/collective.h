// The vocabulary of collective communication shared by the algorithms, the NCCL cost model,
// the nccl-tests log reader and the CLI: which operation, by which algorithm, in which protocol,
// and the nccl-tests conventions that turn a size and a time into algbw and busbw.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace parallax {

enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kReduce, kSendRecv };

/// Algorithms Parallax can lower to transfers. The first seven are NCCL's (tuning.cc order is
/// not kept); the rest are MPI-style algorithms kept for comparison.
enum class Algorithm {
  kRing,
  kTree,             // NCCL double binary tree across nodes, chain inside a node
  kNvls,             // NVLink SHARP: reduction/multicast in the NVSwitch
  kNvlsTree,         // NVLS inside nodes, tree across nodes
  kCollNetDirect,    // in-network reduction in IB switches (SHARP)
  kCollNetChain,
  kPat,              // NCCL's parallel aggregated trees (1 GPU per node)
  kRecursiveHalvingDoubling,  // Rabenseifner: RS by recursive halving + AG by recursive doubling
  kRecursiveDoubling,
  kPairwise,         // all-to-all in n-1 shifted steps
  kDirect,           // all-to-all with every pair at once
  kHierarchical,     // intra-node RS → inter-node AR on 1/ppn of the data → intra-node AG
};

enum class Protocol { kLL, kLL128, kSimple };

/// Names as the CLI, the JSON output and nccl-tests use them.
std::string_view op_name(CollectiveOp op);          // "all_reduce", "all_gather", ...
std::string_view algorithm_name(Algorithm algo);    // "ring", "tree", "nvls", "nvls_tree",
                                                    // "collnet_direct", "collnet_chain", "pat",
                                                    // "rhd", "recursive_doubling", "pairwise",
                                                    // "direct", "hierarchical"
std::string_view protocol_name(Protocol proto);     // "LL", "LL128", "Simple"
/// Accepts the names above, nccl-tests binary names ("all_reduce_perf", "alltoall_perf",
/// "sendrecv_perf") and common spellings ("allreduce", "all-reduce", "alltoall").
std::optional<CollectiveOp> parse_op(std::string_view text);
std::optional<Algorithm> parse_algorithm(std::string_view text);  // case-insensitive
std::optional<Protocol> parse_protocol(std::string_view text);    // case-insensitive
const std::vector<CollectiveOp>& all_ops();
const std::vector<Algorithm>& all_algorithms();
const std::vector<Protocol>& all_protocols();

/// nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md): busbw = algbw × factor.
/// 2(n−1)/n all-reduce; (n−1)/n all-gather, reduce-scatter, all-to-all; 1 otherwise.
double busbw_factor(CollectiveOp op, int ranks);
/// True for operations whose nccl-tests "size" is the total buffer (n × per-rank bytes):
/// all-gather, reduce-scatter, all-to-all.
bool size_is_total_buffer(CollectiveOp op);
/// True for operations that reduce (they print a redop and pay reduction compute).
bool reduces(CollectiveOp op);
/// True for operations with a root rank (broadcast, reduce).
bool has_root(CollectiveOp op);

}  // namespace parallax
