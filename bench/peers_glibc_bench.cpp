// glibc malloc (and, built as peers_tcmalloc_bench, tcmalloc) on the peer comparison's
// workloads (bench/peer_workloads.hpp).
//
// A separate program because linking jemalloc (as numarena does) replaces malloc for the
// whole process: this one links neither numarena nor jemalloc (see bench/CMakeLists.txt), so
// malloc here is glibc's. bench/CMakeLists.txt builds the same source a second time as
// peers_tcmalloc_bench, linked with gperftools' libtcmalloc (Debian's
// libgoogle-perftools-dev), whose malloc then replaces glibc's; NUMARENA_BENCH_PEER names the
// peer. The JSON of both is merged with bench/peers_bench.cpp's by
//   tools/plot_results.py peers peers_bench.json peers_glibc_bench.json peers_tcmalloc_bench.json
#include <cstdlib>

#include "peer_workloads.hpp"

#ifndef NUMARENA_BENCH_PEER
#define NUMARENA_BENCH_PEER "glibc_malloc"
#endif

namespace {

struct LibcMalloc {
  static void* Allocate(std::size_t bytes) { return std::malloc(bytes); }
  static void Free(void* p, std::size_t) { std::free(p); }
  static void* Realloc(void* p, std::size_t, std::size_t bytes) { return std::realloc(p, bytes); }
  static void* AllocateAligned(std::size_t alignment, std::size_t bytes) {
    void* p = nullptr;
    return posix_memalign(&p, alignment, bytes) == 0 ? p : nullptr;
  }
  static void FreeAligned(void* p, std::size_t, std::size_t) { std::free(p); }
};

const int registered = [] {
  numarena_bench::RegisterPeer<LibcMalloc>(NUMARENA_BENCH_PEER);
  numarena_bench::RegisterServerWorkloads<LibcMalloc>(NUMARENA_BENCH_PEER);
  return 0;
}();

}  // namespace
