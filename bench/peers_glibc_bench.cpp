// glibc malloc on the peer comparison's workloads (bench/peer_workloads.hpp).
//
// A separate program because linking jemalloc (as numarena does) replaces malloc for the
// whole process: this one links neither numarena nor jemalloc (see bench/CMakeLists.txt), so
// malloc here is glibc's. Its JSON is merged with bench/peers_bench.cpp's by
//   tools/plot_results.py peers peers_bench.json peers_glibc_bench.json
#include <cstdlib>

#include "peer_workloads.hpp"

namespace {

struct GlibcMalloc {
  static void* Allocate(std::size_t bytes) { return std::malloc(bytes); }
  static void Free(void* p, std::size_t) { std::free(p); }
};

const int registered = [] {
  numarena_bench::RegisterPeer<GlibcMalloc>("glibc_malloc");
  return 0;
}();

}  // namespace
