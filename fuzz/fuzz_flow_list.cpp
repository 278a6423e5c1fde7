// Fuzz target: flow lists for `parallax flows` (flow_list.h), routed on a two-node DGX H100.
#include "fuzz_support.h"
#include "network/flow_list.h"
#include "topology/router.h"
#include "topology/topology_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const parallax::Topology topo =
      parallax::load_topology(PARALLAX_SOURCE_DIR "/topologies/dgx-h100.json", parallax::TopologyLoadOptions(2));
  static const parallax::Router router(topo);
  const std::string path = parallax::fuzz::as_file(data, size);
  parallax::fuzz::only_input_errors([&] { parallax::load_flow_list(path, router); });
  return 0;
}
