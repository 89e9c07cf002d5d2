// Growing a large object where it lies, or moving its pages into a larger one: the halves of
// realloc (and of the large cache's reuse, arena.cpp) that copy nothing, for objects of 2 MiB
// and more. Defined in arena.cpp.
#pragma once

#include <cstddef>

namespace numarena {

// Grows `p`, a live large object of `heap` (2 MiB-aligned, usable size `usable`, at least
// 2 MiB), to at least `size` bytes without moving it, when the address space right after it
// is free in the heap's jemalloc arena (xallocx). Only the new part is committed: on the
// heap's placement and charged to the capacity gate like any commit, with huge pages over
// the request's own bytes only (HugeAdviceLimit). On success the class map holds the
// object's new class, so an unsized free finds it. False, with `p` unchanged and no error
// left behind, when the space after it is taken, the gate or the node refuses the commit,
// `p` is not 2 MiB-aligned (a 1.75-2 MiB request's block), `size` is not above `usable` (or
// above 2^62), or the caches are off (checked mode, or a jemalloc with other size classes).
// The grown part is on the object's own placement: under a Local or Preferred policy it
// stays on the node the object is on, not the caller's. Thread-safe; any thread may call.
bool GrowLargeInPlace(int heap, void* p, std::size_t usable, std::size_t size) noexcept;

// What MoveLargePages did.
enum class LargeMove {
  kNotMoved,  // nothing changed: copy the bytes, then free `from`
  kMoved,     // `to` holds what `from` held; `from` is a live object of zero pages: free it
  kLost,      // `to` holds what `from` held; `from` must never be used or freed (a hole)
  kToLost,    // nothing moved, `from` is whole; `to` must never be used or freed (a hole)
};

// Moves the pages of `from`, a live large object of `heap` (usable size `usable`, 2 MiB
// aligned, at least 2 MiB), to the front of `to`, a larger live object of the same heap just
// allocated, without copying or faulting them (NodePages::MovePages: mremap(2)): what realloc
// does when `from` cannot grow in place, and what the large cache does with its largest
// block when it cannot grow into a new allocation. Only where the pages may move: the same
// heap, a placement on one node without hugetlb pages, the caches on (not checked mode), no
// capacity gate (whose callbacks may reallocate while jemalloc's locks are held, and a move
// takes the lock fork()'s prepare takes before jemalloc's); kNotMoved elsewhere. kToLost and
// kLost are NodePages::MovePages' rare holes (another thread mapped into one meanwhile).
// Thread-safe for distinct objects; the caller owns both.
LargeMove MoveLargePages(int heap, void* from, std::size_t usable, void* to) noexcept;

}  // namespace numarena
