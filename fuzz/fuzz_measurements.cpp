// Fuzz target: the calibration harness's measurement JSON lines (measurement_set.h).
#include "fuzz_support.h"
#include "measurement_set.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  parallax::fuzz::only_input_errors(
      [&] { parallax::parse_measurement_lines(parallax::fuzz::as_text(data, size), "fuzz.jsonl"); });
  return 0;
}
