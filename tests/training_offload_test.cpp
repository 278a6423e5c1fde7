// Activation offloading to host memory (ParallelLayout::cpu_offloading_layers): Megatron's
// offload windows, the forward's memory peak and the copies' timeline against hand-worked
// closed forms, what validate refuses, and the workload and topology fields.
#include <gtest/gtest.h>

#include <vector>

#include "io/input_error.h"
#include "training/explain.h"
#include "training/iteration.h"
#include "training/workload_loader.h"
#include "training_test_support.h"

namespace parallax {
namespace {

using test::expect_parts_add_up;
using test::tiny;

// One GPU whose link to host memory carries `host` per direction.
Topology one_gpu(Bandwidth host) {
  GpuSpec gpu = test::toy_gpu();
  gpu.host_bandwidth = host;
  return test::star(1, gigabytes_per_second(100), Time::us(1), gpu);
}

ParallelLayout offloading(int layers) {
  ParallelLayout l;
  l.micro_batch = 1;
  l.global_batch = 1;
  l.sequence_length = 512;
  l.cpu_offloading_layers = layers;
  return l;
}

// tiny()'s transformer layers alone (no embedding or output side) on `topo`.
IterationResult layers_only(const Topology& topo, int offloaded, int layers = 8) {
  IterationOptions options;
  options.transformer_layers_only = true;
  return simulate_iteration(tiny(layers), offloading(offloaded), topo, options);
}

// What one layer of tiny() keeps for its backward: 9 layers less 8 (the output side's the same).
double layer_activations(const Topology& topo) {
  return layers_only(topo, 0, 9).stages[0].memory.activations.value() -
         layers_only(topo, 0, 8).stages[0].memory.activations.value();
}

TEST(ActivationOffloading, WindowsSpreadTheLayersAsMegatronDoes) {
  // Window w = L / n; layer j's copy is waited for at the end of layer (j + 1)·w − 1, the
  // remainder L mod n adding one layer to each of the first windows.
  EXPECT_EQ(cpu_offloading_sync_layers(4, 8), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(cpu_offloading_sync_layers(20, 80).front(), 3);
  EXPECT_EQ(cpu_offloading_sync_layers(20, 80).back(), 79);
  // 80 layers, 30 offloaded: w = 2, 20 windows of 3 then 10 of 2.
  const std::vector<int> thirty = cpu_offloading_sync_layers(30, 80);
  EXPECT_EQ(thirty[0], 2);
  EXPECT_EQ(thirty[19], 59);
  EXPECT_EQ(thirty[20], 61);
  EXPECT_EQ(thirty[29], 79);
  EXPECT_TRUE(cpu_offloading_sync_layers(0, 80).empty());
}

TEST(ActivationOffloading, TheForwardKeepsTheOtherLayersAndTheOpenWindows) {
  // 8 equal layers of activations a, the first 4 offloaded, windows ending at layers 1, 3, 5, 7.
  // After layer ℓ the GPU holds the kept layers so far, max(0, ℓ + 1 − 4), and the offloaded
  // layers j ≤ ℓ whose window has not closed (sync_j ≥ ℓ): 1, 2, 2, 3, 1+2, 2+2, 3+1, 4+1.
  // The peak is 5a, against 8a without offloading.
  const Topology topo = one_gpu(gigabytes_per_second(50));
  const IterationResult kept = layers_only(topo, 0);
  const IterationResult offloaded = layers_only(topo, 4);
  const double a = layer_activations(topo);
  ASSERT_GT(a, 0);
  EXPECT_NEAR(kept.stages[0].memory.activations.value() - offloaded.stages[0].memory.activations.value(), 3 * a,
              1e-6 * a);
  EXPECT_EQ(offloaded.stages[0].memory.parameters, kept.stages[0].memory.parameters);
}

TEST(ActivationOffloading, CopiesSlowerThanTheLayersSetTheIteration) {
  // One micro-batch, 8 layers of forward f and backward b, the first 4 offloaded (windows end at
  // layers 1, 3, 5, 7), each copy c ≫ f, b (c > 2f, c > 4b). Forward: layer j's copy starts when
  // it and the copy before it are done; the compute waits at each window's end, so the last
  // copy ends, and the forward with it, at f + 4c. Backward from T0: layer 3's copy comes back
  // from the start (its window ends at layer 7), each next one when the copy before it is done
  // and its window's layer starts; layer 0 waits for the fourth, at T0 + 4c, then runs b:
  // f + 8c + b in all.
  const Topology slow = one_gpu(Bandwidth(1e6));
  const IterationResult base = layers_only(slow, 0);
  const IterationResult r = layers_only(slow, 4);
  const Time f = Time::from_seconds(base.stages[0].forward_compute.seconds() / 8);
  const Time b = Time::from_seconds(base.stages[0].backward_compute.seconds() / 8);
  const Time c = Time::from_seconds(layer_activations(slow) / 1e6);
  ASSERT_GT(c, f * 4 + b * 4);
  EXPECT_NEAR(r.pipeline_end.seconds(), (f + c * 8 + b).seconds(), 1e-9);
  EXPECT_GT(r.stages[0].time.exposed[kind_index(WorkKind::kOffload)], c * 7);
  expect_parts_add_up(r);
  // A link fast enough hides every copy behind the layers: the same time as without.
  const IterationResult fast = layers_only(one_gpu(Bandwidth(1e18)), 4);
  EXPECT_NEAR(fast.pipeline_end.seconds(), base.pipeline_end.seconds(), 1e-9);
}

TEST(ActivationOffloading, RefusedWhereMegatronRefusesIt) {
  const Topology topo = one_gpu(gigabytes_per_second(50));
  ParallelLayout l = offloading(8);  // every layer: Megatron allows fewer than the layers
  EXPECT_THROW(simulate_iteration(tiny(), l, topo), InputError);
  l = offloading(2);
  l.recompute = Recomputation::kFull;
  EXPECT_THROW(simulate_iteration(tiny(), l, topo), InputError);
  l = offloading(2);
  l.pp = 2;
  l.global_batch = 2;
  EXPECT_THROW(simulate_iteration(tiny(), l, test::star(2, gigabytes_per_second(100), Time::us(1))), InputError);
  // No link to host memory in the topology: nothing to offload over.
  try {
    simulate_iteration(tiny(), offloading(2), one_gpu(Bandwidth{}));
    ADD_FAILURE() << "offloading without a host link was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.pointer(), "/parallel/cpu_offloading_layers");
  }
}

TEST(ActivationOffloading, ExplainOffersTheFewestLayersThatFit) {
  // Megatron-Bridge's GB200 FSDP recipe without its offloading does not fit 186 GiB; --explain
  // finds the fewest offloaded layers that do (the recipe itself takes 40), re-simulated.
  WorkloadOverrides none;
  none.cpu_offloading_layers = 0;
  const TrainingWorkload job =
      load_training_workload(test::source_path("workloads/train/llama3-70b-64xgb200-fsdp-offload.json"),
                             test::source_path("workloads/models"), test::source_path("topologies"), none);
  const IterationOptions analytical;  // cosimulate off: each collective timed alone
  const IterationResult base = simulate_iteration(job.model, job.layout, job.topology, analytical);
  ASSERT_TRUE(base.out_of_memory);
  const std::vector<Suggestion> s = explain_layout(job.model, job.layout, job.topology, analytical, base);
  ASSERT_FALSE(s.empty());
  EXPECT_TRUE(s.front().fits);
  ASSERT_TRUE(s.front().overrides.cpu_offloading_layers.has_value());
  const int n = *s.front().overrides.cpu_offloading_layers;
  EXPECT_GT(n, 0);
  EXPECT_LE(n, 40);
  EXPECT_EQ(s.front().flags, "--cpu-offloading-layers " + std::to_string(n));
  // One layer fewer does not fit.
  ParallelLayout fewer = job.layout;
  fewer.cpu_offloading_layers = n - 1;
  EXPECT_TRUE(estimate_memory(job.model, fewer, job.topology.gpu_spec_of(job.topology.gpus()[0]), analytical).out_of_memory);
}

TEST(ActivationOffloading, PresetsGiveTheHostLink) {
  // GB200/GB300: NVLink-C2C, 900 GB/s both ways per Grace shared by two GPUs (225 GB/s per GPU
  // per direction); a DGX H100's GPU reaches the host over the PCIe Gen5 x16 path of its NIC,
  // the preset's 64 GB/s attach link.
  const Topology gb200 = load_topology(test::source_path("topologies/gb200-nvl72.json"));
  EXPECT_DOUBLE_EQ(gb200.gpu_spec_of(gb200.gpus()[0]).host_bandwidth.value(), 225e9);
  const Topology dgx = load_topology(test::source_path("topologies/dgx-h100.json"));
  EXPECT_DOUBLE_EQ(dgx.gpu_spec_of(dgx.gpus()[0]).host_bandwidth.value(), 64e9);
}

}  // namespace
}  // namespace parallax
