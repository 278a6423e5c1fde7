// `parallax scale`: how a training job's data-parallel strategies scale with the GPU count. For
// each strategy (DDP, ZeRO-1/2/3, FSDP = ZeRO-3's full sharding, HSDP = ZeRO-3 sharded within
// each node's data-parallel ranks and replicated across nodes) and each GPU count, one
// simulated iteration of the workload's model-parallel layout (tp, pp, cp, ep kept; dp what
// the GPUs leave): time, tokens/s per GPU, scaling efficiency against the smallest count, memory
// per GPU (out of memory marked), exposed communication. Strong scaling keeps the global batch;
// weak scaling grows it with the GPUs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_config.h"
#include "topology/topology.h"
#include "training/iteration.h"
#include "training/parallel_layout.h"

namespace parallax {

struct ScalingStrategy {
  std::string name;  ///< "ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp"
  ZeroStage zero = ZeroStage::kStage0;
  /// HSDP: the states sharded over groups of gcd(dp·cp, n) data-parallel ranks, n the base
  /// layout's dp_shard where it gives one, else one node's (scale-up domain's): GPUs per node / tp;
  /// replicated across the groups.
  bool hybrid = false;
};
/// "ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp"; nullopt otherwise.
std::optional<ScalingStrategy> scaling_strategy_from(const std::string& name);
/// The strategy a ZeRO stage is: "ddp", "zero1", "zero2", "zero3".
const char* scaling_strategy_name(ZeroStage zero);

/// A run the user measured at a cell's strategy and GPU count (measured_scaling.h).
struct MeasuredCell {
  int line = 0;                     ///< its row in the measured file
  double value = 0;                 ///< in the file's quantity (ScalingStudy::measured_column)
  double tokens_per_s_per_gpu = 0;  ///< the same, as throughput
  /// Predicted over measured throughput, minus 1 (+: predicted too fast); nullopt where the
  /// cell was not run or is out of memory.
  std::optional<double> error;
};

struct ScalingCell {
  int gpus = 0;
  double tokens_per_step = 0;             ///< global batch × sequence at this count
  std::optional<IterationResult> result;  ///< nullopt: the layout cannot run there
  std::string problem;                    ///< why not
  double efficiency = 0;                  ///< tokens/s per GPU over the first count's (0 when either is missing)
  std::optional<MeasuredCell> measured;
};

struct ScalingRow {
  ScalingStrategy strategy;
  std::vector<ScalingCell> cells;  ///< per GPU count, in the order asked
};

struct ScalingStudy {
  bool weak = false;
  std::vector<int> gpus;
  std::vector<ScalingRow> rows;
  /// With measurements attached: their file and column ("step_time_s", …); empty otherwise.
  std::string measured_source, measured_column;
};

/// `topology_for(gpus)` gives the topology of that many GPUs (or throws InputError, reported
/// as the cell's problem). `base` holds the model-parallel degrees, the batch at gpus.front()
/// and the rest of the layout.
ScalingStudy run_scaling_study(const ModelConfig& model, const ParallelLayout& base,
                               const std::function<Topology(int gpus)>& topology_for, const std::vector<int>& gpus,
                               const std::vector<ScalingStrategy>& strategies, bool weak, const IterationOptions& options);

std::string scaling_table(const ScalingStudy& study);
nlohmann::ordered_json scaling_json(const ScalingStudy& study);
/// gnuplot data (GPUs, then tokens/s per GPU per strategy, then, with measurements, the
/// measured tokens/s per GPU per strategy and its error label; NaN where missing) and the script
/// that draws one curve per strategy into `png`, the measured points beside it in its colour.
std::string scaling_data(const ScalingStudy& study);
std::string scaling_script(const ScalingStudy& study, const std::string& data_file, const std::string& png,
                           const std::string& title);

}  // namespace parallax
