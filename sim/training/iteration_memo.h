// IterationMemo: the results of iterations simulated before, reused for a layout that differs
// from one of them only in its rank order and times every communication alike.
#pragma once

#include <cstddef>
#include <vector>

#include "model/model_config.h"
#include "topology/topology.h"
#include "training/iteration.h"
#include "training/parallel_layout.h"

namespace parallax {

/// Without co-simulation the rank order reaches an iteration only through the timing of its
/// collectives (which nodes each group spans, what its siblings put on shared links), so two
/// layouts equal but for their rank order whose communication plans time alike simulate
/// alike. A layout search meets many of them (when TP fills a node, dp-pp and pp-dp place
/// the other groups alike): the memo hands back the first one's result without building the
/// graph again. Keeps the last `capacity` results; valid for one model, topology and set of
/// options (checked for the first two).
class IterationMemo {
 public:
  explicit IterationMemo(size_t capacity = 8) : capacity_(capacity) {}
  /// The result kept for an equal layout (rank order aside) whose communication plan had this
  /// signature (CommunicationPlan::timing_signature), or null.
  const IterationResult* find(const ModelConfig& model, const Topology& topology, const ParallelLayout& layout,
                              const std::vector<double>& signature);
  void keep(const ModelConfig& model, const Topology& topology, const ParallelLayout& layout,
            std::vector<double> signature, const IterationResult& result);
  size_t hits() const { return hits_; }

 private:
  struct Kept {
    ParallelLayout layout;  // its rank order cleared
    std::vector<double> signature;
    IterationResult result;
  };
  void check_owner(const ModelConfig& model, const Topology& topology);
  size_t capacity_;
  size_t hits_ = 0;
  const ModelConfig* model_ = nullptr;
  const Topology* topology_ = nullptr;
  std::vector<Kept> kept_;  // oldest first
};

}  // namespace parallax
