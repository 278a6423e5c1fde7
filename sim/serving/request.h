// A request of the serving simulation, and what the simulation records about it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "units/units.h"

namespace parallax {

struct Request {
  int64_t id = 0;
  Time arrival;
  int64_t prompt_tokens = 1;
  int64_t output_tokens = 1;
  uint64_t session = 0;  ///< a user or conversation id (session-affinity routing)
  /// Prefix-chained hashes of the prompt's leading blocks of `prefix_block_tokens` tokens
  /// (Mooncake's hash_ids): equal ids are equal prefixes, whose KV a prefix cache can reuse.
  std::vector<uint64_t> prefix_blocks;
  int64_t prefix_block_tokens = 0;
};

/// One request's life: its times, in simulated time, and what happened to it.
struct RequestRecord {
  int64_t id = 0;
  Time arrival;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int instance = -1;      ///< the instance the router chose, fleet-wide index
  Time first_scheduled;   ///< its first prefill chunk started
  bool scheduled = false; ///< first_scheduled is set
  Time first_token;       ///< the step that finished its prompt ended (TTFT = first_token − arrival)
  Time completion;        ///< its last token
  Time max_gap;           ///< the longest gap between two of its tokens
  int preemptions = 0;    ///< times it was evicted and recomputed
  int64_t tokens_out = 0; ///< output tokens sampled (output_tokens once completed)
  /// Prefix caching, at its first admission: leading prompt blocks found cached, the blocks
  /// its prompt has hashes for, and the prefill tokens that saved.
  int prefix_matched_blocks = 0;
  int prefix_blocks = 0;
  int64_t prefix_hit_tokens = 0;
  int prefix_host_blocks = 0;  ///< of the matched, copied back from the cache's host tier
  /// Disaggregated fleets: the decode instance, and how long its KV took to move there (from
  /// the decode instance's block allocation to the last byte).
  int decode_instance = -1;
  Time kv_transfer;
  bool completed = false;
  bool rejected = false;  ///< could never fit in its instance's KV cache
  std::string rejection;

  Time ttft() const { return first_token - arrival; }
  Time e2e() const { return completion - arrival; }
  /// Mean time per output token after the first; zero with one output token.
  Time tpot() const {
    if (output_tokens <= 1) return Time::zero();
    return Time::from_seconds((completion - first_token).seconds() / static_cast<double>(output_tokens - 1));
  }
  Time queueing() const { return first_scheduled - arrival; }
};

}  // namespace parallax
