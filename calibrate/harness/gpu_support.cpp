// CUDA resource owners, random inputs and event timing (gpu_support.h).
#include "harness/gpu_support.h"

#include <algorithm>
#include <cstring>

#include "harness/gpu_check.h"

namespace parallax::harness {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Out of memory is an answer (the shape does not fit), not a failure; the error is cleared so
// that the next call does not report it.
bool allocation_answer(cudaError_t status, const char* call) {
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return false;
  }
  check_call(status, call);
  return true;
}

}  // namespace

bool DeviceBuffer::allocate(size_t bytes) {
  reset();
  if (!allocation_answer(cudaMalloc(&data_, bytes), "cudaMalloc")) {
    data_ = nullptr;
    return false;
  }
  size_ = bytes;
  return true;
}

void DeviceBuffer::reset() {
  if (data_) cudaFree(data_);
  data_ = nullptr;
  size_ = 0;
}

bool PinnedBuffer::allocate(size_t bytes) {
  reset();
  if (!allocation_answer(cudaMallocHost(&data_, bytes), "cudaMallocHost")) {
    data_ = nullptr;
    return false;
  }
  size_ = bytes;
  return true;
}

void PinnedBuffer::reset() {
  if (data_) cudaFreeHost(data_);
  data_ = nullptr;
  size_ = 0;
}

TimedStream::TimedStream() { PX_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

TimedStream::~TimedStream() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  if (stream_) cudaStreamDestroy(stream_);
}

TimeStats TimedStream::time(int warmup, int iters, const std::function<void()>& body) {
  while (events_.size() < static_cast<size_t>(iters) + 1) {
    cudaEvent_t e = nullptr;
    PX_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  for (int i = 0; i < warmup; ++i) body();
  PX_CHECK(cudaStreamSynchronize(stream_));
  for (int i = 0; i < iters; ++i) {
    PX_CHECK(cudaEventRecord(events_[static_cast<size_t>(i)], stream_));
    body();
  }
  PX_CHECK(cudaEventRecord(events_[static_cast<size_t>(iters)], stream_));
  PX_CHECK(cudaEventSynchronize(events_[static_cast<size_t>(iters)]));
  std::vector<double> times;
  for (size_t i = 0; i < static_cast<size_t>(iters); ++i) {
    float ms = 0;
    PX_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    times.push_back(static_cast<double>(ms) * 1e3);
  }
  return summarize(times);
}

std::vector<unsigned char> random_block(size_t bytes, const std::string& element, uint64_t seed) {
  std::vector<unsigned char> out(bytes);
  uint64_t state = seed;
  if (element == "bf16") {
    for (size_t i = 0; i + 1 < bytes; i += 2) {
      // A float uniform in [-1, 1), truncated to its top 16 bits: a bfloat16.
      const float v = static_cast<float>(static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
      uint32_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      const auto half = static_cast<uint16_t>(bits >> 16);
      std::memcpy(&out[i], &half, sizeof half);
    }
    return out;
  }
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t r = splitmix64(state);
    std::memcpy(&out[i], &r, std::min<size_t>(8, bytes - i));
  }
  if (element == "fp8") {
    // e4m3 is s.eeee.mmm; clearing the top exponent bit keeps |v| < 2 and rules out the NaN
    // codes (0x7f, 0xff), so that products summed over k stay far from overflow.
    for (auto& b : out) b = static_cast<unsigned char>(b & 0xBF);
  }
  return out;
}

void tile_fill(void* dst, size_t bytes, const DeviceBuffer& pattern, cudaStream_t stream) {
  for (size_t done = 0; done < bytes; done += pattern.size()) {
    const size_t n = std::min(pattern.size(), bytes - done);
    PX_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + done, pattern.get(), n, cudaMemcpyDeviceToDevice, stream));
  }
  PX_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace parallax::harness
