// In-order streams with cross-stream dependencies, executed on the engine.
#include "training/stream_graph.h"

#include <stdexcept>

#include "engine/invariant.h"

namespace parallax {

const char* to_string(WorkKind k) {
  switch (k) {
    case WorkKind::kCompute: return "compute";
    case WorkKind::kTpComm: return "tp";
    case WorkKind::kCpComm: return "cp";
    case WorkKind::kEpComm: return "ep";
    case WorkKind::kPpComm: return "pp";
    case WorkKind::kDpComm: return "dp";
  }
  return "?";
}

StreamId StreamGraph::add_stream(int rank, std::string name) {
  streams_.push_back(Stream{rank, std::move(name), {}});
  return static_cast<StreamId>(streams_.size() - 1);
}

WorkId StreamGraph::add(StreamId stream, Time duration, WorkKind kind, std::span<const WorkId> deps, int peer_rank) {
  if (stream >= streams_.size()) throw std::invalid_argument("no stream " + std::to_string(stream));
  if (duration < Time::zero()) throw std::invalid_argument("a task cannot take negative time");
  const auto id = static_cast<WorkId>(tasks_.size());
  for (WorkId d : deps) {
    if (d >= id) throw std::invalid_argument("dependency " + std::to_string(d) + " is not added yet");
    dep_list_.push_back(d);
  }
  dep_offsets_.push_back(static_cast<uint32_t>(dep_list_.size()));
  tasks_.push_back(StreamTask{stream, duration, kind, peer_rank});
  streams_[stream].tasks.push_back(id);
  return id;
}

std::span<const WorkId> StreamGraph::dependencies(WorkId id) const {
  return std::span<const WorkId>(dep_list_.data() + dep_offsets_[id], dep_offsets_[id + 1] - dep_offsets_[id]);
}

namespace {

class StreamExecution {
 public:
  StreamExecution(Engine& engine, const StreamGraph& graph)
      : engine_(engine), graph_(graph), timings_(graph.size()), waiting_(graph.size()),
        position_(graph.stream_count(), 0), busy_(graph.stream_count(), false),
        offsets_(graph.size() + 1, 0) {
    // Successors in compressed rows, for releasing dependants at completion.
    for (WorkId id = 0; id < graph.size(); ++id) {
      waiting_[id] = static_cast<uint32_t>(graph.dependencies(id).size());
      for (WorkId d : graph.dependencies(id)) ++offsets_[d + 1];
    }
    for (size_t i = 0; i < graph.size(); ++i) offsets_[i + 1] += offsets_[i];
    successors_.resize(offsets_.back());
    std::vector<uint32_t> fill(offsets_.begin(), offsets_.end() - 1);
    for (WorkId id = 0; id < graph.size(); ++id) {
      for (WorkId d : graph.dependencies(id)) successors_[fill[d]++] = id;
    }
  }

  void run() {
    for (StreamId s = 0; s < graph_.stream_count(); ++s) try_start(s);
    engine_.run();
    for (StreamId s = 0; s < graph_.stream_count(); ++s) {
      const Stream& stream = graph_.stream(s);
      PARALLAX_INVARIANT(position_[s] == stream.tasks.size(), "training/stream_graph", engine_.now(),
                         "stream " + std::to_string(s) + " (" + stream.name + " of rank " +
                             std::to_string(stream.rank) + ") is stuck at task " +
                             std::to_string(stream.tasks[position_[s]]) +
                             ": its stream order contradicts its dependencies");
    }
  }

  std::vector<WorkTiming> take() { return std::move(timings_); }

 private:
  // Starts the head of stream `s` if the stream is free and the head's dependencies are done.
  void try_start(StreamId s) {
    const Stream& stream = graph_.stream(s);
    if (busy_[s] || position_[s] >= stream.tasks.size()) return;
    const WorkId id = stream.tasks[position_[s]];
    if (waiting_[id] != 0) return;
    busy_[s] = true;
    timings_[id].start = engine_.now();
    engine_.schedule_in(graph_.task(id).duration, [this, id] { finish(id); });
  }

  void finish(WorkId id) {
    const StreamId s = graph_.task(id).stream;
    timings_[id].finish = engine_.now();
    busy_[s] = false;
    ++position_[s];
    for (uint32_t k = offsets_[id]; k < offsets_[id + 1]; ++k) {
      const WorkId next = successors_[k];
      if (--waiting_[next] == 0) try_start(graph_.task(next).stream);
    }
    try_start(s);
  }

  Engine& engine_;
  const StreamGraph& graph_;
  std::vector<WorkTiming> timings_;
  std::vector<uint32_t> waiting_;
  std::vector<size_t> position_;
  std::vector<bool> busy_;
  std::vector<uint32_t> offsets_;
  std::vector<WorkId> successors_;
};

}  // namespace

std::vector<WorkTiming> run_stream_graph(Engine& engine, const StreamGraph& graph) {
  StreamExecution execution(engine, graph);
  execution.run();
  return execution.take();
}

}  // namespace parallax
