// `parallax search` (layout_search.h).
#include "planning/layout_search.h"

#include <algorithm>
#include <optional>

#include "engine/invariant.h"
#include "engine/parallel_for.h"
#include "io/input_error.h"
#include "training/iteration_memo.h"
#include "training/iteration_report.h"

namespace parallax {
namespace {

// Layouts simulated between two looks at the bound: fixed, so that what is pruned does not
// depend on the thread count.
constexpr size_t kBatch = 32;

// What one thread keeps from layout to layout: its collective simulators, the results of the
// layouts it simulated (layouts that differ only in their rank order often simulate alike) and
// the graphs it played.
struct ThreadCaches {
  ThreadCaches(const Topology& topology, std::optional<LinkEfficiency> efficiency) : collectives(topology, efficiency) {}
  CollectiveSimulatorCache collectives;
  IterationMemo results;
  StreamGraphMemo graphs;
};

struct Candidate {
  ParallelLayout layout;
  Time bound;
  std::string text;  // ties and determinism
};

// Cost, GPUs over tokens per second, falls as throughput rises on the search's one GPU count.
double score_of(const LayoutSummary& r, SearchObjective objective) {
  return objective == SearchObjective::kMfu ? r.mfu : r.tokens_per_second;
}

// The layouts that fit in memory, with their bounds, in bound order (then text); the others
// counted in `outcome`, which keeps the one that needs least.
std::vector<Candidate> fitting_candidates(const ModelConfig& model, std::vector<ParallelLayout> layouts, const GpuSpec& gpu,
                                          const IterationOptions& options, int threads, SearchOutcome& outcome) {
  std::vector<std::optional<IterationEstimate>> estimates(layouts.size());
  parallel_for(layouts.size(), threads,
               [&](size_t, size_t i) { estimates[i] = estimate_iteration(model, layouts[i], gpu, options); });
  std::vector<Candidate> out;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const IterationMemory& memory = estimates[i]->memory;
    if (memory.out_of_memory) {
      ++outcome.rejected_by_memory;
      if (!outcome.leanest_out_of_memory || memory.peak_memory < outcome.leanest_peak_memory) {
        outcome.leanest_out_of_memory = layouts[i];
        outcome.leanest_peak_memory = memory.peak_memory;
        outcome.gpu_memory = memory.gpu_memory;
      }
      continue;
    }
    std::string text = layout_description(layouts[i]) + " / " + layouts[i].rank_order;
    out.push_back(Candidate{std::move(layouts[i]), estimates[i]->time_lower_bound, std::move(text)});
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return a.bound != b.bound ? a.bound < b.bound : a.text < b.text;
  });
  return out;
}

// The runs of `mine` (each its first index and one past its last) whose layouts differ only in
// their rank order: one thread simulates a run, so that its memo sees them all.
std::vector<std::pair<size_t, size_t>> rank_order_runs(const std::vector<const Candidate*>& batch,
                                                       const std::vector<size_t>& mine) {
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = 0; i < mine.size(); ++i) {
    ParallelLayout layout = batch[mine[i]]->layout;
    if (!runs.empty()) {
      layout.rank_order = batch[mine[i - 1]]->layout.rank_order;
      if (layout == batch[mine[i - 1]]->layout) {
        runs.back().second = i + 1;
        continue;
      }
    }
    runs.emplace_back(i, i + 1);
  }
  return runs;
}

// Simulates the layouts of `batch` at `mine` on one thread per cache, each thread with its own
// collective simulators; a layout the simulation refuses (a rule only it checks) is summarised
// as not simulated.
std::vector<LayoutSummary> simulate_batch(const ModelConfig& model, const std::vector<const Candidate*>& batch,
                                          const std::vector<size_t>& mine, const Topology& topology,
                                          const IterationOptions& options, std::vector<ThreadCaches>& caches) {
  std::vector<LayoutSummary> results(mine.size());
  const std::vector<std::pair<size_t, size_t>> runs = rank_order_runs(batch, mine);
  std::vector<IterationOptions> own(caches.size(), options);
  for (size_t t = 0; t < caches.size(); ++t) {
    own[t].collective_simulators = &caches[t].collectives;
    own[t].result_memo = &caches[t].results;
    own[t].graph_memo = &caches[t].graphs;
  }
  parallel_for(runs.size(), static_cast<int>(caches.size()), [&](size_t worker, size_t r) {
    for (size_t i = runs[r].first; i < runs[r].second; ++i) {
      try {
        results[i] = summarize(simulate_iteration(model, batch[mine[i]]->layout, topology, own[worker]));
      } catch (const InputError&) {
        results[i] = LayoutSummary{};
      } catch (const std::invalid_argument&) {
        results[i] = LayoutSummary{};
      }
    }
  });
  return results;
}

// Every layout of `batch` summarised: this process's share simulated here, the others' received
// through the partition (each process's share in rank order, as simulate_batch returned it).
std::vector<LayoutSummary> summarise_batch(const ModelConfig& model, const std::vector<const Candidate*>& batch,
                                           const Topology& topology, const IterationOptions& options,
                                           std::vector<ThreadCaches>& caches, SearchPartition* partition) {
  const int rank = partition ? partition->rank() : 0, size = partition ? partition->size() : 1;
  auto share_of = [&](int r) {
    std::vector<size_t> share;
    for (size_t i = static_cast<size_t>(r); i < batch.size(); i += static_cast<size_t>(size)) share.push_back(i);
    return share;
  };
  std::vector<LayoutSummary> mine = simulate_batch(model, batch, share_of(rank), topology, options, caches);
  if (!partition) return mine;
  const std::vector<LayoutSummary> gathered = partition->all_gather(mine);
  std::vector<LayoutSummary> all(batch.size());
  size_t at = 0;
  for (int r = 0; r < size; ++r) {
    for (size_t i : share_of(r)) all[i] = gathered.at(at++);
  }
  return all;
}

// The top layouts simulated again with their time broken down (deterministic: the same times),
// for the bubble and the most exposed communication that the ranking did without.
void add_details(const ModelConfig& model, const Topology& topology, const SearchOptions& options,
                 CollectiveSimulatorCache& cache, std::vector<SearchedLayout>& ranked) {
  IterationOptions o = options.iteration;
  o.collective_simulators = &cache;
  for (size_t i = 0; i < std::min(options.top, ranked.size()); ++i) {
    const double score = ranked[i].score;
    ranked[i].result = summarize(simulate_iteration(model, ranked[i].layout, topology, o));
    PARALLAX_INVARIANT(score_of(ranked[i].result, options.objective) == score, "planning/search", Time::zero(),
                       "a layout simulated again scored differently");
  }
}

}  // namespace

LayoutSummary summarize(const IterationResult& r) {
  LayoutSummary s;
  s.iteration_time_s = r.iteration_time.seconds();
  s.tokens_per_second = r.tokens_per_second;
  s.tokens_per_second_per_gpu = r.tokens_per_second_per_gpu;
  s.mfu = r.mfu;
  s.peak_memory_bytes = r.peak_memory.value();
  s.pipeline_bubble_fraction = r.pipeline_bubble_fraction;
  for (const StageResult& stage : r.stages) {
    for (int k = 1; k < kWorkKinds; ++k) {
      const double t = stage.time.exposed[static_cast<size_t>(k)].seconds();
      if (t > s.most_exposed_s) {
        s.most_exposed_s = t;
        s.most_exposed_kind = k;
      }
    }
  }
  s.simulated = 1;
  return s;
}

std::optional<SearchObjective> search_objective_from(const std::string& name) {
  if (name == "tokens_per_s") return SearchObjective::kTokensPerSecond;
  if (name == "mfu") return SearchObjective::kMfu;
  if (name == "cost") return SearchObjective::kCost;
  return std::nullopt;
}

SearchOutcome search_layouts(const ModelConfig& model, const ParallelLayout& base, const Topology& topology,
                             const SearchSpace& space, const SearchOptions& options) {
  SearchOutcome out;
  const int gpus = static_cast<int>(topology.gpu_count());
  Enumeration e = enumerate_layouts(space, model, base, gpus);
  out.enumerated = e.enumerated;
  out.rejected_by_rule = e.rejected_by_rule;
  if (e.valid.empty()) {
    throw InputError("", "", "no layout of the space is valid on " + std::to_string(gpus) + " GPUs: " +
                                 (e.enumerated == 0 ? std::string("no combination of its tp, pp and cp fills them")
                                                    : "each of the " + std::to_string(e.enumerated) +
                                                          " combinations that fill them breaks a layout rule"));
  }
  const GpuSpec& gpu = topology.gpu_spec_of(topology.gpus()[0]);
  const std::vector<Candidate> candidates =
      fitting_candidates(model, std::move(e.valid), gpu, options.iteration, std::max(1, options.threads), out);
  out.none_fits = candidates.empty();
  std::vector<ThreadCaches> caches;
  caches.reserve(static_cast<size_t>(std::max(1, options.threads)));
  for (int t = 0; t < std::max(1, options.threads); ++t) caches.emplace_back(topology, options.iteration.link_efficiency);
  const bool details_later = !options.details_for_every_layout && options.top > 0;
  IterationOptions ranking = options.iteration;
  ranking.time_breakdown = !details_later;
  std::vector<std::pair<std::string, SearchedLayout>> ranked;  // (text, layout), best first
  size_t i = 0;
  while (i < candidates.size()) {
    // The k-th best time so far: a layout whose bound is above it cannot enter the top k (both
    // objectives fall as the time grows: the GPUs and the tokens are the same for every layout).
    if (options.top > 0 && ranked.size() >= options.top) {
      if (candidates[i].bound.seconds() > ranked[options.top - 1].second.result.iteration_time_s) {
        out.pruned_by_bound = candidates.size() - i;  // bounds only grow from here
        break;
      }
    }
    std::vector<const Candidate*> batch;
    for (; i < candidates.size() && batch.size() < kBatch; ++i) batch.push_back(&candidates[i]);
    const std::vector<LayoutSummary> results =
        summarise_batch(model, batch, topology, ranking, caches, options.partition);
    for (size_t b = 0; b < batch.size(); ++b) {
      if (!results[b].simulated) {
        ++out.rejected_by_rule;
        continue;
      }
      SearchedLayout s{batch[b]->layout, results[b], 0};
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
  if (details_later) add_details(model, topology, options, caches[0].collectives, out.ranked);
  return out;
}

}  // namespace parallax
