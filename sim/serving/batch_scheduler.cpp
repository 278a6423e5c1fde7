// Batching policies of one instance (batch_scheduler.h).
#include "serving/batch_scheduler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace parallax {

const char* to_string(BatchingPolicy p) {
  switch (p) {
    case BatchingPolicy::kChunked: return "chunked";
    case BatchingPolicy::kPrefillFirst: return "prefill_first";
    case BatchingPolicy::kStatic: return "static";
  }
  return "?";
}

std::optional<BatchingPolicy> batching_policy_from(const std::string& name) {
  if (name == "chunked" || name == "vllm" || name == "sarathi") return BatchingPolicy::kChunked;
  if (name == "prefill_first" || name == "vllm_v0") return BatchingPolicy::kPrefillFirst;
  if (name == "static") return BatchingPolicy::kStatic;
  return std::nullopt;
}

const char* to_string(PreemptionMode m) { return m == PreemptionMode::kSwap ? "swap" : "recompute"; }

std::optional<PreemptionMode> preemption_mode_from(const std::string& name) {
  if (name == "recompute") return PreemptionMode::kRecompute;
  if (name == "swap") return PreemptionMode::kSwap;
  return std::nullopt;
}

double expected_tokens_per_step(int64_t drafts, double acceptance) {
  double tokens = 1, p = 1;
  for (int64_t i = 0; i < drafts; ++i) tokens += (p *= acceptance);
  return tokens;
}

int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }

int64_t sequence_blocks(int64_t tokens, const BatchingConfig& config, int64_t new_tokens) {
  const int64_t full = blocks_for(tokens, config.block_size);
  const double s = config.bounded_kv_share;
  if (!(s > 0) || config.bounded_kv_span <= 0) return full;
  const int64_t bounded = blocks_for(std::min(tokens, config.bounded_kv_span + new_tokens), config.block_size);
  // The tolerance keeps an exact whole number of blocks from rounding up by a last-bit error.
  return static_cast<int64_t>(std::ceil((1.0 - s) * static_cast<double>(full) + s * static_cast<double>(bounded) - 1e-9));
}

RaggedBatch StepPlan::batch() const {
  RaggedBatch b;
  b.sequences.reserve(chunks.size());
  for (const PlannedChunk& c : chunks) b.sequences.push_back(SequenceChunk{c.q_len, c.kv_len, c.samples, c.drafts, c.rank});
  return b;
}

BatchScheduler::BatchScheduler(BatchingConfig config) : config_(config), cache_(config.host_cache_blocks) {
  if (config_.max_sequences < 1 || config_.token_budget < 1 || config_.block_size < 1 || config_.kv_blocks < 1) {
    throw std::invalid_argument("max_sequences, token_budget, block_size and kv_blocks must be at least 1");
  }
}

std::string BatchScheduler::never_fits(int64_t prompt, int64_t output) const {
  // With prefix caching the prompt's blocks end up in the cache, its outputs in blocks of
  // their own: ⌈P/b⌉ + ⌈(O − 1)/b⌉, one more than ⌈(P + O − 1)/b⌉ at worst.
  const int64_t need = prefix_caching_on()
                           ? blocks_for(prompt, config_.block_size) + blocks_for(output - 1, config_.block_size)
                           : sequence_blocks(prompt + output - 1, config_);
  if (need <= config_.kv_blocks) return {};
  return std::to_string(prompt) + " + " + std::to_string(output) + " tokens need " + std::to_string(need) +
         " KV blocks; the instance has " + std::to_string(config_.kv_blocks);
}

void BatchScheduler::enqueue(int64_t request, int64_t prompt, int64_t output, std::vector<uint64_t> prefix_blocks,
                             int64_t block_tokens) {
  Sequence& s = queue_new(request, prompt, output);
  // A hashed block must be a whole number of KV blocks for its KV to be shared.
  if (prefix_caching_on() && block_tokens > 0 && block_tokens % config_.block_size == 0) {
    s.prefix_blocks = std::move(prefix_blocks);
    s.block_tokens = block_tokens;
  }
}

void BatchScheduler::enqueue_prefilled(int64_t request, int64_t prompt, int64_t output) {
  Sequence& s = queue_new(request, prompt, output);
  s.generated = 1;
  s.remote = true;
}

// A fresh sequence in a free slot, at the back of the waiting queue.
BatchScheduler::Sequence& BatchScheduler::queue_new(int64_t request, int64_t prompt, int64_t output) {
  int slot = 0;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<int>(slots_.size());
    slots_.emplace_back();
  }
  Sequence& s = slots_[static_cast<size_t>(slot)];
  s = Sequence{};
  s.request = request;
  s.prompt = prompt;
  s.output = output;
  waiting_.push_back(slot);
  return s;
}

bool BatchScheduler::admit_remote(StepPlan& plan, int slot) {
  Sequence& s = slots_[static_cast<size_t>(slot)];
  if (!grow(s, s.prompt)) return false;
  waiting_.pop_front();
  receiving_[s.request] = slot;
  plan.receiving.push_back(s.request);
  return true;
}

void BatchScheduler::kv_arrived(int64_t request) {
  const auto it = receiving_.find(request);
  if (it == receiving_.end()) throw std::logic_error("kv_arrived: request " + std::to_string(request) + " is not receiving");
  Sequence& s = slots_[static_cast<size_t>(it->second)];
  s.cached = s.prompt;
  s.remote = false;
  running_.push_back(it->second);
  receiving_.erase(it);
}

void BatchScheduler::release_held(int64_t request) {
  const auto it = held_.find(request);
  if (it == held_.end()) throw std::logic_error("release_held: request " + std::to_string(request) + " is not held");
  release(slots_[static_cast<size_t>(it->second)]);
  free_slots_.push_back(it->second);
  held_.erase(it);
}

bool BatchScheduler::grow(Sequence& s, int64_t tokens) {
  const int64_t need = sequence_blocks(tokens - s.shared_tokens, config_, std::max<int64_t>(0, tokens - s.cached)) - s.blocks;
  // Evict only when eviction can make room: flushing the cache for an admission that fails
  // anyway would thrash it under memory pressure.
  if (need > free_blocks() + cache_.evictable_kv_blocks()) return false;
  if (need > free_blocks()) used_blocks_ -= cache_.evict(need - free_blocks());
  if (need > 0) {
    s.blocks += need;
    used_blocks_ += need;
  }
  return true;
}

void BatchScheduler::release(Sequence& s) {
  used_blocks_ -= s.blocks;
  s.blocks = 0;
  for (int i = 0; i < s.pinned; ++i) cache_.unpin(s.prefix_blocks[static_cast<size_t>(i)]);
  s.pinned = 0;
  s.shared_tokens = 0;
}

void BatchScheduler::settle_own_blocks(Sequence& s) {
  const int64_t own = sequence_blocks(s.cached - s.shared_tokens, config_);
  used_blocks_ += own - s.blocks;
  s.blocks = own;
}

void BatchScheduler::admit_prefix(Sequence& s) {
  s.host_from = s.host_to = 0;
  if (s.prefix_blocks.empty() || s.cached != 0) return;
  const auto id = [&](int i) { return s.prefix_blocks[static_cast<size_t>(i)]; };
  const int on_gpu = cache_.match(s.prefix_blocks);
  int m = on_gpu + cache_.host_match(s.prefix_blocks, on_gpu);
  s.matched = m;
  // At least the last known token is computed, so that the step samples from it.
  int64_t tokens = 0;
  for (int i = 0; i < m; ++i) tokens += cache_.tokens(id(i));
  while (m > 0 && tokens > known(s) - 1) tokens -= cache_.tokens(id(--m));
  const int pinned = std::min(on_gpu, m);
  for (int i = 0; i < pinned; ++i) cache_.pin(id(i));
  s.pinned = pinned;
  s.host_from = pinned;
  s.host_to = m;
  s.shared_tokens = tokens;
  s.cached = tokens;
}

void BatchScheduler::drop_host_blocks(Sequence& s) {
  int64_t pending = 0;
  for (int i = s.host_from; i < s.host_to; ++i) pending += cache_.tokens(s.prefix_blocks[static_cast<size_t>(i)]);
  s.matched -= s.host_to - s.host_from;
  s.shared_tokens -= pending;
  s.cached -= pending;
  s.host_from = s.host_to = 0;
}

bool BatchScheduler::load_from_host(Sequence& s, int64_t q, StepPlan& plan) {
  const auto id = [&](int i) { return s.prefix_blocks[static_cast<size_t>(i)]; };
  int64_t need = sequence_blocks(s.cached + q - s.shared_tokens, config_, q) - s.blocks;  // as grow will
  for (int i = s.host_from; i < s.host_to; ++i) {
    cache_.touch_host(id(i));  // so that the evictions below do not push them out first
    need += cache_.host_entry_blocks(id(i));
  }
  if (need > free_blocks() + cache_.evictable_kv_blocks()) return false;
  if (need > free_blocks()) used_blocks_ -= cache_.evict(need - free_blocks());
  // A host tier too small for the evicted and the wanted together may have let one go.
  for (int i = s.host_from; i < s.host_to; ++i) {
    if (!cache_.in_host(id(i))) return false;
  }
  for (int i = s.host_from; i < s.host_to; ++i) {
    const int64_t blocks = cache_.promote(id(i));
    used_blocks_ += blocks;
    plan.host_loaded_blocks += blocks;
  }
  s.host_matched = s.host_to - s.host_from;
  s.pinned = s.host_to;
  s.host_from = s.host_to = 0;
  return true;
}

void BatchScheduler::publish_prefix(Sequence& s) {
  if (s.published || s.prefix_blocks.empty() || s.cached < s.prompt) return;
  s.published = true;
  // The blocks past the ones it shares, in order: each either joins the cache (its KV moves
  // from the sequence to the cache) or is already there (made meanwhile by another sequence:
  // the sequence's copy is dropped and the cached one used).
  for (size_t j = static_cast<size_t>(s.pinned); j < s.prefix_blocks.size(); ++j) {
    const int64_t tokens = std::min(s.block_tokens, s.prompt - static_cast<int64_t>(j) * s.block_tokens);
    if (tokens <= 0) break;
    const uint64_t id = s.prefix_blocks[j];
    if (cache_.contains(id)) {
      cache_.pin(id);
    } else {
      const int64_t blocks = blocks_for(tokens, config_.block_size);
      cache_.insert_pinned(id, tokens, blocks);
      used_blocks_ += blocks;
    }
    ++s.pinned;
    s.shared_tokens += tokens;
  }
  settle_own_blocks(s);
}

void BatchScheduler::preempt(int slot, StepPlan& plan) {
  Sequence& s = slots_[static_cast<size_t>(slot)];
  plan.preempted.push_back(s.request);
  // Swapped, it keeps every cached token, the shared prefix's too, in blocks of its own.
  const int64_t blocks = sequence_blocks(s.cached, config_);
  const bool swap = config_.preemption == PreemptionMode::kSwap && s.cached > 0 &&
                    host_blocks_ + blocks <= config_.swap_blocks;
  release(s);
  if (swap) {
    s.swapped = blocks;
    host_blocks_ += blocks;
    plan.swapped_out_blocks += blocks;
    ++plan.swaps;
  } else {
    s.cached = 0;
  }
  running_.erase(std::find(running_.begin(), running_.end(), slot));
  waiting_.push_front(slot);
}

int BatchScheduler::preemption_victim() const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (!slots_[static_cast<size_t>(*it)].in_flight) return *it;
  }
  return -1;
}

void BatchScheduler::add_chunk(StepPlan& plan, int slot, int64_t q, int64_t drafts) {
  Sequence& s = slots_[static_cast<size_t>(slot)];
  plan.chunks.push_back(PlannedChunk{slot, s.request, q, s.cached + q, s.cached + q - drafts == known(s), drafts});
  s.in_flight = true;
  ++in_flight_;
}

int64_t BatchScheduler::drafts_for(const Sequence& s, int64_t budget) const {
  if (config_.speculative_tokens <= 0 || s.generated < 1 || known(s) - s.cached != 1) return 0;
  // No guess past the last output token, nor beyond the budget.
  const int64_t d =
      std::min({static_cast<int64_t>(config_.speculative_tokens), s.output - s.generated - 1, budget - 1});
  return std::max<int64_t>(d, 0);
}

int64_t BatchScheduler::accepted(Sequence& s, int64_t drafts) const {
  s.accepted_credit += expected_tokens_per_step(drafts, config_.acceptance) - 1;
  const auto n = std::min(drafts, static_cast<int64_t>(std::floor(s.accepted_credit + 1e-9)));
  s.accepted_credit -= static_cast<double>(n);
  return n;
}

// Running sequences in admission order; a block shortage preempts from the back. Returns
// whether anything was preempted.
bool BatchScheduler::schedule_running(StepPlan& plan, int64_t& budget, bool decode_only) {
  bool preempted = false;
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    const int slot = running_[i];
    Sequence& s = slots_[static_cast<size_t>(slot)];
    const int64_t pending = known(s) - s.cached;
    if (s.in_flight || (decode_only && pending != 1)) {
      ++i;
      continue;
    }
    const int64_t drafts = drafts_for(s, budget);
    const int64_t q = std::min(pending, budget) + drafts;
    bool evicted_self = false;
    bool stuck = false;
    while (!grow(s, s.cached + q)) {
      const int victim = preemption_victim();
      if (victim < 0) {  // every other sequence is in a step in flight: wait for them
        stuck = true;
        break;
      }
      preempted = true;
      preempt(victim, plan);
      if (victim == slot) {
        evicted_self = true;
        break;
      }
    }
    if (evicted_self) continue;  // running_[i] is now the next sequence, or past the end
    if (stuck) {
      ++i;
      continue;
    }
    add_chunk(plan, slot, q, drafts);
    budget -= q;
    ++i;
  }
  return preempted;
}

// Admits the front waiting sequence if it fits: a prefilled one when its blocks are free; a
// prompt with what the budget allows, or (`whole`) all of it, the first even beyond the
// budget. False when it does not fit: admission stops there.
bool BatchScheduler::admit_front(StepPlan& plan, int64_t& budget, bool whole) {
  const int slot = waiting_.front();
  Sequence& s = slots_[static_cast<size_t>(slot)];
  if (s.remote) return admit_remote(plan, slot);
  admit_prefix(s);
  const auto chunk = [&] {
    const int64_t pending = known(s) - s.cached;
    return whole ? pending : std::min(pending, budget);
  };
  const auto over_budget = [&](int64_t q) { return whole && q > budget && !plan.chunks.empty(); };
  int64_t q = chunk();
  if (s.host_to > s.host_from && !over_budget(q) && !load_from_host(s, q, plan)) {
    drop_host_blocks(s);
    q = chunk();
  }
  if (over_budget(q) || !grow(s, s.cached + q)) {
    if (s.swapped > 0) return false;  // its KV waits on the host
    s.host_from = s.host_to = 0;
    release(s);  // its pins go back until it can run
    s.cached = 0;
    return false;
  }
  if (s.swapped > 0) {
    plan.swapped_in_blocks += s.swapped;
    host_blocks_ -= s.swapped;
    s.swapped = 0;
  }
  if (!s.prefix_blocks.empty() && !s.admitted_before) {
    s.admitted_before = true;
    plan.hits.push_back(
        PrefixHit{s.request, s.matched, static_cast<int>(s.prefix_blocks.size()), s.shared_tokens, s.host_matched});
  }
  waiting_.pop_front();
  running_.push_back(slot);
  add_chunk(plan, slot, q);
  budget -= q;
  return true;
}

void BatchScheduler::plan_chunked(StepPlan& plan) {
  int64_t budget = config_.token_budget;
  if (schedule_running(plan, budget, false)) return;
  while (!waiting_.empty() && budget > 0 && occupied() < config_.max_sequences) {
    if (!admit_front(plan, budget, false)) break;
  }
}

void BatchScheduler::plan_prefill_first(StepPlan& plan) {
  int64_t budget = config_.token_budget;
  while (!waiting_.empty() && occupied() < config_.max_sequences) {
    if (!admit_front(plan, budget, true)) break;
  }
  if (!plan.chunks.empty()) return;
  int64_t unlimited = INT64_MAX;
  schedule_running(plan, unlimited, true);
}

void BatchScheduler::plan_static(StepPlan& plan) {
  if (running_.empty()) {
    while (!waiting_.empty() && static_cast<int>(running_.size()) < config_.max_sequences) {
      const int slot = waiting_.front();
      Sequence& s = slots_[static_cast<size_t>(slot)];
      if (!grow(s, s.prompt + s.output - 1)) break;  // the whole life reserved: no preemption
      waiting_.pop_front();
      running_.push_back(slot);
    }
  }
  for (const int slot : running_) {
    const Sequence& s = slots_[static_cast<size_t>(slot)];
    if (!s.in_flight) add_chunk(plan, slot, known(s) - s.cached);
  }
}

StepPlan BatchScheduler::plan() {
  StepPlan p;
  switch (config_.policy) {
    case BatchingPolicy::kChunked: plan_chunked(p); break;
    case BatchingPolicy::kPrefillFirst: plan_prefill_first(p); break;
    case BatchingPolicy::kStatic: plan_static(p); break;
  }
  return p;
}

StepOutcome BatchScheduler::complete(const StepPlan& plan) {
  StepOutcome out;
  for (const PlannedChunk& c : plan.chunks) {
    Sequence& s = slots_[static_cast<size_t>(c.sequence)];
    s.in_flight = false;
    --in_flight_;
    // Speculating, the last known token and the accepted drafts keep their KV, the rest is dropped.
    const int64_t extra = c.drafts > 0 ? accepted(s, c.drafts) : 0;
    s.cached += c.q_len - c.drafts + extra;
    // The dropped drafts' blocks, and under a hybrid allocator those that left the window, freed
    // (static batching keeps the whole life it reserved).
    if (c.drafts > 0 || (config_.bounded_kv_share > 0 && config_.policy != BatchingPolicy::kStatic)) settle_own_blocks(s);
    publish_prefix(s);
    if (!c.samples) continue;
    const int64_t produced = std::min(1 + extra, s.output - s.generated);
    s.generated += produced;
    out.sampled.push_back(s.request);
    out.produced.push_back(static_cast<int>(produced));
    if (s.generated == produced) out.first_token.push_back(s.request);
    if (s.generated == s.output) {
      out.finished.push_back(s.request);
      running_.erase(std::find(running_.begin(), running_.end(), c.sequence));
      if (config_.hold_finished) {
        held_[s.request] = c.sequence;  // its KV is still to be sent
      } else {
        release(s);
        free_slots_.push_back(c.sequence);
      }
    }
  }
  return out;
}

}  // namespace parallax
