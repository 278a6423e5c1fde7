// Memory-copy sweep (compute_sweeps.h): one cudaMemcpyAsync per iteration, timed by events.
// gbs (FORMAT.md) is bytes read plus bytes written for a device copy, and the one-way bytes over
// PCIe or C2C for a host copy.
#include <cstdio>
#include <cstring>

#include "harness/compute_plan.h"
#include "harness/compute_sweeps.h"
#include "harness/gpu_check.h"
#include "harness/gpu_support.h"

namespace parallax::harness {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr uint64_t kMemcpyPatternSeed = 0x5eed2027;

// The largest of `want`, want/2, … (≥ 1 MiB) that `allocate` accepts; 0 when none does.
template <typename Allocate>
size_t largest_that_fits(size_t want, Allocate&& allocate) {
  for (size_t bytes = want; bytes >= kMiB; bytes /= 2) {
    if (allocate(bytes)) return bytes;
  }
  return 0;
}

}  // namespace

RunTally run_memcpy_sweep(const ComputeRun& run, int64_t max_bytes) {
  RunTally tally;
  auto note = [&]() -> std::ostream& { return *run.progress << run.harness << ": "; };
  const std::vector<int64_t> sizes = memcpy_sizes(max_bytes);
  if (sizes.empty()) {
    note() << "memcpy: no size between 1 MiB and " << max_bytes << " B\n";
    return tally;
  }
  try {
    PX_CHECK(cudaSetDevice(run.device));
    TimedStream stream;
    DeviceBuffer src, dst, pattern;
    const size_t device_cap = largest_that_fits(static_cast<size_t>(sizes.back()), [&](size_t bytes) {
      if (src.allocate(bytes) && dst.allocate(bytes)) return true;
      src.reset();
      dst.reset();
      return false;
    });
    PinnedBuffer host;
    const size_t host_cap = largest_that_fits(static_cast<size_t>(sizes.back()), [&](size_t b) { return host.allocate(b); });
    if (device_cap == 0) throw std::runtime_error("cannot allocate two 1 MiB device buffers");
    if (!pattern.allocate(std::min<size_t>(device_cap, 32 * kMiB))) throw std::runtime_error("cannot allocate the pattern");
    const auto random = random_block(pattern.size(), "bits", kMemcpyPatternSeed);
    PX_CHECK(cudaMemcpy(pattern.get(), random.data(), random.size(), cudaMemcpyHostToDevice));
    tile_fill(src.get(), src.size(), pattern, stream.get());
    PX_CHECK(cudaMemsetAsync(dst.get(), 0, dst.size(), stream.get()));
    PX_CHECK(cudaStreamSynchronize(stream.get()));
    if (host_cap > 0) std::memset(host.get(), 0, host.size());  // touch every page before timing

    *run.table << "# memcpy on GPU " << run.device << " (" << run.gpu_name
               << "): cudaMemcpyAsync, host memory pinned; GB/s: d2d 2 x size / time (read + write), h2d and d2h"
               << " size / time (one way over the link);"
               << " warmup " << run.warmup << ", iters " << run.iters << "\n";
    char buf[256];
    std::snprintf(buf, sizeof buf, "# %4s  %12s  %10s  %10s\n", "what", "size(B)", "time(us)", "GB/s");
    *run.table << buf << std::flush;
    auto row = [&](const std::string& what, int64_t size, double time_us, double gbs) {
      std::snprintf(buf, sizeof buf, "  %4s  %12lld  %10.2f  %10.1f\n", what.c_str(), static_cast<long long>(size),
                    time_us, gbs);
      *run.table << buf << std::flush;
    };

    int failures_in_a_row = 0;
    for (const std::string what : {"d2d", "h2d", "d2h"}) {
      const size_t cap = what == "d2d" ? device_cap : std::min(device_cap, host_cap);
      double last_seconds_per_byte = 0;
      for (int64_t size : sizes) {
        if (static_cast<size_t>(size) > cap) {
          note() << "memcpy " << what << " " << size << " B: does not fit (largest buffers " << cap << " B); skipped\n";
          break;
        }
        if (const nlohmann::json* done = run.log ? run.log->find(measurement_key(memcpy_identity(what, size))) : nullptr) {
          ++tally.resumed;
          row(what, size, done->value("time_us", 0.0), done->value("gbs", 0.0));
          continue;
        }
        if (run.clock->must_stop(last_seconds_per_byte * static_cast<double>(size) * (run.warmup + run.iters))) {
          tally.stopped = true;
          tally.stop_reason = run.clock->stop_reason();
          return tally;
        }
        void* to = what == "h2d" ? dst.get() : what == "d2h" ? host.get() : dst.get();
        const void* from = what == "h2d" ? host.get() : src.get();
        const cudaMemcpyKind kind = what == "h2d"   ? cudaMemcpyHostToDevice
                                    : what == "d2h" ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
        try {
          const TimeStats t = stream.time(run.warmup, run.iters, [&] {
            PX_CHECK(cudaMemcpyAsync(to, from, static_cast<size_t>(size), kind, stream.get()));
          });
          const auto line = memcpy_line(run.run_id, what, size, run.warmup, run.iters, t);
          if (run.log) run.log->append(line);
          ++tally.measured;
          failures_in_a_row = 0;
          last_seconds_per_byte = t.mean_us * 1e-6 / static_cast<double>(size);
          row(what, size, t.mean_us, line["gbs"].get<double>());
          if (!run.quiet) {
            note() << "memcpy " << what << " " << size << " B: " << line["time_us"].get<double>() << " us, "
                   << line["gbs"].get<double>() << " GB/s\n";
          }
        } catch (const std::exception& e) {
          ++tally.failures;
          note() << "memcpy " << what << " " << size << " B failed: " << e.what() << "\n";
          if (++failures_in_a_row >= 3) {
            note() << "three copies failed in a row; abandoning the memcpy sweep\n";
            return tally;
          }
        }
      }
    }
  } catch (const std::exception& e) {
    ++tally.failures;
    note() << "memcpy sweep failed: " << e.what() << "\n";
  }
  return tally;
}

}  // namespace parallax::harness
