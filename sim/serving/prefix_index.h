// The router's approximate index of the prompt blocks it has sent to one instance: a set of
// block hashes, bounded or not. Bounded, it forgets the least recently sent block first, as
// SGLang's router trims its radix tree to max_tree_size (least recently used leaves first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace parallax {

class PrefixIndex {
 public:
  /// `capacity` blocks at most; 0 keeps every block.
  explicit PrefixIndex(int64_t capacity = 0) : capacity_(capacity) {}

  /// The blocks of a prompt just sent, in prompt order: each becomes recently sent, the leading
  /// ones most recently (forgotten last).
  void insert(const std::vector<uint64_t>& blocks);
  bool contains(uint64_t block) const { return capacity_ > 0 ? where_.contains(block) : all_.contains(block); }
  size_t size() const { return capacity_ > 0 ? where_.size() : all_.size(); }

 private:
  int64_t capacity_;
  std::unordered_set<uint64_t> all_;  // unbounded: no order to keep
  std::list<uint64_t> order_;         // bounded: most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;
};

}  // namespace parallax
