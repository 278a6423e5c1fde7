// Which instance shape serves this traffic best on these GPUs? The fleet's one colocated pool
// re-shaped every valid way to fill the same GPUs — TP (up to the GPUs, across nodes too), PP,
// data-parallel attention with the experts spread over every GPU (MoE), experts spread over the
// TP group or split by it — and, if asked, with each of several sequence caps and token
// budgets; each run through the whole fleet simulation on the fleet's own traffic mix and seed,
// best rate bound first (rate_bound.h: the smaller of what the instances' prefill and decode
// sustain with full batches), those whose bound cannot reach the best found left unsimulated. With an SLO, each shape's capacity: the highest offered rate (for a
// replayed trace, speed-up) at which the given share of requests meets it, found by doubling
// from the fleet's rate and then bisecting; ranked by it. Without one, the output throughput at
// the fleet's rate. Shapes the model cannot take (heads, layers, experts) or whose weights leave
// no room for the KV cache are counted as rejected, with the first reason of each kind. On a
// cluster of node groups (several kinds of GPU) the pool is placed on each group in turn, its
// instances filling that group's GPUs (the others idle): which kind serves best, in which shape.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/fleet.h"
#include "serving/fleet_report.h"
#include "serving/rate_bound.h"

namespace parallax {

/// Where a search places a pool: the whole cluster, or on a cluster of node groups one group's
/// GPUs (a pool's instances stay within its group).
struct SearchRegion {
  std::string group;  ///< empty: the whole cluster
  int first_gpu = 0, gpus = 0;
  /// The pool's first GPU there: set on node groups (which pool_topology follows), else left to
  /// the packing.
  std::optional<int> start() const { return group.empty() ? std::nullopt : std::optional<int>(first_gpu); }
};

/// One region for the whole cluster, or one per node group, in the topology's order.
std::vector<SearchRegion> search_regions(const FleetConfig& config);

/// On node groups, the candidates placed one way (on a group; for a split, the prefill pool on
/// one group and the decode pool on one) and how they fared: which kind of GPU serves best.
struct GroupOutcome {
  std::vector<std::string> groups;
  size_t candidates = 0;  ///< placeable candidates so placed
  size_t simulated = 0;
  size_t refused = 0;     ///< simulated, but the fleet refused to run
  double best_bound = 0;  ///< of all of them
  double best = 0;        ///< the best capacity (or requests/s) of those simulated
  /// Counts a candidate with its `bound`, and its `figure` when it was simulated (refused: it
  /// was run and the fleet refused it).
  void add(double bound, std::optional<double> figure, bool refused = false);
};

/// A rate per dollar an hour when `dollars_per_hour` > 0, else the rate: what the searches'
/// best-bound-first order and pruning compare when priced.
double per_dollar_hour(double rate, double dollars_per_hour);
/// What a simulated candidate's bound compares with: its capacity, or (ranked by throughput) its
/// requests/s in load units (`requests_per_unit` requests/s a unit).
double bound_figure(bool by_capacity, double capacity, const FleetSummary& summary, double requests_per_unit);
/// What a search ranks by: capacity at the SLO (or, `by_capacity` false, output tokens/s at the
/// fleet's rate), per dollar an hour when `dollars_per_hour` > 0.
double ranking_figure(bool by_capacity, double capacity, const FleetSummary& summary, double dollars_per_hour);
/// Dollars per million output tokens of a priced run at what it is ranked by: at its capacity
/// (`requests_per_unit` requests/s a unit of load, each of `mean_output` output tokens) when
/// `by_capacity`, else at its output throughput; 0 unpriced or when nothing comes out.
double dollars_per_million_output(double dollars_per_hour, bool by_capacity, double capacity, double requests_per_unit,
                                  double mean_output, const FleetSummary& summary);

/// The outcomes as a table, a column per entry of `headers` for their groups ("prefill on").
std::string group_outcome_table(const std::vector<GroupOutcome>& outcomes, const std::vector<std::string>& headers,
                                bool by_capacity);
/// The outcomes as JSON, each group under its entry of `keys` ("prefill_group").
nlohmann::ordered_json group_outcome_json(const std::vector<GroupOutcome>& outcomes, const std::vector<std::string>& keys);

struct ShapeRun {
  InstanceShape shape;
  std::string group;             ///< on node groups: the group it runs on (else empty)
  std::optional<int> first_gpu;  ///< on node groups: its first GPU
  int instances = 0;
  int64_t kv_blocks = 0;  ///< per instance
  int max_sequences = 0;  ///< the batching it ran with
  int64_t token_budget = 0;
  int draft_tokens = 0;   ///< speculating: draft tokens a step
  double bound = 0;       ///< requests/s: the instances' rate bound
  double capacity = 0;    ///< with an SLO: the highest rate meeting it (0: none tried did)
  FleetSummary summary;   ///< at the capacity (or, below every rate tried, at the fleet's)
  double dollars_per_hour = 0;            ///< priced: its instances' GPUs an hour
  double dollars_per_million_output = 0;  ///< priced: at its capacity (dollars_per_million_output)
};

struct ShapeSearch {
  size_t enumerated = 0;          ///< shapes × batching variants
  size_t rejected_by_rule = 0;    ///< shapes the model cannot take (heads, layers, experts, …)
  size_t rejected_by_memory = 0;  ///< shapes whose weights leave no room for the KV cache
  size_t pruned_by_bound = 0;
  bool batching_varied = false;   ///< more than one (max_sequences, token_budget, draft tokens) tried
  std::vector<std::string> rejections;  ///< "shape: reason", the first of each kind
  std::vector<ShapeRun> ranked;         ///< best first
  bool by_capacity = false;             ///< ranked by capacity at the SLO, else by output throughput
  bool by_cost = false;                 ///< priced: ranked by that figure per dollar an hour
  double attainment = 0.9;
  bool node_groups = false;             ///< the pool was placed on each node group in turn
  std::vector<GroupOutcome> groups;     ///< on node groups, per group in the topology's order
};

/// The shapes tried for `model` on `gpus` GPUs of `per_node` a node: tp and dp·tp·pp powers of
/// two (and the instance a divisor of the GPUs), pp ≤ 8 and ≤ the layers; MoE models also with
/// the experts spread over the TP group (ep = tp) and with data-parallel attention (ep = tp·dp);
/// `pipeline` false keeps pp 1 (speculating pools).
std::vector<InstanceShape> candidate_shapes(const ModelConfig& model, int gpus, bool pipeline = true);

struct ShapeSearchOptions {
  int threads = 1;  ///< simulations at once (the ranking does not depend on them)
  double attainment = 0.9;
  bool prune = true;                   ///< false: simulate every valid candidate
  std::vector<int> max_sequences;      ///< sequence caps to try (empty: the pool's own)
  std::vector<int64_t> token_budgets;  ///< token budgets to try (empty: the pool's own)
  std::vector<int> draft_tokens;       ///< speculating pools: draft tokens a step to try (empty: the pool's)
  /// GPU-hour prices (empty: none): rank by capacity (or output throughput) per dollar an hour
  /// of the GPUs used, which on node groups favours the cheaper kind where it carries enough.
  GpuHourPrices prices;
};

/// The shapes tried for `pool` of `config` on `gpus` GPUs (0: all the topology's):
/// candidate_shapes, with pipeline stages only where the pool does not speculate (a prefill pool
/// never decodes) nor overlap two batches, and under two-batch overlap only data-parallel
/// attention.
std::vector<InstanceShape> pool_candidate_shapes(const FleetConfig& config, const PoolConfig& pool, int gpus = 0);

/// Runs the candidate shapes (× batching variants) of `config`'s single colocated pool on all
/// the topology's GPUs. `progress(done, total)` after each. Throws std::invalid_argument when
/// the fleet has more than one pool or a disaggregated one, or for draft tokens to try on a
/// pool that does not speculate.
ShapeSearch search_shapes(const FleetConfig& config, const ShapeSearchOptions& options = {},
                          const std::function<void(size_t, size_t)>& progress = nullptr);

/// The fleet's run at `rate` (replaying: a speed-up of the trace), open-loop traffic keeping the
/// fleet's window: as many requests as the rate brings in the file's requests / rate, never fewer
/// than the file's.
FleetSummary summary_at(const FleetConfig& config, double rate);

/// The highest rate (or, replaying, speed-up) at which `attainment` of the requests meet the
/// fleet's SLO, within 2% (doubling from the fleet's own up to 256 times it, then bisecting),
/// and the run at it; 0 and the fleet's own run when even a 64th of its rate does not. Open-loop
/// traffic keeps the fleet's window (its requests over its rate): a run at twice the rate has
/// twice the requests.
std::pair<double, FleetSummary> capacity_at_slo(const FleetConfig& config, double attainment);

/// Runs candidates 0…n−1, sorted best `bounds` first, in rounds of eight (`threads` at once;
/// which are run does not depend on the threads): `run(i)` simulates candidate i and returns its
/// figure in the bounds' units (offered load: requests/s, or a replayed trace's speed-up),
/// nullopt when it cannot run. With `prune`, stops
/// before the first candidate whose bound × (1 + kBoundMargin) is below the best figure so far
/// (sorted, none after it can reach it either). Returns how many were run, the first ones.
size_t run_best_bound_first(const std::vector<double>& bounds, bool prune, int threads,
                            const std::function<std::optional<double>(size_t)>& run,
                            const std::function<void(size_t, size_t)>& progress);

/// Whether a search ranks `config`'s candidates by capacity at the SLO: an SLO is set and the
/// traffic is open-loop or replayed (a closed loop's load follows from its users); else by
/// output throughput at the fleet's rate.
bool ranks_by_capacity(const FleetConfig& config);
/// Whether a refusal (shape_refusal's, or a fleet's) is for memory: the weights leave no room
/// for the KV cache.
bool refused_for_memory(const std::string& why);

/// "tp 4 · pp 1 · ep 4": a shape's dimensions, dp and ep where they are not 1.
std::string describe_shape(const InstanceShape& shape);
/// "tp4 ep4": the same, short, pp too only where it is not 1 (plot labels).
std::string shape_label(const InstanceShape& shape);
/// Why `pool` cannot serve `config`'s model (check_pool_shape's reason), or empty.
std::string shape_refusal(const FleetConfig& config, const PoolConfig& pool);

std::string shape_table(const ShapeSearch& search, size_t top);
/// Per simulated shape: its capacity (or requests/s), p99 TPOT and TTFT (ms) at it, and its label.
std::string shape_data(const ShapeSearch& search);
/// A gnuplot script drawing `data_file` into `png`: each shape's capacity against its p99 TPOT
/// at it, labelled, the trade a serving layout makes between throughput and latency.
std::string shape_gnuplot(const std::string& data_file, const std::string& png, bool by_capacity,
                          const std::string& title);
nlohmann::ordered_json shape_json(const ShapeSearch& search);
/// The table's footnote on what the bound column means ("the instances sustain").
std::string bound_note(const std::string& who_sustains);
/// The JSON "ranked_by": "capacity_at_slo" or "output_throughput", "_per_dollar_hour" priced.
std::string ranked_by(bool by_capacity, bool by_cost);
/// Priced, the "$/hour" and "$/M out" column heads, a run's values under them, and the note
/// saying what they are (each empty unpriced).
std::string cost_header(bool by_cost);
std::string cost_columns(bool by_cost, double dollars_per_hour, double dollars_per_million_output);
std::string cost_note(bool by_capacity);
/// Adds a priced run's dollars an hour and dollars per million output tokens to `j`.
void add_cost_figures(nlohmann::ordered_json& j, double dollars_per_hour, double dollars_per_million_output);
/// The table's footnote on what capacity means, at `attainment`.
std::string capacity_note(double attainment);
/// A plot data row: the rate, p99 TPOT and TTFT (ms) and the quoted label.
std::string data_row(double rate, const FleetSummary& summary, const std::string& label);
/// A pool's shape as the searches' JSON gives it: tp, pp, dp, ep, instances, KV blocks.
nlohmann::ordered_json pool_shape_json(const InstanceShape& shape, int instances, int64_t kv_blocks);
/// A searched fleet's figures, added to `j`: its capacity, goodput, requests/s, output tokens/s
/// per GPU, p99 TTFT and TPOT (s) and SLO attainment.
void add_run_figures(nlohmann::ordered_json& j, double capacity, const FleetSummary& summary);
/// A pool's "placement" in a fleet file: its first GPU `first_gpu` as node and GPU of a node.
nlohmann::json placement_json(int first_gpu, int gpus_per_node);
/// A fleet file's pool (JSON) set to `instances` of `shape`: packed (its placement dropped), or
/// with `first_gpu` (node groups) placed there on `topology`'s nodes.
void set_pool_shape(nlohmann::json& pool, const InstanceShape& shape, int instances, const Topology& topology,
                    std::optional<int> first_gpu = std::nullopt);
/// The fleet file `original` (loaded as `config`) with its pool re-shaped as `run` (tp, pp, dp,
/// ep, count; its group's placement on node groups), the rest as it was: what `serve search
/// --emit` writes.
nlohmann::json fleet_with_shape(const nlohmann::json& original, const FleetConfig& config, const ShapeRun& run);

}  // namespace parallax
