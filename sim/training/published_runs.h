// Published training runs as validation rows (format: workloads/validation/README.md): what was
// trained, on what, under which layout, and how fast it went. Each row becomes a model, a
// cluster (a bundled preset per GPU type and a node count) and a layout with every unknown
// filled by a documented default — or a per-row error, never a silent drop.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "training/parallel_layout.h"

namespace parallax {

/// A row's layout, defaults applied (README of the format): null sizes are 1, dp is
/// GPUs / (tp·pp·cp), ZeRO null is 0 (stage 3 with fsdp), micro-batch null is 1, sequence
/// parallel null is tp > 1, recomputation null is none.
struct PublishedLayout {
  int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1;
  int zero_stage = 0;
  /// Hybrid sharding: the data-parallel ranks that shard the model states (ParallelLayout::dp_shard); 0 all.
  int dp_shard = 0;
  bool fsdp = false;
  /// zero_stage null: the format's "Megatron-style run" (ZeRO 0 unless the source says
  /// otherwise).
  bool megatron_style = false;
  int micro_batch = 1;
  bool micro_batch_assumed = false;  ///< the source did not say: 1 was chosen
  int global_batch = 1;
  bool sequence_parallel = false;
  std::string recompute = "none";   ///< none, selective, full
  /// The stack's ZeRO gathers: one layer ahead (the default) or each waited for; per layer (the
  /// default) or per parameter tensor (DeepSpeed's ZeRO-3 before it batched them, 2021).
  bool param_gather_prefetch = true;
  bool param_gather_per_tensor = false;
  /// fp8 rows: the parameters kept and all-gathered in fp8 (Megatron's --fp8-param-gather).
  bool fp8_param_gather = false;
  /// TP collectives overlapped with the GEMMs (Megatron's --tp-comm-overlap, userbuffers).
  bool tp_comm_overlap = false;
  /// The rotary embedding fused (Megatron's apply_rope_fusion); false: eager PyTorch ops.
  bool rope_fusion = true;
  /// MoE rows: the router's fused kernels (Megatron's moe_router_fusion) and the recipe's
  /// load-balancing loss (ParallelLayout::moe_load_balancing; "aux_loss" unless the row says).
  bool moe_router_fusion = false;
  /// "adam" or "muon" (ParallelLayout::optimizer); "adam" unless the row says.
  std::string optimizer = "adam";
  std::string moe_router_load_balancing = "aux_loss";
  /// MoE rows: shared experts beside the dispatch (Megatron's --moe-shared-expert-overlap).
  bool moe_shared_expert_overlap = false;
  bool moe_a2a_overlap = false;
  /// MoE rows run with token dropping: Megatron's capacity factor (unset: dropless) and padding
  /// to it (moe_pad_expert_input_to_capacity).
  std::optional<double> moe_capacity_factor;
  bool moe_pad_to_capacity = false;
  int cpu_offloading_layers = 0;
  /// With full recomputation: the first N layers of each (virtual) stage only; 0 every layer.
  int recompute_layers = 0;
  /// A per-module quantisation recipe (ParallelLayout::module_precision).
  ModulePrecision module_precision{};
  /// fp8/fp4 rows: decoder layers at each end whose GEMMs stay bf16.
  int bf16_layers_at_start = 0;
  int bf16_layers_at_end = 0;
  /// MoE rows: expert tensor parallelism (Megatron's --expert-tensor-parallel-size); 0: tp.
  int expert_tp = 0;
  /// MoE rows: Megatron's token dispatcher, "alltoall" (the default) or "flex" (DeepEP / HybridEP).
  std::string moe_dispatcher = "alltoall";
  /// MoE rows: how the experts' GEMMs are issued, "per_expert" (the default) or "grouped".
  std::string expert_gemm = "per_expert";
  /// Kernels replayed from CUDA graphs: "none" (the default), "layers", "full_iteration" or a
  /// Megatron cuda_graph_scope ("attn/moe_router/moe_preprocess").
  std::string cuda_graphs = "none";
  std::string cp_comm = "ring";
  /// Data-parallel gradients: reduced during the backward pass or after it, in fp32 or in the
  /// training dtype; unset, the row's style decides (Megatron-style: after, fp32).
  std::optional<bool> grad_reduce_overlap, grad_reduce_in_fp32;
  bool precision_aware_optimizer = false;  ///< Megatron's --use-precision-aware-optimizer
  int exp_avg_bytes = 4, exp_avg_sq_bytes = 4;  ///< its moments' types, as bytes
  /// Megatron's (and Megatron-DeepSpeed's type:transformer|embedding) pipeline accounting: the
  /// embedding (the output layer and loss) counted as a layer of the first (last) stage.
  bool account_for_embedding = false, account_for_loss = false;
  /// The attention core as the stack ran it: "flash" or "unfused"; empty: unfused with
  /// selective recomputation, FlashAttention otherwise.
  std::string attention;
  /// Layers of each virtual stage, pp·vpp entries in model order (Megatron's
  /// pipeline_model_parallel_layout); empty: the even or automatic split.
  std::vector<int> stage_layers;
  /// Megatron's recompute_modules ("mla_up_proj", "moe_act", "mlp"): recomputed in the backward.
  RecomputeModules recompute_modules{};
};

struct PublishedRun {
  std::string id;
  std::string source;
  std::string gpu;            ///< as published: "A100-40GB", "H100-80GB", …
  std::string preset;         ///< the bundled topology for it ("dgx-a100-40gb", …; cluster.topology)
  int gpus = 0;
  std::string precision;      ///< bf16, fp8, fp4 (= nvfp4) or mxfp4
  std::string fp8_recipe = "delayed";  ///< with fp8: delayed, current or mxfp8 (row key "fp8_recipe")
  int sequence = 0;
  ModelConfig model;
  PublishedLayout layout;
  double expected_tokens_per_sec_per_gpu = 0;  ///< 0 for a run published as out of memory
  /// The source reports the layout ran out of GPU memory (expected.out_of_memory): no
  /// throughput to compare, only whether the memory model agrees.
  bool expected_out_of_memory = false;
  /// Empty when the row can be simulated; else why not (it is reported, not dropped).
  std::string error;
};

/// The bundled preset for a GPU type of the format (A100-40GB → dgx-a100-40gb, A100-80GB →
/// dgx-a100, H100-80GB → dgx-h100, H800-80GB → hgx-h800, B200 → dgx-b200, B300 → dgx-b300,
/// GB200 → gb200-nvl72, GB300 → gb300-nvl72), or nullopt for another name. A row's
/// `cluster.topology` names another bundled preset where the cluster was not the vendor's node.
std::optional<std::string> preset_for_gpu(const std::string& gpu);

/// The layout a row runs under: its sizes and batches, 1F1B (interleaved when vpp > 1), its ZeRO
/// stage, SP and recomputation, fp8 or fp4 GEMMs when its precision says so (fp8 under the
/// row's recipe, delayed scaling when it names none; NVFP4 for fp4), and the attention core —
/// unfused with selective recomputation (which exists to re-run the materialised scores),
/// FlashAttention otherwise. A Megatron-style row (zero_stage null) takes Megatron-LM's
/// defaults for data parallelism: gradients accumulated and reduced in fp32 (bf16 training's
/// main_grad) after the backward pass (overlap_grad_reduce off).
ParallelLayout parallel_layout_of(const PublishedRun& run);

/// Reads every row of `path` (a JSON array). A row with a bad or missing field gets `error`
/// naming its JSON path ("/12/layout/tp: expected an integer"); the file itself being
/// unreadable or not an array is an InputError.
/// A row whose model says `"bundled": NAME` takes the architecture of `<models_dir>/NAME.json`
/// (none without a models folder) at the row's `seq_length`.
std::vector<PublishedRun> read_published_runs(const std::string& path, const std::string& models_dir = {});

}  // namespace parallax
