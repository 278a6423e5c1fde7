// Fuzz target: nccl-tests output (nccl_tests_log.h).
#include "collectives/nccl_tests_log.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  parallax::fuzz::only_input_errors(
      [&] { parallax::parse_nccl_tests_log(parallax::fuzz::as_text(data, size), "fuzz.txt"); });
  return 0;
}
