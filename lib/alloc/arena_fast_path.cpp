// The tables the inline fast paths of numarena/arena.hpp read (declared in
// numarena/internal/arena_fast_path.hpp), defined here and only here. They are written by
// the rest of lib/alloc: granule_heap when the page provider reserves a range
// (node_pages.cpp), thread_flags when a thread first uses a heap (jemalloc_heap.cpp), the
// front cache pointers and class tables by front_cache.cpp. (The class map's tables are in
// class_map.cpp.)
#include "numarena/internal/arena_fast_path.hpp"

namespace numarena::arena_internal {

std::atomic<std::uint16_t> granule_heap[kGranuleCount];
thread_local constinit int thread_flags[kMaxHeaps] = {};
thread_local constinit FrontCache* front_caches[kMaxHeaps] = {};
std::uint8_t front_class_of_request[kFrontMaxSize / 8 + 1];
std::uint8_t front_class_of_usable[kFrontMaxSize / 8 + 1];
std::uint32_t front_class_bytes[kFrontClasses];

}  // namespace numarena::arena_internal
