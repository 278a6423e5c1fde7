// The cluster as a graph: devices (GPUs, NICs, switches, CPUs) joined by directed links, each
// with a bandwidth per direction, a latency and a link class. A full-duplex cable is two
// directed links with capacity each; a half-duplex one is two directed links that share one
// capacity resource. Boost.Graph holds the adjacency inside; the API outside speaks in
// DeviceId and LinkId. The topology knows nothing of collectives or workloads.
#pragma once

#include <cstdint>
#include <compare>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "units/units.h"

namespace parallax {

/// A dense index with a type, so a DeviceId is never passed where a LinkId is meant.
template <class Tag>
struct Id {
  uint32_t value = UINT32_MAX;
  constexpr auto operator<=>(const Id&) const = default;
  constexpr bool valid() const { return value != UINT32_MAX; }
};
struct DeviceTag {};
struct LinkTag {};
using DeviceId = Id<DeviceTag>;
using LinkId = Id<LinkTag>;

enum class DeviceKind : uint8_t { kGpu, kNic, kSwitch, kCpu };
enum class SwitchKind : uint8_t { kNone, kNVSwitch, kPcie, kLeaf, kSpine };
/// What a link is made of: the unit of calibration (one α/β per class).
enum class LinkClass : uint8_t { kNVLink, kPcie, kNetwork, kCpu, kShm };
enum class Duplex : uint8_t { kFull, kHalf };

const char* to_string(DeviceKind k);
const char* to_string(SwitchKind k);
const char* to_string(LinkClass c);
std::optional<LinkClass> link_class_from_string(std::string_view s);
std::optional<SwitchKind> switch_kind_from_string(std::string_view s);

/// Datasheet figures of a GPU model. Peaks are dense (no structured sparsity); a zero peak
/// means the GPU has no such tensor-core path.
struct GpuSpec {
  std::string name;
  FlopRate fp32, tf32, bf16, fp16, fp8, fp4;
  Bytes memory;
  Bandwidth memory_bandwidth;
  /// Streaming multiprocessors, 0 when not given. NCCL runs one thread block per channel, each
  /// on an SM of its own, so a collective takes SMs from the kernels it overlaps.
  int sms = 0;
  /// The tensor-core generation ("volta", "turing", "ampere", "ada", "hopper", "blackwell";
  /// empty when not given): which kernels reach the peak (has_async_tensor_cores).
  std::string architecture;
  /// The largest matmul rate measured on this GPU (its maximum achievable matmul FLOPS: the best
  /// of a sweep of large shapes), bf16, fp8 and fp4; zero when not measured. Where given it
  /// replaces the GEMM model's default fraction of the datasheet peak (compute/gemm_efficiency.h).
  FlopRate achievable_bf16, achievable_fp8, achievable_fp4;
  /// GPU↔host memory, per direction, per GPU while every GPU of its node copies at once (NVLink-C2C
  /// on Grace-based nodes, else PCIe); zero when not known. Activation offloading uses it.
  Bandwidth host_bandwidth;
  /// Exponentials per second of its special-function units (MUFU.EX2: 16 per clock per SM on
  /// Ampere, Hopper and Blackwell, 32 on Blackwell Ultra), at the clock its dense bf16 peak
  /// implies; zero when not given. Attention kernels take one per query-key pair
  /// (compute/compute_model.h).
  OperationRate exponentials;
};

/// Hopper's and Blackwell's asynchronous tensor cores (wgmma / tcgen05, fed by TMA): the peak is
/// reached only by kernels written for them, not by those written for Ampere's warp-level
/// mma.sync (FlashAttention-2, the Triton kernels of 2023).
inline bool has_async_tensor_cores(const GpuSpec& gpu) {
  return gpu.architecture == "hopper" || gpu.architecture == "blackwell";
}

struct Device {
  std::string name;
  DeviceKind kind = DeviceKind::kSwitch;
  SwitchKind switch_kind = SwitchKind::kNone;
  int node = -1;          ///< server / scale-up domain index; -1 for fabric switches
  int local_index = -1;   ///< index within the node (GPU i is on rail i)
  int gpu_spec = -1;      ///< index into Topology::gpu_specs() for GPUs
  bool nvls = false;      ///< NVSwitch in-network reduction (NVLink SHARP)
  bool sharp = false;     ///< network switch in-network reduction (SHARP / CollNet)
  /// NIC: the latency its network stack reports to its users per message (NCCL's net plugin
  /// `latency` property: aws-ofi-nccl gives 75 µs for p4d/p5 EFA, 35 µs for p5en/p6; the
  /// built-in InfiniBand and socket transports give 0). Not a link latency: the stack's own.
  Time reported_latency;
};

struct Link {
  DeviceId from, to;
  LinkClass link_class = LinkClass::kNetwork;
  Bandwidth bandwidth;  ///< per direction
  Time latency;
  LinkId reverse;       ///< the other direction of the same cable
  uint32_t resource = 0;  ///< capacity resource: shared by both directions when half duplex
};

class Topology;

/// A group of identical nodes in a cluster of several kinds (a compact file's `node_groups`,
/// e.g. DGX H100 and DGX A100 on one fabric): nodes first_node … first_node + nodes − 1, and the
/// cluster those nodes make alone (the same network, only them), for the layers that assume
/// one GPU type (a serving instance's engine step runs on its group's).
struct NodeGroup {
  std::string name;
  int first_node = 0;
  int nodes = 0;
  std::shared_ptr<const Topology> alone;
};

/// The packet-level network's MTU when the topology's `packets` block gives none: InfiniBand's
/// and RoCE's usual 4 KiB.
inline constexpr Bytes kDefaultPacketMtu = Bytes(4096);

/// Who and what a topology file describes.
struct TopologyInfo {
  std::string name;
  std::string description;
  std::vector<std::string> sources;
  std::string file;  ///< where it was loaded from, if anywhere
  /// Fitted model parameters (name → SI value) from the file's `calibration` block, written by
  /// `parallax calibrate fit`. Opaque here: the collectives layer knows what the names mean.
  std::map<std::string, double> calibration;
  /// The NCCL release the cluster runs ("2.23.4"), from the file's `nccl_version`; empty: the
  /// newest the collectives layer models. Opaque here, like `calibration`.
  std::string nccl_version;
  /// The packet-level network's MTU and each link's input buffer at its far end, from the file's
  /// `packets` block; nullopt: that model's defaults (kDefaultPacketMtu; twice the link's credit
  /// loop).
  std::optional<Bytes> packet_mtu;
  std::optional<Bytes> packet_link_buffer;
  /// The `packets` block's `routing`: "adaptive" (switches choose each packet's port by their
  /// queues) rather than "ecmp" (each flow on its hashed path, the default).
  bool packet_adaptive_routing = false;
  /// Per direction, a GPU's PCIe link towards the host: the PCIe tree's GPU link, else the NIC
  /// attachment (a NIC hangs off its GPU's x16 port or switch); 0 when the file gives neither.
  /// Present whatever the node count, for host copies (KV swap) on one node too.
  Bandwidth gpu_host_link;
  /// A cluster of several kinds of node, in node order; empty for one kind.
  std::vector<NodeGroup> node_groups;
};

/// The group holding `node`, or null for a cluster of one kind of node.
const NodeGroup* node_group_of(const TopologyInfo& info, int node);

class Topology {
 public:
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS,
                                      boost::no_property, boost::property<boost::edge_index_t, uint32_t>>;

  Topology() = default;

  // ---- building (loaders and tests); finalize() before use ----
  /// Adds a GPU model; returns its index for Device::gpu_spec.
  int add_gpu_spec(GpuSpec spec);
  /// Adds a device; throws std::invalid_argument on a duplicate name.
  DeviceId add_device(Device d);
  /// Adds a cable between a and b: two directed links (a→b returned, b→a its reverse).
  LinkId add_link(DeviceId a, DeviceId b, LinkClass cls, Bandwidth per_direction, Time latency,
                  Duplex duplex = Duplex::kFull);
  /// Builds the graph and GPU order, and checks that the graph is connected and that every
  /// GPU reaches every other without passing through a third GPU. Throws
  /// std::invalid_argument with the reason.
  void finalize();
  /// Multiplies the bandwidth of every link of class `cls` (and its capacity resource) by
  /// `factor` > 0: how a model states that only a fraction of a line rate is achievable.
  void scale_link_bandwidth(LinkClass cls, double factor);

  // ---- queries ----
  TopologyInfo& info() { return info_; }
  const TopologyInfo& info() const { return info_; }
  size_t device_count() const { return devices_.size(); }
  size_t link_count() const { return links_.size(); }
  /// Capacity resources (one per full-duplex direction, one per half-duplex cable).
  size_t resource_count() const { return resource_capacity_.size(); }
  Bandwidth resource_capacity(uint32_t r) const { return resource_capacity_[r]; }
  const Device& device(DeviceId id) const { return devices_[id.value]; }
  const Link& link(LinkId id) const { return links_[id.value]; }
  std::span<const LinkId> out_links(DeviceId id) const { return out_[id.value]; }
  std::span<const GpuSpec> gpu_specs() const { return gpu_specs_; }
  const GpuSpec& gpu_spec_of(DeviceId gpu) const;
  std::optional<DeviceId> find_device(std::string_view name) const;

  /// GPUs in global rank order: by node, then local index.
  std::span<const DeviceId> gpus() const { return gpus_; }
  size_t gpu_count() const { return gpus_.size(); }
  int node_count() const { return node_count_; }
  /// GPUs of node n in local order.
  std::span<const DeviceId> gpus_of_node(int node) const { return node_gpus_[static_cast<size_t>(node)]; }
  /// True when a and b are in the same node (scale-up domain).
  bool same_node(DeviceId a, DeviceId b) const { return device(a).node == device(b).node; }

  /// The Boost graph: vertex i is DeviceId{i}, each edge's index property is its LinkId.
  const Graph& graph() const { return graph_; }

 private:
  void check_gpus_reach_each_other() const;

  TopologyInfo info_;
  std::vector<GpuSpec> gpu_specs_;
  std::vector<Device> devices_;
  std::vector<Link> links_;
  std::vector<std::vector<LinkId>> out_;
  std::vector<Bandwidth> resource_capacity_;
  std::unordered_map<std::string, DeviceId> by_name_;
  std::vector<DeviceId> gpus_;
  std::vector<std::vector<DeviceId>> node_gpus_;
  int node_count_ = 0;
  Graph graph_;
  bool finalized_ = false;
};

}  // namespace parallax
