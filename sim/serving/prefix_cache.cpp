// An instance's prefix cache (prefix_cache.h).
#include "serving/prefix_cache.h"

namespace parallax {

int PrefixCache::match(const std::vector<uint64_t>& ids) const {
  int n = 0;
  while (n < static_cast<int>(ids.size()) && entries_.count(ids[static_cast<size_t>(n)])) ++n;
  return n;
}

void PrefixCache::pin(uint64_t id) {
  Entry& e = entries_.at(id);
  if (e.pins++ == 0) {
    evictable_.erase({e.tick, id});
    evictable_kv_blocks_ -= e.kv_blocks;
  }
  e.tick = ++tick_;
}

void PrefixCache::unpin(uint64_t id) {
  Entry& e = entries_.at(id);
  e.tick = ++tick_;
  if (--e.pins == 0) {
    evictable_.insert({e.tick, id});
    evictable_kv_blocks_ += e.kv_blocks;
  }
}

void PrefixCache::insert_pinned(uint64_t id, int64_t tokens, int64_t kv_blocks) {
  entries_[id] = Entry{tokens, kv_blocks, 1, ++tick_};
  kv_blocks_ += kv_blocks;
}

int64_t PrefixCache::evict(int64_t kv_blocks) {
  int64_t freed = 0;
  while (freed < kv_blocks && !evictable_.empty()) {
    const uint64_t id = evictable_.begin()->second;
    evictable_.erase(evictable_.begin());
    const auto it = entries_.find(id);
    freed += it->second.kv_blocks;
    kv_blocks_ -= it->second.kv_blocks;
    evictable_kv_blocks_ -= it->second.kv_blocks;
    entries_.erase(it);
  }
  return freed;
}

}  // namespace parallax
