// The class map: the size class of every live numarena object, found from its address alone.
//
// An unsized free (numarena::deallocate(p)) must know which front-cache list, or which large
// cache slot, `p` belongs in. jemalloc can say (sallocx), but only through a lookup in its
// own radix tree that costs more than the rest of the free together. numarena records the
// class itself, once, when jemalloc hands an object out (the fast path's mallocx and the slow
// path's), in a byte per 4 KiB chunk of address space: 1 + the class of the object that
// starts in that chunk. Objects that sit in numarena's caches stay live for jemalloc, so their
// bytes stay valid until they go back to jemalloc.
//
// Why a chunk never holds the starts of two live objects of different classes: jemalloc
// carves every object from an extent (a slab of one small class, or one large object) that
// starts and ends on a page boundary, and pages are 4 KiB or multiples of it; so a chunk lies
// in one extent. Objects of classes above 4 KiB are more than 4 KiB apart, so at most one
// starts in a chunk; the objects of a small slab all have the slab's class. A byte may be
// stale (its object went back to jemalloc, the pages were reused), but only chunks where no
// live object starts keep stale bytes, and the next object that starts there rewrites it
// before numarena returns it to anyone. Bytes are relaxed atomics: a thread that frees `p`
// has been handed `p` by the thread that allocated it (and recorded the byte), so it sees the
// byte; later writes to the same byte, while `p` lives, write the same value.
//
// Memory: one table of 16 MiB of address space per 64 GiB granule that holds numarena
// objects, made readable on first use; the kernel backs only the 4 KiB table pages whose
// chunks hold objects (one table page per 16 MiB of heap address space used, 1/4096 of it).
// A table prefers the node of the granule's heap (MPOL_PREFERRED), like the heap's other
// bookkeeping. It is not charged to the capacity gate: a table page is faulted in by a store
// on the allocation fast path, where there is no place to charge it. A table goes back to
// the kernel when the granule's heap is destroyed (DropClassTable). Recording a class, which
// may make the granule's table on its heap's node, is in class_record.cpp.
#include <jemalloc/jemalloc.h>

#include "alloc/class_map.hpp"
#include "numarena/internal/arena_fast_path.hpp"
#include "os/os.hpp"

namespace numarena::arena_internal {

std::atomic<std::atomic<std::uint8_t>*> class_tables[kGranuleCount];

void DropClassTable(std::uintptr_t granule) noexcept {
  if (granule >= kGranuleCount) return;
  std::atomic<std::uint8_t>* table = class_tables[granule].exchange(nullptr, std::memory_order_acq_rel);
  if (table != nullptr) os::Unmap(table, kChunksPerGranule);
}

}  // namespace numarena::arena_internal
