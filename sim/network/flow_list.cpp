#include "network/flow_list.h"

#include "io/json_reader.h"

namespace parallax {
namespace {

DeviceId read_endpoint(JsonReader r, const Topology& topo) {
  if (r.is_number()) {
    int64_t rank = r.as_int();
    if (rank < 0 || static_cast<size_t>(rank) >= topo.gpu_count()) {
      r.fail("GPU rank " + std::to_string(rank) + " is out of range (the topology has " +
             std::to_string(topo.gpu_count()) + " GPUs)");
    }
    return topo.gpus()[static_cast<size_t>(rank)];
  }
  std::string name = r.as_string();
  auto id = topo.find_device(name);
  if (!id) r.fail("no device named \"" + name + "\" in the topology");
  if (topo.device(*id).kind == DeviceKind::kNic) {
    r.fail("\"" + name + "\" is a NIC, which only forwards data: name a GPU, CPU or switch");
  }
  return *id;
}

}  // namespace

std::vector<FlowSpec> flow_list_from_json(const nlohmann::json& doc, const std::string& file,
                                          const Router& router) {
  const Topology& topo = router.topology();
  JsonReader root(doc, file);
  if (!root.is_object()) root.fail("a flow list must be a JSON object with a \"flows\" array");
  if (auto d = root.find("description")) d->as_string();
  std::vector<FlowSpec> out;
  for (auto& f : root.at("flows").elements()) {
    FlowSpec s;
    if (auto l = f.find("label")) s.label = l->as_string();
    s.src = read_endpoint(f.at("src"), topo);
    s.dst = read_endpoint(f.at("dst"), topo);
    if (router.hops(s.src, s.dst) == kUnreachable) {
      f.fail("no route from \"" + topo.device(s.src).name + "\" to \"" + topo.device(s.dst).name +
             "\" that does not pass through a GPU (GPUs do not forward traffic)");
    }
    s.size = f.at("bytes").as_bytes();
    if (auto st = f.find("start")) s.start = st->as_time();
    f.finish();
    out.push_back(std::move(s));
  }
  root.finish();
  if (out.empty()) root.fail_at("flows", "the flow list is empty");
  return out;
}

std::vector<FlowSpec> load_flow_list(const std::string& path, const Router& router) {
  return flow_list_from_json(load_json_file(path), path, router);
}

std::vector<FlowOutcome> run_flow_list(const std::vector<FlowSpec>& flows, Engine& engine,
                                       NetworkModel& network) {
  std::vector<FlowOutcome> out(flows.size());
  for (size_t i = 0; i < flows.size(); ++i) {
    out[i].spec = flows[i];
    engine.schedule_at(flows[i].start, [&, i] {
      out[i].flow_id = network.start_flow(flows[i].src, flows[i].dst, flows[i].size,
                                          [&out, i](const FlowCompletion& c) { out[i].finish = c.finish; });
    });
  }
  engine.run();
  return out;
}

}  // namespace parallax
