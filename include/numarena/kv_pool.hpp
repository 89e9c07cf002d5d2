// The KV-cache tensor pool: attention K/V blocks placed by head group, hot/cold tiered.
//
// An inference server keeps the attention keys and values of every live sequence. Where those
// bytes sit decides decode latency, so the pool places them deliberately:
//
//   * Head-first placement. KV heads are grouped and every block of a head group, for all
//     layers, lives on that group's home node (K and V of one head side by side), so the
//     threads that run attention for a head group read only local memory.
//   * Blocks. A block holds K and V of one (layer range, head group, span of
//     `tokens_per_block` tokens), contiguous and 64-byte aligned. A *span* is the row of
//     blocks (all layer ranges x all head groups) for one run of tokens of a sequence; spans
//     are what sequences own, share and look up by prefix hash.
//   * Hot and cold tiers. Block memory comes from slabs on the home node (hot) or on a cold
//     tier: a named node (e.g. a CXL memory-only node), the farthest node, or interleaved over
//     a set. A hotness policy (LRU, CLOCK, 2Q) chooses which blocks to demote; demotion copies
//     a block to the cold tier and repoints its handle. Touching (pinning) a cold block
//     promotes it when the hot tier has room, otherwise it is served from the cold tier.
//   * Budget-driven. Hot memory is limited by a per-node block capacity, by the storage
//     (a budget refusing memory), and by `Reclaim`, which a budget's reclaim hook calls at
//     the warn and trip lines: the pool demotes instead of failing, and gives up cached
//     prefix spans when demotion cannot free enough.
//   * Prefix reuse. A full span is indexed by the hash of (parent hash, its token ids); a new
//     request whose prompt starts with the same tokens shares those spans (reference
//     counted) instead of recomputing them. A span enters the index only once the caller
//     says its K/V are written (`MarkComputed`), so a prefix hit never sees rows still being
//     computed. Spans of finished sequences stay cached until their memory is needed (lazy
//     eviction, least recently released first; a cached span with a pinned block stays).
//
// Handles (`KvBlockId`, `KvSequenceId`) do not change when blocks migrate; a block id is
// refused once its span has been released and reused (see KvBlockId). A block's data
// pointer is valid only while it is pinned (`KvBlockPin`), and migration never moves a
// pinned block.
//
// Thread-safety: every member function may be called from any thread. Operations on one
// sequence are serialised by that sequence's own lock. Pinning a hot block, allocating or
// freeing a span from the free lists, creating and freeing sequences, prefix lookups
// (CachedPrefixTokens) and sharing a prompt that some sequence holds take no pool-wide lock;
// each thread's data sits on its own cache lines, so two threads doing these on their own
// sequences run at the speed of one each. Sharing one prompt's spans from many threads at
// once still writes those spans' reference counts.
//
//   numarena::KvPoolOptions options;
//   options.geometry = {.layers = 32, .kv_heads = 8, .head_dim = 128,
//                       .dtype = numarena::KvDType::kBf16};
//   options.cold_tier = numarena::KvColdTier::Farthest();
//   auto pool = numarena::KvPool::Create(std::move(options));
//   if (!pool.ok()) { std::cerr << pool.status() << "\n"; return 1; }
//   std::size_t reused = 0;
//   auto seq = (*pool)->CreateSequence(prompt_tokens, &reused);  // shares cached prefix spans
//   if (!seq.ok()) return seq.status();
//   // ... compute K/V for prompt_tokens[reused..] and write them:
//   auto pin = (*pool)->PinToken(*seq, /*layer=*/0, /*group=*/0, /*token=*/reused);
//   if (!pin.ok()) return pin.status();
//   std::memcpy(pin->key(/*layer_in_block=*/0, /*head_in_group=*/0, pin->token_in_block()),
//               k_row, pin->row_bytes());
//   // ... once every layer and head of the prompt is written, offer it for prefix reuse:
//   if (Status s = (*pool)->MarkComputed(*seq, prompt_tokens.size()); !s.ok()) return s;
//   // attention for (layer 3, head group 1):
//   Status s = (*pool)->ForEachBlock(*seq, 3, 1, [&](const numarena::KvBlockPin& block) { ... });
//   s.Update((*pool)->FreeSequence(*seq));
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "numarena/capacity.hpp"
#include "numarena/kv_types.hpp"
#include "numarena/policy.hpp"
#include "numarena/status.hpp"

namespace numarena {

class KvPool;
namespace kv {
struct PoolState;  // the pool's internals (lib/kv/kv_pool_state.hpp)
}

// A pinned block: its data pointer is valid, and the block will not move, until the pin is
// destroyed. Layout of the data: for each layer of the block's range, for each head of its
// group, `tokens_per_block` key rows of `head_dim` elements, then as many value rows. Key
// and value areas start 64-byte aligned.
//
// A pin must not outlive its pool: destroy it (or Reset() it) before the KvPool. Destroying
// a pool while any of its blocks is pinned prints how many on stderr and aborts, because the
// pin's memory goes with the pool and unpinning would write into the freed pool. The pin
// does not keep the pool alive instead: that would put a shared reference count on every
// pin and unpin, a cache line that all decode threads write (the pin fast path takes no
// pool-wide write today). The check costs nothing until the pool is destroyed, when it
// reads every block's pin count once.
class KvBlockPin {
 public:
  KvBlockPin() = default;
  KvBlockPin(KvBlockPin&& other) noexcept { *this = std::move(other); }
  KvBlockPin& operator=(KvBlockPin&& other) noexcept;
  KvBlockPin(const KvBlockPin&) = delete;
  KvBlockPin& operator=(const KvBlockPin&) = delete;
  ~KvBlockPin() { Reset(); }

  // Unpins now (the destructor does it otherwise).
  void Reset();

  bool valid() const { return pool_ != nullptr; }
  KvBlockId id() const { return id_; }
  std::byte* data() const { return data_; }
  KvTier tier() const { return tier_; }
  int node() const { return node_; }

  int first_layer() const { return first_layer_; }  // layer range of the block
  int first_head() const { return first_head_; }    // first KV head of its group
  int group() const { return group_; }
  // Tokens of the sequence before this block, and valid tokens in it (set by ForEachBlock
  // and PinToken; 0 for a bare Pin).
  std::size_t first_token() const { return first_token_; }
  int tokens() const { return tokens_; }
  // For PinToken: the requested token's index inside the block.
  int token_in_block() const { return token_in_block_; }

  // Bytes of one K or V row (head_dim elements).
  std::size_t row_bytes() const;
  // Start of the key rows / value rows of (layer_in_block, head_in_group), or of one row.
  std::byte* key(int layer_in_block, int head_in_group, int token = 0) const;
  std::byte* value(int layer_in_block, int head_in_group, int token = 0) const;

 private:
  friend class KvPool;
  KvPool* pool_ = nullptr;
  KvBlockId id_ = 0;
  std::byte* data_ = nullptr;
  KvTier tier_ = KvTier::kNone;
  int node_ = -1;
  int first_layer_ = 0;
  int first_head_ = 0;
  int group_ = 0;
  std::size_t first_token_ = 0;
  int tokens_ = 0;
  int token_in_block_ = 0;
};

// ---- the pool ------------------------------------------------------------------------

// Aligned to its own pair of cache lines so that every call's read of the implementation
// pointer never shares a line with another thread's writes (a small heap object would).
class alignas(128) KvPool {
 public:
  // Validates the options and builds the pool. InvalidArgument names what is wrong: zero
  // layers/heads/head_dim/tokens, a group or layer range that does not divide, a geometry
  // whose row, block, span or slab size (or blocks per span, or blocks per slab) does not
  // fit its type, an unknown or not-allowed home or cold node or one of 1024 and above, a
  // cold node that is also a home node, a block larger than the storage's capacity on a
  // node. FailedPrecondition when defaults cannot be resolved (no topology, no node left for
  // the cold tier).
  [[nodiscard]] static StatusOr<std::unique_ptr<KvPool>> Create(KvPoolOptions options);
  // Aborts, after a message on stderr, when any block is still pinned (see KvBlockPin).
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  // ---- layout
  const KvGeometry& geometry() const;
  int head_groups() const;
  int layer_ranges() const;
  std::size_t block_bytes() const;
  // Home node of a head group.
  int group_node(int group) const;
  const std::vector<int>& home_nodes() const;
  // Nodes of the cold tier (empty without one).
  const std::vector<int>& cold_nodes() const;

  // ---- sequences
  // A new sequence holding `prompt`. Full spans whose prefix is in the index are shared, and
  // `reused_tokens` (optional) receives how many leading tokens already have K/V; those
  // count as computed. The caller computes and writes the rest, then calls MarkComputed.
  // ResourceExhausted when no memory is left, for blocks or for the metadata that the
  // prompt's length and the geometry make the pool allocate (nothing is held then): such a
  // refusal is never a bad_alloc.
  [[nodiscard]] StatusOr<KvSequenceId> CreateSequence(std::span<const std::int32_t> prompt = {},
                                                      std::size_t* reused_tokens = nullptr);
  // Appends token ids, allocating spans as they fill. A shared partial last span is copied
  // first (copy-on-write). The caller writes the tokens' K/V afterwards (PinToken) and then
  // calls MarkComputed. On ResourceExhausted the sequence is unchanged.
  [[nodiscard]] Status Append(KvSequenceId sequence, std::span<const std::int32_t> tokens);
  // Declares that the K/V rows of the first `tokens` tokens of the sequence, every layer and
  // every head, are written and final. Each full span inside that range enters the prefix
  // index, so later CreateSequence/CachedPrefixTokens calls can find and share it; a span
  // is never found before. A span whose prefix is already indexed (another sequence
  // computed the same tokens first) stays private to its holders.
  //
  // Contract: every write to those rows must happen-before this call (for example, the
  // thread that wrote them calls it, or it is called after joining the writers); after it,
  // nobody may write those rows again, since another request may be reading them. The call
  // synchronises with the prefix lookups that find the spans: a sequence that shares a span
  // this way sees every row written before MarkComputed. The computed count only grows
  // (a smaller `tokens` than already marked is a no-op) until Truncate shortens the
  // sequence below it. A partial last span is never indexed. Spans of a sequence freed
  // before they were marked hold no trustworthy K/V: they are freed, not cached.
  // OutOfRange when `tokens` exceeds the sequence's length.
  //
  //   auto seq = pool->CreateSequence(prompt, &reused);
  //   WritePrefill(*pool, *seq, prompt, reused);           // PinToken + memcpy, all layers
  //   pool->MarkComputed(*seq, prompt.size()).IgnoreError();
  //   // decode step: Append one token, write its K/V, then
  //   pool->MarkComputed(*seq, prompt.size() + 1).IgnoreError();
  [[nodiscard]] Status MarkComputed(KvSequenceId sequence, std::size_t tokens);
  // Drops tokens from the end so `tokens` remain (speculative decoding rollback). The
  // computed count is lowered to at most `tokens`.
  [[nodiscard]] Status Truncate(KvSequenceId sequence, std::size_t tokens);
  // A new sequence sharing all of `parent`'s spans (reference counted), with the parent's
  // computed count.
  [[nodiscard]] StatusOr<KvSequenceId> Fork(KvSequenceId parent);
  // Releases the sequence; spans no one else holds become cached (full and in the prefix
  // index) or free.
  [[nodiscard]] Status FreeSequence(KvSequenceId sequence);
  [[nodiscard]] StatusOr<std::size_t> Length(KvSequenceId sequence) const;
  // How many leading tokens of `tokens` are covered by indexed (computed) full spans, live
  // or cached (no side effects): what a scheduler asks to route or admit a request. It
  // takes no lock, so any number of threads can ask about the same prompt at full speed.
  // Spans are matched by their 64-bit prefix hash (which covers every earlier token); only
  // CreateSequence, which shares the K/V, also compares the token ids. The answer can be
  // out of date as soon as it is returned (a concurrent eviction or MarkComputed).
  //
  //   if (pool->CachedPrefixTokens(prompt) >= prompt.size() / 2) RouteHere(request);
  std::size_t CachedPrefixTokens(std::span<const std::int32_t> tokens) const;

  // ---- blocks
  // Replaces the contents of `*out` with the block ids of a sequence for (layer, group), in
  // token order (`*out` is left empty on error). The ids land in a vector the caller owns,
  // so iterating them cannot dangle, and one vector can be reused across calls:
  //
  //   std::vector<numarena::KvBlockId> ids;
  //   if (Status st = pool->Blocks(seq, layer, group, &ids); !st.ok()) return st;
  //   for (numarena::KvBlockId id : ids) { auto pin = pool->Pin(id); ... }
  //
  // The ids are a snapshot: they stay the sequence's only while it is not appended to,
  // truncated or freed. An id whose span has since been given new contents is refused
  // (FailedPrecondition, "stale"), never resolved to another sequence's block. ForEachBlock
  // pins the blocks under the sequence's lock instead.
  [[nodiscard]] Status Blocks(KvSequenceId sequence, int layer, int group,
                              std::vector<KvBlockId>* out) const;
  // Pins a block (promoting it first when it is cold, promote_on_touch is set and the hot
  // tier has room). FailedPrecondition when the block belongs to no sequence or cache. Safe
  // against the block's sequence being freed, or its cached span evicted, at the same time:
  // either the pin is taken while the block still belongs to a sequence or the cache, and
  // then its memory stays and a cached span is not evicted until unpin, or Pin fails. A pin
  // held while its sequence is freed keeps the memory but not the contents: once the span
  // is reused, its new owner writes there. An id kept after its sequence was freed or
  // truncated is refused with FailedPrecondition ("stale") once its span has a new owner.
  // That includes the id of a pin held meanwhile (`KvBlockPin::id()`): the pin keeps the
  // memory, not the ownership.
  [[nodiscard]] StatusOr<KvBlockPin> Pin(KvBlockId block);
  // Where a block is now, without pinning it or counting an access (stats, tests).
  struct BlockLocation {
    KvTier tier = KvTier::kNone;
    int node = -1;
    int pins = 0;
  };
  // FailedPrecondition for a stale id (see Pin).
  [[nodiscard]] StatusOr<BlockLocation> Locate(KvBlockId block) const;
  // Pins the block holding `token` of the sequence for (layer, group), for writing its K/V.
  [[nodiscard]] StatusOr<KvBlockPin> PinToken(KvSequenceId sequence, int layer, int group,
                                              std::size_t token);
  // Calls `visit` with each block of the sequence for (layer, group), pinned, in token order
  // (the attention kernel's loop). The sequence is locked meanwhile: `visit` must not call
  // sequence operations on the same sequence.
  [[nodiscard]] Status ForEachBlock(KvSequenceId sequence, int layer, int group,
                                    const std::function<void(const KvBlockPin&)>& visit);

  // ---- tiering
  // Frees up to `bytes` of the pool's memory on `node` (a home node's hot tier, or a cold
  // tier node), stopping as soon as that much went back. In order:
  //   1. releases retained empty slabs;
  //   2. drops the memory free spans hold on `node` (they hold no data; their blocks on
  //      other nodes stay, and the next allocation that takes the span backs it again);
  //   3. on a home node, demotes blocks to the cold tier by the hotness policy (kBackground:
  //      at the rate limit);
  //   4. evicts unreferenced cached prefix spans that have memory on `node`, least recently
  //      released first: they leave the prefix index and their blocks on `node` are freed.
  //      This runs for kUrgent, and for kBackground when demotion cannot help (no cold
  //      tier, or `node` is a cold-tier node); spans with a pinned or moving block are
  //      skipped (as they are when an allocation that found no memory evicts one).
  // Memory on other nodes is never released, though demotion (3) takes cold-tier memory.
  // Returns the bytes of slabs on `node` given back to the storage during the call. Slabs
  // go back only when empty, so blocks freed in slabs that still hold live blocks return
  // less than `bytes`. This is what a budget's reclaim hook calls.
  //
  //   // No cold tier: the budget's warn line is reached by dropping cached prefixes.
  //   std::size_t freed = pool->Reclaim(/*node=*/0, std::size_t{64} << 20);
  std::size_t Reclaim(int node, std::size_t bytes, KvUrgency urgency = KvUrgency::kUrgent);
  // Demotes up to `max_blocks` hot blocks of `node` chosen by the hotness policy. Returns the
  // number demoted (0 without a cold tier, when every block is pinned, or when the rate
  // limit has no budget left for kBackground).
  std::size_t Demote(int node, std::size_t max_blocks, KvUrgency urgency = KvUrgency::kUrgent);
  // Moves one block now. FailedPrecondition when it is pinned, unused, already in that tier,
  // or there is no cold tier; ResourceExhausted when the target tier has no room.
  [[nodiscard]] Status DemoteBlock(KvBlockId block);
  [[nodiscard]] Status PromoteBlock(KvBlockId block);

  // ---- the kernel's own tiering
  // Checks where the pages of the next `max_blocks` blocks holding data really are
  // (move_pages(2) with a null node list, through options.page_nodes) against the node the
  // pool put each block on: a hot block's home node, a cold block's cold-tier node. The
  // kernel moves pages behind the pool's back when memory tiering demotes them under
  // pressure (`/sys/kernel/mm/numa/demotion_enabled`) or NUMA balancing in tiering mode
  // (`kernel.numa_balancing=2`) promotes them; a hot block half on a CXL node is slow for
  // every decode step that reads it, and the pool's per-node statistics would be wrong.
  //
  // With options.kernel_moves kReport the misplaced pages are counted (the report, Stats(),
  // metrics); with kCorrect they are also moved back to the block's node, for at most
  // `max_corrected_blocks` blocks per call. Pages are moved under a pin reference, so the
  // block is neither moved by the pool nor freed meanwhile; its data and address stay the
  // same (the kernel copies the page), so pins held by other threads stay valid. Pages not
  // resident are skipped. Successive calls continue where the last stopped and wrap.
  // Calls are serialised (one audit at a time); pins, allocation and tiering go on
  // meanwhile.
  //
  // InvalidArgument for max_blocks 0; the query's error (PermissionDenied when the kernel
  // refuses move_pages, e.g. under a container's seccomp profile) when asking fails.
  //
  //   // a maintenance thread, once a second: at most 1024 blocks asked about, 64 moved back
  //   auto audit = pool->AuditPlacement();
  //   if (audit.ok() && audit->hot_pages_misplaced > 0) LogKernelDemotion(*audit);
  [[nodiscard]] StatusOr<KvAuditReport> AuditPlacement(const KvAuditOptions& options = {});

  KvPoolStats Stats() const;

 private:
  friend class KvBlockPin;
  explicit KvPool(std::unique_ptr<kv::PoolState> impl);
  void Unpin(KvBlockId block);
  // Fills the block fields of `pin` for block slot `slot`, which the caller has pinned.
  void FillPin(KvBlockPin& pin, std::uint32_t slot) const;
  std::unique_ptr<kv::PoolState> impl_;
};

}  // namespace numarena
