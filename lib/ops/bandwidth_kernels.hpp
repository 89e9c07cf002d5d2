// The measuring instruments behind bandwidth.hpp, shared with bench/bandwidth_bench.cpp.
//
// Streaming kernels are plain loops over whole cache lines (8 doubles or 8 words), which
// GCC and Clang vectorise at -O2 without target flags. They live in their own translation
// unit and the read kernel returns its sum, so no optimiser can prove a pass useless.
// The arrays are numarena::NodeBuffer (AllocateOnNode: bound to one node before the first
// touch, populated and verified), so the timed passes never fault. `PointerChase` turns a
// buffer into one random cycle through all its cache lines: each load depends on the
// previous one, so the time per step is the load-to-use latency of wherever the lines live.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "numarena/first_touch.hpp"
#include "numarena/status.hpp"

namespace numarena::bandwidth_internal {

inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kDoublesPerLine = kCacheLine / sizeof(double);

// `count` is a multiple of kDoublesPerLine (8) in all kernels.
// Returns the sum of the words (so the loads cannot be removed).
std::uint64_t ReadKernel(const std::uint64_t* a, std::size_t count);
void WriteKernel(double* a, std::size_t count, double value);
void CopyKernel(double* __restrict dst, const double* __restrict src, std::size_t count);
void TriadKernel(double* __restrict a, const double* __restrict b, const double* __restrict c,
                 double scalar, std::size_t count);

// libc's own, for the machine limit: memset(a, value, bytes) and memcpy(dst, src, bytes),
// called through a function pointer the compiler cannot see through.
void LibcMemset(void* a, int value, std::size_t bytes);
void LibcMemcpy(void* dst, const void* src, std::size_t bytes);

// Whether a timed figure starts another pass after one that took `last_pass` and ended at
// `now`: only when a pass as long still ends by `deadline`. (Going on while now < deadline
// overran each figure's share by up to a pass.) The first pass always runs.
inline bool AnotherPassFits(std::chrono::steady_clock::time_point now,
                            std::chrono::steady_clock::duration last_pass,
                            std::chrono::steady_clock::time_point deadline) {
  return now + last_pass <= deadline;
}

// Size of the largest cache of CPU 0 in bytes (sysfs cache/index*/size), 0 when unknown.
std::size_t LastLevelCacheBytes();

// Fraction of the pages of `buffer` (numarena::AllocateOnNode: bound to its node, populated
// and verified there) the kernel reports on buffer.node() now; 0 when it cannot say.
double FractionOnNode(const NodeBuffer& buffer);

// A dependent random walk through the cache lines of a buffer.
class PointerChase {
 public:
  // Links the first `bytes` (whole cache lines, at least 2) of `buffer` into one cycle in
  // random order (Sattolo's algorithm, fixed seed, so runs are comparable).
  static PointerChase Build(void* buffer, std::size_t bytes);

  // Follows `steps` links from the current position; returns where it stopped so the
  // loads stay live. Each step is one dependent load.
  const void* Walk(std::size_t steps);

  std::size_t lines() const { return lines_; }

 private:
  PointerChase(const void* start, std::size_t lines) : position_(start), lines_(lines) {}
  const void* position_;
  std::size_t lines_;
};

}  // namespace numarena::bandwidth_internal
