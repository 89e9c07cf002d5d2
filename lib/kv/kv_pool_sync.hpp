// KV pool synchronisation primitives: the spin lock of sequences and free lists, per-thread
// slots for striping, and the striped free-id lists.
//
// False sharing. Neighbouring spans, sequences and free lists usually belong to different
// threads, so each sits on its own pair of cache lines (128 bytes: the adjacent-line
// prefetcher moves lines in pairs), and a sequence keeps its span list inline rather than
// in a small heap block that the allocator may pack next to another thread's. Sharing made
// two threads' allocate+free run at a quarter of one thread's speed each.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kv/kv_hotness.hpp"

namespace numarena::kv {

inline constexpr std::size_t kNoFalseSharing = 128;
inline constexpr std::size_t kFreeShards = 8;

// The lock of a free list and of a sequence. Both are almost never contended (a sequence
// is worked on by one decode thread at a time, a free list mostly by one thread), so what
// matters is the uncontended cost: unlock is a plain release store, where std::mutex pays a
// second locked instruction (allocate+free takes four sequence locks; the cost is in
// bench/RESULTS.md, "Code history"). A waiter spins a little, then yields, then sleeps 20 us at a time,
// because a sequence's holder may be mapping a slab or running a budget's reclaim.
class SpinLock {
 public:
  void lock() {
    if (!flag_.exchange(true, std::memory_order_acquire)) return;
    LockSlow();
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline]] void LockSlow();
  std::atomic<bool> flag_{false};
};

// A small number per live thread, for striping counters and free lists. Slots are recycled
// when a thread exits and a new thread takes the lowest free one, so live threads get
// distinct slots: with a counter that only grows, a new thread landed on a long-lived
// thread's stripe every 16 thread creations, and two threads pinning their own blocks then
// fought over one counter (bench/RESULTS.md, "Code history"). More live threads than 256
// get slots above that: striping only gets coarser.
std::size_t ThreadSlot();

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

}  // namespace numarena::kv
