// The node x node bandwidth matrix as Google Benchmark programs (bytes/s counters), beside
// libc's memset/memcpy on each CPU node's local memory: the same instruments as
// `numarena bandwidth` (lib/ops/bandwidth_kernels.hpp), in Google Benchmark's JSON format.
//
//   stream/<kernel>/cpu:<c>/mem:<m>/threads:<n>   read, write, copy, triad; bytes_per_second
//   libc/<memset|memcpy>/cpu:<c>/mem:<c>/threads:<n>
//   latency/cpu:<c>/mem:<m>                         one pinned thread chasing pointers;
//                                                   ns_per_load
// Thread t of a benchmark is pinned to the CPU node's t-th allowed CPU and works on its own
// slice of arrays bound to the memory node. Arrays are NUMARENA_BENCH_BYTES bytes each
// (default 256 MiB; suffix-free byte count), allocated and populated before timing.
//
//   build/bench/bandwidth_bench --benchmark_out=bandwidth.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "numarena/first_touch.hpp"
#include "numarena/topology.hpp"
#include "ops/bandwidth_kernels.hpp"
#include "os/os.hpp"

namespace {

namespace bi = numarena::bandwidth_internal;

std::size_t g_bytes = std::size_t{256} << 20;

// Three arrays on one node, made on first use (a node's arrays are shared by all rows).
struct NodeArrays {
  numarena::NodeBuffer a, b, c;
  std::unique_ptr<bi::PointerChase> chase;  // over a separate buffer, built once
  numarena::NodeBuffer chase_buffer;
};

NodeArrays* ArraysOn(int node) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<NodeArrays>> arrays;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = arrays[node];
  if (slot == nullptr) {
    auto made = std::make_unique<NodeArrays>();
    for (numarena::NodeBuffer* buffer : {&made->a, &made->b, &made->c, &made->chase_buffer}) {
      auto created = numarena::AllocateOnNode(g_bytes, node);
      if (!created.ok()) {
        std::fprintf(stderr, "bandwidth_bench: arrays on node %d: %s\n", node,
                     std::string(created.status().message()).c_str());
        return nullptr;
      }
      *buffer = std::move(*created);
    }
    made->chase = std::make_unique<bi::PointerChase>(
        bi::PointerChase::Build(made->chase_buffer.data(), g_bytes));
    slot = std::move(made);
  }
  return slot.get();
}

enum class Work { kRead, kWrite, kCopy, kTriad, kMemset, kMemcpy };

void Stream(benchmark::State& state, Work work, std::vector<int> cpus, int memory_node) {
  const int cpu[] = {cpus[static_cast<std::size_t>(state.thread_index()) % cpus.size()]};
  if (auto s = numarena::os::SetThreadAffinity(cpu); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  NodeArrays* arrays = ArraysOn(memory_node);
  if (arrays == nullptr) {
    state.SkipWithError("could not allocate the arrays (see stderr)");
    return;
  }
  const std::size_t lines = g_bytes / bi::kCacheLine;
  const std::size_t first = lines * state.thread_index() / state.threads() * bi::kDoublesPerLine;
  const std::size_t last =
      lines * (state.thread_index() + 1) / state.threads() * bi::kDoublesPerLine;
  const std::size_t count = last - first;
  double* a = static_cast<double*>(arrays->a.data()) + first;
  const double* b = static_cast<const double*>(arrays->b.data()) + first;
  const double* c = static_cast<const double*>(arrays->c.data()) + first;
  std::size_t bytes_per_pass = count * sizeof(double);
  switch (work) {
    case Work::kCopy:
    case Work::kMemcpy:
      bytes_per_pass *= 2;
      break;
    case Work::kTriad:
      bytes_per_pass *= 3;
      break;
    default:
      break;
  }
  int pass = 0;
  for (auto _ : state) {
    ++pass;
    switch (work) {
      case Work::kRead:
        benchmark::DoNotOptimize(bi::ReadKernel(reinterpret_cast<const std::uint64_t*>(a), count));
        break;
      case Work::kWrite:
        bi::WriteKernel(a, count, 1.0 + pass);
        break;
      case Work::kCopy:
        bi::CopyKernel(a, b, count);
        break;
      case Work::kTriad:
        bi::TriadKernel(a, b, c, 3.0, count);
        break;
      case Work::kMemset:
        bi::LibcMemset(a, (pass & 0x7F) | 1, count * sizeof(double));
        break;
      case Work::kMemcpy:
        bi::LibcMemcpy(a, b, count * sizeof(double));
        break;
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes_per_pass));
}

void Latency(benchmark::State& state, int cpu, int memory_node) {
  const int cpus[] = {cpu};
  if (auto s = numarena::os::SetThreadAffinity(cpus); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  NodeArrays* arrays = ArraysOn(memory_node);
  if (arrays == nullptr) {
    state.SkipWithError("could not allocate the arrays (see stderr)");
    return;
  }
  bi::PointerChase chase = *arrays->chase;
  constexpr std::size_t kSteps = 1024;
  for (auto _ : state) benchmark::DoNotOptimize(chase.Walk(kSteps));
  // Seconds per load (inverted rate), shown by Google Benchmark as e.g. "105n".
  state.counters["ns_per_load"] = benchmark::Counter(
      static_cast<double>(kSteps) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

const char* WorkName(Work work) {
  switch (work) {
    case Work::kRead:
      return "stream/read";
    case Work::kWrite:
      return "stream/write";
    case Work::kCopy:
      return "stream/copy";
    case Work::kTriad:
      return "stream/triad";
    case Work::kMemset:
      return "libc/memset";
    case Work::kMemcpy:
      return "libc/memcpy";
  }
  return "?";
}

int RegisterAll() {
  if (std::string bytes = numarena::os::GetEnv("NUMARENA_BENCH_BYTES"); !bytes.empty()) {
    char* end = nullptr;
    unsigned long long value = std::strtoull(bytes.c_str(), &end, 10);
    if (end == nullptr || *end != '\0' || value < (64u << 10)) {
      std::fprintf(stderr,
                   "bandwidth_bench: NUMARENA_BENCH_BYTES=%s is not a byte count >= 65536\n",
                   bytes.c_str());
      std::exit(2);
    }
    g_bytes = static_cast<std::size_t>(value) / bi::kCacheLine * bi::kCacheLine;
  }
  auto topology = numarena::Topology::system();
  if (!topology.ok()) {
    std::fprintf(stderr, "bandwidth_bench: %s\n", std::string(topology.status().message()).c_str());
    return 1;
  }
  const numarena::Topology& topo = **topology;
  const auto& allowed = topo.process().allowed_cpus;
  std::vector<int> columns;
  for (const auto& node : topo.nodes()) {
    if (topo.memory_allowed(node.id) && node.mem_total_bytes > 0) columns.push_back(node.id);
  }
  for (const auto& node : topo.nodes()) {
    std::vector<int> cpus;
    for (int cpu : node.cpus) {
      if (allowed.empty() || std::find(allowed.begin(), allowed.end(), cpu) != allowed.end()) {
        cpus.push_back(cpu);
      }
    }
    if (cpus.empty()) continue;
    const int threads = static_cast<int>(cpus.size());
    const std::string row = "/cpu:" + std::to_string(node.id);
    for (int column : columns) {
      const std::string cell = row + "/mem:" + std::to_string(column);
      for (Work work : {Work::kRead, Work::kWrite, Work::kCopy, Work::kTriad}) {
        benchmark::RegisterBenchmark((WorkName(work) + cell).c_str(),
                                     [=](benchmark::State& s) { Stream(s, work, cpus, column); })
            ->Threads(threads)
            ->UseRealTime()
            ->MinTime(0.2);
      }
      benchmark::RegisterBenchmark(("latency" + cell).c_str(),
                                   [=](benchmark::State& s) { Latency(s, cpus.front(), column); })
          ->UseRealTime()
          ->MinTime(0.2);
    }
    const int local = topo.memory_allowed(node.id) ? node.id : columns.front();
    const std::string cell = row + "/mem:" + std::to_string(local);
    for (Work work : {Work::kMemset, Work::kMemcpy}) {
      benchmark::RegisterBenchmark((WorkName(work) + cell).c_str(),
                                   [=](benchmark::State& s) { Stream(s, work, cpus, local); })
          ->Threads(threads)
          ->UseRealTime()
          ->MinTime(0.2);
    }
  }
  return 0;
}

const int registered = RegisterAll();

}  // namespace
