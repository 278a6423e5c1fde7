// `parallax train --plot`: the data and gnuplot script of one iteration's picture. Left, each
// pipeline stage's iteration time as a stacked bar of where it went (RankBreakdown: compute, the
// exposed communication of each kind, offload copies, the pipeline bubble, idle after the
// pipeline's last backward): every bar is the iteration's length. Right, each stage's memory
// per GPU as a stacked bar (parameters, gradients, optimizer states, activations, communication
// buffers) against the GPU's memory.
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

}  // namespace parallax
