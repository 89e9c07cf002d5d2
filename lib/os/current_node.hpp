// The node of the CPU the calling thread runs on, for the allocation fast paths of Local
// arenas (`numarena run --local`), which ask it on every malloc.
//
// Where glibc registered rseq for the thread (glibc 2.35 and later do it for every thread,
// unless GLIBC_TUNABLES=glibc.pthread.rseq=0 or the kernel or a sandbox refuses), the kernel
// writes the thread's CPU id into the thread's rseq area before the thread runs user code on a
// new CPU, so reading it is one load from thread-local memory: no system call, no vDSO call. A
// table maps the CPU id to its node. It fills itself: a CPU missing from it (never seen, or an
// id past its end) is asked of getcpu, which gives the CPU and its node together, and the pair
// is recorded. A CPU's node is the firmware's and stays while the CPU exists; a CPU that
// appears later by hotplug is simply not in the table yet.
//
// Without rseq (older glibc, valgrind, the tunable) every call goes to getcpu, as before.
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#include <sys/rseq.h>
#define NUMARENA_HAVE_GLIBC_RSEQ 1
#endif

namespace numarena::os {
namespace current_node_internal {

inline constexpr unsigned kTableCpus = 4096;
// CPU id -> 1 + its node; 0 while no getcpu on that CPU has said.
extern std::atomic<std::uint16_t> cpu_node_plus_one[kTableCpus];

// getcpu (through the vDSO), recording the CPU's node in the table; -1 if it fails.
int CurrentNodeSlow() noexcept;

// The CPU id in this thread's rseq area, or ~0u without one.
inline unsigned RseqCpuId() noexcept {
#ifdef NUMARENA_HAVE_GLIBC_RSEQ
  if (__rseq_size == 0) return ~0u;  // glibc could not register rseq for its threads
  const auto* area = reinterpret_cast<const volatile struct rseq*>(
      static_cast<const char*>(__builtin_thread_pointer()) + __rseq_offset);
  return area->cpu_id;  // RSEQ_CPU_ID_UNINITIALIZED (~0u) until the kernel has set it
#else
  return ~0u;
#endif
}

}  // namespace current_node_internal

// The node of the CPU the calling thread runs on; -1 if the kernel does not say.
inline int CurrentNodeFast() noexcept {
  using namespace current_node_internal;
  const unsigned cpu = RseqCpuId();
  if (cpu < kTableCpus) {
    if (const std::uint16_t known = cpu_node_plus_one[cpu].load(std::memory_order_relaxed)) {
      return known - 1;
    }
  }
  return CurrentNodeSlow();
}

}  // namespace numarena::os
