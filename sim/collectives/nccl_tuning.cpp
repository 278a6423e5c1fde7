// NCCL 2.30.7's tuning model (src/graph/tuning.cc, enqueue.cc; topo.h, topo.cc and search.cc for
// the bandwidth constants). The tables below are NCCL's, in NCCL's index order; see
// shared/reference/nccl-cost-model.md §2 for each formula's provenance.
#include "collectives/nccl_tuning.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "io/input_error.h"

namespace parallax {
namespace {

constexpr int kNumAlgos = 7;   // Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT
constexpr int kNumProtos = 3;  // LL, LL128, Simple
constexpr int kTree = 0, kRing = 1, kCollNetDirect = 2, kCollNetChain = 3, kNvls = 4,
              kNvlsTree = 5, kPat = 6;
constexpr int kLL = 0, kLL128 = 1, kSimple = 2;
constexpr int kHwNvlink = 0, kHwPci = 1, kHwNet = 2;

using AlgoProtoTable = std::array<std::array<double, kNumProtos>, kNumAlgos>;
using ArchNodesTable = std::array<std::array<double, 3>, 4>;  // [compCapIdx][N1, N2, N4]

constexpr AlgoProtoTable kBaseLatencies = {{
    {6.8, 14.0, 8.4},  // Tree
    {6.6, 14.0, 8.4},  // Ring
    {0, 0, 0},         // CollNet Direct
    {0, 0, 0},         // CollNet Chain
    {0, 0, 0},         // NVLS
    {0, 0, 0},         // NVLS Tree
    {8.0, 8.0, 8.0},   // PAT
}};

constexpr std::array<AlgoProtoTable, 3> kHwLatencies = {{
    {{  // NVLink
        {0.6, 1.25, 4.0},
        {0.6, 1.9, 3.4},
        {0, 0, 3.7},
        {0, 0, 2.8},
        {0, 0, 25},
        {0, 0, 25},
        {0, 0, 4.0},
    }},
    {{  // PCI
        {1.0, 1.9, 4.0},
        {1.0, 2.5, 5.7},
        {0, 0, 3.7},
        {0, 0, 2.8},
        {0, 0, 0},
        {0, 0, 0},
        {0, 0, 4.0},
    }},
    {{  // NET
        {5.0, 8.5, 14},
        {2.7, 4.0, 14.0},
        {0, 0, 31},
        {0, 0, 30},
        {0, 0, 18},
        {0, 0, 20.9},
        {0, 0, 14},
    }},
}};

// Row = compCapIdx on one node; on several nodes row 0 = Intel/other, row 1 = AMD.
constexpr ArchNodesTable kLlMaxBws = {{
    {39.0, 39.0, 20.4},
    {87.7, 22.5, 19.0},
    {141.0, 45.0, 35.0},
    {282.0, 90.0, 70.0},
}};
constexpr ArchNodesTable kPerChMaxRingLL128Bws = {{
    {20.0, 20.0, 20.0},
    {20.0, 20.0, 20.0},
    {36.7, 36.7, 36.7},
    {40.0, 40.0, 40.0},
}};
constexpr ArchNodesTable kPerChMaxTreeLL128Bws = {{
    {20.0, 20.0, 20.0},
    {20.0, 20.0, 20.0},
    {36.7, 36.7, 29.0},
    {55.6, 31.67, 20.0},
}};
constexpr ArchNodesTable kPerChMaxTreeBws = {{
    {26.5, 18.5, 10.0},
    {24.0, 23.6, 17.8},
    {38.7, 41.4, 36.0},
    {70.0, 42.8, 24.0},
}};
constexpr ArchNodesTable kPerChMaxNvlsTreeBws = {{
    {26.5, 18.5, 10.0},
    {24.0, 23.6, 17.8},
    {0.0, 57.7, 45.5},
    {0.0, 96.0, 80.0},
}};
constexpr std::array<double, 4> kNvlsEfficiency = {0.0, 0.0, 0.85, 0.74};

// Index i covers sizes [64·2^i, 64·2^(i+1)) B. Trees stray from the model at medium sizes.
constexpr std::array<std::array<double, 24>, kNumProtos> kTreeCorrectionFactor = {{
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0,
     1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0,
     1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9,
     .9},
}};

// 2.18's NVLS and NVLS-Tree baseLat (Simple); it had no NVLink hwLat for them.
constexpr double kNvls218BaseUs = 23.0;

// NCCL_MAX_DIRECT_ARITY + 1 and NCCL_MAX_NVLS_ARITY: local-rank limits of CollNet and of NVLS
// off AllReduce.
constexpr int kMaxCollNetLocalRanks = 8;
constexpr int kMaxNvlsArity = 32;

constexpr std::array<double, 13> kSpeedIntra = {40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3};
constexpr std::array<double, 19> kSpeedInter = {48, 30, 28, 24, 20, 18, 15, 12, 10, 9,
                                                7,  6,  5,  4,  3,  2.4, 1.2, 0.24, 0.12};
constexpr std::array<double, 11> kSm90SpeedIntra = {60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3};
constexpr std::array<double, 17> kSm90SpeedInter = {48, 45, 42, 40, 30, 24, 22, 20, 17.5,
                                                    15, 12, 6,  3,  2.4, 1.2, 0.24, 0.12};
constexpr std::array<double, 12> kSm100SpeedIntra = {90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18};
constexpr std::array<double, 20> kSm100SpeedInter = {96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22,
                                                     20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12};

std::optional<int> algo_index(Algorithm algo) {
  switch (algo) {
    case Algorithm::kTree: return kTree;
    case Algorithm::kRing: return kRing;
    case Algorithm::kCollNetDirect: return kCollNetDirect;
    case Algorithm::kCollNetChain: return kCollNetChain;
    case Algorithm::kNvls: return kNvls;
    case Algorithm::kNvlsTree: return kNvlsTree;
    case Algorithm::kPat: return kPat;
    default: return std::nullopt;
  }
}

int proto_index(Protocol proto) {
  switch (proto) {
    case Protocol::kLL: return kLL;
    case Protocol::kLL128: return kLL128;
    case Protocol::kSimple: return kSimple;
  }
  return kSimple;
}

int arch_index(GpuArch arch) { return static_cast<int>(arch); }

int hw_index(NcclHwLink link) {
  switch (link) {
    case NcclHwLink::kNvlink: return kHwNvlink;
    case NcclHwLink::kPci: return kHwPci;
    case NcclHwLink::kNet: return kHwNet;
  }
  return kHwNet;
}

// NCCL's log2i: floor(log2(n)), -1 for 0.
int log2i(std::uint64_t n) {
  int l = -1;
  while (n != 0) {
    n >>= 1;
    ++l;
  }
  return l;
}

int nsteps(CollectiveOp op, int ranks) {
  switch (op) {
    case CollectiveOp::kAllReduce: return 2 * (ranks - 1);
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter: return ranks - 1;
    default: return ranks;
  }
}

bool is_ag_rs(CollectiveOp op) {
  return op == CollectiveOp::kAllGather || op == CollectiveOp::kReduceScatter;
}

void require(bool ok, const std::string& reason) {
  if (!ok) throw InputError("", "", "NCCL tuning model: " + reason);
}

bool finite_non_negative(double x) { return std::isfinite(x) && x >= 0; }

constexpr std::array<Algorithm, kNumAlgos> kNcclAlgoOrder = {
    Algorithm::kTree, Algorithm::kRing, Algorithm::kCollNetDirect, Algorithm::kCollNetChain,
    Algorithm::kNvls, Algorithm::kNvlsTree, Algorithm::kPat};
constexpr std::array<Protocol, kNumProtos> kNcclProtoOrder = {Protocol::kLL, Protocol::kLL128,
                                                               Protocol::kSimple};

}  // namespace

int parse_nccl_version(const std::string& text, const std::string& where) {
  std::string t = text;
  if (!t.empty() && (t[0] == 'v' || t[0] == 'V')) t = t.substr(1);
  int major = -1, minor = -1;
  size_t used = 0;
  try {
    major = std::stoi(t, &used);
    if (used < t.size() && t[used] == '.') minor = std::stoi(t.substr(used + 1));
  } catch (const std::exception&) {
    major = -1;
  }
  if (major < 0 || minor < 0 || minor > 99) {
    throw InputError("", where, "\"" + text + "\" is not an NCCL version (expected e.g. 2.23.4)");
  }
  const int version = 100 * major + minor;
  if (version < kOldestNcclVersion) {
    throw InputError("", where, "NCCL " + text + " is older than the cost model covers (2.18 and later)");
  }
  return version;
}

NcclTuningModel::NcclTuningModel(NcclTuningInputs in) : in_(std::move(in)) {
  require(in_.ranks >= 1, "ranks must be at least 1");
  require(in_.nodes >= 1, "nodes must be at least 1");
  require(in_.ranks % in_.nodes == 0, "ranks must be a multiple of nodes");
  require(in_.channels >= 1, "channels must be at least 1");
  require(in_.nvls_channels >= 0, "nvls_channels must not be negative");
  require(finite_non_negative(in_.bw_intra_gbs) && finite_non_negative(in_.bw_inter_gbs) &&
              finite_non_negative(in_.nvls_bw_intra_gbs) &&
              finite_non_negative(in_.nvls_bw_inter_gbs),
          "bandwidths must be finite and not negative");
  require(finite_non_negative(in_.latency_inter_us), "latency_inter_us must be finite and not negative");
  require(!in_.net_overhead_us || finite_non_negative(*in_.net_overhead_us),
          "net_overhead_us must be finite and not negative");
  require(in_.nccl_version >= kOldestNcclVersion, "NCCL versions before 2.18 are not modelled");
  ppn_ = in_.ranks / in_.nodes;
  const int v = in_.nccl_version;
  cc_ = arch_index(in_.arch);
  if (v < 228 && cc_ > arch_index(GpuArch::kHopper)) cc_ = arch_index(GpuArch::kHopper);  // no Blackwell rows yet
  // The release's latency tables (reference §2.10), from 2.30.7's.
  base_ = kBaseLatencies;
  hw_ = kHwLatencies;
  if (v < 223) base_[kTree][kSimple] = 0;
  if (v < 228) base_[kPat] = {0, 0, 0};
  if (v >= 219 && v < 223) {
    hw_[kHwNvlink][kTree][kSimple] = 28;
    hw_[kHwNet][kTree][kSimple] = 28;
  }
  if (v < 221) hw_[kHwNvlink][kNvls][kSimple] = hw_[kHwNvlink][kNvlsTree][kSimple] = 23;
  hw_[kHwNet][kNvlsTree][kSimple] = v < 219 ? 19 : v < 228 ? 14 : 20.9;
  // getNetOverhead: x86 Intel 1 µs, x86 AMD 2 µs, anything else 1 µs.
  net_overhead_us_ = in_.net_overhead_us.value_or(in_.cpu == CpuVendor::kAmd ? 2.0 : 1.0);
}

bool NcclTuningModel::allowed(CollectiveOp op, Algorithm algo, Protocol proto) const {
  const std::optional<int> a = algo_index(algo);
  if (!a) return false;
  // Point-to-point has no model in tuning.cc; one rank never reaches the model.
  if (op == CollectiveOp::kAllToAll || op == CollectiveOp::kSendRecv) return false;
  if (in_.ranks < 2) return false;

  switch (op) {
    case CollectiveOp::kBroadcast:
    case CollectiveOp::kReduce:
      if (*a != kRing) return false;
      break;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
      if (*a != kRing && *a != kPat && *a != kNvls && *a != kCollNetDirect) return false;
      if (*a != kRing && in_.nccl_version < 223) return false;  // ring only before 2.23
      break;
    case CollectiveOp::kAllReduce:
      if (*a == kPat) return false;
      break;
    default: return false;
  }

  if (proto == Protocol::kLL128 && !in_.ll128_enabled) return false;
  const bool simple = proto == Protocol::kSimple;
  switch (*a) {
    case kNvls:
    case kNvlsTree:
      if (!simple || !in_.nvls_supported || in_.nvls_channels < 2) return false;
      if (*a == kNvlsTree && in_.nodes == 1) return false;
      if (*a == kNvls && in_.nodes > 1 && !in_.collnet_supported) return false;
      if (op != CollectiveOp::kAllReduce && ppn_ > kMaxNvlsArity) return false;
      break;
    case kCollNetDirect:
    case kCollNetChain:
      if (!simple || !in_.collnet_supported || ppn_ > kMaxCollNetLocalRanks) return false;
      break;
    case kPat:
      // ncclPatEnable's auto rule: 1 GPU per node (CC ≥ 6.0 holds for every GpuArch).
      if (!simple || !in_.pat_enabled || in_.nodes != in_.ranks || in_.nccl_version < 223) return false;
      break;
    default: break;
  }
  // NVLS and CollNet Direct AllGather/ReduceScatter across nodes go through the CollNet plugin.
  if ((*a == kNvls || *a == kCollNetDirect) && is_ag_rs(op) && in_.nodes > 1 &&
      !(in_.collnet_supported && in_.collnet_ag_rs_supported)) {
    return false;
  }
  return true;
}

double NcclTuningModel::protocol_cap_ratio(CollectiveOp op, Algorithm algo, Protocol proto) const {
  if (!allowed(op, algo, proto)) return 1.0;
  double ratio = 1.0;
  bus_bandwidth(op, algo, proto, &ratio);
  return ratio;
}

NcclTuningModel::LinkBandwidths NcclTuningModel::link_bandwidths(bool nvls) const {
  LinkBandwidths b;
  b.intra = nvls && in_.nvls_bw_intra_gbs > 0 ? in_.nvls_bw_intra_gbs : in_.bw_intra_gbs;
  b.inter = nvls && in_.nvls_bw_inter_gbs > 0 ? in_.nvls_bw_inter_gbs : in_.bw_inter_gbs;
  if (in_.nodes == 1 && !(nvls ? in_.nvls_bw_inter_gbs > 0 : in_.bw_inter_gbs > 0)) b.inter = b.intra;
  return b;
}

// One channel's bandwidth for algorithm index `a` on `nch` channels, before the protocols.
double NcclTuningModel::channel_bandwidth(CollectiveOp op, int a, int nch) const {
  const int cc = cc_;
  const int v = in_.nccl_version;
  const int nodes_idx = in_.nodes <= 2 ? in_.nodes - 1 : 2;
  const bool nvls = a == kNvls || a == kNvlsTree;
  const bool collnet = a == kCollNetDirect || a == kCollNetChain;
  const LinkBandwidths links = link_bandwidths(nvls);
  double bw = in_.nodes <= 2 || collnet ? links.intra : links.inter;
  if (nvls && v < 228) {
    // 2.19–2.27: the NVLS graph's two bandwidths, the tree's network leg halved beyond two
    // nodes; 2.18: the plain per-channel figure above.
    if (v >= 219 && a == kNvls) {
      bw = op == CollectiveOp::kAllReduce ? std::min(links.intra, links.inter)
                                          : std::min(links.intra * (ppn_ - 1.0) / ppn_, 0.9 * links.inter);
    }
    if (v >= 219 && a == kNvlsTree) bw = std::min(links.intra, in_.nodes <= 2 ? links.inter : links.inter / 2);
  } else if (nvls) {
    // One NVLS channel is spent on synchronisation; AllReduce pipelines its reduce and its
    // multicast, while AllGather/ReduceScatter leave out the local rank's own share.
    double intra_bw = links.intra * kNvlsEfficiency[cc] * (nch - 1) / nch;
    intra_bw *= op == CollectiveOp::kAllReduce ? 2.0 : (ppn_ - 1.0) / ppn_;
    const double inter_bw = links.inter * (a == kNvlsTree && in_.nodes <= 2 ? 2.0 : 1.0);
    bw = std::min(intra_bw, inter_bw);
    if (a == kNvlsTree) {
      double cap = kPerChMaxNvlsTreeBws[cc][nodes_idx];
      if (cc == arch_index(GpuArch::kBlackwell) && nodes_idx == 2 && v < 230) cap = 43.8;  // raised in 2.30
      bw = std::min(bw, cap);
    }
  }
  return bw;
}

// The bus bandwidth `bus` of `nch` channels as protocol `p` of algorithm `a` runs it.
double NcclTuningModel::protocol_bandwidth(CollectiveOp op, int a, int p, int nch, double bus, double* cap_ratio) const {
  const int cc = cc_;
  const int v = in_.nccl_version;
  const int nodes_idx = in_.nodes <= 2 ? in_.nodes - 1 : 2;
  const int ll_row = in_.nodes == 1 ? cc : (in_.cpu == CpuVendor::kAmd ? 1 : 0);
  const double ll_max_bw = kLlMaxBws[ll_row][nodes_idx];
  const bool collnet = a == kCollNetDirect || a == kCollNetChain;
  // A protocol's bandwidth cap (llMaxBw, the per-channel LL128 maxima): what it cuts is noted.
  auto capped = [&](double wanted, double cap) {
    if (cap_ratio && wanted > 0) *cap_ratio *= std::min(1.0, cap / wanted);
    return std::min(wanted, cap);
  };
  if (a == kRing && p == kLL) {
    // Before 2.21 Ring LL ran at 1/4 (several nodes, AllReduce, Reduce) or 1/3 of the bandwidth.
    const bool quarter = in_.nodes > 1 || op == CollectiveOp::kAllReduce || op == CollectiveOp::kReduce;
    bus = capped(bus * (v >= 221 ? 0.5 : quarter ? 0.25 : 1.0 / 3.0), ll_max_bw);
  }
  if (a == kRing && p == kLL128) {
    const double factor = v < 223 && ppn_ < 2 ? 0.7 : 0.92;  // one GPU per node paid more before 2.23
    bus = capped(bus * factor, nch * kPerChMaxRingLL128Bws[cc][nodes_idx]);
  }
  if (a == kTree && op == CollectiveOp::kAllReduce) bus = std::min(bus * 0.92, nch * kPerChMaxTreeBws[cc][nodes_idx]);
  if (a == kTree && p == kLL) bus = capped(bus / 3.8, ll_max_bw);
  if (a == kTree && p == kLL128) {
    bus = capped(bus * (in_.nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), nch * kPerChMaxTreeLL128Bws[cc][nodes_idx]);
  }
  if (a == kTree && in_.tree_pattern_single_nic) bus *= 0.85;
  if (a == kPat) bus *= v < 224 ? 0.85 : 0.75;
  if (collnet && p != kSimple) bus = 0;
  if (a == kCollNetDirect && p == kSimple) {
    if (is_ag_rs(op)) {
      const LinkBandwidths links = link_bandwidths(false);
      bus = ppn_ * std::min(links.intra, links.inter * 0.9);
    } else {
      // Full speed needs a NIC per GPU: discount by half the GPU:NIC (channel) oversubscription.
      double factor = static_cast<double>(ppn_) / nch;
      factor -= (factor - 1) / 2;
      bus /= factor;
      if (in_.arch >= GpuArch::kHopper) bus *= 0.85;
    }
  }
  return bus;
}

double NcclTuningModel::bus_bandwidth(CollectiveOp op, Algorithm algo, Protocol proto, double* cap_ratio) const {
  const int a = *algo_index(algo);
  const bool nvls = a == kNvls || a == kNvlsTree;
  const int nch = nvls ? in_.nvls_channels : in_.channels;
  return protocol_bandwidth(op, a, proto_index(proto), nch, nch * channel_bandwidth(op, a, nch), cap_ratio);
}

double NcclTuningModel::latency(CollectiveOp op, Algorithm algo, Protocol proto) const {
  const int a = *algo_index(algo);
  const int p = proto_index(proto);
  const int intra_hw = in_.intra == NcclLinkType::kNvlink ? kHwNvlink : kHwPci;
  const int steps = nsteps(op, in_.ranks);
  const int log_nodes = log2i(static_cast<std::uint64_t>(in_.nodes));

  auto hw = [&](int link, int algo_idx, int proto_idx) {
    if (in_.cpu == CpuVendor::kPower && link == kHwPci && algo_idx == kTree && proto_idx == kSimple) {
      return hw_[kHwPci][kRing][kSimple];  // favours Tree on POWER
    }
    return hw_[link][algo_idx][proto_idx];
  };

  const double base = base_[a][p];
  const double intra_lat = hw(intra_hw, a, p);
  // With one GPU per node every network hop is exposed: NCCL charges the Tree NET latency.
  double inter_lat = ppn_ == 1 ? hw(kHwNet, kTree, p) : hw(kHwNet, a, p);
  inter_lat += in_.latency_inter_us;
  if (p == kSimple) inter_lat += in_.latency_inter_us;  // flush

  switch (a) {
    case kRing: {
      if (op == CollectiveOp::kBroadcast || op == CollectiveOp::kReduce) {
        const int link = in_.nodes == 1 ? intra_hw : kHwNet;
        if (in_.ring_same_channels) return base + hw(link, kRing, p);
        // Simple stands in a chunk's latency with the Tree figure.
        const double step = p == kSimple ? hw(link, kTree, p) : hw(link, kRing, p);
        return base + steps * step;
      }
      double overhead = 0;
      if (in_.nodes > 1) overhead = net_overhead_us_ * (p == kSimple ? 3.0 : 1.0);
      // Before 2.23 an AllReduce counted 2·nNodes network steps, not 2(nNodes − 1).
      const int ar_inter = in_.nccl_version < 223 ? 2 * in_.nodes : 2 * (in_.nodes - 1);
      const int inter_steps = in_.nodes == 1 ? 0 : (op == CollectiveOp::kAllReduce ? ar_inter : in_.nodes - 1);
      return base + (steps - inter_steps) * std::max(intra_lat, overhead) + inter_steps * inter_lat;
    }
    case kTree:
      return base + 2 * ((ppn_ - 1) * intra_lat + log_nodes * inter_lat);
    case kCollNetDirect:
      // 0.4 µs of arity serialisation per local peer.
      return base + 2 * (std::min(1, ppn_ - 1) * intra_lat + (ppn_ - 1) * 0.4) + inter_lat;
    case kCollNetChain:
      return base + 2 * (ppn_ - 1) * intra_lat + inter_lat;
    case kNvls:
      if (in_.nccl_version < 219) return kNvls218BaseUs + (in_.nodes > 1 ? inter_lat : 0.0);
      return intra_lat + (in_.nodes > 1 ? inter_lat : 0.0);
    case kNvlsTree:
      // 2.18 charged every node of a chain: 2(nNodes − 1) network hops after a 23 µs base.
      if (in_.nccl_version < 219) return kNvls218BaseUs + 2 * (in_.nodes - 1) * inter_lat;
      return base + intra_lat + 2 * log_nodes * inter_lat;
    case kPat:
      return base + log_nodes * inter_lat / 3.5 + 2.8 * in_.ranks;
    default: return 0;
  }
}

NcclCost NcclTuningModel::cost(CollectiveOp op, Algorithm algo, Protocol proto) const {
  if (!allowed(op, algo, proto)) return {};
  double bw = bus_bandwidth(op, algo, proto);
  if (!(bw > 0)) return {};
  const int a = *algo_index(algo);
  if (!(a != kRing && is_ag_rs(op))) {
    // The ring ratio is the inverse of nccl-tests' busbw factor; Tree and CollNet move each
    // byte twice (up and down).
    const bool ring_like = a == kRing || a == kNvls || a == kNvlsTree;
    double ratio = ring_like ? static_cast<double>(in_.ranks) / nsteps(op, in_.ranks) : 0.5;
    if ((a == kNvls || a == kNvlsTree) && in_.nccl_version < 228) {
      // Before 2.28 NVLS(-Tree) converted at 5/6; 2.18's NVLS-Tree at 0.7·nNodes/(2(nNodes−1)).
      ratio = a == kNvlsTree && in_.nccl_version < 219 ? 0.7 * in_.nodes / (2.0 * (in_.nodes - 1)) : 5.0 / 6.0;
    }
    bw *= ratio;
  }
  return {true, latency(op, algo, proto), bw};
}

std::optional<double> NcclTuningModel::time_us(CollectiveOp op, Algorithm algo, Protocol proto,
                                               double bytes) const {
  require(std::isfinite(bytes) && bytes >= 0, "bytes must be finite and not negative");
  const NcclCost c = cost(op, algo, proto);
  if (!c.enabled) return std::nullopt;
  double lat = c.latency_us;
  double bw = c.bandwidth_gbs;
  const auto n_bytes = static_cast<std::uint64_t>(bytes);
  const int log_size = log2i(n_bytes >> 6);
  const int p = proto_index(proto);
  if (op == CollectiveOp::kAllReduce && log_size >= 0) {
    const bool x86 = in_.cpu == CpuVendor::kIntel || in_.cpu == CpuVendor::kAmd;
    if (algo == Algorithm::kTree && log_size < 23) bw *= kTreeCorrectionFactor[p][log_size];
    if (algo == Algorithm::kNvlsTree && log_size < 24 && in_.arch >= GpuArch::kBlackwell && x86) {
      bw *= kTreeCorrectionFactor[p][log_size];
    }
  }
  if (algo == Algorithm::kRing && proto == Protocol::kSimple && in_.nodes > 1 &&
      op == CollectiveOp::kAllReduce &&
      n_bytes / (static_cast<std::uint64_t>(in_.channels) * static_cast<std::uint64_t>(in_.ranks)) >= 64) {
    lat *= in_.arch >= GpuArch::kAmpere ? 1.4 : 1.9;  // "plateau effect of ring"
  }
  return lat + bytes / (1000.0 * bw);
}

std::optional<NcclTuningModel::Choice> NcclTuningModel::choose(
    CollectiveOp op, double bytes, std::span<const Algorithm> allowed_algos,
    std::span<const Protocol> allowed_protos) const {
  require(std::isfinite(bytes) && bytes >= 0, "bytes must be finite and not negative");
  auto algo_ok = [&](Algorithm x) {
    return allowed_algos.empty() || std::find(allowed_algos.begin(), allowed_algos.end(), x) != allowed_algos.end();
  };
  auto proto_ok = [&](Protocol x) {
    return allowed_protos.empty() ||
           std::find(allowed_protos.begin(), allowed_protos.end(), x) != allowed_protos.end();
  };
  if (in_.ranks == 1) {
    if (op == CollectiveOp::kAllToAll || op == CollectiveOp::kSendRecv) return std::nullopt;
    if (algo_ok(Algorithm::kRing) && proto_ok(Protocol::kSimple)) {
      return Choice{Algorithm::kRing, Protocol::kSimple, 0.0};
    }
    return std::nullopt;
  }
  std::optional<Choice> best;
  for (Algorithm algo : kNcclAlgoOrder) {
    if (!algo_ok(algo)) continue;
    for (Protocol proto : kNcclProtoOrder) {
      if (!proto_ok(proto)) continue;
      const std::optional<double> t = time_us(op, algo, proto, bytes);
      if (t && (!best || *t < best->time_us)) best = Choice{algo, proto, *t};
    }
  }
  return best;
}

int NcclTuningModel::nvls_enqueue_channels(Algorithm algo) const {
  const int v = in_.nccl_version;
  int ctas = 16;  // NVLS_NCHANNELS (SM90 throughout)
  if (in_.arch >= GpuArch::kBlackwell && v >= 225) ctas = v >= 227 && in_.nodes == 1 ? 24 : 32;
  if (v >= 228 && in_.nodes > 1 && algo == Algorithm::kNvls) ctas = std::min(ctas, in_.channels);
  return ctas;
}

int NcclTuningModel::enqueue_channels(Algorithm algo, Protocol proto, double bytes) const {
  require(std::isfinite(bytes) && bytes >= 0, "bytes must be finite and not negative");
  const std::optional<int> a = algo_index(algo);
  if (!a) return 1;
  if (*a == kNvls || *a == kNvlsTree) return nvls_enqueue_channels(algo);
  const int p = proto_index(proto);
  // maxThreads and threadThresholds (tuning.cc, comm.h, device.h).
  constexpr double kPciBwGbs = 12.0;
  int threads = p == kLL128 ? 640 : 512;
  if (*a == kRing && p == kSimple && in_.bw_intra_gbs * in_.channels <= kPciBwGbs) threads = 256;
  if (*a == kCollNetDirect || *a == kCollNetChain) threads = 640;
  double threshold = p == kSimple ? 64.0 : 8.0;
  if (*a == kRing && p == kLL) threshold *= in_.ranks;
  if ((*a == kCollNetDirect || *a == kCollNetChain) && p == kSimple) threshold = 512.0;
  int nc = in_.channels;
  if (*a == kCollNetDirect) {
    const double heads = ppn_;
    bool short_of_work = true;
    for (int step = 16; step >= 1 && short_of_work; step /= 2) {
      while ((short_of_work = bytes < nc * threads * heads * threshold) && nc > step) {
        if (nc == step + step / 2) threshold /= 2;
        --nc;
      }
    }
    return nc;
  }
  while (nc >= 2 && bytes < static_cast<double>(nc) * threads * threshold) --nc;
  return nc;
}

std::optional<double> NcclTuningModel::hw_latency_us(NcclHwLink link, Algorithm algo, Protocol proto) const {
  const std::optional<int> a = algo_index(algo);
  if (!a) return std::nullopt;
  return hw_[hw_index(link)][*a][proto_index(proto)];
}

std::optional<double> NcclTuningModel::base_latency_us(Algorithm algo, Protocol proto) const {
  const std::optional<int> a = algo_index(algo);
  if (!a) return std::nullopt;
  return base_[*a][proto_index(proto)];
}

bool is_nccl_algorithm(Algorithm algo) { return algo_index(algo).has_value(); }

std::optional<double> nccl_hw_latency_us(NcclHwLink link, Algorithm algo, Protocol proto) {
  const std::optional<int> a = algo_index(algo);
  if (!a) return std::nullopt;
  return kHwLatencies[hw_index(link)][*a][proto_index(proto)];
}

std::optional<double> nccl_base_latency_us(Algorithm algo, Protocol proto) {
  const std::optional<int> a = algo_index(algo);
  if (!a) return std::nullopt;
  return kBaseLatencies[*a][proto_index(proto)];
}

double protocol_wire_efficiency(Protocol proto) {
  switch (proto) {
    case Protocol::kLL: return 0.5;
    case Protocol::kLL128: return 120.0 / 128.0;
    case Protocol::kSimple: return 1.0;
  }
  return 1.0;
}

GpuArch nccl_gpu_arch(int compute_capability) {
  if (compute_capability >= 100) return GpuArch::kBlackwell;
  if (compute_capability >= 90) return GpuArch::kHopper;
  if (compute_capability >= 80) return GpuArch::kAmpere;
  return GpuArch::kVolta;
}

double nccl_nvlink_bw_per_link_gbs(int compute_capability) {
  if (compute_capability >= 100) return 40.1;
  if (compute_capability >= 90) return 20.6;
  if (compute_capability == 86) return 12.0;
  if (compute_capability >= 80) return 20.0;
  if (compute_capability >= 70) return 20.0;
  if (compute_capability >= 60) return 18.0;
  return 0.0;
}

double nccl_nvlink_bw_per_link_gbs(GpuArch arch) {
  switch (arch) {
    case GpuArch::kVolta: return nccl_nvlink_bw_per_link_gbs(70);
    case GpuArch::kAmpere: return nccl_nvlink_bw_per_link_gbs(80);
    case GpuArch::kHopper: return nccl_nvlink_bw_per_link_gbs(90);
    case GpuArch::kBlackwell: return nccl_nvlink_bw_per_link_gbs(100);
  }
  return 0.0;
}

double nccl_pci_bw_gbs(int generation, int width) {
  require(generation >= 1 && generation <= 6, "PCIe generation must be 1 to 6");
  require(width >= 1, "PCIe width must be at least 1");
  constexpr std::array<int, 6> kLaneSpeed = {15, 30, 60, 120, 240, 480};  // 100 Mb/s units
  return static_cast<double>(width) * kLaneSpeed[static_cast<std::size_t>(generation - 1)] / 80.0;
}

double nccl_net_bw_gbs(double speed_mbps) { return speed_mbps / 8000.0; }

std::span<const double> nccl_search_speeds(GpuArch arch, bool inter) {
  if (arch >= GpuArch::kBlackwell) {
    return inter ? std::span<const double>(kSm100SpeedInter) : std::span<const double>(kSm100SpeedIntra);
  }
  if (arch >= GpuArch::kHopper) {
    return inter ? std::span<const double>(kSm90SpeedInter) : std::span<const double>(kSm90SpeedIntra);
  }
  return inter ? std::span<const double>(kSpeedInter) : std::span<const double>(kSpeedIntra);
}

double nccl_search_speed(GpuArch arch, bool inter, double max_gbs) {
  const std::span<const double> speeds = nccl_search_speeds(arch, inter);
  for (double s : speeds) {
    if (s <= max_gbs) return s;
  }
  return speeds.back();
}

NcclGraphBw nccl_dup_channels(int compute_capability, NcclGraphBw graph, int max_channels) {
  if (graph.bw_intra_gbs < 25.0) return graph;
  if (compute_capability > 80 && graph.bw_intra_gbs < 50.0 && graph.channels > 4) return graph;
  const int dup = std::min(graph.channels * 2, max_channels);
  if (dup <= graph.channels) return graph;
  const int divisor = (dup + graph.channels - 1) / graph.channels;
  graph.bw_intra_gbs /= divisor;
  graph.bw_inter_gbs /= divisor;
  graph.channels = dup;
  return graph;
}

}  // namespace parallax
