// StreamGraphMemo (stream_graph_memo.h).
#include "training/stream_graph_memo.h"

namespace parallax {

std::vector<WorkTiming> StreamGraphMemo::run(Engine& engine, const StreamGraph& graph) {
  std::optional<uint64_t> hash;
  for (Played& p : played_) {
    if (p.start != engine.now() || p.graph.size() != graph.size()) continue;
    if (!hash) hash = graph.content_hash();
    if (!p.hash) p.hash = p.graph.content_hash();
    if (*p.hash == *hash && p.graph == graph) {
      ++hits_;
      return p.timings;
    }
  }
  std::vector<WorkTiming> timings = run_stream_graph(engine, graph);
  if (capacity_ == 0) return timings;
  if (played_.size() >= capacity_) played_.erase(played_.begin());
  played_.push_back(Played{hash, engine.now(), graph, timings});
  return timings;
}

}  // namespace parallax
