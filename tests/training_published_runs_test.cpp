// Published training runs (sim/training/published_runs.h): the bundled dev set reads whole, the
// documented defaults are applied, and a bad row is reported by its JSON path, not dropped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "io/input_error.h"
#include "model/parameter_count.h"
#include "training/published_runs.h"
#include "training/run_spellings.h"
#include "training/run_validation.h"
#include "training/workload_loader.h"

namespace parallax {
namespace {

const std::string kSource = PARALLAX_SOURCE_DIR;

TEST(PublishedRuns, TheDevSetReadsWhole) {
  auto runs = read_published_runs(kSource + "/workloads/validation/dev-runs.json");
  ASSERT_EQ(runs.size(), 108u);
  for (const auto& r : runs) EXPECT_EQ(r.error, "") << r.id;
  // Row 0 (Narayanan et al. 2021, Table 1): GPT 1.7B on 32 A100-80GB, tp 1, pp 1, dp null → 32.
  const PublishedRun& r = runs[0];
  EXPECT_EQ(r.id, "narayanan2021_t1_1.7B");
  EXPECT_EQ(r.preset, "dgx-a100");
  EXPECT_EQ(r.layout.dp, 32);
  EXPECT_EQ(r.layout.recompute, "full");
  EXPECT_TRUE(r.layout.micro_batch_assumed);  // null in the source: 1, and said so
  EXPECT_EQ(r.model.ffn, 4 * 2304);           // 9216, as published
  EXPECT_EQ(r.model.mlp, MlpKind::kPlain);
  // The GELU family's defaults are Megatron-LM's: dropout 0.1 on the probabilities and after
  // each residual branch.
  EXPECT_DOUBLE_EQ(r.model.attention_dropout, 0.1);
  EXPECT_DOUBLE_EQ(r.model.hidden_dropout, 0.1);
  // Megatron's count for this model: 12·l·h²(1 + 13/12h) + V·h + s·h ≈ 1.7 B (the row's name).
  const double params = static_cast<double>(count_parameters(r.model).total);
  EXPECT_NEAR(params / 1e9, 1.7, 0.1);
}

TEST(PublishedRuns, DefaultsAndBadRows) {
  auto runs = read_published_runs(kSource + "/tests/data/training/bad-published-runs.json");
  ASSERT_EQ(runs.size(), 11u);
  EXPECT_EQ(runs[0].error, "");
  EXPECT_EQ(parallel_layout_of(runs[0]).expert_gemms, ExpertGemms::kPerExpert);  // Megatron-Core's default
  EXPECT_EQ(runs[0].layout.dp, 16);                 // 32 GPUs / tp 2
  EXPECT_TRUE(runs[0].layout.sequence_parallel);    // null and tp > 1
  EXPECT_EQ(runs[0].model.kv_heads, 24);            // null: as many as heads
  EXPECT_EQ(runs[1].error, "/1/layout/tp: expected an integer or null, found \"two\"");
  EXPECT_EQ(runs[2].error.rfind("/2/cluster/gpu: unknown GPU type \"V100\" (expected A100-40GB, ", 0), 0u) << runs[2].error;
  // A cluster's topology is a bundled preset's name, never a path.
  EXPECT_EQ(runs[3].error.rfind("/3/cluster/topology: expected a bundled file's name", 0), 0u) << runs[3].error;
  EXPECT_EQ(runs[4].error, "/4/layout/attention: expected flash (or cuDNN, FA3), flash2 (FA2), unfused or null, found \"sdpa\"");
  // Out of memory and a throughput at once: one of them is wrong.
  EXPECT_EQ(runs[5].error, "/5/expected/tokens_per_sec_per_gpu: must be null for a run that ran out of memory");
  // A bundled model needs the models folder.
  EXPECT_EQ(runs[6].error, "/6/model/bundled: no bundled model \"deepseek-v3\"");
  EXPECT_EQ(runs[7].error, "/7/layout/exp_avg_sq_dtype: expected fp32, bf16, fp16, fp8 or null, found \"fp64\"");
  EXPECT_EQ(runs[8].error, "/8/layout/expert_gemm: unknown expert GEMM issue \"batched\" (expected per_expert, grouped, sequential or null)");
  // Counts of layers may be 0, written out (none in bf16, none offloaded, every layer recomputed).
  EXPECT_EQ(runs[9].error, "");
  EXPECT_EQ(parallel_layout_of(runs[9]).recompute_layers, 0);
  EXPECT_EQ(runs[10].error, "/10/layout/recompute_layers: must be at least 0, found -2");
}

// Megatron-Bridge's MoE recipes from v0.5.0 (26.06) on run the experts as CuTe DSL grouped MLPs
// under a full-iteration CUDA graph: those rows say "grouped"; the releases before, Megatron
// Core's per-expert GEMMs (the default).
TEST(PublishedRuns, ExpertGemmsAsEachReleaseRanThem) {
  for (const char* file : {"mbridge-qwen3-moe-holdout", "mbridge-qwen3-moe-dev", "mbridge-deepseek-v3-holdout"}) {
    for (const PublishedRun& r :
         read_published_runs(kSource + "/workloads/validation/" + file + ".json", kSource + "/workloads/models")) {
      EXPECT_EQ(r.error, "") << r.id;
      const bool from_26_06 = r.id.find("_26.06") != std::string::npos || r.id.find("_26.08") != std::string::npos;
      EXPECT_EQ(parallel_layout_of(r).expert_gemms, from_26_06 ? ExpertGemms::kGrouped : ExpertGemms::kPerExpert) << r.id;
      // Their all-to-alls overlapped as the recipes set moe_a2a_overlap: from 26.06 on, and the
      // H100 recipe of Qwen3-235B before.
      EXPECT_EQ(parallel_layout_of(r).moe_a2a_overlap, from_26_06 || r.id.find("235b_a22b_dgx-h100") != std::string::npos)
          << r.id;
    }
  }
}

// GPT-OSS's YaRN rotary embedding runs unfused in every Megatron-Bridge release of these rows
// (its provider's position embedding is "yarn", for which the provider turns rope fusion off);
// every other row keeps the fused kernel: 9 unfused, GPT-OSS's 5 rows of 26.06/26.08 and 4 of 25.11.
TEST(PublishedRuns, RopeFusionAsTheRecipesSetIt) {
  size_t unfused = 0;
  for (const char* file : {"mbridge-gpt-oss-holdout", "mbridge-2511-moe-holdout", "mbridge-qwen3-moe-dev"}) {
    for (const PublishedRun& r :
         read_published_runs(kSource + "/workloads/validation/" + file + ".json", kSource + "/workloads/models")) {
      ASSERT_EQ(r.error, "") << r.id;
      const bool gpt_oss = r.id.find("gpt_oss") != std::string::npos;
      EXPECT_EQ(parallel_layout_of(r).rope_fusion, !gpt_oss) << r.id;
      unfused += gpt_oss ? 1 : 0;
    }
  }
  EXPECT_EQ(unfused, 9u);
}

// The router as each Megatron-Bridge recipe runs it: fused (moe_router_fusion, set by the
// performance configs) for Qwen3, GPT-OSS, DeepSeek-V3 and Kimi K2, unfused for Nemotron 3; the
// load-balancing loss as each model's bridge sets it.
TEST(PublishedRuns, RouterAsTheRecipesRunIt) {
  size_t rows = 0;
  for (const char* file : {"mbridge-qwen3-moe-dev", "mbridge-2511-moe-holdout", "mbridge-gpt-oss-bf16-holdout",
                           "mbridge-deepseek-v3-dev", "mbridge-kimi-k2-holdout", "mbridge-nemotron-3-nano-holdout",
                           "mbridge-nemotron-3-super-holdout"}) {
    for (const PublishedRun& r :
         read_published_runs(kSource + "/workloads/validation/" + file + ".json", kSource + "/workloads/models")) {
      ASSERT_EQ(r.error, "") << r.id;
      const ParallelLayout l = parallel_layout_of(r);
      const bool nemotron = r.id.find("nemotron_3") != std::string::npos;
      const LoadBalancingLoss loss = r.id.find("gpt_oss") != std::string::npos ? LoadBalancingLoss::kNone
                                     : r.id.find("qwen3") != std::string::npos ? LoadBalancingLoss::kAux
                                                                               : LoadBalancingLoss::kSeqAux;
      EXPECT_EQ(l.moe_router_fusion, !nemotron) << r.id;
      EXPECT_EQ(l.moe_load_balancing, loss) << r.id;
      ++rows;
    }
  }
  EXPECT_EQ(rows, 10u + 12 + 20 + 25 + 4 + 21 + 30);
  // Kimi K2's rows train with Muon ("Muon optimizer was used"); the others with Adam.
  for (const PublishedRun& r : read_published_runs(kSource + "/workloads/validation/mbridge-kimi-k2-holdout.json",
                                                   kSource + "/workloads/models")) {
    EXPECT_EQ(parallel_layout_of(r).optimizer, OptimizerKind::kMuon) << r.id;
  }
}

// A row may take a bundled model's architecture (what the row's fields cannot say: MLA, the
// dense first layers, the shared expert, MTP) at its own sequence length.
TEST(PublishedRuns, ARowOfABundledModel) {
  auto runs = read_published_runs(kSource + "/tests/data/training/bad-published-runs.json", kSource + "/workloads/models");
  const PublishedRun& r = runs[6];
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.model.name, "DeepSeek-V3");
  EXPECT_EQ(r.model.layers, 61);
  EXPECT_EQ(r.model.max_sequence, 4096);
  EXPECT_EQ(r.sequence, 4096);
  ASSERT_TRUE(r.model.moe.has_value());
  EXPECT_EQ(r.model.moe->experts, 256);
  EXPECT_TRUE(r.model.mla.has_value());
  EXPECT_EQ(runs[0].error, "");  // the other rows read as before
}

TEST(PublishedRuns, LayoutOfARow) {
  auto runs = read_published_runs(kSource + "/workloads/validation/dev-runs.json");
  // Korthikanti et al.'s 22B with SP and selective recomputation: tp 8, one micro-batch of 4
  // sequences of 2048, bf16; selective recomputation implies the unfused attention core.
  const auto selective = std::find_if(runs.begin(), runs.end(),
                                      [](const PublishedRun& r) { return r.id == "korthikanti2022_t5_22B_sp_selective"; });
  ASSERT_NE(selective, runs.end());
  ParallelLayout l = parallel_layout_of(*selective);
  EXPECT_EQ(l.tp, 8);
  EXPECT_EQ(l.dp, 1);
  EXPECT_EQ(l.micro_batch, 4);
  EXPECT_EQ(l.sequence_length, 2048);
  EXPECT_TRUE(l.sequence_parallel);
  EXPECT_EQ(l.recompute, Recomputation::kSelective);
  EXPECT_EQ(l.attention, AttentionKernel::kUnfused);
  EXPECT_EQ(l.schedule, PipelineScheduleKind::kOneFOneB);
  EXPECT_EQ(l.dtype, DType::kBf16);
  // zero_stage null: a Megatron-style run, with Megatron-LM's data-parallel defaults (fp32
  // gradients, reduced after the backward); MPT's FSDP rows keep bf16 gradients, overlapped.
  EXPECT_TRUE(selective->layout.megatron_style);
  EXPECT_TRUE(l.grad_reduce_in_fp32);
  EXPECT_FALSE(l.grad_reduce_overlap);
  const auto mpt = std::find_if(runs.begin(), runs.end(), [](const PublishedRun& r) { return r.layout.fsdp; });
  ASSERT_NE(mpt, runs.end());
  EXPECT_FALSE(mpt->layout.megatron_style);
  EXPECT_FALSE(parallel_layout_of(*mpt).grad_reduce_in_fp32);
  EXPECT_TRUE(parallel_layout_of(*mpt).grad_reduce_overlap);
  const auto zero3 = std::find_if(runs.begin(), runs.end(),
                                  [](const PublishedRun& r) { return r.layout.zero_stage == 3 && !r.layout.fsdp; });
  ASSERT_NE(zero3, runs.end());  // Narayanan et al.'s DeepSpeed ZeRO-3 rows name their stage
  EXPECT_FALSE(zero3->layout.megatron_style);
  // Its full-recomputation twin keeps FlashAttention (the format does not say otherwise).
  PublishedRun full = *selective;
  full.layout.recompute = "full";
  EXPECT_EQ(parallel_layout_of(full).attention, AttentionKernel::kFlash);
  full.layout.vpp = 2;
  full.precision = "fp8";
  EXPECT_EQ(parallel_layout_of(full).schedule, PipelineScheduleKind::kInterleavedOneFOneB);
  EXPECT_EQ(parallel_layout_of(full).dtype, DType::kFp8);
  full.precision = "fp4";
  EXPECT_EQ(parallel_layout_of(full).dtype, DType::kFp4);
  EXPECT_EQ(parallel_layout_of(full).fp4_recipe, Fp4Recipe::kNvfp4);
  full.precision = "mxfp4";
  EXPECT_EQ(parallel_layout_of(full).fp4_recipe, Fp4Recipe::kMxfp4);
  full.precision = "fp8";
  full.fp8_recipe = "current";
  EXPECT_EQ(parallel_layout_of(full).fp8_recipe, Fp8Recipe::kCurrent);
}

// Qwen3's attention is wider than its hidden size (32 heads of 128 on a 2048 hidden): the row's
// head_dim is taken as given, and the parameter count is Qwen3-30B-A3B's published 30.5 B.
TEST(PublishedRuns, AHeadDimWiderThanTheHiddenSize) {
  auto runs = read_published_runs(kSource + "/workloads/validation/mbridge-qwen3-moe-dev.json");
  ASSERT_EQ(runs.size(), 10u);
  const PublishedRun& r = runs[0];
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.model.hidden, 2048);
  EXPECT_EQ(r.model.head_dim, 128);
  ASSERT_TRUE(r.model.moe.has_value());
  EXPECT_EQ(r.model.moe->experts, 128);
  EXPECT_EQ(r.model.moe->top_k, 8);
  EXPECT_NEAR(static_cast<double>(count_parameters(r.model).total) / 1e9, 30.5, 0.3);
}

// BigScience's BLOOM layout benchmarks ran Megatron-DeepSpeed on Jean Zay: the row names the
// cluster's own preset (4 Omni-Path links per 8 GPUs, not a DGX's 8 HDR NICs) and the stack's
// choices, which the layout takes over: the attention core unfused (2022, before FlashAttention),
// gradients all-reduced after the pipeline flush, in bf16 before the BF16_Optimizer of
// 2022-02-28 and in fp32 with it, when the tied embeddings also count as pipeline layers.
TEST(PublishedRuns, ARowOnItsOwnClusterWithItsStacksChoices) {
  auto runs = read_published_runs(kSource + "/workloads/validation/bloom-a100-layouts.json");
  ASSERT_EQ(runs.size(), 80u);
  // 75 measured layouts and the 5 that the source published as out of memory, without a time.
  EXPECT_EQ(std::count_if(runs.begin(), runs.end(), [](const PublishedRun& r) { return r.expected_out_of_memory; }), 5);
  for (const auto& r : runs) {
    EXPECT_EQ(r.error, "") << r.id;
    EXPECT_EQ(r.expected_out_of_memory, r.expected_tokens_per_sec_per_gpu == 0) << r.id;
    EXPECT_EQ(r.preset, "jean-zay-a100") << r.id;
    EXPECT_EQ(r.gpus, 384) << r.id;
  }
  EXPECT_TRUE(std::ifstream(kSource + "/topologies/jean-zay-a100.json").good());
  auto row = [&](const std::string& id) {
    auto it = std::find_if(runs.begin(), runs.end(), [&](const PublishedRun& r) { return r.id == id; });
    EXPECT_NE(it, runs.end()) << id;
    return parallel_layout_of(*it);
  };
  const ParallelLayout early = row("bloom-prequel-L607");  // 2022-02-21: tp 8, pp 12, dp 4, mbs 1
  EXPECT_EQ(early.zero_stage, ZeroStage::kStage1);
  EXPECT_FALSE(early.sequence_parallel);
  EXPECT_EQ(early.attention, AttentionKernel::kUnfused);
  EXPECT_FALSE(early.grad_reduce_overlap);
  EXPECT_FALSE(early.grad_reduce_in_fp32);
  EXPECT_FALSE(early.account_for_embedding);
  const ParallelLayout late = row("bloom-prequel-L946");  // 2022-02-28: h14336, 70 layers + 2 on pp 12
  EXPECT_TRUE(late.grad_reduce_in_fp32);
  EXPECT_TRUE(late.account_for_embedding);
  EXPECT_TRUE(late.account_for_loss);
  EXPECT_EQ(late.pp, 12);
}

// vTrain's measured Megatron-DeepSpeed layouts (data/ground_truth_multi.csv): 109 lines of 4 GPT
// models on 64–512 A100s of one cluster (800 Gb/s per 8-GPU node), each an iteration time that
// the row turns into tokens/s per GPU; the stack's choices as the repository states them.
TEST(PublishedRuns, VTrainLayoutsReadAsMeasured) {
  auto runs = read_published_runs(kSource + "/workloads/validation/vtrain-a100-layouts.json");
  ASSERT_EQ(runs.size(), 109u);
  std::map<std::string, int> per_model;
  for (const auto& r : runs) {
    EXPECT_EQ(r.error, "") << r.id;
    EXPECT_EQ(r.preset, "hgx-a100-4hdr") << r.id;
    ++per_model[r.model.name];
  }
  EXPECT_EQ(per_model, (std::map<std::string, int>{{"GPT 3.6B", 26}, {"GPT 18.4B", 15}, {"GPT 39.1B", 47}, {"GPT 175B", 21}}));
  EXPECT_TRUE(std::ifstream(kSource + "/topologies/hgx-a100-4hdr.json").good());
  const auto first = std::find_if(runs.begin(), runs.end(), [](const PublishedRun& r) { return r.id == "vtrain-multi-L2"; });
  ASSERT_NE(first, runs.end());
  // 3.6B, 64 GPUs, 512 sequences of 2048 tokens in 3566.5 ms.
  EXPECT_NEAR(first->expected_tokens_per_sec_per_gpu, 512.0 * 2048 / (3.5665 * 64), 0.01);
  const ParallelLayout l = parallel_layout_of(*first);
  EXPECT_EQ(l.tp, 1);
  EXPECT_EQ(l.dp, 64);
  EXPECT_EQ(l.micro_batch, 8);
  EXPECT_EQ(l.recompute, Recomputation::kFull);
  EXPECT_EQ(l.attention, AttentionKernel::kUnfused);
  EXPECT_FALSE(l.grad_reduce_overlap);
  EXPECT_FALSE(l.grad_reduce_in_fp32);
}

// `validate --emit-workload`: a row written as a workload file simulates, read back by the
// workload loader, to the very iteration that validate predicts for the row: every field of the
// model (MoE, MLA, dense layers, biases, dropout, windows, hybrid layers, latent experts,
// repeated MTP depths), of the layout (pipeline splits, CUDA graphs, offloading, recomputed
// modules, fp8 recipes, per-module precision) and of the placement survives. Rows of
// every kind the validation files hold; a row that cannot be simulated is refused, naming it.
TEST(PublishedRuns, ARowWrittenAsAWorkloadSimulatesAsTheRow) {
  const std::string scratch = ::testing::TempDir() + "/row-workload.json";
  const ValidationModel model{false, Time::from_seconds(50e-6)};
  RunValidator validator(kSource + "/topologies", 0.8, model);
  size_t compared = 0;
  for (const std::string file : {"dev-runs", "mbridge-deepseek-v3-dev", "mbridge-qwen3-moe-dev",
                                 "nemo-blackwell-fp8-holdout", "nemo-h100-long-context-holdout",
                                 "torchtitan-h200-fp8-holdout", "megascale-moe-h800-holdout", "vtrain-a100-layouts",
                                 "mbridge-nemotron-3-nano-holdout", "mbridge-nemotron-3-super-holdout",
                                 "mbridge-gpt-oss-holdout"}) {
    for (const PublishedRun& run :
         read_published_runs(kSource + "/workloads/validation/" + file + ".json", kSource + "/workloads/models")) {
      SCOPED_TRACE(run.id);
      const RunPrediction predicted = validator.predict(run);
      ASSERT_EQ(predicted.problem, "");
      std::ofstream(scratch) << workload_of_run(run, 0.8, model).dump(2);
      const TrainingWorkload w =
          load_training_workload(scratch, kSource + "/workloads/models", kSource + "/topologies");
      IterationOptions options;
      options.compute = w.compute;
      const IterationResult r = simulate_iteration(w.model, w.layout, w.topology, options);
      EXPECT_EQ(r.iteration_time, predicted.result.iteration_time);
      EXPECT_EQ(r.peak_memory.value(), predicted.result.peak_memory.value());
      ++compared;
    }
  }
  EXPECT_GT(compared, 280u);
  PublishedRun bad = read_published_runs(kSource + "/tests/data/training/bad-published-runs.json")[0];
  bad.error = "no layout";
  EXPECT_THROW(workload_of_run(bad, 0.8, model), InputError);
}

// Spearman's ρ = 1 − 6·Σd²/(n(n² − 1)) without ties; ties take their average rank.
TEST(RankAgreement, SpearmansRhoAgainstItsClosedForm) {
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(spearman({1, 2, 3, 4}, {40, 30, 20, 10}), -1.0);
  // Ranks (1, 2, 3, 4, 5) against (2, 1, 4, 3, 5): Σd² = 4, ρ = 1 − 24/120 = 0.8.
  EXPECT_NEAR(spearman({1, 2, 3, 4, 5}, {7, 3, 9, 8, 11}), 0.8, 1e-12);
  // A tie: (1, 2, 2) ranks as (1, 2.5, 2.5); against (1, 2, 3) Pearson's r of the ranks is √3/2.
  EXPECT_NEAR(spearman({1, 2, 2}, {1, 2, 3}), std::sqrt(3.0) / 2.0, 1e-12);
  EXPECT_TRUE(std::isnan(spearman({1, 1, 1}, {1, 2, 3})));  // a constant series has no order
}

// Per (source, model): ρ, and what picking the layout predicted fastest costs against the fastest
// published one. Rows of another model or published as out of memory stay out of the group.
TEST(RankAgreement, FirstChoiceShortfallIsThePickedLayoutsDistanceFromTheBest) {
  auto row = [](const std::string& model, double published, bool oom = false) {
    PublishedRun r;
    r.source = "Somebody et al. 2022, Table 1";
    r.model.name = model;
    r.expected_tokens_per_sec_per_gpu = oom ? 0 : published;
    r.expected_out_of_memory = oom;
    return r;
  };
  auto predicted = [](double tokens) {
    RunPrediction p;
    p.predicted = tokens;
    return p;
  };
  const std::vector<PublishedRun> runs = {row("A", 100), row("A", 90), row("A", 80), row("A", 0, true), row("B", 5)};
  // The model ranks A's second layout first (120 > 110 > 70): it published 90 against the best's 100.
  const std::vector<RunPrediction> predictions = {predicted(110), predicted(120), predicted(70), predicted(500),
                                                  predicted(5)};
  const std::vector<RankAgreement> ranks = rank_agreement(runs, predictions);
  ASSERT_EQ(ranks.size(), 1u);  // B has one row
  EXPECT_EQ(ranks[0].model, "A");
  EXPECT_EQ(ranks[0].source, "Somebody et al. 2022");
  EXPECT_EQ(ranks[0].rows, 3u);
  EXPECT_NEAR(ranks[0].rho, 0.5, 1e-12);  // Σd² = 2: 1 − 12/24
  EXPECT_NEAR(ranks[0].first_choice_shortfall, 90.0 / 100.0 - 1.0, 1e-12);
}

// The format's GPU names as sources spell them: case, spaces, hyphens and the vendor's and
// system's words aside; an A100 must say its memory, and an H100 PCIe or NVL is another part.
TEST(PublishedRuns, GpuNamesAsSourcesSpellThem) {
  const std::pair<const char*, const char*> spellings[] = {
      {"H100-80GB", "H100-80GB"},         {"NVIDIA H100 SXM5 80GB HBM3", "H100-80GB"}, {"h100", "H100-80GB"},
      {"H100 SXM", "H100-80GB"},          {"A100-SXM4-80GB", "A100-80GB"},             {"a100 40gb", "A100-40GB"},
      {"NVIDIA H800", "H800-80GB"},       {"H200 SXM 141GB", "H200"},                  {"DGX B200", "B200"},
      {"NVIDIA B300 SXM6 AC", "B300"},    {"GB200 NVL72", "GB200"},                    {"NVIDIA GB300", "GB300"}};
  for (const auto& [spelled, name] : spellings) {
    EXPECT_EQ(canonical_gpu_name(spelled).value_or("none"), name) << spelled;
  }
  for (const char* other : {"A100", "H100 PCIe", "H100 NVL", "V100", "MI300X", "B200X", ""}) {
    EXPECT_FALSE(canonical_gpu_name(other).has_value()) << other;
  }
}

// Number formats and fp8 recipes as the tables print them; a recipe the precision already names
// must agree with it.
TEST(PublishedRuns, NumberFormatsAsTablesPrintThem) {
  const std::tuple<const char*, const char*, const char*> formats[] = {
      {"BF16", "bf16", ""},       {"fp8", "fp8", ""},          {"FP8-CS", "fp8", "current"}, {"FP8-MX", "fp8", "mxfp8"},
      {"MXFP8", "fp8", "mxfp8"},  {"fp8_delayed", "fp8", "delayed"}, {"NVFP4", "fp4", ""}, {"MXFP4", "mxfp4", ""}};
  for (const auto& [spelled, precision, recipe] : formats) {
    const auto f = number_format(spelled);
    ASSERT_TRUE(f.has_value()) << spelled;
    EXPECT_EQ(f->precision, precision) << spelled;
    EXPECT_EQ(f->fp8_recipe, recipe) << spelled;
  }
  EXPECT_FALSE(number_format("int8").has_value());
  EXPECT_EQ(fp8_recipe_name("Current scaling").value_or(""), "current");
  EXPECT_EQ(fp8_recipe_name("tensorwise").value_or(""), "current");
  EXPECT_EQ(fp8_recipe_name("Delayed").value_or(""), "delayed");
  EXPECT_EQ(fp8_recipe_name("MXFP8").value_or(""), "mxfp8");
  EXPECT_FALSE(fp8_recipe_name("blockwise").has_value());  // DeepSeek's 128x128 blocks: not modelled
  EXPECT_EQ(attention_kernel_name("cuDNN").value_or(""), "flash");
  EXPECT_EQ(attention_kernel_name("FlashAttention-3").value_or(""), "flash");
  EXPECT_EQ(attention_kernel_name("FA2").value_or(""), "flash2");
  EXPECT_EQ(attention_kernel_name("flash-attn 2").value_or(""), "flash2");
  EXPECT_EQ(attention_kernel_name("unfused").value_or(""), "unfused");
  EXPECT_FALSE(attention_kernel_name("sdpa").has_value());  // PyTorch picks the kernel per GPU

  const std::vector<PublishedRun> runs =
      read_published_runs(kSource + "/tests/data/training/spelled-runs.json", kSource + "/workloads/models");
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].error, "");
  EXPECT_EQ(runs[0].gpu, "H100-80GB");
  EXPECT_EQ(runs[0].fp8_recipe, "current");
  EXPECT_EQ(runs[1].fp8_recipe, "current");
  EXPECT_EQ(runs[2].error, "/2/fp8_recipe: \"delayed\" contradicts the precision \"FP8-MX\"");
}

TEST(PublishedRuns, EveryGpuTypeOfTheFormatHasAPreset) {
  for (const char* gpu : {"A100-40GB", "A100-80GB", "H100-80GB", "H800-80GB", "B200", "B300", "GB200", "GB300"}) {
    auto preset = preset_for_gpu(gpu);
    ASSERT_TRUE(preset.has_value()) << gpu;
    EXPECT_TRUE(std::ifstream(kSource + "/topologies/" + *preset + ".json").good()) << *preset;
  }
}

}  // namespace
}  // namespace parallax
