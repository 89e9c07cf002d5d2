// KV pool state: the tables every part of the pool works on (blocks, spans, sequences, home
// and cold slabs, counters), and the lookups into them. The main header of lib/kv.
//
// Inner order of lib/kv, bottom-up. A file includes its own header and files named before
// it in this list, never one after it, so a call goes down and never comes back up (the layer
// check, cmake/CheckLayers.cmake, reads this list and checks every include):
//   types:     numarena/kv_types.hpp numarena/kv_pool.hpp
//   parts:     kv_testing kv_read_mostly_map kv_prefix_index kv_hotness kv_pool_sync kv_layout
//              kv_placement kv_slab kv_storage
//   state:     kv_pool_state
//   spans:     kv_pool_spans
//   tiering:   kv_pool_tiering
//   pins:      kv_pool_pins
//   audit:     kv_pool_audit
//   sequences: kv_pool_sequences
//   pool:      kv_pool
//
// The pool is one `PoolState` (what `KvPool` points to) and the parts that work on it, each
// in its own file. Spans (kv_pool_spans) is the span store: spans' memory in both tiers,
// allocation, release, the prefix cache and eviction; when a block's home node has no hot
// slot it answers so (Backing::kNoHotSlot) and leaves the demotion to its caller. Tiering
// (kv_pool_tiering) moves blocks between the tiers (demotion, promotion, Reclaim) and
// allocates spans, demoting for room. Pins (kv_pool_pins) takes pin references, promoting a
// cold block on touch. The audit (kv_pool_audit) finds blocks whose pages the kernel moved
// and moves them back under a pin. Sequences (kv_pool_sequences) hold spans in order, share
// prefixes (CreateSequence), append with copy-on-write and publish computed spans. kv_pool.cpp
// builds the state (Create) and reads it (Stats).
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
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "kv/kv_hotness.hpp"
#include "kv/kv_layout.hpp"
#include "kv/kv_placement.hpp"
#include "kv/kv_pool_sync.hpp"
#include "kv/kv_prefix_index.hpp"
#include "kv/kv_slab.hpp"
#include "numarena/kv_types.hpp"
#include "numarena/status.hpp"

namespace numarena::kv {

// A block's index in the pool's tables (span * blocks per span + index in the span). The
// public KvBlockId adds the span's generation above it (see PoolState::PublicId).
using BlockSlot = std::uint32_t;

inline constexpr std::uint32_t kMigrating = 1u << 31;
inline constexpr std::uint32_t kSpansPerChunk = 256;
inline constexpr std::uint32_t kMaxChunks = 1u << 16;
inline constexpr std::size_t kStatStripes = 16;

enum SpanState : std::uint8_t { kUnbacked = 0, kFree = 1, kInUse = 2, kCached = 3 };

struct BlockMeta {
  std::atomic<std::uint32_t> state{0};  // pin count | kMigrating
  std::atomic<std::byte*> data{nullptr};
  std::atomic<std::uint8_t> tier{0};  // KvTier
  // Pages of the block that AuditPlacement (under a pin reference) last found off its node
  // and left there; 0 once they are back, and when the block is placed anew (SetPlacement).
  std::atomic<std::uint32_t> misplaced{0};
  std::atomic<std::int32_t> node{-1};
  std::atomic<std::int32_t> slab{-1};
  HotMeta hot;
};

// A span's reference word: its holder count, plus kIndexedBit while it is in the prefix
// index (set and cleared under its index shard lock).
inline constexpr std::uint32_t kIndexedBit = 1u << 31;
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
  // Heap bytes of one chunk. Blocks per span and tokens per block are ints, so this stays
  // far below SIZE_MAX (about 2^46 at most).
  static constexpr std::size_t Bytes(std::size_t blocks_per_span, std::size_t tokens_per_block) {
    return sizeof(Chunk) + kSpansPerChunk * (blocks_per_span * sizeof(BlockMeta) +
                                             tokens_per_block * sizeof(std::int32_t));
  }
  // A chunk of kSpansPerChunk spans, or null when the heap cannot hold it: its tables grow
  // with the geometry (blocks per span, tokens per block), so running out is a refusal
  // (ResourceExhausted), not an exception out of CreateSequence.
  static Chunk* New(std::size_t blocks_per_span, std::size_t tokens_per_block) {
    std::unique_ptr<Chunk> chunk(new (std::nothrow) Chunk);
    if (chunk == nullptr) return nullptr;
    chunk->blocks.reset(new (std::nothrow) BlockMeta[kSpansPerChunk * blocks_per_span]);
    chunk->tokens.reset(new (std::nothrow) std::int32_t[kSpansPerChunk * tokens_per_block]());
    if (chunk->blocks == nullptr || chunk->tokens == nullptr) return nullptr;
    return chunk.release();
  }
  SpanMeta spans[kSpansPerChunk];
  std::unique_ptr<BlockMeta[]> blocks;
  std::unique_ptr<std::int32_t[]> tokens;
};

// The largest chunk KvPool::Create accepts. 128 layers x 128 head groups of one head at 16
// tokens per block need a quarter of it (256 MiB), a 70B Llama (80 layers x 8 groups) 10 MiB.
inline constexpr std::size_t kMaxChunkBytes = std::size_t{1} << 30;

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

struct HomeNode {
  HomeNode(int id, MetaAccessor meta, std::unique_ptr<HotnessPolicy> p)
      : node(id), list(std::move(meta)), policy(std::move(p)) {}
  int node;
  std::unique_ptr<SlabAllocator> hot;
  std::mutex list_mu;
  HotList list;
  std::unique_ptr<HotnessPolicy> policy;
};

// The pool's state table. Its members are filled once by KvPool::Create; after that the
// parts change them only as the comments on each say (atomics, or under the named lock).
struct PoolState {
  KvPoolOptions options;
  Layout layout;
  Placement placement;
  std::shared_ptr<KvStorage> storage;
  std::vector<int> group_node;
  std::size_t bps = 0;  // blocks per span
  std::size_t tpb = 0;  // tokens per block

  std::vector<std::unique_ptr<HomeNode>> homes;      // by home index
  std::vector<std::unique_ptr<SlabAllocator>> cold;  // by cold index
  std::vector<int> home_index;                       // node id -> home index or -1
  std::vector<int> cold_index;                       // node id -> cold index or -1
  std::atomic<std::size_t> cold_cursor{0};

  std::unique_ptr<std::atomic<Chunk*>[]> chunks { new std::atomic<Chunk*>[ kMaxChunks ]() };
  std::atomic<std::uint32_t> spans_created{0};
  std::mutex grow_mu;
  std::vector<std::uint32_t> unbacked;

  FreeIds free_spans;
  PrefixIndex prefix;

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

  // AuditPlacement: one call at a time (audit_mu), continuing from audit_cursor (a block
  // slot); totals for Stats.
  std::mutex audit_mu;
  std::uint64_t audit_cursor = 0;
  std::atomic<std::uint64_t> audits{0}, audited_pages{0};
  std::atomic<std::uint64_t> kernel_demoted_pages{0}, kernel_promoted_pages{0};
  std::atomic<std::uint64_t> pages_moved_back{0}, pages_not_moved{0};

  std::uint64_t budget_hook = 0;  // id of the reclaim hook on options.budget, 0 when none

  std::mutex rate_mu;
  double rate_allowance = 0;  // bytes background demotion may still move
  std::chrono::steady_clock::time_point rate_last = std::chrono::steady_clock::now();

  ~PoolState() {
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
    thread_local const PoolState* pool = nullptr;
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
  SlabAllocator* cold_of(int node) const {
    if (node < 0 || node >= static_cast<int>(cold_index.size()) || cold_index[node] < 0)
      return nullptr;
    return cold[cold_index[node]].get();
  }
  std::uint32_t HomeNodeOfBlock(BlockSlot id) const {
    return static_cast<std::uint32_t>(group_node[layout.GroupOf(static_cast<int>(id % bps))]);
  }

  // The sequence slot `id` names while its generation matches, else null (never created,
  // or freed since).
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
};

inline Status NoSequence(KvSequenceId id) {
  return absl::NotFoundError(
      absl::StrCat("KV pool: sequence ", id, " does not exist (never created or already freed)"));
}

// A live sequence with its lock held.
struct LockedSequence {
  Sequence* sequence;
  std::unique_lock<SpinLock> lock;
};

// The live sequence `id` with its lock held (checked again under the lock: the id may be
// freed between the lookup and the lock), or NotFound.
[[nodiscard]] inline StatusOr<LockedSequence> LockLive(const PoolState& p, KvSequenceId id) {
  Sequence* s = p.sequence(id);
  if (s == nullptr) return NoSequence(id);
  std::unique_lock lock(s->mu);
  if (!s->live || p.sequence(id) != s) return NoSequence(id);
  return LockedSequence{s, std::move(lock)};
}

}  // namespace numarena::kv
