// Adapters against std::allocator in one run: std::vector push_back to 1 M elements and a
// 64 MiB tensor buffer fill. In this program std::allocator is served by jemalloc (linked
// with numarena); adapters_glibc_bench runs the std::allocator side over glibc malloc.
//
//   build/bench/adapters_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only
#include <new>
#include <optional>

#include "adapter_workloads.hpp"
#include "numarena/allocator.hpp"
#include "numarena/tensor_buffer.hpp"

namespace {

using numarena_bench::TensorFill;
using numarena_bench::VectorPushBack;

void BM_PushBack_NumarenaNode0(benchmark::State& state) {
  VectorPushBack(state, numarena::allocator<float>(numarena::Policy::Bind(0)));
}
void BM_PushBack_NumarenaLocal(benchmark::State& state) {
  VectorPushBack(state, numarena::allocator<float>());
}
void BM_PushBack_StdAllocatorJemalloc(benchmark::State& state) {
  VectorPushBack(state, std::allocator<float>());
}

void BM_TensorFill_NumarenaTensorBuffer(benchmark::State& state) {
  // Keep the TensorBuffer API in the measured path: create one per iteration, fill its
  // memory, destroy it.
  std::optional<numarena::TensorBuffer> tensor;
  TensorFill(
      state,
      [&](std::size_t bytes) -> void* {
        auto buffer = numarena::TensorBuffer::OnNode(bytes, 0);
        if (!buffer.ok()) return nullptr;
        tensor.emplace(std::move(*buffer));
        return tensor->data();
      },
      [&](void*, std::size_t) { tensor.reset(); });
}
void BM_TensorFill_StdAllocatorJemalloc(benchmark::State& state) {
  TensorFill(
      state, [](std::size_t bytes) -> void* { return std::allocator<std::byte>().allocate(bytes); },
      [](void* p, std::size_t bytes) {
        std::allocator<std::byte>().deallocate(static_cast<std::byte*>(p), bytes);
      });
}

}  // namespace

BENCHMARK(BM_PushBack_NumarenaNode0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PushBack_NumarenaLocal)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PushBack_StdAllocatorJemalloc)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TensorFill_NumarenaTensorBuffer)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TensorFill_StdAllocatorJemalloc)->Unit(benchmark::kMillisecond);
