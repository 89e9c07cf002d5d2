// KV pool pins: taking and dropping pin references on blocks, promoting a cold block on
// touch (kv_pool_pins.cpp also holds KvBlockPin and KvPool's pin functions). Below it:
// tiering.
//
// A pin reference is the pin count in the block's state word (kv_pool_state.hpp): while it
// is above 0 the block is not moved and its memory is not dropped.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv/kv_pool_tiering.hpp"

namespace numarena::kv {

// Takes a pin reference on `id` (waiting while it moves); promotes it first when it is
// cold, `promote` is set, its span is pinnable and there is room. Neither touches the
// hotness nor counts the pin (NotePin does).
void AcquirePin(PoolState& p, BlockSlot id, bool promote);

// Records an access of a pinned block: hotness and the per-tier pin counters.
void NotePin(PoolState& p, BlockSlot id);

// Pins a block the caller knows stays owned (its sequence's lock is held, or it is the
// caller's own span).
inline void PinRaw(PoolState& p, BlockSlot id, bool promote) {
  AcquirePin(p, id, promote);
  NotePin(p, id);
}
inline void UnpinRaw(PoolState& p, BlockSlot id) {
  p.block(id).state.fetch_sub(1, std::memory_order_release);
}

// Blocks with at least one pin reference now (a scan of every block: for the pool's
// destructor, not for hot paths).
std::size_t PinnedBlocks(const PoolState& p);

}  // namespace numarena::kv
