// Pipeline schedules (GPipe, 1F1B, interleaved 1F1B), their dependency check and the
// free-communication executor.
#include "training/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "engine/engine.h"
#include "training/stream_graph.h"

namespace parallax {
namespace {

std::vector<PipelineOp> gpipe_stage(int m) {
  std::vector<PipelineOp> ops;
  for (int i = 0; i < m; ++i) ops.push_back({PassKind::kForward, i, 0});
  for (int i = 0; i < m; ++i) ops.push_back({PassKind::kBackward, i, 0});
  return ops;
}

std::vector<PipelineOp> one_f_one_b_stage(int p, int m, int s) {
  std::vector<PipelineOp> ops;
  const int warmup = std::min(p - s - 1, m);
  int f = 0, b = 0;
  while (f < warmup) ops.push_back({PassKind::kForward, f++, 0});
  while (f < m) {
    ops.push_back({PassKind::kForward, f++, 0});
    ops.push_back({PassKind::kBackward, b++, 0});
  }
  while (b < m) ops.push_back({PassKind::kBackward, b++, 0});
  return ops;
}

// Megatron-LM's interleaved order (schedules.py, get_model_chunk_id and the micro-batch of the
// k-th virtual micro-batch), for m a multiple of p.
std::vector<PipelineOp> interleaved_stage(int p, int m, int v, int s) {
  const int total = m * v;
  auto micro_batch = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto forward_chunk = [&](int k) { return (k % (p * v)) / p; };
  auto forward = [&](int k) { return PipelineOp{PassKind::kForward, micro_batch(k), forward_chunk(k)}; };
  auto backward = [&](int k) { return PipelineOp{PassKind::kBackward, micro_batch(k), v - 1 - forward_chunk(k)}; };
  const int warmup = std::min((p - s - 1) * 2 + (v - 1) * p, total);
  std::vector<PipelineOp> ops;
  for (int k = 0; k < warmup; ++k) ops.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    ops.push_back(forward(warmup + k));
    ops.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(backward(k));
  return ops;
}

// A stage-and-position pair in an order where every pass comes after its dependency and after
// the earlier passes of its stage; `problem` says why no such order exists.
struct AdditionOrder {
  std::vector<std::pair<int, size_t>> order;
  std::string problem;
};

AdditionOrder addition_order(const PipelineSchedule& sch) {
  AdditionOrder out;
  const int p = sch.stages;
  const size_t per_stage = 2 * static_cast<size_t>(sch.micro_batches) * static_cast<size_t>(sch.chunks);
  // Each stage must list every pass once.
  for (int s = 0; s < p; ++s) {
    const auto& ops = sch.per_stage[static_cast<size_t>(s)];
    std::vector<PipelineOp> sorted = ops;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      out.problem = "stage " + std::to_string(s) + " lists " +
                    to_string(*std::adjacent_find(sorted.begin(), sorted.end()), sch.chunks > 1) + " twice";
      return out;
    }
    for (const PipelineOp& op : ops) {
      if (op.micro_batch < 0 || op.micro_batch >= sch.micro_batches || op.chunk < 0 || op.chunk >= sch.chunks) {
        out.problem = "stage " + std::to_string(s) + " lists " + to_string(op, sch.chunks > 1) + ", outside the schedule";
        return out;
      }
    }
    if (ops.size() != per_stage) {
      out.problem = "stage " + std::to_string(s) + " lists " + std::to_string(ops.size()) + " passes, not 2·m·v=" +
                    std::to_string(per_stage);
      return out;
    }
  }
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<std::map<PipelineOp, bool>> done(static_cast<size_t>(p));
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      const auto& ops = sch.per_stage[static_cast<size_t>(s)];
      auto& i = next[static_cast<size_t>(s)];
      while (i < ops.size()) {
        auto dep = pipeline_dependency(sch, s, ops[i]);
        if (dep && !done[static_cast<size_t>(dep->stage)].count(dep->op)) break;
        done[static_cast<size_t>(s)][ops[i]] = true;
        out.order.emplace_back(s, i);
        ++i;
        progress = true;
      }
    }
  }
  // Every stuck stage, with what its head waits for: together they show the cycle.
  const bool chunked = sch.chunks > 1;
  for (int s = 0; s < p; ++s) {
    const size_t i = next[static_cast<size_t>(s)];
    if (i < per_stage) {
      const PipelineOp& op = sch.per_stage[static_cast<size_t>(s)][i];
      auto dep = pipeline_dependency(sch, s, op);
      out.problem += (out.problem.empty() ? "deadlock: " : "; ") + std::string("stage ") + std::to_string(s) +
                     " is stuck at " + to_string(op, chunked) + ", waiting for " + to_string(dep->op, chunked) +
                     " on stage " + std::to_string(dep->stage);
    }
  }
  return out;
}

}  // namespace

std::string to_string(const PipelineOp& op, bool with_chunk) {
  std::string s = (op.kind == PassKind::kForward ? "F" : "B") + std::to_string(op.micro_batch);
  if (with_chunk) s += "." + std::to_string(op.chunk);
  return s;
}

PipelineSchedule make_pipeline_schedule(PipelineScheduleKind kind, int p, int m, int v) {
  if (p < 1 || m < 1 || v < 1) throw std::invalid_argument("stages, micro-batches and chunks must be at least 1");
  const bool interleaved = kind == PipelineScheduleKind::kInterleavedOneFOneB;
  if (!interleaved && v != 1) {
    throw std::invalid_argument(std::string(to_string(kind)) + " runs one model chunk per stage, not " + std::to_string(v));
  }
  if (interleaved && m % p != 0) {
    throw std::invalid_argument("interleaved 1F1B needs the micro-batches (" + std::to_string(m) +
                                ") to be a multiple of the stages (" + std::to_string(p) + ")");
  }
  PipelineSchedule sch;
  sch.kind = kind;
  sch.stages = p;
  sch.micro_batches = m;
  sch.chunks = v;
  for (int s = 0; s < p; ++s) {
    switch (kind) {
      case PipelineScheduleKind::kGpipe: sch.per_stage.push_back(gpipe_stage(m)); break;
      case PipelineScheduleKind::kOneFOneB: sch.per_stage.push_back(one_f_one_b_stage(p, m, s)); break;
      case PipelineScheduleKind::kInterleavedOneFOneB: sch.per_stage.push_back(interleaved_stage(p, m, v, s)); break;
    }
  }
  return sch;
}

std::optional<StagedOp> pipeline_dependency(const PipelineSchedule& sch, int s, const PipelineOp& op) {
  const int p = sch.stages, v = sch.chunks;
  if (op.kind == PassKind::kForward) {
    if (s > 0) return StagedOp{s - 1, op};
    if (op.chunk > 0) return StagedOp{p - 1, {PassKind::kForward, op.micro_batch, op.chunk - 1}};
    return std::nullopt;
  }
  if (s < p - 1) return StagedOp{s + 1, op};
  if (op.chunk < v - 1) return StagedOp{0, {PassKind::kBackward, op.micro_batch, op.chunk + 1}};
  return StagedOp{s, {PassKind::kForward, op.micro_batch, op.chunk}};
}

std::string schedule_problem(const PipelineSchedule& schedule) {
  if (static_cast<int>(schedule.per_stage.size()) != schedule.stages) {
    return "the schedule has " + std::to_string(schedule.per_stage.size()) + " stage lists for " +
           std::to_string(schedule.stages) + " stages";
  }
  return addition_order(schedule).problem;
}

std::vector<std::pair<int, size_t>> pipeline_pass_order(const PipelineSchedule& schedule) {
  if (std::string problem = schedule_problem(schedule); !problem.empty()) throw std::invalid_argument(problem);
  return addition_order(schedule).order;
}

double peak_in_flight(const PipelineSchedule& sch, int stage, const std::vector<double>& chunk_weights) {
  double now = 0, peak = 0;
  for (const PipelineOp& op : sch.per_stage.at(static_cast<size_t>(stage))) {
    const double w = chunk_weights.empty() ? 1.0 : chunk_weights.at(static_cast<size_t>(op.chunk));
    now += op.kind == PassKind::kForward ? w : -w;
    peak = std::max(peak, now);
  }
  return peak;
}

double PipelineRun::bubble_fraction() const {
  const double total = static_cast<double>(busy.size()) * makespan.seconds();
  return total > 0 ? idle.seconds() / total : 0.0;
}

PipelineRun run_pipeline(const PipelineSchedule& sch, Time forward, Time backward) {
  const int64_t v = sch.chunks;
  if (forward.picoseconds() % v != 0 || backward.picoseconds() % v != 0) {
    throw std::invalid_argument("the forward and backward times must be multiples of v=" + std::to_string(v) +
                                " picoseconds, so that every chunk takes the same whole time");
  }
  const Time f = Time::ps(forward.picoseconds() / v);
  const Time b = Time::ps(backward.picoseconds() / v);

  // One compute stream per stage; passes are added in an order where dependencies come first.
  StreamGraph graph;
  for (int s = 0; s < sch.stages; ++s) graph.add_stream(s, "compute");
  std::vector<std::map<PipelineOp, WorkId>> ids(static_cast<size_t>(sch.stages));
  std::vector<std::vector<WorkId>> by_position(static_cast<size_t>(sch.stages));
  for (int s = 0; s < sch.stages; ++s) by_position[static_cast<size_t>(s)].resize(sch.per_stage[static_cast<size_t>(s)].size());
  for (auto [s, i] : pipeline_pass_order(sch)) {
    const PipelineOp& op = sch.per_stage[static_cast<size_t>(s)][i];
    std::vector<WorkId> deps;
    if (auto dep = pipeline_dependency(sch, s, op)) deps.push_back(ids[static_cast<size_t>(dep->stage)].at(dep->op));
    const WorkId id = graph.add(static_cast<StreamId>(s), op.kind == PassKind::kForward ? f : b, WorkKind::kCompute, deps);
    ids[static_cast<size_t>(s)][op] = id;
    by_position[static_cast<size_t>(s)][i] = id;
  }
  Engine engine;
  std::vector<WorkTiming> timings = run_stream_graph(engine, graph);

  PipelineRun run;
  run.busy.assign(static_cast<size_t>(sch.stages), Time::zero());
  run.timings.resize(static_cast<size_t>(sch.stages));
  for (int s = 0; s < sch.stages; ++s) {
    for (WorkId id : by_position[static_cast<size_t>(s)]) {
      run.busy[static_cast<size_t>(s)] += graph.task(id).duration;
      run.makespan = std::max(run.makespan, timings[id].finish);
      run.timings[static_cast<size_t>(s)].emplace_back(timings[id].start, timings[id].finish);
    }
  }
  for (Time busy : run.busy) run.idle += run.makespan - busy;
  return run;
}

}  // namespace parallax
