// `parallax search` (layout_search.h).
#include "planning/layout_search.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "compute/gemm_efficiency.h"
#include "io/input_error.h"
#include "model/layer_operators.h"
#include "training/iteration_report.h"

namespace parallax {
namespace {

// Layouts simulated between two looks at the bound: fixed, so that what is pruned does not
// depend on the thread count.
constexpr size_t kBatch = 32;

struct Candidate {
  ParallelLayout layout;
  Time bound;
  std::string text;  // ties and determinism
};

double score_of(const IterationResult& r, SearchObjective objective) {
  return objective == SearchObjective::kMfu ? r.mfu : r.tokens_per_second;
}

// The layouts that fit in memory, with their bounds, in bound order (then text).
std::vector<Candidate> fitting_candidates(const ModelConfig& model, std::vector<ParallelLayout> layouts, const GpuSpec& gpu,
                                          const IterationOptions& options, size_t& rejected_by_memory) {
  std::vector<Candidate> out;
  for (ParallelLayout& l : layouts) {
    if (estimate_memory(model, l, gpu, options).out_of_memory) {
      ++rejected_by_memory;
      continue;
    }
    const Time bound = iteration_time_lower_bound(model, l, gpu, options);
    std::string text = layout_description(l) + " / " + l.rank_order;
    out.push_back(Candidate{std::move(l), bound, std::move(text)});
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return a.bound != b.bound ? a.bound < b.bound : a.text < b.text;
  });
  return out;
}

// Simulates `batch` on one thread per cache, each thread with its own collective simulators;
// a layout the simulation refuses (a rule only it checks) has no result.
std::vector<std::optional<IterationResult>> simulate_batch(const ModelConfig& model,
                                                           const std::vector<const Candidate*>& batch,
                                                           const Topology& topology, const IterationOptions& options,
                                                           std::vector<CollectiveSimulatorCache>& caches) {
  std::vector<std::optional<IterationResult>> results(batch.size());
  std::atomic<size_t> next{0};
  auto work = [&](size_t t) {
    IterationOptions o = options;
    o.collective_simulators = &caches[t];
    for (size_t i = next++; i < batch.size(); i = next++) {
      try {
        results[i] = simulate_iteration(model, batch[i]->layout, topology, o);
      } catch (const InputError&) {
        results[i].reset();
      } catch (const std::invalid_argument&) {
        results[i].reset();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < caches.size(); ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  return results;
}

}  // namespace

std::optional<SearchObjective> search_objective_from(const std::string& name) {
  if (name == "tokens_per_s") return SearchObjective::kTokensPerSecond;
  if (name == "mfu") return SearchObjective::kMfu;
  return std::nullopt;
}

Time iteration_time_lower_bound(const ModelConfig& model, const ParallelLayout& layout, const GpuSpec& gpu,
                                const IterationOptions& options) {
  // Dropped MoE slots skip their FLOPs: no bound from the model's count then.
  if (options.moe_capacity_factor) return Time::zero();
  const double peak = peak_rate(gpu, layout.dtype).value();
  if (!(peak > 0)) return Time::zero();
  const double tokens = static_cast<double>(layout.global_batch) * static_cast<double>(layout.sequence_length);
  const double flops = model_flops_per_token(model, layout.sequence_length).value() * tokens;
  const double compute = flops / (layout.world_size() * peak) / options.compute.sustained_fraction;
  // A stage's work is at least its share of the whole; 1F1B and GPipe cannot avoid the fill and
  // drain of p − 1 micro-batches (interleaving: (p − 1)/v), so m micro-batches take at least
  // (m + (p − 1)/v)/m of it. The zero-bubble schedules may hide theirs: no pipeline term.
  const double m = static_cast<double>(std::max<int64_t>(1, layout.micro_batches()));
  double fill = 0;
  if (layout.schedule == PipelineScheduleKind::kOneFOneB || layout.schedule == PipelineScheduleKind::kGpipe) {
    fill = layout.pp - 1.0;
  } else if (layout.schedule == PipelineScheduleKind::kInterleavedOneFOneB) {
    fill = (layout.pp - 1.0) / std::max(1, layout.virtual_stages);
  }
  return Time::from_seconds(compute * (m + fill) / m);
}

SearchOutcome search_layouts(const ModelConfig& model, const ParallelLayout& base, const Topology& topology,
                             const SearchSpace& space, const SearchOptions& options) {
  SearchOutcome out;
  const int gpus = static_cast<int>(topology.gpu_count());
  Enumeration e = enumerate_layouts(space, model, base, gpus);
  out.enumerated = e.enumerated;
  out.rejected_by_rule = e.rejected_by_rule;
  const GpuSpec& gpu = topology.gpu_spec_of(topology.gpus()[0]);
  const std::vector<Candidate> candidates =
      fitting_candidates(model, std::move(e.valid), gpu, options.iteration, out.rejected_by_memory);
  std::vector<CollectiveSimulatorCache> caches;
  for (int t = 0; t < std::max(1, options.threads); ++t) caches.emplace_back(topology, options.iteration.link_efficiency);
  std::vector<std::pair<std::string, SearchedLayout>> ranked;  // (text, layout), best first
  size_t i = 0;
  while (i < candidates.size()) {
    // The k-th best time so far: a layout whose bound is above it cannot enter the top k (both
    // objectives fall as the time grows: the GPUs and the tokens are the same for every layout).
    if (options.top > 0 && ranked.size() >= options.top) {
      if (candidates[i].bound > ranked[options.top - 1].second.result.iteration_time) {
        out.pruned_by_bound = candidates.size() - i;  // bounds only grow from here
        break;
      }
    }
    std::vector<const Candidate*> batch;
    for (; i < candidates.size() && batch.size() < kBatch; ++i) batch.push_back(&candidates[i]);
    std::vector<std::optional<IterationResult>> results = simulate_batch(model, batch, topology, options.iteration, caches);
    for (size_t b = 0; b < batch.size(); ++b) {
      if (!results[b]) {
        ++out.rejected_by_rule;
        continue;
      }
      SearchedLayout s{batch[b]->layout, std::move(*results[b]), 0};
      s.score = score_of(s.result, options.objective);
      ranked.emplace_back(batch[b]->text, std::move(s));
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.second.score != b.second.score ? a.second.score > b.second.score : a.first < b.first;
    });
    out.simulated = ranked.size();
    if (options.progress) options.progress(out.simulated, candidates.size() - i);
  }
  for (auto& [text, s] : ranked) out.ranked.push_back(std::move(s));
  return out;
}

}  // namespace parallax
