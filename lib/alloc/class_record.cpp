// Recording an object's size class in the class map (class_map.cpp says how the map works):
// the slow side, which makes a granule's table on the node of the granule's heap.
#include "alloc/heap_table.hpp"
#include "alloc/node_pages.hpp"
#include "numarena/internal/arena_fast_path.hpp"
#include "os/os.hpp"

namespace numarena::arena_internal {

void RecordClassSlow(const void* p, unsigned size_class) noexcept {
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t granule = a >> kGranuleShift;
  if (granule >= kGranuleCount) return;
  std::atomic<std::uint8_t>* table = class_tables[granule].load(std::memory_order_acquire);
  if (table == nullptr) {
    constexpr std::size_t kTableBytes = kChunksPerGranule;  // one byte per chunk
    void* memory = nullptr;
    if (os::ReserveAddressSpaceNoAlloc(kTableBytes, os::PageSize(), &memory) != 0) return;
    if (os::CommitRangeNoAlloc(memory, kTableBytes) != 0) {
      os::Unmap(memory, kTableBytes);
      return;
    }
    if (Heap* heap = HeapById(HeapOf(p))) {
      const int node = heap->pages->first_node();
      os::KernelNodeMask mask;
      if (os::MakeKernelNodeMask({&node, 1}, &mask) == 0) {
        (void)os::BindRangeNoAlloc(memory, kTableBytes, os::PolicyMode::kPreferred, mask);
      }
    }
    auto* fresh = static_cast<std::atomic<std::uint8_t>*>(memory);
    std::atomic<std::uint8_t>* expected = nullptr;
    if (class_tables[granule].compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) {
      table = fresh;
    } else {
      os::Unmap(memory, kTableBytes);  // another thread made it first
      table = expected;
    }
  }
  table[(a >> kChunkShift) & (kChunksPerGranule - 1)].store(
      static_cast<std::uint8_t>(size_class + 1), std::memory_order_relaxed);
}

}  // namespace numarena::arena_internal
