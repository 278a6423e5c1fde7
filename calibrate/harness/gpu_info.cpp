// GPU and software-stack facts for the meta line (gpu_info.h).
#include "harness/gpu_info.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "harness/gpu_check.h"

namespace parallax::harness {

GpuInfo gpu_info(int device) {
  cudaDeviceProp prop{};
  PX_CHECK(cudaGetDeviceProperties(&prop, device));
  GpuInfo info;
  info.device = device;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  char bus[64] = {};
  PX_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  info.bus_id = bus;
  return info;
}

int visible_gpu_count(std::string& why_not) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  std::string hint;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    hint = *visible ? std::string("; CUDA_VISIBLE_DEVICES=") + visible : "; CUDA_VISIBLE_DEVICES is empty";
  }
  if (status != cudaSuccess) {
    why_not = gpu_absence_reason(status, cuda_driver_version(), cuda_runtime_version()) + "; cudaGetDeviceCount: " +
              cudaGetErrorName(status) + hint;
    return 0;
  }
  if (count == 0) why_not = "cudaGetDeviceCount found 0 devices" + hint;
  return count;
}

std::string gpu_absence_reason(cudaError_t status, const std::string& driver_cuda, const std::string& runtime_cuda) {
  switch (status) {
    case cudaErrorInsufficientDriver:
      // The runtime says the same when there is no driver at all; the driver's own version
      // (0 without one) tells the two apart.
      if (driver_cuda.empty()) return "no NVIDIA driver is loaded (no GPU, or its driver is not installed)";
      return "the NVIDIA driver is too old for this binary: it supports CUDA " + driver_cuda +
             ", the binary needs CUDA " + runtime_cuda + "; update the driver (or build against an older CUDA)";
    case cudaErrorNoDevice:
      return "no GPU visible";
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemDriverMismatch:
      return "the CUDA user-mode driver and the kernel driver do not match (a forward-compatibility package on a "
             "GPU or driver that does not allow it?)";
    case cudaErrorDevicesUnavailable:
      return "the GPUs are busy or unavailable (exclusive-process mode, or taken by another process)";
    default:
      return std::string("CUDA cannot start: ") + cudaGetErrorString(status);
  }
}

std::string driver_version() {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.03  Thu Nov 13 ...", or
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.03  Release Build ...":
  // the first word after "Kernel Module" that is a dotted number.
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t at = line.find("Kernel Module");
  if (at == std::string::npos) return "";
  std::istringstream words(line.substr(at));
  for (std::string w; words >> w;) {
    if (!w.empty() && w[0] >= '0' && w[0] <= '9' && w.find('.') != std::string::npos &&
        w.find_first_not_of("0123456789.") == std::string::npos) {
      return w;
    }
  }
  return "";
}

namespace {
std::string cuda_version_text(int code) {
  return std::to_string(code / 1000) + "." + std::to_string((code % 1000) / 10);
}
}  // namespace

std::string cuda_runtime_version() {
  int v = 0;
  return cudaRuntimeGetVersion(&v) == cudaSuccess ? cuda_version_text(v) : "";
}

std::string cuda_driver_version() {
  int v = 0;
  return cudaDriverGetVersion(&v) == cudaSuccess && v > 0 ? cuda_version_text(v) : "";
}

std::string nccl_version_string(int code) {
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

std::string nccl_version() {
  int code = 0;
  return ncclGetVersion(&code) == ncclSuccess ? nccl_version_string(code) : "";
}

}  // namespace parallax::harness
