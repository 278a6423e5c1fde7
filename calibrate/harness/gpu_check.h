// One error path for every CUDA runtime, NCCL and cuBLASLt call of parallax-nccl-bench:
// PX_CHECK(call) throws std::runtime_error naming the call as written in the source and the
// library's own error name and text, so that a failure on a borrowed machine says what failed.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace parallax::harness {

inline void check_call(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                           cudaGetErrorString(status) + ")");
}

inline void check_call(ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  // NCCL keeps the detail (which transport, which peer) in its last-error text.
  const char* detail = ncclGetLastError(nullptr);
  throw std::runtime_error(std::string(call) + " failed: " + ncclGetErrorString(status) +
                           (detail && *detail ? std::string(": ") + detail : std::string()));
}

inline void check_call(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(call) + " failed: " + cublasLtGetStatusName(status) + " (" +
                           cublasLtGetStatusString(status) + ")");
}

}  // namespace parallax::harness

#define PX_CHECK(call) ::parallax::harness::check_call((call), #call)
