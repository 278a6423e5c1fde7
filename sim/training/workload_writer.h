// A layout written back as a workload file's parallel block (docs/workload-format.md): the
// inverse of the workload loader's reading, for `search --emit` and `validate --emit-workload`.
#pragma once

#include <nlohmann/json.hpp>

#include "training/parallel_layout.h"

namespace parallax {

/// The workload file's parallel block for `layout`: every key the loader reads whose value is
/// not its default, and the main ones (tp, pp, dp, batches, recomputation, dtype, schedule)
/// always; loaded back, the same layout.
nlohmann::ordered_json parallel_block(const ParallelLayout& layout);

}  // namespace parallax
