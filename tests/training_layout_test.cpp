// Parallel layouts: every validation error names its JSON path and reason, and the rank order
// maps ranks to coordinates as Megatron-core's RankGenerator does (TP innermost → consecutive).
#include <gtest/gtest.h>

#include <fstream>
#include <numeric>
#include <optional>
#include <set>

#include "io/input_error.h"
#include "model/model_loader.h"
#include "training/parallel_layout.h"
#include "training/pipeline_split.h"
#include "training/workload_loader.h"
#include "training/workload_writer.h"
#include "test_support.h"

namespace parallax {
namespace {

using test::bundled;

// Llama-3-8B (32 layers, 32 heads, 8 KV heads, ffn 14336) on 64 GPUs: tp 8, pp 2, dp 4.
ParallelLayout llama_layout() {
  ParallelLayout l;
  l.tp = 8;
  l.pp = 2;
  l.dp = 4;
  l.micro_batch = 1;
  l.global_batch = 64;
  l.sequence_length = 8192;
  return l;
}

// Expects validate() to throw an InputError at `pointer` whose reason contains `reason`.
void expect_error(const ParallelLayout& l, const ModelConfig& m, int gpus, const std::string& pointer,
                  const std::string& reason) {
  try {
    validate(l, m, gpus, "job.json");
    ADD_FAILURE() << "no error; expected " << pointer << ": " << reason;
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "job.json");
    EXPECT_EQ(e.pointer(), pointer) << e.what();
    EXPECT_NE(e.reason().find(reason), std::string::npos) << e.what();
  }
}

TEST(LayoutValidation, AcceptsAGoodLayout) {
  EXPECT_NO_THROW(validate(llama_layout(), bundled("llama3-8b"), 64));
}

// torchtitan's op-level checkpointing (recompute "selective_op") is modelled where the policy keeps
// what the operator list says: refused with TP but no sequence parallelism (torchtitan's TP plan
// shards the norms' sequence), experts, linear biases or the unfused core.
TEST(LayoutValidation, OpCheckpointingIsRefusedWhereThePolicyKeepsOtherTensors) {
  ParallelLayout l;
  l.dp = 8;
  l.micro_batch = 1;
  l.global_batch = 8;
  l.sequence_length = 4096;
  l.recompute = Recomputation::kSelectiveOp;
  const ModelConfig llama = bundled("llama3-8b");
  EXPECT_NO_THROW(validate(l, llama, 8));
  ParallelLayout tp = l;
  tp.tp = 2;
  tp.dp = 4;
  expect_error(tp, llama, 8, "/parallel/recompute", "needs sequence parallelism");
  tp.sequence_parallel = true;  // as torchtitan's TP plan runs it
  EXPECT_NO_THROW(validate(tp, llama, 8));
  expect_error(l, bundled("mixtral-8x7b"), 8, "/parallel/recompute", "dense layers without MLA");
  ModelConfig biased = llama;
  biased.qkv_bias = true;
  expect_error(l, biased, 8, "/parallel/recompute", "without biases");
  ParallelLayout unfused = l;
  unfused.attention = AttentionKernel::kUnfused;
  expect_error(unfused, llama, 8, "/parallel/recompute", "fused attention core");
}


TEST(LayoutValidation, TensorParallelMustDivideHeads) {
  ParallelLayout l = llama_layout();
  l.tp = 6;
  l.dp = 1;
  l.pp = 1;
  try {
    validate(l, bundled("llama3-8b"), 6, "job.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "job.json: /parallel/tp: 6 does not divide num_heads=32");
  }
}

TEST(LayoutValidation, TensorParallelAndKvHeadsMustDivideOneAnother) {
  ModelConfig m = bundled("llama3-8b");
  m.heads = 48;  // 48 heads, 8 KV heads: tp 12 divides the heads, but 12 ∤ 8 and 8 ∤ 12
  ParallelLayout l = llama_layout();
  l.tp = 12;
  l.dp = 1;
  l.pp = 1;
  expect_error(l, m, 12, "/parallel/tp", "num_kv_heads=8 do not divide one another");
  // More TP ranks than KV heads is accepted: the heads are replicated.
  l.tp = 16;
  m.heads = 32;
  EXPECT_NO_THROW(validate(l, m, 16));
}

TEST(LayoutValidation, TensorParallelMustDivideTheFfn) {
  ModelConfig m = bundled("llama3-8b");
  m.ffn = 14340;  // 14340 / 8 is not whole
  expect_error(llama_layout(), m, 64, "/parallel/tp", "does not divide ffn=14340");
}

TEST(LayoutValidation, DegreesMustMultiplyToTheGpuCount) {
  // 4·8·2·1 = 64 ≠ 32.
  expect_error(llama_layout(), bundled("llama3-8b"), 32, "/parallel",
               "dp·tp·pp·cp = 4·8·2·1 = 64 does not equal the 32 GPUs");
}

TEST(LayoutValidation, DegreesMustBePositive) {
  ParallelLayout l = llama_layout();
  l.cp = 0;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/cp", "must be at least 1");
  l = llama_layout();
  l.micro_batch = 0;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/micro_batch", "must be at least 1");
  l = llama_layout();
  l.sequence_length = 0;
  expect_error(l, bundled("llama3-8b"), 64, "/sequence_length", "must be at least 1");
}

TEST(LayoutValidation, GlobalBatchMustSplitIntoMicroBatches) {
  ParallelLayout l = llama_layout();
  l.micro_batch = 3;  // 64 sequences over dp 4 · 3 = 12
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/global_batch",
               "64 is not divisible by dp·micro_batch=4·3=12");
}

TEST(LayoutValidation, PipelineSplitsAreCheckedWhereTheyAreGiven) {
  ParallelLayout l = llama_layout();
  l.pp = 3;  // 3 ∤ 32 layers: split automatically (pipeline_split.h)
  l.dp = 1;
  l.tp = 8;
  l.global_batch = 3;
  EXPECT_NO_THROW(validate(l, bundled("llama3-8b"), 24));
  l.account_for_embedding = true;  // 33 units over 3 stages
  EXPECT_NO_THROW(validate(l, bundled("llama3-8b"), 24));
  l.account_for_loss = true;  // 34 units do not split over 3
  expect_error(l, bundled("llama3-8b"), 24, "/parallel/pp", "does not divide num_layers=32 plus the accounted");
  l.account_for_embedding = l.account_for_loss = false;
  l.first_stage_layers = 9;  // 23 left for 2 stages
  expect_error(l, bundled("llama3-8b"), 24, "/parallel/decoder_first_pipeline_num_layers", "leaves 23 of num_layers=32");
  l.first_stage_layers = -1;
  l.stage_layers = {11, 11, 10};
  EXPECT_NO_THROW(validate(l, bundled("llama3-8b"), 24));
  l.stage_layers = {11, 11, 11};
  expect_error(l, bundled("llama3-8b"), 24, "/parallel/stage_layers", "sums to 33, not num_layers=32");
  l.stage_layers = {16, 16};
  expect_error(l, bundled("llama3-8b"), 24, "/parallel/stage_layers", "has 2 entries; pp·virtual_stages=3");
  l.stage_layers = {32, 0, 0};
  expect_error(l, bundled("llama3-8b"), 24, "/parallel/stage_layers/1", "must be at least 1");
}

TEST(LayoutValidation, VirtualStagesNeedTheInterleavedSchedule) {
  ParallelLayout l = llama_layout();
  l.virtual_stages = 2;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/vpp", "need schedule interleaved_1f1b, not 1f1b");
  l.schedule = PipelineScheduleKind::kInterleavedOneFOneB;
  EXPECT_NO_THROW(validate(l, bundled("llama3-8b"), 64));  // 2·2 | 32 layers, m = 16 is a multiple of 2
  l.virtual_stages = 1;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/vpp", "needs at least 2 model chunks");
  l.virtual_stages = 3;  // 2·3 = 6 ∤ 32: split automatically
  EXPECT_NO_THROW(validate(l, bundled("llama3-8b"), 64));
  l.first_stage_layers = 15;  // stage 1 keeps 17, which do not split over its 3 chunks
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/vpp", "stage 1 holds 17 layers");
  l.first_stage_layers = -1;
  l.virtual_stages = 2;
  l.pp = 4;
  l.dp = 2;
  l.global_batch = 12;  // m = 6, not a multiple of pp = 4
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/global_batch", "(6) to be a multiple of the stages (4)");
  l.global_batch = 6;  // m = 3, fewer than the stages
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/global_batch", "at least as many micro-batches (3) as stages (4)");
  l.pp = 1;
  l.dp = 8;
  l.global_batch = 64;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/pp", "needs pp ≥ 2");
}

TEST(LayoutValidation, TheVScheduleTakesTwoChunksAStage) {
  ParallelLayout l = llama_layout();
  l.schedule = PipelineScheduleKind::kZeroBubbleV;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/vpp", "zb_v places 2 model chunks per stage in a V, not 1");
  l.virtual_stages = 2;
  EXPECT_NO_THROW(validate(l, bundled("llama3-8b"), 64));
  // Stage 0 holds virtual stages 0 and 3 of 4: 8 layers each, the V's order.
  EXPECT_EQ(split_pipeline_layers(l, 32).layers, (std::vector<int>{8, 8, 8, 8}));
  l.stage_layers = {7, 8, 8, 9};
  EXPECT_NO_THROW(validate(l, bundled("llama3-8b"), 64));
  l.stage_layers.clear();
  // The first and last layers share stage 0: a first/last stage count does not say which.
  l.first_stage_layers = 14;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/decoder_first_pipeline_num_layers", "both on stage 0");
  l.first_stage_layers = -1;
  l.virtual_stages = 3;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/vpp", "not 3");
  l.virtual_stages = 2;
  l.pp = 1;
  l.dp = 8;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/pp", "zb_v needs pp ≥ 2");
}

TEST(LayoutValidation, DualPipeVTakesTheVAndTwiceTheStagesInMicroBatches) {
  ParallelLayout l = llama_layout();  // tp 8 · pp 2 · dp 4, 16 micro-batches
  l.schedule = PipelineScheduleKind::kDualPipeV;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/vpp", "dualpipe_v places 2 model chunks per stage in a V, not 1");
  l.virtual_stages = 2;
  EXPECT_NO_THROW(validate(l, bundled("llama3-8b"), 64));
  EXPECT_EQ(split_pipeline_layers(l, 32).layers, (std::vector<int>{8, 8, 8, 8}));
  l.global_batch = 12;  // 3 micro-batches on 2 stages
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/global_batch", "dualpipe_v needs at least 2·pp=4 micro-batches");
}

// A workload with "schedule": "zb_v" gets its two chunks a stage; written back (a search's
// --emit), it names the schedule alone, and another --schedule takes the V's chunks away with it.
TEST(LayoutValidation, TheVsChunksComeAndGoWithItsSchedule) {
  const std::string path = ::testing::TempDir() + "/zb_v.json";
  std::ofstream(path) << R"({"model": "llama3-8b", "topology": {"preset": "dgx-h100", "nodes": 2},
    "parallel": {"tp": 4, "pp": 2, "global_batch": 64, "schedule": "zb_v"}})";
  auto load = [&](const std::string& schedule, std::optional<int> vpp = std::nullopt) {
    WorkloadOverrides o;
    o.schedule = schedule;
    o.vpp = vpp;
    return load_training_workload(path, test::source_path("workloads/models"), test::source_path("topologies"), o).layout;
  };
  const ParallelLayout v = load("");
  EXPECT_EQ(v.schedule, PipelineScheduleKind::kZeroBubbleV);
  EXPECT_EQ(v.virtual_stages, 2);
  EXPECT_FALSE(parallel_block(v).contains("vpp"));
  EXPECT_EQ(parallel_block(v)["schedule"], "zb_v");
  const ParallelLayout h1 = load("zb_h1");
  EXPECT_EQ(h1.schedule, PipelineScheduleKind::kZeroBubbleH1);
  EXPECT_EQ(h1.virtual_stages, 1);
  const ParallelLayout interleaved = load("interleaved_1f1b", 4);
  EXPECT_EQ(interleaved.virtual_stages, 4);
  // From an interleaved file's vpp 4 to a V: its two chunks.
  std::ofstream(path) << R"({"model": "llama3-8b", "topology": {"preset": "dgx-h100", "nodes": 2},
    "parallel": {"tp": 4, "pp": 2, "global_batch": 64, "schedule": "interleaved_1f1b", "vpp": 4}})";
  EXPECT_EQ(load("zb_v").virtual_stages, 2);
  EXPECT_EQ(load("").virtual_stages, 4);
  // ... and to ZB-H1 one chunk: not interleaved again behind the command line's back.
  EXPECT_EQ(load("zb_h1").schedule, PipelineScheduleKind::kZeroBubbleH1);
  EXPECT_EQ(load("zb_h1").virtual_stages, 1);
  // A V's two chunks carry over to interleaving.
  std::ofstream(path) << R"({"model": "llama3-8b", "topology": {"preset": "dgx-h100", "nodes": 2},
    "parallel": {"tp": 4, "pp": 2, "global_batch": 64, "schedule": "zb_v"}})";
  EXPECT_EQ(load("interleaved_1f1b").virtual_stages, 2);
  // --vpp 1 with a V is refused, not turned back into 2.
  EXPECT_THROW(load("", 1), InputError);
  // DualPipeV's V likewise: two chunks, written back as its schedule alone.
  const ParallelLayout dual = load("dualpipe_v");
  EXPECT_EQ(dual.schedule, PipelineScheduleKind::kDualPipeV);
  EXPECT_EQ(dual.virtual_stages, 2);
  EXPECT_FALSE(parallel_block(dual).contains("vpp"));
  EXPECT_EQ(parallel_block(dual)["schedule"], "dualpipe_v");
}

// Megatron's account_for_embedding/loss_in_pipeline_split from the command line: 30 layers and
// the two ends over 4 stages, 8 units each, so the ends' stages hold 7 layers.
TEST(LayoutValidation, TheEndsCountedInTheSplitFromTheCommandLine) {
  const std::string path = ::testing::TempDir() + "/ends.json";
  std::ofstream(path) << R"({"model": {"name": "thirty", "layers": 30, "hidden": 1024, "heads": 16, "kv_heads": 16,
    "ffn": 4096, "vocab": 32000, "max_sequence": 4096}, "topology": {"preset": "dgx-h100", "nodes": 1},
    "parallel": {"tp": 2, "pp": 4, "global_batch": 64}})";
  WorkloadOverrides o;
  o.account_for_embedding = true;
  o.account_for_loss = true;
  const ParallelLayout l =
      load_training_workload(path, test::source_path("workloads/models"), test::source_path("topologies"), o).layout;
  EXPECT_TRUE(l.account_for_embedding && l.account_for_loss);
  EXPECT_EQ(split_pipeline_layers(l, 30).layers, (std::vector<int>{7, 8, 8, 7}));
}

TEST(LayoutValidation, ExpertParallelRules) {
  ModelConfig mixtral = bundled("mixtral-8x7b");  // 8 experts
  ParallelLayout l = llama_layout();
  l.ep = 2;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/ep", "needs a mixture-of-experts model");
  l.ep = 3;
  expect_error(l, mixtral, 64, "/parallel/ep", "3 does not divide num_experts=8");
  l.ep = 8;  // dp·cp = 4
  expect_error(l, mixtral, 64, "/parallel/ep", "8 does not divide dp·cp=4");
  l.ep = 4;
  EXPECT_NO_THROW(validate(l, mixtral, 64));
}

TEST(LayoutValidation, SequenceMustSplitOverContextAndTensorRanks) {
  ParallelLayout l = llama_layout();
  l.dp = 2;
  l.cp = 2;
  l.sequence_length = 8190;  // not a multiple of 2·cp = 4
  expect_error(l, bundled("llama3-8b"), 64, "/sequence_length", "8190 is not a multiple of 2·cp=4");
  l = llama_layout();
  l.sequence_parallel = true;
  l.sequence_length = 8188;  // 8188 tokens, not a multiple of tp = 8
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/sequence_parallel", "multiple of tp=8");
}

TEST(LayoutValidation, RankOrderMustNameTheDimensions) {
  ParallelLayout l = llama_layout();
  l.rank_order = "tp-xp-dp-pp";
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/rank_order", "unknown dimension \"xp\"");
  l.rank_order = "tp-dp-tp-pp";
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/rank_order", "tp is listed twice");
  l.rank_order = "tp-dp";
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/rank_order", "must list pp");
  l.rank_order = "tp-dp-pp";  // cp and ep may be left out at degree 1
  EXPECT_NO_THROW(validate(l, bundled("llama3-8b"), 64));
  l.dp = 2;
  l.cp = 2;
  expect_error(l, bundled("llama3-8b"), 64, "/parallel/rank_order", "must list cp, whose degree is above 1");
}

TEST(RankMapping, TensorParallelRanksAreConsecutive) {
  // Order tp-cp-ep-dp-pp with tp 8, dp 4, pp 2: rank = tp + 8·dp + 32·pp.
  ParallelLayout l = llama_layout();
  RankMapping map(l);
  EXPECT_EQ(map.rank_of({3, 0, 2, 1}), 3 + 8 * 2 + 32 * 1);
  EXPECT_EQ(map.coords_of(43), (RankCoords{3, 0, 1, 1}));  // 43 = 3 + 8·1 + 32·1
  EXPECT_EQ(map.group(ParallelDim::kTp, 43), (std::vector<int>{40, 41, 42, 43, 44, 45, 46, 47}));
  EXPECT_EQ(map.group(ParallelDim::kDp, 43), (std::vector<int>{35, 43, 51, 59}));
  EXPECT_EQ(map.group(ParallelDim::kPp, 43), (std::vector<int>{11, 43}));
  EXPECT_EQ(rank_of(l, coords_of(l, 17)), 17);
}

TEST(RankMapping, IsABijectionForEveryOrder) {
  ParallelLayout l = llama_layout();
  l.tp = 2;
  l.cp = 2;
  l.dp = 3;
  l.pp = 2;
  for (const char* order : {"tp-cp-ep-dp-pp", "tp-pp-dp-cp", "pp-dp-cp-tp", "dp-tp-cp-pp"}) {
    SCOPED_TRACE(order);
    l.rank_order = order;
    RankMapping map(l);
    std::set<RankCoords> seen;
    for (int r = 0; r < 24; ++r) {
      RankCoords c = map.coords_of(r);
      EXPECT_EQ(map.rank_of(c), r);
      seen.insert(c);
    }
    EXPECT_EQ(seen.size(), 24u);
  }
  // "pp-dp-cp-tp" puts stages next to each other: rank = pp + 2·dp + 6·cp + 12·tp.
  l.rank_order = "pp-dp-cp-tp";
  EXPECT_EQ(RankMapping(l).rank_of({1, 1, 2, 1}), 1 + 2 * 2 + 6 * 1 + 12 * 1);
  EXPECT_EQ(RankMapping(l).group(ParallelDim::kTp, 0), (std::vector<int>{0, 12}));
}

TEST(RankMapping, ExpertGroupsComeFromTheDataAndContextRanks) {
  // tp 2, cp 2, dp 4, pp 2, ep 4 in order tp-cp-ep-dp-pp (Megatron-core):
  //   dense  rank = tp + 2·cp + 4·dp + 16·pp
  //   expert rank = tp + 2·ep + 8·edp + 16·pp   with edp over dp·cp/ep = 2
  ParallelLayout l;
  l.tp = 2;
  l.cp = 2;
  l.dp = 4;
  l.pp = 2;
  l.ep = 4;
  RankMapping map(l);
  EXPECT_EQ(map.group(ParallelDim::kEp, 0), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(map.group(ParallelDim::kEp, 9), (std::vector<int>{9, 11, 13, 15}));  // 9 = tp 1 + 8·edp 1
  EXPECT_EQ(map.expert_coords_of(27), (ExpertRankCoords{1, 1, 1, 1}));           // 27 = 1 + 2 + 8 + 16
  EXPECT_EQ(map.group(ParallelDim::kCp, 0), (std::vector<int>{0, 2}));
  // Every expert group stays inside one pipeline stage and one TP coordinate.
  for (int r = 0; r < 32; ++r) {
    for (int peer : map.group(ParallelDim::kEp, r)) {
      EXPECT_EQ(map.coords_of(peer).pp, map.coords_of(r).pp);
      EXPECT_EQ(map.coords_of(peer).tp, map.coords_of(r).tp);
    }
  }
}

TEST(PipelineSplit, MegatronsRules) {
  ParallelLayout l;
  l.pp = 16;
  // Llama-3 405B's 126 layers on pp 16 with the embedding and the loss accounted (Megatron's
  // account_for_embedding/loss_in_pipeline_split): 128/16 = 8 per stage, the ends 7.
  l.account_for_embedding = l.account_for_loss = true;
  PipelineSplit s = split_pipeline_layers(l, 126);
  EXPECT_EQ(s.rule, "embedding and loss counted");
  EXPECT_EQ(s.layers, (std::vector<int>{7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7}));
  EXPECT_EQ(split_text(s.layers), "7, 8×14, 7");
  // The same on pp 8 · vpp 2: chunk c of stage s is virtual stage c·8 + s; only the very first
  // and very last virtual stages give a layer to the ends.
  l.pp = 8;
  l.virtual_stages = 2;
  s = split_pipeline_layers(l, 126);
  EXPECT_EQ(s.layers.front(), 7);
  EXPECT_EQ(s.layers.back(), 7);
  EXPECT_EQ(std::accumulate(s.layers.begin(), s.layers.end(), 0), 126);
  // decoder_first/last_pipeline_num_layers: DeepSeek-V3's 61 layers on pp 16 with 3 and 2 on
  // the ends leave 56 = 14 · 4 for the middle.
  l = ParallelLayout{};
  l.pp = 16;
  l.first_stage_layers = 3;
  l.last_stage_layers = 2;
  s = split_pipeline_layers(l, 61);
  EXPECT_EQ(s.rule, "first/last");
  EXPECT_EQ(split_text(s.layers), "3, 4×14, 2");
  l.last_stage_layers = -1;  // the last stage shares the rest with the middle: 58 over 15 ✗
  EXPECT_FALSE(split_pipeline_layers(l, 61).problem.empty());
  // Nothing given and 16 ∤ 61: automatic, the embedding and the loss as a layer each:
  // 63 = 16·3 + 15, the 14 middle stages and the first end take the spare ones.
  l = ParallelLayout{};
  l.pp = 16;
  s = split_pipeline_layers(l, 61);
  EXPECT_EQ(s.rule, "automatic");
  EXPECT_EQ(split_text(s.layers), "3, 4×14, 2");
  EXPECT_EQ(std::accumulate(s.layers.begin(), s.layers.end(), 0), 61);
  // Even when it divides.
  s = split_pipeline_layers(l, 64);
  EXPECT_EQ(s.rule, "even");
  EXPECT_EQ(s.layers, std::vector<int>(16, 4));
  // Too many stages for the layers.
  EXPECT_FALSE(split_pipeline_layers(l, 10).problem.empty());
  // 60 layers (DeepSeek-V2) over pp 16 · vpp 4: 62 units cannot fill 64 virtual stages, and the
  // ends would hold −1 layers. Over pp 2 · vpp 31 they fill exactly: the first virtual stage holds
  // only the embedding, the last only the loss.
  l.virtual_stages = 4;
  s = split_pipeline_layers(l, 60);
  EXPECT_EQ(s.field, "virtual_stages");
  EXPECT_NE(s.problem.find("more virtual stages than num_layers=60 can fill"), std::string::npos) << s.problem;
  l.pp = 2;
  l.virtual_stages = 31;
  s = split_pipeline_layers(l, 60);
  EXPECT_TRUE(s.problem.empty()) << s.problem;
  EXPECT_EQ(split_text(s.layers), "0, 1×60, 0");
}

TEST(RankMapping, ExpertTensorParallelismFoldsTheExpertGrid) {
  // Megatron-core's MoE parallel folding: tp 2, dp 4, ep 2 in order tp-cp-ep-dp-pp.
  //   etp 1: expert rank = ep + 2·edp (edp over tp·dp/(etp·ep) = 4): the EP pair is the TP pair.
  //   etp 2: expert rank = etp + 2·ep + 4·edp (edp 2), as without folding.
  ParallelLayout l;
  l.tp = 2;
  l.dp = 4;
  l.ep = 2;
  l.expert_tp = 1;
  EXPECT_EQ(l.expert_data_parallel(), 4);
  RankMapping folded(l);
  EXPECT_EQ(folded.group(ParallelDim::kEp, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(folded.group(ParallelDim::kEp, 6), (std::vector<int>{6, 7}));
  EXPECT_EQ(folded.expert_tp_group(5), (std::vector<int>{5}));
  EXPECT_EQ(folded.expert_coords_of(5), (ExpertRankCoords{0, 1, 2, 0}));
  l.expert_tp = 0;
  RankMapping same(l);
  EXPECT_EQ(same.group(ParallelDim::kEp, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(same.expert_tp_group(5), same.group(ParallelDim::kTp, 5));
  // etp·ep must divide tp·cp·dp.
  l.expert_tp = 4;
  l.ep = 4;
  EXPECT_THROW(RankMapping{l}, std::invalid_argument);
}

TEST(RankMapping, VirtualStageLayersSplitEvenlyOrAsGiven) {
  ParallelLayout l = llama_layout();
  l.schedule = PipelineScheduleKind::kInterleavedOneFOneB;
  l.virtual_stages = 4;
  EXPECT_EQ(virtual_stage_layers(l, bundled("llama3-8b")), std::vector<int>(8, 4));  // 32 / (2·4)
  l.stage_layers = {5, 3, 4, 4, 4, 4, 4, 4};
  EXPECT_EQ(virtual_stage_layers(l, bundled("llama3-8b")), l.stage_layers);
}

}  // namespace
}  // namespace parallax
