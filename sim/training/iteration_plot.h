// `parallax train --plot`: the data and gnuplot script of one iteration's picture. Left, each
// pipeline stage's iteration time as a stacked bar of where it went (RankBreakdown: compute, the
// exposed communication of each kind, offload copies, the pipeline bubble, idle after the
// pipeline's last backward): every bar is the iteration's length. Right, each stage's memory
// per GPU as a stacked bar (parameters, gradients, optimizer states, activations, communication
// buffers) against the GPU's memory. And the pipeline's schedule as it ran (pipeline.png): each
// stage's compute stream over the iteration, a box per pass (F, B, W, with its micro-batch),
// the picture of every pipeline-schedule paper, drawn from the simulated timeline.
#pragma once

#include <string>
#include <vector>

#include "training/iteration.h"

namespace parallax {

/// One line per stage: "stage compute tp cp ep pp dp offload bubble idle" in seconds, then
/// "params grads optimizer activations buffers" in GiB.
std::string iteration_breakdown_data(const IterationResult& result);

/// The script drawing `data_file` into `png`, titled by the lines of `title`; the GPU's memory
/// (GiB) as a line.
std::string iteration_breakdown_script(const IterationResult& result, const std::string& data_file,
                                       const std::string& png, const std::vector<std::string>& title);

/// One line per box of pipeline.png: "start_s stage width_s rgb label", a box being a run of
/// one pass's back-to-back tasks on a stage's compute stream (a whole pass, or its turns within
/// an overlapped pair), or of tasks outside the passes (the optimizer step: grey, unlabelled).
/// The label is the micro-batch (micro-batch.chunk with `chunks` > 1) where the box is wide
/// enough to hold it (at `label_width` of the iteration a character), else empty. Needs a
/// result of IterationOptions::keep_timeline; stages in order, each stage's boxes by start.
std::string pipeline_timeline_data(const IterationResult& result, int chunks, double label_width = 0.0045);

/// The script drawing `data_file` into `png`: stages down, time across, forward blue, input
/// gradients (or the whole backward) orange, weight gradients green.
std::string pipeline_timeline_script(const IterationResult& result, const std::string& data_file,
                                     const std::string& png, const std::vector<std::string>& title);

}  // namespace parallax
