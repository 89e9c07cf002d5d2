// KV pool tiering: promotion, demotion and its rate limit, and KvPool's Reclaim, Demote,
// DemoteBlock and PromoteBlock (see kv_pool_tiering.hpp).
#include "kv/kv_pool_tiering.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "numarena/budget.hpp"
#include "numarena/kv_pool.hpp"

namespace numarena {

using kv::BlockMeta;
using kv::BlockSlot;
using kv::HomeNode;
using kv::kMigrating;
using kv::kNil;
using kv::PoolState;

namespace kv {

bool TryPromoteLocked(PoolState& p, BlockSlot id, BlockMeta& b) {
  // Checked again now that MIGRATING is held: a caller that saw the block cold before
  // claiming it may have lost a race with another pinner that promoted it meanwhile.
  if (b.tier.load(std::memory_order_relaxed) != static_cast<std::uint8_t>(KvTier::kCold))
    return false;
  HomeNode* home = p.home_of(static_cast<int>(p.HomeNodeOfBlock(id)));
  if (!home->hot->HasRoom()) return false;
  if (p.options.budget != nullptr && p.options.budget->state(home->node) >= NodeState::kWarn)
    return false;  // promoting would only push the node back into reclaim
  Slot slot = home->hot->Allocate(/*may_grow=*/true);
  if (!slot) return false;
  const auto start = std::chrono::steady_clock::now();
  std::memcpy(slot.data, b.data.load(std::memory_order_relaxed), p.layout.block_bytes);
  Slot old{b.data.load(std::memory_order_relaxed), b.slab.load(std::memory_order_relaxed)};
  SlabAllocator* from = p.cold_of(b.node.load(std::memory_order_relaxed));
  SetPlacement(b, slot, KvTier::kHot, home->node);
  InsertHot(p, *home, id);
  from->Free(old);
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  p.promotions.fetch_add(1, std::memory_order_relaxed);
  p.bytes_promoted.fetch_add(p.layout.block_bytes, std::memory_order_relaxed);
  p.promotion_ns.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
  return true;
}

StatusOr<std::uint32_t> AllocateSpan(PoolState& p) {
  bool ready = false;
  auto taken = TakeSpan(p, &ready);
  if (!taken.ok() || ready) return taken;
  const std::uint32_t s = *taken;
  std::size_t next = 0;
  bool cold_for_next = false;
  Status why;
  for (;;) {
    switch (BackBlocks(p, s, &next, cold_for_next, &why)) {
      case Backing::kDone:
        return s;
      case Backing::kNoHotSlot:
        // Room for this block on its home node, if a victim can go; else it goes cold.
        DemoteFrom(p, HomeOfIndex(p, static_cast<int>(next)), 8, KvUrgency::kUrgent);
        cold_for_next = true;
        break;
      case Backing::kNoMemory:
        return SpanWithoutMemory(p, s, why);
    }
  }
}

namespace {

// Whether a hot block may be demoted now: unpinned, not moving, and holding a sequence's or
// the cache's data.
inline bool EligibleVictim(const PoolState& p, BlockSlot id) {
  if (p.block(id).state.load(std::memory_order_relaxed) != 0) return false;
  const std::uint8_t st =
      p.span(static_cast<std::uint32_t>(id / p.bps)).state.load(std::memory_order_relaxed);
  return st == kInUse || st == kCached;
}

// How many of `wanted` blocks background demotion may move now (a token bucket of
// demotion_mbps with at most one second of burst).
std::size_t RateLimitedBlocks(PoolState& p, std::size_t wanted) {
  if (p.options.demotion_mbps <= 0) return wanted;
  std::lock_guard lock(p.rate_mu);
  const auto now = std::chrono::steady_clock::now();
  const double bytes_per_s = p.options.demotion_mbps * 1e6;
  p.rate_allowance = std::min(
      bytes_per_s,  // at most one second of burst
      p.rate_allowance + bytes_per_s * std::chrono::duration<double>(now - p.rate_last).count());
  p.rate_last = now;
  const auto allowed = static_cast<std::size_t>(p.rate_allowance / p.layout.block_bytes);
  const std::size_t n = std::min(wanted, allowed);
  p.rate_allowance -= static_cast<double>(n * p.layout.block_bytes);
  return n;
}

}  // namespace

std::size_t DemoteFrom(PoolState& p, HomeNode& home, std::size_t count, KvUrgency urgency) {
  if (p.cold.empty() || count == 0) return 0;
  if (urgency == KvUrgency::kBackground) count = RateLimitedBlocks(p, count);
  if (count == 0) return 0;
  std::vector<std::uint32_t> victims, claimed;
  {
    std::lock_guard lock(home.list_mu);
    home.policy->SelectVictims(
        home.list, count, [&p](std::uint32_t id) { return EligibleVictim(p, id); }, victims);
    for (std::uint32_t id : victims) {
      std::uint32_t expected = 0;
      if (!p.block(id).state.compare_exchange_strong(expected, kMigrating,
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
    BlockMeta& b = p.block(claimed[i]);
    int cold_node = -1;
    Slot slot = AllocateCold(p, &cold_node, nullptr);
    if (!slot) {  // cold tier full: put the rest back
      std::lock_guard lock(home.list_mu);
      for (std::size_t j = i; j < claimed.size(); ++j) {
        home.list.PushBack(claimed[j]);
        home.policy->OnInsert(home.list, claimed[j]);
        p.block(claimed[j]).state.store(0, std::memory_order_release);
      }
      break;
    }
    std::memcpy(slot.data, b.data.load(std::memory_order_relaxed), p.layout.block_bytes);
    Slot old{b.data.load(std::memory_order_relaxed), b.slab.load(std::memory_order_relaxed)};
    SetPlacement(b, slot, KvTier::kCold, cold_node);
    b.state.store(0, std::memory_order_release);
    home.hot->Free(old);
    ++moved;
  }
  if (moved > 0) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    p.demotions.fetch_add(moved, std::memory_order_relaxed);
    p.bytes_demoted.fetch_add(moved * p.layout.block_bytes, std::memory_order_relaxed);
    p.demotion_ns.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
  }
  return moved;
}

}  // namespace kv

// ---- KvPool: tiering -----------------------------------------------------------------

std::size_t KvPool::Reclaim(int node, std::size_t bytes, KvUrgency urgency) {
  PoolState& p = *impl_;
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
    const std::uint32_t s = kv::TakeFreeSpanOn(p, node);
    if (s == kNil) break;
    kv::DropAndPark(p, s, node);
  }
  // Demote hot blocks (a home node with a cold tier).
  while (home != nullptr && released() < bytes) {
    const std::size_t want = std::max<std::size_t>(
        1, (bytes - released() + p.layout.block_bytes - 1) / p.layout.block_bytes);
    if (kv::DemoteFrom(p, *home, std::min<std::size_t>(want, 64), urgency) == 0) break;
  }
  // Still short: drop unreferenced cached prefix spans that have memory here, least
  // recently released first. Background reclaim of a home node with a cold tier leaves them
  // to rate-limited demotion, which keeps their data.
  const bool may_evict = urgency == KvUrgency::kUrgent || home == nullptr || p.cold.empty();
  while (may_evict && released() < bytes) {
    const std::uint32_t s = kv::EvictCached(p, node);
    if (s == kNil) break;
    kv::DropAndPark(p, s, node);
  }
  return released();
}

std::size_t KvPool::Demote(int node, std::size_t max_blocks, KvUrgency urgency) {
  HomeNode* home = impl_->home_of(node);
  if (home == nullptr) return 0;
  return kv::DemoteFrom(*impl_, *home, max_blocks, urgency);
}

Status KvPool::DemoteBlock(KvBlockId block) {
  PoolState& p = *impl_;
  if (Status st = p.CheckExists(block); !st.ok()) return st;
  const BlockSlot id = PoolState::SlotOf(block);
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
    if (!kv::EligibleVictim(p, id)) {
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
  kv::Slot slot = kv::AllocateCold(p, &cold_node, &why);
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
  kv::SetPlacement(b, slot, KvTier::kCold, cold_node);
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
  PoolState& p = *impl_;
  if (Status st = p.CheckExists(block); !st.ok()) return st;
  const BlockSlot id = PoolState::SlotOf(block);
  BlockMeta& b = p.block(id);
  std::uint32_t expected = 0;
  if (!b.state.compare_exchange_strong(expected, kMigrating, std::memory_order_acquire)) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV pool: block ", block, " is pinned or being moved"));
  }
  // Checked with the block claimed, as Pin does, so a span being evicted is not promoted.
  Status result;
  if (!kv::Pinnable(p, static_cast<std::uint32_t>(id / p.bps))) {
    result = absl::FailedPreconditionError(
        absl::StrCat("KV pool: block ", block, " belongs to no sequence or cache"));
  } else if (!p.Current(block)) {
    result = p.Stale(block);
  } else if (b.tier.load(std::memory_order_relaxed) != static_cast<std::uint8_t>(KvTier::kCold)) {
    result = absl::FailedPreconditionError(
        absl::StrCat("KV pool: block ", block, " is not in the cold tier"));
  } else if (!kv::TryPromoteLocked(p, id, b)) {
    result = absl::ResourceExhaustedError(absl::StrCat(
        "KV pool: no room in the hot tier of node ", p.HomeNodeOfBlock(id), " for block ", block));
  }
  b.state.store(0, std::memory_order_release);
  return result;
}

}  // namespace numarena
