// StreamGraphMemo: the timings of stream graphs played before, reused for an equal graph.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/engine.h"
#include "training/stream_graph.h"

namespace parallax {

/// The timings of graphs played before without a network, for a caller that plays many graphs
/// of which some are equal: in a layout search, layouts that differ only in their rank order
/// often build the same graph (when the tensor-parallel group fills a node, the data- and
/// pipeline-parallel groups sit alike under either order). Keeps the last `capacity` graphs,
/// looks one up by its size, then its hash (each hashed only when a graph of its size is looked
/// up), and compares it whole, so a hit returns exactly what playing it again would.
class StreamGraphMemo {
 public:
  explicit StreamGraphMemo(size_t capacity = 4) : capacity_(capacity) {}
  /// run_stream_graph(engine, graph), or the timings of an equal graph played from the same
  /// instant before.
  std::vector<WorkTiming> run(Engine& engine, const StreamGraph& graph);
  size_t hits() const { return hits_; }

 private:
  struct Played {
    std::optional<uint64_t> hash;  // hashed when a graph of its size is looked up
    Time start;
    StreamGraph graph;
    std::vector<WorkTiming> timings;
  };
  size_t capacity_;
  size_t hits_ = 0;
  std::vector<Played> played_;  // oldest first
};

}  // namespace parallax
