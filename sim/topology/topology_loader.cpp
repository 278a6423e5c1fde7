// Compact-form generation follows docs/topology-format.md: per node, GPUs on an NVSwitch (one
// crossbar vertex) or a PCIe tree; NICs attached to GPUs or PCIe switches; then a one- or
// two-tier fat tree, rail-optimized or not, with the leaf uplinks cut by the oversubscription.
#include "topology/topology_loader.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "io/json_reader.h"

namespace parallax {
namespace {

struct LinkSpec {
  Bandwidth bandwidth;  // per direction
  Time latency;
};

// A link object: exactly one of bandwidth_per_direction / bandwidth_bidirectional, and latency.
Time read_non_negative_time(JsonReader& r) {
  const Time t = r.as_time();
  if (t < Time::zero()) r.fail("must not be negative");
  return t;
}

LinkSpec read_link_spec(JsonReader& r, bool latency_required = true) {
  auto per_dir = r.find("bandwidth_per_direction");
  auto bidir = r.find("bandwidth_bidirectional");
  if (per_dir && bidir) {
    r.fail("give either bandwidth_per_direction or bandwidth_bidirectional, not both");
  }
  if (!per_dir && !bidir) {
    r.fail("missing bandwidth: give bandwidth_per_direction (one direction of a full-duplex link) "
           "or bandwidth_bidirectional (the datasheet's sum of both directions)");
  }
  LinkSpec s;
  s.bandwidth = per_dir ? require_positive(*per_dir, per_dir->as_bandwidth())
                        : require_positive(*bidir, bidir->as_bandwidth()) / 2.0;
  if (auto lat = r.find("latency")) s.latency = lat->as_time();
  else if (latency_required) r.fail("missing required key \"latency\"");
  return s;
}

int read_positive_int(JsonReader r, int64_t max = 1 << 24) {
  int64_t v = r.as_int();
  if (v <= 0) r.fail("must be a positive integer, found " + std::to_string(v));
  if (v > max) r.fail("is too large (at most " + std::to_string(max) + "), found " + std::to_string(v));
  return static_cast<int>(v);
}

GpuSpec read_gpu_spec(JsonReader r) {
  GpuSpec g;
  g.name = r.at("name").as_string();
  JsonReader peak = r.at("peak");
  g.fp32 = require_positive(peak.at("fp32"), peak.at("fp32").as_flop_rate());
  g.bf16 = require_positive(peak.at("bf16"), peak.at("bf16").as_flop_rate());
  g.fp16 = g.bf16;
  if (auto v = peak.find("fp16")) g.fp16 = require_positive(*v, v->as_flop_rate());
  if (auto v = peak.find("tf32")) g.tf32 = require_positive(*v, v->as_flop_rate());
  if (auto v = peak.find("fp8")) g.fp8 = require_positive(*v, v->as_flop_rate());
  if (auto v = peak.find("fp4")) g.fp4 = require_positive(*v, v->as_flop_rate());
  peak.finish();
  if (auto achievable = r.find("achievable_matmul")) {
    // A measured rate above the datasheet's would be a unit mistake or a misread table.
    const auto read = [&](const char* key, FlopRate peak_rate) {
      auto v = achievable->find(key);
      if (!v) return FlopRate{};
      const FlopRate rate = require_positive(*v, v->as_flop_rate());
      if (!(peak_rate.value() > 0)) v->fail(std::string("no \"peak\" ") + key + " figure to measure against");
      if (rate > peak_rate) v->fail(std::string("exceeds the datasheet peak (\"peak\": ") + key + ")");
      return rate;
    };
    g.achievable_bf16 = read("bf16", g.bf16);
    g.achievable_fp8 = read("fp8", g.fp8);
    g.achievable_fp4 = read("fp4", g.fp4);
    achievable->finish();
  }
  g.memory = require_positive(r.at("memory"), r.at("memory").as_bytes());
  g.memory_bandwidth = require_positive(r.at("memory_bandwidth"), r.at("memory_bandwidth").as_bandwidth());
  if (auto v = r.find("sms")) g.sms = read_positive_int(*v, 4096);
  if (auto v = r.find("host_bandwidth")) g.host_bandwidth = require_positive(*v, v->as_bandwidth());
  if (auto v = r.find("exponentials")) g.exponentials = require_positive(*v, v->as_operation_rate());
  if (auto v = r.find("architecture")) {
    g.architecture = v->as_string();
    static const char* const kKnown[] = {"volta", "turing", "ampere", "ada", "hopper", "blackwell"};
    if (std::find(std::begin(kKnown), std::end(kKnown), g.architecture) == std::end(kKnown)) {
      v->fail("expected volta, turing, ampere, ada, hopper or blackwell");
    }
  }
  r.finish();
  return g;
}


// Bounded so that a collective cannot turn into billions of packets, nor a buffer into more than
// any switch port holds.
void read_packets(JsonReader& r, TopologyInfo& info) {
  if (auto v = r.find("mtu")) {
    const Bytes mtu = v->as_bytes();
    if (!(mtu.value() >= 64.0 && mtu.value() <= 65536.0)) v->fail("an MTU of 64 B to 64 KiB");
    info.packet_mtu = mtu;
  }
  if (auto v = r.find("link_buffer")) {
    const Bytes buffer = v->as_bytes();
    const double mtu = info.packet_mtu.value_or(kDefaultPacketMtu).value();
    if (!(buffer.value() >= mtu && buffer.value() <= 1073741824.0)) {
      v->fail("a buffer of one MTU (" + std::to_string(static_cast<int64_t>(mtu)) + " B) to 1 GiB");
    }
    info.packet_link_buffer = buffer;
  }
  if (auto v = r.find("routing")) {
    const std::string routing = v->as_string();
    if (routing != "ecmp" && routing != "adaptive") v->fail("expected ecmp or adaptive");
    info.packet_adaptive_routing = routing == "adaptive";
  }
  r.finish();
}

void read_info(JsonReader& root, Topology& topo, const std::string& file) {
  auto& info = topo.info();
  info.file = file;
  info.name = root.at("name").as_string();
  if (auto d = root.find("description")) info.description = d->as_string();
  if (auto v = root.find("nccl_version")) info.nccl_version = v->as_string();
  if (auto packets = root.find("packets")) read_packets(*packets, info);
  if (auto s = root.find("sources")) {
    for (auto& e : s->elements()) info.sources.push_back(e.as_string());
  }
  // Written by `parallax calibrate fit`: the datasheet topology stays as it is, and the fitted
  // parameters ride along for the layers that use them. Only the values are read here; the
  // provenance and residuals are for people.
  if (auto cal = root.find("calibration")) {
    if (auto params = cal->find("parameters")) {
      for (auto& p : params->elements()) {
        const std::string name = p.at("name").as_string();
        const bool identifiable = p.find("identifiable") ? p.at("identifiable").as_bool() : true;
        // A parameter the measurements could not separate from the others was taken as 0.
        info.calibration[name] = identifiable ? p.at("value_si").as_number() : 0.0;
      }
    }
    if (auto regimes = cal->find("regimes")) {
      for (auto& r : regimes->elements()) info.calibration[r.at("name").as_string()] = r.at("from_bytes").as_number();
    }
  }
}

// ---------------------------------------------------------------- compact form

enum class ScaleUp { kNVSwitch, kPcie, kNone };

struct PcieTree {
  int sockets = 1;
  int switches_per_socket = 1;
  LinkSpec gpu_link, switch_uplink, inter_socket;
};

struct FatTree {
  int tiers = 2;
  bool rail_optimized = true;
  int nodes_per_leaf = 32;
  double oversubscription = 1.0;
  std::optional<int> spines;
  Time link_latency;
  bool sharp = false;
};

// A device's node index: nodes are numbered from 0, no more of them than a topology may have.
int device_node(JsonReader v) {
  const int64_t n = v.as_int();
  if (n < 0 || n >= kMaxNodes) v.fail("must be a node index from 0 to " + std::to_string(kMaxNodes - 1));
  return static_cast<int>(n);
}

// The compact form's "node" block as read, and as far as a job uses it.
struct CompactNode {
  int gpus = 0;
  int spec = -1;  ///< the GPU spec's index in the topology
  ScaleUp scale_up = ScaleUp::kNone;
  LinkSpec nvlink;
  bool nvls = false;
  PcieTree pcie;
  int nics = 0;
  LinkSpec nic_line, nic_attach;
  Time nic_reported_latency;
};

void read_pcie_tree(JsonReader& up, PcieTree& pcie) {
  pcie.sockets = read_positive_int(up.at("sockets"), 64);
  pcie.switches_per_socket = read_positive_int(up.at("switches_per_socket"), 64);
  auto gl = up.at("gpu_link");
  pcie.gpu_link = read_link_spec(gl);
  gl.finish();
  auto su = up.at("switch_uplink");
  pcie.switch_uplink = read_link_spec(su);
  su.finish();
  if (pcie.sockets > 1) {
    auto is = up.at("inter_socket");
    pcie.inter_socket = read_link_spec(is);
    is.finish();
  } else if (auto is = up.find("inter_socket")) {
    pcie.inter_socket = read_link_spec(*is);
    is->finish();
  }
}

void read_scale_up(JsonReader up, CompactNode& c) {
  std::string kind = up.at("kind").as_string();
  if (kind == "nvswitch") {
    c.scale_up = ScaleUp::kNVSwitch;
    c.nvlink = read_link_spec(up);
    if (auto v = up.find("nvls")) c.nvls = v->as_bool();
  } else if (kind == "pcie") {
    c.scale_up = ScaleUp::kPcie;
    read_pcie_tree(up, c.pcie);
  } else if (kind == "none") {
    c.scale_up = ScaleUp::kNone;
  } else {
    up.fail_at("kind", "unknown scale-up kind \"" + kind + "\" (expected nvswitch, pcie or none)");
  }
  up.finish();
}

// The node's NICs. A GPU without a host bandwidth of its own reaches host memory over the PCIe
// path its NIC hangs on.
void read_nics(JsonReader& n, CompactNode& c, GpuSpec& gpu_spec) {
  c.nics = read_positive_int(n.at("count"), 4096);
  c.nic_line = read_link_spec(n);
  if (auto r = n.find("reported_latency")) c.nic_reported_latency = read_non_negative_time(*r);
  auto attach = n.at("attach");
  c.nic_attach = read_link_spec(attach);
  attach.finish();
  n.finish();
  if (!(gpu_spec.host_bandwidth.value() > 0)) gpu_spec.host_bandwidth = c.nic_attach.bandwidth;
}

CompactNode read_compact_node(JsonReader& root, JsonReader node, int nodes, Topology& topo) {
  CompactNode c;
  c.gpus = read_positive_int(node.at("gpus"), 4096);
  if (int64_t{nodes} * c.gpus > kMaxGpus) {
    root.fail_at("nodes", std::to_string(nodes) + " nodes of " + std::to_string(c.gpus) + " GPUs exceed the " +
                              std::to_string(kMaxGpus) + " GPUs a topology may have");
  }
  GpuSpec gpu_spec = read_gpu_spec(node.at("gpu"));
  read_scale_up(node.at("scale_up"), c);
  if (auto n = node.find("nics")) read_nics(*n, c, gpu_spec);
  c.spec = topo.add_gpu_spec(gpu_spec);
  node.finish();
  return c;
}

// A job on part of each node: the GPUs it uses, and their NICs — their share when every GPU has
// its own, else those they map to.
void take_job_share(JsonReader& root, CompactNode& c, int used) {
  if (used == c.gpus) return;
  if (used < 1 || used > c.gpus) {
    root.fail_at("node", "a job uses 1 to " + std::to_string(c.gpus) + " GPUs of each node, not " + std::to_string(used));
  }
  if (c.scale_up == ScaleUp::kPcie) root.fail_at("node", "part of a PCIe node is not modelled (its switch tree is the whole node's)");
  c.nics = c.nics >= c.gpus ? std::max(1, c.nics * used / c.gpus) : std::min(c.nics, used);
  c.gpus = used;
}

FatTree read_fat_tree(JsonReader& net) {
  FatTree tree;
  std::string nk = net.at("kind").as_string();
  if (nk != "fat_tree") net.fail_at("kind", "unknown network kind \"" + nk + "\" (expected fat_tree)");
  tree.tiers = read_positive_int(net.at("tiers"), 2);
  if (auto v = net.find("rail_optimized")) tree.rail_optimized = v->as_bool();
  if (auto v = net.find("nodes_per_leaf")) tree.nodes_per_leaf = read_positive_int(*v, kMaxNodes);
  if (auto v = net.find("oversubscription")) {
    tree.oversubscription = v->as_ratio();
    if (tree.oversubscription < 1.0) v->fail("oversubscription below 1:1 is not a fat tree");
  }
  if (auto v = net.find("spines")) tree.spines = read_positive_int(*v, 1 << 16);
  tree.link_latency = net.at("link_latency").as_time();
  if (auto v = net.find("sharp")) tree.sharp = v->as_bool();
  net.finish();
  return tree;
}

// A node's PCIe tree: its CPU sockets, linked pairwise, their switches, and the GPUs spread over
// the switches in order. Returns the switches.
std::vector<DeviceId> add_pcie_tree(Topology& topo, const CompactNode& c, const std::string& p, int n,
                                    const std::vector<DeviceId>& gpu_ids) {
  const PcieTree& pcie = c.pcie;
  std::vector<DeviceId> cpus;
  for (int s = 0; s < pcie.sockets; ++s) {
    cpus.push_back(topo.add_device(Device{p + "cpu" + std::to_string(s), DeviceKind::kCpu,
                                          SwitchKind::kNone, n, s, -1, false, false, {}}));
  }
  for (int a = 0; a < pcie.sockets; ++a) {
    for (int b = a + 1; b < pcie.sockets; ++b) {
      topo.add_link(cpus[static_cast<size_t>(a)], cpus[static_cast<size_t>(b)], LinkClass::kCpu,
                    pcie.inter_socket.bandwidth, pcie.inter_socket.latency);
    }
  }
  std::vector<DeviceId> switches;
  int total = pcie.sockets * pcie.switches_per_socket;
  for (int j = 0; j < total; ++j) {
    DeviceId sw = topo.add_device(Device{p + "pcie" + std::to_string(j), DeviceKind::kSwitch,
                                         SwitchKind::kPcie, n, j, -1, false, false, {}});
    topo.add_link(sw, cpus[static_cast<size_t>(j / pcie.switches_per_socket)], LinkClass::kPcie,
                  pcie.switch_uplink.bandwidth, pcie.switch_uplink.latency);
    switches.push_back(sw);
  }
  for (int i = 0; i < c.gpus; ++i) {
    // GPU i on switch floor(i * switches / gpus).
    auto j = static_cast<size_t>(static_cast<int64_t>(i) * total / c.gpus);
    topo.add_link(gpu_ids[static_cast<size_t>(i)], switches[j], LinkClass::kPcie, pcie.gpu_link.bandwidth,
                  pcie.gpu_link.latency);
  }
  return switches;
}

// A node's NICs: on its PCIe switches in turn, one per GPU, or shared by the GPUs in turn.
std::vector<DeviceId> add_node_nics(Topology& topo, const CompactNode& c, const std::string& p, int n,
                                    const std::vector<DeviceId>& gpu_ids, const std::vector<DeviceId>& pcie_switches) {
  const LinkSpec& at = c.nic_attach;
  std::vector<DeviceId> nics;
  for (int k = 0; k < c.nics; ++k) {
    DeviceId nic = topo.add_device(Device{p + "nic" + std::to_string(k), DeviceKind::kNic, SwitchKind::kNone, n, k,
                                          -1, false, false, c.nic_reported_latency});
    nics.push_back(nic);
    if (c.scale_up == ScaleUp::kPcie) {
      topo.add_link(nic, pcie_switches[static_cast<size_t>(k) % pcie_switches.size()], LinkClass::kPcie,
                    at.bandwidth, at.latency);
    } else if (c.nics >= c.gpus) {
      topo.add_link(gpu_ids[static_cast<size_t>(k % c.gpus)], nic, LinkClass::kPcie, at.bandwidth, at.latency);
    }
  }
  if (c.scale_up != ScaleUp::kPcie && c.nics < c.gpus) {
    for (int i = 0; i < c.gpus; ++i) {
      topo.add_link(gpu_ids[static_cast<size_t>(i)], nics[static_cast<size_t>(i * c.nics / c.gpus)], LinkClass::kPcie,
                    at.bandwidth, at.latency);
    }
  }
  return nics;
}

// Node n's GPUs, scale-up fabric and (with more than one node) NICs; returns the NICs.
std::vector<DeviceId> add_node(Topology& topo, const CompactNode& c, int n, bool with_nics) {
  std::string p = "n" + std::to_string(n) + ".";
  std::vector<DeviceId> gpu_ids;
  for (int i = 0; i < c.gpus; ++i) {
    gpu_ids.push_back(topo.add_device(Device{p + "gpu" + std::to_string(i), DeviceKind::kGpu,
                                             SwitchKind::kNone, n, i, c.spec, false, false, {}}));
  }
  std::vector<DeviceId> pcie_switches;
  if (c.scale_up == ScaleUp::kNVSwitch) {
    DeviceId sw = topo.add_device(Device{p + "nvswitch", DeviceKind::kSwitch, SwitchKind::kNVSwitch,
                                         n, -1, -1, c.nvls, false, {}});
    for (DeviceId g : gpu_ids) topo.add_link(g, sw, LinkClass::kNVLink, c.nvlink.bandwidth, c.nvlink.latency);
  } else if (c.scale_up == ScaleUp::kPcie) {
    pcie_switches = add_pcie_tree(topo, c, p, n, gpu_ids);
  }
  if (!with_nics) return {};
  return add_node_nics(topo, c, p, n, gpu_ids, pcie_switches);
}

// The fat tree over every node's NICs (node n of kinds[n], each NIC at its own line rate): one
// leaf (tiers 1), or leaves per rail (rail-optimized) and group of nodes_per_leaf nodes under
// spines whose uplinks the oversubscription cuts, leaves designed for the most NICs and the
// fastest line of any node.
void add_fat_tree(Topology& topo, const FatTree& tree, const std::vector<const CompactNode*>& kinds,
                  const std::vector<std::vector<DeviceId>>& node_nics) {
  const auto nodes = static_cast<int>(node_nics.size());
  int most_nics = 0;
  Bandwidth fastest;
  for (const CompactNode* k : kinds) {
    most_nics = std::max(most_nics, k->nics);
    fastest = std::max(fastest, k->nic_line.bandwidth);
  }
  auto add_switch = [&](const std::string& name, SwitchKind k) {
    return topo.add_device(Device{name, DeviceKind::kSwitch, k, -1, -1, -1, false, tree.sharp, {}});
  };
  const auto line_of = [&](int n) { return kinds[static_cast<size_t>(n)]->nic_line; };
  if (tree.tiers == 1) {
    DeviceId sw = add_switch("leaf.g0", SwitchKind::kLeaf);
    for (int n = 0; n < nodes; ++n) {
      for (DeviceId nic : node_nics[static_cast<size_t>(n)]) {
        topo.add_link(nic, sw, LinkClass::kNetwork, line_of(n).bandwidth, line_of(n).latency);
      }
    }
    return;
  }
  int groups = (nodes + tree.nodes_per_leaf - 1) / tree.nodes_per_leaf;
  int rails = tree.rail_optimized ? most_nics : 1;
  // Designed (full-group) ports per leaf, so every leaf has the same uplink whatever the fill.
  int ports_down = tree.rail_optimized ? tree.nodes_per_leaf : tree.nodes_per_leaf * most_nics;
  std::vector<DeviceId> leaves;
  for (int r = 0; r < rails; ++r) {
    for (int g = 0; g < groups; ++g) {
      std::string name = tree.rail_optimized ? "leaf.r" + std::to_string(r) + ".g" + std::to_string(g)
                                             : "leaf.g" + std::to_string(g);
      leaves.push_back(add_switch(name, SwitchKind::kLeaf));
    }
  }
  for (int n = 0; n < nodes; ++n) {
    int g = n / tree.nodes_per_leaf;
    const std::vector<DeviceId>& nics = node_nics[static_cast<size_t>(n)];
    for (size_t k = 0; k < nics.size(); ++k) {
      int r = tree.rail_optimized ? static_cast<int>(k) : 0;
      DeviceId leaf = leaves[static_cast<size_t>(r * groups + g)];
      topo.add_link(nics[k], leaf, LinkClass::kNetwork, line_of(n).bandwidth, line_of(n).latency);
    }
  }
  if (leaves.size() == 1) return;
  double ideal_spines = std::ceil(ports_down / tree.oversubscription);
  int spines = tree.spines.value_or(std::max(1, static_cast<int>(ideal_spines)));
  Bandwidth uplink = fastest * (ports_down / tree.oversubscription) / static_cast<double>(spines);
  std::vector<DeviceId> spine_ids;
  for (int s = 0; s < spines; ++s) spine_ids.push_back(add_switch("spine" + std::to_string(s), SwitchKind::kSpine));
  for (DeviceId leaf : leaves) {
    for (DeviceId sp : spine_ids) topo.add_link(leaf, sp, LinkClass::kNetwork, uplink, tree.link_latency);
  }
}

// What a node kind needs to join a network of more than one node.
void check_networked(JsonReader& at, const CompactNode& c) {
  if (c.nics == 0) at.fail("a topology with more than one node needs \"nics\"");
  if (c.scale_up == ScaleUp::kNone && c.nics < c.gpus) {
    at.fail("without a scale-up fabric every GPU needs its own NIC (count >= gpus)");
  }
}

Bandwidth host_link_of(const CompactNode& c) {
  return c.scale_up == ScaleUp::kPcie ? c.pcie.gpu_link.bandwidth : c.nic_attach.bandwidth;
}

// Node n of kinds[n], and with more than one node the fat tree over their NICs.
void build_nodes(Topology& topo, const std::vector<const CompactNode*>& kinds, const std::optional<FatTree>& tree) {
  const auto nodes = static_cast<int>(kinds.size());
  std::vector<std::vector<DeviceId>> node_nics;
  for (int n = 0; n < nodes; ++n) node_nics.push_back(add_node(topo, *kinds[static_cast<size_t>(n)], n, nodes > 1));
  if (nodes > 1) add_fat_tree(topo, *tree, kinds, node_nics);
}

void generate_compact(JsonReader& root, Topology& topo, const TopologyLoadOptions& opt) {
  int nodes = read_positive_int(root.at("nodes"), kMaxNodes);
  if (opt.nodes) {
    if (*opt.nodes <= 0 || *opt.nodes > kMaxNodes) {
      root.fail_at("nodes", "--nodes must be between 1 and " + std::to_string(kMaxNodes));
    }
    nodes = *opt.nodes;
  }
  CompactNode c = read_compact_node(root, root.at("node"), nodes, topo);
  if (opt.gpus_per_node) take_job_share(root, c, *opt.gpus_per_node);

  std::optional<FatTree> tree;
  if (auto net = root.find("network")) tree = read_fat_tree(*net);
  if (nodes > 1 && !tree) root.fail("a topology with more than one node needs a \"network\" section");
  if (nodes > 1) {
    JsonReader node = root.at("node");
    check_networked(node, c);
  }
  topo.info().gpu_host_link = host_link_of(c);
  build_nodes(topo, std::vector<const CompactNode*>(static_cast<size_t>(nodes), &c), tree);
}

// The groups of a "node_groups" list as read: each group's name, node count and node kind (its
// GPU spec added to `topo`), and its reader for later errors.
struct ReadGroups {
  std::vector<CompactNode> kinds;
  std::vector<std::pair<std::string, int>> groups;  // name, nodes
  std::vector<JsonReader> readers;
  int total = 0;  // nodes
};

// Each group's node is inline ("node") or another compact file's ("node_from", relative to this
// one); every group's nodes hold as many GPUs.
ReadGroups read_node_groups(JsonReader list, Topology& topo, const std::vector<int>& group_nodes) {
  ReadGroups r;
  if (!group_nodes.empty() && group_nodes.size() != list.elements().size()) {
    list.fail(std::to_string(group_nodes.size()) + " node counts given for " + std::to_string(list.elements().size()) +
              " groups");
  }
  for (JsonReader g : list.elements()) {
    const std::string name = g.at("name").as_string();
    for (const auto& [seen, n] : r.groups) {
      if (seen == name) g.at("name").fail("two groups are named \"" + name + "\"");
    }
    int nodes = read_positive_int(g.at("nodes"), kMaxNodes);
    if (!group_nodes.empty()) {
      nodes = group_nodes[r.groups.size()];
      if (nodes < 1 || nodes > kMaxNodes) g.at("nodes").fail("a group's node count must be 1 to " + std::to_string(kMaxNodes));
    }
    r.total += nodes;
    if (r.total > kMaxNodes) g.at("nodes").fail("the groups exceed " + std::to_string(kMaxNodes) + " nodes");
    // The group's own reader stands for the file's root: a node count too large fails at its "nodes".
    if (auto inline_node = g.find("node")) {
      if (g.has("node_from")) g.at("node_from").fail("give \"node\" or \"node_from\", not both");
      r.kinds.push_back(read_compact_node(g, *inline_node, nodes, topo));
    } else {
      JsonReader from = g.at("node_from");
      const std::string path = (std::filesystem::path(topo.info().file).parent_path() / from.as_string()).string();
      if (!std::filesystem::exists(path)) from.fail("no topology file " + path);
      const nlohmann::json source = load_json_file(path);
      JsonReader other(source, path);
      r.kinds.push_back(read_compact_node(g, other.at("node"), nodes, topo));
    }
    if (r.kinds.back().gpus != r.kinds.front().gpus) {
      g.fail("every group's nodes hold the same number of GPUs (" + std::to_string(r.kinds.front().gpus) +
             " in the first, " + std::to_string(r.kinds.back().gpus) + " here)");
    }
    r.groups.emplace_back(name, nodes);
    r.readers.push_back(g);
    g.finish();
  }
  if (r.groups.empty()) list.fail("needs at least one group");
  if (!r.kinds.empty() && int64_t{r.total} * r.kinds[0].gpus > kMaxGpus) {
    list.fail("the groups' " + std::to_string(r.total) + " nodes exceed the " + std::to_string(kMaxGpus) +
              " GPUs a topology may have");
  }
  for (size_t i = 0; i < r.kinds.size() && r.total > 1; ++i) check_networked(r.readers[i], r.kinds[i]);
  return r;
}

// Group `i` alone: its nodes on the same network, its own GPU spec and host link.
std::shared_ptr<const Topology> group_alone(const Topology& whole, const ReadGroups& r, size_t i,
                                            const std::optional<FatTree>& tree) {
  Topology alone;
  alone.info() = whole.info();
  alone.info().node_groups.clear();
  alone.info().name = whole.info().name + " / " + r.groups[i].first;
  alone.info().gpu_host_link = host_link_of(r.kinds[i]);
  CompactNode kind = r.kinds[i];
  kind.spec = alone.add_gpu_spec(whole.gpu_specs()[static_cast<size_t>(r.kinds[i].spec)]);
  build_nodes(alone, std::vector<const CompactNode*>(static_cast<size_t>(r.groups[i].second), &kind), tree);
  alone.finalize();
  return std::make_shared<const Topology>(std::move(alone));
}

// A cluster of several kinds of node on one network: "node_groups", each with its name, node
// count and node. Each group also becomes a topology of its own (NodeGroup::alone).
void generate_grouped(JsonReader& root, Topology& topo, const TopologyLoadOptions& opt) {
  if (opt.nodes || opt.gpus_per_node) {
    root.fail_at("node_groups", "a cluster of node groups gives each group's nodes itself (no --nodes, no partial nodes); "
                                "training, layout search and scaling run on one kind of GPU: use a group's own file");
  }
  for (const char* key : {"nodes", "node"}) {
    if (root.has(key)) root.fail_at(key, "\"node_groups\" gives the nodes; drop \"" + std::string(key) + "\"");
  }
  const ReadGroups r = read_node_groups(root.at("node_groups"), topo, opt.group_nodes);
  std::optional<FatTree> tree;
  if (auto net = root.find("network")) tree = read_fat_tree(*net);
  if (r.total > 1 && !tree) root.fail("a topology with more than one node needs a \"network\" section");
  topo.info().gpu_host_link = host_link_of(r.kinds.front());
  std::vector<const CompactNode*> node_kinds;
  int first = 0;
  for (size_t i = 0; i < r.groups.size(); ++i) {
    node_kinds.insert(node_kinds.end(), static_cast<size_t>(r.groups[i].second), &r.kinds[i]);
    topo.info().node_groups.push_back(NodeGroup{r.groups[i].first, first, r.groups[i].second, group_alone(topo, r, i, tree)});
    first += r.groups[i].second;
  }
  build_nodes(topo, node_kinds, tree);
}

// ---------------------------------------------------------------- explicit form

// One entry of "devices": a GPU (its spec among `spec_index`, node and local index), a NIC or a
// CPU, or a switch of a kind.
Device read_device(JsonReader& d, const std::unordered_map<std::string, int>& spec_index) {
  Device dev;
  dev.name = d.at("name").as_string();
  if (dev.name.empty()) d.fail_at("name", "a device name must not be empty");
  std::string kind = d.at("kind").as_string();
  if (kind == "gpu") {
    dev.kind = DeviceKind::kGpu;
    std::string s = d.at("spec").as_string();
    auto it = spec_index.find(s);
    if (it == spec_index.end()) d.fail_at("spec", "no GPU spec named \"" + s + "\" in /gpu_specs");
    dev.gpu_spec = it->second;
    dev.node = device_node(d.at("node"));
    dev.local_index = static_cast<int>(d.at("local").as_int());
    if (dev.node < 0) d.fail_at("node", "must be zero or more");
    if (dev.local_index < 0) d.fail_at("local", "must be zero or more");
  } else if (kind == "nic" || kind == "cpu") {
    dev.kind = kind == "nic" ? DeviceKind::kNic : DeviceKind::kCpu;
    if (auto v = d.find("node")) dev.node = device_node(*v);
    if (auto v = d.find("local")) dev.local_index = static_cast<int>(v->as_int());
    if (auto v = d.find("reported_latency"); v && dev.kind == DeviceKind::kNic) {
      dev.reported_latency = read_non_negative_time(*v);
    }
  } else if (kind == "switch") {
    dev.kind = DeviceKind::kSwitch;
    std::string sk = d.at("switch").as_string();
    auto k = switch_kind_from_string(sk);
    if (!k) d.fail_at("switch", "unknown switch kind \"" + sk + "\" (expected nvswitch, pcie, leaf or spine)");
    dev.switch_kind = *k;
    if (auto v = d.find("node")) dev.node = device_node(*v);
    if (auto v = d.find("nvls")) dev.nvls = v->as_bool();
    if (auto v = d.find("sharp")) dev.sharp = v->as_bool();
  } else {
    d.fail_at("kind", "unknown device kind \"" + kind + "\" (expected gpu, nic, cpu or switch)");
  }
  d.finish();
  return dev;
}

// One entry of "links": two existing, different devices, a class, bandwidth and latency, duplex.
void add_explicit_link(JsonReader& l, Topology& topo) {
  auto between = l.at("between");
  auto ends = between.elements();
  if (ends.size() != 2) between.fail("expected two device names");
  DeviceId id[2];
  for (int i = 0; i < 2; ++i) {
    std::string name = ends[static_cast<size_t>(i)].as_string();
    auto found = topo.find_device(name);
    if (!found) ends[static_cast<size_t>(i)].fail("no device named \"" + name + "\" (dangling link endpoint)");
    id[i] = *found;
  }
  if (id[0] == id[1]) between.fail("a link cannot join a device to itself");
  std::string cls = l.at("class").as_string();
  auto c = link_class_from_string(cls);
  if (!c) l.fail_at("class", "unknown link class \"" + cls + "\" (expected nvlink, pcie, network, cpu or shm)");
  LinkSpec spec = read_link_spec(l);
  Duplex duplex = Duplex::kFull;
  if (auto v = l.find("duplex")) {
    std::string s = v->as_string();
    if (s == "half") duplex = Duplex::kHalf;
    else if (s != "full") v->fail("expected \"full\" or \"half\", found \"" + s + "\"");
  }
  l.finish();
  topo.add_link(id[0], id[1], *c, spec.bandwidth, spec.latency, duplex);
}

void build_explicit(JsonReader& root, Topology& topo) {
  std::unordered_map<std::string, int> spec_index;
  if (auto specs = root.find("gpu_specs")) {
    for (const auto& key : specs->keys()) spec_index[key] = topo.add_gpu_spec(read_gpu_spec(specs->at(key)));
  }
  auto devices = root.at("devices");
  for (auto& d : devices.elements()) {
    Device dev = read_device(d, spec_index);
    if (topo.find_device(dev.name)) d.fail_at("name", "duplicate device name \"" + dev.name + "\"");
    topo.add_device(std::move(dev));
  }
  auto links = root.at("links");
  for (auto& l : links.elements()) add_explicit_link(l, topo);
}

}  // namespace

Topology topology_from_json(const nlohmann::json& doc, const std::string& file,
                            const TopologyLoadOptions& options) {
  JsonReader root(doc, file);
  if (!root.is_object()) root.fail("a topology must be a JSON object");
  Topology topo;
  read_info(root, topo, file);
  bool compact = root.has("node") || root.has("node_groups");
  bool expl = root.has("devices") || root.has("links");
  if (compact && expl) root.fail("a topology is either compact (\"node\") or explicit (\"devices\", \"links\"), not both");
  if (!compact && !expl) root.fail("a topology needs \"node\" (compact form) or \"devices\" and \"links\" (explicit form)");
  if (!options.group_nodes.empty() && !root.has("node_groups")) {
    root.fail("node counts per node group apply only to a topology with \"node_groups\"");
  }
  if (compact && root.has("node_groups")) {
    generate_grouped(root, topo, options);
  } else if (compact) {
    generate_compact(root, topo, options);
  } else {
    if (options.nodes) root.fail("--nodes applies only to compact topologies; this one lists its devices");
    if (options.gpus_per_node) root.fail("a job on part of each node needs a compact topology; this one lists its devices");
    build_explicit(root, topo);
  }
  root.finish();
  try {
    topo.finalize();
  } catch (const std::invalid_argument& e) {
    throw InputError(file, compact ? "" : "/links", e.what());
  }
  return topo;
}

JobPlacement place_job(int gpus, int node_gpus) {
  if (gpus < 1 || node_gpus < 1) throw std::invalid_argument("a job and a node need at least one GPU");
  int per_node = std::min(gpus, node_gpus);
  while (gpus % per_node != 0) --per_node;
  return JobPlacement{gpus / per_node, per_node};
}

TopologyLoadOptions load_options_for(int gpus, int node_gpus) {
  const JobPlacement at = place_job(gpus, node_gpus);
  TopologyLoadOptions o;
  o.nodes = at.nodes;
  if (at.gpus_per_node != node_gpus) o.gpus_per_node = at.gpus_per_node;
  return o;
}

Topology load_topology(const std::string& path, const TopologyLoadOptions& options) {
  return topology_from_json(load_json_file(path), path, options);
}

}  // namespace parallax
