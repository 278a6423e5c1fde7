// What several `parallax` commands share: where the bundled models and topology presets are,
// a progress bar, and running gnuplot on a script for --plot.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "units/units.h"

namespace parallax::cli {

/// workloads/models and topologies of the source tree the binary was built from.
const std::string& bundled_models_dir();
const std::string& topologies_dir();

/// "12.3 GiB".
std::string gib(Bytes b);

/// The help of --sustained-fraction, its default read from the compute model.
std::string sustained_fraction_help();
/// How train's and validate's reports name AttentionModel::kCudnn where it applies.
inline constexpr const char* kCudnnAttentionNote = "fused attention by the form fitted to cuDNN's rates";

/// A progress bar on stderr, "[####    ] 120 of 480 <what>", cleared when done reaches total;
/// empty (nothing printed) when stderr is not a terminal, so logs and pipes stay clean.
std::function<void(size_t done, size_t total)> progress_bar(std::string what);

/// InputError (on --plot) when gnuplot is not installed: for a command to check before long work.
void require_gnuplot();

/// Writes `script` to `script_file` and runs gnuplot on it. InputError (on --plot) when gnuplot
/// is not installed; std::runtime_error when it fails.
void run_gnuplot(const std::string& script_file, const std::string& script);

}  // namespace parallax::cli
