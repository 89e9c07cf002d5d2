// The depot: per heap, freed objects of the front cache's classes (16 B to 1.75 MiB) that the
// threads' front caches had no room for, kept for any thread of the heap to take back (see
// depot.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "numarena/internal/arena_fast_path.hpp"

namespace numarena {

using arena_internal::kFirstDepotClass;

// A chain of objects of one class, linked through their first words (the last one's is
// unspecified); `count` objects from `head` to `tail`. DepotTake sets `slot` to the slot it
// took the chain from, where what the taker does not keep goes back.
struct ObjectChain {
  void* head = nullptr;
  void* tail = nullptr;
  std::uint32_t count = 0;
  std::uint32_t slot = 0;
};

// The depot slot (of kSlots per class; any value is taken modulo their number) that the
// thread owning `front_cache` puts its chains to and takes from first, so that a thread takes
// back its own objects before another thread's (see depot.cpp). Distinct for front caches
// within 16 KiB of each other (they are 2 KiB allocations); any value is correct.
unsigned DepotHomeSlot(const void* front_cache) noexcept;

// Takes ownership of `chain` (live objects of `heap`, of class `size_class`): keeps it if the
// heap's depot holds it within `bound_bytes`, and frees it to jemalloc otherwise. A depot
// holding more than `bound_bytes` (the bound shrank: a capacity gate presses the heap's
// nodes) is flushed first. The chain joins whatever slot `home` holds; only when other threads
// keep filling that slot does it go to another empty one.
void DepotPut(int heap, unsigned size_class, ObjectChain chain, std::size_t bound_bytes,
              unsigned home) noexcept;

// A chain of `size_class` objects from `heap`'s depot (count 0 when it has none): slot
// `home`'s when it holds one, else the next slot's that does (what another thread freed).
// Its last object's first word is unspecified; `slot` says where it came from.
ObjectChain DepotTake(int heap, unsigned size_class, unsigned home) noexcept;

// Frees every object in `heap`'s depot to jemalloc; returns the bytes freed.
std::size_t DepotFlush(int heap) noexcept;

// The sweep of `heap`'s depot as at a clock of `now_ns` (memory_return.cpp): the classes
// nobody took from since the last sweep and nobody put to in the last `idle_ns` go back to
// jemalloc. Returns the bytes freed.
std::size_t DepotSweep(int heap, std::int64_t now_ns, std::int64_t idle_ns) noexcept;

// Forgets every object in `heap`'s depot without freeing it, for a heap whose jemalloc arenas
// are about to be destroyed. No thread may use the heap meanwhile.
void DepotDrop(int heap) noexcept;

// In a fork() child: sets every depot's byte count to what its slots hold (the parent's
// threads may have forked between counting a chain and putting or taking it).
void DepotRecountInForkChild() noexcept;

// Bytes in `heap`'s depot now.
std::size_t DepotBytes(int heap) noexcept;

}  // namespace numarena
