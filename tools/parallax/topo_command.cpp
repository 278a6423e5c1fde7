// `parallax topo show`: what a topology file describes, in the figures people compare
// clusters by: link classes, per-GPU injection, bisection bandwidth, diameter.
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "parallax/commands.h"
#include "parallax/text_table.h"
#include "topology/topology_loader.h"
#include "topology/topology_metrics.h"
#include "units/unit_parse.h"

namespace parallax::cli {
namespace {

struct TopoShowOptions {
  std::string file;
  std::optional<int> nodes;
  std::string dot;
  std::string json;
};

std::string describe_devices(const Topology& topo) {
  std::map<std::string, int> counts;
  std::vector<std::string> order;
  for (uint32_t i = 0; i < topo.device_count(); ++i) {
    const Device& d = topo.device(DeviceId{i});
    std::string what = d.kind == DeviceKind::kGpu      ? "GPU"
                       : d.kind == DeviceKind::kNic    ? "NIC"
                       : d.kind == DeviceKind::kCpu    ? "CPU"
                                                       : std::string(to_string(d.switch_kind)) + " switch";
    if (!counts.count(what)) order.push_back(what);
    ++counts[what];
  }
  std::string out;
  for (const auto& w : order) {
    std::string plural = w.back() == 'h' ? "es" : "s";
    out += (out.empty() ? "" : ", ") + std::to_string(counts[w]) + " " + w + (counts[w] > 1 ? plural : "");
  }
  return out;
}

std::string gpu_spec_line(const GpuSpec& g) {
  return "GPU " + g.name + ": fp32 " + format_flop_rate(g.fp32) +
         (g.tf32.value() > 0 ? ", tf32 " + format_flop_rate(g.tf32) : "") + ", bf16 " + format_flop_rate(g.bf16) +
         (g.fp16 != g.bf16 ? ", fp16 " + format_flop_rate(g.fp16) : "") +
         (g.fp8.value() > 0 ? ", fp8 " + format_flop_rate(g.fp8) : "") +
         (g.fp4.value() > 0 ? ", fp4 " + format_flop_rate(g.fp4) : "") + " (dense); memory " + format_bytes(g.memory) +
         " at " + format_bandwidth(g.memory_bandwidth) + "\n";
}

// What the figures of a topology are, computed once for the text and the JSON.
struct TopologyFigures {
  std::vector<LinkClassSummary> links;
  InjectionBandwidth inject;
  Bandwidth bisection;
  int diameter = 0;
};

// Injection, bisection (max flow between the two halves of the GPUs), diameter and in-network
// reduction.
std::string figures_text(const Topology& topo, const TopologyFigures& f) {
  std::string text = "\nper-GPU injection (per direction): scale-up " + format_bandwidth(f.inject.scale_up) +
                     ", scale-out " +
                     (f.inject.scale_out.value() > 0 ? format_bandwidth(f.inject.scale_out) : "none (one node)") + "\n";
  size_t half = topo.gpu_count() / 2;
  if (half == 0) {
    text += "bisection bandwidth: none (a single GPU)\n";
  } else {
    text += "bisection bandwidth: " + format_bandwidth(f.bisection) + " per direction (max flow, GPUs 0-" +
            std::to_string(half - 1) + " -> " + std::to_string(half) + "-" + std::to_string(2 * half - 1) + ")\n";
  }
  text += "diameter: " + std::to_string(f.diameter) + " hops between GPUs\n";
  bool nvls = false, sharp = false;
  for (uint32_t i = 0; i < topo.device_count(); ++i) {
    nvls |= topo.device(DeviceId{i}).nvls;
    sharp |= topo.device(DeviceId{i}).sharp;
  }
  text += std::string("in-network reduction: NVLS ") + (nvls ? "yes" : "no") + ", SHARP " + (sharp ? "yes" : "no") + "\n";
  return text;
}

std::string topology_text(const Topology& topo, const std::string& file, const TopologyFigures& f) {
  std::string text = topo.info().name + " (" + file + "): " + std::to_string(topo.node_count()) + " node" +
                     (topo.node_count() > 1 ? "s" : "") + ", " + std::to_string(topo.gpu_count()) + " GPUs\n";
  if (!topo.info().description.empty()) text += "  " + topo.info().description + "\n";
  text += "\ndevices: " + describe_devices(topo) + "\n";
  for (const GpuSpec& g : topo.gpu_specs()) text += gpu_spec_line(g);
  for (const NodeGroup& g : topo.info().node_groups) {
    const std::string gpu = g.alone->gpu_spec_of(g.alone->gpus().front()).name;
    text += "node group " + g.name + ": node" + (g.nodes > 1 ? "s " : " ") + std::to_string(g.first_node) +
            (g.nodes > 1 ? "-" + std::to_string(g.first_node + g.nodes - 1) : std::string()) + ", " + gpu + "\n";
  }
  text += "\nlink classes:\n";
  TextTable table({"class", "per direction", "latency", "cables"},
                  {TextTable::Align::kLeft, TextTable::Align::kRight, TextTable::Align::kRight,
                   TextTable::Align::kRight});
  for (const auto& l : f.links) {
    table.add_row({to_string(l.link_class), format_bandwidth(l.bandwidth), format_time(l.latency),
                   std::to_string(l.cables)});
  }
  text += table.render() + figures_text(topo, f);
  if (!topo.info().sources.empty()) {
    text += "\nsources:\n";
    for (const auto& s : topo.info().sources) text += "  - " + s + "\n";
  }
  return text;
}

nlohmann::ordered_json topology_json(const Topology& topo, const std::string& file, const TopologyFigures& f) {
  nlohmann::ordered_json j;
  j["name"] = topo.info().name;
  j["file"] = file;
  j["nodes"] = topo.node_count();
  j["gpus"] = topo.gpu_count();
  j["devices"] = topo.device_count();
  if (!topo.info().node_groups.empty()) {
    auto& groups = j["node_groups"] = nlohmann::ordered_json::array();
    for (const NodeGroup& g : topo.info().node_groups) {
      groups.push_back({{"name", g.name},
                        {"first_node", g.first_node},
                        {"nodes", g.nodes},
                        {"gpu", g.alone->gpu_spec_of(g.alone->gpus().front()).name}});
    }
  }
  auto& lc = j["link_classes"] = nlohmann::ordered_json::array();
  for (const auto& l : f.links) {
    lc.push_back({{"class", to_string(l.link_class)},
                  {"bandwidth_per_direction_Bps", l.bandwidth.value()},
                  {"latency_s", l.latency.seconds()},
                  {"cables", l.cables}});
  }
  j["injection_per_gpu_Bps"] = {{"scale_up", f.inject.scale_up.value()}, {"scale_out", f.inject.scale_out.value()}};
  j["bisection_Bps"] = f.bisection.value();
  j["diameter_hops"] = f.diameter;
  j["sources"] = topo.info().sources;
  return j;
}

void run_topo_show(const TopoShowOptions& o) {
  Topology topo = load_topology(o.file, TopologyLoadOptions{o.nodes});
  const TopologyFigures f{summarize_links(topo), injection_bandwidth(topo), bisection_bandwidth(topo), gpu_diameter(topo)};
  const std::string text = topology_text(topo, o.file, f);
  if (!o.dot.empty()) write_file_atomically(o.dot, to_dot(topo));
  if (!o.json.empty()) write_file_atomically(o.json, topology_json(topo, o.file, f).dump(2) + "\n");
  std::fputs(text.c_str(), stdout);
}

}  // namespace

void add_topo_command(CLI::App& app) {
  auto* topo = app.add_subcommand("topo", "inspect topology files");
  topo->require_subcommand(1);
  auto opts = std::make_shared<TopoShowOptions>();
  auto* show = topo->add_subcommand("show", "print devices, link classes, injection and bisection bandwidth, diameter");
  show->add_option("file", opts->file, "topology JSON file")->required();
  show->add_option("--nodes", opts->nodes, "node count (compact topologies)")->check(CLI::PositiveNumber);
  show->add_option("--dot", opts->dot, "write a Graphviz rendering to this file");
  show->add_option("--json", opts->json, "write the figures as JSON to this file");
  show->callback([opts] { run_topo_show(*opts); });
}

}  // namespace parallax::cli
