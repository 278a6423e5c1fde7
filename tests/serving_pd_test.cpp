// Prefill/decode disaggregation (serving/fleet.h): a lone request's TTFT is its prefill step
// plus its KV's transfer (path latency + bytes over the bottleneck), and transfers into one
// decode GPU's NIC share it: four at once take four times as long as one.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/model_loader.h"
#include "serving/fleet.h"
#include "serving/kv_capacity.h"
#include "test_support.h"
#include "topology/router.h"
#include "topology/topology_loader.h"

namespace parallax {
namespace {

using test::shared_dgx_h100;

PoolConfig pool(const std::string& name, PoolRole role, int tp, int count) {
  PoolConfig p;
  p.name = name;
  p.role = role;
  p.shape = InstanceShape{tp, 1};
  p.count = count;
  return p;
}

std::shared_ptr<const std::vector<Request>> at_once(int requests, int64_t prompt, int64_t output) {
  auto v = std::make_shared<std::vector<Request>>();
  for (int i = 0; i < requests; ++i) {
    Request r;
    r.id = i;
    r.prompt_tokens = prompt;
    r.output_tokens = output;
    r.session = static_cast<uint64_t>(i);
    v->push_back(r);
  }
  return v;
}

// A lone flow's time on the path the router picks: Σ latency + size / the narrowest link.
Time lone_flow(const Topology& topo, DeviceId src, DeviceId dst, Bytes size, uint64_t key) {
  const Router router(topo);
  Time latency = Time::zero();
  double narrowest = 1e300;
  for (LinkId l : router.route(src, dst, key)) {
    latency += topo.link(l).latency;
    narrowest = std::min(narrowest, topo.link(l).bandwidth.value());
  }
  return latency + transfer_time(size, Bandwidth(narrowest));
}

// `total` bytes from node 0's 8 GPUs to node 1's, GPU i to GPU i, each flow alone on its rail.
Time rail_flows(const Topology& topo, double total) {
  Time t = Time::zero();
  for (int g = 0; g < 8; ++g) {
    t = std::max(t, lone_flow(topo, topo.gpus()[static_cast<size_t>(g)], topo.gpus()[static_cast<size_t>(8 + g)],
                              Bytes(total / 8), static_cast<uint64_t>(g)));
  }
  return t;
}

TEST(ServingDisaggregation, ALoneRequestsTtftIsItsPrefillPlusItsKvTransfer) {
  FleetConfig c;
  c.model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  c.topology = shared_dgx_h100(2);
  c.pools = {pool("prefill", PoolRole::kPrefill, 8, 1), pool("decode", PoolRole::kDecode, 8, 1)};
  c.replay = at_once(1, 4096, 10);
  const FleetResult r = simulate_fleet(c);
  ASSERT_EQ(r.requests.size(), 1u);
  const RequestRecord& rec = r.requests[0];
  ASSERT_TRUE(rec.completed);
  EXPECT_EQ(rec.decode_instance, 1);
  // Prefill: one step of the 4096-token prompt on TP 8 (node 0).
  const StepModel prefill(c.model, *c.topology, InstanceShape{8, 1}, c.pools[0].step);
  RaggedBatch prompt;
  prompt.sequences = {SequenceChunk{4096, 4096, true}};
  const Time prefill_time = prefill.step(prompt).total;
  // KV: 4096 tokens × 32 layers × K,V × 1 head per GPU × 128 × 2 B × 8 GPUs = 512 MiB, as 8
  // flows of 64 MiB from GPU i of node 0 to GPU i of node 1, each alone on its rail.
  const double total = 4096.0 * kv_bytes_per_token(c.model, 8, 0, 32).value() * 8;
  EXPECT_EQ(total, 512.0 * 1024 * 1024);
  const Time transfer = rail_flows(*c.topology, total);
  EXPECT_EQ(rec.kv_transfer, transfer);
  EXPECT_EQ(rec.ttft(), prefill_time + transfer);
  EXPECT_EQ(rec.tokens_out, 10);
}

// A windowed model's decode instance keeps only the window's blocks on those layers (the hybrid
// allocator), so only they cross the network: GPT-OSS windows half its layers at 128 tokens.
TEST(ServingDisaggregation, AHybridAllocatorIsSentOnlyTheWindowsBlocks) {
  FleetConfig c;
  c.model = load_bundled_model(test::source_path("workloads/models"), "gpt-oss-120b");
  c.topology = shared_dgx_h100(2);
  c.pools = {pool("prefill", PoolRole::kPrefill, 8, 1), pool("decode", PoolRole::kDecode, 8, 1)};
  c.replay = at_once(1, 4096, 10);
  const double per_token = kv_bytes_per_token(c.model, 8, 0, c.model.layers).value() * 8;
  Time full, windowed;
  for (const bool hybrid : {false, true}) {
    c.pools[1].hybrid_kv_allocator = hybrid;
    const FleetResult r = simulate_fleet(c);
    ASSERT_TRUE(r.requests[0].completed);
    (hybrid ? windowed : full) = r.requests[0].kv_transfer;
  }
  // Half the bytes for all 4,096 tokens, half for the window's 128 and the block it straddles.
  const double span = 128.0 + static_cast<double>(c.pools[1].batching.block_size) - 1;
  EXPECT_EQ(full, rail_flows(*c.topology, 4096.0 * per_token));
  EXPECT_EQ(windowed, rail_flows(*c.topology, (0.5 * 4096 + 0.5 * span) * per_token));
}

TEST(ServingDisaggregation, StreamedKvOverlapsThePrefillAndLandsAfterItsLastLayer) {
  FleetConfig c;
  c.model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  c.topology = shared_dgx_h100(2);
  c.pools = {pool("prefill", PoolRole::kPrefill, 8, 1), pool("decode", PoolRole::kDecode, 8, 1)};
  c.kv_streaming = true;
  c.pools[0].batching.token_budget = 32768;  // each prompt in one step
  const StepModel prefill(c.model, *c.topology, InstanceShape{8, 1}, c.pools[0].step);
  for (const int64_t length : {4096, 32768}) {
    c.replay = at_once(1, length, 10);
    const FleetResult r = simulate_fleet(c);
    const RequestRecord& rec = r.requests[0];
    ASSERT_TRUE(rec.completed);
    RaggedBatch prompt;
    prompt.sequences = {SequenceChunk{length, length, true}};
    const Time prefill_time = prefill.step(prompt).total;
    // The decode instance is idle, so its blocks are allocated and the flows start with the
    // prefill, at 0; alone on their rails they take D (as in the test above). The KV lands at
    // max(D, prefill + D/32): the last of 32 layers' share follows the prefill.
    const double total = static_cast<double>(length) * kv_bytes_per_token(c.model, 8, 0, 32).value() * 8;
    const Time flows = rail_flows(*c.topology, total);
    const Time landed = std::max(flows, prefill_time + Time::ps(flows.picoseconds() / 32));
    EXPECT_EQ(rec.ttft(), landed) << length;
    EXPECT_EQ(rec.kv_transfer, landed) << length;
    EXPECT_LT(rec.ttft(), prefill_time + flows) << length;  // against sending after the prefill
    EXPECT_EQ(rec.tokens_out, 10);
  }
}

TEST(ServingDisaggregation, TransfersIntoOneNicShareIt) {
  FleetConfig c;
  c.model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  c.topology = shared_dgx_h100(2);
  // Eight one-GPU prefill instances fill node 0; the one decode instance is GPU 0 of node 1.
  c.pools = {pool("prefill", PoolRole::kPrefill, 1, 8), pool("decode", PoolRole::kDecode, 1, 1)};
  c.router = RoutingPolicy::kRoundRobin;
  c.replay = at_once(1, 4096, 4);
  const Time alone = simulate_fleet(c).requests[0].kv_transfer;
  // Four equal prompts at once go to prefill GPUs 0-3, finish together, and their 512 MiB
  // each then arrive through the same NIC of node 1.
  c.replay = at_once(4, 4096, 4);
  const FleetResult four = simulate_fleet(c);
  for (const RequestRecord& rec : four.requests) {
    ASSERT_TRUE(rec.completed);
    EXPECT_NEAR(rec.kv_transfer.seconds() / alone.seconds(), 4.0, 0.02) << "request " << rec.id;
  }
  EXPECT_GT(alone, Time::ms(10));  // 512 MiB over one 400 Gb/s NIC: 10.7 ms
}

TEST(ServingPlacement, PoolsArePlacedWherePutAndPackedWithoutStraddlingNodes) {
  FleetConfig c;
  c.model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  c.topology = shared_dgx_h100(2);
  c.replay = at_once(1, 4096, 4);
  c.pools = {pool("prefill", PoolRole::kPrefill, 4, 1), pool("decode", PoolRole::kDecode, 4, 1)};
  // Packed, both sit on node 0: the KV moves over NVLink.
  const FleetResult packed = simulate_fleet(c);
  EXPECT_EQ(c.topology->device(packed.instance_gpus[1].front()).name, "n0.gpu4");
  // The decode pool put on node 1: the KV crosses the network, 4 flows of 128 MiB on 4 rails.
  c.pools[1].first_gpu = 8;
  const FleetResult apart = simulate_fleet(c);
  EXPECT_EQ(c.topology->device(apart.instance_gpus[1].front()).name, "n1.gpu0");
  EXPECT_GT(apart.requests[0].kv_transfer.seconds(), 5 * packed.requests[0].kv_transfer.seconds());
  // Three TP-2 instances fill GPUs 0-5; a TP-4 instance after them would straddle the nodes,
  // so it starts on node 1.
  c.pools = {pool("small", PoolRole::kColocated, 2, 3), pool("wide", PoolRole::kColocated, 4, 1)};
  const FleetResult skipped = simulate_fleet(c);
  EXPECT_EQ(c.topology->device(skipped.instance_gpus[2].front()).name, "n0.gpu4");
  EXPECT_EQ(c.topology->device(skipped.instance_gpus[3].front()).name, "n1.gpu0");
  // Put where it straddles, or on GPUs another pool holds: refused, naming the pool and GPU.
  c.pools[1].first_gpu = 6;
  try {
    simulate_fleet(c);
    ADD_FAILURE() << "a straddling placement ran";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("pool wide: at n0.gpu6, stage 0's TP group of 4 GPUs"), std::string::npos)
        << e.what();
  }
  c.pools[1].first_gpu = 4;
  try {
    simulate_fleet(c);
    ADD_FAILURE() << "an overlapping placement ran";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("pool wide: GPU n0.gpu4 is already pool small's"), std::string::npos) << e.what();
  }
}

TEST(ServingDisaggregation, FleetsMustPairPrefillWithDecode) {
  FleetConfig c;
  c.model = load_bundled_model(test::source_path("workloads/models"), "llama3-8b");
  c.topology = shared_dgx_h100(1);
  c.replay = at_once(1, 16, 4);
  c.pools = {pool("prefill", PoolRole::kPrefill, 1, 2)};
  EXPECT_THROW(simulate_fleet(c), std::invalid_argument);
  c.pools = {pool("decode", PoolRole::kDecode, 1, 2)};
  EXPECT_THROW(simulate_fleet(c), std::invalid_argument);
  c.pools = {pool("prefill", PoolRole::kPrefill, 1, 2), pool("decode", PoolRole::kDecode, 1, 2),
             pool("both", PoolRole::kColocated, 1, 2)};
  EXPECT_THROW(simulate_fleet(c), std::invalid_argument);
}

}  // namespace
}  // namespace parallax

namespace parallax {
namespace {

// Splitwise-HA on a cluster of node groups: prefill on a DGX H100, decode on a DGX A100 40GB.
FleetConfig hybrid_split() {
  FleetConfig c;
  c.model = test::bundled("llama3-8b");
  c.topology = std::make_shared<const Topology>(topology_from_json(nlohmann::json::parse(R"({"name": "H100 + A100 40GB",
      "node_groups": [{"name": "h100", "nodes": 1, "node_from": "dgx-h100.json"},
                      {"name": "a100", "nodes": 1, "node_from": "dgx-a100-40gb.json"}],
      "network": {"kind": "fat_tree", "tiers": 1, "link_latency": "0.6 us"}})"), test::source_path("topologies/mixed.json")));
  PoolConfig prefill = pool("prefill", PoolRole::kPrefill, 2, 2), decode = pool("decode", PoolRole::kDecode, 2, 2);
  prefill.first_gpu = 0;
  decode.first_gpu = 8;
  c.pools = {prefill, decode};
  c.traffic.rate_per_s = 20;
  c.traffic.requests = 400;
  c.traffic.prompt.value = 2000;
  c.traffic.output.value = 100;
  return c;
}

TEST(ServingNodeGroups, EachPoolRunsOnItsGroupsGpus) {
  const FleetConfig c = hybrid_split();
  const Topology& decode_gpus = pool_topology(c, c.pools[1]);
  EXPECT_EQ(decode_gpus.gpu_spec_of(decode_gpus.gpus()[0]).name, "A100-SXM4-40GB");
  // Its KV blocks come from the A100's 40 GB, as on a DGX A100 40GB alone.
  FleetConfig alone = c;
  alone.topology = std::make_shared<const Topology>(test::load_preset("dgx-a100-40gb", 1));
  alone.pools[1].first_gpu.reset();
  EXPECT_EQ(pool_kv_capacity(c, c.pools[1]).blocks, pool_kv_capacity(alone, alone.pools[1]).blocks);
  EXPECT_LT(pool_kv_capacity(c, c.pools[1]).blocks, pool_kv_capacity(c, c.pools[0]).blocks);
  // Its engine step is the DGX A100's.
  RaggedBatch batch;
  for (int i = 0; i < 32; ++i) batch.sequences.push_back(SequenceChunk{1, 2048});
  const StepModel here(c.model, decode_gpus, c.pools[1].shape, c.pools[1].step);
  const StepModel there(c.model, *alone.topology, c.pools[1].shape, c.pools[1].step);
  EXPECT_EQ(here.step(batch).total, there.step(batch).total);
  // The fleet runs, and its A100 decode is slower than H100 decode would be: a decode step of
  // Llama 3 8B reads its weights and KV from HBM, 2.04 TB/s on the A100 against 3.35 on the H100
  // (1.6x), with batches too small to be bound by the A100's 312 TFLOP/s; 1.2x leaves room for
  // the step's fixed costs.
  const FleetResult mixed = simulate_fleet(c);
  FleetConfig h100 = c;
  h100.topology = shared_dgx_h100(2);
  const FleetResult same = simulate_fleet(h100);
  double tpot_mixed = 0, tpot_h100 = 0;
  for (const RequestRecord& r : mixed.requests) {
    ASSERT_TRUE(r.completed);
    tpot_mixed += r.tpot().seconds();
  }
  for (const RequestRecord& r : same.requests) tpot_h100 += r.tpot().seconds();
  EXPECT_GT(tpot_mixed, 1.2 * tpot_h100);
}

TEST(ServingNodeGroups, PoolsArePlacedAndStayInTheirGroup) {
  FleetConfig unplaced = hybrid_split();
  unplaced.pools[1].first_gpu.reset();
  EXPECT_THROW(simulate_fleet(unplaced), std::invalid_argument);
  FleetConfig spilling = hybrid_split();
  spilling.pools[0].count = 5;  // 10 GPUs from the H100 node's first
  spilling.pools[1].first_gpu = 12;
  spilling.pools[1].count = 1;
  try {
    simulate_fleet(spilling);
    ADD_FAILURE() << "a pool ran past its group";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("past its group h100's nodes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace parallax
