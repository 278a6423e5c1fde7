// How a model's transformer layers are split over the pipeline's virtual stages, as Megatron
// does it: an explicit list, the first and last stages' counts (decoder_first/last_pipeline_
// num_layers, the rest even over the middle stages), the embedding and the loss counted as a
// layer each (account_for_embedding/loss_in_pipeline_split), the even split, or — when pp·vpp
// does not divide the layers and nothing is given — an automatic balanced split.
#pragma once

#include <string>
#include <vector>

namespace parallax {

struct ParallelLayout;

struct PipelineSplit {
  std::vector<int> layers;  ///< per virtual stage in model order (ParallelLayout::virtual_stage places them), pp·vpp entries
  std::string rule;         ///< "even", "given", "first/last", "embedding and loss counted", "automatic"
  std::string field;        ///< when it cannot be split: the layout field at fault
  std::string problem;      ///< and why; empty when split
};

/// The split of `layers` transformer layers for `layout` (pp, virtual_stages, stage_layers,
/// first/last_stage_layers, account_for_embedding/loss):
///  - stage_layers: as given (every entry ≥ 1, summing to the layers);
///  - first/last: the first (last) pipeline stage holds that many, the middle pp − 2 stages the
///    rest evenly, each stage's layers evenly over its vpp chunks (Megatron's rules);
///  - embedding/loss accounted: layers + 1 per accounted end, divided by pp·vpp; the first
///    (last) virtual stage gives its share of one to the embedding (loss);
///  - else the even split when pp·vpp divides the layers;
///  - else automatic: the embedding and the loss counted as a layer each and the layers + 2
///    shared as evenly as the count allows, the spare ones on the middle stages from the first.
/// The first and last virtual stages may hold no transformer layer; the others hold one at least.
PipelineSplit split_pipeline_layers(const ParallelLayout& layout, int layers);

/// "8" for an even split, else the counts with repeats folded: "7, 8×14, 7".
std::string split_text(const std::vector<int>& layers);

}  // namespace parallax
