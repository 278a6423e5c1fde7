// What parallax-nccl-bench records about the GPUs and the software stack it measured: device
// names and PCI ids, compute capability, and the driver, CUDA and NCCL versions.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace parallax::harness {

struct GpuInfo {
  int device = 0;
  std::string name;    ///< "NVIDIA H200"
  std::string bus_id;  ///< "0000:19:00.0"
  int cc_major = 0;
  int cc_minor = 0;
  int64_t memory_bytes = 0;
};

/// Properties of CUDA device `device`. Throws std::runtime_error naming the failing call.
GpuInfo gpu_info(int device);

/// The number of GPUs CUDA sees; 0 with `why_not` set when there are none or CUDA cannot
/// start (no driver, CUDA_VISIBLE_DEVICES empty, driver too old for this runtime, …).
int visible_gpu_count(std::string& why_not);

/// Why CUDA sees no GPU, in words, for cudaGetDeviceCount's `status` and the CUDA versions of
/// the driver ("" when there is no driver) and the runtime: no driver, a driver older than the
/// runtime (both versions named), no device, a user-mode/kernel driver mismatch, busy devices,
/// or CUDA's own text.
std::string gpu_absence_reason(cudaError_t status, const std::string& driver_cuda, const std::string& runtime_cuda);

/// The kernel driver's version ("580.159.03") from /proc/driver/nvidia/version, or empty.
std::string driver_version();
/// CUDA versions as "major.minor": of the runtime linked in, and the newest the driver supports.
std::string cuda_runtime_version();
std::string cuda_driver_version();
/// The NCCL library loaded at run time ("2.28.9"), which may differ from the headers built against.
std::string nccl_version();
/// "major.minor.patch" of an NCCL version code (2.9+: M·10000 + m·100 + p; older: M·1000 + m·100 + p).
std::string nccl_version_string(int code);

}  // namespace parallax::harness
