// The stream graph of a training iteration's simulated ranks (internal to iteration.cpp):
// per pipeline stage a compute stream and TP, PP, DP (and CP, ZeRO-3 gather) streams, the
// passes of the schedule with their layers' compute and communication tasks in dependency
// order, the gradient reductions, the barrier and the optimizer step (iteration.h describes the
// model). Co-simulated, the communication tasks carry their transfers (cosimulation.h).
#pragma once

#include <vector>

#include "compute/compute_model.h"
#include "training/cosimulation.h"
#include "training/iteration.h"
#include "training/iteration_comm.h"
#include "training/iteration_units.h"
#include "training/parallel_layout.h"
#include "training/stream_graph.h"

namespace parallax::iteration_detail {

struct IterationGraph {
  StreamGraph graph;
  std::vector<ChannelId> sm_pool;       ///< per stage: its GPU's SM pool, or kNoChannel
  std::vector<bool> across_nodes;       ///< per task: communication whose group spans nodes
  std::vector<int64_t> bottleneck;      ///< per task, co-simulated: its bottleneck link, or −1
  std::vector<WorkId> backward_ends;    ///< the last task of every backward pass
  std::vector<StageResult> stages;      ///< per stage: communication volumes, FLOPs, parameters
  /// With IterationOptions::keep_timeline, per task: the pipeline pass it belongs to, if any.
  std::vector<std::optional<PipelineOp>> pass_of;
};

/// One micro-batch's passes per virtual stage as each stage's compute stream sees them: the
/// kernels and the communication that waits in line with them, each collective timed alone.
std::vector<StagePassTimes> in_line_pass_times(const ParallelLayout& layout, const StagePlan& plan,
                                               const CommunicationPlan& comm);

/// Builds the graph; `cosim` (null: analytical) gets every communication task's calls, all
/// sibling replicas' too with `every_replica`.
IterationGraph build_iteration_graph(const ParallelLayout& layout, const IterationOptions& options, const GpuSpec& gpu,
                                     const ComputeModel& cm, const StagePlan& plan, CommunicationPlan& comm,
                                     CoSimulation* cosim, bool every_replica);

}  // namespace parallax::iteration_detail
