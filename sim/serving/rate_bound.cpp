// Rate bounds of serving instances (rate_bound.h).
#include "serving/rate_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "serving/random.h"

namespace parallax {
namespace {

// The time after which the instance's first stage takes its next batch (ModelStepTimer's).
double interval_s(const StepModel& model, const RaggedBatch& batch) {
  const StepBreakdown b = model.step(batch);
  return (model.shape().pp > 1 ? b.bottleneck_stage + b.overhead : b.total).seconds();
}

}  // namespace

void apply_hybrid_kv_allocator(const ModelConfig& m, const PoolConfig& pool, BatchingConfig& batching) {
  batching.bounded_kv_share = 0;
  batching.bounded_kv_span = 0;
  if (!pool.hybrid_kv_allocator || batching.prefix_caching) return;
  const ModelConfig::BoundedAttention bounded = m.bounded_attention();
  if (!(bounded.share > 0)) return;
  // A window straddles one block more than its tokens fill; a chunk starts at a multiple of its
  // size, so only where b does not divide it.
  const int64_t b = batching.block_size;
  const bool straddles = m.sliding_window > 0 || bounded.tokens % b != 0;
  const int64_t span = bounded.tokens + (straddles ? b - 1 : 0);
  // The stage with the fewest windowed layers for its size holds the most blocks a token.
  const std::vector<int> layers = split_layers(m.layers, pool.shape.pp);
  double least = 1;
  for (const int l : layers) least = std::min(least, stage_bounded_share(m, l));
  if (pool.step.draft_model) {
    const double target = kv_bytes_per_token(m, pool.shape.tp, 0, layers.front(), pool.step.kv_cache_dtype).value();
    const double draft = draft_footprint(*pool.step.draft_model, pool.shape.tp, precision_of(pool)).kv_per_token.value();
    least *= target / (target + draft);
  }
  if (!(least > 0)) return;
  batching.bounded_kv_share = least;
  batching.bounded_kv_span = span;
}

BatchingConfig instance_batching(const PoolConfig& pool) {
  BatchingConfig b = pool.batching;
  const int dp = pool.shape.dp;
  if (dp > 1) {
    // Each rank schedules a share rounded up: together they may take a little more.
    b.max_sequences = dp * ((b.max_sequences + dp - 1) / dp);
    b.token_budget = dp * ((b.token_budget + dp - 1) / dp);
  }
  return b;
}

double instance_rate_bound(const FleetConfig& config, const PoolConfig& pool, const TrafficMeans& means) {
  const StepModel model(config.model, pool_topology(config, pool), pool.shape, pool.step, 0);
  BatchingConfig b = instance_batching(pool);
  apply_hybrid_kv_allocator(config.model, pool, b);
  const int64_t kv = pool.batching.kv_blocks > 0 ? pool.batching.kv_blocks : pool_kv_capacity(config, pool).blocks;
  if (pool.role == PoolRole::kPrefill) return prefill_rate_bound(model, b, means);
  const double decode = decode_rate_bound(model, b, kv, means, config.slo_tpot);
  return pool.role == PoolRole::kDecode ? decode : std::min(prefill_rate_bound(model, b, means), decode);
}

double requests_per_load_unit(const FleetConfig& config) {
  if (!config.replay || config.replay->size() < 2) return 1.0;
  const double span = (config.replay->back().arrival - config.replay->front().arrival).seconds();
  return span > 0 ? static_cast<double>(config.replay->size() - 1) / span : 1.0;
}

TrafficMeans traffic_means(const FleetConfig& config) {
  std::vector<Request> sample;
  Rng rng(config.seed);
  if (config.replay) {
    sample = *config.replay;
  } else if (config.traffic.arrival == TrafficSpec::Arrival::kClosedLoop) {
    for (int64_t i = 0; i < config.traffic.requests; ++i) {
      sample.push_back(closed_loop_request(config.traffic, rng, i, Time::zero(), static_cast<uint64_t>(i)));
    }
  } else {
    sample = open_loop_requests(config.traffic, rng);
  }
  double prompt = 0, decode = 0, weighted_context = 0;
  for (const Request& r : sample) {
    const auto p = static_cast<double>(r.prompt_tokens);
    const auto d = static_cast<double>(r.output_tokens - 1);
    prompt += p;
    decode += d;
    weighted_context += p * d + d * d / 2;
  }
  const auto n = static_cast<double>(std::max<size_t>(1, sample.size()));
  TrafficMeans m{prompt / n, decode / n, 0.0};
  m.decode_context = decode > 0 ? weighted_context / decode : m.prompt;
  return m;
}

double prefill_rate_bound(const StepModel& model, const BatchingConfig& batching, const TrafficMeans& means) {
  if (batching.prefix_caching) return std::numeric_limits<double>::infinity();
  const int64_t budget = batching.token_budget;
  // With data-parallel attention a sequence runs on one rank, whose share of the budget caps its chunk.
  const int dp = model.shape().dp;
  const int64_t prompt = std::max<int64_t>(1, std::llround(means.prompt));
  const int64_t chunk = std::min(prompt, (budget + dp - 1) / dp);
  RaggedBatch batch;
  int64_t tokens = 0;
  while (tokens + chunk <= budget && static_cast<int>(batch.sequences.size()) < batching.max_sequences) {
    batch.sequences.push_back(SequenceChunk{chunk, chunk, chunk == prompt, 0});
    tokens += chunk;
  }
  return static_cast<double>(tokens) / interval_s(model, batch) / means.prompt;
}

double decode_rate_bound(const StepModel& model, const BatchingConfig& batching, int64_t kv_blocks,
                         const TrafficMeans& means, Time slo_tpot) {
  if (!(means.decode > 0)) return std::numeric_limits<double>::infinity();
  // The scheduler trims the drafts to what the budget leaves (drafts_for).
  const int64_t drafts = std::min<int64_t>(batching.speculative_tokens, std::max<int64_t>(0, batching.token_budget - 1));
  const double tokens_per_step = expected_tokens_per_step(drafts, batching.acceptance);
  const int64_t context = std::max<int64_t>(1, std::llround(means.decode_context)) + 1 + drafts;
  const int pp = model.shape().pp;
  // Up to pp batches are in flight, each sequence in one of them: they share the KV blocks. Under
  // a hybrid allocator a sequence's blocks are concave in its context, so at the mean context
  // they would be more than the mean; the unbounded layers' part alone, (1 − s)·context/b, is
  // less, and keeps this an upper bound.
  const double per_sequence = batching.bounded_kv_share > 0
                                  ? std::max(1.0, (1.0 - batching.bounded_kv_share) * static_cast<double>(context) /
                                                      static_cast<double>(batching.block_size))
                                  : static_cast<double>(blocks_for(context, batching.block_size));
  const int64_t most = std::min({static_cast<int64_t>(batching.max_sequences), batching.token_budget / (1 + drafts),
                                 static_cast<int64_t>(static_cast<double>(kv_blocks) / per_sequence) / pp});
  if (most < 1) return 0;
  const auto interval = [&](int64_t b) {
    RaggedBatch batch;
    batch.sequences.assign(static_cast<size_t>(b), SequenceChunk{1 + drafts, context, true, drafts});
    return interval_s(model, batch);
  };
  // A sequence steps once every pp intervals (its batch's turn).
  const auto tpot = [&](int64_t b) { return pp * interval(b) / tokens_per_step; };
  int64_t b = most;
  if (slo_tpot > Time::zero() && tpot(most) > slo_tpot.seconds()) {
    if (tpot(1) > slo_tpot.seconds()) return 0;
    int64_t low = 1, high = most;  // tpot(low) meets it, tpot(high) does not
    while (high - low > 1) {
      const int64_t mid = (low + high) / 2;
      (tpot(mid) <= slo_tpot.seconds() ? low : high) = mid;
    }
    b = low;
  }
  return static_cast<double>(b) * tokens_per_step / interval(b) / means.decode;
}

}  // namespace parallax
