// Transfer graphs and their execution on a network model.
#include "collectives/transfer_graph.h"

#include <cstdint>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/invariant.h"

namespace parallax {

void TransferGraph::add_edges(TaskId to, std::span<const TaskId> deps) {
  for (TaskId d : deps) {
    PARALLAX_INVARIANT(d < to, "transfer graph", Time::zero(), "a dependency must be added before its dependant");
    edges_.emplace_back(d, to);
  }
  dependency_count_.push_back(static_cast<uint32_t>(deps.size()));
}

TaskId TransferGraph::add_transfer(DeviceId src, DeviceId dst, Bytes bytes, Time wait, std::span<const TaskId> deps,
                                   uint16_t channel, uint16_t phase, uint8_t weight) {
  if (weight < 1) throw std::invalid_argument("a transfer stands for at least one flow");
  auto id = static_cast<TaskId>(tasks_.size());
  Task t;
  t.kind = Task::Kind::kTransfer;
  t.weight = weight;
  t.src = src;
  t.dst = dst;
  t.bytes = bytes;
  t.wait = wait;
  t.channel = channel;
  t.phase = phase;
  tasks_.push_back(t);
  add_edges(id, deps);
  return id;
}

TaskId TransferGraph::add_delay(DeviceId where, Time duration, std::span<const TaskId> deps, uint16_t phase) {
  auto id = static_cast<TaskId>(tasks_.size());
  Task t;
  t.kind = Task::Kind::kDelay;
  t.src = where;
  t.dst = where;
  t.wait = duration;
  t.phase = phase;
  tasks_.push_back(t);
  add_edges(id, deps);
  return id;
}

void TransferGraph::build_successors() const {
  if (built_for_edges_ == edges_.size() && successor_offsets_.size() == tasks_.size() + 1) return;
  successor_offsets_.assign(tasks_.size() + 1, 0);
  for (const auto& e : edges_) ++successor_offsets_[e.first + 1];
  std::partial_sum(successor_offsets_.begin(), successor_offsets_.end(), successor_offsets_.begin());
  successor_list_.resize(edges_.size());
  std::vector<uint32_t> fill(successor_offsets_.begin(), successor_offsets_.end() - 1);
  for (const auto& e : edges_) successor_list_[fill[e.first]++] = e.second;
  built_for_edges_ = edges_.size();
}

std::span<const TaskId> TransferGraph::successors(TaskId id) const {
  build_successors();
  return std::span<const TaskId>(successor_list_.data() + successor_offsets_[id],
                                 successor_offsets_[id + 1] - successor_offsets_[id]);
}

Bytes TransferGraph::total_bytes() const {
  double sum = 0;
  for (const Task& t : tasks_) {
    if (t.kind == Task::Kind::kTransfer) sum += t.bytes.value();
  }
  return Bytes(sum);
}

std::optional<std::pair<LinkId, Time>> busiest_link(const TransferGraph& graph, const Router& router) {
  std::map<uint32_t, double> bytes;  // by link, in id order
  for (TaskId i = 0; i < graph.size(); ++i) {
    const Task& t = graph.task(i);
    if (t.kind != Task::Kind::kTransfer || t.src == t.dst) continue;
    for (LinkId l : router.route(t.src, t.dst, t.route_key())) bytes[l.value] += t.bytes.value();
  }
  std::optional<std::pair<LinkId, Time>> busiest;
  double most = 0;
  for (const auto& [link, b] : bytes) {
    const double seconds = b / router.topology().link(LinkId{link}).bandwidth.value();
    if (seconds > most) {
      most = seconds;
      busiest = std::make_pair(LinkId{link}, Time::from_seconds(seconds));
    }
  }
  return busiest;
}

void TransferGraph::scale_bytes(double factor) {
  for (Task& t : tasks_) {
    if (t.kind == Task::Kind::kTransfer) t.bytes = t.bytes * factor;
  }
}

void TransferGraph::delay_start(Time latency) {
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (dependency_count_[i] == 0) tasks_[i].wait = tasks_[i].wait + latency;
  }
}

void TransferGraph::weigh_transfers(uint32_t weight) {
  if (weight < 1 || weight > UINT8_MAX) {
    throw std::invalid_argument("a transfer stands for 1 to 255 flows, not " + std::to_string(weight));
  }
  for (Task& t : tasks_) {
    if (t.kind == Task::Kind::kTransfer) t.weight = static_cast<uint8_t>(weight);
  }
}

GraphExecution::GraphExecution(Engine& engine, NetworkModel& network, const TransferGraph& graph,
                               bool record_timings)
    : engine_(engine), network_(network), graph_(graph), record_timings_(record_timings) {}

void GraphExecution::start(std::function<void()> on_done) {
  on_done_ = std::move(on_done);
  started_at_ = finished_at_ = engine_.now();
  remaining_ = graph_.size();
  waiting_on_.resize(graph_.size());
  timings_.assign(record_timings_ ? graph_.size() : 0, TaskTiming{});
  for (TaskId id = 0; id < graph_.size(); ++id) waiting_on_[id] = graph_.dependency_count(id);
  if (remaining_ == 0) {
    if (on_done_) on_done_();
    return;
  }
  for (TaskId id = 0; id < graph_.size(); ++id) {
    if (waiting_on_[id] == 0) ready(id);
  }
}

void GraphExecution::ready(TaskId id) {
  const Task& t = graph_.task(id);
  if (record_timings_) timings_[id].ready = engine_.now();
  if (t.kind == Task::Kind::kDelay || t.src == t.dst) {
    // A delay, or a copy within one device: no network involved.
    engine_.schedule_in(t.wait, [this, id] {
      if (record_timings_) timings_[id].start = engine_.now();
      finish(id);
    });
    return;
  }
  if (t.wait == Time::zero()) {
    launch(id);
  } else {
    launching_.schedule_at(engine_.now() + t.wait, id);
  }
}

void GraphExecution::launch(TaskId id) {
  const Task& task = graph_.task(id);
  if (record_timings_) timings_[id].start = engine_.now();
  network_.start_flow(task.src, task.dst, task.bytes, *this, id, task.route_key(), task.weight);
}

void GraphExecution::finish(TaskId id) {
  if (record_timings_) timings_[id].finish = engine_.now();
  finished_at_ = engine_.now();
  for (TaskId s : graph_.successors(id)) {
    if (--waiting_on_[s] == 0) ready(s);
  }
  if (--remaining_ == 0 && on_done_) on_done_();
}

Time run_transfer_graph(Engine& engine, NetworkModel& network, const TransferGraph& graph,
                        std::vector<TaskTiming>* timings) {
  GraphExecution exec(engine, network, graph, timings != nullptr);
  exec.start();
  engine.run();
  PARALLAX_INVARIANT(exec.finished(), "transfer graph", engine.now(), "tasks left unfinished (a dependency cycle?)");
  if (timings) *timings = exec.timings();
  return exec.finish_time() - exec.start_time();
}

}  // namespace parallax
