// An instance's prefix cache: the KV of prompt blocks that finished prefills leave behind,
// keyed by prefix-chained block hashes (a request's Request::prefix_blocks), so that a later
// prompt with the same leading blocks skips their prefill (vLLM's automatic prefix caching,
// SGLang's radix cache). Entries that a running sequence uses are pinned; the others are
// evicted least recently used first when a sequence needs their blocks.
//
// With a host tier (SGLang's HiCache, vLLM's CPU KV offloading, LMCache's local CPU store), an
// entry evicted from the GPU moves to host memory, itself least recently used first within its
// capacity; a later prompt whose leading blocks continue into the host tier has them copied back
// (promote) instead of recomputing them. The copies to the host are written through as prompts
// are computed, off the step's critical path; the copies back are the caller's to cost.
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
  /// A host tier of `host_kv_blocks` KV blocks (0: none).
  explicit PrefixCache(int64_t host_kv_blocks = 0) : host_capacity_(host_kv_blocks) {}

  /// How many of `ids`' leading blocks are cached (on the GPU).
  int match(const std::vector<uint64_t>& ids) const;
  bool contains(uint64_t id) const { return entries_.count(id) != 0; }
  /// Tokens of a cached block, on the GPU or in the host tier.
  int64_t tokens(uint64_t id) const {
    const auto it = entries_.find(id);
    return it != entries_.end() ? it->second.tokens : host_.at(id).tokens;
  }
  /// KV blocks of a block in the host tier.
  int64_t host_entry_blocks(uint64_t id) const { return host_.at(id).kv_blocks; }

  /// Pins a cached block (a sequence uses it), or releases one pin.
  void pin(uint64_t id);
  void unpin(uint64_t id);
  /// Adds a block of `tokens` tokens held in `kv_blocks` KV blocks, pinned once (by the
  /// sequence whose prefill made it).
  void insert_pinned(uint64_t id, int64_t tokens, int64_t kv_blocks);
  /// Frees unpinned blocks, least recently used first, until at least `kv_blocks` KV blocks
  /// are freed or none is left (each moving to the host tier, if there is one); returns the KV
  /// blocks freed.
  int64_t evict(int64_t kv_blocks);

  /// How many of `ids` from index `from` on, contiguous, the host tier holds.
  int host_match(const std::vector<uint64_t>& ids, int from) const;
  /// Marks a host entry most recently used (so that evictions about to make room for it do
  /// not push it out of the host tier).
  void touch_host(uint64_t id);
  bool in_host(uint64_t id) const { return host_.count(id) != 0; }
  /// Moves a host entry back to the GPU, pinned once; returns its KV blocks.
  int64_t promote(uint64_t id);
  int64_t host_kv_blocks() const { return host_blocks_; }

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
  // The host tier: entries (their pins 0) and their least-recently-used order.
  void demote(uint64_t id, const Entry& e);
  void erase_host(uint64_t id);
  int64_t host_capacity_ = 0;
  int64_t host_blocks_ = 0;
  std::unordered_map<uint64_t, Entry> host_;
  std::set<std::pair<uint64_t, uint64_t>> host_order_;  ///< (tick, id)
};

}  // namespace parallax
