// Symmetry folding: the iteration simulates one replica's pipeline (one rank per stage) and
// lets it stand for all dp·tp·cp replicas. On 64-GPU layouts (8 DGX H100 nodes), simulating
// each replica in turn — each timed on its own TP, CP, DP, EP and PP groups — must give the
// same iteration time and the same breakdown, stage by stage, as the folded default. Since the
// replicas then run identical schedules, a simulation of all 64 GPUs coupled at their
// collectives has nothing to wait for at any of them, and ends at that same time.
#include <gtest/gtest.h>

#include "training/iteration.h"
#include "model/model_loader.h"
#include "training_test_support.h"

namespace parallax {
namespace {

struct Case {
  const char* name;
  const char* model;
  ParallelLayout layout;
};

ParallelLayout make(int tp, int pp, int dp, int cp, int ep, ZeroStage zero, int64_t global_batch) {
  ParallelLayout l;
  l.tp = tp;
  l.pp = pp;
  l.dp = dp;
  l.cp = cp;
  l.ep = ep;
  l.sequence_parallel = tp > 1;
  l.zero_stage = zero;
  l.micro_batch = 1;
  l.global_batch = global_batch;
  l.sequence_length = 4096;
  return l;
}

void expect_same(const IterationResult& a, const IterationResult& b) {
  EXPECT_EQ(a.iteration_time, b.iteration_time);
  ASSERT_EQ(a.stages.size(), b.stages.size());
  for (size_t s = 0; s < a.stages.size(); ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    EXPECT_EQ(a.stages[s].time.compute, b.stages[s].time.compute);
    EXPECT_EQ(a.stages[s].time.exposed, b.stages[s].time.exposed);
    EXPECT_EQ(a.stages[s].time.bubble, b.stages[s].time.bubble);
    EXPECT_EQ(a.stages[s].memory.total(), b.stages[s].memory.total());
  }
}

TEST(IterationSymmetry, EveryReplicaGivesTheFoldedResultOn64Gpus) {
  const Topology topo = test::load_preset("dgx-h100", 8);
  ASSERT_EQ(topo.gpu_count(), 64u);
  const std::string models = test::source_path("workloads/models");
  const Case cases[] = {
      // DP replicas across nodes, TP pairs inside them, ZeRO-1 over 16 ranks.
      {"llama3-8b tp2 pp2 dp16", "llama3-8b", make(2, 2, 16, 1, 1, ZeroStage::kStage1, 64)},
      // CP rings of 4 inside a node, DP over nodes, ZeRO-3 over dp·cp.
      {"llama3-8b tp2 cp4 pp2 dp4", "llama3-8b", make(2, 2, 4, 4, 1, ZeroStage::kStage3, 16)},
      // EP groups of 8 spanning two nodes, expert DP, PP over 4 stages.
      {"mixtral-8x7b tp2 pp4 dp8 ep8", "mixtral-8x7b", make(2, 4, 8, 1, 8, ZeroStage::kStage1, 32)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const ModelConfig model = load_bundled_model(models, c.model);
    const IterationResult folded = simulate_iteration(model, c.layout, topo);
    int replicas = 0;
    for (int tp = 0; tp < c.layout.tp; ++tp) {
      for (int cp = 0; cp < c.layout.cp; ++cp) {
        for (int dp = 0; dp < c.layout.dp; ++dp) {
          SCOPED_TRACE("replica tp " + std::to_string(tp) + " cp " + std::to_string(cp) + " dp " + std::to_string(dp));
          IterationOptions options;
          options.replica = RankCoords{tp, cp, dp, 0};
          expect_same(simulate_iteration(model, c.layout, topo, options), folded);
          ++replicas;
        }
      }
    }
    EXPECT_EQ(replicas * c.layout.pp, 64);
  }
}

TEST(IterationSymmetry, AReplicaOutsideTheLayoutIsRefused) {
  const Topology topo = test::load_preset("dgx-h100", 8);
  const ModelConfig model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  IterationOptions options;
  options.replica = RankCoords{0, 0, 16, 0};
  EXPECT_THROW(simulate_iteration(model, make(2, 2, 16, 1, 1, ZeroStage::kStage1, 64), topo, options),
               std::invalid_argument);
}

}  // namespace
}  // namespace parallax
