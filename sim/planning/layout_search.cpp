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

double score_of(const LayoutSummary& r, SearchObjective objective) {
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

// Simulates the layouts of `batch` at `mine` on one thread per cache, each thread with its own
// collective simulators; a layout the simulation refuses (a rule only it checks) is summarised
// as not simulated.
std::vector<LayoutSummary> simulate_batch(const ModelConfig& model, const std::vector<const Candidate*>& batch,
                                          const std::vector<size_t>& mine, const Topology& topology,
                                          const IterationOptions& options, std::vector<CollectiveSimulatorCache>& caches) {
  std::vector<LayoutSummary> results(mine.size());
  std::atomic<size_t> next{0};
  auto work = [&](size_t t) {
    IterationOptions o = options;
    o.collective_simulators = &caches[t];
    for (size_t i = next++; i < mine.size(); i = next++) {
      try {
        results[i] = summarize(simulate_iteration(model, batch[mine[i]]->layout, topology, o));
      } catch (const InputError&) {
        results[i] = LayoutSummary{};
      } catch (const std::invalid_argument&) {
        results[i] = LayoutSummary{};
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < caches.size(); ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  return results;
}

// Every layout of `batch` summarised: this process's share simulated here, the others' received
// through the partition (each process's share in rank order, as simulate_batch returned it).
std::vector<LayoutSummary> summarise_batch(const ModelConfig& model, const std::vector<const Candidate*>& batch,
                                           const Topology& topology, const IterationOptions& options,
                                           std::vector<CollectiveSimulatorCache>& caches, SearchPartition* partition) {
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
  if (e.valid.empty()) {
    throw InputError("", "", "no layout of the space is valid on " + std::to_string(gpus) + " GPUs: " +
                                 (e.enumerated == 0 ? std::string("no combination of its tp, pp and cp fills them")
                                                    : "each of the " + std::to_string(e.enumerated) +
                                                          " combinations that fill them breaks a layout rule"));
  }
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
      if (candidates[i].bound.seconds() > ranked[options.top - 1].second.result.iteration_time_s) {
        out.pruned_by_bound = candidates.size() - i;  // bounds only grow from here
        break;
      }
    }
    std::vector<const Candidate*> batch;
    for (; i < candidates.size() && batch.size() < kBatch; ++i) batch.push_back(&candidates[i]);
    const std::vector<LayoutSummary> results =
        summarise_batch(model, batch, topology, options.iteration, caches, options.partition);
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
  return out;
}

}  // namespace parallax
