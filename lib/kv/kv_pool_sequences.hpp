// KV pool sequences: sequence slots and their locks (kv_pool_sequences.cpp also holds
// KvPool's sequence functions: CreateSequence, Append, MarkComputed, Truncate, Fork,
// FreeSequence, Length, CachedPrefixTokens).
#pragma once

#include <mutex>

#include "kv/kv_pool_state.hpp"

namespace numarena::kv {

// A live sequence with its lock held.
struct LockedSequence {
  Sequence* sequence;
  std::unique_lock<SpinLock> lock;
};

// The live sequence `id` with its lock held (checked again under the lock: the id may be
// freed between the lookup and the lock), or NotFound.
[[nodiscard]] StatusOr<LockedSequence> LockLive(const PoolState& p, KvSequenceId id);

}  // namespace numarena::kv
