// A map from an instant (a finish in picoseconds) to a 32-bit value, by open addressing with
// linear probing; deletion shifts the cluster back (Knuth's Algorithm R), so there are no
// tombstones. The completion buckets look one up per new finish: it must not allocate per
// instant as a node-based map would.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

namespace parallax {

class InstantIndex {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  /// The value of `instant`, or nullptr.
  uint32_t* find(int64_t instant) {
    if (cells_.empty()) return nullptr;
    for (size_t i = home(instant);; i = (i + 1) & mask_) {
      if (cells_[i].value == kAbsent) return nullptr;
      if (cells_[i].instant == instant) return &cells_[i].value;
    }
  }
  /// Adds `instant`, which must not be in; `value` must not be kAbsent.
  void insert(int64_t instant, uint32_t value) {
    if (2 * (count_ + 1) > cells_.size()) grow();
    size_t i = home(instant);
    while (cells_[i].value != kAbsent) i = (i + 1) & mask_;
    cells_[i] = Cell{instant, value};
    ++count_;
  }
  /// Removes `instant`, which must be in.
  void erase(int64_t instant) {
    size_t hole = home(instant);
    while (cells_[hole].value == kAbsent || cells_[hole].instant != instant) hole = (hole + 1) & mask_;
    // A later cell of the cluster moves into the hole unless its home lies cyclically in
    // (hole, its place]: then a probe from its home still reaches it.
    for (size_t j = (hole + 1) & mask_; cells_[j].value != kAbsent; j = (j + 1) & mask_) {
      const size_t h = home(cells_[j].instant);
      const bool stays = hole <= j ? (h > hole && h <= j) : (h > hole || h <= j);
      if (!stays) {
        cells_[hole] = cells_[j];
        hole = j;
      }
    }
    cells_[hole].value = kAbsent;
    --count_;
  }
  size_t size() const { return count_; }

 private:
  struct Cell {
    int64_t instant = 0;
    uint32_t value = kAbsent;
  };
  // Fibonacci hashing: the multiplier's top bits spread instants that differ in low bits.
  size_t home(int64_t instant) const {
    return static_cast<size_t>((static_cast<uint64_t>(instant) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void grow() {
    std::vector<Cell> old = std::move(cells_);
    const size_t size = old.empty() ? 64 : 2 * old.size();
    cells_.assign(size, Cell{});
    mask_ = size - 1;
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(size));
    count_ = 0;
    for (const Cell& c : old) {
      if (c.value != kAbsent) insert(c.instant, c.value);
    }
  }

  std::vector<Cell> cells_;
  size_t mask_ = 0;
  unsigned shift_ = 64;  // 64 − log2(cells), set with the first cells
  size_t count_ = 0;
};

}  // namespace parallax
