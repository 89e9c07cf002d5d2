// KV pool tiering: moving blocks between the hot tier (home node slabs) and the cold tier,
// and allocating spans with demotion for room (kv_pool_tiering.cpp also holds KvPool's
// Reclaim, Demote, DemoteBlock and PromoteBlock). Below it: the span store.
//
// A block moves only while its mover holds MIGRATING on it (kv_pool_state.hpp): its data is
// copied to a slot of the other tier, the block's placement fields are repointed, and the
// release store that clears MIGRATING publishes them to the next pinner.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv/kv_pool_spans.hpp"

namespace numarena::kv {

// A span for a new owner (one holder, no tokens): from the free lists, else a new one backed
// block by block (hot, demoting victims from the block's home node when it has no hot slot,
// else cold), else an evicted cached span. ResourceExhausted when no memory is left in
// either tier and no cached span can go.
[[nodiscard]] StatusOr<std::uint32_t> AllocateSpan(PoolState& p);

// Moves a cold block home when the hot tier has room (caller holds MIGRATING on `b`).
// Returns whether it moved.
bool TryPromoteLocked(PoolState& p, BlockSlot id, BlockMeta& b);

// Demotes up to `count` hot blocks of `home` chosen by its hotness policy (kBackground: at
// the rate limit). Returns the number moved.
std::size_t DemoteFrom(PoolState& p, HomeNode& home, std::size_t count, KvUrgency urgency);

}  // namespace numarena::kv
