// One scheduler per data-parallel attention rank (data_parallel_scheduler.h).
#include "serving/data_parallel_scheduler.h"

#include <stdexcept>
#include <string>

namespace parallax {
namespace {

int64_t share_up(int64_t total, int ranks) { return (total + ranks - 1) / ranks; }

void append(std::vector<int64_t>& to, const std::vector<int64_t>& from) { to.insert(to.end(), from.begin(), from.end()); }

}  // namespace

DataParallelScheduler::DataParallelScheduler(const BatchingConfig& batching, int ranks)
    : dispatch_(batching.dp_dispatch), hold_finished_(batching.hold_finished) {
  if (ranks < 2) throw std::invalid_argument("a data-parallel scheduler needs at least 2 ranks");
  BatchingConfig rank = batching;
  rank.max_sequences = static_cast<int>(share_up(batching.max_sequences, ranks));
  rank.token_budget = share_up(batching.token_budget, ranks);
  rank.kv_blocks = batching.kv_blocks / ranks;  // the instance's blocks are its ranks' together
  // Swap space and the host tier are per GPU: every rank's GPUs have their own.
  if (rank.kv_blocks < 1) {
    throw std::invalid_argument(std::to_string(batching.kv_blocks) + " KV blocks leave none to each of " +
                                std::to_string(ranks) + " data-parallel ranks");
  }
  ranks_.assign(static_cast<size_t>(ranks), BatchScheduler(rank));
}

std::string DataParallelScheduler::never_fits(int64_t prompt, int64_t output) const {
  std::string why = ranks_.front().never_fits(prompt, output);
  return why.empty() ? why : why + " (a data-parallel rank's share)";
}

int DataParallelScheduler::dispatch(int64_t request) {
  int r = next_;
  if (dispatch_ == DpDispatch::kShortestQueue) {
    const auto held = [&](size_t i) { return ranks_[i].waiting() + ranks_[i].running() + ranks_[i].receiving(); };
    r = 0;
    for (size_t i = 1; i < ranks_.size(); ++i) {
      if (held(i) < held(static_cast<size_t>(r))) r = static_cast<int>(i);
    }
  }
  next_ = (r + 1) % static_cast<int>(ranks_.size());
  rank_[request] = r;
  return r;
}

int DataParallelScheduler::rank_of(int64_t request) const {
  const auto it = rank_.find(request);
  if (it == rank_.end()) throw std::logic_error("request " + std::to_string(request) + " is on no rank here");
  return it->second;
}

void DataParallelScheduler::enqueue(int64_t request, int64_t prompt, int64_t output, std::vector<uint64_t> prefix_blocks,
                                    int64_t block_tokens) {
  ranks_[static_cast<size_t>(dispatch(request))].enqueue(request, prompt, output, std::move(prefix_blocks), block_tokens);
}

void DataParallelScheduler::enqueue_prefilled(int64_t request, int64_t prompt, int64_t output) {
  ranks_[static_cast<size_t>(dispatch(request))].enqueue_prefilled(request, prompt, output);
}

void DataParallelScheduler::kv_arrived(int64_t request) { ranks_[static_cast<size_t>(rank_of(request))].kv_arrived(request); }

void DataParallelScheduler::release_held(int64_t request) {
  ranks_[static_cast<size_t>(rank_of(request))].release_held(request);
  rank_.erase(request);
}

StepPlan DataParallelScheduler::plan() {
  StepPlan all;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    StepPlan p = ranks_[r].plan();
    // A plan that only preempted admits nothing by design: plan the rank again so that it does not
    // sit out the step (at most once per sequence it holds), its preemptions kept.
    for (size_t tries = 0; p.empty() && p.receiving.empty() && !p.preempted.empty() && tries <= ranks_[r].waiting();
         ++tries) {
      StepPlan again = ranks_[r].plan();
      again.preempted.insert(again.preempted.begin(), p.preempted.begin(), p.preempted.end());
      again.swapped_out_blocks += p.swapped_out_blocks;
      again.swaps += p.swaps;
      p = std::move(again);
    }
    for (PlannedChunk c : p.chunks) {
      c.rank = static_cast<int>(r);
      all.chunks.push_back(c);
    }
    append(all.preempted, p.preempted);
    all.hits.insert(all.hits.end(), p.hits.begin(), p.hits.end());
    append(all.receiving, p.receiving);
    all.swapped_out_blocks += p.swapped_out_blocks;
    all.swapped_in_blocks += p.swapped_in_blocks;
    all.host_loaded_blocks += p.host_loaded_blocks;
    all.swaps += p.swaps;
    all.parts.push_back(std::move(p));
  }
  return all;
}

StepOutcome DataParallelScheduler::complete(const StepPlan& plan) {
  StepOutcome all;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const StepOutcome o = ranks_[r].complete(plan.parts[r]);
    append(all.sampled, o.sampled);
    append(all.produced, o.produced);
    append(all.first_token, o.first_token);
    append(all.finished, o.finished);
  }
  if (!hold_finished_) {
    for (const int64_t id : all.finished) rank_.erase(id);
  }
  return all;
}

size_t DataParallelScheduler::waiting() const {
  size_t n = 0;
  for (const BatchScheduler& s : ranks_) n += s.waiting();
  return n;
}

int64_t DataParallelScheduler::used_blocks() const {
  int64_t n = 0;
  for (const BatchScheduler& s : ranks_) n += s.used_blocks();
  return n;
}

int64_t DataParallelScheduler::evictable_blocks() const {
  int64_t n = 0;
  for (const BatchScheduler& s : ranks_) n += s.evictable_blocks();
  return n;
}

int64_t DataParallelScheduler::kv_blocks() const { return ranks_.front().kv_blocks() * static_cast<int64_t>(ranks_.size()); }

}  // namespace parallax
