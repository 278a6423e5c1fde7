// A collective lowered to a dependency graph of point-to-point transfers and local delays
// (reduction compute, software latency), and the executor that plays such a graph on any
// network model. The graph knows devices, bytes and times, not algorithms: every algorithm in
// algorithms.h produces one, and the training layer can reuse it for its own patterns.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <utility>
#include <span>
#include <vector>

#include "engine/batched_events.h"
#include "engine/engine.h"
#include "network/network_model.h"
#include "topology/router.h"
#include "topology/topology.h"
#include "units/units.h"

namespace parallax {

using TaskId = uint32_t;

struct Task {
  enum class Kind : uint8_t { kTransfer, kDelay };
  Bytes bytes;         ///< bytes on the wire (protocol overhead included)
  Time wait;           ///< transfer: software latency between ready and the flow start; delay: duration
  DeviceId src;        ///< the sender; for a delay, the device it occupies
  DeviceId dst;        ///< the receiver; unused for a delay
  uint16_t channel = 0;
  uint16_t phase = 0;  ///< algorithm-defined label for traces (e.g. 0 reduce-scatter, 1 all-gather)
  Kind kind = Kind::kTransfer;
  uint8_t weight = 1;  ///< equal flows the transfer stands for (NetworkModel::start_flow)

  /// The ECMP key. One connection per (channel, sender, receiver), as NCCL keeps one per peer
  /// and channel: all its steps take the same path. Computed, not stored: an all-to-all's
  /// graph holds millions of tasks.
  uint64_t route_key() const {
    return (static_cast<uint64_t>(channel) << 42) ^ (static_cast<uint64_t>(src.value) << 21) ^ dst.value;
  }
};

class TransferGraph {
 public:
  /// Adds a transfer that becomes ready when every task in `deps` has finished.
  TaskId add_transfer(DeviceId src, DeviceId dst, Bytes bytes, Time wait, std::span<const TaskId> deps,
                      uint16_t channel = 0, uint16_t phase = 0, uint8_t weight = 1);
  TaskId add_transfer(DeviceId src, DeviceId dst, Bytes bytes, Time wait, std::initializer_list<TaskId> deps,
                      uint16_t channel = 0, uint16_t phase = 0, uint8_t weight = 1) {
    return add_transfer(src, dst, bytes, wait, std::span<const TaskId>(deps.begin(), deps.size()), channel, phase,
                        weight);
  }
  /// Adds a local delay of `duration` on `where` (compute, synchronisation).
  TaskId add_delay(DeviceId where, Time duration, std::span<const TaskId> deps, uint16_t phase = 0);

  size_t size() const { return tasks_.size(); }
  const Task& task(TaskId id) const { return tasks_[id]; }
  std::span<const TaskId> successors(TaskId id) const;
  uint32_t dependency_count(TaskId id) const { return dependency_count_[id]; }
  /// Bytes of all transfers (wire bytes).
  Bytes total_bytes() const;
  /// Multiplies every transfer's bytes by `factor` > 0 (a calibrated collective's achieved
  /// bandwidth, collective_simulator.h).
  void scale_bytes(double factor);
  /// Adds `latency` to the wait of every task that depends on none (the collective's start).
  void delay_start(Time latency);
  /// Makes every transfer stand for `weight` (1–255) equal flows: the channels one transfer
  /// carries, each taking its own share of a link under contention.
  void weigh_transfers(uint32_t weight);

 private:
  void add_edges(TaskId to, std::span<const TaskId> deps);
  void build_successors() const;

  std::vector<Task> tasks_;
  std::vector<uint32_t> dependency_count_;
  std::vector<std::pair<TaskId, TaskId>> edges_;  // (from, to)
  // Successor lists in compressed rows, rebuilt on demand after the graph grows.
  mutable std::vector<uint32_t> successor_offsets_;
  mutable std::vector<TaskId> successor_list_;
  mutable size_t built_for_edges_ = SIZE_MAX;
};

/// The link the graph's transfers keep busy longest alone (their bytes over its bandwidth, routed
/// by `router`) and that time; the lowest link id among equals; nullopt when no transfer crosses
/// a link.
std::optional<std::pair<LinkId, Time>> busiest_link(const TransferGraph& graph, const Router& router);

/// When each task became ready, started its flow (after its wait) and finished.
struct TaskTiming {
  Time ready = Time::max();
  Time start = Time::max();
  Time finish = Time::max();
};

/// Plays a graph on a network model from the engine's current time. Tasks without
/// dependencies are ready at once. `on_done` runs when the last task finishes.
class GraphExecution final : private FlowSink {
 public:
  /// Without `record_timings`, timings() stays empty (the makespan alone is wanted: 24 bytes a
  /// task less on an all-to-all's millions).
  GraphExecution(Engine& engine, NetworkModel& network, const TransferGraph& graph, bool record_timings = true);
  GraphExecution(const GraphExecution&) = delete;
  GraphExecution& operator=(const GraphExecution&) = delete;

  void start(std::function<void()> on_done = nullptr);
  bool finished() const { return remaining_ == 0; }
  Time start_time() const { return started_at_; }
  Time finish_time() const { return finished_at_; }
  const std::vector<TaskTiming>& timings() const { return timings_; }

 private:
  void ready(TaskId id);
  void launch(TaskId id);
  void finish(TaskId id);
  void flow_finished(uint32_t tag) override { finish(tag); }

  Engine& engine_;
  NetworkModel& network_;
  const TransferGraph& graph_;
  std::vector<uint32_t> waiting_on_;
  std::vector<TaskTiming> timings_;
  bool record_timings_;
  size_t remaining_ = 0;
  Time started_at_;
  Time finished_at_;
  std::function<void()> on_done_;
  BatchedEvents<TaskId> launching_{engine_, [this](TaskId id) { launch(id); }};  // after each wait
};

/// Runs `graph` alone on a fresh engine clock and returns its makespan (convenience for tests
/// and single-collective questions).
Time run_transfer_graph(Engine& engine, NetworkModel& network, const TransferGraph& graph,
                        std::vector<TaskTiming>* timings = nullptr);

}  // namespace parallax
