// How many KV-cache blocks an instance holds: per GPU, the memory left after the weights, the
// activation workspace of one step and a reserve, divided by what one block of tokens keeps
// in KV on that GPU; the instance holds what its tightest pipeline stage holds.
//
// A block is block_size tokens of every attention layer of the stage; a hybrid allocator's
// sequence holds fewer of them on windowed layers (BatchingConfig::bounded_kv_share).
// Per GPU of stage s, with tp ranks (bf16 weights and cache unless set otherwise):
//   weights_s   = 2 B × (the stage's share of the layers' parameters + the embedding on the
//                 first stage + the head and final norm on the last) / tp; with fp8 weights
//                 (ServingPrecision) the layers' matrices at 1 B, the rest at 2
//   (the KV cache at 1 B an element instead of 2 with an fp8 cache)
//   kv per token = layers_s × (2 · ⌈kv_heads / tp⌉ · head_dim) × 2 B   (K and V; a KV head is
//                 replicated on each rank when kv_heads < tp); with MLA, layers_s ×
//                 (kv_lora_rank + qk_rope_head_dim) × 2 B, the latent, kept whole on every rank
//                 (mla_cache_token_bytes; sparse attention in fp8: 656 B for 512 + 64); with
//                 DSA, + index_head_dim + 4 B of fp8 index key a layer that runs an indexer
//   (a hybrid model's KV is its attention layers' only; a separate draft model's weights and
//   KV per token are added to the stage's, DraftFootprint)
//   state_s     = a hybrid model's Mamba layers of the stage × ((K − 1)·(d_in + 2·G·N) × 2 B of
//                 convolution inputs + H·P·N × 4 B of fp32 SSM state) / tp, per sequence; vLLM
//                 keeps one such slot for each of max_sequences
//   blocks_s    = ⌊(HBM × (1 − reserve) − weights_s − workspace − max_sequences × state_s) /
//                  (block_size × kv per token)⌋
// The reserve plays vLLM's gpu_memory_utilization (0.9 → reserve 0.1: CUDA context, NCCL
// buffers, CUDA graphs, fragmentation). The workspace is the largest set of activations one
// step keeps live at once: token_budget × (h + (H + 2G)·d/tp + 2·f/tp + h) × 2 B inside a layer
// (its buffers are reused layer after layer), plus max_sequences × ⌈V/tp⌉ × 4 B of logits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "serving/step_model.h"
#include "topology/topology.h"

namespace parallax {

/// The types an instance keeps its weights and KV cache in: bf16, or fp8 (vLLM's fp8
/// quantization and kv_cache_dtype fp8, DeepSeek-V3's native fp8 checkpoint). fp8 weights are the
/// layers' matrices at 1 B; norms, biases, the router, the embedding and the head stay bf16.
struct ServingPrecision {
  DType weights = DType::kBf16;
  DType kv_cache = DType::kBf16;
};

/// What a separate draft model keeps on each GPU of an instance beside the target
/// (speculative decoding by a draft LLM, pp 1): its weights on the TP group and, per token of
/// every sequence, its own KV (the engine keeps both caches in the same blocks).
struct DraftFootprint {
  Bytes weights;
  Bytes kv_per_token;
};
/// The footprint of `draft` on tp ranks in `precision`.
DraftFootprint draft_footprint(const ModelConfig& draft, int tp, ServingPrecision precision = {});

struct KvCapacity {
  int64_t blocks = 0;       ///< the instance's (its tightest stage's)
  int tightest_stage = 0;
  Bytes memory;             ///< per GPU
  Bytes reserve;
  Bytes weights;            ///< per GPU of the tightest stage
  Bytes workspace;
  Bytes states;             ///< the Mamba state slots of max_sequences (hybrid models)
  Bytes block_bytes;        ///< one block on one GPU of the tightest stage
};

/// KV bytes one token keeps on one GPU of a stage holding layers [first, first + layers): its keys
/// and values (MLA: its latent and rope key), and a DSA indexer's key in fp8 beside them.
Bytes kv_bytes_per_token(const ModelConfig& model, int tp, int first, int layers, DType cache = DType::kBf16);
/// The Mamba state one sequence keeps on one GPU of a stage holding layers [first, first +
/// layers): zero for a model without Mamba layers.
Bytes mamba_state_bytes(const ModelConfig& model, int tp, int first, int layers);
/// The share of a pipeline stage's `layers` layers whose attention is windowed or chunked
/// (ModelConfig::bounded_attention), at its least: ⌊share·layers⌋ / layers, the fewest an evenly
/// spread pattern gives a stage of that size.
double stage_bounded_share(const ModelConfig& model, int layers);

/// Weight bytes on one GPU of each pipeline stage (2 B per parameter in bf16; in fp8, 1 B per
/// parameter of the layers' matrices).
std::vector<Bytes> stage_weight_bytes(const ModelConfig& model, InstanceShape shape, DType weights = DType::kBf16);

/// The activation workspace of the header.
Bytes activation_workspace(const ModelConfig& model, int tp, int64_t token_budget, int max_sequences);
/// The workspace on a GPU of an instance whose step takes up to `token_budget` new tokens and
/// `max_sequences` sequences: with data-parallel attention, a dp-th of each on every rank.
Bytes instance_workspace(const ModelConfig& model, InstanceShape shape, int64_t token_budget, int max_sequences);

/// What one engine step of `batch` holds on one GPU of its fullest pipeline stage: the weights,
/// the batch's KV cache (every sequence's kv_len tokens; on windowed or chunked layers the window
/// or the chunk and the step's new tokens, as a hybrid allocator keeps them) and a hybrid model's
/// Mamba states,
/// against the GPU's memory (no reserve or workspace: what the step needs at the least).
struct StepMemory {
  int stage = 0;
  Bytes weights, kv_cache, states, memory;
  Bytes total() const { return weights + kv_cache + states; }
  bool fits() const { return total() <= memory; }
};
StepMemory step_memory(const ModelConfig& model, const GpuSpec& gpu, InstanceShape shape, const RaggedBatch& batch,
                       ServingPrecision precision = {}, DraftFootprint draft = {});

/// The instance's capacity (with data-parallel attention, dp ranks' caches: dp times a GPU's
/// blocks, and each rank's Mamba slots for a dp-th of max_sequences). Throws
/// std::invalid_argument when the weights and workspace leave
/// no room for a single block, naming the numbers.
KvCapacity kv_capacity(const ModelConfig& model, const GpuSpec& gpu, InstanceShape shape, int64_t block_size,
                       double reserve_fraction, Bytes workspace, int max_sequences, ServingPrecision precision = {},
                       DraftFootprint draft = {});

}  // namespace parallax
