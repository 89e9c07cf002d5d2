// Checked mode (NUMARENA_CHECK=1; arena.hpp "Misuse" says what it detects).
//
// In checked mode no thread gets a front cache and the jemalloc flags a thread uses are kept
// outside arena_internal::thread_flags (jemalloc_heap.cpp), which stays 0. The inline fast
// paths of arena.hpp therefore always fall through to the slow paths, which consult a table
// of allocations: the fast paths are the same code in both modes, without an extra branch.
//
// The table holds one record per address numarena handed out: its size and alignment as
// asked, and whether it is live. A record stays after its free (until the address is handed
// out again), so a second free of it is told apart from a free of an address that was never
// handed out. The table is split in shards by address, each with its own lock.
#pragma once

#include <atomic>
#include <cstddef>

namespace numarena::checked {

extern std::atomic<bool> g_enabled;

// True in checked mode. False until Decide() ran (before the first heap exists).
inline bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

// Reads NUMARENA_CHECK once (through os::GetEnv) and turns checked mode on or off for the
// life of the process; later calls do nothing. CreateHeap calls it before the first heap
// exists, so no pointer is made in one mode and freed in the other.
void Decide();

// `p` was just handed out for `size` bytes (0 counts as 1) aligned to `alignment`.
void RecordAllocation(void* p, std::size_t size, std::size_t alignment) noexcept;
// `p` (owned by a numarena heap) is about to be freed: aborts with a message on stderr when
// it is not a live allocation, else marks it freed.
void CheckFree(void* p) noexcept;
// The same for a sized free, which must also repeat the allocation's size and alignment.
void CheckSizedFree(void* p, std::size_t size, std::size_t alignment) noexcept;
// Aborts with a message naming `caller` when `p` is not a live allocation.
void CheckLive(const void* p, const char* caller) noexcept;

// Drops the records of every address in `heap`'s memory: the heap is being destroyed, and
// the next heap to own those addresses starts with none. Call while the granule table still
// names the heap.
void ForgetHeap(int heap) noexcept;

}  // namespace numarena::checked
