// KV pool spans: allocating, releasing, caching, evicting and sharing spans
// (kv_pool_spans.cpp).
//
// A span is the row of blocks (all layer ranges x head groups) for one run of
// tokens_per_block tokens. Its life: unbacked (no memory) -> free (memory, on a free list)
// -> in use (held by sequences) -> cached (full, computed, in the prefix index, held by
// none) or free again; eviction takes a cached span back to free or unbacked.
#pragma once

#include <cstdint>
#include <span>

#include "kv/kv_pool_state.hpp"

namespace numarena::kv {

// A span for a new owner (one holder, no tokens): from the free lists, else a new one backed
// block by block (hot, demoting a victim, else cold), else an evicted cached span.
// ResourceExhausted when no memory is left in either tier and no cached span can go.
[[nodiscard]] StatusOr<std::uint32_t> AllocateSpan(PoolState& p);

// Drops one holder of span `s`; the last one makes it cached (indexed spans) or free.
void ReleaseSpan(PoolState& p, std::uint32_t s);

// Looks a full span up by its prefix (parent hash, tokens, their hash) and adds the caller
// as a holder when found; kNil otherwise (also for a hash collision).
std::uint32_t AcquireCached(PoolState& p, std::uint64_t parent,
                            std::span<const std::int32_t> tokens, std::uint64_t hash);

// Copies a span's data and first `tokens` token ids into exclusive span `to`
// (copy-on-write).
void CopySpan(PoolState& p, std::uint32_t from, std::uint32_t to, int tokens);

// Drops the memory of unowned span `s` on `node` (-1: everywhere) and puts the span where it
// now belongs: the free lists when some of its blocks still have memory (allocation backs
// the rest first), else the unbacked spans.
void DropAndPark(PoolState& p, std::uint32_t s, int node);

// Evicts the least recently released cached span that has memory on `node` (-1: anywhere)
// and no pinned or moving block: it leaves the prefix index and belongs to the caller
// (state kFree, on no free list) to drop or reuse. kNil when no cached span qualifies.
// Both evictions, Reclaim's and an allocation's that found no memory, go through here.
std::uint32_t EvictCached(PoolState& p, int node);

// Takes a free span whose memory on `node` Reclaim may drop off the free lists; kNil when
// there is none.
std::uint32_t TakeFreeSpanOn(PoolState& p, int node);

}  // namespace numarena::kv
