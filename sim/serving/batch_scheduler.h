// One instance's batching: which sequences run in its next engine step and how many tokens
// each, with their KV-cache blocks, as the real engines decide it.
//
// A sequence knows P + G tokens (its prompt and the G outputs sampled so far) and holds the KV
// of `cached` of them. A step gives it q = min(known − cached, what the budget leaves) new
// tokens against cached + q keys; when that reaches every known token the step samples its next
// output (G + 1). So a fresh prompt is prefilled in one or more chunks, its last chunk samples
// the first token, and each decode step feeds the last sampled token (q = 1) and samples the
// next; a request of O outputs holds P + O − 1 tokens at the end. A sequence preempted by
// recompute loses its cache and later re-prefills all P + G known tokens (vLLM's recompute).
// Preempted by swap (vLLM v0's swap mode), its KV moves to host memory while host swap space
// lasts (recompute otherwise); it keeps its tokens and, re-admitted, gets its blocks back and
// its KV copied in. The plan counts the blocks copied each way, for the step's PCIe time.
//
// Policies (../shared/reference/serving.md §1.3):
// - chunked (vLLM V1's scheduler; Sarathi-Serve's stall-free batching with a small budget):
//   every step, running sequences first in admission order (decodes take 1 token, partial
//   prefills what the budget leaves), then waiting ones FIFO while the budget, the sequence cap
//   and the free blocks allow; a running sequence that cannot get a block preempts the most
//   recently admitted running one (itself, if it is that one); no admission in a step that
//   preempted.
// - prefill_first (vLLM v0): if any waiting prompt can be admitted (its whole prompt within the
//   budget, the first always, and its blocks free), the step is prefill-only, FIFO; otherwise
//   a decode step of every running sequence, preempting as above.
// - static (request-level batching, FasterTransformer): when nothing runs, up to the cap of
//   waiting requests are admitted with blocks for their whole life (P + O − 1 tokens), run
//   until the last of them finishes, and only then the next batch.
//
// Several steps in flight (a pipeline-parallel instance keeps up to pp batches in its stages,
// vLLM's virtual engines): a plan takes only sequences that are not in a step planned and not
// yet completed, and never preempts one that is; complete() may come for the plans in the
// order they were made.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/layer_operators.h"
#include "serving/prefix_cache.h"

namespace parallax {

enum class BatchingPolicy : uint8_t { kChunked, kPrefillFirst, kStatic };
/// How an instance with data-parallel attention ranks dispatches a new request (SGLang's
/// load_balance_method): in turn, or to the rank holding the fewest sequences (waiting and
/// running; the lowest index among equals).
enum class DpDispatch : uint8_t { kRoundRobin, kShortestQueue };
enum class PreemptionMode : uint8_t { kRecompute, kSwap };
const char* to_string(PreemptionMode m);
std::optional<PreemptionMode> preemption_mode_from(const std::string& name);
const char* to_string(BatchingPolicy p);
std::optional<BatchingPolicy> batching_policy_from(const std::string& name);

struct BatchingConfig {
  BatchingPolicy policy = BatchingPolicy::kChunked;
  int max_sequences = 256;      ///< sequences per step (vLLM max_num_seqs)
  int64_t token_budget = 8192;  ///< new tokens per step (vLLM max_num_batched_tokens)
  /// Speculative decoding: each decoding sequence verifies up to this many draft tokens a step
  /// (0: none), each accepted with probability `acceptance` given the ones before it, so a step
  /// yields 1 + Σ_{i≤d} acceptance^i tokens on average (Leviathan et al. 2023), counted out
  /// deterministically per sequence; the rejected drafts' KV is dropped.
  int speculative_tokens = 0;
  double acceptance = 0;
  int64_t block_size = 16;      ///< tokens per KV block
  int64_t kv_blocks = 0;        ///< the instance's KV capacity in blocks (> 0)
  /// Keep finished prompts' blocks for reuse by later prompts with the same leading blocks
  /// (prefix_cache.h); only requests that carry prefix block hashes can hit.
  bool prefix_caching = false;
  /// Prefix caching's host-memory tier, in KV blocks (0: none; prefix_cache.h): evicted cache
  /// entries move there and are copied back, not recomputed, by a later prompt that starts
  /// with them (StepPlan::host_loaded_blocks).
  int64_t host_cache_blocks = 0;
  /// A prefill instance of a disaggregated fleet: a finished sequence keeps its blocks until
  /// release_held (its KV is still being sent to a decode instance).
  bool hold_finished = false;
  PreemptionMode preemption = PreemptionMode::kRecompute;
  DpDispatch dp_dispatch = DpDispatch::kRoundRobin;  ///< data-parallel attention ranks only
  int64_t swap_blocks = 0;  ///< host swap space, in blocks (swap mode)
  /// An engine's hybrid KV-cache allocator (vLLM's hybrid KV-cache manager, SGLang's
  /// sliding-window pool): on the share `bounded_kv_share` of a token's KV bytes — its windowed or
  /// chunked attention layers' — a sequence holds only the blocks that its last
  /// `bounded_kv_span` tokens straddle (a window of w: w + b − 1), the older ones freed as the
  /// window slides (sequence_blocks). 0: every layer holds every token.
  double bounded_kv_share = 0;
  int64_t bounded_kv_span = 0;
};

/// The tokens a speculating sequence gets from a step verifying `drafts` drafts, each accepted
/// with probability `acceptance` given the ones before it: 1 + a + … + a^drafts on average.
double expected_tokens_per_step(int64_t drafts, double acceptance);

/// ⌈tokens / block_size⌉.
int64_t blocks_for(int64_t tokens, int64_t block_size);
/// The blocks a sequence of `tokens` holds of its own: ⌈tokens / b⌉, or under a hybrid allocator
/// (BatchingConfig::bounded_kv_share s and bounded_kv_span w) ⌈(1 − s)·⌈tokens / b⌉ +
/// s·⌈min(tokens, w + new_tokens) / b⌉⌉, in blocks of every layer's bytes: during a step the
/// `new_tokens` it computes get blocks on the windowed layers before the old ones are freed.
int64_t sequence_blocks(int64_t tokens, const BatchingConfig& config, int64_t new_tokens = 0);

/// One sequence's share of a step.
struct PlannedChunk {
  int sequence = 0;  ///< the scheduler's slot
  int64_t request = 0;
  int64_t q_len = 0;
  int64_t kv_len = 0;
  bool samples = false;
  int64_t drafts = 0;  ///< draft tokens verified (speculative decoding)
  int rank = -1;       ///< data-parallel attention: the rank that planned it (−1: one scheduler)
};

/// A request's first admission with prefix caching: its leading blocks found in the cache.
struct PrefixHit {
  int64_t request = 0;
  int matched_blocks = 0;     ///< leading blocks the cache held
  int total_blocks = 0;       ///< blocks its prompt has hashes for
  int64_t skipped_tokens = 0; ///< prefill tokens saved (whole cached blocks short of the last token)
  int host_blocks = 0;        ///< of the matched, those copied back from the host tier
};

struct StepPlan {
  std::vector<PlannedChunk> chunks;
  std::vector<int64_t> preempted;  ///< requests preempted while forming it
  std::vector<PrefixHit> hits;     ///< requests admitted for the first time, with prefix caching
  /// Requests prefilled elsewhere whose blocks were just allocated here: their KV can now be
  /// sent (kv_arrived makes them runnable).
  std::vector<int64_t> receiving;
  int64_t swapped_out_blocks = 0;  ///< copied to host by the preemptions while forming it
  int64_t swapped_in_blocks = 0;   ///< copied back for swapped sequences it re-admits
  int64_t host_loaded_blocks = 0;  ///< prefix-cache blocks copied back from the host tier
  int swaps = 0;                   ///< preemptions that swapped (the others recompute)
  /// Data-parallel attention: each rank's own plan, whose chunks the ones above gather.
  std::vector<StepPlan> parts;
  bool empty() const { return chunks.empty(); }
  RaggedBatch batch() const;
};

/// What a finished step produced, by request.
struct StepOutcome {
  std::vector<int64_t> sampled;     ///< requests that sampled a token in this step
  std::vector<int64_t> produced;    ///< … and how many tokens each got (more than 1 speculating)
  std::vector<int64_t> first_token;  ///< … of which their first
  std::vector<int64_t> finished;    ///< … of which their last (their blocks are freed)
};

/// What the fleet asks of an instance's scheduling: one BatchScheduler, or one per
/// data-parallel attention rank (data_parallel_scheduler.h).
class InstanceScheduler {
 public:
  virtual ~InstanceScheduler() = default;
  /// Why the request can never run here (its whole life does not fit the KV cache), or empty.
  virtual std::string never_fits(int64_t prompt, int64_t output) const = 0;
  /// Queues a request (never_fits must be empty); `prefix_blocks` are its prompt's
  /// prefix-chained block hashes of `block_tokens` tokens each (none: it cannot hit).
  virtual void enqueue(int64_t request, int64_t prompt, int64_t output, std::vector<uint64_t> prefix_blocks,
                       int64_t block_tokens) = 0;
  /// Queues a request whose prompt was prefilled on another instance, with its first token
  /// sampled there: once blocks for its prompt are free here it is admitted and reported in
  /// StepPlan::receiving, and it decodes once kv_arrived says its KV has landed.
  virtual void enqueue_prefilled(int64_t request, int64_t prompt, int64_t output) = 0;
  virtual void kv_arrived(int64_t request) = 0;
  /// Frees a finished sequence's blocks kept by hold_finished.
  virtual void release_held(int64_t request) = 0;
  /// The next step's batch; empty when there is nothing to run.
  virtual StepPlan plan() = 0;
  /// Applies the step `plan` described, once it has run.
  virtual StepOutcome complete(const StepPlan& plan) = 0;
  virtual size_t waiting() const = 0;
  virtual int64_t used_blocks() const = 0;
  /// Cached prefix blocks no running sequence uses (free as far as admission goes).
  virtual int64_t evictable_blocks() const = 0;
  virtual int64_t kv_blocks() const = 0;
  /// The data-parallel attention rank holding a request it holds (0 without ranks).
  virtual int rank_of(int64_t request) const = 0;
};

class BatchScheduler final : public InstanceScheduler {
 public:
  /// Throws std::invalid_argument for a cap, budget, block size or capacity below 1.
  explicit BatchScheduler(BatchingConfig config);

  std::string never_fits(int64_t prompt, int64_t output) const override;
  void enqueue(int64_t request, int64_t prompt, int64_t output, std::vector<uint64_t> prefix_blocks,
               int64_t block_tokens) override;
  void enqueue(int64_t request, int64_t prompt, int64_t output) { enqueue(request, prompt, output, {}, 0); }
  void enqueue_prefilled(int64_t request, int64_t prompt, int64_t output) override;
  void kv_arrived(int64_t request) override;
  void release_held(int64_t request) override;
  StepPlan plan() override;
  StepOutcome complete(const StepPlan& plan) override;

  size_t waiting() const override { return waiting_.size(); }
  size_t running() const { return running_.size(); }
  /// Sequences in planned steps not yet completed.
  size_t in_flight() const { return in_flight_; }
  size_t receiving() const { return receiving_.size(); }
  int64_t used_blocks() const override { return used_blocks_; }
  int64_t swapped_blocks() const { return host_blocks_; }
  int64_t evictable_blocks() const override { return cache_.evictable_kv_blocks(); }
  int64_t kv_blocks() const override { return config_.kv_blocks; }
  int rank_of(int64_t) const override { return 0; }
  const BatchingConfig& config() const { return config_; }

 private:
  struct Sequence {
    int64_t request = 0;
    int64_t prompt = 0;
    int64_t output = 0;
    int64_t generated = 0;  ///< G
    int64_t cached = 0;     ///< tokens with KV, shared prefix blocks included
    int64_t blocks = 0;     ///< KV blocks of its own (not the shared prefix's)
    std::vector<uint64_t> prefix_blocks;
    int64_t block_tokens = 0;
    int pinned = 0;             ///< leading prefix blocks it uses from the cache
    int matched = 0;            ///< leading blocks the cache held at its last admission try
    int host_matched = 0;       ///< … of them copied back from the host tier
    int host_from = 0, host_to = 0;  ///< prefix blocks [from, to) to copy back once it is admitted
    int64_t shared_tokens = 0;  ///< their tokens
    bool admitted_before = false;
    bool published = false;     ///< its prompt's blocks are in the cache
    bool remote = false;        ///< prefilled elsewhere, its KV not yet here
    bool in_flight = false;     ///< in a planned step not yet completed
    int64_t swapped = 0;        ///< host blocks holding its KV (0: not swapped out)
    double accepted_credit = 0;  ///< expected accepted drafts not yet counted out
  };

  int64_t known(const Sequence& s) const { return s.prompt + s.generated; }
  int64_t free_blocks() const { return config_.kv_blocks - used_blocks_; }
  int occupied() const { return static_cast<int>(running_.size() + receiving_.size()); }
  bool prefix_caching_on() const { return config_.prefix_caching && config_.policy != BatchingPolicy::kStatic; }
  bool grow(Sequence& s, int64_t tokens);  ///< blocks for `tokens` cached; false if not free
  void preempt(int slot, StepPlan& plan);
  int preemption_victim() const;  ///< the last running sequence not in flight, or −1
  void plan_chunked(StepPlan& plan);
  void plan_prefill_first(StepPlan& plan);
  void plan_static(StepPlan& plan);
  bool schedule_running(StepPlan& plan, int64_t& budget, bool decode_only);
  void add_chunk(StepPlan& plan, int slot, int64_t q, int64_t drafts = 0);
  /// Draft tokens a decoding sequence verifies this step, within `budget`.
  int64_t drafts_for(const Sequence& s, int64_t budget) const;
  /// Of `drafts` verified, how many are accepted: the expected count, counted out per sequence.
  int64_t accepted(Sequence& s, int64_t drafts) const;
  /// A waiting sequence's cache hits: the GPU's pinned, the host tier's that follow them counted
  /// as if copied back (Sequence::host_from/to), which load_from_host does on admission.
  void admit_prefix(Sequence& s);
  /// Copies the sequence's pending host blocks back when the GPU has room for them and for its
  /// next `q` tokens; false (nothing copied) when it has not.
  bool load_from_host(Sequence& s, int64_t q, StepPlan& plan);
  /// Forgets the pending host blocks: the sequence computes them.
  void drop_host_blocks(Sequence& s);
  void publish_prefix(Sequence& s);                ///< its finished prompt into the cache
  void release(Sequence& s);                       ///< its own blocks and its pins
  void settle_own_blocks(Sequence& s);
  Sequence& queue_new(int64_t request, int64_t prompt, int64_t output);
  bool admit_remote(StepPlan& plan, int slot);  ///< a waiting prefilled sequence's blocks
  bool admit_front(StepPlan& plan, int64_t& budget, bool whole);

  BatchingConfig config_;
  std::vector<Sequence> slots_;
  std::vector<int> free_slots_;
  std::deque<int> waiting_;
  std::vector<int> running_;  ///< admission order
  int64_t used_blocks_ = 0;   ///< sequences' own blocks and the prefix cache's
  size_t in_flight_ = 0;
  int64_t host_blocks_ = 0;   ///< swap space in use
  PrefixCache cache_;
  std::unordered_map<int64_t, int> receiving_;  ///< request → slot, KV in flight to here
  std::unordered_map<int64_t, int> held_;       ///< request → slot, finished, blocks kept
};

}  // namespace parallax
