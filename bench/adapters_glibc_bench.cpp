// The std::allocator side of adapters_bench over glibc malloc (this program does not link
// numarena or jemalloc). Compare its figures with adapters_bench's from the same session.
#include "adapter_workloads.hpp"

namespace {

void BM_PushBack_StdAllocatorGlibc(benchmark::State& state) {
  numarena_bench::VectorPushBack(state, std::allocator<float>());
}

void BM_TensorFill_StdAllocatorGlibc(benchmark::State& state) {
  numarena_bench::TensorFill(
      state, [](std::size_t bytes) -> void* { return std::allocator<std::byte>().allocate(bytes); },
      [](void* p, std::size_t bytes) {
        std::allocator<std::byte>().deallocate(static_cast<std::byte*>(p), bytes);
      });
}

}  // namespace

BENCHMARK(BM_PushBack_StdAllocatorGlibc)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TensorFill_StdAllocatorGlibc)->Unit(benchmark::kMillisecond);
