// GPU, number-format and recipe spellings of validation rows (run_spellings.h).
#include "training/run_spellings.h"

#include <cctype>

namespace parallax {
namespace {

// Lower case, letters and digits only: how a label compares whatever its spelling.
std::string squeezed(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

std::optional<std::string> canonical_gpu_name(const std::string& spelled) {
  std::string s = squeezed(spelled);
  // Longer words first, so that "sxm5" goes whole and "hbm3e" does not leave an "e".
  for (const char* word : {"nvidia", "tensorcore", "gpu", "dgx", "hgx", "nvl72", "sxm6", "sxm5", "sxm4", "sxm", "hbm3e",
                           "hbm3", "ac"}) {
    if (const size_t at = s.find(word); at != std::string::npos) s.erase(at, std::string(word).size());
  }
  const auto part_with_memory_or_none = [&s](const std::string& part, const std::string& memory) {
    return s == part || s == part + memory;
  };
  if (s == "a10040gb") return "A100-40GB";
  if (s == "a10080gb") return "A100-80GB";
  if (part_with_memory_or_none("h100", "80gb")) return "H100-80GB";
  if (part_with_memory_or_none("h800", "80gb")) return "H800-80GB";
  if (part_with_memory_or_none("h200", "141gb")) return "H200";
  for (const char* part : {"B200", "B300", "GB200", "GB300"}) {
    if (s == squeezed(part)) return std::string(part);
  }
  return std::nullopt;
}

std::string unknown_gpu_message(const std::string& spelled) {
  const std::string s = squeezed(spelled);
  if (s.find("a100") != std::string::npos && s.find("gb") == std::string::npos) {
    return "\"" + spelled + "\" does not say which A100: A100-40GB or A100-80GB";
  }
  return "unknown GPU type \"" + spelled +
         "\" (expected A100-40GB, A100-80GB, H100-80GB, H800-80GB, H200, B200, B300, GB200 or GB300, in any case, with or "
         "without the vendor's words: \"NVIDIA H100 SXM5 80GB\", \"DGX B200\")";
}

std::optional<NumberFormat> number_format(const std::string& spelled) {
  static const std::pair<const char*, NumberFormat> kFormats[] = {
      {"bf16", {"bf16", ""}},        {"bfloat16", {"bf16", ""}},          {"fp8", {"fp8", ""}},
      {"float8", {"fp8", ""}},       {"fp8cs", {"fp8", "current"}},       {"fp8current", {"fp8", "current"}},
      {"fp8ds", {"fp8", "delayed"}}, {"fp8delayed", {"fp8", "delayed"}}, {"fp8mx", {"fp8", "mxfp8"}},
      {"mxfp8", {"fp8", "mxfp8"}},   {"fp4", {"fp4", ""}},                {"nvfp4", {"fp4", ""}},
      {"mxfp4", {"mxfp4", ""}}};
  const std::string key = squeezed(spelled);
  for (const auto& [name, format] : kFormats) {
    if (key == name) return format;
  }
  return std::nullopt;
}

std::optional<std::string> fp8_recipe_name(const std::string& spelled) {
  const std::string key = squeezed(spelled);
  if (key == "delayed" || key == "delayedscaling") return "delayed";
  if (key == "current" || key == "currentscaling" || key == "cs" || key == "tensorwise" || key == "pertensor") {
    return "current";
  }
  if (key == "mxfp8" || key == "mx") return "mxfp8";
  return std::nullopt;
}

std::optional<std::string> attention_kernel_name(const std::string& spelled) {
  const std::string key = squeezed(spelled);
  for (const char* own : {"flash", "cudnn", "fused", "fa3", "flashattention3", "flashattn3", "fa4", "flashattention4"}) {
    if (key == own) return "flash";
  }
  for (const char* fa2 : {"flash2", "fa2", "flashattention2", "flashattn2"}) {
    if (key == fa2) return "flash2";
  }
  if (key == "unfused" || key == "eager" || key == "math") return "unfused";
  return std::nullopt;
}

}  // namespace parallax
