// Fuzz target: topology files, compact and explicit (topology_loader.h).
#include "fuzz_support.h"
#include "io/json_reader.h"
#include "topology/topology_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  parallax::fuzz::only_input_errors([&] {
    const nlohmann::json doc = parallax::parse_json_text(parallax::fuzz::as_text(data, size), "fuzz.json");
    parallax::topology_from_json(doc, "fuzz.json");
  });
  return 0;
}
