// WorkIdList: a short list of stream-graph task ids (a task's dependencies while the iteration
// graph is built), held inline up to four ids so that building a graph does not allocate per task.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>

#include "training/stream_graph.h"

namespace parallax {

class WorkIdList {
 public:
  WorkIdList() = default;
  WorkIdList(std::initializer_list<WorkId> ids) { append(ids.begin(), ids.size()); }
  WorkIdList(const WorkIdList& o) { append(o.data(), o.size()); }
  WorkIdList& operator=(const WorkIdList& o) {
    if (this != &o) {
      size_ = 0;
      append(o.data(), o.size());
    }
    return *this;
  }
  WorkIdList(WorkIdList&& o) noexcept { *this = std::move(o); }
  WorkIdList& operator=(WorkIdList&& o) noexcept {
    if (this == &o) return *this;
    if (o.heap_) {
      heap_ = std::move(o.heap_);
      capacity_ = o.capacity_;
      size_ = o.size_;
    } else {
      size_ = 0;
      append(o.data(), o.size());
    }
    o.size_ = 0;
    o.capacity_ = kInline;
    return *this;
  }

  void push_back(WorkId id) {
    reserve(size_ + 1);
    data()[size_++] = id;
  }
  const WorkId* data() const { return heap_ ? heap_.get() : inline_; }
  WorkId* data() { return heap_ ? heap_.get() : inline_; }
  size_t size() const { return size_; }
  const WorkId* begin() const { return data(); }
  const WorkId* end() const { return data() + size_; }
  operator std::span<const WorkId>() const { return {data(), size_}; }

 private:
  static constexpr size_t kInline = 4;

  void append(const WorkId* ids, size_t n) {
    reserve(size_ + n);
    std::copy(ids, ids + n, data() + size_);
    size_ += n;
  }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    const size_t grown = std::max(n, 2 * capacity_);
    auto bigger = std::make_unique<WorkId[]>(grown);
    std::copy(data(), data() + size_, bigger.get());
    heap_ = std::move(bigger);
    capacity_ = grown;
  }

  WorkId inline_[kInline] = {};
  std::unique_ptr<WorkId[]> heap_;
  size_t size_ = 0;
  size_t capacity_ = kInline;
};

}  // namespace parallax
