// Fuzz target: serving request traces, Azure / Mooncake / BurstGPT / Parallax JSON lines
// (trace_reader.h).
#include "fuzz_support.h"
#include "serving/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  parallax::fuzz::only_input_errors([&] { parallax::parse_trace(parallax::fuzz::as_text(data, size), "fuzz.csv"); });
  return 0;
}
