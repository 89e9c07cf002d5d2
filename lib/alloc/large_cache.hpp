// The large cache: per heap, extents of 2 MiB and more that were freed recently, handed out
// again without a call into jemalloc (see large_cache.cpp).
#pragma once

#include <cstddef>

namespace numarena {

// The numbers of the classes the cache holds: kFirstLargeClass (2 MiB) up to 256 MiB.
inline constexpr unsigned kFirstLargeClass = 64;
inline constexpr unsigned kLargeClassEnd = 93;  // one past the class of 256 MiB

// Keeps `p` (a live object of `heap` whose class is `size_class`, 2 MiB aligned) for reuse.
// False when it does not fit (the class is not cached, its slots are taken, or the cache
// would hold more than `bound_bytes`): the caller frees it to jemalloc. A cache that holds
// more than `bound_bytes` already (the bound shrank) is flushed first.
bool LargeCachePut(int heap, unsigned size_class, void* p, std::size_t bound_bytes) noexcept;

// An object of `size_class` from `heap`'s cache, or nullptr.
void* LargeCacheTake(int heap, unsigned size_class) noexcept;

// Frees every object in `heap`'s cache to jemalloc (so its pages can be purged); returns the
// bytes freed.
std::size_t LargeCacheFlush(int heap) noexcept;

// The largest object in `heap`'s cache, taken out of it (its class in *size_class), or
// nullptr when the cache is empty.
void* LargeCacheTakeLargest(int heap, unsigned* size_class) noexcept;

// Forgets every object in `heap`'s cache without freeing it: for a heap whose jemalloc
// arenas are about to be destroyed (which frees them all at once). No thread may use the
// heap's cache meanwhile.
void LargeCacheDrop(int heap) noexcept;

// In a fork() child: sets every cache's byte count to what its slots hold (the parent's
// threads may have forked between counting an object and putting or taking it).
void LargeCacheRecountInForkChild() noexcept;

// Bytes in `heap`'s cache now.
std::size_t LargeCacheBytes(int heap) noexcept;

}  // namespace numarena
