// An instance's prefix cache: the KV of prompt blocks that finished prefills leave behind,
// keyed by prefix-chained block hashes (a request's Request::prefix_blocks), so that a later
// prompt with the same leading blocks skips their prefill (vLLM's automatic prefix caching,
// SGLang's radix cache). Entries that a running sequence uses are pinned; the others are
// evicted least recently used first when a sequence needs their blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace parallax {

class PrefixCache {
 public:
  /// How many of `ids`' leading blocks are cached.
  int match(const std::vector<uint64_t>& ids) const;
  bool contains(uint64_t id) const { return entries_.count(id) != 0; }
  /// Tokens of a cached block.
  int64_t tokens(uint64_t id) const { return entries_.at(id).tokens; }

  /// Pins a cached block (a sequence uses it), or releases one pin.
  void pin(uint64_t id);
  void unpin(uint64_t id);
  /// Adds a block of `tokens` tokens held in `kv_blocks` KV blocks, pinned once (by the
  /// sequence whose prefill made it).
  void insert_pinned(uint64_t id, int64_t tokens, int64_t kv_blocks);
  /// Frees unpinned blocks, least recently used first, until at least `kv_blocks` KV blocks
  /// are freed or none is left; returns the KV blocks freed.
  int64_t evict(int64_t kv_blocks);

  /// KV blocks held by cached entries, and by the unpinned ones among them (free to evict).
  int64_t kv_blocks() const { return kv_blocks_; }
  int64_t evictable_kv_blocks() const { return evictable_kv_blocks_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    int64_t tokens = 0;
    int64_t kv_blocks = 0;
    int pins = 0;
    uint64_t tick = 0;  ///< last use
  };
  std::unordered_map<uint64_t, Entry> entries_;
  std::set<std::pair<uint64_t, uint64_t>> evictable_;  ///< (tick, id) of unpinned entries
  uint64_t tick_ = 0;
  int64_t kv_blocks_ = 0;
  int64_t evictable_kv_blocks_ = 0;
};

}  // namespace parallax
