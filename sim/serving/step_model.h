// The time of one engine step of a model-parallel serving instance (TP × PP GPUs running one
// copy of the model): the ragged batch's operators (model/layer_operators.h) on the compute
// model of the instance's GPU, the TP all-reduces of every layer on the instance's TP group
// (the collective model of the topology, so NVLink against cross-node TP shows), the hand-offs
// between pipeline stages, and a per-step framework overhead.
//
// Per stage s (layers split evenly, the first stages taking the remainder; the embedding on the
// first, the output head on the last):
//   compute_s = Σ operators' forward time, each max(FLOPs / achieved rate, bytes / HBM) + launch
//   tp_s      = (2 · its Transformer layers + its hybrid single-block layers + [embedding])
//               all-reduces of T·h activation bytes on tp ranks (after the attention output
//               projection and after the MLP, or after a Mamba, attention or MLP block;
//               Megatron-style TP), 0 when tp = 1
// step = Σ_s (compute_s + tp_s) + (pp − 1) hand-offs of T·h bytes between neighbouring stages
//        + framework overhead
// with T = Σ new tokens of the batch. This is the latency of one batch through the instance;
// with pp > 1 an engine keeps up to pp batches in flight (vLLM's virtual engines), so its
// throughput is set by the slowest stage, reported as `bottleneck_stage`.
//
// MoE layers: experts split by TP (ep = 1) or spread whole over the TP group (ep = tp), the
// layer's outputs summed by the same TP all-reduce either way; only the experts a batch's
// tokens reach are computed and read (layer_operators.h). Hybrid models' Mamba layers scan
// their prompt chunks and advance each decoding sequence's state (layer_operators.h).
// Data-parallel attention (InstanceShape::dp > 1, MoE models, pp 1): the batch's sequences run on
// the ranks of tp GPUs their tags name (the fleet's per-rank schedulers), else shared out
// (split_over_attention_ranks; attention_ranks chooses); each rank's layers as above on its own
// sequences, its experts receiving every rank's tokens (ShardingFactors::attention_dp); the step
// is the slowest rank's plus, per MoE layer, a dispatch and a combine all-to-all over all dp·tp
// GPUs of the busiest rank's T·k_top rows.
// Speculative decoding (StepModelOptions::speculative, chunks with drafts): the verification is
// the chunk's 1 + drafts tokens through the layers above; before it, as many draft passes as the
// most drafts of a sequence, each one token a speculating sequence through the draft layer (the
// model's MTP layer, or its first layer's shape for EAGLE), a 2h → h projection and the head.
// A skewed router (StepModelOptions::expert_skew) scales the experts' rows by the busiest GPU's
// load when they are spread over GPUs.
// Two-batch overlap (StepModelOptions::two_batch_overlap) runs each rank's share as two
// micro-batches, one's all-to-alls beside the other's layers.
// Redundant experts (InstanceShape::redundant_experts) are placed as an expert-parallel load
// balancer places them.
// Not modelled: CUDA graphs (folded into the overhead term), a draft LLM catching up on the
// tokens accepted in the step before (its passes are one token a sequence each).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "collectives/collective_simulator.h"
#include "compute/compute_model.h"
#include "model/layer_operators.h"
#include "model/model_config.h"
#include "topology/topology.h"

namespace parallax {

struct InstanceShape {
  int tp = 1;
  int pp = 1;
  /// Expert parallelism of a MoE model: 1 (each expert split by TP) or tp (the experts spread
  /// whole over the TP group; ShardingFactors::experts_in_tp_group), or tp·dp with dp > 1.
  int ep = 1;
  /// Data-parallel attention (SGLang's --enable-dp-attention, vLLM's data-parallel ranks with
  /// expert parallelism): dp ranks of tp GPUs, each running the attention and dense layers on its
  /// own share of the sequences, the routed experts spread whole over all dp·tp GPUs (ep = tp·dp)
  /// and reached by an all-to-all dispatch and combine. MoE models, pp = 1.
  int dp = 1;
  /// Replicas of the most chosen experts beside the routed ones, with the experts spread over
  /// GPUs (ep > 1): E + r copies over ep GPUs, placed as an expert-parallel load balancer does
  /// (busiest_expert_group_load), each GPU keeping (E + r)/ep experts' weights.
  int redundant_experts = 0;
  int gpus() const { return tp * pp * dp; }
};

/// How a speculating instance drafts (SequenceChunk::drafts): none; the model's own
/// multi-token-prediction module (DeepSeek-V3's, GLM-4.5's, Nemotron 3's: one MTP layer, its
/// 2h → h input projection and the shared output head a draft token); an EAGLE head, costed
/// as one layer of the target's first layer's shape with the same projection and head; or a
/// separate, smaller LLM of the same vocabulary (vLLM's draft model: Llama 3.2 1B for Llama 3.1
/// 70B), a whole decode step of it, on the instance's TP group, a draft token.
enum class SpeculativeMethod { kNone, kMtp, kEagle, kDraftModel };

struct StepModelOptions {
  ComputeModelOptions compute;
  std::shared_ptr<const GemmEfficiency> gemm;  ///< null: the shape model
  /// CPU and framework time per engine step (scheduling, input preparation, sampling on the
  /// host, launches outside CUDA graphs). Not fitted: a placeholder of the order vLLM V1 shows
  /// on a recent host; set it from a measured step of your engine.
  Time step_overhead = Time::us(500);
  std::string collective_model = "analytical";  ///< the TP collectives' network model
  DType dtype = DType::kBf16;           ///< the GEMMs' weights (fp8: with bf16 activations)
  DType kv_cache_dtype = DType::kBf16;  ///< the KV cache (fp8: the attention reads it at 1 B)
  SpeculativeMethod speculative = SpeculativeMethod::kNone;
  /// kDraftModel: the draft LLM (its weights and KV cache beside the target's: kv_capacity.h's
  /// DraftFootprint).
  std::shared_ptr<const ModelConfig> draft_model;
  /// A skewed router (Zipf exponent; 0 even): with the experts spread over GPUs (ep > 1) the
  /// GPU holding the most-chosen ones computes its experts' share of the slots, and the others
  /// wait for it (busiest_expert_group_load). Experts split by TP see no skew.
  double expert_skew = 0;
  /// Data-parallel attention: each rank's sequences in two micro-batches, one's all-to-alls
  /// beside the other's layers (SGLang's --enable-two-batch-overlap).
  bool two_batch_overlap = false;
};

/// Where one step's time went (the instance's per-GPU view: every rank of a stage does the same).
struct StepBreakdown {
  Time total;
  Time gemm;              ///< GEMM kernels (projections, MLP, experts, head)
  Time attention;         ///< the attention core
  Time other;             ///< memory-bound kernels (norms, activations, rotary, sampling, …)
  Time tp_communication;  ///< TP all-reduces, all stages
  Time pp_handoff;        ///< activations sent between stages
  Time ep_communication;  ///< data-parallel attention: the experts' dispatch and combine all-to-alls
  Time drafting;          ///< speculative decoding: the draft passes (inside the other parts too)
  Time overlapped;        ///< two-batch overlap: the part of the parts above that ran beside another
  Time overhead;          ///< the framework term
  Time bottleneck_stage;  ///< the slowest stage's compute + TP time
  Flops flops;            ///< per GPU, summed over stages
  Bytes hbm_bytes;        ///< per GPU, summed over stages
  int64_t new_tokens = 0;
  int64_t sequences = 0;
};

/// One pipeline stage's layers as a step costs them: an example layer of each kind with how many
/// there are, and the TP all-reduces they make.
struct StageLayerKinds {
  std::vector<std::pair<int, int>> examples;  ///< (a layer, how many of its kind)
  int all_reduces = 0;
};

class StepModel {
 public:
  /// The instance occupies tp·pp consecutive GPUs, TP innermost, its first being GPU
  /// `node_offset` of a node (placement_problem must hold). Throws std::invalid_argument when the
  /// shape does not fit the model (heads, layers), the topology's GPUs or the placement.
  StepModel(ModelConfig model, const Topology& topology, InstanceShape shape, StepModelOptions options = {},
            int node_offset = 0);

  /// Throws std::invalid_argument when the batch is not valid for the model and shape.
  StepBreakdown step(const RaggedBatch& batch) const;

  /// The dispatch and combine all-to-alls of `layers` MoE layers (the model's, by default) over
  /// a step whose busiest attention rank holds `tokens` new tokens (zero without data-parallel
  /// attention).
  Time expert_all_to_alls(int64_t tokens, std::optional<int> layers = std::nullopt) const;

  /// Layers of each stage.
  const std::vector<int>& stage_layers() const { return stage_layers_; }
  const ComputeModel& compute() const { return compute_; }
  const ModelConfig& model() const { return model_; }
  InstanceShape shape() const { return shape_; }
  /// The busiest GPU's routed rows over an even share (StepModelOptions::expert_skew).
  double expert_rows() const { return expert_rows_; }

 private:
  Time all_reduce(Bytes size) const;
  Time handoff(int stage, Bytes size) const;
  /// The pipeline's stages for one batch on one attention rank: compute, TP and hand-offs, and
  /// the draft passes of its speculating sequences.
  StepBreakdown stages(const RaggedBatch& batch) const;
  /// Data-parallel attention: the step of every rank's share of the batch.
  StepBreakdown ranks_in_step(const RaggedBatch& batch) const;
  /// Adds a micro-batch's parts to `sum`.
  static void add_parts(StepBreakdown& sum, const StepBreakdown& part);
  /// The draft passes before a step (added to `b`): the passes' time.
  Time drafting(const RaggedBatch& batch, StepBreakdown& b) const;
  /// kDraftModel: checks the draft LLM against the target and builds its step model.
  void make_draft_model(const Topology& topology, int node_offset);

  ModelConfig model_;
  InstanceShape shape_;
  StepModelOptions options_;
  ComputeModel compute_;
  std::vector<int> stage_layers_;
  std::vector<StageLayerKinds> stage_kinds_;
  ShardingFactors sharding_;
  std::unique_ptr<CollectiveSimulator> tp_group_;
  std::unique_ptr<CollectiveSimulator> ep_group_;  ///< data-parallel attention: all dp·tp GPUs
  std::unique_ptr<StepModel> draft_;  ///< kDraftModel: the draft LLM on the same TP group, no overhead term
  int moe_layers_ = 0;
  double expert_rows_ = 1;  ///< the busiest GPU's routed rows over an even share
  /// Per stage boundary: the two ranks' send/recv (same node or not).
  std::vector<std::shared_ptr<CollectiveSimulator>> handoffs_;
  /// TP all-reduce and EP all-to-all times by size (not thread-safe: a StepModel serves one
  /// simulation).
  mutable std::unordered_map<double, Time> all_reduce_times_, all_to_all_times_;
};

/// The breakdown as JSON: step_time_ms and each part in ms, flops and hbm_bytes per GPU, the
/// batch's sequences and new tokens, and tokens_per_s (new tokens over the step time).
nlohmann::ordered_json to_json(const StepBreakdown& b);

/// Why an instance of `shape` cannot start at GPU `node_offset` of a node of `gpus_per_node`
/// GPUs, or empty: every stage's TP group must sit in one node, or (TP wider than a node) start
/// at a node's first GPU and fill whole nodes.
std::string placement_problem(InstanceShape shape, int gpus_per_node, int node_offset);

/// GPUs per node of `topology` (all of them when it has no nodes).
int gpus_per_node(const Topology& topology);

/// A step's sequences by data-parallel attention rank: where their tags (SequenceChunk::rank) put
/// them, else split_over_attention_ranks. Throws std::invalid_argument for a tag out of range or a
/// batch only partly tagged.
std::vector<RaggedBatch> attention_ranks(const RaggedBatch& batch, int ranks);

/// A step's sequences shared out over `ranks` data-parallel attention ranks as a DP controller
/// keeps them even: largest chunk first (new tokens, then context) to the rank with the fewest
/// new tokens (then the least context, then the lowest index). Some may be empty.
std::vector<RaggedBatch> split_over_attention_ranks(const RaggedBatch& batch, int ranks);

/// Layers per pipeline stage: `layers` split into `stages` parts, the first `layers % stages`
/// one larger. Throws std::invalid_argument when stages < 1 or stages > layers.
std::vector<int> split_layers(int layers, int stages);

}  // namespace parallax
