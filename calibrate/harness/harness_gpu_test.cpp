// Tests of parallax-nccl-bench's host code that run without a GPU: why no GPU can be used
// (exit 3's message), and the version strings of the meta line.
#include <gtest/gtest.h>

#include "harness/gpu_info.h"

namespace parallax::harness {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(HarnessGpu, NoGpuSaysWhy) {
  // The runtime answers "insufficient driver" both without a driver and with an old one.
  EXPECT_TRUE(contains(gpu_absence_reason(cudaErrorInsufficientDriver, "", "13.0"), "no NVIDIA driver is loaded"));
  const std::string old = gpu_absence_reason(cudaErrorInsufficientDriver, "12.4", "13.0");
  EXPECT_TRUE(contains(old, "driver is too old")) << old;
  EXPECT_TRUE(contains(old, "supports CUDA 12.4")) << old;
  EXPECT_TRUE(contains(old, "needs CUDA 13.0")) << old;
  EXPECT_EQ(gpu_absence_reason(cudaErrorNoDevice, "13.0", "13.0"), "no GPU visible");
  EXPECT_TRUE(contains(gpu_absence_reason(cudaErrorSystemDriverMismatch, "13.0", "13.0"), "do not match"));
  EXPECT_TRUE(contains(gpu_absence_reason(cudaErrorDevicesUnavailable, "13.0", "13.0"), "busy"));
}

TEST(HarnessGpu, NcclVersionCodes) {
  EXPECT_EQ(nccl_version_string(22809), "2.28.9");
  EXPECT_EQ(nccl_version_string(2708), "2.7.8");  // before 2.9: M·1000 + m·100 + p
}

}  // namespace
}  // namespace parallax::harness
