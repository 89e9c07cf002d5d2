// The cost of numarena::torch's c10::Allocator per tensor, against libtorch's own CPU
// allocator (which Debian's libtorch serves from glibc malloc), in the same process and run:
// at::empty of one size and its release, nothing else. The decoder benchmark
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

void Libtorch(benchmark::State& state) {
  numarena::torch::Scope plain(nullptr);
  AllocateAndRelease(state);
}

void NumarenaLocal(benchmark::State& state) {
  numarena::torch::Use(numarena::torch::ArenaFor("local"));
  AllocateAndRelease(state);
  numarena::torch::Use(nullptr);
}

void NumarenaBind0(benchmark::State& state) {
  numarena::torch::Scope scope(numarena::torch::ArenaFor("bind(0)"));
  AllocateAndRelease(state);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t bytes : {256, 4096, 65536, 1 << 20, 16 << 20}) b->Arg(bytes);
}

BENCHMARK(Libtorch)->Name("libtorch")->Apply(Sizes);
BENCHMARK(NumarenaLocal)->Name("numarena/local")->Apply(Sizes);
BENCHMARK(NumarenaBind0)->Name("numarena/bind0")->Apply(Sizes);

}  // namespace
