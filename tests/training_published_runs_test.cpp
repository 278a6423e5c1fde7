// Published training runs (sim/training/published_runs.h): the bundled dev set reads whole, the
// documented defaults are applied, and a bad row is reported by its JSON path, not dropped.
#include <gtest/gtest.h>

#include <fstream>

#include "training/parameter_count.h"
#include "training/published_runs.h"

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
  // Megatron's count for this model: 12·l·h²(1 + 13/12h) + V·h + s·h ≈ 1.7 B (the row's name).
  const double params = static_cast<double>(count_parameters(r.model).total);
  EXPECT_NEAR(params / 1e9, 1.7, 0.1);
}

TEST(PublishedRuns, DefaultsAndBadRows) {
  auto runs = read_published_runs(kSource + "/tests/data/training/bad-published-runs.json");
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].error, "");
  EXPECT_EQ(runs[0].layout.dp, 16);                 // 32 GPUs / tp 2
  EXPECT_TRUE(runs[0].layout.sequence_parallel);    // null and tp > 1
  EXPECT_EQ(runs[0].model.kv_heads, 24);            // null: as many as heads
  EXPECT_EQ(runs[1].error, "/1/layout/tp: expected an integer or null, found \"two\"");
  EXPECT_EQ(runs[2].error, "/2/cluster/gpu: unknown GPU type \"V100\"");
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
