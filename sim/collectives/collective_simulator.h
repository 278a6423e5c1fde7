// One question of the collectives layer, answered end to end: on this topology, with these
// ranks, how long does this collective of this size take, by which algorithm and protocol?
// It derives what NCCL's tuner would see (architecture, link types, channels, per-channel
// bandwidth), lets NCCL's cost model choose the algorithm and protocol unless they are forced,
// lowers the choice to transfers with NCCL's latencies and protocol overheads, and plays them on
// a network model — or, for `analytical`, evaluates the closed form instead.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/calibrated_model.h"
#include "collectives/collective.h"
#include "collectives/nccl_tuning.h"
#include "collectives/sibling_contention.h"
#include "collectives/transfer_graph.h"
#include "topology/router.h"
#include "topology/topology.h"

namespace parallax {

/// NCCL's compute-capability class of a GPU model, from its name (A100 → Ampere, H100/H200/H800
/// → Hopper, B200/GB200 → Blackwell, V100/T4/RTX 20xx → Volta row; Ada/RTX 30xx/40xx/L40 →
/// Ampere row, as NCCL indexes 8.x).
GpuArch gpu_arch_of(const GpuSpec& spec);

/// The fraction of each link class's line rate that collectives achieve. Defaults are NCCL's
/// own topology figures over the datasheet's: NVLink 20/25 (A100), 20.6/25 (H100), 40.1/50
/// (B200) per link; PCIe 24/32 GB/s for Gen4 x16; a 400 Gb/s NIC gives 46–48 of 50 GB/s
/// (nccl-tests issue 290) → 0.94. Calibration replaces them with fitted values.
struct LinkEfficiency {
  double nvlink = 0.8, pcie = 0.75, network = 0.94, cpu = 0.75, shm = 1.0;
  static LinkEfficiency defaults_for(GpuArch arch);
  static LinkEfficiency none() { return LinkEfficiency{1, 1, 1, 1, 1}; }
};

/// `efficiency`, or the defaults for `topo`'s GPU when nullopt.
LinkEfficiency link_efficiency_of(const Topology& topo, std::optional<LinkEfficiency> efficiency);

/// A copy of `topo` with each link class scaled by link_efficiency_of(topo, efficiency): the
/// links collectives see.
Topology with_link_efficiency(const Topology& topo, std::optional<LinkEfficiency> efficiency);

struct CollectiveOptions {
  std::string model = "flow";              ///< a network model name, or "analytical" (closed form)
  std::optional<Algorithm> algorithm;      ///< nullopt: chosen by NCCL's cost model
  std::optional<Protocol> protocol;        ///< nullopt: chosen by NCCL's cost model
  std::optional<int> channels;             ///< nullopt: as NCCL's search would give
  /// Lower a ring's or tree's channels as one transfer per edge that stands for all of them
  /// (TransferGraph::weigh_transfers) rather than one transfer per channel: where every channel
  /// takes the same links (inside a node), the flow model then gives them the same shares under
  /// contention with n× fewer flows.
  bool channels_as_weight = false;
  int root = 0;
  LoweringOptions::Granularity granularity = LoweringOptions::Granularity::kAuto;
  bool keep_graph = false;                 ///< keep the transfer graph and timings (for traces)
  /// Use the topology's fitted parameters (its `calibration` block) when it has them: the
  /// analytical model takes the fitted time; the flow model lowers with the fitted protocol,
  /// launch and step latencies, and scales every transfer's bytes so that, alone on idle links,
  /// the collective moves its bus bytes at the fitted bandwidth (under contention the inflated
  /// bytes take their share of every link they cross). The fit itself turns this off: it needs
  /// NCCL's own, uncalibrated choice.
  bool use_calibration = true;
};

struct CollectiveResult {
  CollectiveOp op = CollectiveOp::kAllReduce;
  Bytes size;
  Algorithm algorithm = Algorithm::kRing;
  Protocol protocol = Protocol::kSimple;
  int channels = 1;          ///< CTAs NCCL launches for this call (NcclTuningModel::enqueue_channels)
  Time time;
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  size_t transfers = 0;      ///< 0 for the analytical answer
  bool calibrated = false;   ///< the time came from the topology's fitted parameters
  TransferGraph graph;       ///< when keep_graph
  std::vector<TaskTiming> timings;
};

class CollectiveSimulator {
 public:
  /// Copies `topo`, scales its links by `efficiency` (defaults for its GPU when nullopt), and
  /// places `gpus` ranks node after node, at most `per_node` per node.
  CollectiveSimulator(const Topology& topo, int gpus, std::optional<int> per_node = std::nullopt,
                      std::optional<LinkEfficiency> efficiency = std::nullopt);

  /// Throws std::invalid_argument when a forced algorithm cannot run the operation here.
  CollectiveResult run(CollectiveOp op, Bytes size, const CollectiveOptions& options) const;

  /// The transfers of the collective as run() would choose and lower it, on `comm`: ranks of
  /// the same shape (count, per node) placed anywhere on a topology `router` routes, with the
  /// same links (e.g. the topology this simulator copied, scaled the same way). For playing many
  /// collectives on one shared network (the training co-simulation).
  TransferGraph lower_on(CollectiveOp op, Bytes size, const CollectiveOptions& options, const Communicator& comm,
                         const Router& router) const;

  const Topology& topology() const { return *topo_; }
  const Router& router() const { return *router_; }
  const Communicator& communicator() const { return *comm_; }
  const NcclTuningModel& tuning() const { return *tuning_; }
  GpuArch arch() const { return arch_; }

 private:
  struct Choice {
    Algorithm algorithm;
    Protocol protocol;
  };
  using Fit = std::pair<Time, CollectiveTerms>;
  struct Lowered {
    TransferGraph graph;
    Protocol protocol;
    bool calibrated = false;
  };
  Choice choose(CollectiveOp op, Bytes size, const CollectiveOptions& options) const;
  /// The fit's fastest (protocol, regime) for the chosen algorithm and its time; nullopt when
  /// calibration is off, absent or does not cover it.
  std::optional<Fit> calibrated_fit(CollectiveOp op, Bytes size, const Choice& choice, const CollectiveOptions& options) const;
  Lowered lower(CollectiveOp op, Bytes size, const CollectiveOptions& options, const Communicator& comm,
                const Router& router) const;
  /// Makes `graph` (lowered without software latencies, its bytes at the fitted bandwidth),
  /// played alone on idle links, take the fit's time: its start delayed, or its bytes scaled
  /// down where its pipeline's fill already makes it slower.
  void use_fitted_latency(const Fit& fit, const Communicator& comm, const Router& router, TransferGraph& graph) const;
  /// Scales `graph`'s bytes so that its most loaded link, alone, carries them in the fitted
  /// bus-bandwidth time of `fit`.
  void use_fitted_bandwidth(const CollectiveTerms& fit, const Router& router,
                            TransferGraph& graph) const;
  /// The forced count, else NCCL's for the ring/tree family and 1 for the others.
  int launched_channels(Algorithm algo, Protocol proto, Bytes size) const;
  int channels_for(Algorithm algo, Protocol proto, Bytes size, const CollectiveOptions& options) const;
  LoweringOptions lowering_options(CollectiveOp op, Algorithm algo, Protocol proto, int channels) const;
  Time analytical_time(CollectiveOp op, Bytes size, Algorithm algo, Protocol proto, int channels) const;

  std::unique_ptr<Topology> topo_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<NcclTuningModel> tuning_;
  CalibratedCollectiveModel calibrated_;  ///< the topology's fitted parameters (empty: none)
  GpuArch arch_ = GpuArch::kHopper;
  double intra_gbs_ = 0;    ///< per-rank bandwidth inside a node (achievable)
  double inter_gbs_ = 0;    ///< per-rank bandwidth across nodes (achievable)
};

/// CollectiveSimulators of one topology by the shape of a group of its GPUs (ranks, and ranks
/// on its fullest node), each built once: a simulator copies the topology, so the callers that
/// time many groups share them.
class CollectiveSimulatorCache {
 public:
  CollectiveSimulatorCache(const Topology& topo, std::optional<LinkEfficiency> efficiency)
      : topo_(topo), efficiency_(efficiency) {}

  /// (ranks, ranks on the fullest node) of `gpus`, indices into the topology's GPUs.
  std::pair<int, int> shape_of(const std::vector<int>& gpus) const;
  /// The simulator for groups of that shape, placed node after node from the first.
  const CollectiveSimulator& for_group(const std::vector<int>& gpus);

  const Topology& topology() const { return topo_; }
  std::optional<LinkEfficiency> efficiency() const { return efficiency_; }

  /// The slowdown of a group by its siblings on this topology (sibling_contention.h), built on
  /// first use: routing the whole fabric once, not once per training layout simulated.
  SiblingContention& sibling_contention();

 private:
  const Topology& topo_;
  std::optional<LinkEfficiency> efficiency_;
  std::map<std::pair<int, int>, std::unique_ptr<CollectiveSimulator>> by_shape_;
  std::unique_ptr<Router> contention_router_;
  std::unique_ptr<SiblingContention> contention_;
};

}  // namespace parallax
