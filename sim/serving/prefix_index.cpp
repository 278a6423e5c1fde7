// The router's prefix index (prefix_index.h).
#include "serving/prefix_index.h"

namespace parallax {

void PrefixIndex::insert(const std::vector<uint64_t>& blocks) {
  if (capacity_ <= 0) {
    all_.insert(blocks.begin(), blocks.end());
    return;
  }
  // Tail first, so that a prompt's leading blocks are the most recent: the index forgets the
  // ends of prompts before their shared beginnings, as a radix tree drops leaves first.
  for (auto block = blocks.rbegin(); block != blocks.rend(); ++block) {
    const uint64_t b = *block;
    if (auto it = where_.find(b); it != where_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      continue;
    }
    order_.push_front(b);
    where_.emplace(b, order_.begin());
    if (static_cast<int64_t>(where_.size()) > capacity_) {
      where_.erase(order_.back());
      order_.pop_back();
    }
  }
}

}  // namespace parallax
