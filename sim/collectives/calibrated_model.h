// The calibrated α/β model of a collective: what a run of an algorithm with a protocol implies
// about the link classes it crosses (its terms), and the time those terms give with fitted
// parameters (`parallax calibrate fit` writes them into a topology's `calibration` block).
//
// The model is NCCL's own (reference/nccl-cost-model.md §2): a collective of size S run by
// algorithm a with protocol p takes
//
//     t = launch_p + n_intra·α_{intra class, p} + n_inter·α_{network, p} + B(S)·(1/β_{class, p})
//
// where n_intra/n_inter are the algorithm's latency steps inside and across nodes (NCCL's
// latency table), B(S) the bytes its bus bandwidth must carry (S·nsteps/n for the ring family,
// 2S for the tree all-reduce, S·(n−1)/n for all-to-all, S for send/recv), and the class of β the
// bottleneck: the network when the ranks span nodes, else the link class between two ranks of a
// node ("nvls" for NVSwitch reductions, "collnet" for SHARP, "local" for one rank). Every term is
// linear in (launch, α, 1/β). Regimes 1 and 2 of a protocol carry their own parameters: bandwidth
// steps that the data shows within one protocol (more channels; MPI's eager → rendezvous).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/collective.h"
#include "units/units.h"

namespace parallax {

class CollectiveSimulator;

/// The coefficients of one collective run in the linear model above.
struct CollectiveTerms {
  Algorithm algorithm = Algorithm::kRing;
  Protocol protocol = Protocol::kSimple;
  std::string intra_class;      ///< link class between ranks of one node ("" for one rank per node)
  std::string bandwidth_class;  ///< the class whose β bounds the transfer
  double intra_steps = 0;
  double inter_steps = 0;
  double bus_bytes = 0;
  /// 0, or 1–2 for the larger sizes of a series whose bandwidth regime changes within the
  /// protocol (NCCL adds channels or switches algorithm; MPI switches eager → rendezvous, and
  /// copies fall out of cache): own launch, α and β.
  int regime = 0;

  /// (parameter name, coefficient) pairs, zero coefficients left out.
  std::vector<std::pair<std::string, double>> coefficients() const;
};

/// Parameter names: "launch.<proto>" (s), "alpha.<class>.<proto>" (s per step),
/// "inverse_bandwidth.<class>.<proto>" (s per byte); <proto> is "simple", "ll128" or "ll",
/// followed by "+" for regime 1 and "++" for regime 2.
std::string launch_parameter(Protocol p, int regime = 0);
std::string alpha_parameter(const std::string& link_class, Protocol p, int regime = 0);
std::string inverse_bandwidth_parameter(const std::string& link_class, Protocol p, int regime = 0);
/// "from_bytes.<op>.<ranks>x<nodes>.<proto>": the smallest size at which the fit's series of
/// this collective on this communicator shape ran in that (protocol, regime). Written beside
/// the parameters, it tells the simulator which regime a size falls in.
std::string regime_start_key(CollectiveOp op, int ranks, int nodes, Protocol p, int regime = 0);

/// The terms of `op` of `size` run by `algo`/`proto` on the simulator's communicator. With
/// `per_collective_classes` (MPI measurements: MPI picks its own algorithm per collective), the
/// link classes are suffixed with ":<op>", so each collective gets its own α and β.
CollectiveTerms collective_terms(const CollectiveSimulator& sim, CollectiveOp op, Bytes size, bool in_place,
                                 Algorithm algo, Protocol proto, bool per_collective_classes = false);

/// Fitted parameters (name → SI value) and the times they predict.
class CalibratedCollectiveModel {
 public:
  CalibratedCollectiveModel() = default;
  explicit CalibratedCollectiveModel(std::map<std::string, double> parameters) : parameters_(std::move(parameters)) {}

  bool empty() const { return parameters_.empty(); }
  const std::map<std::string, double>& parameters() const { return parameters_; }
  /// The time of these terms, or nullopt when a term needs a parameter the fit did not give.
  std::optional<Time> predict(const CollectiveTerms& terms) const;
  /// The fastest (protocol, regime) the parameters know for these terms — NCCL picks the protocol
  /// it expects to be fastest, and the regimes of a protocol split its size range — restricted
  /// to `forced` when given. nullopt when none is known.
  std::optional<std::pair<Time, CollectiveTerms>> fastest(CollectiveTerms terms,
                                                          std::optional<Protocol> forced = std::nullopt) const;
  /// The (protocol, regime) the fit saw `op` of `size` run in on a communicator of this shape:
  /// the one with the largest regime start (regime_start_key) at or below `size`, among the
  /// allowed protocol; its time, with these terms. Without regime starts for the shape, or when
  /// its parameters are missing: fastest().
  std::optional<std::pair<Time, CollectiveTerms>> at_size(CollectiveTerms terms, CollectiveOp op, int ranks, int nodes,
                                                          Bytes size, std::optional<Protocol> forced = std::nullopt) const;

 private:
  std::map<std::string, double> parameters_;
};

}  // namespace parallax
