// In-order streams with cross-stream dependencies, executed on the engine.
#include "training/stream_graph.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <optional>
#include <queue>
#include <stdexcept>
#include <type_traits>

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
    case WorkKind::kOffload: return "offload";
  }
  return "?";
}

StreamId StreamGraph::add_stream(int rank, std::string name) {
  streams_.push_back(Stream{rank, std::move(name), {}});
  return static_cast<StreamId>(streams_.size() - 1);
}

ChannelId StreamGraph::add_channel() {
  pool_sms_.push_back(0);
  return static_cast<ChannelId>(channels_++);
}

ChannelId StreamGraph::add_sm_pool(int sms) {
  if (sms <= 0) throw std::invalid_argument("an SM pool needs a positive SM count");
  pool_sms_.push_back(sms);
  return static_cast<ChannelId>(channels_++);
}

void StreamGraph::occupy(WorkId id, ChannelId pool, int sms) {
  if (id >= tasks_.size()) throw std::invalid_argument("no task " + std::to_string(id));
  if (pool_sms(pool) == 0) throw std::invalid_argument("channel " + std::to_string(pool) + " is not an SM pool");
  if (sms < 0) throw std::invalid_argument("a task cannot hold a negative count of SMs");
  tasks_[id].sm_pool = pool;
  tasks_[id].sms = sms;
}

void StreamGraph::load(WorkId id, ChannelId c, double share) {
  if (id >= tasks_.size()) throw std::invalid_argument("no task " + std::to_string(id));
  if (c >= channels_ || pool_sms(c) != 0) throw std::invalid_argument("a load needs a plain channel");
  if (!(share > 0 && share <= 1)) throw std::invalid_argument("a load is a share of its channel in (0, 1]");
  if (loads_.size() <= id) loads_.resize(id + 1);
  loads_[id] = Load{c, share};
}

void StreamGraph::set_transfers(WorkId id, std::shared_ptr<const TransferGraph> transfers) {
  if (id >= tasks_.size()) throw std::invalid_argument("no task " + std::to_string(id));
  if (transfers_.size() <= id) transfers_.resize(id + 1);
  transfers_[id] = std::move(transfers);
}

WorkId StreamGraph::add(StreamId stream, Time duration, WorkKind kind, std::span<const WorkId> deps, int peer_rank,
                        ChannelId channel) {
  if (stream >= streams_.size()) throw std::invalid_argument("no stream " + std::to_string(stream));
  if (channel != kNoChannel && channel >= channels_) throw std::invalid_argument("no channel " + std::to_string(channel));
  if (duration < Time::zero()) throw std::invalid_argument("a task cannot take negative time");
  const auto id = static_cast<WorkId>(tasks_.size());
  for (WorkId d : deps) {
    if (d >= id) throw std::invalid_argument("dependency " + std::to_string(d) + " is not added yet");
    dep_list_.push_back(d);
  }
  dep_offsets_.push_back(static_cast<uint32_t>(dep_list_.size()));
  tasks_.push_back(StreamTask{duration, stream, peer_rank, channel, kNoChannel, 0, kind});
  streams_[stream].tasks.push_back(id);
  return id;
}

void StreamGraph::reserve(size_t tasks) {
  tasks_.reserve(tasks);
  dep_offsets_.reserve(tasks + 1);
  dep_list_.reserve(2 * tasks);
}

std::span<const WorkId> StreamGraph::dependencies(WorkId id) const {
  return std::span<const WorkId>(dep_list_.data() + dep_offsets_[id], dep_offsets_[id + 1] - dep_offsets_[id]);
}

namespace {

// What an execution schedules: the end of a task without a channel, a channel's next
// completion, or the end of a task whose transfers have landed. A channel event carries the
// channel's generation when it was scheduled: once the channel is rescheduled it is stale.
struct ExecutionEvent {
  enum class Kind : uint8_t { kFinish, kChannel, kPlayed };
  Kind kind = Kind::kFinish;
  uint32_t target = 0;  // the task, or the channel
  uint32_t generation = 0;
};

class EventSink {
 public:
  virtual void handle(const ExecutionEvent& e) = 0;

 protected:
  ~EventSink() = default;
};

// The events on a shared engine (co-simulation: the network's events interleave with the
// graph's); a stale channel event is cancelled there.
class EngineClock {
 public:
  using Handle = EventId;
  EngineClock(Engine& engine, EventSink& sink) : engine_(engine), sink_(sink) {}
  Engine& engine() { return engine_; }
  Time now() const { return engine_.now(); }
  Handle schedule_in(Time delay, ExecutionEvent e) {
    return engine_.schedule_in(delay, [this, e] { sink_.handle(e); });
  }
  void cancel(Handle h) { engine_.cancel(h); }
  void run() { engine_.run(); }

 private:
  Engine& engine_;
  EventSink& sink_;
};

// The events alone (no network): a queue of plain records in the engine's order, by time and
// then by the order they were scheduled, so that both clocks give the same timings. Stale
// channel events stay queued and are skipped by the sink when they come.
class LocalClock {
 public:
  struct Handle {};
  LocalClock(Engine& engine, EventSink& sink) : now_(engine.now()), sink_(sink) {}
  Time now() const { return now_; }
  Handle schedule_in(Time delay, ExecutionEvent e) {
    queue_.push(Entry{(now_ + delay).picoseconds(), sequence_++, e});
    return {};
  }
  void cancel(Handle) {}
  void run() {
    while (!queue_.empty()) {
      const Entry next = queue_.top();
      queue_.pop();
      now_ = Time::ps(next.time);
      sink_.handle(next.event);
    }
  }

 private:
  struct Entry {
    int64_t time;
    uint64_t sequence;
    ExecutionEvent event;
    bool operator<(const Entry& o) const {  // the priority queue's top is the largest
      return time != o.time ? time > o.time : sequence > o.sequence;
    }
  };
  Time now_;
  uint64_t sequence_ = 0;
  std::priority_queue<Entry> queue_;
  EventSink& sink_;
};

template <class Clock>
class StreamExecution final : private EventSink {
 public:
  StreamExecution(Engine& engine, const StreamGraph& graph, NetworkModel* network, std::vector<PlayedTransfer>* played,
                  const StreamProgress& progress)
      : clock_(engine, *this), graph_(graph), network_(network), played_(played), progress_(progress),
        report_every_(std::max<size_t>(1, graph.size() / 200)), timings_(graph.size()),
        waiting_(graph.size()), position_(graph.stream_count(), 0), busy_(graph.stream_count(), 0),
        offsets_(graph.size() + 1, 0), channels_(graph.channel_count()) {
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
    clock_.run();
    for (StreamId s = 0; s < graph_.stream_count(); ++s) {
      const Stream& stream = graph_.stream(s);
      PARALLAX_INVARIANT(position_[s] == stream.tasks.size(), "training/stream_graph", clock_.now(),
                         "stream " + std::to_string(s) + " (" + stream.name + " of rank " +
                             std::to_string(stream.rank) + ") is stuck at task " +
                             std::to_string(stream.tasks[position_[s]]) +
                             ": its stream order contradicts its dependencies");
    }
  }

  std::vector<WorkTiming> take() { return std::move(timings_); }

 private:
  void handle(const ExecutionEvent& e) override {
    switch (e.kind) {
      case ExecutionEvent::Kind::kFinish: finish(e.target); break;
      case ExecutionEvent::Kind::kChannel:
        if (e.generation == channels_[e.target].generation) channel_done(e.target);
        break;
      case ExecutionEvent::Kind::kPlayed: finish_played(e.target); break;
    }
  }

  // Starts the head of stream `s` if the stream is free and the head's dependencies are done.
  void try_start(StreamId s) {
    const Stream& stream = graph_.stream(s);
    if (busy_[s] || position_[s] >= stream.tasks.size()) return;
    const WorkId id = stream.tasks[position_[s]];
    if (waiting_[id] != 0) return;
    busy_[s] = 1;
    timings_[id].start = clock_.now();
    occupy(id, +1);
    const StreamTask& task = graph_.task(id);
    if constexpr (std::is_same_v<Clock, EngineClock>) {
      const std::shared_ptr<const TransferGraph>& transfers = graph_.transfers(id);
      if (network_ && transfers && transfers->size() > 0) {
        auto played = std::make_unique<GraphExecution>(clock_.engine(), *network_, *transfers);
        GraphExecution& run = *played;
        playing_.emplace(id, std::move(played));
        run.start([this, id] { clock_.schedule_in(Time::zero(), {ExecutionEvent::Kind::kPlayed, id}); });
        return;
      }
    }
    const ChannelId c = task.channel;
    if (c == kNoChannel) {
      clock_.schedule_in(task.duration, {ExecutionEvent::Kind::kFinish, id});
      return;
    }
    settle(c);
    channels_[c].active.push_back({id, static_cast<double>(task.duration.picoseconds())});
    reschedule(c);
  }

  // Processor sharing: while n tasks are in flight on a channel, each gets 1/n of it.
  struct InFlight {
    WorkId id;
    double remaining;  // picoseconds of solo work left
  };
  struct Channel {
    std::vector<InFlight> active;
    Time since;  // when `remaining` was last brought up to date
    typename Clock::Handle next;
    uint32_t generation = 0;   // of `next`: earlier events of the channel are stale
    int occupied = 0;          // SMs held by running tasks (SM pools only)
    std::vector<double> loads;  // shares other channels' running tasks take of it, ascending
  };

  // The channel's speed, shared by its tasks: 1, less what loads take of it (the max-min fair
  // level, see the header), or for an SM pool the share of SMs left (at least one SM's worth).
  double speed(ChannelId c) const {
    const Channel& ch = channels_[c];
    const int sms = graph_.pool_sms(c);
    if (sms != 0) return static_cast<double>(std::max(1, sms - ch.occupied)) / static_cast<double>(sms);
    if (ch.loads.empty() || ch.active.empty()) return 1.0;
    double left = 1.0;
    size_t sharing = ch.active.size() + ch.loads.size();
    for (double f : ch.loads) {  // smallest first
      if (f > left / static_cast<double>(sharing)) break;
      left -= f;
      --sharing;
    }
    return static_cast<double>(ch.active.size()) * left / static_cast<double>(sharing);
  }

  // A task that holds SMs of a pool, or loads a channel, takes them at its start and gives them
  // back at its end; the channel's tasks are brought up to date at the old speed first.
  void occupy(WorkId id, int sign) {
    const StreamTask& task = graph_.task(id);
    if (task.sm_pool != kNoChannel && task.sms != 0) {
      settle(task.sm_pool);
      channels_[task.sm_pool].occupied += sign * task.sms;
      reschedule(task.sm_pool);
    }
    const StreamGraph::Load load = graph_.load_of(id);
    if (load.channel == kNoChannel) return;
    settle(load.channel);
    std::vector<double>& loads = channels_[load.channel].loads;
    if (sign > 0) {
      loads.insert(std::upper_bound(loads.begin(), loads.end(), load.share), load.share);
    } else {
      loads.erase(std::find(loads.begin(), loads.end(), load.share));
    }
    reschedule(load.channel);
  }

  void settle(ChannelId c) {
    Channel& ch = channels_[c];
    const double done = static_cast<double>((clock_.now() - ch.since).picoseconds());
    if (!ch.active.empty() && done > 0) {
      const double share = done * speed(c) / static_cast<double>(ch.active.size());
      for (InFlight& f : ch.active) f.remaining -= share;
    }
    ch.since = clock_.now();
  }

  void reschedule(ChannelId c) {
    Channel& ch = channels_[c];
    clock_.cancel(ch.next);
    ++ch.generation;
    if (ch.active.empty()) return;
    double least = ch.active.front().remaining;
    for (const InFlight& f : ch.active) least = std::min(least, f.remaining);
    const double wait = std::max(0.0, least) * static_cast<double>(ch.active.size()) / speed(c);
    ch.next = clock_.schedule_in(Time::ps(static_cast<int64_t>(std::ceil(wait))),
                                 {ExecutionEvent::Kind::kChannel, c, ch.generation});
  }

  // Completes the channel's tasks whose work is done (within rounding to whole picoseconds).
  void channel_done(ChannelId c) {
    settle(c);
    Channel& ch = channels_[c];
    std::vector<WorkId> done;
    done.swap(done_scratch_);  // reused: channel_done runs only from the clock, never inside itself
    done.clear();
    const double slack = static_cast<double>(ch.active.size());  // the ceil above, per task
    std::erase_if(ch.active, [&](const InFlight& f) {
      if (f.remaining > slack) return false;
      done.push_back(f.id);
      return true;
    });
    std::sort(done.begin(), done.end());  // same-instant completions in a fixed order
    reschedule(c);
    for (WorkId id : done) finish(id);
    done.swap(done_scratch_);
  }

  // A task's transfers have landed; its execution is dropped once it has returned.
  void finish_played(WorkId id) {
    if (played_) {
      const TransferGraph& g = *graph_.transfers(id);
      const std::vector<TaskTiming>& times = playing_.at(id)->timings();
      for (TaskId t = 0; t < g.size(); ++t) {
        const Task& task = g.task(t);
        if (task.kind != Task::Kind::kTransfer || task.src == task.dst) continue;
        played_->push_back({id, task.src, task.dst, task.bytes, task.route_key(), times[t].start, times[t].finish});
      }
    }
    playing_.erase(id);
    finish(id);
  }

  void finish(WorkId id) {
    if (progress_ && (++finished_ % report_every_ == 0 || finished_ == graph_.size())) {
      progress_(finished_, graph_.size());
    }
    const StreamId s = graph_.task(id).stream;
    timings_[id].finish = clock_.now();
    occupy(id, -1);
    busy_[s] = 0;
    ++position_[s];
    for (uint32_t k = offsets_[id]; k < offsets_[id + 1]; ++k) {
      const WorkId next = successors_[k];
      if (--waiting_[next] == 0) try_start(graph_.task(next).stream);
    }
    try_start(s);
  }

  Clock clock_;
  const StreamGraph& graph_;
  NetworkModel* network_;
  std::vector<PlayedTransfer>* played_;
  const StreamProgress& progress_;
  const size_t report_every_;
  size_t finished_ = 0;
  std::map<WorkId, std::unique_ptr<GraphExecution>> playing_;  // tasks whose transfers are in flight
  std::vector<WorkTiming> timings_;
  std::vector<uint32_t> waiting_;
  std::vector<size_t> position_;
  std::vector<uint8_t> busy_;
  std::vector<uint32_t> offsets_;
  std::vector<WorkId> successors_;
  std::vector<Channel> channels_;
  std::vector<WorkId> done_scratch_;
};

}  // namespace

std::vector<WorkId> critical_path(const StreamGraph& graph, const std::vector<WorkTiming>& timings) {
  if (graph.size() == 0) return {};
  // Each task's predecessor on its stream.
  std::vector<WorkId> before(graph.size(), UINT32_MAX);
  for (StreamId s = 0; s < graph.stream_count(); ++s) {
    const std::vector<WorkId>& tasks = graph.stream(s).tasks;
    for (size_t i = 1; i < tasks.size(); ++i) before[tasks[i]] = tasks[i - 1];
  }
  WorkId at = 0;
  for (WorkId id = 1; id < graph.size(); ++id) {
    if (timings[id].finish > timings[at].finish) at = id;
  }
  std::vector<WorkId> path{at};
  while (true) {
    std::optional<WorkId> binding;
    auto consider = [&](WorkId w) {
      if (w == UINT32_MAX || timings[w].finish > timings[at].start) return;
      if (!binding || timings[w].finish > timings[*binding].finish) binding = w;
    };
    for (WorkId d : graph.dependencies(at)) consider(d);
    consider(before[at]);
    if (!binding) break;
    at = *binding;
    path.push_back(at);
  }
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<WorkTiming> run_stream_graph(Engine& engine, const StreamGraph& graph, NetworkModel* network,
                                         std::vector<PlayedTransfer>* played, const StreamProgress& progress) {
  // Without a network nothing else shares the engine: the graph's events run on a clock of
  // their own, without the engine's type-erased callbacks, and the engine's clock is left as it was.
  if (!network) {
    StreamExecution<LocalClock> execution(engine, graph, network, played, progress);
    execution.run();
    return execution.take();
  }
  StreamExecution<EngineClock> execution(engine, graph, network, played, progress);
  execution.run();
  return execution.take();
}

uint64_t StreamGraph::content_hash() const {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](uint64_t v) {  // FNV-1a over 64-bit words, then a final avalanche
    h ^= v;
    h *= 0x100000001b3ULL;
  };
  for (const StreamTask& t : tasks_) {
    mix(static_cast<uint64_t>(t.duration.picoseconds()));
    mix((static_cast<uint64_t>(t.stream) << 32) | t.channel);
    mix((static_cast<uint64_t>(static_cast<uint32_t>(t.peer_rank)) << 32) | static_cast<uint64_t>(t.kind));
    mix((static_cast<uint64_t>(t.sm_pool) << 32) | static_cast<uint32_t>(t.sms));
  }
  for (const auto& t : transfers_) mix(reinterpret_cast<uintptr_t>(t.get()));
  for (const Load& l : loads_) {
    mix(l.channel);
    mix(std::bit_cast<uint64_t>(l.share));
  }
  for (WorkId d : dep_list_) mix(d);
  for (uint32_t o : dep_offsets_) mix(o);
  for (const Stream& st : streams_) {
    mix(static_cast<uint32_t>(st.rank));
    mix(st.tasks.size());
  }
  for (int sms : pool_sms_) mix(static_cast<uint32_t>(sms));
  mix(channels_);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

}  // namespace parallax
