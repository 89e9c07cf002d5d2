// The cost of numarena::torch's c10::Allocator per tensor, against libtorch's own CPU
// allocator (which Debian's libtorch serves from glibc malloc), in the same process and run:
// at::empty of one size and its release, nothing else ("touched": also one byte written per
// 4 KiB page, which costs a page fault for every page the allocator gave back to the kernel
// since the last round: the price of purging). The decoder benchmark
// (bench/pytorch_decoder_bench.py) measures whole-model time; this isolates the allocator
// path (scope lookup, the C API's arena handle, allocate, owns + free on release).
//
//   torch_allocator_bench [--benchmark_filter=...]
// Arguments: the tensor's bytes. Labels: libtorch (no numarena), numarena/local (Use of a
// local arena), numarena/bind0 (a Scope on a bind(0) arena).
#include <ATen/ops/empty.h>
#include <benchmark/benchmark.h>

#include <cstdint>

#include "numarena/torch.hpp"

namespace {

void AllocateAndRelease(benchmark::State& state) {
  const std::int64_t bytes = state.range(0);
  for (auto _ : state) {
    at::Tensor t = at::empty({bytes}, at::kByte);
    benchmark::DoNotOptimize(t.data_ptr());
  }
  state.SetItemsProcessed(state.iterations());
}

void AllocateTouchRelease(benchmark::State& state) {
  const std::int64_t bytes = state.range(0);
  for (auto _ : state) {
    at::Tensor t = at::empty({bytes}, at::kByte);
    auto* data = static_cast<volatile std::uint8_t*>(t.data_ptr());
    for (std::int64_t offset = 0; offset < bytes; offset += 4096) data[offset] = 1;
  }
  state.SetItemsProcessed(state.iterations());
}

template <void (*Body)(benchmark::State&)>
void Libtorch(benchmark::State& state) {
  numarena::torch::Scope plain(nullptr);
  Body(state);
}

template <void (*Body)(benchmark::State&)>
void NumarenaLocal(benchmark::State& state) {
  numarena::torch::Use(numarena::torch::ArenaFor("local"));
  Body(state);
  numarena::torch::Use(nullptr);
}

template <void (*Body)(benchmark::State&)>
void NumarenaBind0(benchmark::State& state) {
  numarena::torch::Scope scope(numarena::torch::ArenaFor("bind(0)"));
  Body(state);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t bytes : {256, 4096, 65536, 1 << 20, 16 << 20}) b->Arg(bytes);
}

void TouchedSizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t bytes : {64 << 10, 1 << 20, 16 << 20}) b->Arg(bytes);
}

BENCHMARK(Libtorch<AllocateAndRelease>)->Name("libtorch")->Apply(Sizes);
BENCHMARK(NumarenaLocal<AllocateAndRelease>)->Name("numarena/local")->Apply(Sizes);
BENCHMARK(NumarenaBind0<AllocateAndRelease>)->Name("numarena/bind0")->Apply(Sizes);
BENCHMARK(Libtorch<AllocateTouchRelease>)->Name("libtorch/touched")->Apply(TouchedSizes);
BENCHMARK(NumarenaLocal<AllocateTouchRelease>)->Name("numarena/local/touched")->Apply(TouchedSizes);
BENCHMARK(NumarenaBind0<AllocateTouchRelease>)->Name("numarena/bind0/touched")->Apply(TouchedSizes);

}  // namespace
