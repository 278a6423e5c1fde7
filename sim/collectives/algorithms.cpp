// Lowering of every algorithm to transfers; see algorithms.h for the conventions.
#include "collectives/algorithms.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace parallax {

// ---------------------------------------------------------------- communicator

Communicator::Communicator(const Topology& topo, std::vector<DeviceId> ranks) : topo_(topo), ranks_(std::move(ranks)) {
  if (ranks_.empty()) throw std::invalid_argument("a communicator needs at least one rank");
  std::set<uint32_t> seen;
  std::vector<int> node_index_of;  // topology node → index in nodes_
  for (int r = 0; r < size(); ++r) {
    const Device& d = topo_.device(ranks_[static_cast<size_t>(r)]);
    if (d.kind != DeviceKind::kGpu) throw std::invalid_argument("rank " + std::to_string(r) + " (" + d.name + ") is not a GPU");
    if (!seen.insert(ranks_[static_cast<size_t>(r)].value).second) {
      throw std::invalid_argument("GPU " + d.name + " is listed twice");
    }
    auto node = static_cast<size_t>(std::max(0, d.node));
    if (node_index_of.size() <= node) node_index_of.resize(node + 1, -1);
    if (node_index_of[node] < 0) {
      node_index_of[node] = static_cast<int>(nodes_.size());
      nodes_.emplace_back();
    }
    nodes_[static_cast<size_t>(node_index_of[node])].push_back(r);
    node_of_.push_back(node_index_of[node]);
  }
}

bool Communicator::uniform() const {
  for (const auto& n : nodes_) {
    if (n.size() != nodes_.front().size()) return false;
  }
  return true;
}

int Communicator::ranks_per_node() const {
  size_t most = 0;
  for (const auto& n : nodes_) most = std::max(most, n.size());
  return static_cast<int>(most);
}

Communicator place_ranks(const Topology& topo, int gpus, std::optional<int> per_node) {
  if (gpus < 1) throw std::invalid_argument("--gpus must be at least 1");
  if (per_node && *per_node < 1) throw std::invalid_argument("--gpus-per-node must be at least 1");
  std::vector<DeviceId> ranks;
  for (int n = 0; n < topo.node_count() && static_cast<int>(ranks.size()) < gpus; ++n) {
    int taken = 0;
    for (DeviceId g : topo.gpus_of_node(n)) {
      if (static_cast<int>(ranks.size()) == gpus || (per_node && taken == *per_node)) break;
      ranks.push_back(g);
      ++taken;
    }
  }
  if (static_cast<int>(ranks.size()) < gpus) {
    throw std::invalid_argument("the topology has room for " + std::to_string(ranks.size()) + " ranks" +
                                (per_node ? " at " + std::to_string(*per_node) + " per node" : std::string()) +
                                ", not " + std::to_string(gpus) + " (raise --nodes)");
  }
  return Communicator(topo, std::move(ranks));
}

namespace {

// How many of a node's ranks share each NIC they reach directly (1 where each has its own, or
// none): a channel's rotation steps by it, so that consecutive channels leave and enter the
// node through different NICs, as NCCL's search spreads channels over the NICs.
size_t ranks_per_nic(const Communicator& comm, const std::vector<int>& local) {
  const Topology& topo = comm.topology();
  std::set<uint32_t> nics;
  for (int r : local) {
    for (LinkId l : topo.out_links(comm.device(r))) {
      const DeviceId to = topo.link(l).to;
      if (topo.device(to).kind == DeviceKind::kNic) nics.insert(to.value);
    }
  }
  return nics.empty() || nics.size() >= local.size() ? 1 : local.size() / nics.size();
}

}  // namespace

std::vector<int> ring_order(const Communicator& comm, int channel) {
  std::vector<int> order;
  for (size_t k = 0; k < comm.nodes().size(); ++k) {
    const auto& local = comm.nodes()[k];
    const size_t m = local.size();
    const size_t start = static_cast<size_t>(channel) * ranks_per_nic(comm, local);
    std::vector<int> rotated;
    for (size_t j = 0; j < m; ++j) rotated.push_back(local[(start + j) % m]);
    if (k % 2 == 1) std::reverse(rotated.begin(), rotated.end());
    order.insert(order.end(), rotated.begin(), rotated.end());
  }
  return order;
}

// ---------------------------------------------------------------- lowering

namespace {

using RankTasks = std::vector<std::vector<TaskId>>;  // per rank: tasks it must wait for

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// The binary tree NCCL builds over n members (ncclGetBtree's shape): a member's parent flips its
// lowest set bit and sets the next one up, falling back to just flipping when that overshoots.
int btree_parent(int r, int n) {
  if (r == 0) return -1;
  int bit = r & -r;
  int up = (r ^ bit) | (bit << 1);
  return up < n ? up : (r ^ bit);
}

// Tree `which` (0 or 1) of NCCL's double binary tree over `nodes` nodes: each node's parent
// node, −1 for the root. Tree 1 renumbers nodes as ncclGetDtree does: node x takes tree
// position x − 1 (mod n) for an odd count, n − 1 − x (mirrored) for an even one.
std::vector<int> dtree_parent_nodes(int nodes, int which) {
  auto position = [&](int x) { return which == 0 ? x : (nodes % 2 == 1 ? (x + nodes - 1) % nodes : nodes - 1 - x); };
  std::vector<int> node_at(static_cast<size_t>(nodes));
  for (int x = 0; x < nodes; ++x) node_at[static_cast<size_t>(position(x))] = x;
  std::vector<int> parent(static_cast<size_t>(nodes), -1);
  for (int k = 0; k < nodes; ++k) {
    const int up = btree_parent(position(k), nodes);
    if (up >= 0) parent[static_cast<size_t>(k)] = node_at[static_cast<size_t>(up)];
  }
  return parent;
}

class Lowering {
 public:
  Lowering(const CollectiveSpec& spec, const Communicator& comm, const Router& router, const LoweringOptions& opt)
      : spec_(spec), comm_(comm), router_(router), opt_(opt), n_(comm.size()),
        channels_(std::max(1, opt.channels)) {}

  TransferGraph build() {
    RankTasks none(static_cast<size_t>(n_));
    const double s = spec_.size.value();
    switch (spec_.algorithm) {
      case Algorithm::kRing: ring(none, s); break;
      case Algorithm::kTree: tree(s); break;
      case Algorithm::kRecursiveHalvingDoubling: rhd(s); break;
      case Algorithm::kRecursiveDoubling: recursive_doubling(s); break;
      case Algorithm::kPairwise: all_to_all(false); break;
      case Algorithm::kDirect: all_to_all(true); break;
      case Algorithm::kHierarchical: hierarchical(s); break;
      case Algorithm::kNvls: nvls(s); break;
      case Algorithm::kNvlsTree: nvls_tree(s); break;
      case Algorithm::kPat: pat(s); break;
      case Algorithm::kCollNetChain: collnet_chain(s); break;
      case Algorithm::kCollNetDirect: collnet(s); break;
      default: throw std::logic_error("unsupported algorithm reached lowering");
    }
    return std::move(graph_);
  }

 private:
  DeviceId dev(int rank) const { return comm_.device(rank); }
  Bytes wire(double payload) const { return Bytes(payload / opt_.wire_efficiency); }
  // Latency of the wires between two ranks, cached: steps cross the same pairs again and again.
  Time wire_latency(int a, int b) {
    uint64_t key = (static_cast<uint64_t>(dev(a).value) << 32) | dev(b).value;
    auto it = wire_latency_.find(key);
    if (it == wire_latency_.end()) it = wire_latency_.emplace(key, router_.path_latency(dev(a), dev(b))).first;
    return it->second;
  }
  // NCCL's per-step latencies already include crossing the wires; the network model adds the
  // path latency to every flow, so a step waits only for the remainder.
  Time step_latency(int a, int b) { return step_latency_over(a, b, wire_latency(a, b)); }
  // For patterns that visit each pair once (all-to-all), where caching the wire latency of
  // every pair would only cost memory.
  Time step_latency_once(int a, int b) { return step_latency_over(a, b, router_.path_latency(dev(a), dev(b))); }
  // Every pair's wire latency (a·n + b), by destination: n routing trees instead of n² routes;
  // empty where the n² table would take more than 256 MiB (then step_latency_once per pair).
  std::vector<Time> all_pair_wire_latencies() const {
    constexpr size_t kMaxTableBytes = size_t{256} << 20;
    const size_t n = static_cast<size_t>(n_);
    if (n * n * sizeof(Time) > kMaxTableBytes) return {};
    std::vector<DeviceId> devices;
    for (int r = 0; r < n_; ++r) devices.push_back(dev(r));
    std::vector<Time> table(n * n);
    for (size_t b = 0; b < n; ++b) {
      const std::vector<Time> to_b = router_.path_latencies_to(devices[b], devices);
      for (size_t a = 0; a < n; ++a) table[a * n + b] = to_b[a];
    }
    return table;
  }
  Time step_latency_over(int a, int b, Time wire) const {
    Time lat = comm_.node_of(a) == comm_.node_of(b) ? opt_.step_latency_intra : opt_.step_latency_inter;
    return lat > wire ? lat - wire : Time::zero();
  }
  // A transfer; the first tasks of the collective also carry its base latency.
  // `weight`: the equal flows (connections) the transfer stands for.
  TaskId send(int a, int b, double payload, Time wait, const std::vector<TaskId>& deps, int channel, int phase,
              uint8_t weight = 1) {
    return send_device(dev(a), dev(b), wire(payload).value(), wait, deps, channel, phase, weight);
  }
  TaskId send_device(DeviceId a, DeviceId b, double wire_bytes, Time wait, const std::vector<TaskId>& deps, int channel,
                     int phase, uint8_t weight = 1) {
    if (deps.empty()) wait = wait + opt_.base_latency;
    return graph_.add_transfer(a, b, Bytes(wire_bytes), wait, deps, static_cast<uint16_t>(channel),
                               static_cast<uint16_t>(phase), weight);
  }
  bool pipelined(size_t step_transfers) const {
    switch (opt_.granularity) {
      case LoweringOptions::Granularity::kSteps: return false;
      case LoweringOptions::Granularity::kPipelined: return true;
      case LoweringOptions::Granularity::kAuto: return step_transfers > opt_.max_step_transfers;
    }
    return false;
  }
  int chunks_for(double bytes_per_channel, size_t transfers_per_chunk) const {
    double k = std::ceil(bytes_per_channel / std::max(1.0, opt_.pipeline_chunk.value()));
    k = std::clamp(k, 1.0, static_cast<double>(opt_.max_pipeline_chunks));
    // Keep the graph within the step budget: fewer, larger chunks on huge communicators.
    double budget = static_cast<double>(opt_.max_step_transfers) / static_cast<double>(std::max<size_t>(1, transfers_per_chunk));
    return static_cast<int>(std::max(1.0, std::min(k, std::floor(budget))));
  }

  // `steps` ring steps over `order` on one channel, every member sending `chunk` payload bytes
  // to its successor per step. entry[rank] gates each member's first send. Returns, per rank, the
  // tasks after which the member holds its result (its last send and last receive).
  RankTasks ring_steps(const std::vector<int>& order, int steps, double chunk, int channel, int phase,
                       const RankTasks& entry) {
    const size_t m = order.size();
    RankTasks exit(static_cast<size_t>(n_));
    if (m < 2 || steps < 1) {
      for (int r : order) exit[static_cast<size_t>(r)] = entry[static_cast<size_t>(r)];
      return exit;
    }
    std::vector<TaskId> last(m);
    if (pipelined(m * static_cast<size_t>(steps) * static_cast<size_t>(channels_))) {
      // The last chunk to cross edge i came over the `steps` hops before it, each paying its
      // step latency and wire latency; the flow pays its own wire latency, so it waits the rest.
      std::vector<Time> hop(m), alpha(m);
      Time loop = Time::zero();
      for (size_t i = 0; i < m; ++i) {
        int a = order[i], b = order[(i + 1) % m];
        Time per_step = step_latency(a, b);
        alpha[i] = wire_latency(a, b);
        hop[i] = per_step + alpha[i];
        loop = loop + hop[i];
      }
      const int full = steps / static_cast<int>(m), rest = steps % static_cast<int>(m);
      for (size_t i = 0; i < m; ++i) {
        Time journey = loop * full;
        for (int j = 0; j < rest; ++j) journey = journey + hop[(i + m - static_cast<size_t>(j) % m) % m];
        int a = order[i], b = order[(i + 1) % m];
        last[i] = send(a, b, chunk * steps, journey - alpha[i], entry[static_cast<size_t>(a)], channel, phase);
      }
    } else {
      // A step waits only for the data it forwards: NCCL keeps several steps of a connection in
      // flight (NCCL_STEPS slots), so latency is paid along the data's way round the ring, not
      // once per step on every edge.
      std::vector<TaskId> prev(m);
      for (int s = 0; s < steps; ++s) {
        std::vector<TaskId> cur(m);
        for (size_t i = 0; i < m; ++i) {
          int a = order[i], b = order[(i + 1) % m];
          std::vector<TaskId> deps;
          if (s == 0) {
            deps = entry[static_cast<size_t>(a)];
          } else {
            deps = {prev[(i + m - 1) % m]};
          }
          cur[i] = send(a, b, chunk, step_latency(a, b), deps, channel, phase);
        }
        prev = std::move(cur);
      }
      last = prev;
    }
    for (size_t i = 0; i < m; ++i) exit[static_cast<size_t>(order[i])] = {last[i], last[(i + m - 1) % m]};
    return exit;
  }

  // A pipelined chain from order[0] to order.back() in k chunks (broadcast; reversed: reduce).
  // NCCL moves a chain in chunks of its step size (`pipeline_chunk`); when that needs more
  // chunks than the graph may hold, the chain is played in its steady state instead, as
  // pipelined rings are: one transfer per hop with all the bytes, hop h waiting for the first
  // chunk's journey down the hops before it (each its chunk time at the hop's idle rate plus
  // its latency). Exact on an idle chain; a 64-GPU broadcast no longer pays a 16-chunk fill.
  using HopRates = std::map<std::pair<int, int>, double>;  // (from rank, to rank) → B/s

  // Every hop's rate when all the chains run alone at once: each link's bandwidth shared
  // evenly by the hops that cross it, the slowest link of the hop's path.
  HopRates idle_hop_rates(const std::vector<std::vector<int>>& orders) const {
    std::map<uint32_t, int> crossing;  // by link
    for (const auto& order : orders) {
      for (size_t h = 0; h + 1 < order.size(); ++h) {
        for (LinkId l : router_.route(dev(order[h]), dev(order[h + 1]))) ++crossing[l.value];
      }
    }
    HopRates rates;
    for (const auto& order : orders) {
      for (size_t h = 0; h + 1 < order.size(); ++h) {
        double rate = INFINITY;
        for (LinkId l : router_.route(dev(order[h]), dev(order[h + 1]))) {
          rate = std::min(rate, comm_.topology().link(l).bandwidth.value() / crossing[l.value]);
        }
        rates[{order[h], order[h + 1]}] = rate;
      }
    }
    return rates;
  }

  void chain(const std::vector<int>& order, double bytes, int channel, const HopRates& rates) {
    const size_t m = order.size();
    if (m < 2) return;
    int k = chunks_for(bytes, (m - 1) * static_cast<size_t>(channels_));
    if (pipelined((m - 1) * static_cast<size_t>(k) * static_cast<size_t>(channels_))) k = 1;
    const double nccl_chunks = std::ceil(bytes / std::max(1.0, opt_.pipeline_chunk.value()));
    if (nccl_chunks > k && opt_.granularity != LoweringOptions::Granularity::kSteps) {
      chain_steady_state(order, bytes, channel, nccl_chunks, rates);
      return;
    }
    double chunk = bytes / k;
    std::vector<TaskId> prev_hop(static_cast<size_t>(k));
    for (size_t h = 0; h + 1 < m; ++h) {
      int a = order[h], b = order[h + 1];
      std::vector<TaskId> cur(static_cast<size_t>(k));
      for (int j = 0; j < k; ++j) {
        std::vector<TaskId> deps;
        if (h > 0) deps.push_back(prev_hop[static_cast<size_t>(j)]);
        if (j > 0) deps.push_back(cur[static_cast<size_t>(j - 1)]);
        // Only the first chunk pays the step's latency; the rest follow it down the pipeline.
        cur[static_cast<size_t>(j)] = send(a, b, chunk, j == 0 ? step_latency(a, b) : Time::zero(), deps, channel, 0);
      }
      prev_hop = std::move(cur);
    }
  }

  void chain_steady_state(const std::vector<int>& order, double bytes, int channel, double chunks,
                          const HopRates& rates) {
    const double chunk_wire = wire(bytes / chunks).value();
    Time journey = Time::zero();  // when the first chunk reaches order[h]
    for (size_t h = 0; h + 1 < order.size(); ++h) {
      const int a = order[h], b = order[h + 1];
      const Time alpha = wire_latency(a, b);
      send(a, b, bytes, journey + step_latency(a, b), {}, channel, 0);
      const double rate = rates.at({a, b});
      journey = journey + step_latency(a, b) + alpha + Time::from_seconds(rate > 0 ? chunk_wire / rate : 0.0);
    }
  }

  void ring(const RankTasks& entry, double s) {
    const double n = n_;
    switch (spec_.op) {
      case CollectiveOp::kAllReduce:
        for (int c = 0; c < channels_; ++c) ring_steps(ring_order(comm_, c), 2 * (n_ - 1), s / (n * channels_), c, 0, entry);
        break;
      case CollectiveOp::kAllGather:
      case CollectiveOp::kReduceScatter:
        for (int c = 0; c < channels_; ++c) ring_steps(ring_order(comm_, c), n_ - 1, s / (n * channels_), c, 0, entry);
        break;
      case CollectiveOp::kBroadcast:
      case CollectiveOp::kReduce:
      {
        std::vector<std::vector<int>> orders;
        for (int c = 0; c < channels_; ++c) {
          std::vector<int> order = ring_order(comm_, c);
          auto at = std::find(order.begin(), order.end(), spec_.root);
          std::rotate(order.begin(), at, order.end());  // the root first
          if (spec_.op == CollectiveOp::kReduce) std::rotate(order.begin(), order.begin() + 1, order.end());  // root last
          orders.push_back(std::move(order));
        }
        const HopRates rates = idle_hop_rates(orders);
        for (int c = 0; c < channels_; ++c) chain(orders[static_cast<size_t>(c)], s / channels_, c, rates);
        break;
      }
      case CollectiveOp::kSendRecv:
        for (int c = 0; c < channels_; ++c) {
          for (int r = 0; r < n_; ++r) {
            int peer = (r + 1) % n_;
            if (peer != r) send(r, peer, s / channels_, step_latency(r, peer), {}, c, 0);
          }
        }
        break;
      default: throw std::logic_error("ring lowering reached for an unsupported operation");
    }
  }

  // NCCL's double binary tree: a binary tree over nodes (the second tree shifted for an odd
  // node count or mirrored for an even one, so that leaves of one are inner members of the
  // other), a chain inside each node; each tree carries half the data, reduced up and
  // broadcast down in pipelined chunks.
  void tree(double s) {
    const int nodes = comm_.node_count();
    for (int c = 0; c < channels_; ++c) {
      for (int t = 0; t < 2; ++t) {
        // parent[r] over ranks: chain inside the node, heads joined by the node tree.
        std::vector<int> parent(static_cast<size_t>(n_), -1);
        std::vector<int> head(static_cast<size_t>(nodes));
        for (int k = 0; k < nodes; ++k) {
          const auto& local = comm_.nodes()[static_cast<size_t>(k)];
          const size_t m = local.size();
          size_t start = (static_cast<size_t>(c) + static_cast<size_t>(t) * m / 2) % m;
          head[static_cast<size_t>(k)] = local[start];
          for (size_t j = 1; j < m; ++j) parent[static_cast<size_t>(local[(start + j) % m])] = local[(start + j - 1) % m];
        }
        const std::vector<int> parent_node = dtree_parent_nodes(nodes, t);
        for (int k = 0; k < nodes; ++k) {
          const int pk = parent_node[static_cast<size_t>(k)];
          if (pk >= 0) parent[static_cast<size_t>(head[static_cast<size_t>(k)])] = head[static_cast<size_t>(pk)];
        }
        tree_pipeline(parent, s / (2.0 * channels_), c, t);
      }
    }
  }

  void tree_pipeline(const std::vector<int>& parent, double bytes, int channel, int which) {
    std::vector<std::vector<int>> children(static_cast<size_t>(n_));
    int root = -1;
    for (int r = 0; r < n_; ++r) {
      if (parent[static_cast<size_t>(r)] < 0) {
        root = r;
      } else {
        children[static_cast<size_t>(parent[static_cast<size_t>(r)])].push_back(r);
      }
    }
    // Members from the leaves up: each after all its children.
    std::vector<int> up_order;
    std::vector<int> stack = {root};
    while (!stack.empty()) {
      int r = stack.back();
      stack.pop_back();
      up_order.push_back(r);
      for (int ch : children[static_cast<size_t>(r)]) stack.push_back(ch);
    }
    std::reverse(up_order.begin(), up_order.end());
    const int k = chunks_for(bytes, 2 * static_cast<size_t>(n_ - 1) * 2 * static_cast<size_t>(channels_));
    const double chunk = bytes / k;
    std::vector<TaskId> up_prev(static_cast<size_t>(n_)), down_prev(static_cast<size_t>(n_));
    for (int j = 0; j < k; ++j) {
      std::vector<TaskId> up(static_cast<size_t>(n_), UINT32_MAX);
      for (int r : up_order) {
        if (r == root) continue;
        std::vector<TaskId> deps;
        for (int ch : children[static_cast<size_t>(r)]) deps.push_back(up[static_cast<size_t>(ch)]);
        if (j > 0) deps.push_back(up_prev[static_cast<size_t>(r)]);
        int p = parent[static_cast<size_t>(r)];
        up[static_cast<size_t>(r)] = send(r, p, chunk, j == 0 ? step_latency(r, p) : Time::zero(), deps, channel, which);
      }
      std::vector<TaskId> down(static_cast<size_t>(n_), UINT32_MAX);
      for (auto it = up_order.rbegin(); it != up_order.rend(); ++it) {
        int r = *it;
        if (r == root) continue;
        int p = parent[static_cast<size_t>(r)];
        std::vector<TaskId> deps;
        if (p == root) {
          for (int ch : children[static_cast<size_t>(root)]) deps.push_back(up[static_cast<size_t>(ch)]);
        } else {
          deps.push_back(down[static_cast<size_t>(p)]);
        }
        if (j > 0) deps.push_back(down_prev[static_cast<size_t>(r)]);
        down[static_cast<size_t>(r)] = send(p, r, chunk, j == 0 ? step_latency(p, r) : Time::zero(), deps, channel, 2 + which);
      }
      up_prev = std::move(up);
      down_prev = std::move(down);
    }
  }

  // Rabenseifner: reduce-scatter by recursive halving, all-gather by recursive doubling; a
  // non-power-of-two count first folds the extra ranks into their neighbours (MPICH).
  void rhd(double s) {
    for (int c = 0; c < channels_; ++c) {
      const double bytes = s / channels_;
      int p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n_)));
      int extra = n_ - p2;
      std::vector<std::vector<TaskId>> last(static_cast<size_t>(n_));
      std::vector<int> members;  // ranks taking part in the power-of-two exchange
      for (int i = 0; i < extra; ++i) {
        TaskId t = send(2 * i + 1, 2 * i, bytes, step_latency(2 * i + 1, 2 * i), {}, c, 0);
        last[static_cast<size_t>(2 * i)] = {t};
        members.push_back(2 * i);
      }
      for (int r = 2 * extra; r < n_; ++r) members.push_back(r);
      auto exchange = [&](int distance, double amount, int phase) {
        std::vector<std::vector<TaskId>> next(static_cast<size_t>(n_));
        for (int i = 0; i < p2; ++i) {
          int a = members[static_cast<size_t>(i)];
          int b = members[static_cast<size_t>(i ^ distance)];
          std::vector<TaskId> deps = last[static_cast<size_t>(a)];
          deps.insert(deps.end(), last[static_cast<size_t>(b)].begin(), last[static_cast<size_t>(b)].end());
          TaskId t = send(a, b, amount, step_latency(a, b), deps, c, phase);
          next[static_cast<size_t>(a)].push_back(t);
          next[static_cast<size_t>(b)].push_back(t);
        }
        for (int i = 0; i < p2; ++i) last[static_cast<size_t>(members[static_cast<size_t>(i)])] = next[static_cast<size_t>(members[static_cast<size_t>(i)])];
      };
      const bool rs = spec_.op == CollectiveOp::kReduceScatter || spec_.op == CollectiveOp::kAllReduce;
      const bool ag = spec_.op == CollectiveOp::kAllGather || spec_.op == CollectiveOp::kAllReduce;
      if (rs) {
        double amount = bytes;
        for (int d = p2 / 2; d >= 1; d /= 2) {
          amount /= 2;
          exchange(d, amount, 0);
        }
      }
      if (ag) {
        double amount = bytes / p2;
        for (int d = 1; d < p2; d *= 2) {
          exchange(d, amount, 1);
          amount *= 2;
        }
      }
      for (int i = 0; i < extra; ++i) {
        send(2 * i, 2 * i + 1, bytes, step_latency(2 * i, 2 * i + 1), last[static_cast<size_t>(2 * i)], c, 1);
      }
    }
  }

  // Recursive doubling: lg p exchanges of the whole vector (all-reduce) or of the data
  // gathered so far (all-gather). Power-of-two counts only.
  void recursive_doubling(double s) {
    for (int c = 0; c < channels_; ++c) {
      const double bytes = s / channels_;
      std::vector<std::vector<TaskId>> last(static_cast<size_t>(n_));
      double amount = spec_.op == CollectiveOp::kAllReduce ? bytes : bytes / n_;
      for (int d = 1; d < n_; d *= 2) {
        std::vector<std::vector<TaskId>> next(static_cast<size_t>(n_));
        for (int a = 0; a < n_; ++a) {
          int b = a ^ d;
          std::vector<TaskId> deps = last[static_cast<size_t>(a)];
          deps.insert(deps.end(), last[static_cast<size_t>(b)].begin(), last[static_cast<size_t>(b)].end());
          TaskId t = send(a, b, amount, step_latency(a, b), deps, c, 0);
          next[static_cast<size_t>(a)].push_back(t);
          next[static_cast<size_t>(b)].push_back(t);
        }
        last = std::move(next);
        if (spec_.op == CollectiveOp::kAllGather) amount *= 2;
      }
    }
  }

  double pair_bytes(int a, int b) const {
    if (!spec_.matrix.empty()) return spec_.matrix[static_cast<size_t>(a)][static_cast<size_t>(b)];
    return spec_.size.value() / n_;  // nccl-tests: each rank sends size/n to every rank
  }

  // All-to-all: direct posts every pair at once (NCCL's grouped send/recv); pairwise runs n−1
  // shifted steps, each rank exchanging with one peer per step (MPI's pairwise exchange).
  void all_to_all(bool direct) {
    if (direct && comm_.node_count() > 1) {
      direct_all_to_all_over_rails();
      return;
    }
    const std::vector<Time> wires = all_pair_wire_latencies();
    std::vector<std::vector<TaskId>> last(static_cast<size_t>(n_));
    std::vector<std::vector<TaskId>> next(direct ? 0 : static_cast<size_t>(n_));
    const std::vector<TaskId> none;
    for (int step = 1; step < n_; ++step) {
      for (auto& tasks : next) tasks.clear();
      for (int a = 0; a < n_; ++a) {
        int b = (a + step) % n_;
        double bytes = pair_bytes(a, b);
        if (bytes <= 0) continue;
        const Time latency = wires.empty() ? step_latency_once(a, b)
                                           : step_latency_over(a, b, wires[static_cast<size_t>(a * n_ + b)]);
        const std::vector<TaskId>& deps = direct ? none : last[static_cast<size_t>(a)];  // a's previous send and receive
        for (int c = 0; c < channels_; ++c) {
          TaskId t = send(a, b, bytes / channels_, latency, deps, c, 0);
          if (direct) continue;
          next[static_cast<size_t>(a)].push_back(t);
          next[static_cast<size_t>(b)].push_back(t);
        }
      }
      if (!direct) std::swap(last, next);
    }
  }

  // NCCL's direct all-to-all across nodes with PXN (on by default since NCCL 2.12, with
  // NCCL_P2P_PXN_LEVEL 2: aggregate as much as possible): what `a` sends to a GPU of another node
  // goes first over NVLink to the member of a's node on the receiver's rail (the same local
  // index), which sends it over its own NIC, so that the network carries only same-rail traffic.
  // Where a's node has no member on that rail, or reaches it other than by NVLink alone (NCCL
  // relays over NVLink only), a sends it itself. A relay's NVLink leg and its
  // network leg run at once (NCCL pipelines them chunk by chunk), and every leg between the same
  // two GPUs is one transfer with the bytes of all the pairs that use it: the transfers go from
  // n·(n − 1) to about n·(ranks per node + nodes − 2). NCCL keeps a connection per pair through
  // the relay, so a leg stands for its pairs' flows (weight, at most 255) in the sharing of its
  // links with other traffic.
  void direct_all_to_all_over_rails() {
    const std::vector<std::vector<int>> relay = rail_relays();
    struct Leg {
      double bytes = 0;
      int pairs = 0;
    };
    std::map<std::pair<int, int>, Leg> legs;  // by (from, to); ordered: deterministic
    auto add = [&](int from, int to, double bytes) {
      Leg& leg = legs[{from, to}];
      leg.bytes += bytes;
      ++leg.pairs;
    };
    for (int a = 0; a < n_; ++a) {
      for (int b = 0; b < n_; ++b) {
        const double bytes = a == b ? 0.0 : pair_bytes(a, b);
        if (bytes <= 0) continue;
        const int via = comm_.node_of(a) == comm_.node_of(b) ? a : relay[static_cast<size_t>(a)][rail_of(b)];
        if (via != a) add(a, via, bytes);
        add(via, b, bytes);
      }
    }
    const std::vector<TaskId> none;
    for (const auto& [pair, leg] : legs) {
      const Time latency = step_latency_once(pair.first, pair.second);
      const auto weight = static_cast<uint8_t>(std::min(leg.pairs, 255));
      for (int c = 0; c < channels_; ++c) send(pair.first, pair.second, leg.bytes / channels_, latency, none, c, 0, weight);
    }
  }
  size_t rail_of(int rank) const { return static_cast<size_t>(std::max(0, comm_.topology().device(dev(rank)).local_index)); }
  // relay[a][rail]: the rank that sends a's bytes for another node's rank on `rail` over its NIC —
  // a's node peer on that rail where a reaches it by NVLink alone, else a itself.
  std::vector<std::vector<int>> rail_relays() const {
    size_t rails = 0;
    for (int r = 0; r < n_; ++r) rails = std::max(rails, rail_of(r) + 1);
    std::vector<std::vector<int>> on_rail(static_cast<size_t>(comm_.node_count()), std::vector<int>(rails, -1));
    for (int r = 0; r < n_; ++r) on_rail[static_cast<size_t>(comm_.node_of(r))][rail_of(r)] = r;
    std::vector<std::vector<int>> relay(static_cast<size_t>(n_), std::vector<int>(rails));
    for (int a = 0; a < n_; ++a) {
      for (size_t i = 0; i < rails; ++i) {
        const int peer = on_rail[static_cast<size_t>(comm_.node_of(a))][i];
        relay[static_cast<size_t>(a)][i] = peer >= 0 && (peer == a || by_nvlink_alone(a, peer)) ? peer : a;
      }
    }
    return relay;
  }
  bool by_nvlink_alone(int a, int b) const {
    const std::vector<LinkId> route = router_.route(dev(a), dev(b));
    return std::all_of(route.begin(), route.end(),
                       [&](LinkId l) { return comm_.topology().link(l).link_class == LinkClass::kNVLink; });
  }

  // Intra-node ring reduce-scatter, ring all-reduce across nodes among ranks of the same local
  // index on 1/ppn of the data, intra-node ring all-gather.
  void hierarchical(double s) {
    const int ppn = comm_.ranks_per_node();
    const int nodes = comm_.node_count();
    RankTasks entry(static_cast<size_t>(n_));
    RankTasks after_rs(static_cast<size_t>(n_)), after_ar(static_cast<size_t>(n_));
    auto merge = [&](RankTasks& into, const RankTasks& from) {
      for (size_t r = 0; r < into.size(); ++r) into[r].insert(into[r].end(), from[r].begin(), from[r].end());
    };
    for (int c = 0; c < channels_; ++c) {
      for (const auto& local : comm_.nodes()) {
        std::vector<int> order = local;
        std::rotate(order.begin(), order.begin() + c % ppn, order.end());
        merge(after_rs, ring_steps(order, ppn - 1, s / (ppn * channels_), c, 0, entry));
      }
    }
    for (int c = 0; c < channels_; ++c) {
      for (int g = 0; g < ppn; ++g) {
        std::vector<int> order;
        for (int k = 0; k < nodes; ++k) order.push_back(comm_.nodes()[static_cast<size_t>(k)][static_cast<size_t>(g)]);
        merge(after_ar, ring_steps(order, 2 * (nodes - 1), s / (static_cast<double>(ppn) * nodes * channels_), c, 1,
                                   after_rs));
      }
    }
    for (int r = 0; r < n_; ++r) {
      if (after_ar[static_cast<size_t>(r)].empty()) after_ar[static_cast<size_t>(r)] = after_rs[static_cast<size_t>(r)];
    }
    for (int c = 0; c < channels_; ++c) {
      for (const auto& local : comm_.nodes()) {
        std::vector<int> order = local;
        std::rotate(order.begin(), order.begin() + c % ppn, order.end());
        ring_steps(order, ppn - 1, s / (ppn * channels_), c, 2, after_ar);
      }
    }
  }

  // The switch that reduces for `a` and `b`: on the route between them, the reduction-capable
  // switch farthest from both ends (the top of the path).
  std::optional<DeviceId> reducing_switch(DeviceId a, DeviceId b, bool nvls) const {
    std::vector<LinkId> path = router_.route(a, b);
    std::optional<DeviceId> best;
    size_t best_depth = 0;
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      DeviceId d = comm_.topology().link(path[i]).to;
      const Device& dev_info = comm_.topology().device(d);
      bool capable = nvls ? dev_info.nvls : dev_info.sharp;
      size_t depth = std::min(i + 1, path.size() - 1 - i);
      if (capable && depth >= best_depth) {
        best = d;
        best_depth = depth;
      }
    }
    return best;
  }

  // Every member sends its data into the switch, which reduces it and multicasts the result
  // back, in pipelined chunks. Per member S(1 + 1/m) goes up and comes down: the reduction of
  // the member's own 1/m share (multimem.ld_reduce) and its multicast store (multimem.st).
  RankTasks switch_all_reduce(const std::vector<int>& members, DeviceId sw, double s, int phase, const RankTasks& entry) {
    RankTasks exit(static_cast<size_t>(n_));
    const size_t m = members.size();
    const double per_member = s * (1.0 + 1.0 / static_cast<double>(m)) / opt_.switch_reduction_efficiency /
                              opt_.wire_efficiency;
    const int k = chunks_for(s, 2 * m);
    std::vector<TaskId> up_prev(m), down_prev(m);
    for (int j = 0; j < k; ++j) {
      std::vector<TaskId> ups(m);
      for (size_t i = 0; i < m; ++i) {
        int r = members[i];
        std::vector<TaskId> deps = j == 0 ? entry[static_cast<size_t>(r)] : std::vector<TaskId>{up_prev[i]};
        ups[i] = send_device(dev(r), sw, per_member / k, j == 0 ? opt_.step_latency_intra : Time::zero(), deps, 0, phase);
      }
      std::vector<TaskId> downs(m);
      for (size_t i = 0; i < m; ++i) {
        std::vector<TaskId> deps = ups;
        if (j > 0) deps.push_back(down_prev[i]);
        downs[i] = send_device(sw, dev(members[i]), per_member / k, Time::zero(), deps, 0, phase + 1);
      }
      up_prev = std::move(ups);
      down_prev = std::move(downs);
    }
    for (size_t i = 0; i < m; ++i) exit[static_cast<size_t>(members[i])] = {up_prev[i], down_prev[i]};
    return exit;
  }

  void nvls(double s) {
    auto sw = reducing_switch(dev(0), dev(1), true);
    if (spec_.op != CollectiveOp::kAllReduce) {
      nvls_gather_scatter(*sw, s);
      return;
    }
    std::vector<int> members(static_cast<size_t>(n_));
    for (int r = 0; r < n_; ++r) members[static_cast<size_t>(r)] = r;
    switch_all_reduce(members, *sw, s, 0, RankTasks(static_cast<size_t>(n_)));
  }

  // NVLS all-gather and reduce-scatter inside a node (NCCL 2.23+): the all-gather multicasts
  // each GPU's share through the switch (S/n up, the whole S down to every GPU, multimem.st);
  // the reduce-scatter has the switch reduce each GPU's share from every GPU's buffer (the whole
  // S up from each, its S/n down, multimem.ld_reduce). Pipelined in chunks.
  void nvls_gather_scatter(DeviceId sw, double s) {
    const bool gather = spec_.op == CollectiveOp::kAllGather;
    const double in_switch = opt_.switch_reduction_efficiency * opt_.wire_efficiency;
    const double up = (gather ? s / n_ : s) / in_switch, down = (gather ? s : s / n_) / in_switch;
    const int k = chunks_for(s / n_, 2 * static_cast<size_t>(n_));
    std::vector<TaskId> up_prev(static_cast<size_t>(n_)), down_prev(static_cast<size_t>(n_));
    for (int j = 0; j < k; ++j) {
      std::vector<TaskId> ups;
      for (int r = 0; r < n_; ++r) {
        std::vector<TaskId> deps;
        if (j > 0) deps.push_back(up_prev[static_cast<size_t>(r)]);
        ups.push_back(up_prev[static_cast<size_t>(r)] = send_device(dev(r), sw, up / k,
                                                                     j == 0 ? opt_.step_latency_intra : Time::zero(), deps, 0, 0));
      }
      for (int r = 0; r < n_; ++r) {
        std::vector<TaskId> deps = ups;
        if (j > 0) deps.push_back(down_prev[static_cast<size_t>(r)]);
        down_prev[static_cast<size_t>(r)] = send_device(sw, dev(r), down / k, Time::zero(), deps, 0, 1);
      }
    }
  }

  // NVLS-Tree (NCCL's multi-node NVLS): inside each node the NVSwitch reduces each local
  // index's 1/ppn share into that index's GPU (multimem.ld_reduce: every GPU's whole buffer
  // goes up, each GPU gets its share down); the GPUs of one local index, one per node,
  // all-reduce their share over the double binary tree across nodes (each tree half of it);
  // then each multicasts the result through its switch (multimem.st: its share up, every GPU
  // of the node gets it down). All three stages pipelined chunk by chunk.
  void nvls_tree(double s) {
    const int ppn = comm_.ranks_per_node();
    const int nodes = comm_.node_count();
    const auto& local = comm_.nodes();
    std::vector<DeviceId> sw;
    for (const auto& members : local) sw.push_back(*reducing_switch(dev(members[0]), dev(members[1]), true));
    const std::array<std::vector<int>, 2> parent{dtree_parent_nodes(nodes, 0), dtree_parent_nodes(nodes, 1)};
    const double in_switch = opt_.switch_reduction_efficiency * opt_.wire_efficiency;
    const int k = chunks_for(s / ppn, 8 * static_cast<size_t>(n_));
    const double chunk = s / k, share = chunk / ppn;
    auto member = [&](int node, int g) { return local[static_cast<size_t>(node)][static_cast<size_t>(g)]; };
    std::vector<TaskId> up_prev(static_cast<size_t>(n_)), down_prev(static_cast<size_t>(n_));
    std::array<std::vector<TaskId>, 2> tree_up_prev, tree_down_prev;
    for (auto& v : tree_up_prev) v.assign(static_cast<size_t>(n_), UINT32_MAX);
    for (auto& v : tree_down_prev) v.assign(static_cast<size_t>(n_), UINT32_MAX);
    for (int j = 0; j < k; ++j) {
      // Reduce-scatter through each node's switch: `reduced[r]` holds r's share of the node's sum.
      std::vector<TaskId> reduced(static_cast<size_t>(n_));
      for (int x = 0; x < nodes; ++x) {
        std::vector<TaskId> ups;
        for (int r : local[static_cast<size_t>(x)]) {
          std::vector<TaskId> deps;
          if (j > 0) deps.push_back(up_prev[static_cast<size_t>(r)]);
          ups.push_back(send_device(dev(r), sw[static_cast<size_t>(x)], chunk / in_switch,
                                    j == 0 ? opt_.step_latency_intra : Time::zero(), deps, 0, 0));
          up_prev[static_cast<size_t>(r)] = ups.back();
        }
        for (int r : local[static_cast<size_t>(x)]) {
          reduced[static_cast<size_t>(r)] = send_device(sw[static_cast<size_t>(x)], dev(r), share / in_switch, Time::zero(), ups, 0, 1);
        }
      }
      // The tree across nodes, per local index and tree: `ready[r]` when r holds the total.
      std::vector<std::vector<TaskId>> ready(static_cast<size_t>(n_));
      for (int g = 0; g < ppn; ++g) {
        for (int t = 0; t < 2; ++t) tree_all_reduce(parent[static_cast<size_t>(t)], g, t, j, share / 2, member, reduced,
                                                     tree_up_prev[static_cast<size_t>(t)],
                                                     tree_down_prev[static_cast<size_t>(t)], ready);
      }
      // Multicast back through each node's switch.
      for (int x = 0; x < nodes; ++x) {
        std::vector<TaskId> ups;
        for (int r : local[static_cast<size_t>(x)]) {
          ups.push_back(send_device(dev(r), sw[static_cast<size_t>(x)], share / in_switch, Time::zero(),
                                    ready[static_cast<size_t>(r)], 0, 6));
        }
        for (int r : local[static_cast<size_t>(x)]) {
          std::vector<TaskId> deps = ups;
          if (j > 0) deps.push_back(down_prev[static_cast<size_t>(r)]);
          down_prev[static_cast<size_t>(r)] = send_device(sw[static_cast<size_t>(x)], dev(r), chunk / in_switch, Time::zero(), deps, 0, 7);
        }
      }
    }
  }

  // One chunk of one tree of a double binary tree over nodes, among the ranks member(node, g):
  // each node's rank sends its children's and its own partial sum up once `reduced` has it,
  // the root's total comes back down; `ready[rank]` gets what it waits for to hold the total.
  // up_prev/down_prev chain a rank's chunks in order.
  template <typename Member>
  void tree_all_reduce(const std::vector<int>& parent, int g, int which, int j, double bytes, const Member& member,
                       const std::vector<TaskId>& reduced, std::vector<TaskId>& up_prev, std::vector<TaskId>& down_prev,
                       std::vector<std::vector<TaskId>>& ready) {
    const int nodes = static_cast<int>(parent.size());
    std::vector<std::vector<int>> children(static_cast<size_t>(nodes));
    int root = 0;
    for (int x = 0; x < nodes; ++x) {
      if (parent[static_cast<size_t>(x)] < 0) {
        root = x;
      } else {
        children[static_cast<size_t>(parent[static_cast<size_t>(x)])].push_back(x);
      }
    }
    std::vector<int> order = {root};  // parents before children
    for (size_t i = 0; i < order.size(); ++i) {
      for (int c : children[static_cast<size_t>(order[i])]) order.push_back(c);
    }
    std::vector<TaskId> up(static_cast<size_t>(nodes), UINT32_MAX);
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const int x = *it;
      if (x == root) continue;
      const int r = member(x, g), to = member(parent[static_cast<size_t>(x)], g);
      std::vector<TaskId> deps{reduced[static_cast<size_t>(r)]};
      for (int c : children[static_cast<size_t>(x)]) deps.push_back(up[static_cast<size_t>(c)]);
      if (j > 0) deps.push_back(up_prev[static_cast<size_t>(r)]);
      up[static_cast<size_t>(x)] = up_prev[static_cast<size_t>(r)] =
          send(r, to, bytes, j == 0 ? step_latency(r, to) : Time::zero(), deps, 0, 2 + which);
    }
    const int top = member(root, g);
    std::vector<TaskId> total{reduced[static_cast<size_t>(top)]};
    for (int c : children[static_cast<size_t>(root)]) total.push_back(up[static_cast<size_t>(c)]);
    auto& top_ready = ready[static_cast<size_t>(top)];
    top_ready.insert(top_ready.end(), total.begin(), total.end());
    std::vector<TaskId> down(static_cast<size_t>(nodes), UINT32_MAX);
    for (const int x : order) {
      if (x == root) continue;
      const int px = parent[static_cast<size_t>(x)];
      const int r = member(x, g), from = member(px, g);
      std::vector<TaskId> deps = px == root ? total : std::vector<TaskId>{down[static_cast<size_t>(px)]};
      if (j > 0) deps.push_back(down_prev[static_cast<size_t>(r)]);
      down[static_cast<size_t>(x)] = down_prev[static_cast<size_t>(r)] =
          send(from, r, bytes, j == 0 ? step_latency(from, r) : Time::zero(), deps, 0, 4 + which);
      ready[static_cast<size_t>(r)].push_back(down[static_cast<size_t>(x)]);
    }
  }

  // PAT (NCCL 2.23+, one GPU per node) as the Bruck exchange it aggregates: all-gather in
  // ⌈log2 n⌉ rounds, in round d every rank passing the min(2^d, n − 2^d) blocks it holds to the
  // rank 2^d below it (and getting as many from the rank 2^d above); reduce-scatter the same
  // rounds in reverse, passing partial sums. Each rank sends (n − 1)/n of the buffer in all,
  // as a ring, in log rounds instead of n − 1 steps; pipelined in chunks, the first paying each
  // round's latency.
  void pat(double s) {
    const int rounds = std::bit_width(static_cast<unsigned>(n_ - 1));
    const bool gather = spec_.op == CollectiveOp::kAllGather;
    const int k = chunks_for(s / n_, static_cast<size_t>(n_) * static_cast<size_t>(rounds));
    const double block = s / n_ / k;
    std::vector<TaskId> prev_chunk(static_cast<size_t>(n_ * rounds));  // per (round, rank)
    for (int j = 0; j < k; ++j) {
      std::vector<TaskId> sent(static_cast<size_t>(n_)), got(static_cast<size_t>(n_));
      for (int i = 0; i < rounds; ++i) {
        const int distance = 1 << (gather ? i : rounds - 1 - i);
        const double blocks = std::min(distance, n_ - distance);
        std::vector<TaskId> now_sent(static_cast<size_t>(n_));
        for (int r = 0; r < n_; ++r) {
          const int to = (r - distance + n_) % n_;
          std::vector<TaskId> deps;
          if (i > 0) deps = {sent[static_cast<size_t>(r)], got[static_cast<size_t>(r)]};
          TaskId& before = prev_chunk[static_cast<size_t>(i * n_ + r)];
          if (j > 0) deps.push_back(before);
          now_sent[static_cast<size_t>(r)] = before =
              send(r, to, blocks * block, j == 0 ? step_latency(r, to) : Time::zero(), deps, 0, static_cast<int>(i));
        }
        for (int r = 0; r < n_; ++r) got[static_cast<size_t>((r - distance + n_) % n_)] = now_sent[static_cast<size_t>(r)];
        sent = std::move(now_sent);
      }
    }
  }

  // CollNet Direct (SHARP): reduce-scatter inside each node, the ranks of one local index
  // all-reduce their 1/ppn share through the fabric switch, all-gather inside each node.
  void collnet(double s) {
    const int ppn = comm_.ranks_per_node();
    const int nodes = comm_.node_count();
    RankTasks entry(static_cast<size_t>(n_)), after_rs(static_cast<size_t>(n_)), after_ar(static_cast<size_t>(n_));
    for (const auto& local : comm_.nodes()) {
      auto part = ring_steps(local, ppn - 1, s / ppn, 0, 0, entry);
      for (int r : local) after_rs[static_cast<size_t>(r)] = part[static_cast<size_t>(r)];
    }
    for (int g = 0; g < ppn; ++g) {
      std::vector<int> members;
      for (int k = 0; k < nodes; ++k) members.push_back(comm_.nodes()[static_cast<size_t>(k)][static_cast<size_t>(g)]);
      auto sw = reducing_switch(dev(members.front()), dev(members.back()), false);
      // Through the switch each member sends its share once and gets the sum once.
      auto part = switch_all_reduce(members, *sw, s / ppn * static_cast<double>(members.size()) /
                                                     (static_cast<double>(members.size()) + 1.0),
                                    1, after_rs);
      for (int r : members) after_ar[static_cast<size_t>(r)] = part[static_cast<size_t>(r)];
    }
    for (const auto& local : comm_.nodes()) ring_steps(local, ppn - 1, s / ppn, 0, 3, after_ar);
  }

  // CollNet Chain (SHARP): for each local index g, a chain through the node's GPUs ending at g
  // reduces 1/ppn of the data into g, g all-reduces it through the SHARP switch with the GPUs
  // g of the other nodes (its share up once, the sum down once), and the chain broadcasts it
  // back; chunk by chunk, every stage pipelined.
  void collnet_chain(double s) {
    const int ppn = comm_.ranks_per_node();
    const auto& local = comm_.nodes();
    const int k = chunks_for(s / ppn, static_cast<size_t>(n_) * (2 * static_cast<size_t>(ppn) + 2));
    const double chunk = s / ppn / k;
    const double in_switch = opt_.switch_reduction_efficiency * opt_.wire_efficiency;
    // Per (local index g, node, hop) the previous chunk's task, to keep each connection in order.
    std::map<std::tuple<int, size_t, int>, TaskId> prev;
    auto ordered = [&](std::tuple<int, size_t, int> key, std::vector<TaskId> deps) {
      if (auto it = prev.find(key); it != prev.end()) deps.push_back(it->second);
      return deps;
    };
    for (int j = 0; j < k; ++j) {
      for (int g = 0; g < ppn; ++g) {
        const auto sw = reducing_switch(dev(local.front()[static_cast<size_t>(g)]), dev(local.back()[static_cast<size_t>(g)]), false);
        std::vector<TaskId> ups;
        std::vector<std::vector<int>> chains;
        for (size_t x = 0; x < local.size(); ++x) {
          std::vector<int> order;  // ends at g
          for (int h = 1; h <= ppn; ++h) order.push_back(local[x][static_cast<size_t>((g + h) % ppn)]);
          std::vector<TaskId> last;
          for (int h = 0; h + 1 < ppn; ++h) {
            const int a = order[static_cast<size_t>(h)], b = order[static_cast<size_t>(h) + 1];
            const TaskId t = send(a, b, chunk, j == 0 ? step_latency(a, b) : Time::zero(), ordered({g, x, h}, last), 0, 0);
            prev[{g, x, h}] = t;
            last = {t};
          }
          const int head = order.back();
          const TaskId up = send_device(dev(head), *sw, chunk / in_switch, j == 0 ? opt_.step_latency_inter : Time::zero(),
                                        ordered({g, x, ppn}, last), 0, 1);
          prev[{g, x, ppn}] = up;
          ups.push_back(up);
          chains.push_back(std::move(order));
        }
        for (size_t x = 0; x < local.size(); ++x) {
          const std::vector<int>& order = chains[x];
          const int head = order.back();
          TaskId down = send_device(*sw, dev(head), chunk / in_switch, Time::zero(), ordered({g, x, ppn + 1}, ups), 0, 2);
          prev[{g, x, ppn + 1}] = down;
          for (int h = ppn - 1; h > 0; --h) {  // back down the chain
            const int a = order[static_cast<size_t>(h)], b = order[static_cast<size_t>(h) - 1];
            down = prev[{g, x, ppn + 1 + h}] =
                send(a, b, chunk, j == 0 ? step_latency(a, b) : Time::zero(), ordered({g, x, ppn + 1 + h}, {down}), 0, 3);
          }
        }
      }
    }
  }

  const CollectiveSpec& spec_;
  const Communicator& comm_;
  const Router& router_;
  const LoweringOptions& opt_;
  const int n_;
  const int channels_;
  TransferGraph graph_;
  std::unordered_map<uint64_t, Time> wire_latency_;
};

}  // namespace

namespace {

constexpr const char* kNoNvlsSwitch = "no NVLS-capable NVSwitch joins these GPUs (set \"nvls\": true on the switch)";

// Every node's first two ranks are joined through an NVLS-capable switch.
bool nvls_switch_joins(const Communicator& comm, const Router& router) {
  for (const auto& local : comm.nodes()) {
    if (local.size() < 2) return false;
    bool found = false;
    for (LinkId l : router.route(comm.device(local[0]), comm.device(local[1]))) {
      found = found || comm.topology().device(comm.topology().link(l).to).nvls;
    }
    if (!found) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> unsupported_reason(CollectiveOp op, Algorithm algo, const Communicator& comm,
                                              const Router& router) {
  const int n = comm.size();
  const std::string name(algorithm_name(algo));
  auto only = [&](std::initializer_list<CollectiveOp> ops) -> std::optional<std::string> {
    if (std::find(ops.begin(), ops.end(), op) != ops.end()) return std::nullopt;
    return name + " does not implement " + std::string(op_name(op));
  };
  switch (algo) {
    case Algorithm::kRing:
      return only({CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter,
                   CollectiveOp::kBroadcast, CollectiveOp::kReduce, CollectiveOp::kSendRecv});
    case Algorithm::kTree:
      if (auto r = only({CollectiveOp::kAllReduce})) return r;
      if (!comm.uniform()) return std::string("tree needs the same number of ranks on every node");
      return std::nullopt;
    case Algorithm::kRecursiveHalvingDoubling:
      if (auto r = only({CollectiveOp::kAllReduce, CollectiveOp::kReduceScatter, CollectiveOp::kAllGather})) return r;
      if (op != CollectiveOp::kAllReduce && !is_power_of_two(n)) {
        return name + " " + std::string(op_name(op)) + " needs a power-of-two rank count, not " + std::to_string(n);
      }
      return std::nullopt;
    case Algorithm::kRecursiveDoubling:
      if (auto r = only({CollectiveOp::kAllReduce, CollectiveOp::kAllGather})) return r;
      if (!is_power_of_two(n)) return name + " needs a power-of-two rank count, not " + std::to_string(n);
      return std::nullopt;
    case Algorithm::kPairwise:
    case Algorithm::kDirect: return only({CollectiveOp::kAllToAll});
    case Algorithm::kHierarchical:
      if (auto r = only({CollectiveOp::kAllReduce})) return r;
      if (!comm.uniform()) return std::string("hierarchical needs the same number of ranks on every node");
      return std::nullopt;
    case Algorithm::kNvls: {
      if (auto r = only({CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter})) return r;
      if (comm.node_count() != 1) return std::string("nvls runs inside one node (across nodes: nvls_tree)");
      if (n < 2) return std::string("nvls needs at least 2 ranks");
      if (!nvls_switch_joins(comm, router)) return std::string(kNoNvlsSwitch);
      return std::nullopt;
    }
    case Algorithm::kNvlsTree: {
      if (auto r = only({CollectiveOp::kAllReduce})) return r;
      if (comm.node_count() < 2) return std::string("nvls_tree needs ranks on at least 2 nodes (inside one: nvls)");
      if (!comm.uniform()) return std::string("nvls_tree needs the same number of ranks on every node");
      if (comm.ranks_per_node() < 2) return std::string("nvls_tree needs at least 2 ranks per node");
      if (!nvls_switch_joins(comm, router)) return std::string(kNoNvlsSwitch);
      return std::nullopt;
    }
    case Algorithm::kCollNetChain:
    case Algorithm::kCollNetDirect: {
      if (auto r = only({CollectiveOp::kAllReduce})) return r;
      if (comm.node_count() < 2) return name + " needs ranks on at least 2 nodes";
      if (!comm.uniform()) return name + " needs the same number of ranks on every node";
      const auto& nodes = comm.nodes();
      for (size_t g = 0; g < nodes.front().size(); ++g) {
        bool found = false;
        for (LinkId l : router.route(comm.device(nodes.front()[g]), comm.device(nodes.back()[g]))) {
          found = found || comm.topology().device(comm.topology().link(l).to).sharp;
        }
        if (!found) return std::string("no SHARP-capable switch joins the nodes (set \"sharp\": true in the network)");
      }
      return std::nullopt;
    }
    case Algorithm::kPat:
      if (auto r = only({CollectiveOp::kAllGather, CollectiveOp::kReduceScatter})) return r;
      if (comm.node_count() != n) return std::string("pat runs with one GPU per node (NCCL's rule)");
      return std::nullopt;
  }
  return name + " is unknown";
}

TransferGraph lower_collective(const CollectiveSpec& spec, const Communicator& comm, const Router& router,
                               const LoweringOptions& options) {
  if (auto why = unsupported_reason(spec.op, spec.algorithm, comm, router)) throw std::invalid_argument(*why);
  if (spec.root < 0 || spec.root >= comm.size()) throw std::invalid_argument("root rank out of range");
  if (!spec.matrix.empty()) {
    if (spec.matrix.size() != static_cast<size_t>(comm.size())) throw std::invalid_argument("all-to-all-v matrix needs one row per rank");
    for (const auto& row : spec.matrix) {
      if (row.size() != static_cast<size_t>(comm.size())) throw std::invalid_argument("all-to-all-v matrix needs one column per rank");
    }
  }
  if (comm.size() == 1) return TransferGraph{};
  return Lowering(spec, comm, router, options).build();
}

}  // namespace parallax
