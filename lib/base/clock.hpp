// The clocks numarena reads: monotonic nanoseconds, exact or coarse. One place, so every
// timeout and rate in the library counts the same time.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace numarena {

// std::chrono::steady_clock (CLOCK_MONOTONIC) in nanoseconds. Allocation-free.
inline std::int64_t MonotonicNanos() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CLOCK_MONOTONIC_COARSE in nanoseconds: a few nanoseconds to read, advancing a kernel tick
// (1-10 ms) at a time. For sweeps and ages counted in seconds. Allocation-free.
inline std::int64_t CoarseMonotonicNanos() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace numarena
