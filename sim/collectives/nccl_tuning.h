// NCCL's own performance model (ncclTopoTuneModel / ncclTopoGetAlgoTime / topoGetAlgoInfo),
// as a pure function of the communicator facts NCCL feeds it. Constants and formulas are those of
// NCCL 2.30.7 src/graph/tuning.cc (docs: shared/reference/nccl-cost-model.md §2):
//
//   t(µs) = lat + nBytes / (1000 · algBw)
//   busBw = nChannels · bw            bw = bwIntra (≤ 2 nodes, CollNet) else bwInter; NVLS special
//   busBw refined per (algo, proto)   (llMaxBw, perCh* caps, 0.92, 1/3.8, 7/9, ×0.85, ×0.75, …)
//   algBw = busBw · nRanks/nsteps     (Ring, NVLS, NVLS-Tree) or busBw · 0.5 (Tree, CollNet);
//                                     not converted for AllGather/ReduceScatter off Ring
//   lat   = base + per-step hardware latency × steps (formula per algorithm)
//
// Plus the size-dependent corrections (tree correction factor, ring plateau ×1.4/×1.9) and the
// argmin. Nothing here looks at a topology: the caller derives channels and per-channel
// bandwidths (helpers for NCCL's bandwidth constants and search speed arrays are at the end).
// Not modelled: tuner plugins, aggregated (grouped) launches (latCount = 1), the fp8 ×1024 rule,
// the CUDA 11.8 + SM90 two-rank LL128 exception, and point-to-point (no NCCL cost model exists).
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>

#include "collectives/collective.h"

namespace parallax {

/// NCCL's compute-capability index (compCapIdx, from the communicator's minimum CC):
/// Volta < 8.0 ≤ Ampere < 9.0 ≤ Hopper < 10.0 ≤ Blackwell.
enum class GpuArch { kVolta, kAmpere, kHopper, kBlackwell };

/// Intra-node link class of the algorithm's graph: NVLink if its typeIntra is LINK_NVL, else PCI.
enum class NcclLinkType { kNvlink, kPci };

/// Row of NCCL's hwLatencies table; kNet is used for everything that crosses nodes.
enum class NcclHwLink { kNvlink, kPci, kNet };

/// Host CPU, which picks the net post overhead and, on several nodes, the llMaxBws row.
/// Pass kAmd for a job whose nodes mix vendors (NCCL treats "mixed" like AMD for llMaxBw).
/// kPower applies NCCL's POWER override (PCI Tree Simple latency = PCI Ring Simple).
enum class CpuVendor { kIntel, kAmd, kPower, kOther };

/// An NCCL release as 100·major + minor (2.18.5 → 218). The model's constants follow the
/// release from 2.18 (the first with Hopper rows and NVLS-Tree) on; later releases than the
/// last it knows take that one's (shared/reference/nccl-cost-model.md §2.10).
inline constexpr int kOldestNcclVersion = 218;
inline constexpr int kNewestNcclVersion = 230;
/// "2.23.4", "2.23" or "v2.23.4-1" → 223. Throws InputError (with `where` as the pointer) for
/// anything else, or a release before 2.18.
int parse_nccl_version(const std::string& text, const std::string& where = "--nccl-version");

/// The communicator facts NCCL's model reads. Bandwidths are per channel, in GB/s (1e9 B/s),
/// as NCCL's graph search leaves them (quantised to nccl_search_speeds()).
struct NcclTuningInputs {
  int ranks = 1, nodes = 1;  ///< nRanks, nNodes; ranks must be a multiple of nodes (ppn = ranks/nodes)
  GpuArch arch = GpuArch::kHopper;
  CpuVendor cpu = CpuVendor::kIntel;
  NcclLinkType intra = NcclLinkType::kNvlink;  ///< typeIntra of the graphs (one class for all)
  int channels = 1;             ///< nChannels of the Ring/Tree (and CollNet) graphs
  int nvls_channels = 0;        ///< nChannels of the NVLS graph (= NVLS heads; 8 on one DGX H100)
  double bw_intra_gbs = 0;      ///< Ring/Tree/CollNet graph bwIntra
  double bw_inter_gbs = 0;      ///< Ring/Tree/CollNet graph bwInter; 0 on one node means bwIntra
                                ///< (the search sets bwInter = bwIntra when there is no NIC)
  double nvls_bw_intra_gbs = 0;  ///< NVLS graph bwIntra; 0 means bw_intra_gbs
  double nvls_bw_inter_gbs = 0;  ///< NVLS graph bwInter; 0 means the NVLS bwIntra on one node,
                                 ///< bw_inter_gbs on several
  bool tree_pattern_single_nic = false;  ///< Tree graph pattern is NCCL_TOPO_PATTERN_TREE (×0.85)
  bool ring_same_channels = true;        ///< Ring graph sameChannels (Broadcast/Reduce latency)
  bool nvls_supported = false;           ///< comm->nvlsSupport
  bool collnet_supported = false;        ///< CollNet enabled and usable for AllReduce (both
                                         ///< Direct and Chain; exclude one through choose())
  bool collnet_ag_rs_supported = false;  ///< CollNet plugin has iallgather/ireducescatter and no
                                         ///< node has more local ranks than CollNet heads
  bool pat_enabled = true;   ///< NCCL_PAT_ENABLE not 0; the auto rule (1 GPU per node) still applies
  bool ll128_enabled = true;  ///< LL128 enabled (NCCL_PROTO, or the auto rule's path-type checks)
  double latency_inter_us = 0;  ///< NIC latency property (0 for the built-in IB and socket)
  /// The release whose constants and rules apply (100·major + minor): 2.18–2.22 have other
  /// latencies (Tree Simple 28 µs per hop on 2.19–2.22), Ring LL at 1/4–1/3 of the bandwidth
  /// before 2.21, LL128 at 0.7 with one GPU per node before 2.23, no PAT before 2.23 (×0.85 on
  /// 2.23, ×0.75 after), NVLS algBw at 5/6 of busBw before 2.28, no Blackwell rows before 2.28.
  int nccl_version = kNewestNcclVersion;
  std::optional<double> net_overhead_us;  ///< NCCL_NET_OVERHEAD; default Intel 1, AMD 2, else 1
};

/// One (collective, algorithm, protocol) entry of NCCL's tables: latency in µs and algorithm
/// bandwidth in GB/s, before the size-dependent corrections. enabled is false where NCCL leaves
/// the entry out (bandwidth 0 or the combination is not allowed).
struct NcclCost {
  bool enabled = false;
  double latency_us = 0;
  double bandwidth_gbs = 0;
};

/// NCCL's cost model for one communicator. A value: cheap to copy, no shared state.
class NcclTuningModel {
 public:
  /// Throws InputError if ranks < 1, nodes < 1, ranks is not a multiple of nodes, channels < 1,
  /// nvls_channels < 0, or a bandwidth/latency is negative or not finite.
  explicit NcclTuningModel(NcclTuningInputs in);

  /// The table entry for (op, algo, proto). Disabled for everything NCCL does not allow:
  /// Broadcast/Reduce off Ring; AllGather/ReduceScatter off Ring/PAT/NVLS/CollNet Direct;
  /// PAT for AllReduce; NVLS(-Tree) and PAT off Simple; CollNet off Simple; LL128 when not
  /// enabled; NVLS(-Tree) without support, with < 2 channels or, off AllReduce, > 32 local
  /// ranks; NVLS-Tree on one node; NVLS on several nodes without CollNet; CollNet without
  /// support or with > 8 local ranks; PAT unless enabled with 1 GPU per node; all-to-all,
  /// send/recv (NCCL has no cost model for point-to-point); non-NCCL algorithms; 1 rank.
  NcclCost cost(CollectiveOp op, Algorithm algo, Protocol proto) const;

  /// ncclTopoGetAlgoTime for one call of `bytes` B (NCCL's nBytes: the total buffer for
  /// AllGather/ReduceScatter, the per-rank buffer otherwise), in µs, with the tree correction
  /// factor (Tree AllReduce; NVLS-Tree AllReduce on Blackwell + x86) and the ring plateau
  /// (Ring Simple AllReduce on several nodes once bytes/(channels·ranks) ≥ 64: lat ×1.4 from
  /// Ampere, ×1.9 before). nullopt when disabled. Throws InputError if bytes < 0 or not finite.
  std::optional<double> time_us(CollectiveOp op, Algorithm algo, Protocol proto, double bytes) const;

  /// The winning (algo, proto) and its time_us for the size asked about.
  struct Choice {
    Algorithm algo;
    Protocol proto;
    double time_us;
  };
  /// topoGetAlgoInfo's argmin over the allowed (algo, proto) pairs (empty span = all; entries
  /// NCCL does not model are ignored). Ties go to the first in NCCL's order (Tree, Ring, CollNet
  /// Direct, CollNet Chain, NVLS, NVLS-Tree, PAT; LL, LL128, Simple), so the result does not
  /// depend on the order of the spans. One rank: Ring/Simple at 0 µs, as NCCL does. nullopt
  /// when nothing allowed is enabled. Throws InputError like time_us.
  std::optional<Choice> choose(CollectiveOp op, double bytes,
                               std::span<const Algorithm> allowed_algos = {},
                               std::span<const Protocol> allowed_protos = {}) const;

  /// The channels (CTAs) NCCL's enqueue gives one call of `bytes` B (nBytes as for time_us) by
  /// (algo, proto), from the graphs' channels: Ring, Tree, PAT and CollNet Chain drop one
  /// channel at a time while bytes < channels · threads · threshold (Simple 64 B per thread,
  /// 512 for CollNet, LL 8·ranks on Ring, LL128 8; 256 Ring Simple threads on PCIe-slow graphs,
  /// else 512, 640 for LL128); CollNet Direct steps down through 16, 8, 4 … counting its heads;
  /// NVLS(-Tree) take the NVLS CTAs of the release: 16 (2.18–2.24, and SM90 after), 32 on
  /// Blackwell from 2.25, 24 on one Blackwell node from 2.27, and NVLS across nodes no more than
  /// the ring's channels from 2.28. 1 for what NCCL does not model. Throws InputError like time_us.
  int enqueue_channels(Algorithm algo, Protocol proto, double bytes) const;

  /// The inputs as given (net_overhead_us still unset when it was left to the CPU default).
  const NcclTuningInputs& inputs() const { return in_; }

  /// How far the protocol's own bandwidth caps (LL's llMaxBw, LL128's per-channel maxima for
  /// Ring and Tree) hold (op, algo, proto) below what its channels carry at the protocol's
  /// efficiency: 1 when no cap binds (or the combination is not allowed), else capped/uncapped.
  double protocol_cap_ratio(CollectiveOp op, Algorithm algo, Protocol proto) const;

  /// hwLatencies and baseLatencies (µs) of this model's release; nullopt for algorithms NCCL
  /// does not have.
  std::optional<double> hw_latency_us(NcclHwLink link, Algorithm algo, Protocol proto) const;
  std::optional<double> base_latency_us(Algorithm algo, Protocol proto) const;

 private:
  double bus_bandwidth(CollectiveOp op, Algorithm algo, Protocol proto, double* cap_ratio = nullptr) const;
  struct LinkBandwidths {
    double intra = 0, inter = 0;  ///< GB/s a channel gets inside a node and across nodes
  };
  LinkBandwidths link_bandwidths(bool nvls) const;
  double channel_bandwidth(CollectiveOp op, int algo_index, int nch) const;
  double protocol_bandwidth(CollectiveOp op, int algo_index, int proto_index, int nch, double bus,
                            double* cap_ratio) const;
  double latency(CollectiveOp op, Algorithm algo, Protocol proto) const;
  bool allowed(CollectiveOp op, Algorithm algo, Protocol proto) const;
  int nvls_enqueue_channels(Algorithm algo) const;

  NcclTuningInputs in_;
  int ppn_;
  double net_overhead_us_;
  int cc_;  ///< compCapIdx into the tables: Blackwell reads Hopper's rows before 2.28
  std::array<std::array<double, 3>, 7> base_{};                ///< [algo][proto] of the release
  std::array<std::array<std::array<double, 3>, 7>, 3> hw_{};  ///< [link][algo][proto]
};

/// True for the seven algorithms NCCL's model covers (Ring … PAT).
bool is_nccl_algorithm(Algorithm algo);

/// hwLatencies[link][algo][proto] (µs): the per-step latency NCCL charges on that link class.
/// nullopt for algorithms NCCL does not have. 0 marks combinations NCCL never runs.
std::optional<double> nccl_hw_latency_us(NcclHwLink link, Algorithm algo, Protocol proto);
/// baseLatencies[algo][proto] (µs): the fixed launch/synchronisation cost. nullopt as above.
std::optional<double> nccl_base_latency_us(Algorithm algo, Protocol proto);

/// Fraction of the bytes on the wire that are payload (device.h line formats): LL sends 8 B of
/// data and 8 B of flags per 16-byte line (0.5); LL128 carries 120 B of data in each 128-byte
/// line, the last 8 B being the flag (120/128); Simple is all payload (1) and pays in latency
/// (fences and synchronisation) instead. The tuning model's own factors differ (Ring LL ×0.5,
/// Ring LL128 ×0.92, Tree LL ×1/3.8, Tree LL128 ×7/9 or 120/128).
double protocol_wire_efficiency(Protocol proto);

// --- Topology bandwidth constants (topo.h, topo.cc, search.cc), GB/s ---

/// NCCL_NET_BW: a NIC whose speed is unknown (100 Gb/s).
inline constexpr double kNcclNetBwDefaultGbs = 12.0;
/// NCCL_PCI_BW: PCIe Gen3 x16, the default when the link cannot be read.
inline constexpr double kNcclPciBwDefaultGbs = 12.0;
/// Largest channel count NCCL supports (MAXCHANNELS).
inline constexpr int kNcclMaxChannels = 64;

/// compCapIdx for a compute capability written 10·major + minor (70, 80, 86, 90, 100, …).
GpuArch nccl_gpu_arch(int compute_capability);
/// Per-NVLink bandwidth NCCL assumes (ncclTopoNVLinkBw): SM60 18, SM70 20, SM80 20, SM86 12,
/// SM90 20.6, SM100+ 40.1; 0 before SM60 (no NVLink). A GPU's NVLink bw is nLinks × this.
double nccl_nvlink_bw_per_link_gbs(int compute_capability);
/// The same by architecture (Ampere means SM80).
double nccl_nvlink_bw_per_link_gbs(GpuArch arch);
/// PCIe link bandwidth as NCCL derives it: width × lane speed (100 Mb/s units: Gen1 15, Gen2 30,
/// Gen3 60, Gen4 120, Gen5 240, Gen6 480) / 80, so Gen3/4/5 x16 = 12/24/48. Throws InputError
/// for a generation outside 1–6 or a width < 1.
double nccl_pci_bw_gbs(int generation, int width);
/// NIC bandwidth from its speed in Mb/s (speed / 8000), e.g. 400 Gb/s → 50.
double nccl_net_bw_gbs(double speed_mbps);

/// The per-channel speeds the graph search tries, high to low: SM100, SM90 or default arrays,
/// intra-node or inter-node.
std::span<const double> nccl_search_speeds(GpuArch arch, bool inter);
/// The search's starting speed for a path of at most `max_gbs` per GPU: the largest array entry
/// ≤ max_gbs, or the smallest entry when all are above it.
double nccl_search_speed(GpuArch arch, bool inter, double max_gbs);

/// A graph's channel count and per-channel bandwidths (GB/s).
struct NcclGraphBw {
  int channels = 1;
  double bw_intra_gbs = 0;
  double bw_inter_gbs = 0;
};
/// ncclTopoDupChannels: doubles the channels (capped at max_channels, the graph's maxChannels)
/// and halves the per-channel bandwidths, unless bwIntra < 25 or (CC > 8.0, bwIntra < 50 and
/// more than 4 channels).
NcclGraphBw nccl_dup_channels(int compute_capability, NcclGraphBw graph, int max_channels);

}  // namespace parallax
