// KV prefix index: full spans found by the hash of their prefix, and the cache of unowned ones.
//
// A full span is identified by hash(parent span's hash, its token ids), so equal hashes mean
// equal prompts up to and including that span (the index's user verifies tokens and parent
// hash, so a hash collision can never hand out the wrong K/V). A span no sequence owns any
// more stays in the index as *cached*, on a least-recently-released list, until its memory is
// needed (lazy eviction, as vLLM's free queue does). The index is sharded by hash; each
// shard's mutex serialises its writers and also guards the reference count transitions of
// its spans that touch the cached list (0 -> 1 on reuse, 1 -> 0 on release), so reuse and
// eviction cannot race. Asking whether a hash is indexed (`Find`) takes no lock at all (see
// kv_read_mostly_map.hpp), so many threads can check the same popular prompt at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "kv/kv_read_mostly_map.hpp"

namespace numarena::kv {

inline constexpr std::uint64_t kRootPrefixHash = 0x6b76'706f'6f6c'0001ull;  // "kvpool"

// Hash of a full span: parent hash and token ids (deterministic across processes; never
// below ReadMostlyMap::kFirstKey).
std::uint64_t HashSpan(std::uint64_t parent, std::span<const std::int32_t> tokens);

class PrefixIndex {
 public:
  static constexpr std::size_t kShards = 16;
  static constexpr std::uint32_t kNone = ReadMostlyMap::kAbsent;

  std::mutex& mutex_for(std::uint64_t hash) { return shard(hash).mu; }

  // The span indexed under `hash`, or kNone, without a lock: it may be gone (or just
  // arrived, or its id reused for another prefix) by the time the caller looks at it. Use
  // the span only after taking a reference that requires it to be indexed and then checking
  // its hash and tokens (AcquireCached), or under mutex_for(hash) with FindLocked.
  std::uint32_t Find(std::uint64_t hash) const { return shard(hash).by_hash.Find(hash); }

  // All *Locked functions need mutex_for(hash) held.
  std::uint32_t FindLocked(std::uint64_t hash) const;
  // False when the hash is already present (the existing span stays).
  bool InsertLocked(std::uint64_t hash, std::uint32_t span);
  // Puts an unowned indexed span at the most-recent end of the cached list.
  void CacheLocked(std::uint64_t hash, std::uint32_t span);
  // Takes a cached span off the cached list (it is owned again).
  void UncacheLocked(std::uint64_t hash, std::uint32_t span);

  // Removes the least recently cached span for which `eligible(span)` holds from the index
  // and the cached list, and returns it; kNone when no cached span is eligible or claimable.
  // `eligible` is a cheap test, called under the span's shard lock while searching and again
  // for the chosen span; `try_claim(span)` is then called under that lock and may refuse (the
  // span stays cached and the search goes on, so it must refuse only for a reason that
  // `eligible` sees next time, such as a block pinned meanwhile). Once it returns true the
  // span is gone from the index. Walks each shard's cached list from its oldest entry until
  // one is eligible: O(shards) when the oldest spans are eligible, up to the number of
  // cached spans when many are not.
  std::uint32_t EvictOldest(const std::function<bool(std::uint32_t)>& eligible,
                            const std::function<bool(std::uint32_t)>& try_claim);

  std::size_t cached() const { return cached_.load(std::memory_order_relaxed); }
  std::size_t indexed() const { return indexed_.load(std::memory_order_relaxed); }

 private:
  // Shards on separate cache-line pairs (128 bytes, the adjacent-line prefetch unit), as
  // ReadMostlyMap's own fields are: 64 would be less than that member's alignment, which
  // clang rejects.
  struct alignas(128) Shard {
    mutable std::mutex mu;
    ReadMostlyMap by_hash;
    struct Cached {
      std::uint64_t hash;
      std::uint32_t span;
      std::uint64_t tick;  // when it was cached: orders eviction across shards
    };
    std::list<Cached> lru;  // oldest first
    absl::flat_hash_map<std::uint32_t, std::list<Cached>::iterator> lru_position;
  };
  Shard& shard(std::uint64_t hash) { return shards_[(hash >> 59) % kShards]; }
  const Shard& shard(std::uint64_t hash) const { return shards_[(hash >> 59) % kShards]; }

  Shard shards_[kShards];
  std::atomic<std::size_t> cached_{0};
  std::atomic<std::size_t> indexed_{0};
  std::atomic<std::uint64_t> tick_{0};
};

}  // namespace numarena::kv
