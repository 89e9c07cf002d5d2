// The depot: freed objects shared by the threads of a heap, kept for reuse.
//
// A server frees a request's buffers, activations and tensors as a batch, often on another
// thread than the one that made them, and makes the next batch at the same sizes. A thread's
// front cache holds 256 KiB of medium objects and a few hundred objects per small class, so
// without the depot most of such a batch would go back to jemalloc one object at a time and
// come out again the same way, through the explicit-arena path and its extent bookkeeping.
// jemalloc keeps those pages resident for its decay time anyway; the depot keeps the objects
// themselves. A front cache that overflows
// hands the depot a chain of objects (half a list, or whole lists) in one call, and a front
// cache that misses takes a chain back and refills its list with it in O(1); so a batch moves
// between a thread and the depot a list at a time, and what a consumer thread frees is what
// its producer takes next.
//
// Placement: the depot is per heap, and the heap is the unit of placement, so an object only
// ever returns to the heap, and node, it came from, whichever thread frees or takes it.
//
// Layout: per heap and class, kSlots atomic words (each on a cache line of its own), each empty or
// holding one chain as its first object's address with the chain's length in the top 16 bits
// (numarena's objects lie below 2^47). The objects are linked through their first words, and the
// first object's second word holds the last one, so chains are joined and spliced into a list in
// O(1); hence classes from 16 B (kFirstDepotClass). Each front cache (thread) has a home slot
// (DepotNewHome: caches made one after another get different ones). Putting a chain CASes it into
// the home slot when that is empty, and otherwise takes the home slot's chain out, joins it, and
// tries again; taking exchanges the home slot with 0, and only when that is empty another slot
// (what other threads freed); what the taker's list has no room for goes back to the slot it came
// from. So a thread's surplus comes back to that thread first: two threads that each free and
// allocate one class (a list's balanced random walk between empty and full) would otherwise take
// each other's objects as often as their own, objects that lie between the other thread's in its
// shard's slabs (ArenaOptions::shards), sharing cache lines that then move between the CPUs at
// every write, and that go back at the end to the other shard's arena while the taker's allocated
// anew (random-small, two threads on two shards: about 20 % faster with homes). The price: while a
// put holds the home slot's chain to join it, a take finds the slot empty and asks jemalloc
// (slower, not wrong).
//
// Lock-free and free of ABA (a slot is only ever exchanged whole), so a fork() child finds the
// slots consistent whatever its parent's threads were doing, and a thread racing a put may miss and
// ask jemalloc, which is only slower. Bytes are counted per slot index (over all classes, one cache
// line each, so that threads with different homes write different lines); a count moves apart from
// its slots (a put counts its chain before it has a slot, a take uncounts after its exchange), so
// the child counts what its slots hold anew (DepotRecountInForkChild); a chain another thread held
// at the fork (since the homes, possibly a home slot's whole pile, taken out to be joined) stays in
// the child's memory, unused.
//
// Bounds. The objects stay live for jemalloc, committed, and charged to the capacity gate, like the
// front caches' and the large cache's, and count in ArenaStats::cached. The caller passes the byte
// bound with each put (front_cache.cpp: 128 MiB per heap without a capacity gate, 32 MiB with one,
// none while the gate presses a node of the heap, which also flushes the depot at its next put). A
// put whose home slot index holds less than its share of the bound (bound / kSlots) goes in without
// reading the other indexes' counts; past that the sum decides, so puts racing there may go over
// the bound by a chain each. A class that no thread took from during a whole second (kIdleNanos),
// and that no thread put to during the last second, goes back to jemalloc at the next put after
// that, so the depot lets go of sizes the server stopped using; chains put a moment ago are not
// returned by a sweep that happens to come right after them (a thread freeing a long batch keeps
// its class). Arena::purge() and the purge before a refusal for lack of room flush it.
#include "alloc/depot.hpp"

#include <jemalloc/jemalloc.h>

#include <atomic>

#include "alloc/heap_activity.hpp"
#include "base/clock.hpp"
#include "numarena/internal/arena_fast_path.hpp"

namespace numarena {
namespace {

using arena_internal::kFrontClasses;
using arena_internal::kMaxHeaps;

constexpr unsigned kClasses = kFrontClasses - kFirstDepotClass;
constexpr unsigned kSlots = 8;
constexpr std::uint32_t kMaxChain = 0xffff;  // the length field's 16 bits
constexpr unsigned kCountShift = 48;
constexpr std::int64_t kIdleNanos = 1'000'000'000;

// One slot per cache line: a slot is mostly one thread's home, and two threads' homes on one
// line would move that line between their CPUs at every put and take.
struct alignas(64) DepotSlot {
  std::atomic<std::uintptr_t> word;  // 0, or a chain (see above)
};

struct DepotClass {
  DepotSlot slots[kSlots];
};

// Bytes the chains of one slot index hold, over all classes, on a line of its own for the
// same reason: a put adds to its slot's count, a take subtracts from the slot it emptied.
struct alignas(64) SlotBytes {
  std::atomic<std::size_t> bytes;
};

struct Depot {
  DepotClass classes[kClasses];
  SlotBytes slot_bytes[kSlots];
  // The coarse clock at the last take, per class (to the millisecond: a take writes it only when
  // it moved on, so threads taking chains of one class do not all write the line). A clock, not
  // a flag that a sweep clears: the put-time sweep and the returner's pass sweep with different
  // rules, and a flag one of them cleared would make the other see a class in steady use idle.
  std::atomic<std::int64_t> last_take_ns[kClasses];
  std::atomic<std::int64_t> last_put_ns[kClasses];  // the coarse clock at the last put
  std::atomic<std::int64_t> sweep_after_ns;
};

// What the depot holds: the sum of its slots' counts.
std::size_t HeldBytes(const Depot& depot) {
  std::size_t sum = 0;
  for (const SlotBytes& slot : depot.slot_bytes) sum += slot.bytes.load(std::memory_order_relaxed);
  return sum;
}

// Zero-initialized: untouched, and not resident, for heaps that never overflow a front cache.
Depot g_depots[kMaxHeaps];

bool Valid(int heap, unsigned size_class) {
  return heap >= 0 && heap < kMaxHeaps && size_class >= kFirstDepotClass &&
         size_class < static_cast<unsigned>(kFrontClasses);
}

std::size_t ClassBytes(unsigned size_class) {
  return arena_internal::front_class_bytes[size_class];
}

void** Words(void* object) { return static_cast<void**>(object); }

// A chain as a slot's word; its tail goes in the first object's second word.
std::uintptr_t Pack(const ObjectChain& chain) {
  Words(chain.head)[1] = chain.tail;
  return reinterpret_cast<std::uintptr_t>(chain.head) |
         (std::uintptr_t{chain.count} << kCountShift);
}

ObjectChain Unpack(std::uintptr_t word) {
  void* head = reinterpret_cast<void*>(word & ((std::uintptr_t{1} << kCountShift) - 1));
  return ObjectChain{head, Words(head)[1], static_cast<std::uint32_t>(word >> kCountShift)};
}

// Frees the chain's objects to the jemalloc arena that owns them (any thread may).
void FreeChain(const ObjectChain& chain, std::size_t bytes) {
  void* p = chain.head;
  for (std::uint32_t i = 0; i < chain.count; ++i) {
    void* next = i + 1 < chain.count ? Words(p)[0] : nullptr;
    sdallocx(p, bytes, MALLOCX_TCACHE_NONE);
    p = next;
  }
}

std::size_t FlushClass(Depot& depot, unsigned size_class) {
  const std::size_t bytes = ClassBytes(size_class);
  std::size_t freed = 0;
  DepotClass& slots = depot.classes[size_class - kFirstDepotClass];
  for (unsigned i = 0; i < kSlots; ++i) {
    std::atomic<std::uintptr_t>& slot = slots.slots[i].word;
    if (slot.load(std::memory_order_relaxed) == 0) continue;
    if (const std::uintptr_t word = slot.exchange(0, std::memory_order_acquire)) {
      const ObjectChain chain = Unpack(word);
      depot.slot_bytes[i].bytes.fetch_sub(chain.count * bytes, std::memory_order_relaxed);
      FreeChain(chain, bytes);
      freed += chain.count * bytes;
    }
  }
  return freed;
}

// Classes nobody took from or put to for `idle_ns` go back to jemalloc; returns the bytes.
std::size_t Sweep(Depot& depot, std::int64_t now, std::int64_t idle_ns) {
  std::size_t freed = 0;
  for (unsigned c = kFirstDepotClass; c < static_cast<unsigned>(kFrontClasses); ++c) {
    const unsigned index = c - kFirstDepotClass;
    const bool taken_lately =
        now - depot.last_take_ns[index].load(std::memory_order_relaxed) < idle_ns;
    const bool put_lately =
        now - depot.last_put_ns[index].load(std::memory_order_relaxed) < idle_ns;
    if (!taken_lately && !put_lately) freed += FlushClass(depot, c);
  }
  return freed;
}

// Once a second at most (the first put after it), a sweep with a second's idle rule.
// Returns the clock it read.
std::int64_t MaybeSweep(Depot& depot) {
  const std::int64_t now = CoarseMonotonicNanos();  // a second's resolution is all a sweep needs
  std::int64_t due = depot.sweep_after_ns.load(std::memory_order_relaxed);
  if (now < due) return now;
  if (!depot.sweep_after_ns.compare_exchange_strong(due, now + kIdleNanos,
                                                    std::memory_order_relaxed)) {
    return now;  // another thread sweeps
  }
  Sweep(depot, now, kIdleNanos);
  return now;
}

// Puts `chain` (counted in the home slot's bytes) into an empty slot other than `home`, or
// frees it to jemalloc when every one is full. A slot's bytes count a chain from before the
// chain is in the slot until after it has left (so a count is never below what its slots hold).
void PutElsewhere(Depot& depot, DepotClass& slots, unsigned home, const ObjectChain& chain,
                  std::size_t bytes) {
  const std::uintptr_t word = Pack(chain);
  const std::size_t chain_bytes = chain.count * bytes;
  std::atomic<std::size_t>& home_bytes = depot.slot_bytes[home % kSlots].bytes;
  for (unsigned i = 1; i < kSlots; ++i) {
    const unsigned index = (home + i) % kSlots;
    std::atomic<std::uintptr_t>& slot = slots.slots[index].word;
    if (slot.load(std::memory_order_relaxed) != 0) continue;
    std::atomic<std::size_t>& slot_bytes = depot.slot_bytes[index].bytes;
    slot_bytes.fetch_add(chain_bytes, std::memory_order_relaxed);
    std::uintptr_t expected = 0;
    if (slot.compare_exchange_strong(expected, word, std::memory_order_release,
                                     std::memory_order_relaxed)) {
      home_bytes.fetch_sub(chain_bytes, std::memory_order_relaxed);
      return;
    }
    slot_bytes.fetch_sub(chain_bytes, std::memory_order_relaxed);
  }
  home_bytes.fetch_sub(chain_bytes, std::memory_order_relaxed);
  FreeChain(chain, bytes);
}

}  // namespace

unsigned DepotNewHome() noexcept {
  static std::atomic<unsigned> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void DepotPut(int heap, unsigned size_class, ObjectChain chain, std::size_t bound_bytes,
              unsigned home) noexcept {
  if (chain.count == 0) return;
  const std::size_t bytes = ClassBytes(size_class);
  if (!Valid(heap, size_class) || chain.count > kMaxChain) {
    FreeChain(chain, bytes);
    return;
  }
  Depot& depot = g_depots[heap];
  const std::int64_t now = MaybeSweep(depot);
  NoteHeapActivity(heap, now);  // kept here or freed to jemalloc below: memory to return later
  std::atomic<std::int64_t>& last_put = depot.last_put_ns[size_class - kFirstDepotClass];
  if (last_put.load(std::memory_order_relaxed) != now) {
    last_put.store(now, std::memory_order_relaxed);
  }
  if (bound_bytes == 0) {  // the gate presses the heap's node: nothing stays
    if (HeldBytes(depot) != 0) DepotFlush(heap);
    FreeChain(chain, bytes);
    return;
  }
  // The bound, checked against the home slot's count first: while that is within its share
  // (bound / kSlots), the whole depot is within the bound without reading the other slots'
  // counts, which other threads keep writing. Over its share the sum decides, so two puts
  // racing past that check may each fit alone and together go over by a chain.
  // count * bytes: a chain holds at most kMaxChain objects of at most 1.75 MiB.
  const std::size_t chain_bytes = chain.count * bytes;
  std::atomic<std::size_t>& home_bytes = depot.slot_bytes[home % kSlots].bytes;
  if (home_bytes.fetch_add(chain_bytes, std::memory_order_relaxed) + chain_bytes >
      bound_bytes / kSlots) {
    const std::size_t held = HeldBytes(depot);
    if (held > bound_bytes) {
      home_bytes.fetch_sub(chain_bytes, std::memory_order_relaxed);
      // Over the bound without this chain too: the bound shrank, so all of it goes.
      if (held - chain_bytes > bound_bytes) DepotFlush(heap);
      FreeChain(chain, bytes);
      return;
    }
  }
  DepotClass& slots = depot.classes[size_class - kFirstDepotClass];
  std::atomic<std::uintptr_t>& home_slot = slots.slots[home % kSlots].word;
  for (unsigned round = 0; round < kSlots; ++round) {
    std::uintptr_t expected = 0;
    if (home_slot.compare_exchange_strong(expected, Pack(chain), std::memory_order_release,
                                          std::memory_order_relaxed)) {
      return;
    }
    // The home slot holds a chain (most likely this thread's own): join it and try again.
    // When the two together are too long to describe, that one moves to another slot.
    if (const std::uintptr_t other = home_slot.exchange(0, std::memory_order_acquire)) {
      const ObjectChain absorbed = Unpack(other);
      // The depot holds free objects only: a chain that starts with the object being put is
      // that object freed twice, most likely in a row by one thread (an object above its
      // front cache's medium bound comes here alone, to its home slot, which caches whose
      // homes are equal modulo kSlots share). Only the head is compared: back-to-back frees,
      // what glibc's default catches, at the cost of one comparison here.
      if (absorbed.head == chain.head) [[unlikely]] {
        arena_internal::FrontDoubleFree(heap, size_class, chain.head, /*in_depot=*/true);
      }
      if (chain.count + absorbed.count > kMaxChain) {
        PutElsewhere(depot, slots, home, absorbed, bytes);
        continue;
      }
      Words(chain.tail)[0] = absorbed.head;
      chain.tail = absorbed.tail;
      chain.count += absorbed.count;
    }
  }
  // Other threads of the same home filled it again each time.
  PutElsewhere(depot, slots, home, chain, bytes);
}

ObjectChain DepotTake(int heap, unsigned size_class, unsigned home) noexcept {
  if (!Valid(heap, size_class)) return {};
  Depot& depot = g_depots[heap];
  DepotClass& slots = depot.classes[size_class - kFirstDepotClass];
  for (unsigned i = 0; i < kSlots; ++i) {
    const unsigned index = (home + i) % kSlots;
    std::atomic<std::uintptr_t>& slot = slots.slots[index].word;
    if (slot.load(std::memory_order_relaxed) == 0) continue;
    if (const std::uintptr_t word = slot.exchange(0, std::memory_order_acquire)) {
      ObjectChain chain = Unpack(word);
      chain.slot = index;
      depot.slot_bytes[index].bytes.fetch_sub(chain.count * ClassBytes(size_class),
                                              std::memory_order_relaxed);
      std::atomic<std::int64_t>& taken_ns = depot.last_take_ns[size_class - kFirstDepotClass];
      const std::int64_t now = CoarseMonotonicNanos();
      if (now - taken_ns.load(std::memory_order_relaxed) >= 1'000'000) {
        taken_ns.store(now, std::memory_order_relaxed);
      }
      return chain;
    }
  }
  return {};
}

std::size_t DepotFlush(int heap) noexcept {
  if (heap < 0 || heap >= kMaxHeaps) return 0;
  Depot& depot = g_depots[heap];
  if (HeldBytes(depot) == 0) return 0;
  std::size_t freed = 0;
  for (unsigned c = kFirstDepotClass; c < static_cast<unsigned>(kFrontClasses); ++c) {
    freed += FlushClass(depot, c);
  }
  return freed;
}

std::size_t DepotSweep(int heap, std::int64_t now_ns, std::int64_t idle_ns) noexcept {
  if (heap < 0 || heap >= kMaxHeaps) return 0;
  Depot& depot = g_depots[heap];
  if (HeldBytes(depot) == 0) return 0;
  return Sweep(depot, now_ns, idle_ns);
}

void DepotDrop(int heap) noexcept {
  if (heap < 0 || heap >= kMaxHeaps) return;
  Depot& depot = g_depots[heap];
  for (DepotClass& slots : depot.classes) {
    for (DepotSlot& slot : slots.slots) slot.word.store(0, std::memory_order_relaxed);
  }
  for (std::atomic<std::int64_t>& taken : depot.last_take_ns) {
    taken.store(0, std::memory_order_relaxed);
  }
  for (std::atomic<std::int64_t>& put : depot.last_put_ns) put.store(0, std::memory_order_relaxed);
  for (SlotBytes& slot : depot.slot_bytes) slot.bytes.store(0, std::memory_order_relaxed);
}

std::size_t DepotBytes(int heap) noexcept {
  if (heap < 0 || heap >= kMaxHeaps) return 0;
  return HeldBytes(g_depots[heap]);
}

void DepotRecountInForkChild() noexcept {
  for (Depot& depot : g_depots) {
    if (HeldBytes(depot) == 0) continue;  // then no slot is full
    for (unsigned i = 0; i < kSlots; ++i) {
      std::size_t bytes = 0;
      for (unsigned c = kFirstDepotClass; c < static_cast<unsigned>(kFrontClasses); ++c) {
        const std::uintptr_t word =
            depot.classes[c - kFirstDepotClass].slots[i].word.load(std::memory_order_relaxed);
        if (word != 0) bytes += Unpack(word).count * ClassBytes(c);
      }
      depot.slot_bytes[i].bytes.store(bytes, std::memory_order_relaxed);
    }
  }
}

}  // namespace numarena
