// Arena allocation speed against its peers, in one run: alloc+free pairs of 64 B, 4 KiB,
// 64 KiB and 2 MiB on one and two threads.
//
//   numarena     Arena::ForNode(0)->allocate + numarena::deallocate (per-arena tcache)
//   je_malloc    jemalloc's malloc/free (jemalloc is the process's malloc here)
//   je_arena     jemalloc mallocx/dallocx on a plain arenas.create arena (no hooks, shared
//                default tcache: the configuration numarena exists to avoid)
//   mimalloc     mi_malloc/mi_free (libmimalloc is dlopen()ed with RTLD_LOCAL so its malloc
//                override cannot replace jemalloc's in this process)
//   memkind      memkind_malloc/memkind_free on MEMKIND_REGULAR, memkind's node-bound kind
//                (MPOL_BIND to the regular DRAM nodes; node 0 on a one-node machine)
//   numa_onnode  numa_alloc_onnode(size, 0)/numa_free (an mmap + mbind per call)
//
// Report ratios within one run; absolute times on shared 2-core VMs drift.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <jemalloc/jemalloc.h>
#include <memkind.h>
#include <numa.h>

#include <cstdlib>
#include <cstring>

#include "numarena/arena.hpp"

namespace {

numarena::Arena* NodeArena() {
  static numarena::Arena* arena = [] {
    auto a = numarena::Arena::ForNode(0);
    if (!a.ok()) {
      std::fprintf(stderr, "%s\n", a.status().ToString().c_str());
      std::abort();
    }
    return *a;
  }();
  return arena;
}

int PlainArenaFlags() {
  static int flags = [] {
    unsigned index = 0;
    size_t size = sizeof index;
    if (mallctl("arenas.create", &index, &size, nullptr, 0) != 0) std::abort();
    return MALLOCX_ARENA(index);
  }();
  return flags;
}

struct Mimalloc {
  void* (*malloc)(size_t) = nullptr;
  void (*free)(void*) = nullptr;
};
const Mimalloc& Mi() {
  static Mimalloc mi = [] {
    Mimalloc m;
    void* lib = dlopen("libmimalloc.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      m.malloc = reinterpret_cast<void* (*)(size_t)>(dlsym(lib, "mi_malloc"));
      m.free = reinterpret_cast<void (*)(void*)>(dlsym(lib, "mi_free"));
    }
    return m;
  }();
  return mi;
}

// Touch one byte so no allocator can hand out memory it never maps.
inline void Use(void* p) {
  static_cast<volatile char*>(p)[0] = 1;
  benchmark::DoNotOptimize(p);
}

void BM_numarena(benchmark::State& state) {
  auto size = static_cast<std::size_t>(state.range(0));
  numarena::Arena* arena = NodeArena();
  for (auto _ : state) {
    void* p = arena->allocate(size);
    Use(p);
    numarena::deallocate(p);
  }
}

void BM_je_malloc(benchmark::State& state) {
  auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(size);
    Use(p);
    std::free(p);
  }
}

void BM_je_arena(benchmark::State& state) {
  auto size = static_cast<std::size_t>(state.range(0));
  int flags = PlainArenaFlags();
  for (auto _ : state) {
    void* p = mallocx(size, flags);
    Use(p);
    dallocx(p, 0);
  }
}

void BM_mimalloc(benchmark::State& state) {
  auto size = static_cast<std::size_t>(state.range(0));
  const Mimalloc& mi = Mi();
  if (mi.malloc == nullptr) {
    state.SkipWithError("libmimalloc.so.2 not found");
    return;
  }
  for (auto _ : state) {
    void* p = mi.malloc(size);
    Use(p);
    mi.free(p);
  }
}

void BM_memkind(benchmark::State& state) {
  auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = memkind_malloc(MEMKIND_REGULAR, size);
    Use(p);
    memkind_free(MEMKIND_REGULAR, p);
  }
}

void BM_numa_onnode(benchmark::State& state) {
  auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = numa_alloc_onnode(size, 0);
    Use(p);
    numa_free(p, size);
  }
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (long size : {64L, 4096L, 64L << 10, 2L << 20}) b->Arg(size);
  b->Threads(1)->Threads(2)->UseRealTime();
}

BENCHMARK(BM_numarena)->Apply(Sizes);
BENCHMARK(BM_je_malloc)->Apply(Sizes);
BENCHMARK(BM_je_arena)->Apply(Sizes);
BENCHMARK(BM_mimalloc)->Apply(Sizes);
BENCHMARK(BM_memkind)->Apply(Sizes);
BENCHMARK(BM_numa_onnode)->Apply(Sizes);

}  // namespace
