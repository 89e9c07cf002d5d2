// KV pool pins: pin references, KvBlockPin, and KvPool's Blocks, Pin, Locate, PinToken and
// ForEachBlock (see kv_pool_pins.hpp).
//
// Pins by block id. `Pin(id)` takes the pin reference first and checks the span's state
// afterwards, letting go when the span is not in use or cached. A pin held keeps the
// block's memory (DropBlocks waits for it), so a pin that passes the check points at memory
// that stays until unpin. A cached span leaves the cache (evicted by Reclaim or by an
// allocation that found no memory) only through ClaimCached, which claims every block
// (0 -> MIGRATING) before changing the span's state: a pinned span is skipped, and a pin
// that waited for the claim finds the span free and backs out.
#include "kv/kv_pool_pins.hpp"

#include <algorithm>
#include <thread>

#include "numarena/kv_pool.hpp"

namespace numarena {

using kv::BlockMeta;
using kv::BlockSlot;
using kv::kMigrating;
using kv::PoolState;
using kv::Sequence;

namespace kv {

void AcquirePin(PoolState& p, BlockSlot id, bool promote) {
  BlockMeta& b = p.block(id);
  for (;;) {
    std::uint32_t st = b.state.load(std::memory_order_acquire);
    if (st & kMigrating) {
      std::this_thread::yield();
      continue;
    }
    if (st == 0 && promote && p.options.promote_on_touch &&
        b.tier.load(std::memory_order_relaxed) == static_cast<std::uint8_t>(KvTier::kCold)) {
      if (b.state.compare_exchange_weak(st, kMigrating, std::memory_order_acquire)) {
        // A Pin racing with the span's free or eviction backs out afterwards: never take
        // hot memory for such a block. Spans leave the cache only while every block is
        // claimed (ClaimCached), so with MIGRATING held this check cannot go stale that way.
        if (Pinnable(p, static_cast<std::uint32_t>(id / p.bps))) TryPromoteLocked(p, id, b);
        b.state.store(1, std::memory_order_release);
        break;
      }
      continue;
    }
    if (b.state.compare_exchange_weak(st, st + 1, std::memory_order_acquire)) break;
  }
}

void NotePin(PoolState& p, BlockSlot id) {
  BlockMeta& b = p.block(id);
  Touch(b.hot, p.Tick());
  StatStripe& s = p.stripe();
  if (b.tier.load(std::memory_order_relaxed) == static_cast<std::uint8_t>(KvTier::kHot)) {
    s.hot_pins.fetch_add(1, std::memory_order_relaxed);
  } else {
    s.cold_pins.fetch_add(1, std::memory_order_relaxed);
  }
}

std::size_t PinnedBlocks(const PoolState& p) {
  std::size_t pinned = 0;
  const std::uint32_t spans = p.spans_created.load(std::memory_order_acquire);
  for (std::uint32_t s = 0; s < spans; ++s) {
    for (std::size_t i = 0; i < p.bps; ++i) {
      const BlockMeta& b = p.block(p.block_id(s, static_cast<int>(i)));
      if ((b.state.load(std::memory_order_acquire) & ~kMigrating) != 0) ++pinned;
    }
  }
  return pinned;
}

}  // namespace kv

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

// ---- KvPool: blocks and pins ---------------------------------------------------------

void KvPool::FillPin(KvBlockPin& pin, std::uint32_t slot) const {
  const PoolState& p = *impl_;
  const BlockMeta& b = p.block(slot);
  const int index = static_cast<int>(slot % p.bps);
  pin.id_ = p.PublicId(slot);
  pin.data_ = b.data.load(std::memory_order_relaxed);
  pin.tier_ = static_cast<KvTier>(b.tier.load(std::memory_order_relaxed));
  pin.node_ = b.node.load(std::memory_order_relaxed);
  pin.group_ = p.layout.GroupOf(index);
  pin.first_layer_ = p.layout.LayerRangeOf(index) * p.layout.geometry.layers_per_block;
  pin.first_head_ = pin.group_ * p.layout.geometry.heads_per_group;
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
  PoolState& p = *impl_;
  if (out == nullptr) return absl::InvalidArgumentError("KV pool: Blocks needs an output vector");
  out->clear();
  if (Status st = CheckLayerGroup(p.layout, layer, group); !st.ok()) return st;
  auto locked = kv::LockLive(p, sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  const int index = p.layout.BlockIndex(layer / p.layout.geometry.layers_per_block, group);
  out->reserve(s->spans.size());
  for (std::uint32_t sp : s->spans) out->push_back(p.PublicId(p.block_id(sp, index)));
  return absl::OkStatus();
}

StatusOr<KvBlockPin> KvPool::Pin(KvBlockId block) {
  PoolState& p = *impl_;
  if (Status st = p.CheckExists(block); !st.ok()) return st;
  const BlockSlot slot = PoolState::SlotOf(block);
  // A cheap early refusal, so that a stale id does not promote (take hot memory for) a block
  // that is no longer its own; the check after the pin below is the one that counts.
  if (!p.Current(block)) return p.Stale(block);
  // Pin first, check second. Checking first would leave a window in which the span is freed
  // and its memory dropped or reused before the pin lands. With the reference held, the
  // block's memory cannot be dropped (DropBlocks waits for pins) and a cached span cannot be
  // evicted (ClaimCached fails); the span still belonging to a sequence or the cache, in the
  // id's generation, after that means the pin is good. Otherwise let go: the block is free,
  // unbacked, recycled mid-allocation, or now another sequence's.
  kv::AcquirePin(p, slot, /*promote=*/true);
  if (!kv::Pinnable(p, slot / static_cast<BlockSlot>(p.bps)) ||
      p.block(slot).tier.load(std::memory_order_relaxed) ==
          static_cast<std::uint8_t>(KvTier::kNone)) {
    kv::UnpinRaw(p, slot);
    return absl::FailedPreconditionError(
        absl::StrCat("KV pool: block ", block,
                     " belongs to no sequence or cache; pin blocks of live "
                     "sequences only"));
  }
  if (!p.Current(block)) {
    kv::UnpinRaw(p, slot);
    return p.Stale(block);
  }
  kv::NotePin(p, slot);
  KvBlockPin pin;
  pin.pool_ = this;
  FillPin(pin, slot);
  return pin;
}

StatusOr<KvPool::BlockLocation> KvPool::Locate(KvBlockId block) const {
  const PoolState& p = *impl_;
  if (Status st = p.CheckExists(block); !st.ok()) return st;
  // A snapshot: without a pin the span may change hands right after this check.
  if (!p.Current(block)) return p.Stale(block);
  const BlockMeta& b = p.block(PoolState::SlotOf(block));
  BlockLocation where;
  where.tier = static_cast<KvTier>(b.tier.load(std::memory_order_relaxed));
  where.node = b.node.load(std::memory_order_relaxed);
  where.pins = static_cast<int>(b.state.load(std::memory_order_relaxed) & ~kMigrating);
  return where;
}

StatusOr<KvBlockPin> KvPool::PinToken(KvSequenceId sequence, int layer, int group,
                                      std::size_t token) {
  PoolState& p = *impl_;
  if (Status st = CheckLayerGroup(p.layout, layer, group); !st.ok()) return st;
  auto locked = kv::LockLive(p, sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  if (token >= s->tokens) {
    return absl::OutOfRangeError(absl::StrCat("KV pool: token ", token, " is beyond sequence ",
                                              sequence, " of ", s->tokens, " tokens"));
  }
  const std::size_t span_index = token / p.tpb;
  const BlockSlot id = p.block_id(
      s->spans[span_index], p.layout.BlockIndex(layer / p.layout.geometry.layers_per_block, group));
  kv::PinRaw(p, id, /*promote=*/true);
  KvBlockPin pin;
  pin.pool_ = this;
  FillPin(pin, id);
  pin.first_token_ = span_index * p.tpb;
  pin.tokens_ = static_cast<int>(std::min(p.tpb, s->tokens - span_index * p.tpb));
  pin.token_in_block_ = static_cast<int>(token % p.tpb);
  return pin;
}

Status KvPool::ForEachBlock(KvSequenceId sequence, int layer, int group,
                            const std::function<void(const KvBlockPin&)>& visit) {
  PoolState& p = *impl_;
  if (Status st = CheckLayerGroup(p.layout, layer, group); !st.ok()) return st;
  auto locked = kv::LockLive(p, sequence);
  if (!locked.ok()) return locked.status();
  Sequence* s = locked->sequence;
  const int index = p.layout.BlockIndex(layer / p.layout.geometry.layers_per_block, group);
  for (std::size_t i = 0; i < s->spans.size(); ++i) {
    const BlockSlot id = p.block_id(s->spans[i], index);
    kv::PinRaw(p, id, /*promote=*/true);
    KvBlockPin pin;
    pin.pool_ = this;
    FillPin(pin, id);
    pin.first_token_ = i * p.tpb;
    pin.tokens_ = static_cast<int>(std::min(p.tpb, s->tokens - i * p.tpb));
    visit(pin);
  }
  return absl::OkStatus();
}

void KvPool::Unpin(KvBlockId block) { kv::UnpinRaw(*impl_, PoolState::SlotOf(block)); }

}  // namespace numarena
