// KV pool spans, the span store: the memory of spans' blocks in both tiers, allocating,
// releasing, caching, evicting and sharing spans (kv_pool_spans.cpp). It calls nothing above
// it: where a demotion would make room, it says so to its caller (Backing::kNoHotSlot).
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

// Repoints a block (caller holds MIGRATING on it, or its span is not published yet).
inline void SetPlacement(BlockMeta& b, Slot slot, KvTier tier, int node) {
  b.data.store(slot.data, std::memory_order_relaxed);
  b.slab.store(slot.slab, std::memory_order_relaxed);
  b.tier.store(static_cast<std::uint8_t>(tier), std::memory_order_relaxed);
  b.node.store(node, std::memory_order_relaxed);
  b.misplaced.store(0, std::memory_order_relaxed);  // new memory: the next audit looks again
}

// Whether blocks of span `s` may be pinned: it belongs to a sequence or to the cache.
inline bool Pinnable(const PoolState& p, std::uint32_t s) {
  const std::uint8_t st = p.span(s).state.load(std::memory_order_acquire);
  return st == kInUse || st == kCached;
}

// The home node of block `index` of a span (the node of its head group).
inline HomeNode& HomeOfIndex(const PoolState& p, int index) {
  return *p.home_of(p.group_node[p.layout.GroupOf(index)]);
}

// Enters hot block `id` (just placed on `home`) at the hot end of its home's list with a
// fresh access time.
void InsertHot(PoolState& p, HomeNode& home, BlockSlot id);

// A slot in the cold tier, round-robin over its nodes (`*node` receives the node); an empty
// slot when every cold node is full, with the last node's reason in `why` when set.
Slot AllocateCold(PoolState& p, int* node, Status* why);

// A span for a new owner, step one: a free span from the free lists (ready: handed to the
// caller with one holder and no tokens, `*ready` set), else a partial free span or an
// unbacked one whose blocks BackBlocks must back first. ResourceExhausted when the id space
// or the heap for metadata is exhausted.
[[nodiscard]] StatusOr<std::uint32_t> TakeSpan(PoolState& p, bool* ready);

// What BackBlocks found.
enum class Backing {
  kDone,       // every block has memory; the span is the caller's (one holder, no tokens)
  kNoHotSlot,  // block `*next`'s home node has no hot slot and a cold tier exists
  kNoMemory,   // no memory for block `*next` in either tier (the reason in `why`)
};

// Step two: backs the blocks of span `s` (from TakeSpan) from block `*next` on, each hot on
// its home node. A block with no hot slot stops it with kNoHotSlot, unless it is block
// `*next` and `cold_for_next` is set (the caller made what room it could): then it goes to
// the cold tier. The span store never demotes: its caller does, and calls again.
Backing BackBlocks(PoolState& p, std::uint32_t s, std::size_t* next, bool cold_for_next,
                   Status* why);

// Step two failed with kNoMemory: gives back what span `s` got and hands the caller an
// evicted cached span instead (cached spans keep all their memory), or ResourceExhausted
// with `why`.
[[nodiscard]] StatusOr<std::uint32_t> SpanWithoutMemory(PoolState& p, std::uint32_t s,
                                                        const Status& why);

// Drops one holder of span `s`; the last one makes it cached (indexed spans) or free.
void ReleaseSpan(PoolState& p, std::uint32_t s);

// Looks a full span up by its prefix (parent hash, tokens, their hash) and adds the caller
// as a holder when found; kNil otherwise (also for a hash collision).
std::uint32_t AcquireCached(PoolState& p, std::uint64_t parent,
                            std::span<const std::int32_t> tokens, std::uint64_t hash);

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
