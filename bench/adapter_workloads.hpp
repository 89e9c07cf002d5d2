// Workloads of the adapter benchmark, shared by adapters_bench (numarena and jemalloc's
// std::allocator in one process) and adapters_glibc_bench (std::allocator over glibc malloc,
// a separate program because linking jemalloc replaces malloc process-wide).
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

namespace numarena_bench {

inline constexpr std::size_t kPushBackElements = std::size_t{1} << 20;
inline constexpr std::size_t kTensorBytes = std::size_t{64} << 20;

// push_back of 1 M floats into an empty vector (every reallocation included).
template <typename Allocator>
void VectorPushBack(benchmark::State& state, const Allocator& allocator) {
  for (auto _ : state) {
    std::vector<float, Allocator> v(allocator);
    for (std::size_t i = 0; i < kPushBackElements; ++i) v.push_back(static_cast<float>(i));
    benchmark::DoNotOptimize(v.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kPushBackElements);
}

// Allocate a 64 MiB tensor, fill it, free it: `allocate(bytes)` returns the memory and
// `release(p, bytes)` frees it.
template <typename Allocate, typename Release>
void TensorFill(benchmark::State& state, Allocate allocate, Release release) {
  for (auto _ : state) {
    void* p = allocate(kTensorBytes);
    if (p == nullptr) {
      state.SkipWithError("allocation failed");
      break;
    }
    std::memset(p, 0x3c, kTensorBytes);
    benchmark::DoNotOptimize(p);
    benchmark::ClobberMemory();
    release(p, kTensorBytes);
  }
  state.SetBytesProcessed(state.iterations() * kTensorBytes);
}

}  // namespace numarena_bench
