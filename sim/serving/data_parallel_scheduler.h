// An instance with data-parallel attention schedules each rank on its own, as SGLang's and
// vLLM's data-parallel ranks do: every rank has its own scheduler with a rank's share of the
// instance's sequence cap, token budget and KV blocks (its prefix cache too), a request is
// dispatched to a rank when it arrives (round robin, SGLang's default load_balance_method, or
// to the rank holding the fewest sequences: BatchingConfig::dp_dispatch) and stays there, and a step gathers every rank's batch, each chunk tagged with its rank so that
// the step model runs it there (SequenceChunk::rank). A rank can thus run out of KV blocks, or
// hold the longest sequences, while the others have room: the ranks step together at the pace of
// the slowest.
#pragma once

#include <unordered_map>
#include <vector>

#include "serving/batch_scheduler.h"

namespace parallax {

class DataParallelScheduler final : public InstanceScheduler {
 public:
  /// `ranks` ≥ 2 schedulers, each with ⌈cap / ranks⌉ sequences, ⌈budget / ranks⌉ tokens a step
  /// and ⌊blocks / ranks⌋ KV blocks of the instance's `batching` (whose swap space and host cache
  /// are per GPU: each rank keeps them whole). Throws std::invalid_argument when a rank gets no
  /// block.
  DataParallelScheduler(const BatchingConfig& batching, int ranks);

  std::string never_fits(int64_t prompt, int64_t output) const override;
  void enqueue(int64_t request, int64_t prompt, int64_t output, std::vector<uint64_t> prefix_blocks,
               int64_t block_tokens) override;
  void enqueue_prefilled(int64_t request, int64_t prompt, int64_t output) override;
  void kv_arrived(int64_t request) override;
  void release_held(int64_t request) override;
  StepPlan plan() override;
  StepOutcome complete(const StepPlan& plan) override;
  size_t waiting() const override;
  int64_t used_blocks() const override;
  int64_t evictable_blocks() const override;
  int64_t kv_blocks() const override;

  /// The rank a request was dispatched to (it must be here).
  int rank_of(int64_t request) const override;

 private:
  int dispatch(int64_t request);  ///< the next rank in turn, remembered for the request

  std::vector<BatchScheduler> ranks_;
  std::unordered_map<int64_t, int> rank_;  ///< request → rank, while the instance holds it
  int next_ = 0;
  DpDispatch dispatch_ = DpDispatch::kRoundRobin;
  bool hold_finished_ = false;
};

}  // namespace parallax
