// Megatron's pipeline layer splits (pipeline_split.h).
#include "training/pipeline_split.h"

#include <numeric>

#include "training/parallel_layout.h"

namespace parallax {
namespace {

PipelineSplit refuse(std::string field, std::string problem) {
  PipelineSplit s;
  s.field = std::move(field);
  s.problem = std::move(problem);
  return s;
}

std::string n(long long v) { return std::to_string(v); }

// Per pipeline stage counts spread over the vpp chunks of each (the virtual stages
// ParallelLayout::virtual_stage names).
PipelineSplit over_chunks(const ParallelLayout& l, const std::vector<int>& per_stage, std::string rule) {
  const int v = l.virtual_stages;
  PipelineSplit out;
  out.layers.assign(static_cast<size_t>(l.pp * v), 0);
  for (int s = 0; s < l.pp; ++s) {
    if (per_stage[static_cast<size_t>(s)] % v != 0) {
      return refuse("virtual_stages", "stage " + n(s) + " holds " + n(per_stage[static_cast<size_t>(s)]) +
                                          " layers, which its " + n(v) + " chunks cannot share evenly");
    }
    for (int c = 0; c < v; ++c) out.layers[static_cast<size_t>(l.virtual_stage(s, c))] = per_stage[static_cast<size_t>(s)] / v;
  }
  out.rule = std::move(rule);
  return out;
}

PipelineSplit first_and_last(const ParallelLayout& l, int layers) {
  const int first = l.first_stage_layers, last = l.last_stage_layers;
  if (first == 0 || last == 0) return refuse(first == 0 ? "first_stage_layers" : "last_stage_layers", "must be at least 1");
  if (v_shaped(l.schedule)) {
    return refuse(first >= 0 ? "first_stage_layers" : "last_stage_layers",
                   std::string(to_string(l.schedule)) +
                      " puts the first and the last layers both on stage 0; give stage_layers per virtual stage instead");
  }
  if (l.pp < 2) return refuse("pp", "first/last stage layer counts need pp ≥ 2, got " + n(l.pp));
  const int middle_stages = l.pp - 2;
  const int middle = layers - std::max(first, 0) - std::max(last, 0);
  // An unset end takes the middle stages' share (Megatron's even share of the rest).
  const int unset = (first < 0 ? 1 : 0) + (last < 0 ? 1 : 0);
  const int shares = middle_stages + unset;
  if (middle < 0 || (shares == 0 && middle != 0) || (shares > 0 && middle % shares != 0)) {
    return refuse(first >= 0 ? "first_stage_layers" : "last_stage_layers",
                  "leaves " + n(middle) + " of num_layers=" + n(layers) + " for " + n(shares) +
                      " other stages, which cannot share them evenly");
  }
  const int each = shares > 0 ? middle / shares : 0;
  if (middle_stages > 0 && each < 1) return refuse("pp", "leaves no layer for the middle stages");
  std::vector<int> per_stage(static_cast<size_t>(l.pp), each);
  per_stage.front() = first >= 0 ? first : each;
  per_stage.back() = last >= 0 ? last : each;
  return over_chunks(l, per_stage, "first/last");
}

PipelineSplit accounted_ends(const ParallelLayout& l, int layers) {
  const int parts = l.pp * l.virtual_stages;
  const int units = layers + (l.account_for_embedding ? 1 : 0) + (l.account_for_loss ? 1 : 0);
  if (units % parts != 0) {
    return refuse(l.virtual_stages > 1 ? "virtual_stages" : "pp",
                  "pp·virtual_stages=" + n(parts) + " does not divide num_layers=" + n(layers) +
                      " plus the accounted embedding/loss (" + n(units) + ")");
  }
  PipelineSplit out;
  out.layers.assign(static_cast<size_t>(parts), units / parts);
  if (l.account_for_embedding) --out.layers.front();
  if (l.account_for_loss) --out.layers.back();
  if (parts == 1 && out.layers.front() < 0) return refuse("pp", "no layer is left");
  out.rule = "embedding and loss counted";
  return out;
}

PipelineSplit automatic(const ParallelLayout& l, int layers) {
  const int parts = l.pp * l.virtual_stages;
  const int units = layers + 2;
  PipelineSplit out;
  out.layers.assign(static_cast<size_t>(parts), units / parts);
  int spare = units % parts;
  // The middle virtual stages take the spare units first, then the ends.
  for (int i = 1; i < parts - 1 && spare > 0; ++i, --spare) ++out.layers[static_cast<size_t>(i)];
  for (int i : {0, parts - 1}) {
    if (spare > 0) {
      ++out.layers[static_cast<size_t>(i)];
      --spare;
    }
  }
  --out.layers.front();
  --out.layers.back();
  if (parts == 1) out.layers = {layers};
  // The ends may hold only the embedding or the loss (no layer), the middle at least one layer.
  for (int i = 0; i < parts; ++i) {
    const bool end = i == 0 || i == parts - 1;
    if (out.layers[static_cast<size_t>(i)] < (end ? 0 : 1)) {
      return refuse(l.virtual_stages > 1 ? "virtual_stages" : "pp",
                    "pp·virtual_stages=" + n(parts) + " is more virtual stages than num_layers=" + n(layers) + " can fill");
    }
  }
  out.rule = "automatic";
  return out;
}

}  // namespace

PipelineSplit split_pipeline_layers(const ParallelLayout& l, int layers) {
  const int parts = l.pp * l.virtual_stages;
  if (parts < 1) return refuse("pp", "needs at least one stage");
  if (!l.stage_layers.empty()) {
    if (static_cast<int>(l.stage_layers.size()) != parts) {
      return refuse("stage_layers", "has " + n(static_cast<long long>(l.stage_layers.size())) +
                                        " entries; pp·virtual_stages=" + n(parts) + " are needed");
    }
    for (size_t i = 0; i < l.stage_layers.size(); ++i) {
      if (l.stage_layers[i] < 1) {
        return refuse("stage_layers/" + std::to_string(i), "must be at least 1, got " + n(l.stage_layers[i]));
      }
    }
    const long long sum = std::accumulate(l.stage_layers.begin(), l.stage_layers.end(), 0LL);
    if (sum != layers) return refuse("stage_layers", "sums to " + n(sum) + ", not num_layers=" + n(layers));
    return PipelineSplit{l.stage_layers, "given", "", ""};
  }
  if (l.first_stage_layers >= 0 || l.last_stage_layers >= 0) return first_and_last(l, layers);
  if (l.account_for_embedding || l.account_for_loss) return accounted_ends(l, layers);
  if (layers % parts == 0) return PipelineSplit{std::vector<int>(static_cast<size_t>(parts), layers / parts), "even", "", ""};
  return automatic(l, layers);
}

std::string split_text(const std::vector<int>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j < layers.size() && layers[j] == layers[i]) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(layers[i]);
    if (j - i > 1) out += "×" + std::to_string(j - i);
    i = j;
  }
  return out;
}

}  // namespace parallax
