// KV pool tiering: moving blocks between the hot tier (home node slabs) and the cold tier
// (kv_pool_tiering.cpp also holds KvPool's Reclaim, Demote, DemoteBlock and PromoteBlock).
//
// A block moves only while its mover holds MIGRATING on it (kv_pool_state.hpp): its data is
// copied to a slot of the other tier, the block's placement fields are repointed, and the
// release store that clears MIGRATING publishes them to the next pinner.
#pragma once

#include <cstddef>
#include <cstdint>

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

// Moves a cold block home when the hot tier has room (caller holds MIGRATING on `b`).
// Returns whether it moved.
bool TryPromoteLocked(PoolState& p, BlockSlot id, BlockMeta& b);

// A slot in the cold tier, round-robin over its nodes (`*node` receives the node); an empty
// slot when every cold node is full, with the last node's reason in `why` when set.
Slot AllocateCold(PoolState& p, int* node, Status* why);

// Demotes up to `count` hot blocks of `home` chosen by its hotness policy (kBackground: at
// the rate limit). Returns the number moved.
std::size_t DemoteFrom(PoolState& p, HomeNode& home, std::size_t count, KvUrgency urgency);

}  // namespace numarena::kv
