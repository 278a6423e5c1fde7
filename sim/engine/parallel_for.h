// Independent work items on a few threads, with results that do not depend on the thread count:
// each item writes its own slot, and the first failure by index is the one rethrown.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace parallax {

/// Runs body(worker, i) for i in [0, n) on `threads` threads, worker being the thread's number
/// (0 is the caller's); the first exception (by index) is rethrown after every thread joined.
template <typename Body>
void parallel_for(size_t n, int threads, const Body& body) {
  std::vector<std::exception_ptr> failed(n);
  std::atomic<size_t> next{0};
  auto work = [&](size_t worker) {
    for (size_t i = next++; i < n; i = next++) {
      try {
        body(worker, i);
      } catch (...) {
        failed[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, static_cast<size_t>(t));
  work(0);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : failed) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace parallax
