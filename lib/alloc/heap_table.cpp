// The heap table (see heap_table.hpp).
#include "alloc/heap_table.hpp"

namespace numarena {

std::atomic<Heap*> g_heaps[arena_internal::kMaxHeaps];
std::atomic<int> g_heap_count{0};

Heap* HeapById(int id) {
  if (id < 0 || id >= arena_internal::kMaxHeaps) return nullptr;
  return g_heaps[id].load(std::memory_order_acquire);
}

}  // namespace numarena
