// Fuzz target: measured scaling points, `parallax scale --measured` CSV (measured_scaling.h).
#include "fuzz_support.h"
#include "planning/measured_scaling.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  parallax::fuzz::only_input_errors(
      [&] { parallax::parse_measured_scaling(parallax::fuzz::as_text(data, size), "fuzz.csv"); });
  return 0;
}
