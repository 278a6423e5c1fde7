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
  erase_host(id);  // recomputed on the GPU: the host copy is stale news
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
    demote(id, it->second);
    entries_.erase(it);
  }
  return freed;
}

void PrefixCache::demote(uint64_t id, const Entry& e) {
  if (e.kv_blocks > host_capacity_) return;
  while (host_blocks_ + e.kv_blocks > host_capacity_) erase_host(host_order_.begin()->second);
  host_[id] = Entry{e.tokens, e.kv_blocks, 0, ++tick_};
  host_order_.insert({tick_, id});
  host_blocks_ += e.kv_blocks;
}

void PrefixCache::erase_host(uint64_t id) {
  const auto it = host_.find(id);
  if (it == host_.end()) return;
  host_order_.erase({it->second.tick, id});
  host_blocks_ -= it->second.kv_blocks;
  host_.erase(it);
}

int PrefixCache::host_match(const std::vector<uint64_t>& ids, int from) const {
  int n = 0;
  while (from + n < static_cast<int>(ids.size()) && host_.count(ids[static_cast<size_t>(from + n)])) ++n;
  return n;
}

void PrefixCache::touch_host(uint64_t id) {
  Entry& e = host_.at(id);
  host_order_.erase({e.tick, id});
  e.tick = ++tick_;
  host_order_.insert({e.tick, id});
}

int64_t PrefixCache::promote(uint64_t id) {
  const Entry e = host_.at(id);
  erase_host(id);
  insert_pinned(id, e.tokens, e.kv_blocks);
  return e.kv_blocks;
}

}  // namespace parallax
