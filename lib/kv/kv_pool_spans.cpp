// KV pool spans, the span store: allocation and backing, release into the cache or the free
// lists, eviction, and sharing by prefix (see kv_pool_spans.hpp).
//
// Prefix publication. A span is hashed when it fills (Append) but enters the prefix index
// only in MarkComputed, after the caller has written its K/V. The insert happens under the
// span's index shard mutex and sets the INDEXED bit of the span's reference word with a
// release; a lookup that hands the span to another sequence (AcquireCached) either takes the
// same mutex or adds its reference with an acquire CAS that requires that bit, so the
// writer's row stores happen-before the sharer's reads either way. A hashed span can be
// shared (Fork) before it is indexed, so the bit may be set while several sequences hold the
// span: ReleaseSpan therefore decides between the cached and the free path under that shard
// mutex whenever the span is hashed.
//
// Sharing a popular prompt takes no lock while some sequence holds it: AcquireCached finds
// the span in the lock-free index and adds a holder only if the reference word shows it
// indexed and held (never from 0, so the cached list, which needs the mutex, is not
// involved). It then checks hash, parent and tokens; when the id was evicted and reused for
// another prefix meanwhile, it lets go again. Since an unindexed word is never touched by a
// lookup, an unindexed span's sole holder may drop its reference with a plain store.
#include "kv/kv_pool_spans.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <mutex>
#include <thread>

#include "kv/kv_testing.hpp"

namespace numarena::kv {

namespace {

// Gives span `s` to a new owner: a new generation (so ids of the previous owner's blocks go
// stale), one holder, no tokens.
inline void ActivateSpan(PoolState& p, std::uint32_t s) {
  SpanMeta& m = p.span(s);
  m.generation.store(m.generation.load(std::memory_order_relaxed) + 1,
                     std::memory_order_relaxed);  // published by the state store below
  m.refs.store(1, std::memory_order_relaxed);
  m.tokens = 0;
  m.partial = false;
  m.hashed = false;
  m.state.store(kInUse, std::memory_order_release);
}

// Frees the memory of the span's blocks whose data is on `node`, or of every block when
// `node` is -1 (the span holds no data any more). Returns how many blocks were freed;
// `left` tells whether any block of the span still has memory.
std::size_t DropBlocks(PoolState& p, std::uint32_t s, int node, bool* left) {
  std::size_t dropped = 0;
  bool kept = false;
  for (std::size_t i = 0; i < p.bps; ++i) {
    const BlockSlot id = p.block_id(s, static_cast<int>(i));
    BlockMeta& b = p.block(id);
    // A demotion that chose this block before its span became free may still be copying it:
    // wait for it, and hold MIGRATING so nothing moves the block while its memory goes.
    for (std::uint32_t expected = 0;
         !b.state.compare_exchange_weak(expected, kMigrating, std::memory_order_acquire);
         expected = 0) {
      std::this_thread::yield();
    }
    const auto tier = static_cast<KvTier>(b.tier.load(std::memory_order_relaxed));
    const int at = b.node.load(std::memory_order_relaxed);
    if (tier == KvTier::kNone || (node >= 0 && at != node)) {
      kept = kept || tier != KvTier::kNone;
      b.state.store(0, std::memory_order_release);
      continue;
    }
    const Slot slot{b.data.load(std::memory_order_relaxed), b.slab.load(std::memory_order_relaxed)};
    if (tier == KvTier::kHot) {
      HomeNode* home = p.home_of(at);
      {
        std::lock_guard lock(home->list_mu);
        home->policy->OnRemove(home->list, id, /*demoted=*/false);
        home->list.Remove(id);
      }
      home->hot->Free(slot);
    } else {
      p.cold_of(at)->Free(slot);
    }
    SetPlacement(b, {}, KvTier::kNone, -1);
    b.state.store(0, std::memory_order_release);
    ++dropped;
  }
  *left = kept;
  return dropped;
}

// Whether Reclaim or an allocation may take the span's memory on `node` (-1: on any
// node): some block has its data there (either tier) and no block is pinned or being
// moved. The second part also keeps Reclaim from waiting on a block that its own thread
// holds MIGRATING further up the stack (a demotion or promotion whose slab allocation ran
// the budget's reclaim hook). A cheap test: a pin may come right after it (ClaimCached
// settles that for cached spans).
inline bool ReclaimableOn(const PoolState& p, std::uint32_t s, int node) {
  bool on_node = false;
  for (std::size_t i = 0; i < p.bps; ++i) {
    const BlockMeta& b = p.block(p.block_id(s, static_cast<int>(i)));
    if (b.state.load(std::memory_order_acquire) != 0) return false;
    if (b.tier.load(std::memory_order_relaxed) != static_cast<std::uint8_t>(KvTier::kNone) &&
        (node < 0 || b.node.load(std::memory_order_relaxed) == node))
      on_node = true;
  }
  return on_node;
}

// Takes cached span `s` out of the cache for its evictor, under the span's index shard
// lock, unless one of its blocks is pinned or being moved. Every block is claimed
// (0 -> MIGRATING) before the span's state changes, so a pin either came first (the claim
// fails and the span stays cached) or waits for the claim and then finds the span free
// (Pin backs out): a reader's pin never sees its block evicted or handed to a new owner.
inline bool ClaimCached(PoolState& p, std::uint32_t s) {
  std::size_t claimed = 0;
  for (; claimed < p.bps; ++claimed) {
    std::uint32_t expected = 0;
    if (!p.block(p.block_id(s, static_cast<int>(claimed)))
             .state.compare_exchange_strong(expected, kMigrating, std::memory_order_acquire))
      break;
  }
  const bool all = claimed == p.bps;
  if (all) {
    SpanMeta& m = p.span(s);
    m.refs.store(0, std::memory_order_relaxed);       // cached: no holders; now out of the index
    m.state.store(kFree, std::memory_order_relaxed);  // not pinnable, on no free list
  }
  for (std::size_t i = 0; i < claimed; ++i)
    p.block(p.block_id(s, static_cast<int>(i))).state.store(0, std::memory_order_release);
  return all;
}

// A span id whose blocks have no memory: a recycled one or a new one. Out of line, as
// BackBlock: AllocateSpan's free-list path stays small.
[[gnu::noinline]] StatusOr<std::uint32_t> NewUnbackedSpan(PoolState& p) {
  std::lock_guard lock(p.grow_mu);
  if (!p.unbacked.empty()) {
    const std::uint32_t s = p.unbacked.back();
    p.unbacked.pop_back();
    return s;
  }
  const std::uint32_t s = p.spans_created.load(std::memory_order_relaxed);
  if (s / kSpansPerChunk >= kMaxChunks ||
      static_cast<std::uint64_t>(s + 1) * p.bps > 0xffffffffull) {
    return absl::ResourceExhaustedError("KV pool: block id space exhausted");
  }
  if (s % kSpansPerChunk == 0) {
    Chunk* chunk = Chunk::New(p.bps, p.tpb);
    if (chunk == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("KV pool: no heap for the metadata of ",
                                                       kSpansPerChunk, " more spans (", p.bps,
                                                       " blocks and ", p.tpb, " token ids each)"));
    }
    p.chunks[s / kSpansPerChunk].store(chunk, std::memory_order_release);
  }
  p.spans_created.store(s + 1, std::memory_order_release);
  return s;
}

// Backs block `index` of span `s`: hot on its home node, else (when `may_go_cold`) cold.
[[gnu::noinline]] Backing BackBlock(PoolState& p, std::uint32_t s, int index, bool may_go_cold,
                                    Status* why) {
  const BlockSlot id = p.block_id(s, index);
  BlockMeta& b = p.block(id);
  HomeNode& home = HomeOfIndex(p, index);
  Slot slot = home.hot->Allocate(/*may_grow=*/true, why);
  if (slot) {
    SetPlacement(b, slot, KvTier::kHot, home.node);
    InsertHot(p, home, id);
    return Backing::kDone;
  }
  if (p.cold.empty()) return Backing::kNoMemory;
  if (!may_go_cold) return Backing::kNoHotSlot;
  int cold_node = -1;
  Status cold_why;
  slot = AllocateCold(p, &cold_node, &cold_why);
  if (!slot) {
    if (why != nullptr) {
      *why = absl::ResourceExhaustedError(
          absl::StrCat(why->message(), "; cold tier: ", cold_why.message()));
    }
    return Backing::kNoMemory;
  }
  SetPlacement(b, slot, KvTier::kCold, cold_node);
  ResetHotness(b.hot, p.Tick());
  return Backing::kDone;
}

// Whether indexed span `s` holds exactly this prefix. Its caller holds a reference on it
// or its index shard lock, so these fields stay put while they are read.
inline bool HoldsPrefix(const PoolState& p, std::uint32_t s, std::uint64_t parent,
                        std::span<const std::int32_t> tokens, std::uint64_t hash) {
  const SpanMeta& m = p.span(s);
  return m.hash == hash && m.parent_hash == parent &&
         std::equal(tokens.begin(), tokens.end(), p.span_tokens(s));
}

}  // namespace

void DropAndPark(PoolState& p, std::uint32_t s, int node) {
  bool backed_left = false;
  const bool dropped_some = DropBlocks(p, s, node, &backed_left) > 0;
  SpanMeta& m = p.span(s);
  if (!backed_left) {
    m.partial = false;
    m.state.store(kUnbacked, std::memory_order_relaxed);
    std::lock_guard lock(p.grow_mu);
    p.unbacked.push_back(s);
    return;
  }
  if (dropped_some) m.partial = true;
  m.state.store(kFree, std::memory_order_relaxed);
  p.free_spans.Push(s);
}

std::uint32_t EvictCached(PoolState& p, int node) {
  const std::uint32_t s =
      p.prefix.EvictOldest([&p, node](std::uint32_t c) { return ReclaimableOn(p, c, node); },
                           [&p](std::uint32_t c) { return ClaimCached(p, c); });
  if (s == PrefixIndex::kNone) return kNil;
  p.cached_evictions.fetch_add(1, std::memory_order_relaxed);
  return s;
}

std::uint32_t TakeFreeSpanOn(PoolState& p, int node) {
  return p.free_spans.PopIf([&p, node](std::uint32_t s) { return ReclaimableOn(p, s, node); });
}

void InsertHot(PoolState& p, HomeNode& home, BlockSlot id) {
  std::lock_guard lock(home.list_mu);
  ResetHotness(p.block(id).hot, p.Tick());
  home.list.PushBack(id);
  home.policy->OnInsert(home.list, id);
}

Slot AllocateCold(PoolState& p, int* node, Status* why) {
  const std::size_t n = p.cold.size();
  const std::size_t start = p.cold_cursor.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t k = 0; k < n; ++k) {
    SlabAllocator* a = p.cold[(start + k) % n].get();
    Slot slot = a->Allocate(/*may_grow=*/true, why);
    if (slot) {
      *node = a->node();
      return slot;
    }
  }
  return {};
}

StatusOr<std::uint32_t> TakeSpan(PoolState& p, bool* ready) {
  const std::uint32_t s = p.free_spans.Pop();
  *ready = s != kNil && !p.span(s).partial;
  if (*ready) {
    ActivateSpan(p, s);
    return s;
  }
  if (s != kNil) return s;
  return NewUnbackedSpan(p);
}

Backing BackBlocks(PoolState& p, std::uint32_t s, std::size_t* next, bool cold_for_next,
                   Status* why) {
  for (std::size_t i = *next; i < p.bps; ++i) {
    // A partial free span kept the blocks on nodes a Reclaim did not ask for.
    if (p.block(p.block_id(s, static_cast<int>(i))).tier.load(std::memory_order_relaxed) !=
        static_cast<std::uint8_t>(KvTier::kNone))
      continue;
    const Backing backing =
        BackBlock(p, s, static_cast<int>(i), /*may_go_cold=*/cold_for_next && i == *next, why);
    if (backing != Backing::kDone) {
      *next = i;
      return backing;
    }
  }
  ActivateSpan(p, s);
  return Backing::kDone;
}

StatusOr<std::uint32_t> SpanWithoutMemory(PoolState& p, std::uint32_t s, const Status& why) {
  DropAndPark(p, s, -1);
  // Cached spans keep all their blocks' memory: an evicted one is ready as it is.
  const std::uint32_t evicted = EvictCached(p, -1);
  if (evicted != kNil) {
    ActivateSpan(p, evicted);
    return evicted;
  }
  p.refusals.fetch_add(1, std::memory_order_relaxed);
  return absl::ResourceExhaustedError(
      absl::StrCat("KV pool: no memory for a block: ", why.message(),
                   p.cold.empty() ? " (no cold tier is configured)" : ""));
}

void ReleaseSpan(PoolState& p, std::uint32_t s) {
  SpanMeta& m = p.span(s);
  // Not the last holder: nothing to decide, no lock (a shared prompt's spans are released
  // by every request that used them).
  for (std::uint32_t refs = m.refs.load(std::memory_order_relaxed); Holders(refs) > 1;) {
    if (m.refs.compare_exchange_weak(refs, refs - 1, std::memory_order_release,
                                     std::memory_order_relaxed))
      return;
  }
  // A hashed span may be indexed by another holder's MarkComputed at any moment, so the
  // indexed check and the reference drop happen together under the shard mutex. (`hashed`
  // and `hash` do not change while the span is shared.) A span never filled cannot be
  // indexed: no lock.
  std::unique_lock<std::mutex> index_lock;
  if (m.hashed) {
    index_lock = std::unique_lock(p.prefix.mutex_for(m.hash));
    if (m.refs.load(std::memory_order_relaxed) & kIndexedBit) {
      // A lock-free AcquireCached may add a holder meanwhile, but never from 0 holders.
      const std::uint32_t before = m.refs.fetch_sub(1, std::memory_order_acq_rel);
      assert(Holders(before) >= 1 && "a span released more often than it was held");
      if (Holders(before) == 1) {
        m.state.store(kCached, std::memory_order_relaxed);
        p.prefix.CacheLocked(m.hash, s);
      }
      return;
    }
  }
  // Not indexed (and it cannot become so now: that needs this lock or another holder), so
  // a new reference can only come from another holder (Fork): the sole holder needs no
  // read-modify-write.
  if (m.refs.load(std::memory_order_acquire) == 1) {
    m.refs.store(0, std::memory_order_relaxed);
  } else if (const std::uint32_t before = m.refs.fetch_sub(1, std::memory_order_acq_rel);
             before != 1) {
    assert(Holders(before) >= 1 && "a span released more often than it was held");
    return;
  }
  if (index_lock.owns_lock()) index_lock.unlock();
  m.state.store(kFree, std::memory_order_relaxed);
  p.free_spans.Push(s);
}

std::uint32_t AcquireCached(PoolState& p, std::uint64_t parent,
                            std::span<const std::int32_t> tokens, std::uint64_t hash) {
  // Lock-free when a sequence holds the span (see the top of this file).
  const std::uint32_t seen = p.prefix.Find(hash);
  if (seen == PrefixIndex::kNone) return kNil;
  if (auto* hook = testing::after_prefix_find.load(std::memory_order_relaxed)) hook(seen);
  SpanMeta& held = p.span(seen);
  for (std::uint32_t refs = held.refs.load(std::memory_order_relaxed);
       (refs & kIndexedBit) && Holders(refs) > 0;) {
    if (!held.refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acquire,
                                         std::memory_order_relaxed))
      continue;
    if (HoldsPrefix(p, seen, parent, tokens, hash)) return seen;
    ReleaseSpan(p, seen);  // evicted and reused for another prefix meanwhile, or a collision
    break;
  }
  // Unheld (cached, so it must leave the cached list) or just changed: under the lock.
  std::lock_guard lock(p.prefix.mutex_for(hash));
  const std::uint32_t s = p.prefix.FindLocked(hash);
  if (s == PrefixIndex::kNone) return kNil;
  if (!HoldsPrefix(p, s, parent, tokens, hash)) return kNil;  // a collision: never share it
  SpanMeta& m = p.span(s);
  if (Holders(m.refs.fetch_add(1, std::memory_order_acq_rel)) == 0) {
    p.prefix.UncacheLocked(hash, s);
    m.state.store(kInUse, std::memory_order_relaxed);
  }
  return s;
}

}  // namespace numarena::kv
