// A training step as a dependency graph of work on in-order streams, and its execution on the
// engine. A stream is what a CUDA stream is to a GPU: it runs its tasks one at a time, in the
// order they were added to it. A task starts when (1) every task it depends on has finished,
// (2) every earlier task of its stream has finished; it then holds its stream for its duration.
// Compute kernels, TP collectives placed on the compute stream, pipeline sends and
// data-parallel reductions are all tasks; what differs is the stream they use and their kind,
// which the breakdown of a rank's time reads.
//
// A task's duration is what it takes alone (from the compute model and the collectives layer).
// Tasks may name a channel — what a GPU's communication goes through, e.g. its NVLink ports or
// its NIC — and the tasks of one channel that run at the same time share it equally
// (processor sharing): each progresses at 1/n of its solo speed while n are in flight, so two
// equal transfers that overlap both finish after twice their solo time, and work is conserved.
// Tasks without a channel take exactly their duration.
//
// A channel may also be a GPU's pool of streaming multiprocessors (add_sm_pool): tasks that
// occupy SMs of it while they run (a collective's NCCL kernels hold one SM per channel) slow
// the tasks on it (the compute kernels) to the share of SMs left, (S − occupied)/S. A kernel of
// solo duration D overlapped for C by a collective holding k of S SMs thus ends at D + C·k/S:
// the SM-time the collective took.
//
// A task may also load a plain channel by a share of it while it runs (load): a collective
// across nodes whose rings also hop over the GPU's NVLink. The channel's own tasks then get a
// max-min fair share of what is left: with loads f_i and n tasks of its own, each of them runs
// at the level L where Σ min(f_i, L) + n·L = 1 (1/n with no load). A load is what its task
// takes of the channel, it is not slowed by the channel in turn: it runs on its own channel.
//
// A task may instead carry transfers (set_transfers): a collective lowered to point-to-point
// flows (collectives/transfer_graph.h). Run with a network model, such a task plays its
// transfers on it when it starts and ends when the last one lands, so every collective of the
// graph shares the links with every other in flight (co-simulation); its channel is ignored,
// its duration is what it would take alone (for reports). Without a network model it takes
// its duration like any task.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/transfer_graph.h"
#include "engine/engine.h"
#include "network/network_model.h"
#include "units/units.h"

namespace parallax {

/// What a task does, for the breakdown of a rank's time.
/// kOffload: activation copies to and from host memory (ParallelLayout::cpu_offloading_layers).
enum class WorkKind : uint8_t { kCompute, kTpComm, kCpComm, kEpComm, kPpComm, kDpComm, kOffload };
inline constexpr int kWorkKinds = 7;
/// "compute", "tp", "cp", "ep", "pp", "dp", "offload".
const char* to_string(WorkKind k);
/// The kind as an index of arrays of kWorkKinds.
inline size_t kind_index(WorkKind k) { return static_cast<size_t>(k); }

using StreamId = uint32_t;
using WorkId = uint32_t;
using ChannelId = uint32_t;
inline constexpr ChannelId kNoChannel = UINT32_MAX;

// 32 bytes and trivially copyable: a search builds and plays millions of them. A task's
// transfers sit beside the tasks (StreamGraph::transfers).
struct StreamTask {
  Time duration;  ///< alone on its channel
  StreamId stream = 0;
  /// A second rank that the task also occupies (the receiver of a pipeline send), or -1.
  int peer_rank = -1;
  ChannelId channel = kNoChannel;
  /// An SM pool the task holds `sms` SMs of while it runs (see the file comment).
  ChannelId sm_pool = kNoChannel;
  int sms = 0;
  WorkKind kind = WorkKind::kCompute;

  friend bool operator==(const StreamTask&, const StreamTask&) = default;
};
static_assert(std::is_trivially_copyable_v<StreamTask>);

struct Stream {
  int rank = 0;      ///< the simulated rank (GPU) the stream belongs to
  std::string name;  ///< e.g. "compute", "pp", "dp"
  std::vector<WorkId> tasks;  ///< in execution order

  friend bool operator==(const Stream&, const Stream&) = default;
};

class StreamGraph {
 public:
  StreamId add_stream(int rank, std::string name);
  /// A channel that concurrent tasks share (see the file comment).
  ChannelId add_channel();
  /// A GPU's `sms` streaming multiprocessors as a channel: the tasks on it run at the share of
  /// SMs that the occupying tasks leave. Throws std::invalid_argument unless sms > 0.
  ChannelId add_sm_pool(int sms);
  /// Makes task `id` hold `sms` SMs of `pool` while it runs. Throws std::invalid_argument on a
  /// channel that is not an SM pool or a negative count.
  void occupy(WorkId id, ChannelId pool, int sms);
  /// Makes task `id` load the plain channel `c` by `share` ∈ (0, 1] while it runs (see the file
  /// comment). Throws std::invalid_argument on an SM pool or a share outside (0, 1].
  void load(WorkId id, ChannelId c, double share);
  /// The channel task `id` loads and by how much; share 0 if none.
  struct Load {
    ChannelId channel = kNoChannel;
    double share = 0;
    friend bool operator==(const Load&, const Load&) = default;
  };
  Load load_of(WorkId id) const { return id < loads_.size() ? loads_[id] : Load{}; }
  /// Makes task `id` play `transfers` on the network when run with one.
  void set_transfers(WorkId id, std::shared_ptr<const TransferGraph> transfers);
  /// The SMs of a pool; 0 for a plain channel.
  int pool_sms(ChannelId c) const { return c < pool_sms_.size() ? pool_sms_[c] : 0; }
  /// Appends a task to `stream`; `deps` must name tasks already added (so the graph is a DAG).
  /// Throws std::invalid_argument on a bad stream, a dependency not yet added or a negative
  /// duration.
  WorkId add(StreamId stream, Time duration, WorkKind kind, std::span<const WorkId> deps, int peer_rank = -1,
             ChannelId channel = kNoChannel);
  WorkId add(StreamId stream, Time duration, WorkKind kind, std::initializer_list<WorkId> deps, int peer_rank = -1,
             ChannelId channel = kNoChannel) {
    return add(stream, duration, kind, std::span<const WorkId>(deps.begin(), deps.size()), peer_rank, channel);
  }

  /// Room for `tasks` tasks and as many dependencies again, ahead of adding them.
  void reserve(size_t tasks);

  size_t size() const { return tasks_.size(); }
  const StreamTask& task(WorkId id) const { return tasks_[id]; }
  /// The flows task `id` plays on the network (see the file comment), or null.
  const std::shared_ptr<const TransferGraph>& transfers(WorkId id) const {
    static const std::shared_ptr<const TransferGraph> kNone;
    return id < transfers_.size() ? transfers_[id] : kNone;
  }
  std::span<const WorkId> dependencies(WorkId id) const;
  size_t stream_count() const { return streams_.size(); }
  size_t channel_count() const { return channels_; }
  const Stream& stream(StreamId id) const { return streams_[id]; }

  /// Equal graphs play the same: same tasks, dependencies, streams and channels.
  friend bool operator==(const StreamGraph&, const StreamGraph&) = default;
  /// A hash of everything operator== compares but the streams' names.
  uint64_t content_hash() const;

 private:
  std::vector<StreamTask> tasks_;
  std::vector<uint32_t> dep_offsets_{0};
  std::vector<WorkId> dep_list_;
  std::vector<Stream> streams_;
  size_t channels_ = 0;
  std::vector<int> pool_sms_;  // per channel: SMs of a pool, 0 for a plain channel
  std::vector<std::shared_ptr<const TransferGraph>> transfers_;  // by task, up to the last that has some
  std::vector<Load> loads_;                                       // by task, up to the last that has one
};

struct WorkTiming {
  Time start = Time::max();
  Time finish = Time::max();
};

/// The chain of tasks that sets the graph's length, in execution order: from the task that
/// finishes last, back through whatever it started on — the dependency or the stream
/// predecessor that finished at its start (the latest, when none did exactly, as when a
/// channel shared its speed) — to a task that started at the graph's start.
std::vector<WorkId> critical_path(const StreamGraph& graph, const std::vector<WorkTiming>& timings);

/// One transfer a task played on the network, for traces.
struct PlayedTransfer {
  WorkId task = 0;
  DeviceId src, dst;
  Bytes bytes;
  uint64_t route_key = 0;
  Time start, finish;
};

/// Plays `graph` on `engine` from engine.now(): one event per task completion (per channel,
/// one pending event for its earliest completion, moved as tasks join and leave). Returns the
/// timings, indexed by WorkId. A task's dependencies and its stream predecessors were all
/// added before it, so waits point to lower ids and every graph runs to the end (an invariant
/// checks it).
/// With `network`, tasks that carry transfers play them on it (co-simulation), on `engine`,
/// which the network model schedules on too; with `played`, each of those transfers is
/// recorded there. Without a network the graph's events run on a queue of their own, starting
/// from engine.now(), and the engine itself is left untouched.
/// With `progress`, it is called as tasks finish — (tasks finished, tasks in all), about 200 times
/// over the run and once at its end — for a progress bar on a long co-simulation.
using StreamProgress = std::function<void(size_t done, size_t total)>;
std::vector<WorkTiming> run_stream_graph(Engine& engine, const StreamGraph& graph, NetworkModel* network = nullptr,
                                         std::vector<PlayedTransfer>* played = nullptr,
                                         const StreamProgress& progress = {});

}  // namespace parallax
