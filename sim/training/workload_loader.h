// The training workload file (docs/workload-format.md): model, topology and parallel layout,
// with command-line overrides for what-if questions, read strictly (InputError with the file and
// JSON pointer) and validated.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "compute/compute_model.h"
#include "compute/gemm_efficiency.h"
#include "model/model_config.h"
#include "topology/topology.h"
#include "training/parallel_layout.h"

namespace parallax {

struct TrainingWorkload {
  ModelConfig model;
  Topology topology;
  ParallelLayout layout;
  std::string topology_file;
  bool dp_given = false;  ///< dp set by the file or an override (else what the cluster leaves)
  ComputeModelOptions compute;
  std::shared_ptr<const GemmEfficiency> gemm;  ///< null: the closed form
};

/// What the command line may change; unset (or empty) leaves the file's value.
/// The largest parallel degree, batch (sequences) and sequence (tokens) a workload may name.
inline constexpr int64_t kMaxDegree = 65536;
inline constexpr int64_t kMaxBatch = 1 << 24;
inline constexpr int64_t kMaxSequence = 1 << 24;

struct WorkloadOverrides {
  std::optional<int> tp, pp, dp, vpp, cp, ep, expert_tp, zero, nodes, cpu_offloading_layers, recompute_layers, dp_shard,
      microbatch_group;
  /// The job's GPUs (`--gpus`): the topology sized to them as a launcher places them,
  /// whatever the workload's nodes say.
  std::optional<int> gpus;
  std::optional<int64_t> micro_batch, global_batch, sequence;
  std::string schedule, recompute, dtype, cp_comm, attention, moe_dispatcher, expert_gemm, cuda_graphs,
      moe_router_load_balancing, optimizer;
  std::optional<bool> sequence_parallel, tp_comm_overlap, grad_reduce_overlap, param_gather_prefetch,
      param_gather_per_tensor, moe_shared_expert_overlap, moe_a2a_overlap, rope_fusion, moe_router_fusion,
      account_for_embedding, account_for_loss;
  std::string rank_order;
  /// Megatron's module names, comma-separated ("moe,layernorm"): they replace the workload's.
  std::optional<std::string> recompute_modules;
  /// module=type pairs, comma-separated ("attention=bf16,mamba_out_proj=fp8"): they replace the
  /// workload's per-module quantisation recipe.
  std::optional<std::string> module_precision;
  std::string gemm_table;  ///< harness JSON lines of measured GEMMs
  /// false: the layout is not checked against the GPUs (a layout search takes only its batch,
  /// sequence and switches, and finds the degrees itself).
  bool validate_layout = true;
  std::optional<double> sustained_fraction;
  /// MoE: Megatron's capacity factor and padding to it, and a Zipf router skew
  /// (--moe-capacity-factor, --moe-pad-to-capacity, --moe-expert-skew).
  std::optional<double> moe_capacity_factor, moe_expert_skew;
  std::optional<bool> moe_pad_to_capacity;
};

/// Reads the workload at `path` (bundled models and topology presets from the folders given),
/// applies the overrides (errors name the flag: "--tp", …), fills dp from the cluster when
/// neither gives it, and validates the layout. Throws InputError.
TrainingWorkload load_training_workload(const std::string& path, const std::string& models_dir,
                                        const std::string& topologies_dir, const WorkloadOverrides& overrides = {});

/// Parses a schedule name (gpipe, 1f1b, interleaved_1f1b, zb_h1, zb_h2, zb_v, dualpipe_v); InputError naming
/// `file` and `where` otherwise.
PipelineScheduleKind schedule_from(const std::string& s, const std::string& file, const std::string& where);

}  // namespace parallax
