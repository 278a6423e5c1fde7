// How published tables and users spell what a validation row names — GPUs ("NVIDIA H100 SXM5
// 80GB", "DGX B200"), number formats ("FP8-CS", "MXFP8", "NVFP4"), fp8 recipes ("tensorwise")
// and attention kernels ("cuDNN", "FA2") — and the one name the runs format
// (workloads/validation/README.md) gives each.
#pragma once

#include <optional>
#include <string>

namespace parallax {

/// A GPU as a source may spell it, as the format names it: case, spaces and hyphens aside, with
/// the vendor's and the system's words dropped ("NVIDIA H100 SXM5 80GB HBM3", "h100", "DGX B200",
/// "GB200 NVL72" → "H100-80GB", "B200", "GB200"). Nullopt when it is none of the format's GPUs or
/// does not say which (an A100 without its memory size; an H100 PCIe or NVL, which are other parts).
std::optional<std::string> canonical_gpu_name(const std::string& spelled);

/// Why `spelled` is none of the format's GPUs, naming what it takes.
std::string unknown_gpu_message(const std::string& spelled);

/// A row's number format: its precision (bf16, fp8, fp4, mxfp4) and, where the spelling names
/// one, its fp8 recipe (delayed, current, mxfp8; else empty).
struct NumberFormat {
  std::string precision;
  std::string fp8_recipe;
};

/// A precision as tables print it ("bf16", "FP8", "FP8-CS", "FP8-MX", "MXFP8", "NVFP4", "MXFP4"),
/// or nullopt.
std::optional<NumberFormat> number_format(const std::string& spelled);

/// An fp8 recipe as sources name it ("delayed", "current scaling", "tensorwise", "MXFP8"): delayed,
/// current or mxfp8, or nullopt.
std::optional<std::string> fp8_recipe_name(const std::string& spelled);

/// An attention core as sources name it: "flash" (the GPU's own fused kernel: also cuDNN, fused,
/// FA3, FlashAttention-3, FA4), "flash2" (FA2, FlashAttention-2, flash-attn 2) or "unfused"
/// (also eager, math), or nullopt (PyTorch's "sdpa" says no kernel: it picks one per GPU).
std::optional<std::string> attention_kernel_name(const std::string& spelled);

}  // namespace parallax
