// KV hotness: which hot blocks are demoted first.
//
// Each home node keeps its hot blocks on an intrusive list (`HotList`, insertion order) and
// a `HotnessPolicy` that picks demotion victims from it. Recording an access must be cheap
// and lock-free because every pin does it, so `Touch` only writes relaxed atomics in the
// block's `HotMeta` (the access tick, a saturating access count, a reference bit); the
// policies read them when choosing victims, under the node's list lock.
//
// Choosing is bounded: LRU and 2Q look at ScanWindow(count) members from the front of the
// list and move them to the back, so the next search goes on where this one stopped. The
// list thus works as a clock over the hot blocks, and each search chooses exactly within its
// window: sampled LRU/2Q, exact when the list is no longer than the window. Only when a
// window holds too few eligible blocks (a run of pinned ones) does the search go on to the
// next, up to once round the list. Before, every search read every hot block of the node
// under the node's lock, so under memory pressure (a demotion per allocation) allocating a
// span cost time in proportion to the pool. Policies:
//
//   LRU    smallest last-access tick first (ties: older on the list first).
//   CLOCK  a hand sweeps the list; a referenced block loses its bit and is passed over, an
//          unreferenced one is the victim (second chance, no ordering work at access time).
//   2Q     blocks accessed at most once since they became hot (A1in) leave in FIFO order
//          before blocks accessed again (Am, LRU) while A1in holds more than a quarter of
//          the list; a ghost list of recently demoted A1in blocks (A1out) marks a block
//          that comes back soon as frequent, so a scan cannot flush the working set.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "numarena/kv_types.hpp"

namespace numarena::kv {

inline constexpr std::uint32_t kNil = 0xffffffffu;

struct HotMeta {
  // Written lock-free by Touch (and reset when a block gets a new owner).
  std::atomic<std::uint64_t> last_access{0};
  std::atomic<std::uint64_t> entered{0};   // tick when it became hot or got a new owner
  std::atomic<std::uint32_t> accesses{0};  // saturates at 2: 2Q only asks "more than once?"
  std::atomic<bool> referenced{false};
  // Guarded by the node's list lock.
  bool frequent = false;  // 2Q: came back from the ghost list
  std::uint32_t prev = kNil;
  std::uint32_t next = kNil;
};

inline void Touch(HotMeta& meta, std::uint64_t tick) {
  meta.last_access.store(tick, std::memory_order_relaxed);
  if (meta.accesses.load(std::memory_order_relaxed) < 2)
    meta.accesses.fetch_add(1, std::memory_order_relaxed);
  if (!meta.referenced.load(std::memory_order_relaxed))
    meta.referenced.store(true, std::memory_order_relaxed);
}

// Fresh hotness for a block that just became hot or got a new owner.
inline void ResetHotness(HotMeta& meta, std::uint64_t tick) {
  meta.last_access.store(tick, std::memory_order_relaxed);
  meta.entered.store(tick, std::memory_order_relaxed);
  meta.accesses.store(0, std::memory_order_relaxed);
  meta.referenced.store(false, std::memory_order_relaxed);
}

using MetaAccessor = std::function<HotMeta&(std::uint32_t)>;

// Intrusive doubly linked list of block ids (links live in HotMeta). Not thread-safe.
class HotList {
 public:
  explicit HotList(MetaAccessor meta) : meta_(std::move(meta)) {}
  void PushBack(std::uint32_t id);
  void Remove(std::uint32_t id);
  std::uint32_t front() const { return head_; }
  void MoveToBack(std::uint32_t id) {
    Remove(id);
    PushBack(id);
  }
  std::uint32_t next(std::uint32_t id) const { return meta_(id).next; }
  std::size_t size() const { return size_; }
  HotMeta& meta(std::uint32_t id) const { return meta_(id); }

 private:
  MetaAccessor meta_;
  std::uint32_t head_ = kNil;
  std::uint32_t tail_ = kNil;
  std::size_t size_ = 0;
};

class HotnessPolicy {
 public:
  virtual ~HotnessPolicy() = default;
  // Called under the list lock after `id` joined / before it leaves the list. `demoted`
  // tells a demotion from other removals (the span's memory was dropped).
  virtual void OnInsert(const HotList& list, std::uint32_t id) = 0;
  virtual void OnRemove(const HotList& list, std::uint32_t id, bool demoted) = 0;
  // Appends up to `count` victims, in demotion order, among list members for which
  // `eligible` is true (not pinned, holding data). Does not remove them, but may reorder the
  // list (see the top of this file).
  virtual void SelectVictims(HotList& list, std::size_t count,
                             const std::function<bool(std::uint32_t)>& eligible,
                             std::vector<std::uint32_t>& out) = 0;
};

std::unique_ptr<HotnessPolicy> MakeHotnessPolicy(KvHotnessPolicy kind);

// How many list members LRU and 2Q look at to choose `count` victims.
constexpr std::size_t ScanWindow(std::size_t count) { return count * 8 < 256 ? 256 : count * 8; }

}  // namespace numarena::kv
