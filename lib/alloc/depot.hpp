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

// A home slot for a new front cache (any value; the depot takes it modulo its slots per
// class): the cache's thread puts its chains there and takes from there first, so that it
// gets its own objects back before another thread's (see depot.cpp). Consecutive calls return
// consecutive values, so front caches made one after another have different homes.
unsigned DepotNewHome() noexcept;

// Takes ownership of `chain` (live objects of `heap`, of class `size_class`): keeps it if the
// heap's depot holds it within `bound_bytes`, and frees it to jemalloc otherwise. A depot
// holding more than `bound_bytes` (the bound shrank: a capacity gate presses the heap's
// nodes) is flushed first. The chain joins whatever slot `home` holds. It goes to another
// empty slot only when other threads keep filling the home slot; and when the two together
// would be too long to describe, the home slot's chain moves to another empty slot.
void DepotPut(int heap, unsigned size_class, ObjectChain chain, std::size_t bound_bytes,
              unsigned home) noexcept;

// A chain of `size_class` objects from `heap`'s depot (count 0 when it has none): slot
// `home`'s when it holds one, else the next slot's that does (what another thread freed).
// Its last object's first word is unspecified; `slot` says where it came from.
ObjectChain DepotTake(int heap, unsigned size_class, unsigned home) noexcept;

// Frees every object in `heap`'s depot to jemalloc; returns the bytes freed.
std::size_t DepotFlush(int heap) noexcept;

// The sweep of `heap`'s depot as at a clock of `now_ns` (memory_return.cpp): the classes
// nobody took from or put to in the last `idle_ns` go back to jemalloc. Returns the bytes
// freed.
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
