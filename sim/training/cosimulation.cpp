// The training co-simulation's network side (cosimulation.h).
#include "training/cosimulation.h"

#include <algorithm>

namespace parallax {
namespace {

// The key of a call: its op, size, group and direction.
std::tuple<int, double, std::vector<int>, bool> key_of(const CollectiveCall& c) {
  return {static_cast<int>(c.op), c.size.value(), c.group, c.one_way};
}

// The transfers of `g` that leave `from` (a one-way send: send/recv's tasks have no dependencies).
TransferGraph sent_from(const TransferGraph& g, DeviceId from) {
  TransferGraph out;
  for (TaskId i = 0; i < g.size(); ++i) {
    const Task& t = g.task(i);
    if (t.kind == Task::Kind::kTransfer && t.src == from) {
      out.add_transfer(t.src, t.dst, t.bytes, t.wait, {}, t.channel, t.phase, t.weight);
    }
  }
  return out;
}

// Appends `part` to `into`; its tasks without dependencies wait for every task of `after`.
// Returns the ids `part`'s tasks got.
std::vector<TaskId> append(TransferGraph& into, const TransferGraph& part, const std::vector<TaskId>& after) {
  std::vector<std::vector<TaskId>> deps(part.size());
  for (TaskId i = 0; i < part.size(); ++i) {
    for (TaskId next : part.successors(i)) deps[next].push_back(i);
  }
  std::vector<TaskId> id(part.size());
  for (TaskId i = 0; i < part.size(); ++i) {
    std::vector<TaskId> wait;
    for (TaskId d : deps[i]) wait.push_back(id[d]);
    if (deps[i].empty()) wait = after;
    const Task& t = part.task(i);
    id[i] = t.kind == Task::Kind::kDelay
                ? into.add_delay(t.src, t.wait, wait, t.phase)
                : into.add_transfer(t.src, t.dst, t.bytes, t.wait, wait, t.channel, t.phase, t.weight);
  }
  return id;
}

// A zero-length task after every one of `tasks`, for the next phase's first transfers to wait
// on: waiting on each of them instead, the edges would grow as the product of the two phases'
// transfers (an all-to-all of 64 ranks after another: 4,032 × 4,032).
TaskId join(TransferGraph& graph, const std::vector<TaskId>& tasks) {
  const Task& first = graph.task(tasks.front());
  return graph.add_delay(first.src, Time::zero(), tasks, first.phase);
}

}  // namespace

CoSimulation::CoSimulation(CollectiveSimulatorCache& simulators)
    : simulators_(simulators),
      topo_(std::make_unique<Topology>(with_link_efficiency(simulators.topology(), simulators.efficiency()))),
      router_(std::make_unique<Router>(*topo_)) {}

const TransferGraph& CoSimulation::lowered(const CollectiveCall& call) {
  auto key = key_of(call);
  if (auto it = calls_.find(key); it != calls_.end()) return it->second;
  std::vector<DeviceId> devices;
  for (int r : call.group) devices.push_back(topo_->gpus()[static_cast<size_t>(r)]);
  const CollectiveSimulator& sim = simulators_.for_group(call.group);
  const bool one_node = simulators_.shape_of(call.group).second == static_cast<int>(call.group.size());
  const DeviceId sender = devices.front();
  const Communicator comm(*topo_, std::move(devices));
  CollectiveOptions o;
  o.model = "flow";
  // One transfer per ring edge with every step's bytes (exact on an idle ring, n× fewer flows);
  // inside a node every channel of a ring crosses the same GPU ports, so one carries them all
  // and takes, under contention, the shares of as many flows as NCCL runs channels.
  o.granularity = LoweringOptions::Granularity::kPipelined;
  o.channels_as_weight = one_node;
  TransferGraph g = sim.lower_on(call.op, call.size, o, comm, *router_);
  if (call.one_way && call.op == CollectiveOp::kSendRecv) g = sent_from(g, sender);
  return calls_.emplace(std::move(key), std::move(g)).first->second;
}

std::optional<LinkId> CoSimulation::bottleneck(const TransferGraph& g) {
  if (auto it = bottlenecks_.find(&g); it != bottlenecks_.end()) return it->second;
  const auto busiest = busiest_link(g, *router_);
  const std::optional<LinkId> worst = busiest ? std::optional<LinkId>(busiest->first) : std::nullopt;
  bottlenecks_.emplace(&g, worst);
  return worst;
}

std::shared_ptr<const TransferGraph> CoSimulation::transfers(const CallPhases& phases) {
  std::vector<CallKey> key;
  for (const auto& phase : phases) {
    for (const CollectiveCall& c : phase) key.push_back(key_of(c));
    key.emplace_back(-1, 0.0, std::vector<int>{}, false);  // the phase boundary
  }
  if (auto it = tasks_.find(key); it != tasks_.end()) return it->second;
  auto graph = std::make_shared<TransferGraph>();
  std::vector<TaskId> previous;  // the last phase's tasks, or their join
  for (const auto& phase : phases) {
    std::vector<TaskId> these;
    for (const CollectiveCall& c : phase) {
      if (c.group.size() < 2 || !(c.size.value() > 0)) continue;
      if (previous.size() > 1) previous = {join(*graph, previous)};
      const std::vector<TaskId> ids = append(*graph, lowered(c), previous);
      these.insert(these.end(), ids.begin(), ids.end());
    }
    if (!these.empty()) previous = std::move(these);
  }
  tasks_.emplace(std::move(key), graph);
  return graph;
}

}  // namespace parallax
