// Fuzz target: training workloads (workload_loader.h) against the bundled models and presets.
#include "fuzz_support.h"
#include "training/workload_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = parallax::fuzz::as_file(data, size);
  parallax::fuzz::only_input_errors([&] {
    parallax::load_training_workload(path, PARALLAX_SOURCE_DIR "/workloads/models", PARALLAX_SOURCE_DIR "/topologies");
  });
  return 0;
}
