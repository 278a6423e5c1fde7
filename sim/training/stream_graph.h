// A training step as a dependency graph of work on in-order streams, and its execution on the
// engine. A stream is what a CUDA stream is to a GPU: it runs its tasks one at a time, in the
// order they were added to it. A task starts when (1) every task it depends on has finished,
// (2) every earlier task of its stream has finished; it then holds its stream for its duration.
// Compute kernels, TP collectives placed on the compute stream, pipeline sends and
// data-parallel reductions are all tasks; what differs is the stream they use and their kind,
// which the breakdown of a rank's time reads.
//
// Durations are fixed when the graph is built (from the compute model and the collectives
// layer's closed forms), so two collectives on different streams that share a link do not slow
// each other down here; flows on a network model are the later, contention-aware fidelity.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "units/units.h"

namespace parallax {

/// What a task does, for the breakdown of a rank's time.
enum class WorkKind : uint8_t { kCompute, kTpComm, kCpComm, kEpComm, kPpComm, kDpComm };
inline constexpr int kWorkKinds = 6;
/// "compute", "tp", "cp", "ep", "pp", "dp".
const char* to_string(WorkKind k);

using StreamId = uint32_t;
using WorkId = uint32_t;

struct StreamTask {
  StreamId stream = 0;
  Time duration;
  WorkKind kind = WorkKind::kCompute;
  /// A second rank that the task also occupies (the receiver of a pipeline send), or -1.
  int peer_rank = -1;
};

struct Stream {
  int rank = 0;      ///< the simulated rank (GPU) the stream belongs to
  std::string name;  ///< e.g. "compute", "pp", "dp"
  std::vector<WorkId> tasks;  ///< in execution order
};

class StreamGraph {
 public:
  StreamId add_stream(int rank, std::string name);
  /// Appends a task to `stream`; `deps` must name tasks already added (so the graph is a DAG).
  /// Throws std::invalid_argument on a bad stream, a dependency not yet added or a negative
  /// duration.
  WorkId add(StreamId stream, Time duration, WorkKind kind, std::span<const WorkId> deps, int peer_rank = -1);
  WorkId add(StreamId stream, Time duration, WorkKind kind, std::initializer_list<WorkId> deps, int peer_rank = -1) {
    return add(stream, duration, kind, std::span<const WorkId>(deps.begin(), deps.size()), peer_rank);
  }

  size_t size() const { return tasks_.size(); }
  const StreamTask& task(WorkId id) const { return tasks_[id]; }
  std::span<const WorkId> dependencies(WorkId id) const;
  size_t stream_count() const { return streams_.size(); }
  const Stream& stream(StreamId id) const { return streams_[id]; }

 private:
  std::vector<StreamTask> tasks_;
  std::vector<uint32_t> dep_offsets_{0};
  std::vector<WorkId> dep_list_;
  std::vector<Stream> streams_;
};

struct WorkTiming {
  Time start = Time::max();
  Time finish = Time::max();
};

/// Plays `graph` on `engine` from engine.now(): one event per task completion. Returns the
/// timings, indexed by WorkId. A task's dependencies and its stream predecessors were all
/// added before it, so waits point to lower ids and every graph runs to the end (an invariant
/// checks it).
std::vector<WorkTiming> run_stream_graph(Engine& engine, const StreamGraph& graph);

}  // namespace parallax
