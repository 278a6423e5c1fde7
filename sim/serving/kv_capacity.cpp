// KV-cache capacity of an instance (kv_capacity.h).
#include "serving/kv_capacity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>

#include "model/layer_operators.h"
#include "model/parameter_count.h"

namespace parallax {
namespace {

constexpr double kBf16Bytes = 2;
constexpr double kFp32StateBytes = 4;  // vLLM's mamba_ssm_cache_dtype float32, Nemotron's config
constexpr double kIndexScaleBytes = 4;  // an fp32 scale per 128 elements of a DSA index key

std::string gib(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", b.value() / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

Bytes kv_bytes_per_token(const ModelConfig& m, int tp, int first, int layers, DType cache) {
  const double cache_bytes = bytes_per_element(cache);
  int attention_layers = 0;
  for (int l = first; l < first + layers; ++l) attention_layers += m.has_attention(l) ? 1 : 0;
  double per_layer = 0;
  if (m.mla) {
    per_layer = mla_cache_token_bytes(m, cache);
  } else {
    const double heads = std::ceil(static_cast<double>(m.kv_heads) / tp);
    per_layer = 2.0 * heads * static_cast<double>(m.head_dim) * cache_bytes;
  }
  // A DSA indexer keeps each token's key too, in fp8 with an fp32 scale per 128 elements
  // whatever the cache type (vLLM's and SGLang's indexer caches, which DeepGEMM's fp8 kernels read).
  double index_keys = 0;
  if (m.sparse_attention) {
    const double d = static_cast<double>(m.sparse_attention->index_head_dim);
    for (int l = first; l < first + layers; ++l) index_keys += m.has_indexer(l) ? d + kIndexScaleBytes * std::ceil(d / 128) : 0;
  }
  return Bytes(per_layer * attention_layers + index_keys);
}

Bytes mamba_state_bytes(const ModelConfig& m, int tp, int first, int layers) {
  if (!m.mamba) return Bytes();
  const MambaConfig& a = *m.mamba;
  int mamba_layers = 0;
  for (int l = first; l < first + layers; ++l) mamba_layers += m.layer_kind(l) == LayerKind::kMamba ? 1 : 0;
  const double conv = static_cast<double>((a.conv_kernel - 1) * a.conv_channels()) * kBf16Bytes;
  const double ssm = static_cast<double>(a.inner() * a.state) * kFp32StateBytes;
  return Bytes(mamba_layers * (conv + ssm) / tp);
}

std::vector<Bytes> stage_weight_bytes(const ModelConfig& m, InstanceShape shape, DType weights) {
  const ParameterCounts p = count_parameters(m);
  const std::vector<int> layers = split_layers(m.layers, shape.pp);
  const double matrix_bytes = bytes_per_element(weights);
  // A stage's bytes: its layers' matrices in the weight type, the rest (norms, biases, router,
  // embedding, head) in bf16.
  // With data-parallel attention every rank keeps the dense weights (split by its tp) and a
  // 1/(tp·dp) share of the routed experts. A DSA indexer is whole on every rank (replicated).
  const auto stage_bytes = [&](double matrices, double others, double routed, double replicated, size_t s) {
    if (s == 0) others += static_cast<double>(p.embedding);
    if (s + 1 == layers.size()) others += static_cast<double>(p.output_head + p.final_norm);
    const double copies = m.moe ? 1.0 + static_cast<double>(shape.redundant_experts) / m.moe->experts : 1.0;
    return Bytes((matrix_bytes * matrices + kBf16Bytes * others) / shape.tp + matrix_bytes * replicated +
                 matrix_bytes * routed * copies / (shape.tp * shape.dp));
  };
  if (m.hybrid()) {
    // Layers of several kinds: each stage's own, layer by layer.
    std::vector<Bytes> out;
    int first = 0;
    for (size_t s = 0; s < layers.size(); ++s) {
      double matrices = 0, others = 0, routed = 0, replicated = 0;
      for (int l = first; l < first + layers[s]; ++l) {
        const LayerParameterCounts c = layer_parameters(m, l);
        matrices += static_cast<double>(c.attention + c.mlp + c.latent_projections);
        routed += static_cast<double>(c.routed_experts);
        others += static_cast<double>(c.router + c.vectors + c.routed_vectors);
        replicated += static_cast<double>(c.indexer);
      }
      out.push_back(stage_bytes(matrices, others, routed, replicated, s));
      first += layers[s];
    }
    return out;
  }
  int moe_layers = 0;
  for (int l = 0; l < m.layers; ++l) moe_layers += m.is_moe_layer(l) ? 1 : 0;
  const int dense_layers = m.layers - moe_layers;
  std::vector<Bytes> out;
  int first = 0;
  for (size_t s = 0; s < layers.size(); ++s) {
    int moe = 0;
    for (int l = first; l < first + layers[s]; ++l) moe += m.is_moe_layer(l) ? 1 : 0;
    const int dense = layers[s] - moe;
    double matrices = static_cast<double>(p.attention) * layers[s] / m.layers;
    double others = static_cast<double>(p.layer_vectors) * layers[s] / m.layers;
    double routed = 0, replicated = 0;
    for (int l = first; l < first + layers[s]; ++l) replicated += static_cast<double>(layer_parameters(m, l).indexer);
    if (dense_layers > 0) matrices += static_cast<double>(p.dense_mlp) * dense / dense_layers;
    if (moe_layers > 0) {
      matrices += static_cast<double>(p.shared_experts + p.latent_projections) * moe / moe_layers;
      routed = static_cast<double>(p.routed_experts) * moe / moe_layers;
      others += static_cast<double>(p.router) * moe / moe_layers;
    }
    out.push_back(stage_bytes(matrices, others, routed, replicated, s));
    first += layers[s];
  }
  return out;
}

Bytes instance_workspace(const ModelConfig& m, InstanceShape shape, int64_t token_budget, int max_sequences) {
  const int64_t dp = shape.dp;
  return activation_workspace(m, shape.tp, (token_budget + dp - 1) / dp, static_cast<int>((max_sequences + dp - 1) / dp));
}

Bytes activation_workspace(const ModelConfig& m, int tp, int64_t token_budget, int max_sequences) {
  const double h = static_cast<double>(m.hidden);
  // The widest projection output a token has in a layer: attention's q (and gate), k and v, or a
  // Mamba mixer's input projection.
  const double qkv =
      std::max(static_cast<double>(m.qkv_projection_width()), m.mamba ? static_cast<double>(m.mamba->in_proj_width()) : 0.0) / tp;
  const double ffn = static_cast<double>(m.moe ? std::max(m.ffn, m.moe->expert_ffn * m.moe->top_k) : m.ffn);
  const double per_token = (h + qkv + 2.0 * ffn / tp + h) * 2.0;
  const double vocab = std::ceil(static_cast<double>(m.vocab) / tp);
  return Bytes(static_cast<double>(token_budget) * per_token + max_sequences * vocab * 4.0);
}

DraftFootprint draft_footprint(const ModelConfig& draft, int tp, ServingPrecision precision) {
  return {stage_weight_bytes(draft, InstanceShape{tp, 1}, precision.weights).front(),
          kv_bytes_per_token(draft, tp, 0, draft.layers, precision.kv_cache)};
}

double stage_bounded_share(const ModelConfig& m, int layers) {
  const double share = m.bounded_attention().share;
  if (!(share > 0) || layers <= 0) return 0;
  return std::floor(share * layers + 1e-9) / layers;  // the tolerance: 52/62 · 62 is 51.999…
}

namespace {
// The tokens of a sequence of `kv` (`q` of them computed in this step) that a stage of `layers`
// layers holds, averaged over its attention layers: all of them, less, on its windowed or chunked
// layers, those a hybrid allocator has freed — it keeps the last window (or at most a chunk) and
// the step's new tokens, whose blocks come before the old ones are freed.
double held_tokens(const ModelConfig& m, int layers, double kv, double q) {
  const double share = stage_bounded_share(m, layers);
  if (!(share > 0)) return kv;
  return (1.0 - share) * kv + share * std::min(kv, static_cast<double>(m.bounded_attention().tokens) - 1 + q);
}
}  // namespace

StepMemory step_memory(const ModelConfig& m, const GpuSpec& gpu, InstanceShape shape, const RaggedBatch& batch,
                       ServingPrecision precision, DraftFootprint draft) {
  const std::vector<int> layers = split_layers(m.layers, shape.pp);
  const std::vector<Bytes> weights = stage_weight_bytes(m, shape, precision.weights);
  const std::vector<RaggedBatch> ranks = attention_ranks(batch, shape.dp);
  StepMemory fullest;
  int first = 0;
  for (size_t s = 0; s < layers.size(); ++s) {
    StepMemory c;
    c.stage = static_cast<int>(s);
    c.memory = gpu.memory;
    c.weights = weights[s] + draft.weights;
    const Bytes per_token = kv_bytes_per_token(m, shape.tp, first, layers[s], precision.kv_cache);
    const Bytes state = mamba_state_bytes(m, shape.tp, first, layers[s]);
    // The attention rank holding the most (all of the batch without data-parallel attention);
    // a draft model keeps every token.
    for (const RaggedBatch& rank : ranks) {
      double held = 0, all = 0;
      for (const SequenceChunk& q : rank.sequences) {
        all += static_cast<double>(q.kv_len);
        held += held_tokens(m, layers[s], static_cast<double>(q.kv_len), static_cast<double>(q.q_len));
      }
      const Bytes kv = per_token * held + draft.kv_per_token * all;
      const Bytes states = state * static_cast<double>(rank.sequences.size());
      if (kv + states >= c.kv_cache + c.states) {
        c.kv_cache = kv;
        c.states = states;
      }
    }
    if (s == 0 || c.total() > fullest.total()) fullest = c;
    first += layers[s];
  }
  return fullest;
}

KvCapacity kv_capacity(const ModelConfig& m, const GpuSpec& gpu, InstanceShape shape, int64_t block_size,
                       double reserve_fraction, Bytes workspace, int max_sequences, ServingPrecision precision,
                       DraftFootprint draft) {
  const std::vector<int> layers = split_layers(m.layers, shape.pp);
  const std::vector<Bytes> weights = stage_weight_bytes(m, shape, precision.weights);
  KvCapacity best;
  best.blocks = INT64_MAX;
  for (size_t s = 0; s < layers.size(); ++s) {
    KvCapacity c;
    c.tightest_stage = static_cast<int>(s);
    c.memory = gpu.memory;
    c.reserve = Bytes(gpu.memory.value() * reserve_fraction);
    c.weights = weights[s] + draft.weights;
    c.workspace = workspace;
    const int first = std::accumulate(layers.begin(), layers.begin() + static_cast<std::ptrdiff_t>(s), 0);
    c.block_bytes = Bytes(static_cast<double>(block_size) *
                          (kv_bytes_per_token(m, shape.tp, first, layers[s], precision.kv_cache) + draft.kv_per_token).value());
    // Data-parallel attention ranks hold their own sequences: a dp-th of the slots each.
    const double rank_sequences = std::ceil(static_cast<double>(max_sequences) / shape.dp);
    c.states = mamba_state_bytes(m, shape.tp, first, layers[s]) * rank_sequences;
    const double room =
        c.memory.value() - c.reserve.value() - c.weights.value() - c.workspace.value() - c.states.value();
    if (!(c.block_bytes.value() > 0) && room > 0) continue;  // a stage of Mamba layers keeps no KV
    c.blocks = room > 0 ? static_cast<int64_t>(std::floor(room / c.block_bytes.value())) : 0;
    if (c.blocks < 1) {
      throw std::invalid_argument(m.name + " at tp=" + std::to_string(shape.tp) + ", pp=" + std::to_string(shape.pp) +
                                  " does not fit on " + gpu.name + ": stage " + std::to_string(s) + " has " +
                                  gib(c.weights) + " of weights, " + gib(c.workspace) + " of workspace and " +
                                  gib(c.states) + " of Mamba states per GPU, " +
                                  gib(Bytes(c.memory.value() - c.reserve.value())) +
                                  " usable (after the reserve), no room for one KV block");
    }
    if (c.blocks < best.blocks) best = c;
  }
  if (best.blocks == INT64_MAX) throw std::invalid_argument(m.name + " has no attention layer: a model without a KV cache is not modelled");
  best.blocks *= shape.dp;  // every attention rank its own cache
  return best;
}

}  // namespace parallax
