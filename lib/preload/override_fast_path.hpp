// The malloc override's fast paths: malloc and operator new pop from the calling thread's front
// list, free and operator delete push onto it, and neither calls anything on the way.
//
// Why apart from Arena::allocate and numarena::deallocate, which do the same pop and push: the
// override wraps those in a reentrancy guard (numarena's own slow paths allocate, and those
// allocations must go to glibc), and a guard around code that may call out makes GCC save and
// restore the callee-saved registers on every call, hit or miss. A pop or a push cannot
// allocate, lock or report, so it needs no guard; done first, with no call in it, it is a leaf
// (measured with bench/override/count_instructions.py; bench/RESULTS.md, "Instruction
// counts"), and everything else (a miss, a first call, an aligned request, a full list) goes on
// to the guarded path exactly as before.
//
// Include order: numarena/arena.hpp, then os/current_node.hpp; used by preload.cpp only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "numarena/arena.hpp"
#include "numarena/internal/arena_fast_path.hpp"
#include "os/current_node.hpp"

namespace numarena::arena_internal {

// Where the calling thread's CPU id is, as an offset from the thread pointer: glibc's
// __rseq_offset plus the cpu_id field's 4, copied once by the override's Initialize() so that
// a --local malloc reads it with one load instead of two through the GOT; without rseq, the
// offset of t_no_rseq_cpu, which reads ~0u in every thread (a CPU no table knows), so the read
// needs no test first. 0 until Initialize() (no fast path runs before it).
[[gnu::visibility("hidden")]] inline std::ptrdiff_t rseq_cpu_id_offset = 0;
// Initial-exec like all of the preload's thread-locals (its build says so; named here because
// the offset above depends on it).
[[gnu::tls_model("initial-exec")]] inline thread_local constinit unsigned t_no_rseq_cpu = ~0u;

struct OverrideFastPath {
  // An object of at least `size` bytes, default alignment, popped from the calling thread's
  // front list of the heap `arena.allocate(size)` would use now, or nullptr when the pop alone
  // cannot serve it: a size the front cache does not hold, a Local arena whose thread's CPU is
  // not in the CPU-to-node table yet or whose node has no heap yet, no front cache yet, an
  // empty list. Never calls anything, so it neither allocates, locks nor sets an error.
  [[gnu::always_inline]] static void* TryPop(const Arena& arena, std::size_t size) noexcept {
    const std::size_t request = RequestSize(size, alignof(std::max_align_t));
    if (request - 1 >= Arena::kFastLimit) return nullptr;
    int heap;
    if (arena.has_fast_path_) {
      heap = arena.primary_heap_;
    } else if (arena.local_fast_path_) {
      heap = LocalHeap(arena);
      if (heap < 0) return nullptr;
    } else {
      return nullptr;
    }
    FrontCache* cache = front_caches[heap];
    if (cache == nullptr) return nullptr;
    return FrontPop(cache, ClassOfRequest(request));
  }

 private:
  // Arena::CurrentNodeHeap without its getcpu fallback: the heap of the calling thread's node
  // when the thread's rseq area names a CPU the table knows and that node has a heap, else -1
  // (the guarded path asks getcpu, and creates the heap).
  //
  // The thread's last answer is kept with the CPU it was for (t_local_heap), so a call on the
  // same CPU as the last one makes two dependent loads (the offset, then the CPU id through
  // %fs) and a compare before the front list, not six loads (the GOT's rseq offset, its value,
  // the thread pointer, the CPU id, the CPU-to-node table, the arena's heap of that node):
  // --local's malloc took 66 instructions to --membind's 44, and 5-15 % more time on most
  // programs. The cache is keyed by the CPU alone: every call passes the same arena, the
  // override's (preload.cpp), whose heaps are never destroyed; and it holds a heap only once
  // the node has one, so a hit needs no test of it.
  //
  // The heap is written before the CPU, with a signal fence between: a signal handler's malloc
  // that interrupts the update sees either the old CPU (and a heap of the old or the new
  // node: a placement a moment late at worst) or the new pair, never a CPU with no heap.
  [[gnu::always_inline]] static int LocalHeap(const Arena& arena) noexcept {
    using os::current_node_internal::cpu_node_plus_one;
    using os::current_node_internal::kTableCpus;
    const unsigned cpu = ThreadCpu();
    LocalHeapCache& cached = t_local_heap;
    if (__builtin_expect(cpu == cached.cpu, 1)) {
      const int heap = cached.heap;
      if (heap < 0) __builtin_unreachable();  // never read before a heap >= 0 was kept (below)
      return heap;
    }
    if (cpu >= kTableCpus) return -1;
    const unsigned node_plus_one = cpu_node_plus_one[cpu].load(std::memory_order_relaxed);
    if (node_plus_one == 0 || node_plus_one > static_cast<unsigned>(arena.node_heap_count_)) {
      return -1;
    }
    const int heap = arena.node_heaps_[node_plus_one - 1].load(std::memory_order_acquire);
    // Kept only once the node has a heap (heaps of a live arena are never destroyed), so a
    // node's first call still goes to the guarded path, which creates it. A CPU id the table
    // does not know (~0u: no rseq; -1 or -2 from glibc: rseq not or no longer registered)
    // never gets here, so never matches the cache.
    if (heap >= 0) {
      cached.heap = heap;
      std::atomic_signal_fence(std::memory_order_release);
      cached.cpu = cpu;
    }
    return heap;
  }

  // The CPU id in the calling thread's rseq area, or ~0u without one. On x86-64 one load
  // through %fs at the offset Initialize() copied (os::current_node_internal::RseqCpuId reads
  // glibc's offset through the GOT and adds the thread pointer: three).
  [[gnu::always_inline]] static unsigned ThreadCpu() noexcept {
#if defined(__x86_64__) && defined(NUMARENA_HAVE_GLIBC_RSEQ)
    unsigned cpu;
    // The kernel rewrites the field whenever it moves the thread: read it every call.
    asm volatile("movl %%fs:(%1), %0" : "=r"(cpu) : "r"(rseq_cpu_id_offset));
    return cpu;
#else
    return os::current_node_internal::RseqCpuId();
#endif
  }

  // The thread's last (CPU, heap). The CPU starts as kNoCachedCpu, which no rseq area holds (a
  // CPU id is below kTableCpus, and glibc writes -1 or -2 there when rseq is not registered),
  // so nothing matches it before a heap is kept.
  static constexpr unsigned kNoCachedCpu = 0x80000000u;
  struct LocalHeapCache {
    unsigned cpu;
    int heap;
  };
  static inline thread_local constinit LocalHeapCache t_local_heap{kNoCachedCpu, -1};
};

}  // namespace numarena::arena_internal
