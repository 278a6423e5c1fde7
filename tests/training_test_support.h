// Helpers shared by the training-iteration tests.
#pragma once

#include <gtest/gtest.h>

#include "test_support.h"
#include "training/iteration.h"

namespace parallax::test {

/// Indexes of the per-kind arrays of a stage's result (communication, exposed time).
inline constexpr size_t kTp = static_cast<size_t>(WorkKind::kTpComm);
inline constexpr size_t kCp = static_cast<size_t>(WorkKind::kCpComm);
inline constexpr size_t kEp = static_cast<size_t>(WorkKind::kEpComm);
inline constexpr size_t kDp = static_cast<size_t>(WorkKind::kDpComm);

/// n toy GPUs (1 TFLOP/s bf16, 100 GB/s HBM, 1 GiB) on one 100 GB/s switch.
inline Topology toy_cluster(int n) { return star(n, gigabytes_per_second(100), Time::us(1)); }

/// A small Llama-style model: hidden 256, 4 heads (and 4 KV heads) of 64, SwiGLU 1024, vocab
/// 1024.
inline ModelConfig tiny(int layers = 8) {
  ModelConfig m;
  m.name = "tiny";
  m.layers = layers;
  m.hidden = 256;
  m.heads = m.kv_heads = 4;
  m.head_dim = 64;
  m.ffn = 1024;
  m.vocab = 1024;
  m.max_sequence = 1024;
  return m;
}

/// Every simulated rank's breakdown adds up to the iteration time.
// Options under which a pass takes exactly the sum of its kernels' times: the host issues
// them faster than any GPU runs them (no t_dispatch), as the hand-timed tests assume.
inline IterationOptions kernels_only(IterationOptions options = {}) {
  options.compute.host_dispatch = Time::zero();
  return options;
}

inline void expect_parts_add_up(const IterationResult& r) {
  for (const StageResult& s : r.stages) {
    EXPECT_EQ(s.time.compute + s.time.exposed_communication() + s.time.bubble + s.time.idle, r.iteration_time)
        << "stage " << s.stage;
  }
}

}  // namespace parallax::test
