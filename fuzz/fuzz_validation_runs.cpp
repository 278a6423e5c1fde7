// Fuzz target: published training runs for `parallax validate` (published_runs.h).
#include "fuzz_support.h"
#include "training/published_runs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = parallax::fuzz::as_file(data, size);
  parallax::fuzz::only_input_errors([&] { parallax::read_published_runs(path); });
  return 0;
}
