// The KV-cache tensor pool: spans of blocks, sequences, pins and the tiering engine
// (see include/numarena/kv_pool.hpp for the model).
//
// Concurrency design. Spans and blocks live in chunked tables that only grow, so a handle is
// resolved with two loads and no lock. A block's `state` word holds its pin count and a
// MIGRATING bit: pinning is a CAS that fails while the bit is set, and a migration starts
// with a CAS from 0 (no pins) to MIGRATING, so a pinned block is never moved and a block
// being moved is never handed out. Block fields (data, tier, node, slab) change only while
// MIGRATING is held (or before the block's span is published), and the release store that
// ends a migration publishes them to the next pinner. Free spans sit in per-thread-sharded
// free lists (a spinlock each): allocate and free of a span never take a pool-wide lock.
// Per node, a list lock guards the hot list and the hotness policy; the prefix index has
// its own sharded locks; every sequence has its own lock. Storage is always called with no
// lock held (see kv_slab.hpp), because a budget's reclaim hook may re-enter `Reclaim`.
//
// Pins by block id. `Pin(id)` takes the pin reference first and checks the span's state
// afterwards, letting go when the span is not in use or cached. A pin held keeps the
// block's memory (DropBlocks waits for it), so a pin that passes the check points at memory
// that stays until unpin. A cached span leaves the cache (evicted by Reclaim or by an
// allocation that found no memory) only through ClaimCached, which claims every block
// (0 -> MIGRATING) before changing the span's state: a pinned span is skipped, and a pin
// that waited for the claim finds the span free and backs out.
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
#include "numarena/kv_pool.hpp"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "kv/kv_hotness.hpp"
#include "kv/kv_layout.hpp"
#include "kv/kv_placement.hpp"
#include "kv/kv_prefix_index.hpp"
#include "kv/kv_slab.hpp"
#include "kv/kv_testing.hpp"
#include "numarena/budget.hpp"
#include "numarena/topology.hpp"

namespace numarena {

using kv::kNil;

// A block's index in the pool's tables (span * blocks per span + index in the span). The
// public KvBlockId adds the span's generation above it (see PublicId).
using BlockSlot = std::uint32_t;

namespace {

constexpr std::uint32_t kMigrating = 1u << 31;
constexpr std::uint32_t kSpansPerChunk = 256;
constexpr std::uint32_t kMaxChunks = 1u << 16;
constexpr std::size_t kFreeShards = 8;
constexpr std::size_t kStatStripes = 16;

enum SpanState : std::uint8_t { kUnbacked = 0, kFree = 1, kInUse = 2, kCached = 3 };

// The lock of a free list and of a sequence. Both are almost never contended (a sequence
// is worked on by one decode thread at a time, a free list mostly by one thread), so what
// matters is the uncontended cost: unlock is a plain release store, where std::mutex pays a
// second locked instruction (about 5 ns each on the CI machine; allocate+free takes four
// sequence locks). A waiter spins a little, then yields, then sleeps 20 us at a time,
// because a sequence's holder may be mapping a slab or running a budget's reclaim.
class SpinLock {
 public:
  void lock() {
    if (!flag_.exchange(true, std::memory_order_acquire)) return;
    LockSlow();
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline]] void LockSlow() {
    unsigned waits = 0;
    do {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++waits <= 64) continue;
        if (waits <= 128) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
      }
    } while (flag_.exchange(true, std::memory_order_acquire));
  }
  std::atomic<bool> flag_{false};
};

struct BlockMeta {
  std::atomic<std::uint32_t> state{0};  // pin count | kMigrating
  std::atomic<std::byte*> data{nullptr};
  std::atomic<std::uint8_t> tier{0};  // KvTier
  std::atomic<std::int32_t> node{-1};
  std::atomic<std::int32_t> slab{-1};
  kv::HotMeta hot;
};

// False sharing. Neighbouring spans, sequences and free lists usually belong to different
// threads, so each sits on its own pair of cache lines (128 bytes: the adjacent-line
// prefetcher moves lines in pairs), and a sequence keeps its span list inline rather than
// in a small heap block that the allocator may pack next to another thread's. Sharing made
// two threads' allocate+free run at a quarter of one thread's speed each.
constexpr std::size_t kNoFalseSharing = 128;

// A span's reference word: its holder count, plus kIndexedBit while it is in the prefix
// index (set and cleared under its index shard lock).
constexpr std::uint32_t kIndexedBit = 1u << 31;
constexpr std::uint32_t Holders(std::uint32_t refs) { return refs & ~kIndexedBit; }

struct alignas(kNoFalseSharing) SpanMeta {
  std::atomic<std::uint32_t> refs{0};  // holders | kIndexedBit
  std::atomic<std::uint8_t> state{kUnbacked};
  // Bumped whenever the span gets new contents (ActivateSpan), before it becomes pinnable:
  // block ids carry it, so an id from an earlier owner is refused instead of pinning the
  // new owner's block. Sharing a cached span keeps its contents and its generation.
  std::atomic<std::uint32_t> generation{0};
  // Written by the span's exclusive owner (refs == 1 and not indexed), read by owners.
  std::int32_t tokens = 0;
  bool partial = false;  // free, with some blocks' memory dropped by a node's Reclaim
  bool hashed = false;   // was full once, `hash` is the hash of those tokens
  std::uint64_t hash = 0;
  std::uint64_t parent_hash = 0;
};

struct Chunk {
  Chunk(std::size_t blocks_per_span, std::size_t tokens_per_block)
      : blocks(new BlockMeta[kSpansPerChunk * blocks_per_span]),
        tokens(new std::int32_t[kSpansPerChunk * tokens_per_block]()) {}
  SpanMeta spans[kSpansPerChunk];
  std::unique_ptr<BlockMeta[]> blocks;
  std::unique_ptr<std::int32_t[]> tokens;
};

// A sequence's spans in order; inline up to 16 spans (256 tokens at the default block size).
using SpanList = absl::InlinedVector<std::uint32_t, 16>;

struct alignas(kNoFalseSharing) Sequence {
  SpinLock mu;
  std::atomic<std::uint32_t> generation{1};
  bool live = false;
  SpanList spans;
  std::size_t tokens = 0;
  std::size_t computed = 0;  // leading tokens whose K/V the caller declared written
};

struct SequenceChunk {
  Sequence sequences[kSpansPerChunk];
};

// Counters that every request or pin bumps, striped by thread slot: one pool-wide counter
// was a cache line that every thread wrote (the two prefix counters alone made sharing a
// prompt from two threads slower than from one).
struct alignas(kNoFalseSharing) StatStripe {
  std::atomic<std::uint64_t> hot_pins{0};
  std::atomic<std::uint64_t> cold_pins{0};
  std::atomic<std::uint64_t> prefix_lookups{0};
  std::atomic<std::uint64_t> prefix_hits{0};
  std::atomic<std::uint64_t> sequences_created{0};
  std::atomic<std::uint64_t> sequences_freed{0};
};

// A small number per live thread, for striping counters and free lists. Slots are recycled
// when a thread exits and a new thread takes the lowest free one, so live threads get
// distinct slots: with a counter that only grows, a new thread landed on a long-lived
// thread's stripe every kStatStripes thread creations, and two threads pinning their own
// blocks then fought over one counter (128 instead of 17 ns per pin+unpin).
class ThreadSlots {
 public:
  static constexpr std::size_t kSlots = 256;
  std::size_t Acquire() {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < kSlots; ++i) {
      if (!used_[i]) {
        used_[i] = true;
        return i;
      }
    }
    return kSlots + overflow_++;  // more live threads than slots: striping only gets coarser
  }
  void Release(std::size_t slot) {
    std::lock_guard lock(mu_);
    if (slot < kSlots) used_[slot] = false;
  }

 private:
  std::mutex mu_;
  bool used_[kSlots] = {};
  std::size_t overflow_ = 0;
};

ThreadSlots& Slots() {
  static auto* slots = new ThreadSlots();  // never destroyed: threads may exit after main
  return *slots;
}

std::size_t ThreadSlot() {
  struct Holder {
    std::size_t slot = Slots().Acquire();
    ~Holder() { Slots().Release(slot); }
  };
  thread_local Holder holder;
  return holder.slot;
}

// Free ids (span ids, or sequence slots) in stripes by thread slot: a thread pushes onto and
// pops from its own stripe and looks at the others only when its own is empty, so
// allocate+free on different threads touch different locks and lines.
class FreeIds {
 public:
  void Push(std::uint32_t id) {
    Stripe& stripe = stripes_[ThreadSlot() % kFreeShards];
    std::lock_guard lock(stripe.mu);
    stripe.ids.push_back(id);
  }
  // The most recently pushed id of this thread's stripe, else of another; kNil when empty.
  std::uint32_t Pop() {
    const std::size_t mine = ThreadSlot() % kFreeShards;
    for (std::size_t k = 0; k < kFreeShards; ++k) {
      Stripe& stripe = stripes_[(mine + k) % kFreeShards];
      std::lock_guard lock(stripe.mu);
      if (!stripe.ids.empty()) {
        const std::uint32_t id = stripe.ids.back();
        stripe.ids.pop_back();
        return id;
      }
    }
    return kNil;
  }
  // Removes and returns an id for which `take(id)` holds (called under a stripe's lock);
  // kNil when there is none.
  template <typename Take>
  std::uint32_t PopIf(Take take) {
    for (Stripe& stripe : stripes_) {
      std::lock_guard lock(stripe.mu);
      for (std::size_t k = stripe.ids.size(); k-- > 0;) {
        const std::uint32_t id = stripe.ids[k];
        if (!take(id)) continue;
        stripe.ids[k] = stripe.ids.back();
        stripe.ids.pop_back();
        return id;
      }
    }
    return kNil;
  }

 private:
  struct alignas(kNoFalseSharing) Stripe {
    // Reserved up front: a stripe's first small buffer would come from whichever thread
    // pushed first and could share a line with another stripe's.
    Stripe() { ids.reserve(256); }
    SpinLock mu;
    std::vector<std::uint32_t> ids;
  };
  Stripe stripes_[kFreeShards];
};

struct HomeNode {
  HomeNode(int id, kv::MetaAccessor meta, std::unique_ptr<kv::HotnessPolicy> p)
      : node(id), list(std::move(meta)), policy(std::move(p)) {}
  int node;
  std::unique_ptr<kv::SlabAllocator> hot;
  std::mutex list_mu;
  kv::HotList list;
  std::unique_ptr<kv::HotnessPolicy> policy;
};

}  // namespace

struct KvPool::Impl {
  KvPoolOptions options;
  kv::Layout layout;
  kv::Placement placement;
  std::shared_ptr<KvStorage> storage;
  std::vector<int> group_node;
  std::size_t bps = 0;  // blocks per span
  std::size_t tpb = 0;  // tokens per block

  std::vector<std::unique_ptr<HomeNode>> homes;          // by home index
  std::vector<std::unique_ptr<kv::SlabAllocator>> cold;  // by cold index
  std::vector<int> home_index;                           // node id -> home index or -1
  std::vector<int> cold_index;                           // node id -> cold index or -1
  std::atomic<std::size_t> cold_cursor{0};

  std::unique_ptr<std::atomic<Chunk*>[]> chunks { new std::atomic<Chunk*>[ kMaxChunks ]() };
  std::atomic<std::uint32_t> spans_created{0};
  std::mutex grow_mu;
  std::vector<std::uint32_t> unbacked;

  FreeIds free_spans;
  kv::PrefixIndex prefix;

  std::unique_ptr<std::atomic<SequenceChunk*>[]> seq_chunks {
    new std::atomic<SequenceChunk*>[ kMaxChunks ]()
  };
  std::mutex seq_grow_mu;  // creating sequence slots (rare once the pool is warm)
  std::uint32_t seq_created = 0;
  FreeIds free_sequences;  // retired sequence slots

  std::atomic<std::uint64_t> clock{1};
  StatStripe stripes[kStatStripes];
  std::atomic<std::uint64_t> demotions{0}, promotions{0}, bytes_demoted{0}, bytes_promoted{0};
  std::atomic<std::uint64_t> demotion_ns{0}, promotion_ns{0};
  std::atomic<std::uint64_t> cached_evictions{0};
  std::atomic<std::uint64_t> refusals{0}, copy_on_writes{0};

  std::uint64_t budget_hook = 0;  // id of the reclaim hook on options.budget, 0 when none

  std::mutex rate_mu;
  double rate_allowance = 0;  // bytes background demotion may still move
  std::chrono::steady_clock::time_point rate_last = std::chrono::steady_clock::now();

  ~Impl() {
    for (std::uint32_t c = 0; c < kMaxChunks; ++c) {
      delete chunks[c].load(std::memory_order_relaxed);
      delete seq_chunks[c].load(std::memory_order_relaxed);
    }
  }

  // ---- tables
  Chunk& chunk_of_span(std::uint32_t span) const {
    return *chunks[span / kSpansPerChunk].load(std::memory_order_acquire);
  }
  SpanMeta& span(std::uint32_t s) const { return chunk_of_span(s).spans[s % kSpansPerChunk]; }
  BlockMeta& block(BlockSlot id) const {
    const std::uint32_t s = static_cast<std::uint32_t>(id / bps);
    return chunk_of_span(s).blocks[(s % kSpansPerChunk) * bps + id % bps];
  }
  std::int32_t* span_tokens(std::uint32_t s) const {
    return chunk_of_span(s).tokens.get() + (s % kSpansPerChunk) * tpb;
  }
  BlockSlot block_id(std::uint32_t s, int index) const {
    return static_cast<BlockSlot>(s * bps + static_cast<std::size_t>(index));
  }
  bool valid_block(BlockSlot id) const {
    return id / bps < spans_created.load(std::memory_order_acquire);
  }
  // Public ids: the slot in the low 32 bits, the span's generation above.
  KvBlockId PublicId(BlockSlot id) const {
    const std::uint32_t generation =
        span(id / static_cast<BlockSlot>(bps)).generation.load(std::memory_order_relaxed);
    return (static_cast<KvBlockId>(generation) << 32) | id;
  }
  static BlockSlot SlotOf(KvBlockId id) { return static_cast<BlockSlot>(id); }
  static std::uint32_t GenerationOf(KvBlockId id) { return static_cast<std::uint32_t>(id >> 32); }
  // InvalidArgument for an id that never existed.
  Status CheckExists(KvBlockId id) const {
    if (valid_block(SlotOf(id))) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("KV pool: block ", id, " does not exist"));
  }
  // Whether `id` still names the contents it was handed out for: its span's generation is
  // the id's, at the instant of the check. Neither a pin nor MIGRATING keeps the span from
  // being freed and reactivated right after; callers check it after taking their pin or
  // claim, so a stale id is refused unless its span changes hands exactly meanwhile.
  bool Current(KvBlockId id) const {
    return span(SlotOf(id) / static_cast<BlockSlot>(bps))
               .generation.load(std::memory_order_acquire) == GenerationOf(id);
  }
  Status Stale(KvBlockId id) const {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV pool: block id ", id,
        " is stale: its sequence was freed or truncated and the span now holds other tokens; "
        "get current ids from Blocks()"));
  }
  // The hotness clock. A shared counter bumped on every pin made one cache line that every
  // decode thread wrote (37 % of two threads' pin+unpin time), so the shared part is an epoch
  // a thread advances once per kTicksPerEpoch of its own ticks, and a tick is
  // epoch * kTicksPerEpoch + the thread's count within it. A thread's ticks strictly
  // increase, so its own accesses keep their exact order; accesses of different threads
  // within one epoch compare by count, which LRU and 2Q accept as a tie-level approximation.
  static constexpr std::uint64_t kTicksPerEpoch = 256;
  std::uint64_t Tick() {
    thread_local const Impl* pool = nullptr;
    thread_local std::uint64_t in_epoch = 0;
    if (pool != this) {  // a thread moving between pools starts a fresh epoch in this one
      pool = this;
      in_epoch = kTicksPerEpoch;
    }
    if (++in_epoch >= kTicksPerEpoch) {
      in_epoch = 0;
      return (clock.fetch_add(1, std::memory_order_relaxed) + 1) * kTicksPerEpoch;
    }
    return clock.load(std::memory_order_relaxed) * kTicksPerEpoch + in_epoch;
  }
  StatStripe& stripe() { return stripes[ThreadSlot() % kStatStripes]; }

  HomeNode* home_of(int node) const {
    if (node < 0 || node >= static_cast<int>(home_index.size()) || home_index[node] < 0)
      return nullptr;
    return homes[home_index[node]].get();
  }
  kv::SlabAllocator* cold_of(int node) const {
    if (node < 0 || node >= static_cast<int>(cold_index.size()) || cold_index[node] < 0)
      return nullptr;
    return cold[cold_index[node]].get();
  }

  // ---- sequences
  Sequence* sequence(KvSequenceId id) const {
    const auto index = static_cast<std::uint32_t>(id & 0xffffffffu);
    const auto generation = static_cast<std::uint32_t>(id >> 32);
    if (index / kSpansPerChunk >= kMaxChunks) return nullptr;
    SequenceChunk* c = seq_chunks[index / kSpansPerChunk].load(std::memory_order_acquire);
    if (c == nullptr) return nullptr;
    Sequence* s = &c->sequences[index % kSpansPerChunk];
    if (s->generation.load(std::memory_order_acquire) != generation) return nullptr;
    return s;
  }

  Status NoSequence(KvSequenceId id) const {
    return absl::NotFoundError(
        absl::StrCat("KV pool: sequence ", id, " does not exist (never created or already freed)"));
  }

  // The live sequence `id` with its mutex held (checked again under the lock: the id may be
  // freed between the lookup and the lock), or NotFound.
  struct LockedSequence {
    Sequence* sequence;
    std::unique_lock<SpinLock> lock;
  };
  StatusOr<LockedSequence> LockLive(KvSequenceId id) const {
    Sequence* s = sequence(id);
    if (s == nullptr) return NoSequence(id);
    std::unique_lock lock(s->mu);
    if (!s->live || sequence(id) != s) return NoSequence(id);
    return LockedSequence{s, std::move(lock)};
  }

  // A sequence slot: a retired one from this thread's list (or another's), else a new one.
  // Lock order: a sequence's lock may be held when taking a list's lock (RetireSequence),
  // never the reverse, so the new sequence is locked only after the list is let go.
  StatusOr<KvSequenceId> NewSequence() {
    std::uint32_t index = free_sequences.Pop();
    if (index == kNil) {
      std::lock_guard lock(seq_grow_mu);
      index = seq_created;
      if (index / kSpansPerChunk >= kMaxChunks) {
        return absl::ResourceExhaustedError("KV pool: too many live sequences");
      }
      if (index % kSpansPerChunk == 0)
        seq_chunks[index / kSpansPerChunk].store(new SequenceChunk, std::memory_order_release);
      ++seq_created;
    }
    Sequence* s = &seq_chunks[index / kSpansPerChunk]
                       .load(std::memory_order_acquire)
                       ->sequences[index % kSpansPerChunk];
    std::lock_guard seq_lock(s->mu);
    s->live = true;
    s->spans.clear();
    s->tokens = 0;
    s->computed = 0;
    stripe().sequences_created.fetch_add(1, std::memory_order_relaxed);
    return (static_cast<KvSequenceId>(s->generation.load()) << 32) | index;
  }

  void RetireSequence(KvSequenceId id, Sequence* s) {  // s->mu held
    s->live = false;
    s->spans.clear();
    s->tokens = 0;
    s->computed = 0;
    s->generation.fetch_add(1, std::memory_order_release);
    stripe().sequences_freed.fetch_add(1, std::memory_order_relaxed);
    free_sequences.Push(static_cast<std::uint32_t>(id & 0xffffffffu));
  }

  // ---- pins
  // Whether blocks of span `s` may be pinned: it belongs to a sequence or to the cache.
  bool Pinnable(std::uint32_t s) const {
    const std::uint8_t st = span(s).state.load(std::memory_order_acquire);
    return st == kInUse || st == kCached;
  }

  // Takes a pin reference on `id` (waiting while it moves); promotes it first when it is
  // cold, `promote` is set, its span is pinnable and there is room. Neither touches the
  // hotness nor counts the pin (NotePin does).
  void AcquirePin(BlockSlot id, bool promote) {
    BlockMeta& b = block(id);
    for (;;) {
      std::uint32_t st = b.state.load(std::memory_order_acquire);
      if (st & kMigrating) {
        std::this_thread::yield();
        continue;
      }
      if (st == 0 && promote && options.promote_on_touch &&
          b.tier.load(std::memory_order_relaxed) == static_cast<std::uint8_t>(KvTier::kCold)) {
        if (b.state.compare_exchange_weak(st, kMigrating, std::memory_order_acquire)) {
          // A Pin racing with the span's free or eviction backs out afterwards: never take
          // hot memory for such a block. Spans leave the cache only while every block is
          // claimed (ClaimCached), so with MIGRATING held this check cannot go stale that way.
          if (Pinnable(static_cast<std::uint32_t>(id / bps))) TryPromoteLocked(id, b);
          b.state.store(1, std::memory_order_release);
          break;
        }
        continue;
      }
      if (b.state.compare_exchange_weak(st, st + 1, std::memory_order_acquire)) break;
    }
  }

  // Records an access of a pinned block: hotness and the per-tier pin counters.
  void NotePin(BlockSlot id) {
    BlockMeta& b = block(id);
    kv::Touch(b.hot, Tick());
    StatStripe& s = stripe();
    if (b.tier.load(std::memory_order_relaxed) == static_cast<std::uint8_t>(KvTier::kHot)) {
      s.hot_pins.fetch_add(1, std::memory_order_relaxed);
    } else {
      s.cold_pins.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // Pins a block the caller knows stays owned (its sequence's lock is held, or it is the
  // caller's own span).
  void PinRaw(BlockSlot id, bool promote) {
    AcquirePin(id, promote);
    NotePin(id);
  }
  void UnpinRaw(BlockSlot id) { block(id).state.fetch_sub(1, std::memory_order_release); }

  // ---- tier moves (caller holds MIGRATING on `b`)
  std::uint32_t HomeNodeOfBlock(BlockSlot id) const {
    return static_cast<std::uint32_t>(group_node[layout.GroupOf(static_cast<int>(id % bps))]);
  }

  // Moves a cold block home when the hot tier has room. Returns whether it moved.
  bool TryPromoteLocked(BlockSlot id, BlockMeta& b) {
    // Checked again now that MIGRATING is held: a caller that saw the block cold before
    // claiming it may have lost a race with another pinner that promoted it meanwhile.
    if (b.tier.load(std::memory_order_relaxed) != static_cast<std::uint8_t>(KvTier::kCold))
      return false;
    HomeNode* home = home_of(static_cast<int>(HomeNodeOfBlock(id)));
    if (!home->hot->HasRoom()) return false;
    if (options.budget != nullptr && options.budget->state(home->node) >= NodeState::kWarn)
      return false;  // promoting would only push the node back into reclaim
    kv::Slot slot = home->hot->Allocate(/*may_grow=*/true);
    if (!slot) return false;
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(slot.data, b.data.load(std::memory_order_relaxed), layout.block_bytes);
    kv::Slot old{b.data.load(std::memory_order_relaxed), b.slab.load(std::memory_order_relaxed)};
    kv::SlabAllocator* from = cold_of(b.node.load(std::memory_order_relaxed));
    SetPlacement(b, slot, KvTier::kHot, home->node);
    {
      std::lock_guard lock(home->list_mu);
      kv::ResetHotness(b.hot, Tick());
      home->list.PushBack(id);
      home->policy->OnInsert(home->list, id);
    }
    from->Free(old);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    promotions.fetch_add(1, std::memory_order_relaxed);
    bytes_promoted.fetch_add(layout.block_bytes, std::memory_order_relaxed);
    promotion_ns.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
    return true;
  }

  static void SetPlacement(BlockMeta& b, kv::Slot slot, KvTier tier, int node) {
    b.data.store(slot.data, std::memory_order_relaxed);
    b.slab.store(slot.slab, std::memory_order_relaxed);
    b.tier.store(static_cast<std::uint8_t>(tier), std::memory_order_relaxed);
    b.node.store(node, std::memory_order_relaxed);
  }

  kv::Slot AllocateCold(int* node, Status* why) {
    const std::size_t n = cold.size();
    const std::size_t start = cold_cursor.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t k = 0; k < n; ++k) {
      kv::SlabAllocator* a = cold[(start + k) % n].get();
      kv::Slot slot = a->Allocate(/*may_grow=*/true, why);
      if (slot) {
        *node = a->node();
        return slot;
      }
    }
    return {};
  }

  bool EligibleVictim(BlockSlot id) const {
    if (block(id).state.load(std::memory_order_relaxed) != 0) return false;
    const std::uint8_t st =
        span(static_cast<std::uint32_t>(id / bps)).state.load(std::memory_order_relaxed);
    return st == kInUse || st == kCached;
  }

  std::size_t RateLimitedBlocks(std::size_t wanted) {
    if (options.demotion_mbps <= 0) return wanted;
    std::lock_guard lock(rate_mu);
    const auto now = std::chrono::steady_clock::now();
    const double bytes_per_s = options.demotion_mbps * 1e6;
    rate_allowance = std::min(
        bytes_per_s,  // at most one second of burst
        rate_allowance + bytes_per_s * std::chrono::duration<double>(now - rate_last).count());
    rate_last = now;
    const auto allowed = static_cast<std::size_t>(rate_allowance / layout.block_bytes);
    const std::size_t n = std::min(wanted, allowed);
    rate_allowance -= static_cast<double>(n * layout.block_bytes);
    return n;
  }

  std::size_t DemoteFrom(HomeNode& home, std::size_t count, KvUrgency urgency) {
    if (cold.empty() || count == 0) return 0;
    if (urgency == KvUrgency::kBackground) count = RateLimitedBlocks(count);
    if (count == 0) return 0;
    std::vector<std::uint32_t> victims, claimed;
    {
      std::lock_guard lock(home.list_mu);
      home.policy->SelectVictims(
          home.list, count, [this](std::uint32_t id) { return EligibleVictim(id); }, victims);
      for (std::uint32_t id : victims) {
        std::uint32_t expected = 0;
        if (!block(id).state.compare_exchange_strong(expected, kMigrating,
                                                     std::memory_order_acquire))
          continue;  // pinned since it was chosen
        home.policy->OnRemove(home.list, id, /*demoted=*/true);
        home.list.Remove(id);
        claimed.push_back(id);
      }
    }
    std::size_t moved = 0;
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < claimed.size(); ++i) {
      BlockMeta& b = block(claimed[i]);
      int cold_node = -1;
      kv::Slot slot = AllocateCold(&cold_node, nullptr);
      if (!slot) {  // cold tier full: put the rest back
        std::lock_guard lock(home.list_mu);
        for (std::size_t j = i; j < claimed.size(); ++j) {
          home.list.PushBack(claimed[j]);
          home.policy->OnInsert(home.list, claimed[j]);
          block(claimed[j]).state.store(0, std::memory_order_release);
        }
        break;
      }
      std::memcpy(slot.data, b.data.load(std::memory_order_relaxed), layout.block_bytes);
      kv::Slot old{b.data.load(std::memory_order_relaxed), b.slab.load(std::memory_order_relaxed)};
      SetPlacement(b, slot, KvTier::kCold, cold_node);
      b.state.store(0, std::memory_order_release);
      home.hot->Free(old);
      ++moved;
    }
    if (moved > 0) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
      demotions.fetch_add(moved, std::memory_order_relaxed);
      bytes_demoted.fetch_add(moved * layout.block_bytes, std::memory_order_relaxed);
      demotion_ns.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
    }
    return moved;
  }

  // ---- spans
  void ActivateSpan(std::uint32_t s) {
    SpanMeta& m = span(s);
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
  std::size_t DropBlocks(std::uint32_t s, int node, bool* left) {
    std::size_t dropped = 0;
    bool kept = false;
    for (std::size_t i = 0; i < bps; ++i) {
      const BlockSlot id = block_id(s, static_cast<int>(i));
      BlockMeta& b = block(id);
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
      const kv::Slot slot{b.data.load(std::memory_order_relaxed),
                          b.slab.load(std::memory_order_relaxed)};
      if (tier == KvTier::kHot) {
        HomeNode* home = home_of(at);
        {
          std::lock_guard lock(home->list_mu);
          home->policy->OnRemove(home->list, id, /*demoted=*/false);
          home->list.Remove(id);
        }
        home->hot->Free(slot);
      } else {
        cold_of(at)->Free(slot);
      }
      SetPlacement(b, {}, KvTier::kNone, -1);
      b.state.store(0, std::memory_order_release);
      ++dropped;
    }
    *left = kept;
    return dropped;
  }

  // Drops the memory of unowned span `s` on `node` (-1: everywhere; see DropBlocks) and puts
  // the span where it now belongs: the free lists when some of its blocks still have memory
  // (allocation backs the rest first), else the unbacked spans.
  void DropAndPark(std::uint32_t s, int node) {
    bool backed_left = false;
    const bool dropped_some = DropBlocks(s, node, &backed_left) > 0;
    SpanMeta& m = span(s);
    if (!backed_left) {
      m.partial = false;
      m.state.store(kUnbacked, std::memory_order_relaxed);
      std::lock_guard lock(grow_mu);
      unbacked.push_back(s);
      return;
    }
    if (dropped_some) m.partial = true;
    m.state.store(kFree, std::memory_order_relaxed);
    free_spans.Push(s);
  }

  // Whether Reclaim or an allocation may take the span's memory on `node` (-1: on any
  // node): some block has its data there (either tier) and no block is pinned or being
  // moved. The second part also keeps Reclaim from waiting on a block that its own thread
  // holds MIGRATING further up the stack (a demotion or promotion whose slab allocation ran
  // the budget's reclaim hook). A cheap test: a pin may come right after it (ClaimCached
  // settles that for cached spans).
  bool ReclaimableOn(std::uint32_t s, int node) const {
    bool on_node = false;
    for (std::size_t i = 0; i < bps; ++i) {
      const BlockMeta& b = block(block_id(s, static_cast<int>(i)));
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
  bool ClaimCached(std::uint32_t s) {
    std::size_t claimed = 0;
    for (; claimed < bps; ++claimed) {
      std::uint32_t expected = 0;
      if (!block(block_id(s, static_cast<int>(claimed)))
               .state.compare_exchange_strong(expected, kMigrating, std::memory_order_acquire))
        break;
    }
    const bool all = claimed == bps;
    if (all) {
      SpanMeta& m = span(s);
      m.refs.store(0, std::memory_order_relaxed);       // cached: no holders; now out of the index
      m.state.store(kFree, std::memory_order_relaxed);  // not pinnable, on no free list
    }
    for (std::size_t i = 0; i < claimed; ++i)
      block(block_id(s, static_cast<int>(i))).state.store(0, std::memory_order_release);
    return all;
  }

  // Evicts the least recently released cached span that has memory on `node` (-1: anywhere)
  // and no pinned or moving block: it leaves the prefix index and belongs to the caller
  // (state kFree, on no free list) to drop or reuse. kNil when no cached span qualifies.
  // Both evictions, Reclaim's and an allocation's that found no memory, go through here.
  std::uint32_t EvictCached(int node) {
    const std::uint32_t s =
        prefix.EvictOldest([this, node](std::uint32_t c) { return ReclaimableOn(c, node); },
                           [this](std::uint32_t c) { return ClaimCached(c); });
    if (s == kv::PrefixIndex::kNone) return kNil;
    cached_evictions.fetch_add(1, std::memory_order_relaxed);
    return s;
  }

  // A span id whose blocks have no memory: a recycled one or a new one.
  StatusOr<std::uint32_t> NewUnbackedSpan() {
    std::lock_guard lock(grow_mu);
    if (!unbacked.empty()) {
      const std::uint32_t s = unbacked.back();
      unbacked.pop_back();
      return s;
    }
    const std::uint32_t s = spans_created.load(std::memory_order_relaxed);
    if (s / kSpansPerChunk >= kMaxChunks ||
        static_cast<std::uint64_t>(s + 1) * bps > 0xffffffffull) {
      return absl::ResourceExhaustedError("KV pool: block id space exhausted");
    }
    if (s % kSpansPerChunk == 0) {
      chunks[s / kSpansPerChunk].store(new Chunk(bps, tpb), std::memory_order_release);
    }
    spans_created.store(s + 1, std::memory_order_release);
    return s;
  }

  // Backs one block: hot on its home node, else after demoting a victim, else cold.
  bool BackBlock(std::uint32_t s, int index, Status* why) {
    const BlockSlot id = block_id(s, index);
    BlockMeta& b = block(id);
    HomeNode* home = home_of(group_node[layout.GroupOf(index)]);
    kv::Slot slot = home->hot->Allocate(/*may_grow=*/true, why);
    if (!slot && !cold.empty() && DemoteFrom(*home, 8, KvUrgency::kUrgent) > 0) {
      slot = home->hot->Allocate(/*may_grow=*/true, why);
    }
    if (slot) {
      SetPlacement(b, slot, KvTier::kHot, home->node);
      std::lock_guard lock(home->list_mu);
      kv::ResetHotness(b.hot, Tick());
      home->list.PushBack(id);
      home->policy->OnInsert(home->list, id);
      return true;
    }
    int cold_node = -1;
    Status cold_why;
    if (!cold.empty()) slot = AllocateCold(&cold_node, &cold_why);
    if (!slot) {
      if (!cold.empty() && why != nullptr) {
        *why = absl::ResourceExhaustedError(
            absl::StrCat(why->message(), "; cold tier: ", cold_why.message()));
      }
      return false;
    }
    SetPlacement(b, slot, KvTier::kCold, cold_node);
    kv::ResetHotness(b.hot, Tick());
    return true;
  }

  // Takes a free span whose memory on `node` Reclaim may drop (ReclaimableOn) off the free
  // lists; kNil when there is none.
  std::uint32_t TakeFreeSpanOn(int node) {
    return free_spans.PopIf([this, node](std::uint32_t s) { return ReclaimableOn(s, node); });
  }

  StatusOr<std::uint32_t> AllocateSpan() {
    std::uint32_t s = free_spans.Pop();
    if (s != kNil && !span(s).partial) {
      ActivateSpan(s);
      return s;
    }
    if (s == kNil) {
      auto fresh = NewUnbackedSpan();
      if (!fresh.ok()) return fresh.status();
      s = *fresh;
    }
    Status why;
    for (std::size_t i = 0; i < bps; ++i) {
      // A partial free span kept the blocks on nodes a Reclaim did not ask for.
      if (block(block_id(s, static_cast<int>(i))).tier.load(std::memory_order_relaxed) !=
          static_cast<std::uint8_t>(KvTier::kNone))
        continue;
      if (BackBlock(s, static_cast<int>(i), &why)) continue;
      // No memory in either tier: give back what this span got, reuse a cached span.
      DropAndPark(s, -1);
      // Cached spans keep all their blocks' memory: an evicted one is ready as it is.
      const std::uint32_t evicted = EvictCached(-1);
      if (evicted != kNil) {
        ActivateSpan(evicted);
        return evicted;
      }
      refusals.fetch_add(1, std::memory_order_relaxed);
      return absl::ResourceExhaustedError(
          absl::StrCat("KV pool: no memory for a block: ", why.message(),
                       cold.empty() ? " (no cold tier is configured)" : ""));
    }
    ActivateSpan(s);
    return s;
  }

  void ReleaseSpan(std::uint32_t s) {
    SpanMeta& m = span(s);
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
      index_lock = std::unique_lock(prefix.mutex_for(m.hash));
      if (m.refs.load(std::memory_order_relaxed) & kIndexedBit) {
        // A lock-free AcquireCached may add a holder meanwhile, but never from 0 holders.
        const std::uint32_t before = m.refs.fetch_sub(1, std::memory_order_acq_rel);
        assert(Holders(before) >= 1 && "a span released more often than it was held");
        if (Holders(before) == 1) {
          m.state.store(kCached, std::memory_order_relaxed);
          prefix.CacheLocked(m.hash, s);
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
    free_spans.Push(s);
  }

  // Whether indexed span `s` holds exactly this prefix. Its caller holds a reference on it
  // or its index shard lock, so these fields stay put while they are read.
  bool HoldsPrefix(std::uint32_t s, std::uint64_t parent, std::span<const std::int32_t> tokens,
                   std::uint64_t hash) const {
    const SpanMeta& m = span(s);
    return m.hash == hash && m.parent_hash == parent &&
           std::equal(tokens.begin(), tokens.end(), span_tokens(s));
  }

  // Looks a full span up by its prefix; shares it when found.
  std::uint32_t AcquireCached(std::uint64_t parent, std::span<const std::int32_t> tokens,
                              std::uint64_t hash) {
    // Lock-free when a sequence holds the span (see the top of this file).
    const std::uint32_t seen = prefix.Find(hash);
    if (seen == kv::PrefixIndex::kNone) return kNil;
    if (auto* hook = kv::testing::after_prefix_find.load(std::memory_order_relaxed)) hook(seen);
    SpanMeta& held = span(seen);
    for (std::uint32_t refs = held.refs.load(std::memory_order_relaxed);
         (refs & kIndexedBit) && Holders(refs) > 0;) {
      if (!held.refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acquire,
                                           std::memory_order_relaxed))
        continue;
      if (HoldsPrefix(seen, parent, tokens, hash)) return seen;
      ReleaseSpan(seen);  // evicted and reused for another prefix meanwhile, or a collision
      break;
    }
    // Unheld (cached, so it must leave the cached list) or just changed: under the lock.
    std::lock_guard lock(prefix.mutex_for(hash));
    const std::uint32_t s = prefix.FindLocked(hash);
    if (s == kv::PrefixIndex::kNone) return kNil;
    if (!HoldsPrefix(s, parent, tokens, hash)) return kNil;  // a collision: never share it
    SpanMeta& m = span(s);
    if (Holders(m.refs.fetch_add(1, std::memory_order_acq_rel)) == 0) {
      prefix.UncacheLocked(hash, s);
      m.state.store(kInUse, std::memory_order_relaxed);
    }
    return s;
  }

  // Copies a span's data and token ids into a new exclusive span (copy-on-write).
  void CopySpan(std::uint32_t from, std::uint32_t to, int tokens) {
    for (std::size_t i = 0; i < bps; ++i) {
      const BlockSlot src = block_id(from, static_cast<int>(i));
      const BlockSlot dst = block_id(to, static_cast<int>(i));
      PinRaw(src, /*promote=*/false);
      PinRaw(dst, /*promote=*/true);
      std::memcpy(block(dst).data.load(std::memory_order_relaxed),
                  block(src).data.load(std::memory_order_relaxed), layout.block_bytes);
      UnpinRaw(dst);
      UnpinRaw(src);
    }
    std::copy_n(span_tokens(from), tokens, span_tokens(to));
    span(to).tokens = tokens;
    copy_on_writes.fetch_add(1, std::memory_order_relaxed);
  }

  // Appends with `s->mu` held. Either everything or nothing happens.
  Status AppendLocked(Sequence* s, std::span<const std::int32_t> tokens) {
    if (tokens.empty()) return absl::OkStatus();
    const std::size_t pos = s->tokens;
    const std::size_t spans_before = (pos + tpb - 1) / tpb;
    const std::size_t spans_after = (pos + tokens.size() + tpb - 1) / tpb;
    const std::size_t offset = pos % tpb;
    bool cow = false;
    if (offset != 0) {
      SpanMeta& last = span(s->spans.back());
      // Shared, or in the prefix index (after a truncation): never write into it. Holders and
      // the indexed bit are one word, read at once.
      const std::uint32_t refs = last.refs.load(std::memory_order_acquire);
      cow = Holders(refs) > 1 || (refs & kIndexedBit);
    }
    // Get every span first so a refusal leaves the sequence as it was.
    absl::InlinedVector<std::uint32_t, 4> fresh;
    const std::size_t needed = spans_after - spans_before + (cow ? 1 : 0);
    for (std::size_t i = 0; i < needed; ++i) {
      auto got = AllocateSpan();
      if (!got.ok()) {
        for (std::uint32_t f : fresh) ReleaseSpan(f);
        return got.status();
      }
      fresh.push_back(*got);
    }
    std::size_t next_fresh = 0;
    if (cow) {
      const std::uint32_t old = s->spans.back();
      const std::uint32_t copy = fresh[next_fresh++];
      CopySpan(old, copy, static_cast<int>(offset));
      span(copy).parent_hash = span(old).parent_hash;
      s->spans.back() = copy;
      ReleaseSpan(old);
    }
    std::size_t done = 0;
    std::size_t at = pos;
    while (done < tokens.size()) {
      const std::size_t off = at % tpb;
      if (off == 0) {
        const std::uint32_t ns = fresh[next_fresh++];
        span(ns).parent_hash = s->spans.empty() ? kv::kRootPrefixHash : span(s->spans.back()).hash;
        s->spans.push_back(ns);
      }
      const std::uint32_t cur = s->spans.back();
      SpanMeta& m = span(cur);
      const std::size_t n = std::min(tpb - off, tokens.size() - done);
      std::copy_n(tokens.data() + done, n, span_tokens(cur) + off);
      m.tokens = static_cast<std::int32_t>(off + n);
      if (off + n == tpb) {  // full: hashed now, indexed once computed (MarkComputed)
        m.hash = kv::HashSpan(m.parent_hash, std::span<const std::int32_t>(span_tokens(cur), tpb));
        m.hashed = true;
      }
      done += n;
      at += n;
    }
    s->tokens = at;
    return absl::OkStatus();
  }

  // Enters the full spans of the sequence's first `upto` tokens in the prefix index and
  // raises its computed count, with `s->mu` held. Only spans past the old count can be new;
  // ones already indexed (reused, or marked by a sharer) are skipped.
  void PublishComputedLocked(Sequence* s, std::size_t upto) {
    if (upto <= s->computed) return;
    for (std::size_t i = s->computed / tpb; i < upto / tpb; ++i) {
      const std::uint32_t sp = s->spans[i];
      SpanMeta& m = span(sp);
      // Spans inside the first `upto` <= length tokens are full, so they are hashed. The hash
      // stays put: only an exclusive owner refills a span (a sharer copies it first).
      std::lock_guard lock(prefix.mutex_for(m.hash));
      if (m.refs.load(std::memory_order_relaxed) & kIndexedBit) continue;
      // The release (and the mutex's) publishes the rows written before this call to whoever
      // shares the span: with an acquire CAS on the word, or under the same mutex.
      if (prefix.InsertLocked(m.hash, sp)) m.refs.fetch_or(kIndexedBit, std::memory_order_release);
    }
    s->computed = upto;
  }

  void FillPin(KvBlockPin& pin, BlockSlot id) const;
};

// ---- KvBlockPin ----------------------------------------------------------------------

KvBlockPin& KvBlockPin::operator=(KvBlockPin&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = other.pool_;
    id_ = other.id_;
    data_ = other.data_;
    tier_ = other.tier_;
    node_ = other.node_;
    first_layer_ = other.first_layer_;
    first_head_ = other.first_head_;
    group_ = other.group_;
    first_token_ = other.first_token_;
    tokens_ = other.tokens_;
    token_in_block_ = other.token_in_block_;
    other.pool_ = nullptr;
  }
  return *this;
}

void KvBlockPin::Reset() {
  if (pool_ != nullptr) {
    pool_->Unpin(id_);
    pool_ = nullptr;
  }
}

std::size_t KvBlockPin::row_bytes() const { return pool_->impl_->layout.row_bytes; }

std::byte* KvBlockPin::key(int layer_in_block, int head_in_group, int token) const {
  return data_ + pool_->impl_->layout.KeyOffset(layer_in_block, head_in_group, token);
}

std::byte* KvBlockPin::value(int layer_in_block, int head_in_group, int token) const {
  return data_ + pool_->impl_->layout.ValueOffset(layer_in_block, head_in_group, token);
}

void KvPool::Impl::FillPin(KvBlockPin& pin, BlockSlot id) const {
  const BlockMeta& b = block(id);
  const int index = static_cast<int>(id % bps);
  pin.id_ = PublicId(id);
  pin.data_ = b.data.load(std::memory_order_relaxed);
  pin.tier_ = static_cast<KvTier>(b.tier.load(std::memory_order_relaxed));
  pin.node_ = b.node.load(std::memory_order_relaxed);
  pin.group_ = layout.GroupOf(index);
  pin.first_layer_ = layout.LayerRangeOf(index) * layout.geometry.layers_per_block;
  pin.first_head_ = pin.group_ * layout.geometry.heads_per_group;
}

// ---- KvPool --------------------------------------------------------------------------

StatusOr<std::unique_ptr<KvPool>> KvPool::Create(KvPoolOptions options) {
  const bool custom_storage = options.storage != nullptr;
  if (!custom_storage) options.storage = MakeBoundMmapStorage(options.budget);

  // Nodes: validated against the given topology, or the system's when memory really goes
  // to node ids (default storage). A custom storage defines its own node ids.
  const Topology* topology = options.topology;
  const bool needs_topology =
      options.home_nodes.empty() || options.cold_tier.kind == KvColdTier::Kind::kFarthest;
  if (topology == nullptr && (needs_topology || !custom_storage)) {
    auto system = Topology::system();
    if (!system.ok()) {
      if (needs_topology) {
        return absl::FailedPreconditionError(absl::StrCat(
            "KV pool: cannot discover the topology to choose nodes: ", system.status().message()));
      }
    } else {
      topology = *system;
    }
  }
  std::optional<kv::TopologyView> view;
  if (topology != nullptr) view = kv::ViewOf(*topology);
  auto placement = kv::ResolvePlacement(options, view ? &*view : nullptr);
  if (!placement.ok()) return placement.status();

  auto layout = kv::MakeLayout(options.geometry, static_cast<int>(placement->home_nodes.size()));
  if (!layout.ok()) return layout.status();

  auto impl = std::make_unique<Impl>();
  impl->layout = *layout;
  impl->placement = *std::move(placement);
  impl->storage = options.storage;
  impl->bps = static_cast<std::size_t>(layout->blocks_per_span);
  impl->tpb = static_cast<std::size_t>(layout->geometry.tokens_per_block);
  const std::size_t block_bytes = layout->block_bytes;

  for (int n : impl->placement.home_nodes) {
    std::size_t capacity = options.storage->CapacityBytes(n);
    if (options.budget != nullptr) {
      const std::uint64_t limit = options.budget->capacity(n);
      if (limit == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("KV pool: home node ", n, " is not covered by the budget"));
      }
      capacity = std::min<std::size_t>(
          capacity, static_cast<std::size_t>(static_cast<double>(limit) *
                                             options.budget->options().thresholds.trip));
    }
    if (block_bytes > capacity) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KV pool: one block is ", block_bytes, " bytes but node ", n, " may hold only ", capacity,
          " bytes; use fewer tokens_per_block, layers_per_block or heads_per_group"));
    }
  }
  const std::size_t blocks_per_slab = std::max<std::size_t>(1, options.slab_bytes / block_bytes);

  int max_node = 0;
  for (int n : impl->placement.home_nodes) max_node = std::max(max_node, n);
  for (int n : impl->placement.cold_nodes) max_node = std::max(max_node, n);
  impl->home_index.assign(static_cast<std::size_t>(max_node) + 1, -1);
  impl->cold_index.assign(static_cast<std::size_t>(max_node) + 1, -1);
  Impl* raw = impl.get();
  for (int n : impl->placement.home_nodes) {
    auto home = std::make_unique<HomeNode>(
        n, [raw](std::uint32_t id) -> kv::HotMeta& { return raw->block(id).hot; },
        kv::MakeHotnessPolicy(options.hotness));
    home->hot = std::make_unique<kv::SlabAllocator>(options.storage.get(), n, block_bytes,
                                                    blocks_per_slab, options.hot_blocks_per_node,
                                                    options.retained_empty_slabs);
    impl->home_index[n] = static_cast<int>(impl->homes.size());
    impl->homes.push_back(std::move(home));
  }
  const std::size_t cold_count = impl->placement.cold_nodes.size();
  for (int n : impl->placement.cold_nodes) {
    std::size_t cap = 0;
    if (options.cold_blocks != 0) {  // split the total over the interleave set
      cap = options.cold_blocks / cold_count +
            (impl->cold.size() < options.cold_blocks % cold_count ? 1 : 0);
      if (cap == 0) cap = 1;
    }
    impl->cold_index[n] = static_cast<int>(impl->cold.size());
    impl->cold.push_back(std::make_unique<kv::SlabAllocator>(
        options.storage.get(), n, block_bytes, blocks_per_slab, cap, options.retained_empty_slabs));
  }
  for (int g = 0; g < layout->head_groups; ++g) {
    impl->group_node.push_back(impl->placement.home_nodes[static_cast<std::size_t>(g) %
                                                          impl->placement.home_nodes.size()]);
  }
  impl->options = std::move(options);
  impl->options.geometry = layout->geometry;
  auto pool = std::unique_ptr<KvPool>(new KvPool(std::move(impl)));
  if (Budget* budget = pool->impl_->options.budget) {
    KvPool* self = pool.get();
    pool->impl_->budget_hook = budget->AddReclaimHook(
        Priority::kLow, "kv-pool demotion",
        [self, budget](int node, std::size_t bytes) -> StatusOr<std::size_t> {
          const KvUrgency urgency = budget->state(node) >= NodeState::kAdmissionClosed
                                        ? KvUrgency::kUrgent
                                        : KvUrgency::kBackground;
          return self->Reclaim(node, bytes, urgency);
        });
  }
  return pool;
}

KvPool::KvPool(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KvPool::~KvPool() {
  if (impl_->budget_hook != 0) impl_->options.budget->RemoveReclaimHook(impl_->budget_hook);
  // Slab allocators free their slabs; block metadata goes with the chunks.
  impl_->homes.clear();
  impl_->cold.clear();
}

const KvGeometry& KvPool::geometry() const { return impl_->layout.geometry; }
int KvPool::head_groups() const { return impl_->layout.head_groups; }
int KvPool::layer_ranges() const { return impl_->layout.layer_ranges; }
std::size_t KvPool::block_bytes() const { return impl_->layout.block_bytes; }
int KvPool::group_node(int group) const {
  if (group < 0 || group >= impl_->layout.head_groups) return -1;
  return impl_->group_node[group];
}
const std::vector<int>& KvPool::home_nodes() const { return impl_->placement.home_nodes; }
const std::vector<int>& KvPool::cold_nodes() const { return impl_->placement.cold_nodes; }

StatusOr<KvSequenceId> KvPool::CreateSequence(std::span<const std::int32_t> prompt,
                                              std::size_t* reused_tokens) {
  Impl& p = *impl_;
  auto id = p.NewSequence();
  if (!id.ok()) return id.status();
  Sequence* s = p.sequence(*id);
  std::lock_guard lock(s->mu);
  std::uint64_t parent = kv::kRootPrefixHash;
  std::size_t reused = 0;
  std::uint64_t lookups = 0;
  while (reused + p.tpb <= prompt.size()) {
    const auto chunk = prompt.subspan(reused, p.tpb);
    const std::uint64_t hash = kv::HashSpan(parent, chunk);
    ++lookups;
    const std::uint32_t found = p.AcquireCached(parent, chunk, hash);
    if (found == kNil) break;
    s->spans.push_back(found);
    parent = hash;
    reused += p.tpb;
  }
  if (lookups > 0) {
    StatStripe& stripe = p.stripe();
    stripe.prefix_lookups.fetch_add(lookups, std::memory_order_relaxed);
    stripe.prefix_hits.fetch_add(reused / p.tpb, std::memory_order_relaxed);
  }
  s->tokens = reused;
  s->computed = reused;  // indexed spans are computed
  if (Status st = p.AppendLocked(s, prompt.subspan(reused)); !st.ok()) {
    for (std::uint32_t sp : s->spans) p.ReleaseSpan(sp);
    p.RetireSequence(*id, s);
    return st;
  }
  if (reused_tokens != nullptr) *reused_tokens = reused;
  return *id;
}

Status KvPool::Append(KvSequenceId sequence, std::span<const std::int32_t> tokens) {
  auto locked = impl_->LockLive(sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  return impl_->AppendLocked(s, tokens);
}

Status KvPool::MarkComputed(KvSequenceId sequence, std::size_t tokens) {
  Impl& p = *impl_;
  auto locked = p.LockLive(sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  if (tokens > s->tokens) {
    return absl::OutOfRangeError(absl::StrCat("KV pool: cannot mark ", tokens,
                                              " tokens computed in sequence ", sequence, " of ",
                                              s->tokens, " tokens"));
  }
  p.PublishComputedLocked(s, tokens);
  return absl::OkStatus();
}

Status KvPool::Truncate(KvSequenceId sequence, std::size_t tokens) {
  Impl& p = *impl_;
  auto locked = p.LockLive(sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  if (tokens > s->tokens) {
    return absl::InvalidArgumentError(absl::StrCat("KV pool: cannot truncate sequence ", sequence,
                                                   " of ", s->tokens, " tokens to ", tokens,
                                                   "; truncation only shortens"));
  }
  const std::size_t keep = (tokens + p.tpb - 1) / p.tpb;
  while (s->spans.size() > keep) {
    p.ReleaseSpan(s->spans.back());
    s->spans.pop_back();
  }
  s->tokens = tokens;
  s->computed = std::min(s->computed, tokens);
  return absl::OkStatus();
}

StatusOr<KvSequenceId> KvPool::Fork(KvSequenceId parent) {
  Impl& p = *impl_;
  Sequence* s = p.sequence(parent);
  if (s == nullptr) return p.NoSequence(parent);
  SpanList spans;
  std::size_t tokens = 0, computed = 0;
  {
    // Take the references under the parent's lock, then let it go: two sequences' locks
    // are never held together.
    std::lock_guard lock(s->mu);
    if (!s->live || p.sequence(parent) != s) return p.NoSequence(parent);
    for (std::uint32_t sp : s->spans) p.span(sp).refs.fetch_add(1, std::memory_order_relaxed);
    spans = s->spans;
    tokens = s->tokens;
    computed = s->computed;
  }
  auto child_id = p.NewSequence();
  if (!child_id.ok()) {
    for (std::uint32_t sp : spans) p.ReleaseSpan(sp);
    return child_id.status();
  }
  Sequence* child = p.sequence(*child_id);
  std::lock_guard child_lock(child->mu);
  child->spans = std::move(spans);
  child->tokens = tokens;
  child->computed = computed;
  return *child_id;
}

Status KvPool::FreeSequence(KvSequenceId sequence) {
  Impl& p = *impl_;
  auto locked = p.LockLive(sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  for (std::uint32_t sp : s->spans) p.ReleaseSpan(sp);
  p.RetireSequence(sequence, s);
  return absl::OkStatus();
}

StatusOr<std::size_t> KvPool::Length(KvSequenceId sequence) const {
  auto locked = impl_->LockLive(sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  return s->tokens;
}

std::size_t KvPool::CachedPrefixTokens(std::span<const std::int32_t> tokens) const {
  const Impl& p = *impl_;
  std::uint64_t parent = kv::kRootPrefixHash;
  std::size_t covered = 0;
  while (covered + p.tpb <= tokens.size()) {
    const std::uint64_t hash = kv::HashSpan(parent, tokens.subspan(covered, p.tpb));
    // No token comparison here: reading an indexed span's token ids without the shard lock
    // would race with its eviction and reuse.
    if (p.prefix.Find(hash) == kv::PrefixIndex::kNone) break;
    parent = hash;
    covered += p.tpb;
  }
  return covered;
}

namespace {
Status CheckLayerGroup(const kv::Layout& layout, int layer, int group) {
  if (layer < 0 || layer >= layout.geometry.layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV pool: layer ", layer, " is out of range [0, ", layout.geometry.layers, ")"));
  }
  if (group < 0 || group >= layout.head_groups) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV pool: head group ", group, " is out of range [0, ", layout.head_groups, ")"));
  }
  return absl::OkStatus();
}
}  // namespace

Status KvPool::Blocks(KvSequenceId sequence, int layer, int group,
                      std::vector<KvBlockId>* out) const {
  Impl& p = *impl_;
  if (out == nullptr) return absl::InvalidArgumentError("KV pool: Blocks needs an output vector");
  out->clear();
  if (Status st = CheckLayerGroup(p.layout, layer, group); !st.ok()) return st;
  auto locked = p.LockLive(sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  const int index = p.layout.BlockIndex(layer / p.layout.geometry.layers_per_block, group);
  out->reserve(s->spans.size());
  for (std::uint32_t sp : s->spans) out->push_back(p.PublicId(p.block_id(sp, index)));
  return absl::OkStatus();
}

StatusOr<KvBlockPin> KvPool::Pin(KvBlockId block) {
  Impl& p = *impl_;
  if (Status st = p.CheckExists(block); !st.ok()) return st;
  const BlockSlot slot = Impl::SlotOf(block);
  // A cheap early refusal, so that a stale id does not promote (take hot memory for) a block
  // that is no longer its own; the check after the pin below is the one that counts.
  if (!p.Current(block)) return p.Stale(block);
  // Pin first, check second. Checking first would leave a window in which the span is freed
  // and its memory dropped or reused before the pin lands. With the reference held, the
  // block's memory cannot be dropped (DropBlocks waits for pins) and a cached span cannot be
  // evicted (ClaimCached fails); the span still belonging to a sequence or the cache, in the
  // id's generation, after that means the pin is good. Otherwise let go: the block is free,
  // unbacked, recycled mid-allocation, or now another sequence's.
  p.AcquirePin(slot, /*promote=*/true);
  if (!p.Pinnable(slot / static_cast<BlockSlot>(p.bps)) ||
      p.block(slot).tier.load(std::memory_order_relaxed) ==
          static_cast<std::uint8_t>(KvTier::kNone)) {
    p.UnpinRaw(slot);
    return absl::FailedPreconditionError(
        absl::StrCat("KV pool: block ", block,
                     " belongs to no sequence or cache; pin blocks of live "
                     "sequences only"));
  }
  if (!p.Current(block)) {
    p.UnpinRaw(slot);
    return p.Stale(block);
  }
  p.NotePin(slot);
  KvBlockPin pin;
  pin.pool_ = this;
  p.FillPin(pin, slot);
  return pin;
}

StatusOr<KvPool::BlockLocation> KvPool::Locate(KvBlockId block) const {
  const Impl& p = *impl_;
  if (Status st = p.CheckExists(block); !st.ok()) return st;
  // A snapshot: without a pin the span may change hands right after this check.
  if (!p.Current(block)) return p.Stale(block);
  const BlockMeta& b = p.block(Impl::SlotOf(block));
  BlockLocation where;
  where.tier = static_cast<KvTier>(b.tier.load(std::memory_order_relaxed));
  where.node = b.node.load(std::memory_order_relaxed);
  where.pins = static_cast<int>(b.state.load(std::memory_order_relaxed) & ~kMigrating);
  return where;
}

StatusOr<KvBlockPin> KvPool::PinToken(KvSequenceId sequence, int layer, int group,
                                      std::size_t token) {
  Impl& p = *impl_;
  if (Status st = CheckLayerGroup(p.layout, layer, group); !st.ok()) return st;
  auto locked = p.LockLive(sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  if (token >= s->tokens) {
    return absl::OutOfRangeError(absl::StrCat("KV pool: token ", token, " is beyond sequence ",
                                              sequence, " of ", s->tokens, " tokens"));
  }
  const std::size_t span_index = token / p.tpb;
  const BlockSlot id = p.block_id(
      s->spans[span_index], p.layout.BlockIndex(layer / p.layout.geometry.layers_per_block, group));
  p.PinRaw(id, /*promote=*/true);
  KvBlockPin pin;
  pin.pool_ = this;
  p.FillPin(pin, id);
  pin.first_token_ = span_index * p.tpb;
  pin.tokens_ = static_cast<int>(std::min(p.tpb, s->tokens - span_index * p.tpb));
  pin.token_in_block_ = static_cast<int>(token % p.tpb);
  return pin;
}

Status KvPool::ForEachBlock(KvSequenceId sequence, int layer, int group,
                            const std::function<void(const KvBlockPin&)>& visit) {
  Impl& p = *impl_;
  if (Status st = CheckLayerGroup(p.layout, layer, group); !st.ok()) return st;
  auto locked = p.LockLive(sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  const int index = p.layout.BlockIndex(layer / p.layout.geometry.layers_per_block, group);
  for (std::size_t i = 0; i < s->spans.size(); ++i) {
    const BlockSlot id = p.block_id(s->spans[i], index);
    p.PinRaw(id, /*promote=*/true);
    KvBlockPin pin;
    pin.pool_ = this;
    p.FillPin(pin, id);
    pin.first_token_ = i * p.tpb;
    pin.tokens_ = static_cast<int>(std::min(p.tpb, s->tokens - i * p.tpb));
    visit(pin);
  }
  return absl::OkStatus();
}

void KvPool::Unpin(KvBlockId block) { impl_->UnpinRaw(Impl::SlotOf(block)); }

std::size_t KvPool::Reclaim(int node, std::size_t bytes, KvUrgency urgency) {
  Impl& p = *impl_;
  HomeNode* home = p.home_of(node);
  kv::SlabAllocator* slabs = home != nullptr ? home->hot.get() : p.cold_of(node);
  if (slabs == nullptr) return 0;
  // Whatever this node's slabs gave back since the start (slabs empty only as a whole).
  const std::uint64_t start = slabs->released_bytes();
  auto released = [&] {
    slabs->ReleaseEmpty(0);
    return static_cast<std::size_t>(slabs->released_bytes() - start);
  };

  // Free spans hold memory but no data: drop their blocks on this node (their blocks on
  // other nodes stay for the next allocation) before moving or dropping any data.
  while (released() < bytes) {
    const std::uint32_t s = p.TakeFreeSpanOn(node);
    if (s == kNil) break;
    p.DropAndPark(s, node);
  }
  // Demote hot blocks (a home node with a cold tier).
  while (home != nullptr && released() < bytes) {
    const std::size_t want = std::max<std::size_t>(
        1, (bytes - released() + p.layout.block_bytes - 1) / p.layout.block_bytes);
    if (p.DemoteFrom(*home, std::min<std::size_t>(want, 64), urgency) == 0) break;
  }
  // Still short: drop unreferenced cached prefix spans that have memory here, least
  // recently released first. Background reclaim of a home node with a cold tier leaves them
  // to rate-limited demotion, which keeps their data.
  const bool may_evict = urgency == KvUrgency::kUrgent || home == nullptr || p.cold.empty();
  while (may_evict && released() < bytes) {
    const std::uint32_t s = p.EvictCached(node);
    if (s == kNil) break;
    p.DropAndPark(s, node);
  }
  return released();
}

std::size_t KvPool::Demote(int node, std::size_t max_blocks, KvUrgency urgency) {
  HomeNode* home = impl_->home_of(node);
  if (home == nullptr) return 0;
  return impl_->DemoteFrom(*home, max_blocks, urgency);
}

Status KvPool::DemoteBlock(KvBlockId block) {
  Impl& p = *impl_;
  if (Status st = p.CheckExists(block); !st.ok()) return st;
  const BlockSlot id = Impl::SlotOf(block);
  if (p.cold.empty()) {
    return absl::FailedPreconditionError("KV pool: no cold tier is configured");
  }
  BlockMeta& b = p.block(id);
  HomeNode* home = p.home_of(static_cast<int>(p.HomeNodeOfBlock(id)));
  {
    std::lock_guard lock(home->list_mu);
    if (b.tier.load(std::memory_order_relaxed) != static_cast<std::uint8_t>(KvTier::kHot)) {
      return absl::FailedPreconditionError(
          absl::StrCat("KV pool: block ", block, " is not in the hot tier"));
    }
    if (!p.EligibleVictim(id)) {
      return absl::FailedPreconditionError(
          absl::StrCat("KV pool: block ", block, " is pinned or holds no data"));
    }
    std::uint32_t expected = 0;
    if (!b.state.compare_exchange_strong(expected, kMigrating, std::memory_order_acquire)) {
      return absl::FailedPreconditionError(absl::StrCat("KV pool: block ", block, " is pinned"));
    }
    if (!p.Current(block)) {
      b.state.store(0, std::memory_order_release);
      return p.Stale(block);
    }
    home->policy->OnRemove(home->list, id, /*demoted=*/true);
    home->list.Remove(id);
  }
  int cold_node = -1;
  Status why;
  kv::Slot slot = p.AllocateCold(&cold_node, &why);
  if (!slot) {
    std::lock_guard lock(home->list_mu);
    home->list.PushBack(id);
    home->policy->OnInsert(home->list, id);
    b.state.store(0, std::memory_order_release);
    return absl::ResourceExhaustedError(
        absl::StrCat("KV pool: no room in the cold tier: ", why.message()));
  }
  const auto start = std::chrono::steady_clock::now();
  std::memcpy(slot.data, b.data.load(std::memory_order_relaxed), p.layout.block_bytes);
  kv::Slot old{b.data.load(std::memory_order_relaxed), b.slab.load(std::memory_order_relaxed)};
  Impl::SetPlacement(b, slot, KvTier::kCold, cold_node);
  b.state.store(0, std::memory_order_release);
  home->hot->Free(old);
  p.demotions.fetch_add(1, std::memory_order_relaxed);
  p.bytes_demoted.fetch_add(p.layout.block_bytes, std::memory_order_relaxed);
  p.demotion_ns.fetch_add(
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - start)
                                     .count()),
      std::memory_order_relaxed);
  return absl::OkStatus();
}

Status KvPool::PromoteBlock(KvBlockId block) {
  Impl& p = *impl_;
  if (Status st = p.CheckExists(block); !st.ok()) return st;
  const BlockSlot id = Impl::SlotOf(block);
  BlockMeta& b = p.block(id);
  std::uint32_t expected = 0;
  if (!b.state.compare_exchange_strong(expected, kMigrating, std::memory_order_acquire)) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV pool: block ", block, " is pinned or being moved"));
  }
  // Checked with the block claimed, as Pin does, so a span being evicted is not promoted.
  Status result;
  if (!p.Pinnable(static_cast<std::uint32_t>(id / p.bps))) {
    result = absl::FailedPreconditionError(
        absl::StrCat("KV pool: block ", block, " belongs to no sequence or cache"));
  } else if (!p.Current(block)) {
    result = p.Stale(block);
  } else if (b.tier.load(std::memory_order_relaxed) != static_cast<std::uint8_t>(KvTier::kCold)) {
    result = absl::FailedPreconditionError(
        absl::StrCat("KV pool: block ", block, " is not in the cold tier"));
  } else if (!p.TryPromoteLocked(id, b)) {
    result = absl::ResourceExhaustedError(absl::StrCat(
        "KV pool: no room in the hot tier of node ", p.HomeNodeOfBlock(id), " for block ", block));
  }
  b.state.store(0, std::memory_order_release);
  return result;
}

KvPoolStats KvPool::Stats() const {
  const Impl& p = *impl_;
  KvPoolStats st;
  st.block_bytes = p.layout.block_bytes;
  st.blocks_per_span = p.bps;
  std::vector<int> nodes = p.placement.home_nodes;
  nodes.insert(nodes.end(), p.placement.cold_nodes.begin(), p.placement.cold_nodes.end());
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  for (int n : nodes) {
    KvNodeStats ns;
    ns.node = n;
    if (HomeNode* h = p.home_of(n)) ns.hot_slab_bytes = h->hot->mapped_bytes();
    if (kv::SlabAllocator* c = p.cold_of(n)) ns.cold_slab_bytes = c->mapped_bytes();
    st.nodes.push_back(ns);
  }
  auto node_stats = [&st](int node) -> KvNodeStats* {
    for (KvNodeStats& ns : st.nodes)
      if (ns.node == node) return &ns;
    return nullptr;
  };
  const std::uint32_t spans = p.spans_created.load(std::memory_order_acquire);
  for (std::uint32_t s = 0; s < spans; ++s) {
    switch (p.span(s).state.load(std::memory_order_relaxed)) {
      case kInUse:
        ++st.spans_in_use;
        break;
      case kCached:
        ++st.spans_cached;
        break;
      case kFree:
        ++st.spans_free;
        break;
      default:
        break;
    }
    for (std::size_t i = 0; i < p.bps; ++i) {
      const BlockMeta& b = p.block(p.block_id(s, static_cast<int>(i)));
      const auto tier = static_cast<KvTier>(b.tier.load(std::memory_order_relaxed));
      KvNodeStats* ns = node_stats(b.node.load(std::memory_order_relaxed));
      if ((b.state.load(std::memory_order_relaxed) & ~kMigrating) != 0) ++st.pinned_blocks;
      if (tier == KvTier::kHot) {
        ++st.hot_blocks;
        if (ns) ++ns->hot_blocks;
      } else if (tier == KvTier::kCold) {
        ++st.cold_blocks;
        if (ns) ++ns->cold_blocks;
      }
    }
  }
  std::uint64_t created = 0, freed = 0;
  for (const StatStripe& s : p.stripes) {
    st.hot_pins += s.hot_pins.load(std::memory_order_relaxed);
    st.cold_pins += s.cold_pins.load(std::memory_order_relaxed);
    st.prefix_lookups += s.prefix_lookups.load(std::memory_order_relaxed);
    st.prefix_hits += s.prefix_hits.load(std::memory_order_relaxed);
    created += s.sequences_created.load(std::memory_order_relaxed);
    freed += s.sequences_freed.load(std::memory_order_relaxed);
  }
  // Stripes are read one after another, so a free may be seen without its creation.
  st.sequences = created > freed ? created - freed : 0;
  const double pins = static_cast<double>(st.hot_pins + st.cold_pins);
  if (pins > 0) {
    st.hot_hit_rate = static_cast<double>(st.hot_pins) / pins;
    st.cold_hit_rate = static_cast<double>(st.cold_pins) / pins;
  }
  st.demotions = p.demotions.load();
  st.promotions = p.promotions.load();
  st.bytes_demoted = p.bytes_demoted.load();
  st.bytes_promoted = p.bytes_promoted.load();
  if (p.demotion_ns.load() > 0)
    st.demotion_mbps = static_cast<double>(st.bytes_demoted) * 1e3 / p.demotion_ns.load();
  if (p.promotion_ns.load() > 0)
    st.promotion_mbps = static_cast<double>(st.bytes_promoted) * 1e3 / p.promotion_ns.load();
  st.cached_evictions = p.cached_evictions.load();
  st.refusals = p.refusals.load();
  st.copy_on_writes = p.copy_on_writes.load();
  return st;
}

}  // namespace numarena
