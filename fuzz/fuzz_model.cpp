// Fuzz target: model files, Hugging Face config.json and Parallax's own block (model_loader.h).
#include "fuzz_support.h"
#include "model/model_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = parallax::fuzz::as_file(data, size);
  parallax::fuzz::only_input_errors([&] { parallax::load_model_file(path); });
  return 0;
}
