// `parallax flows`: play a list of point-to-point flows on a topology with a chosen network
// model; print each flow's completion and the busiest links.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "io/atomic_file.h"
#include "io/input_error.h"
#include "network/flow_list.h"
#include "parallax/commands.h"
#include "parallax/text_table.h"
#include "topology/topology_loader.h"
#include "units/unit_parse.h"

namespace parallax::cli {
namespace {

struct FlowsOptions {
  std::string topology;
  std::string flows;
  std::string model = "flow";
  std::optional<int> nodes;
  std::string json;
  int top_links = 8;
};

std::string link_name(const Topology& topo, LinkId l) {
  const Link& link = topo.link(l);
  return topo.device(link.from).name + " -> " + topo.device(link.to).name;
}

// Each flow's endpoints, bytes, start, finish, duration and throughput: the table into `text`,
// the JSON returned.
nlohmann::ordered_json add_flow_table(const Topology& topo, const std::vector<FlowOutcome>& outcomes, std::string& text) {
  using A = TextTable::Align;
  TextTable table({"#", "label", "src", "dst", "bytes", "start", "finish", "duration", "throughput"},
                  {A::kRight, A::kLeft, A::kLeft, A::kLeft, A::kRight, A::kRight, A::kRight, A::kRight, A::kRight});
  nlohmann::ordered_json jflows = nlohmann::ordered_json::array();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const auto& f = outcomes[i];
    Time duration = f.finish - f.spec.start;
    Bandwidth tput = duration > Time::zero() ? achieved_bandwidth(f.spec.size, duration) : Bandwidth(0);
    table.add_row({std::to_string(i), f.spec.label, topo.device(f.spec.src).name, topo.device(f.spec.dst).name,
                   format_bytes(f.spec.size), format_time(f.spec.start), format_time(f.finish),
                   format_time(duration), format_bandwidth(tput)});
    jflows.push_back({{"label", f.spec.label},
                      {"src", topo.device(f.spec.src).name},
                      {"dst", topo.device(f.spec.dst).name},
                      {"bytes", f.spec.size.value()},
                      {"start_s", f.spec.start.seconds()},
                      {"finish_s", f.finish.seconds()},
                      {"duration_s", duration.seconds()},
                      {"throughput_Bps", tput.value()}});
  }
  text += table.render();
  return jflows;
}

// The `top` busiest links: bytes carried over what the link could have carried in the makespan.
// The table into `text`, the JSON returned.
nlohmann::ordered_json add_busiest_links(const Topology& topo, const NetworkModel& network, Time makespan, int top,
                                         std::string& text) {
  std::vector<std::pair<double, LinkId>> busy;
  for (uint32_t i = 0; i < topo.link_count(); ++i) {
    LinkId l{i};
    double b = network.link_bytes(l).value();
    if (b > 0) busy.emplace_back(b / (topo.link(l).bandwidth.value() * makespan.seconds()), l);
  }
  std::stable_sort(busy.begin(), busy.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (busy.size() > static_cast<size_t>(top)) busy.resize(static_cast<size_t>(top));
  text += "\nbusiest links (bytes carried / (bandwidth x makespan)):\n";
  using A = TextTable::Align;
  TextTable links({"link", "class", "per direction", "bytes", "utilisation"},
                  {A::kLeft, A::kLeft, A::kRight, A::kRight, A::kRight});
  nlohmann::ordered_json jlinks = nlohmann::ordered_json::array();
  for (auto [util, l] : busy) {
    const Link& link = topo.link(l);
    links.add_row({link_name(topo, l), to_string(link.link_class), format_bandwidth(link.bandwidth),
                   format_bytes(network.link_bytes(l)), strprintf("%.1f%%", 100.0 * util)});
    jlinks.push_back({{"link", link_name(topo, l)},
                      {"class", to_string(link.link_class)},
                      {"bytes", network.link_bytes(l).value()},
                      {"utilisation", util}});
  }
  text += links.render();
  return jlinks;
}

void run_flows(const FlowsOptions& o) {
  Topology topo = load_topology(o.topology, TopologyLoadOptions{o.nodes});
  Router router(topo);
  auto flows = load_flow_list(o.flows, router);
  Engine engine;
  std::unique_ptr<NetworkModel> network;
  try {
    network = make_network_model(o.model, engine, topo, router);
  } catch (const std::invalid_argument& e) {
    throw InputError("", "--model", e.what());
  }
  spdlog::info("running {} flows on {} ({} GPUs) with the {} model", flows.size(), topo.info().name,
               topo.gpu_count(), o.model);
  auto outcomes = run_flow_list(flows, engine, *network);

  Time makespan;
  for (const auto& f : outcomes) makespan = std::max(makespan, f.finish);
  std::string text = "flows on " + topo.info().name + " (" + std::to_string(topo.node_count()) + " nodes, " +
                     std::to_string(topo.gpu_count()) + " GPUs), network model: " + std::string(network->name()) + "\n\n";
  nlohmann::ordered_json jflows = add_flow_table(topo, outcomes, text);
  text += "\nmakespan: " + format_time(makespan) + "\n";
  nlohmann::ordered_json jlinks = add_busiest_links(topo, *network, makespan, o.top_links, text);
  if (!o.json.empty()) {
    nlohmann::ordered_json j;
    j["topology"] = topo.info().name;
    j["nodes"] = topo.node_count();
    j["model"] = std::string(network->name());
    j["makespan_s"] = makespan.seconds();
    j["flows"] = std::move(jflows);
    j["busiest_links"] = std::move(jlinks);
    write_file_atomically(o.json, j.dump(2) + "\n");
  }
  std::fputs(text.c_str(), stdout);
}

}  // namespace

void add_flows_command(CLI::App& app) {
  auto opts = std::make_shared<FlowsOptions>();
  auto* cmd = app.add_subcommand("flows", "run point-to-point flows on a topology and report their completion times");
  cmd->add_option("--topology", opts->topology, "topology JSON file")->required();
  cmd->add_option("--flows", opts->flows, "flow list JSON file")->required();
  std::string models;
  for (const auto& m : network_models()) models += "\n  " + m.name + ": " + m.description;
  cmd->add_option("--model", opts->model, "network model:" + models)->capture_default_str();
  cmd->add_option("--nodes", opts->nodes, "node count (compact topologies)")->check(CLI::PositiveNumber);
  cmd->add_option("--json", opts->json, "write the results as JSON to this file");
  cmd->add_option("--top-links", opts->top_links, "how many of the busiest links to list")->capture_default_str();
  cmd->callback([opts] { run_flows(*opts); });
}

}  // namespace parallax::cli
