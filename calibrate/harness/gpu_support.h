// Small owners of CUDA resources for the compute sweeps (device and pinned buffers, a stream,
// events), the pseudo-random fill of inputs, and the event timing loop. Every call is checked
// (gpu_check.h); destructors release quietly.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/collective_sweep.h"

namespace parallax::harness {

/// cudaMalloc'd memory, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// Allocates `bytes`; false when the GPU has not that much free (CUDA's error is cleared),
  /// std::runtime_error for any other failure.
  bool allocate(size_t bytes);
  void reset();
  void* get() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

/// cudaMallocHost'd (page-locked) memory, freed on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  bool allocate(size_t bytes);  ///< as DeviceBuffer::allocate
  void reset();
  void* get() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

/// A non-blocking stream and the events its timing loop records.
class TimedStream {
 public:
  TimedStream();
  ~TimedStream();
  TimedStream(const TimedStream&) = delete;
  TimedStream& operator=(const TimedStream&) = delete;
  cudaStream_t get() const { return stream_; }

  /// Runs `body` (which enqueues one iteration on this stream) `warmup` times, then `iters`
  /// times between events; returns the per-iteration stats in µs.
  TimeStats time(int warmup, int iters, const std::function<void()>& body);

 private:
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
};

/// `bytes` pseudo-random bytes from a fixed seed (splitmix64), shaped by `element`:
/// "bf16": values uniform in [-1, 1); "fp8": e4m3 values of magnitude below 2 (never NaN);
/// anything else: raw bits.
std::vector<unsigned char> random_block(size_t bytes, const std::string& element, uint64_t seed);

/// Fills `bytes` of device memory at `dst` by repeating the device `pattern` (copies on
/// `stream`, then a sync).
void tile_fill(void* dst, size_t bytes, const DeviceBuffer& pattern, cudaStream_t stream);

}  // namespace parallax::harness
