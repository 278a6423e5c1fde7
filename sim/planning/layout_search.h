// `parallax search`: which layout of a training job runs fastest on this cluster. Enumerates
// the space (search_space.h), drops what the rules refuse, then what does not fit in GPU memory
// (estimate_memory: a pure function, no time simulated), then what a lower bound on its
// iteration time shows cannot reach the top k, and simulates the rest, in parallel, ranked.
// Deterministic: the same inputs give the same ranking and counts whatever the thread count
// (layouts are simulated in fixed batches in bound order; ties go to the layout's text).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "planning/search_space.h"
#include "topology/topology.h"
#include "training/iteration.h"
#include "training/parallel_layout.h"

namespace parallax {

/// kCost: GPU-hours per million tokens, lowest first. Over one GPU count it ranks as
/// throughput does (cost = GPUs / tokens per second); the table shows it (search_report.h).
enum class SearchObjective { kTokensPerSecond, kMfu, kCost };
/// "tokens_per_s", "mfu", "cost"; nullopt otherwise.
std::optional<SearchObjective> search_objective_from(const std::string& name);

/// What the ranking and the reports keep of a simulated layout: plain numbers, so that
/// processes of a distributed search can exchange them as bytes.
struct LayoutSummary {
  double iteration_time_s = 0;
  double tokens_per_second = 0;
  double tokens_per_second_per_gpu = 0;
  double mfu = 0;
  double peak_memory_bytes = 0;
  double pipeline_bubble_fraction = 0;
  double most_exposed_s = 0;    ///< the largest exposed communication of any stage and kind
  int32_t most_exposed_kind = 0;  ///< its WorkKind
  int32_t simulated = 0;         ///< 0: the simulation refused the layout (a rule only it checks)
};
LayoutSummary summarize(const IterationResult& r);

/// Splits a search over processes (e.g. MPI ranks, tools/parallax): each simulates the layouts
/// of every batch whose index within it is its rank modulo the size, then all exchange their
/// summaries, so that every process ranks, prunes and counts alike.
class SearchPartition {
 public:
  virtual ~SearchPartition() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Every process's `mine`, concatenated in rank order (every process calls it, in step).
  virtual std::vector<LayoutSummary> all_gather(const std::vector<LayoutSummary>& mine) = 0;
};

struct SearchOptions {
  size_t top = 10;                 ///< how many layouts the bound keeps in play
  SearchObjective objective = SearchObjective::kTokensPerSecond;
  int threads = 1;
  IterationOptions iteration;      ///< how each layout is simulated (analytical or co-simulated)
  /// The bubble and the most exposed communication (LayoutSummary) of every simulated layout;
  /// false: of the `top` best only (the others are ranked by their time alone, which does not
  /// depend on it, and simulated again with it when they make the top).
  bool details_for_every_layout = false;
  /// Called after every simulated batch: (layouts simulated so far, layouts left to simulate
  /// or prune). For a progress bar; may be empty.
  std::function<void(size_t, size_t)> progress;
  /// Null: this process simulates everything.
  SearchPartition* partition = nullptr;
};

struct SearchedLayout {
  ParallelLayout layout;
  LayoutSummary result;
  double score = 0;  ///< the objective's value (higher is better)
};

struct SearchOutcome {
  size_t enumerated = 0;
  size_t rejected_by_rule = 0;
  size_t rejected_by_memory = 0;
  size_t pruned_by_bound = 0;
  size_t simulated = 0;
  /// Every simulated layout, best first.
  std::vector<SearchedLayout> ranked;
  /// Every valid layout was rejected by memory; then the one whose peak is least.
  bool none_fits = false;
  std::optional<ParallelLayout> leanest_out_of_memory;
  Bytes leanest_peak_memory, gpu_memory;
};

/// Searches `space` for `model` on every GPU of `topology`, from `base` (batch, sequence, dtype).
/// Throws InputError before simulating anything when no layout of the space is valid.
SearchOutcome search_layouts(const ModelConfig& model, const ParallelLayout& base, const Topology& topology,
                             const SearchSpace& space, const SearchOptions& options);

}  // namespace parallax
