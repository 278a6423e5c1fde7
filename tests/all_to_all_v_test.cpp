// A 64-GPU all-to-all-v with a skewed byte matrix on the flow model (8 DGX H100 nodes), pinned
// to the timings the flow model gave before its all-to-all speed work (issue 21): every task's
// ready, start and finish picosecond, folded into one FNV-1a hash, must stay what it was. (The
// direct one's hash was taken again when its lowering took PXN's rail-aligned legs, each
// standing for its pairs; its makespan stayed to the picosecond.) The run is also held to what
// max-min sharing must satisfy whatever the implementation.
#include <gtest/gtest.h>

#include "collectives/algorithms.h"
#include "network/flow_network.h"
#include "test_support.h"

namespace parallax {
namespace {

uint64_t fold(uint64_t hash, int64_t value) {
  for (int i = 0; i < 8; ++i) {
    hash ^= static_cast<uint64_t>(value >> (8 * i)) & 0xff;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// Rank a sends to rank b: 64 KiB times 1-11, four times as much to the first node's ranks (the
// popular experts of a skewed MoE dispatch), nothing to itself.
std::vector<std::vector<double>> skewed_matrix(int n) {
  std::vector<std::vector<double>> m(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(n), 0.0));
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      const double weight = 1 + (a * 7 + b * 13) % 11;
      m[static_cast<size_t>(a)][static_cast<size_t>(b)] = 65536.0 * weight * (b < 8 ? 4 : 1);
    }
  }
  return m;
}

struct Played {
  Time makespan;
  uint64_t hash = 0xcbf29ce484222325ULL;
  FlowNetwork::Audit audit;
  uint64_t flows = 0;
};

Played play(Algorithm algorithm) {
  Topology topo = test::load_preset("dgx-h100", 8);
  Router router(topo);
  Communicator comm = place_ranks(topo, 64);
  CollectiveSpec spec;
  spec.op = CollectiveOp::kAllToAll;
  spec.algorithm = algorithm;
  spec.matrix = skewed_matrix(64);
  LoweringOptions options;
  options.step_latency_intra = Time::us(2);
  options.step_latency_inter = Time::us(5);
  TransferGraph graph = lower_collective(spec, comm, router, options);
  Engine engine;
  FlowNetwork::Options audited;
  audited.audit = true;
  FlowNetwork net(engine, topo, router, audited);
  Played out;
  std::vector<TaskTiming> timings;
  out.makespan = run_transfer_graph(engine, net, graph, &timings);
  for (const TaskTiming& t : timings) {
    out.hash = fold(fold(fold(out.hash, t.ready.picoseconds()), t.start.picoseconds()), t.finish.picoseconds());
  }
  out.audit = net.audit();
  out.flows = net.flows_completed();
  return out;
}

TEST(AllToAllV, SkewedMatrixOn64GpusKeepsItsTimings) {
  const Played direct = play(Algorithm::kDirect);
  const Played pairwise = play(Algorithm::kPairwise);
  // Direct, with PXN: each rank's legs to its 7 node peers over NVLink (its own bytes and those
  // it relays), and to the 7 ranks of its rail on the other nodes. Pairwise: every pair.
  EXPECT_EQ(direct.flows, 64u * 7u + 64u * 7u);
  EXPECT_EQ(pairwise.flows, 64u * 63u);
  for (const Played* p : {&direct, &pairwise}) {
    EXPECT_LE(p->audit.worst_overload, 1e-9);
    EXPECT_EQ(p->audit.flows_without_bottleneck, 0u);
    EXPECT_LE(p->audit.worst_bytes_error, 1e-5);  // finishes are rounded to the picosecond
  }
  EXPECT_EQ(direct.makespan.picoseconds(), 1787579201);
  EXPECT_EQ(direct.hash, 6214824583991304203u);
  EXPECT_EQ(pairwise.makespan.picoseconds(), 3446550221);
  EXPECT_EQ(pairwise.hash, 10546721178177170428u);
}

}  // namespace
}  // namespace parallax
