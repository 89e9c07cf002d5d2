// numarena beside its peers on the same workloads, in one process (bench/peer_workloads.hpp).
//
// Peers (each allocates on the same node, the node this process starts on):
//   numarena_arena           Arena::ForNode(node): jemalloc arena on node-bound pages,
//                            per-(thread, arena) tcache; free with numarena::deallocate(p)
//   numarena_arena_sized     an arena of its own on that node (Arena::Create(Bind(node))),
//                            freed with numarena::deallocate(p, size); numarena_arena
//                            grows with the C API's numarena_realloc on its arena, the
//                            sized peer with Arena::reallocate on its own
//   numarena_interleave      Arena::ForPolicy(Interleave(all allowed nodes))
//   numarena_allocator       numarena::allocator<std::byte>(Bind(node)) (the STL adapter)
//   numarena_pmr             numarena::node_resource(node) (std::pmr adapter, virtual call)
//   numarena_interleaved_buffer  AllocateInterleaved (whole mappings; 2 MiB and up only)
//   numarena_kv_pool         KvPool sequences (kv_sequence only)
//   jemalloc_malloc          malloc/free (jemalloc is this process's malloc)
//   jemalloc_arena           mallocx(MALLOCX_ARENA(a)) on an arena from "arenas.create"
//                            (default hooks: NOT node-bound) with jemalloc's shared tcache
//   mimalloc                 mi_malloc/mi_free (loaded with dlopen RTLD_LOCAL: its shared
//                            library also exports malloc, which would fight jemalloc's)
//   memkind_node             memkind_create_fixed over an mbind-ed mapping: a kind whose
//                            memory is on the node
//   numa_alloc_onnode        libnuma's numa_alloc_onnode/numa_free (a mapping per call)
// Issue 16's server workloads (RegisterServerWorkloads) run for numarena_arena,
// numarena_arena_sized, jemalloc_malloc, jemalloc_arena, mimalloc and memkind_node.
// glibc malloc runs in bench/peers_glibc_bench.cpp, tcmalloc in peers_tcmalloc_bench (the
// same source linked with libtcmalloc). Ratios to the best peer:
//   tools/plot_results.py peers build/bench-results/peers_bench.json ...
//
//   build/bench/peers_bench --benchmark_out=peers.json --benchmark_out_format=json
#include <dlfcn.h>
#include <jemalloc/jemalloc.h>
#include <memkind.h>
#include <numa.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <memory_resource>
#include <string>
#include <vector>

#include "numarena/allocator.hpp"
#include "numarena/arena.hpp"
#include "numarena/interleave.hpp"
#include "numarena/kv_pool.hpp"
#include "numarena/memory_resource.hpp"
#include "numarena/numarena.h"
#include "numarena/topology.hpp"
#include "peer_workloads.hpp"
#include "os/os.hpp"

namespace {

using numarena_bench::RegisterPeer;
using numarena_bench::RegisterServerWorkloads;

int g_node = 0;
std::vector<int> g_all_nodes;

// ---- numarena ----------------------------------------------------------------------------

numarena::Arena* g_node_arena = nullptr;
numarena_arena* g_node_c_arena = nullptr;  // the C API's handle of the same node's arena
struct NumarenaArena {
  static void* Allocate(std::size_t bytes) { return g_node_arena->allocate(bytes); }
  static void Free(void* p, std::size_t) { numarena::deallocate(p); }
  static void* Realloc(void* p, std::size_t, std::size_t bytes) {
    return numarena_realloc(g_node_c_arena, p, bytes);
  }
  static void* AllocateAligned(std::size_t alignment, std::size_t bytes) {
    return g_node_arena->allocate(bytes, alignment);
  }
  static void FreeAligned(void* p, std::size_t, std::size_t) { numarena::deallocate(p); }
};
// The sized peer has an arena of its own (Arena::Create), so that its rows start from a heap
// only its own earlier rows used, as every other peer's do: on the shared arena they ran
// after numarena_arena's larson-like rows (8 threads), whose freed objects the batch then got
// back scattered over many slabs, and the small random batch took 1.5x its time alone.
numarena::Arena* g_sized_arena = nullptr;
struct NumarenaArenaSized {
  static void* Allocate(std::size_t bytes) { return g_sized_arena->allocate(bytes); }
  static void Free(void* p, std::size_t bytes) { numarena::deallocate(p, bytes); }
  static void* Realloc(void* p, std::size_t, std::size_t bytes) {
    return g_sized_arena->reallocate(p, bytes);
  }
  static void* AllocateAligned(std::size_t alignment, std::size_t bytes) {
    return g_sized_arena->allocate(bytes, alignment);
  }
  static void FreeAligned(void* p, std::size_t bytes, std::size_t alignment) {
    numarena::deallocate(p, bytes, alignment);
  }
};

numarena::Arena* g_interleave_arena = nullptr;
struct NumarenaInterleave {
  static void* Allocate(std::size_t bytes) { return g_interleave_arena->allocate(bytes); }
  static void Free(void* p, std::size_t) { numarena::deallocate(p); }
};

std::unique_ptr<numarena::allocator<std::byte>> g_stl_allocator;
struct NumarenaAllocator {
  static void* Allocate(std::size_t bytes) {
    try {
      return g_stl_allocator->allocate(bytes);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  static void Free(void* p, std::size_t bytes) {
    g_stl_allocator->deallocate(static_cast<std::byte*>(p), bytes);
  }
};

std::pmr::memory_resource* g_pmr = nullptr;
struct NumarenaPmr {
  static void* Allocate(std::size_t bytes) {
    try {
      return g_pmr->allocate(bytes, alignof(std::max_align_t));
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  static void Free(void* p, std::size_t bytes) {
    g_pmr->deallocate(p, bytes, alignof(std::max_align_t));
  }
};

// Whole interleaved mappings: the handle owns the mapping, so keep it beside the pointer.
struct NumarenaInterleavedBuffer {
  static void* Allocate(std::size_t bytes) {
    auto buffer = numarena::AllocateInterleaved(bytes, numarena::Policy::Interleave(g_all_nodes));
    if (!buffer.ok()) return nullptr;
    auto* owned = new numarena::InterleavedBuffer(std::move(*buffer));
    // The first bytes of the data hold nothing yet: keep the handle in a side table.
    Handles().push_back(owned);
    return owned->data();
  }
  static void Free(void* p, std::size_t) {
    auto& handles = Handles();
    for (std::size_t i = 0; i < handles.size(); ++i) {
      if (handles[i]->data() == p) {
        delete handles[i];
        handles[i] = handles.back();
        handles.pop_back();
        return;
      }
    }
  }
  // Per thread: each benchmark thread frees what it allocated (alloc_free only).
  static std::vector<numarena::InterleavedBuffer*>& Handles() {
    thread_local std::vector<numarena::InterleavedBuffer*> handles;
    return handles;
  }
};

// ---- jemalloc ----------------------------------------------------------------------------

struct JemallocMalloc {
  static void* Allocate(std::size_t bytes) { return std::malloc(bytes); }
  static void Free(void* p, std::size_t) { std::free(p); }
  static void* Realloc(void* p, std::size_t, std::size_t bytes) { return std::realloc(p, bytes); }
  static void* AllocateAligned(std::size_t alignment, std::size_t bytes) {
    void* p = nullptr;
    return posix_memalign(&p, alignment, bytes) == 0 ? p : nullptr;
  }
  static void FreeAligned(void* p, std::size_t, std::size_t) { std::free(p); }
};

int g_jemalloc_arena_flags = 0;
struct JemallocArena {
  static void* Allocate(std::size_t bytes) { return mallocx(bytes, g_jemalloc_arena_flags); }
  static void Free(void* p, std::size_t) { dallocx(p, 0); }
  static void* Realloc(void* p, std::size_t, std::size_t bytes) {
    return rallocx(p, bytes, g_jemalloc_arena_flags);
  }
  static void* AllocateAligned(std::size_t alignment, std::size_t bytes) {
    return mallocx(bytes, g_jemalloc_arena_flags | MALLOCX_ALIGN(alignment));
  }
  static void FreeAligned(void* p, std::size_t, std::size_t) { dallocx(p, 0); }
};

// ---- mimalloc (dlopen) -------------------------------------------------------------------

void* (*g_mi_malloc)(std::size_t) = nullptr;
void (*g_mi_free)(void*) = nullptr;
void* (*g_mi_realloc)(void*, std::size_t) = nullptr;
void* (*g_mi_malloc_aligned)(std::size_t, std::size_t) = nullptr;
struct Mimalloc {
  static void* Allocate(std::size_t bytes) { return g_mi_malloc(bytes); }
  static void Free(void* p, std::size_t) { g_mi_free(p); }
  static void* Realloc(void* p, std::size_t, std::size_t bytes) { return g_mi_realloc(p, bytes); }
  static void* AllocateAligned(std::size_t alignment, std::size_t bytes) {
    return g_mi_malloc_aligned(bytes, alignment);
  }
  static void FreeAligned(void* p, std::size_t, std::size_t) { g_mi_free(p); }
};

// ---- memkind -----------------------------------------------------------------------------

memkind_t g_memkind = nullptr;
struct MemkindNode {
  static void* Allocate(std::size_t bytes) { return memkind_malloc(g_memkind, bytes); }
  static void Free(void* p, std::size_t) { memkind_free(g_memkind, p); }
  static void* Realloc(void* p, std::size_t, std::size_t bytes) {
    return memkind_realloc(g_memkind, p, bytes);
  }
  static void* AllocateAligned(std::size_t alignment, std::size_t bytes) {
    void* p = nullptr;
    return memkind_posix_memalign(g_memkind, &p, alignment, bytes) == 0 ? p : nullptr;
  }
  static void FreeAligned(void* p, std::size_t, std::size_t) { memkind_free(g_memkind, p); }
};

// ---- libnuma -----------------------------------------------------------------------------

struct NumaAllocOnnode {
  static void* Allocate(std::size_t bytes) { return numa_alloc_onnode(bytes, g_node); }
  static void Free(void* p, std::size_t bytes) { numa_free(p, bytes); }
};

// ---- KV pool -----------------------------------------------------------------------------

std::unique_ptr<numarena::KvPool> g_kv_pool;
// One sequence of 256 tokens: the same blocks kv_sequence gives the other peers (8 layers x
// 1 head group x 16 spans, 64 KiB blocks). Tokens differ on every iteration, so no prefix is
// reused: this measures block allocation, not the prefix cache.
void KvPoolSequence(benchmark::State& state) {
  std::vector<std::int32_t> prompt(256);
  std::int32_t next_token = state.thread_index() * 1'000'000'000 / 4;
  for (auto _ : state) {
    for (auto& token : prompt) token = next_token++;
    auto sequence = g_kv_pool->CreateSequence(prompt);
    if (!sequence.ok()) {
      state.SkipWithError(std::string(sequence.status().message()).c_str());
      break;
    }
    if (!g_kv_pool->FreeSequence(*sequence).ok()) {
      state.SkipWithError("FreeSequence failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * numarena_bench::kKvBlocksPerSequence);
}

void Skip(const char* peer, const std::string& why) {
  std::fprintf(stderr, "peers_bench: %s left out: %s\n", peer, why.c_str());
}

// Builds every peer and registers the ones that could be built.
int RegisterAll() {
  auto topology = numarena::Topology::system();
  if (!topology.ok()) {
    Skip("every numarena peer", std::string(topology.status().message()));
  } else {
    g_node = numarena::Topology::current_node();
    if (g_node < 0 || !(*topology)->memory_allowed(g_node)) {
      g_node = (*topology)->process().allowed_mem_nodes.front();
    }
    for (const auto& node : (*topology)->nodes()) {
      if (!node.memory_only() && (*topology)->memory_allowed(node.id)) {
        g_all_nodes.push_back(node.id);
      }
    }
    auto sized = numarena::Arena::Create(numarena::Policy::Bind(g_node));
    if (auto arena = numarena::Arena::ForNode(g_node); arena.ok() && sized.ok()) {
      g_node_arena = *arena;
      g_sized_arena = *sized;
      RegisterPeer<NumarenaArena>("numarena_arena");
      RegisterPeer<NumarenaArenaSized>("numarena_arena_sized");
      g_node_c_arena = numarena_arena_for_node(g_node);
      if (g_node_c_arena != nullptr) {
        RegisterServerWorkloads<NumarenaArena>("numarena_arena");
        RegisterServerWorkloads<NumarenaArenaSized>("numarena_arena_sized");
      } else {
        Skip("numarena's server workloads", "numarena_arena_for_node failed");
      }
    } else {
      Skip("numarena_arena", std::string(!arena.ok() ? arena.status().message()
                                                     : sized.status().message()));
    }
    if (auto arena = numarena::Arena::ForPolicy(numarena::Policy::Interleave(g_all_nodes));
        arena.ok()) {
      g_interleave_arena = *arena;
      RegisterPeer<NumarenaInterleave>("numarena_interleave");
    } else {
      Skip("numarena_interleave", std::string(arena.status().message()));
    }
    try {
      g_stl_allocator =
          std::make_unique<numarena::allocator<std::byte>>(numarena::Policy::Bind(g_node));
      RegisterPeer<NumarenaAllocator>("numarena_allocator");
    } catch (const std::exception& e) {
      Skip("numarena_allocator", e.what());
    }
    if (auto resource = numarena::node_resource(g_node); resource.ok()) {
      g_pmr = *resource;
      RegisterPeer<NumarenaPmr>("numarena_pmr");
    } else {
      Skip("numarena_pmr", std::string(resource.status().message()));
    }
    RegisterPeer<NumarenaInterleavedBuffer>("numarena_interleaved_buffer",
                                            2 * numarena_bench::kMiB);

    numarena::KvPoolOptions kv;
    kv.geometry = {.layers = 8,
                   .kv_heads = 8,
                   .head_dim = 128,
                   .dtype = numarena::KvDType::kFp16,
                   .tokens_per_block = 16,
                   .layers_per_block = 1,
                   .heads_per_group = 8};
    kv.home_nodes = {g_node};
    kv.hot_blocks_per_node = 4096;  // 256 MiB: cached spans are evicted to make room
    if (auto pool = numarena::KvPool::Create(std::move(kv)); pool.ok()) {
      g_kv_pool = std::move(*pool);
      if (g_kv_pool->block_bytes() != numarena_bench::kKvBlockBytes) {
        Skip("numarena_kv_pool", "block size differs from the other peers' (" +
                                     std::to_string(g_kv_pool->block_bytes()) + " bytes)");
      } else {
        numarena_bench::Configure(
            benchmark::RegisterBenchmark("kv_sequence/numarena_kv_pool", KvPoolSequence));
      }
    } else {
      Skip("numarena_kv_pool", std::string(pool.status().message()));
    }
  }

  RegisterPeer<JemallocMalloc>("jemalloc_malloc");
  RegisterServerWorkloads<JemallocMalloc>("jemalloc_malloc");
  unsigned arena_index = 0;
  std::size_t index_size = sizeof(arena_index);
  if (mallctl("arenas.create", &arena_index, &index_size, nullptr, 0) == 0) {
    g_jemalloc_arena_flags = MALLOCX_ARENA(arena_index);
    RegisterPeer<JemallocArena>("jemalloc_arena");
    RegisterServerWorkloads<JemallocArena>("jemalloc_arena");
  } else {
    Skip("jemalloc_arena", "mallctl(arenas.create) failed");
  }

  if (void* mimalloc = dlopen("libmimalloc.so.2", RTLD_NOW | RTLD_LOCAL)) {
    g_mi_malloc = reinterpret_cast<void* (*)(std::size_t)>(dlsym(mimalloc, "mi_malloc"));
    g_mi_free = reinterpret_cast<void (*)(void*)>(dlsym(mimalloc, "mi_free"));
    g_mi_realloc =
        reinterpret_cast<void* (*)(void*, std::size_t)>(dlsym(mimalloc, "mi_realloc"));
    g_mi_malloc_aligned = reinterpret_cast<void* (*)(std::size_t, std::size_t)>(
        dlsym(mimalloc, "mi_malloc_aligned"));
    if (g_mi_malloc != nullptr && g_mi_free != nullptr && g_mi_realloc != nullptr &&
        g_mi_malloc_aligned != nullptr) {
      RegisterPeer<Mimalloc>("mimalloc");
      RegisterServerWorkloads<Mimalloc>("mimalloc");
    }
  } else {
    Skip("mimalloc", dlerror());
  }

  // memkind over a node-bound region large enough for two threads' mixed requests.
  constexpr std::size_t kMemkindRegion = std::size_t{4} << 30;
  if (auto region = numarena::os::ReserveAddressSpace(kMemkindRegion, 2 * numarena_bench::kMiB);
      region.ok()) {
    const int nodes[] = {g_node};
    numarena::Status s = numarena::os::CommitRange(*region, kMemkindRegion);
    if (s.ok())
      s = numarena::os::BindRange(*region, kMemkindRegion, numarena::os::PolicyMode::kBind,
                                    nodes);
    if (!s.ok()) {
      Skip("memkind_node", std::string(s.message()));
    } else if (int err = memkind_create_fixed(*region, kMemkindRegion, &g_memkind); err != 0) {
      Skip("memkind_node", "memkind_create_fixed failed with " + std::to_string(err));
    } else {
      RegisterPeer<MemkindNode>("memkind_node");
      RegisterServerWorkloads<MemkindNode>("memkind_node");
    }
  }

  if (numa_available() >= 0) {
    RegisterPeer<NumaAllocOnnode>("numa_alloc_onnode");
  } else {
    Skip("numa_alloc_onnode", "numa_available() < 0");
  }
  return 0;
}

const int registered = RegisterAll();

}  // namespace
