// `parallax validate`'s work: each published run simulated on its vendor's standard nodes
// (as many as its GPUs fill) at one sustained fraction, its predicted tokens/s per GPU against
// the published figure, and the error summaries (median, mean) per GPU and per source.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "topology/topology.h"
#include "training/iteration.h"
#include "training/published_runs.h"

namespace parallax {

struct RunPrediction {
  std::optional<ParallelLayout> layout;  ///< set once the row's layout was built
  std::string note;                      ///< assumptions and warnings (assumed micro-batch, OOM)
  std::string problem;                   ///< not simulated: why (empty when it was)
  double predicted = 0;                  ///< tokens/s per GPU
  double error = 0;                      ///< predicted / published − 1
  IterationResult result;
};

/// What every row is simulated with besides its own facts.
struct ValidationModel {
  bool cosimulate = false;              ///< IterationOptions::cosimulate
  Time host_dispatch = kHostDispatch;   ///< ComputeModelOptions::host_dispatch
  Time host_gemm_issue = kHostGemmIssue;  ///< ComputeModelOptions::host_gemm_issue
  AttentionModel attention_model = AttentionModel::kShape;  ///< ComputeModelOptions::attention_model
};

/// Simulates published runs, loading each preset's topology once per node count.
class RunValidator {
 public:
  RunValidator(std::string topologies_dir, double sustained_fraction, ValidationModel model = {});
  /// A row that cannot be simulated (its own error, a bad layout, GPUs that do not fill whole
  /// nodes) comes back with `problem` set, never as an exception.
  RunPrediction predict(const PublishedRun& run);

 private:
  std::string topologies_dir_;
  double sustained_fraction_;
  ValidationModel model_;
  std::map<std::string, Topology> one_node_;
};

/// The row as `validate --json` writes it.
/// `run` as a workload file that `parallax train` reads back to the same simulation as
/// RunValidator::predict (with `--network flow` where `model.cosimulate`, the workload format
/// having no key for it): the model as an inline block, the preset with the run's GPU count
/// (placed as predict places it), the layout, and σ and t_dispatch in the compute block.
/// Throws InputError for a row that cannot be simulated (its own error, a bad layout).
nlohmann::ordered_json workload_of_run(const PublishedRun& run, double sustained_fraction, const ValidationModel& model);

nlohmann::ordered_json run_json(const PublishedRun& run, const RunPrediction& p);

/// A short name for a row's source: its text up to the first comma, parenthesis or dash clause
/// ("Narayanan et al. 2021"), at most 40 characters.
std::string source_label(const std::string& source);

/// Spearman's rank correlation of two equally long series (average ranks for ties); NaN for
/// fewer than two values or a constant series.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

/// How well the predictions order the layouts one source published for one model: per
/// (source, model) group of at least `min_rows` simulated rows, Spearman's ρ between predicted
/// and published tokens/s per GPU — what a layout search ranks by — and what choosing by the
/// prediction costs: the published throughput of the layout predicted fastest against the
/// fastest published, minus one (0 when the prediction picks the best; the first such row
/// where several are predicted equally fast).
struct RankAgreement {
  std::string source, model;
  size_t rows = 0;
  double rho = 0;
  double first_choice_shortfall = 0;
};
std::vector<RankAgreement> rank_agreement(const std::vector<PublishedRun>& runs,
                                          const std::vector<RunPrediction>& predictions, size_t min_rows = 3);

/// The mean and the median (of the middle two for an even count) of errors; NaN when empty.
double mean_error(const std::vector<double>& v);
double median_error(std::vector<double> v);

}  // namespace parallax
