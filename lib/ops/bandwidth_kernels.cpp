// Streaming kernels, node-bound buffers and the pointer chase (see bandwidth_kernels.hpp).
#include "ops/bandwidth_kernels.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/checked_math.hpp"
#include "numarena/page_nodes.hpp"
#include "os/os.hpp"

namespace numarena::bandwidth_internal {

std::uint64_t ReadKernel(const std::uint64_t* a, std::size_t count) {
  // Eight independent integer lanes, one per word of a line, held in registers: integer
  // addition reassociates freely, so the lanes vectorise, and the sum is returned so every
  // load is needed.
  std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  for (std::size_t i = 0; i < count; i += kDoublesPerLine) {
    s0 += a[i + 0];
    s1 += a[i + 1];
    s2 += a[i + 2];
    s3 += a[i + 3];
    s4 += a[i + 4];
    s5 += a[i + 5];
    s6 += a[i + 6];
    s7 += a[i + 7];
  }
  return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
}

void WriteKernel(double* a, std::size_t count, double value) {
  for (std::size_t i = 0; i < count; i += kDoublesPerLine) {
#pragma GCC unroll 8
    for (std::size_t j = 0; j < kDoublesPerLine; ++j) a[i + j] = value;
  }
}

void CopyKernel(double* __restrict dst, const double* __restrict src, std::size_t count) {
  for (std::size_t i = 0; i < count; i += kDoublesPerLine) {
#pragma GCC unroll 8
    for (std::size_t j = 0; j < kDoublesPerLine; ++j) dst[i + j] = src[i + j];
  }
}

void TriadKernel(double* __restrict a, const double* __restrict b, const double* __restrict c,
                 double scalar, std::size_t count) {
  for (std::size_t i = 0; i < count; i += kDoublesPerLine) {
#pragma GCC unroll 8
    for (std::size_t j = 0; j < kDoublesPerLine; ++j) a[i + j] = b[i + j] + scalar * c[i + j];
  }
}

namespace {
// Through volatile pointers the compiler cannot replace the calls with its own inline code,
// so the limit is what libc's tuned implementation (ERMS, AVX) achieves.
void* (*volatile memset_function)(void*, int, std::size_t) = std::memset;
void* (*volatile memcpy_function)(void*, const void*, std::size_t) = std::memcpy;
}  // namespace

void LibcMemset(void* a, int value, std::size_t bytes) { memset_function(a, value, bytes); }
void LibcMemcpy(void* dst, const void* src, std::size_t bytes) { memcpy_function(dst, src, bytes); }

std::size_t LastLevelCacheBytes() {
  const std::string dir = "/sys/devices/system/cpu/cpu0/cache";
  auto entries = os::ListDirectory(dir);
  if (!entries.ok()) return 0;
  int best_level = -1;
  std::size_t best_bytes = 0;
  for (const std::string& entry : *entries) {
    if (entry.rfind("index", 0) != 0) continue;
    auto level_text = os::ReadFile(absl::StrCat(dir, "/", entry, "/level"));
    auto size_text = os::ReadFile(absl::StrCat(dir, "/", entry, "/size"));
    if (!level_text.ok() || !size_text.ok()) continue;
    int level = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*level_text), &level)) continue;
    // "491520K" (the kernel writes K; accept M too).
    absl::string_view size = absl::StripAsciiWhitespace(*size_text);
    std::size_t multiplier = 1;
    if (absl::ConsumeSuffix(&size, "K")) multiplier = std::size_t{1} << 10;
    if (absl::ConsumeSuffix(&size, "M")) multiplier = std::size_t{1} << 20;
    std::uint64_t value = 0;
    if (!absl::SimpleAtoi(size, &value)) continue;
    if (level > best_level || (level == best_level && value * multiplier > best_bytes)) {
      best_level = level;
      best_bytes = value * multiplier;
    }
  }
  return best_bytes;
}

double FractionOnNode(const NodeBuffer& buffer) {
  if (buffer.data() == nullptr) return 0;
  auto counts = page_nodes(buffer.data(), buffer.size());
  if (!counts.ok() || counts->total_pages == 0) return 0;
  return static_cast<double>(counts->on(buffer.node())) / static_cast<double>(counts->total_pages);
}

PointerChase PointerChase::Build(void* buffer, std::size_t bytes) {
  // Indices are 32-bit to halve the shuffle's own footprint; 2^32 lines is 256 GiB.
  const std::size_t lines = std::clamp<std::size_t>(bytes / kCacheLine, 2, std::size_t{0xFFFFFFFF});
  // Sattolo's shuffle gives a permutation that is a single cycle, so the walk visits every
  // line before it repeats and the prefetchers see no pattern.
  std::vector<std::uint32_t> order(lines);
  for (std::size_t i = 0; i < lines; ++i) order[i] = static_cast<std::uint32_t>(i);
  std::uint64_t state = 0x9E3779B97F4A7C15ULL;
  auto next_random = [&state] {  // splitmix64
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  for (std::size_t i = lines - 1; i > 0; --i) {
    std::size_t j = next_random() % i;
    std::swap(order[i], order[j]);
  }
  auto* base = static_cast<unsigned char*>(buffer);
  for (std::size_t i = 0; i < lines; ++i) {
    void* target = base + std::size_t{order[i]} * kCacheLine;
    std::memcpy(base + i * kCacheLine, &target, sizeof(target));
  }
  return PointerChase(base, lines);
}

const void* PointerChase::Walk(std::size_t steps) {
  const void* p = position_;
  // Eight links per iteration keep the loop overhead out of the dependent chain.
  std::size_t i = 0;
  for (; i + 8 <= steps; i += 8) {
    p = *static_cast<const void* const*>(p);
    p = *static_cast<const void* const*>(p);
    p = *static_cast<const void* const*>(p);
    p = *static_cast<const void* const*>(p);
    p = *static_cast<const void* const*>(p);
    p = *static_cast<const void* const*>(p);
    p = *static_cast<const void* const*>(p);
    p = *static_cast<const void* const*>(p);
  }
  for (; i < steps; ++i) p = *static_cast<const void* const*>(p);
  position_ = p;
  return p;
}

}  // namespace numarena::bandwidth_internal
