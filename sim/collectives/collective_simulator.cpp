// From a question to a timed collective: NCCL's view of the topology, selection, lowering, run.
#include "collectives/collective_simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <stdexcept>

#include "collectives/closed_forms.h"
#include "engine/engine.h"
#include "io/input_error.h"
#include "network/network_model.h"

namespace parallax {
namespace {

bool contains(const std::string& haystack, std::initializer_list<const char*> needles) {
  return std::any_of(needles.begin(), needles.end(), [&](const char* n) { return haystack.find(n) != std::string::npos; });
}

int compute_capability(GpuArch arch) {
  switch (arch) {
    case GpuArch::kVolta: return 70;
    case GpuArch::kAmpere: return 80;
    case GpuArch::kHopper: return 90;
    case GpuArch::kBlackwell: return 100;
  }
  return 90;
}

// NCCL's nvlsEfficiency (tuning.cc): the fraction of NVLink bandwidth NVLS reaches.
double nvls_efficiency(GpuArch arch) {
  switch (arch) {
    case GpuArch::kHopper: return 0.85;
    case GpuArch::kBlackwell: return 0.74;
    default: return 1.0;
  }
}

bool nccl_models(Algorithm a) {
  switch (a) {
    case Algorithm::kRing:
    case Algorithm::kTree:
    case Algorithm::kNvls:
    case Algorithm::kNvlsTree:
    case Algorithm::kCollNetDirect:
    case Algorithm::kCollNetChain:
    case Algorithm::kPat: return true;
    default: return false;
  }
}

// `nominal_gbs` is the bottleneck as NCCL's topology sees it: NVLink and PCIe at NCCL's own
// figures (which the scaled links already are), a NIC at the speed it reports (its wire
// efficiency, `network_efficiency`, undone). NCCL's search quantises that to its speed arrays.
struct PathFacts {
  double bottleneck_gbs = 0;
  double nominal_gbs = 0;
  bool all_nvlink = true;
  std::optional<LinkId> first_network_link;
};

PathFacts path_facts(const Topology& topo, const Router& router, DeviceId a, DeviceId b, double network_efficiency) {
  PathFacts f;
  f.bottleneck_gbs = f.nominal_gbs = INFINITY;
  for (LinkId l : router.route(a, b)) {
    const Link& link = topo.link(l);
    const double gbs = link.bandwidth.value() / 1e9;
    f.bottleneck_gbs = std::min(f.bottleneck_gbs, gbs);
    f.nominal_gbs = std::min(f.nominal_gbs, link.link_class == LinkClass::kNetwork ? gbs / network_efficiency : gbs);
    f.all_nvlink = f.all_nvlink && link.link_class == LinkClass::kNVLink;
    if (!f.first_network_link && link.link_class == LinkClass::kNetwork) f.first_network_link = l;
  }
  return f;
}

}  // namespace

GpuArch gpu_arch_of(const GpuSpec& spec) {
  std::string name;
  for (char c : spec.name) name.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  if (contains(name, {"B100", "B200", "B300", "GB200", "GB300", "RTX PRO 6000", "RTX 50"})) return GpuArch::kBlackwell;
  if (contains(name, {"H100", "H200", "H800", "H20", "GH200"})) return GpuArch::kHopper;
  if (contains(name, {"V100", "T4", "RTX 20", "2080", "TITAN V", "P100"})) return GpuArch::kVolta;
  return GpuArch::kAmpere;  // A100/A800/A10/A30/A40, L4/L40/L40S, RTX 30xx/40xx: NCCL's 8.x row
}

LinkEfficiency LinkEfficiency::defaults_for(GpuArch arch) {
  LinkEfficiency e;
  switch (arch) {
    case GpuArch::kHopper: e.nvlink = 20.6 / 25.0; break;
    case GpuArch::kBlackwell: e.nvlink = 40.1 / 50.0; break;
    default: e.nvlink = 20.0 / 25.0; break;
  }
  return e;
}

LinkEfficiency link_efficiency_of(const Topology& topo, std::optional<LinkEfficiency> efficiency) {
  if (topo.gpu_count() == 0) throw std::invalid_argument("the topology has no GPUs");
  return efficiency.value_or(LinkEfficiency::defaults_for(gpu_arch_of(topo.gpu_spec_of(topo.gpus()[0]))));
}

Topology with_link_efficiency(const Topology& topo, std::optional<LinkEfficiency> efficiency) {
  Topology scaled = topo;
  const LinkEfficiency e = link_efficiency_of(topo, efficiency);
  scaled.scale_link_bandwidth(LinkClass::kNVLink, e.nvlink);
  scaled.scale_link_bandwidth(LinkClass::kPcie, e.pcie);
  scaled.scale_link_bandwidth(LinkClass::kNetwork, e.network);
  scaled.scale_link_bandwidth(LinkClass::kCpu, e.cpu);
  scaled.scale_link_bandwidth(LinkClass::kShm, e.shm);
  return scaled;
}

CollectiveSimulator::CollectiveSimulator(const Topology& topo, int gpus, std::optional<int> per_node,
                                         std::optional<LinkEfficiency> efficiency)
    : topo_(std::make_unique<Topology>(with_link_efficiency(topo, efficiency))), calibrated_(topo.info().calibration) {
  arch_ = gpu_arch_of(topo_->gpu_spec_of(topo_->gpus()[0]));
  router_ = std::make_unique<Router>(*topo_);
  comm_ = std::make_unique<Communicator>(place_ranks(*topo_, gpus, per_node));

  // What NCCL's graph search would find: per-channel bandwidth quantised to its speed arrays,
  // as many channels as the links carry, then its channel duplication rule.
  const Communicator& c = *comm_;
  const auto& nodes = c.nodes();
  NcclTuningInputs in;
  in.ranks = c.size();
  in.nodes = c.node_count();
  in.arch = arch_;
  if (!topo.info().nccl_version.empty()) {
    try {
      in.nccl_version = parse_nccl_version(topo.info().nccl_version, "/nccl_version");
    } catch (const InputError& e) {
      throw InputError(topo.info().file, e.pointer(), e.reason());
    }
  }
  const int cc = compute_capability(arch_);
  constexpr double kLocalBw = 5000;  // NCCL's LOC_BW: a rank alone in its node
  intra_gbs_ = kLocalBw;
  const double network_efficiency = link_efficiency_of(topo, efficiency).network;
  if (nodes.front().size() >= 2) {
    PathFacts f =
        path_facts(*topo_, *router_, c.device(nodes.front()[0]), c.device(nodes.front()[1]), network_efficiency);
    intra_gbs_ = f.bottleneck_gbs;
    in.intra = f.all_nvlink ? NcclLinkType::kNvlink : NcclLinkType::kPci;
  }
  NcclGraphBw graph;
  if (c.node_count() == 1) {
    // The search keeps the speed that moves the most (channels × speed), channels capped at
    // MAXCHANNELS/2 before duplication; ties go to the higher speed, tried first.
    constexpr int kSearchChannels = kNcclMaxChannels / 2;
    double best_total = 0, best_speed = 0;
    for (double s : nccl_search_speeds(arch_, false)) {
      double total = std::min(std::floor(intra_gbs_ / s), static_cast<double>(kSearchChannels)) * s;
      if (total > best_total) {
        best_total = total;
        best_speed = s;
      }
    }
    if (best_speed == 0) best_speed = nccl_search_speed(arch_, false, intra_gbs_);
    graph.bw_intra_gbs = graph.bw_inter_gbs = best_speed;
    graph.channels = std::clamp(static_cast<int>(std::floor(intra_gbs_ / best_speed)), 1, kSearchChannels);
    inter_gbs_ = intra_gbs_;
  } else {
    std::set<uint32_t> nics;
    double nic_gbs = INFINITY, nic_nominal_gbs = INFINITY;
    const size_t local = std::min(nodes[0].size(), nodes[1].size());
    for (size_t g = 0; g < local; ++g) {
      PathFacts f = path_facts(*topo_, *router_, c.device(nodes[0][g]), c.device(nodes[1][g]), network_efficiency);
      nic_gbs = std::min(nic_gbs, f.bottleneck_gbs);
      nic_nominal_gbs = std::min(nic_nominal_gbs, f.nominal_gbs);
      if (f.first_network_link) nics.insert(f.first_network_link->value);
    }
    const int nic_count = std::max<int>(1, static_cast<int>(nics.size()));
    // The NIC's network stack reports its latency to NCCL (latencyInter, ×2 for Simple).
    for (uint32_t l : nics) {
      in.latency_inter_us = std::max(in.latency_inter_us, topo_->device(topo_->link(LinkId{l}).from).reported_latency.seconds() * 1e6);
    }
    const double speed = nccl_search_speed(arch_, true, std::min(nic_nominal_gbs, intra_gbs_));
    graph.bw_intra_gbs = graph.bw_inter_gbs = speed;
    // Every channel's ring also passes each GPU's NVLink at its speed (NCCL's search takes the
    // speed off every link of the path), so with many NICs per node (a 72-GPU NVLink rack, one
    // NIC per GPU) the GPU's NVLink, not the NIC count, caps the channels.
    int channels = nic_count * std::max(1, static_cast<int>(std::floor(nic_nominal_gbs / speed)));
    if (nodes.front().size() >= 2) channels = std::min(channels, static_cast<int>(std::floor(intra_gbs_ / speed)));
    graph.channels = std::clamp(channels, 1, kNcclMaxChannels / 2);
    inter_gbs_ = nic_gbs * nic_count / static_cast<double>(c.ranks_per_node());
  }
  graph = nccl_dup_channels(cc, graph, kNcclMaxChannels);
  in.channels = graph.channels;
  in.bw_intra_gbs = graph.bw_intra_gbs;
  in.bw_inter_gbs = graph.bw_inter_gbs;
  in.nvls_supported =
      c.uniform() && !unsupported_reason(CollectiveOp::kAllReduce, c.node_count() == 1 ? Algorithm::kNvls : Algorithm::kNvlsTree,
                                         c, *router_);
  // NCCL's NVLS graph: one channel per local GPU (head), each at the speed that fits the GPU's
  // NVLink bandwidth.
  in.nvls_channels = c.ranks_per_node();
  in.nvls_bw_intra_gbs = nccl_search_speed(arch_, false, intra_gbs_ / std::max(1, in.nvls_channels));
  // On one node NCCL's search (search.cc, pass 2) raises the NVLS graph's bwInter one speed at
  // a time while it is below twice bwIntra, up to the top of the intra speed array: 40 → 60 on
  // H100, so 8×H100 NVLS reaches min(2·40·0.85·7/8, 60)·8 = 476 GB/s busbw (NVIDIA measures
  // ~480, nccl-tests issue 212), where bwInter = bwIntra would cap it at 320 and never beat Ring.
  if (in.nodes == 1) {
    const std::span<const double> speeds = nccl_search_speeds(arch_, false);  // high to low
    double raised = in.nvls_bw_intra_gbs;
    for (auto it = speeds.rbegin(); it != speeds.rend() && raised < 2 * in.nvls_bw_intra_gbs; ++it) {
      if (*it > raised) raised = *it;
    }
    in.nvls_bw_inter_gbs = raised;
  }
  in.collnet_supported = !unsupported_reason(CollectiveOp::kAllReduce, Algorithm::kCollNetDirect, c, *router_);
  in.pat_enabled = true;  // NCCL's auto rule (1 GPU per node) is the model's own check
  // NCCL's auto-LL128 needs NVLink inside the node (typeIntra ≤ NVB) and Volta or newer.
  in.ll128_enabled = in.intra == NcclLinkType::kNvlink || c.ranks_per_node() == 1;
  if (c.size() % c.node_count() != 0) {
    // NCCL's model assumes a whole number of ranks per node; round as nRanks/nNodes does.
    in.ranks = c.node_count() * std::max(1, c.size() / c.node_count());
  }
  tuning_ = std::make_unique<NcclTuningModel>(in);
}

CollectiveSimulator::Choice CollectiveSimulator::choose(CollectiveOp op, Bytes size,
                                                        const CollectiveOptions& options) const {
  if (op == CollectiveOp::kAllToAll || op == CollectiveOp::kSendRecv) {
    // NCCL runs these as grouped point-to-point with the Simple protocol; it has no cost model.
    Algorithm a = options.algorithm.value_or(op == CollectiveOp::kAllToAll ? Algorithm::kDirect : Algorithm::kRing);
    return Choice{a, options.protocol.value_or(Protocol::kSimple)};
  }
  if (options.algorithm && options.protocol) return Choice{*options.algorithm, *options.protocol};
  if (options.algorithm && !nccl_models(*options.algorithm)) {
    return Choice{*options.algorithm, options.protocol.value_or(Protocol::kSimple)};
  }
  std::vector<Algorithm> algos;
  if (options.algorithm) {
    algos.push_back(*options.algorithm);
  } else {
    for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kNvls, Algorithm::kNvlsTree, Algorithm::kCollNetDirect,
                        Algorithm::kCollNetChain, Algorithm::kPat}) {
      if (!unsupported_reason(op, a, *comm_, *router_)) algos.push_back(a);
    }
  }
  std::vector<Protocol> protos;
  if (options.protocol) protos.push_back(*options.protocol);
  auto pick = tuning_->choose(op, size.value(), algos, protos);
  if (!pick) {
    if (options.algorithm) return Choice{*options.algorithm, options.protocol.value_or(Protocol::kSimple)};
    return Choice{Algorithm::kRing, options.protocol.value_or(Protocol::kSimple)};
  }
  return Choice{pick->algo, pick->proto};
}

LoweringOptions CollectiveSimulator::lowering_options(CollectiveOp op, Algorithm algo, Protocol proto, int channels) const {
  const NcclTuningInputs& in = tuning_->inputs();
  // MPI-style algorithms take the Ring's latencies: the same kernels move their steps.
  Algorithm lat_algo = nccl_models(algo) ? algo : Algorithm::kRing;
  auto us = [](std::optional<double> v) { return Time::us(v.value_or(0.0)); };
  LoweringOptions o;
  o.channels = channels;
  o.base_latency = us(tuning_->base_latency_us(lat_algo, proto));
  NcclHwLink intra = in.intra == NcclLinkType::kNvlink ? NcclHwLink::kNvlink : NcclHwLink::kPci;
  o.step_latency_intra = us(tuning_->hw_latency_us(intra, lat_algo, proto));
  double inter_us = tuning_->hw_latency_us(NcclHwLink::kNet, lat_algo, proto).value_or(0.0) + in.latency_inter_us;
  if (proto == Protocol::kSimple) inter_us += in.latency_inter_us;
  o.step_latency_inter = Time::us(inter_us);
  if (in.nodes > 1 && lat_algo == Algorithm::kRing) {
    // Ring steps inside a node on a multi-node communicator pay at least the net post overhead.
    double ovh = (in.cpu == CpuVendor::kAmd ? 2.0 : 1.0) * (proto == Protocol::kSimple ? 3.0 : 1.0);
    o.step_latency_intra = std::max(o.step_latency_intra, Time::us(ovh));
  }
  o.wire_efficiency = protocol_wire_efficiency(proto);
  // LL and LL128 move data no faster than NCCL's caps for them (llMaxBw, per-channel LL128
  // maxima), whatever the links could: the transfers carry correspondingly more wire bytes.
  if (nccl_models(algo)) o.wire_efficiency *= tuning_->protocol_cap_ratio(op, algo, proto);
  if (algo == Algorithm::kPat) {
    // NCCL's PAT terms: a round crossing nodes costs interLat/3.5, plus 2.8 µs per rank of
    // set-up, and its kernels move data at 3/4 of the ring's rate (busBw ×0.75; ×0.85 on 2.23).
    o.step_latency_inter = Time::from_seconds(o.step_latency_inter.seconds() / 3.5);
    o.base_latency = o.base_latency + Time::us(2.8 * comm_->size());
    o.wire_efficiency *= in.nccl_version < 224 ? 0.85 : 0.75;
  }
  o.switch_reduction_efficiency = algo == Algorithm::kNvls || algo == Algorithm::kNvlsTree ? nvls_efficiency(arch_) : 1.0;
  return o;
}

Time CollectiveSimulator::analytical_time(CollectiveOp op, Bytes size, Algorithm algo, Protocol proto,
                                          int channels) const {
  if (nccl_models(algo)) {
    if (auto t = tuning_->time_us(op, algo, proto, size.value())) return Time::us(*t);
  }
  // MPI-style algorithms: the classical closed forms with one step's latency and one rank's port.
  LoweringOptions o = lowering_options(op, algo, proto, channels);
  const Communicator& c = *comm_;
  const bool multi = c.node_count() > 1;
  Time alpha = (multi ? o.step_latency_inter : o.step_latency_intra) +
               router_->path_latency(c.device(0), c.device(c.size() - 1));
  Bandwidth port = gigabytes_per_second((multi ? std::min(intra_gbs_, inter_gbs_) : intra_gbs_) * o.wire_efficiency);
  const int p = c.size();
  Time t;
  switch (algo) {
    case Algorithm::kRecursiveHalvingDoubling:
      t = op == CollectiveOp::kAllReduce ? closed_form::rhd_all_reduce(p, size, alpha, port)
                                         : closed_form::recursive_gather_scatter(p, size, alpha, port);
      break;
    case Algorithm::kRecursiveDoubling:
      t = op == CollectiveOp::kAllReduce ? closed_form::recursive_doubling_all_reduce(p, size, alpha, port)
                                         : closed_form::recursive_gather_scatter(p, size, alpha, port);
      break;
    case Algorithm::kPairwise: t = closed_form::pairwise_all_to_all(p, size, alpha, port); break;
    case Algorithm::kDirect: {
      const bool relayed = tuning_->inputs().intra == NcclLinkType::kNvlink;  // PXN relays over NVLink only
      t = closed_form::direct_all_to_all_across_nodes(p, c.ranks_per_node(), relayed, size, alpha,
                                                    gigabytes_per_second(intra_gbs_ * o.wire_efficiency),
                                                    gigabytes_per_second(inter_gbs_ * o.wire_efficiency));
      break;
    }
    case Algorithm::kHierarchical: {
      const int ppn = c.ranks_per_node();
      Bandwidth intra = gigabytes_per_second(intra_gbs_ * o.wire_efficiency);
      Time a_intra = o.step_latency_intra;
      t = closed_form::ring_gather_scatter(ppn, size, a_intra, intra) * 2 +
          closed_form::ring_all_reduce(c.node_count(), size * (1.0 / ppn), alpha,
                                       gigabytes_per_second(inter_gbs_ * o.wire_efficiency));
      break;
    }
    default:  // send/recv on the ring: one message each way
      t = alpha + transfer_time(size, port);
      break;
  }
  return t + o.base_latency;
}

int CollectiveSimulator::launched_channels(Algorithm algo, Protocol proto, Bytes size) const {
  // MPI-style algorithms run the ring's kernels.
  return tuning_->enqueue_channels(nccl_models(algo) ? algo : Algorithm::kRing, proto, size.value());
}

int CollectiveSimulator::channels_for(Algorithm algo, Protocol proto, Bytes size, const CollectiveOptions& options) const {
  // Only rings and trees are lowered once per channel; the others' channels share one route.
  const bool multi_channel = algo == Algorithm::kRing || algo == Algorithm::kTree || algo == Algorithm::kHierarchical;
  return options.channels.value_or(multi_channel ? launched_channels(algo, proto, size) : 1);
}

std::optional<CollectiveSimulator::Fit> CollectiveSimulator::calibrated_fit(CollectiveOp op, Bytes size,
                                                                            const Choice& choice,
                                                                            const CollectiveOptions& options) const {
  if (!options.use_calibration || calibrated_.empty()) return std::nullopt;
  // NCCL's algorithm choice stands, and the protocol and regime are those the fit saw at this
  // size (else the fastest it knows). MPI fits name their classes per collective; those are the
  // fallback.
  for (bool per_collective : {false, true}) {
    if (auto fit = calibrated_.at_size(
            collective_terms(*this, op, size, false, choice.algorithm, choice.protocol, per_collective), op,
            comm_->size(), comm_->node_count(), size, options.protocol)) {
      return fit;
    }
  }
  return std::nullopt;
}

// The fit's time is launch + Σ steps·α + bus bytes/β, additive; the lowering pays its steps'
// latencies along the data's way, overlapped with other steps' transfers, and pipelines fill,
// so neither the fitted α nor β carries over link by link. Instead the graph, lowered with no
// software latency and its bytes scaled to the fitted β (use_fitted_bandwidth), is played once
// alone on idle links: its start is delayed by what the fit's time exceeds that run; a run
// longer than the fit (a pipeline's fill) has its bytes scaled down so that its bandwidth part
// (the run less the wire latencies' longest chain) fits. Alone, the flow model then gives the
// fitted time; beside other traffic, the delay is software and the bytes share the links.
void CollectiveSimulator::use_fitted_latency(const Fit& fit, const Communicator& comm, const Router& router,
                                             TransferGraph& graph) const {
  Engine engine;
  std::unique_ptr<NetworkModel> network = make_network_model("flow", engine, comm.topology(), router);
  const double alone = run_transfer_graph(engine, *network, graph).seconds();
  const double fitted = fit.first.seconds();
  if (alone <= fitted) {
    graph.delay_start(Time::from_seconds(fitted - alone));
    return;
  }
  std::vector<double> finish(graph.size(), 0.0), start(graph.size(), 0.0);
  double wires = 0;  // the longest chain of waits and wire latencies: the run at zero bytes
  for (TaskId i = 0; i < graph.size(); ++i) {
    const Task& t = graph.task(i);
    double own = t.wait.seconds();
    if (t.kind == Task::Kind::kTransfer && t.src != t.dst) own += router.path_latency(t.src, t.dst, t.route_key()).seconds();
    finish[i] = start[i] + own;
    wires = std::max(wires, finish[i]);
    for (TaskId next : graph.successors(i)) start[next] = std::max(start[next], finish[i]);
  }
  if (alone > wires && fitted > wires) graph.scale_bytes((fitted - wires) / (alone - wires));
}

void CollectiveSimulator::use_fitted_bandwidth(const CollectiveTerms& fit, const Router& router,
                                               TransferGraph& graph) const {
  const auto& p = calibrated_.parameters();
  const auto inverse = p.find(inverse_bandwidth_parameter(fit.bandwidth_class, fit.protocol, fit.regime));
  if (inverse == p.end() || !(fit.bus_bytes > 0) || !(inverse->second > 0)) return;
  const auto busiest_alone = busiest_link(graph, router);
  const double busiest = busiest_alone ? busiest_alone->second.seconds() : 0.0;  // the most loaded link's time
  if (busiest > 0) graph.scale_bytes(fit.bus_bytes * inverse->second / busiest);
}

CollectiveSimulator::Lowered CollectiveSimulator::lower(CollectiveOp op, Bytes size, const CollectiveOptions& options,
                                                        const Communicator& comm, const Router& router) const {
  if (comm.size() != comm_->size()) {
    throw std::invalid_argument("a collective of " + std::to_string(comm_->size()) + " ranks lowered on " +
                                std::to_string(comm.size()));
  }
  const Choice choice = choose(op, size, options);
  const std::optional<Fit> fit = calibrated_fit(op, size, choice, options);
  const Protocol protocol = fit ? fit->second.protocol : choice.protocol;
  const int channels = channels_for(choice.algorithm, protocol, size, options);
  CollectiveSpec spec;
  spec.op = op;
  spec.algorithm = choice.algorithm;
  spec.size = size;
  spec.root = options.root;
  const int lowered_channels = options.channels_as_weight ? 1 : channels;
  LoweringOptions lowering = lowering_options(op, choice.algorithm, protocol, lowered_channels);
  if (fit) lowering.base_latency = lowering.step_latency_intra = lowering.step_latency_inter = Time::zero();
  lowering.granularity = options.granularity;
  Lowered out{lower_collective(spec, comm, router, lowering), protocol, fit.has_value()};
  if (options.channels_as_weight) out.graph.weigh_transfers(static_cast<uint32_t>(std::min(channels, UINT8_MAX)));
  if (fit) {
    use_fitted_bandwidth(fit->second, router, out.graph);
    use_fitted_latency(*fit, comm, router, out.graph);
  }
  return out;
}

TransferGraph CollectiveSimulator::lower_on(CollectiveOp op, Bytes size, const CollectiveOptions& options,
                                           const Communicator& comm, const Router& router) const {
  return lower(op, size, options, comm, router).graph;
}

CollectiveResult CollectiveSimulator::run(CollectiveOp op, Bytes size, const CollectiveOptions& options) const {
  if (options.algorithm) {
    if (auto why = unsupported_reason(op, *options.algorithm, *comm_, *router_)) throw std::invalid_argument(*why);
  }
  if (options.root < 0 || options.root >= comm_->size()) {
    throw std::invalid_argument("--root must be a rank between 0 and " + std::to_string(comm_->size() - 1));
  }
  Choice choice = choose(op, size, options);
  CollectiveResult result;
  result.op = op;
  result.size = size;
  result.algorithm = choice.algorithm;
  result.protocol = choice.protocol;
  result.channels = options.channels.value_or(launched_channels(choice.algorithm, choice.protocol, size));
  if (options.model == "analytical") {
    if (const std::optional<Fit> fit = calibrated_fit(op, size, choice, options)) {
      result.time = fit->first;
      result.protocol = fit->second.protocol;
      result.calibrated = true;
    } else {
      result.time = analytical_time(op, size, choice.algorithm, choice.protocol,
                                    channels_for(choice.algorithm, choice.protocol, size, options));
    }
  } else {
    Lowered lowered = lower(op, size, options, *comm_, *router_);
    result.protocol = lowered.protocol;
    result.calibrated = lowered.calibrated;
    Engine engine;
    std::unique_ptr<NetworkModel> network = make_network_model(options.model, engine, *topo_, *router_);
    result.transfers = lowered.graph.size();
    result.time = run_transfer_graph(engine, *network, lowered.graph, options.keep_graph ? &result.timings : nullptr);
    if (lowered.graph.size() == 0) result.time = Time::zero();
    if (options.keep_graph) result.graph = std::move(lowered.graph);
  }
  const double seconds = result.time.seconds();
  result.algbw_gbs = seconds > 0 ? size.value() / seconds / 1e9 : 0.0;
  result.busbw_gbs = result.algbw_gbs * busbw_factor(op, comm_->size());
  return result;
}

std::pair<int, int> CollectiveSimulatorCache::shape_of(const std::vector<int>& gpus) const {
  // Called for every collective a training iteration times: counted without a tree.
  std::vector<int> nodes;
  nodes.reserve(gpus.size());
  for (int r : gpus) nodes.push_back(topo_.device(topo_.gpus()[static_cast<size_t>(r)]).node);
  std::sort(nodes.begin(), nodes.end());
  int most = 0;
  for (size_t i = 0, j = 0; i < nodes.size(); i = j) {
    while (j < nodes.size() && nodes[j] == nodes[i]) ++j;
    most = std::max(most, static_cast<int>(j - i));
  }
  return {static_cast<int>(gpus.size()), most};
}

const CollectiveSimulator& CollectiveSimulatorCache::for_group(const std::vector<int>& gpus) {
  const auto shape = shape_of(gpus);
  auto& sim = by_shape_[shape];
  if (!sim) sim = std::make_unique<CollectiveSimulator>(topo_, shape.first, shape.second, efficiency_);
  return *sim;
}

SiblingContention& CollectiveSimulatorCache::sibling_contention() {
  if (!contention_) {
    contention_router_ = std::make_unique<Router>(topo_);
    contention_ = std::make_unique<SiblingContention>(topo_, *contention_router_);
  }
  return *contention_;
}

}  // namespace parallax
