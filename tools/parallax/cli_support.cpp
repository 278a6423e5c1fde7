// Shared pieces of the commands (cli_support.h).
#include "parallax/cli_support.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "compute/compute_model.h"
#include "io/atomic_file.h"
#include "io/input_error.h"
#include "io/text_format.h"

namespace parallax::cli {

const std::string& bundled_models_dir() {
  static const std::string dir = std::string(PARALLAX_SOURCE_DIR) + "/workloads/models";
  return dir;
}

const std::string& topologies_dir() {
  static const std::string dir = std::string(PARALLAX_SOURCE_DIR) + "/topologies";
  return dir;
}

std::string gib(Bytes b) { return format_text("%.1f GiB", b.value() / (1024.0 * 1024 * 1024)); }

// The default comes from the compute model, so that the help never says another figure.
std::string sustained_fraction_help() {
  return format_text("fraction of their stand-alone speed that kernels keep in a training step (default %.2f; 1 = the "
                     "kernel model alone)",
                     ComputeModelOptions{}.sustained_fraction);
}

std::function<void(size_t, size_t)> progress_bar(std::string what) {
  if (isatty(STDERR_FILENO) == 0) return {};
  return [what = std::move(what)](size_t done, size_t total) {
    const size_t width = 40;
    const size_t filled = total ? width * std::min(done, total) / total : width;
    std::fprintf(stderr, "\r  [%s%s] %zu of %zu %s ", std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), done, total, what.c_str());
    if (done >= total) std::fprintf(stderr, "\r%100s\r", "");
  };
}

void require_gnuplot() {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    throw InputError("", "--plot", "gnuplot is not installed (Debian: apt-get install gnuplot-nox)");
  }
}

void run_gnuplot(const std::string& script_file, const std::string& script) {
  require_gnuplot();
  write_file_atomically(script_file, script);
  if (std::system(("gnuplot '" + script_file + "'").c_str()) != 0) {
    throw std::runtime_error("gnuplot failed on " + script_file);
  }
}

}  // namespace parallax::cli
