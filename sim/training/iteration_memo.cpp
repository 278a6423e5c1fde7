// IterationMemo (iteration_memo.h).
#include "training/iteration_memo.h"

#include <utility>

#include "engine/invariant.h"

namespace parallax {
namespace {

ParallelLayout without_rank_order(ParallelLayout layout) {
  layout.rank_order.clear();
  return layout;
}

}  // namespace

void IterationMemo::check_owner(const ModelConfig& model, const Topology& topology) {
  if (!model_) {
    model_ = &model;
    topology_ = &topology;
  }
  PARALLAX_INVARIANT(model_ == &model && topology_ == &topology, "training/iteration_memo", Time::zero(),
                     "an iteration memo is asked about another model or topology than it was filled with");
}

const IterationResult* IterationMemo::find(const ModelConfig& model, const Topology& topology,
                                           const ParallelLayout& layout, const std::vector<double>& signature) {
  check_owner(model, topology);
  const ParallelLayout key = without_rank_order(layout);
  for (const Kept& k : kept_) {
    if (k.signature == signature && k.layout == key) {
      ++hits_;
      return &k.result;
    }
  }
  return nullptr;
}

void IterationMemo::keep(const ModelConfig& model, const Topology& topology, const ParallelLayout& layout,
                         std::vector<double> signature, const IterationResult& result) {
  check_owner(model, topology);
  if (capacity_ == 0) return;
  if (kept_.size() >= capacity_) kept_.erase(kept_.begin());
  kept_.push_back(Kept{without_rank_order(layout), std::move(signature), result});
}

}  // namespace parallax
