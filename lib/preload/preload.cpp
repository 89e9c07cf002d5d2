// libnumarena_preload.so: numarena as the malloc of a program that was never built against it.
//
//   LD_PRELOAD=/path/libnumarena_preload.so NUMARENA_POLICY='bind(1)' ./server
//   numarena run --membind 1 -- ./server          (sets both, see tools/numarena/run.cpp)
//
// The C allocation functions (malloc, free, calloc, realloc, memalign, posix_memalign,
// aligned_alloc, valloc, pvalloc, malloc_usable_size, malloc_trim) and every operator new/delete
// are defined here (and mlock, mlock2 and mlockall, which only tell the page moves), so the
// dynamic linker binds the program's and its libraries' calls (glibc's own internal ones too)
// to them. They allocate from one numarena arena, the arena of the
// policy in NUMARENA_POLICY (Policy::Parse syntax; "local" when unset: with the Local policy
// each call uses the heap of the node of the CPU the calling thread runs on). NUMARENA_BUDGET
// ("system" or "quota:SIZE") installs a process budget, so that a full node makes malloc
// return NULL with errno ENOMEM, and new throw std::bad_alloc, instead of the kernel
// OOM-killing the process when the pages are touched.
//
// What does not come from the arena goes to glibc's allocator (__libc_malloc & co., which
// glibc exports for exactly this):
//   - calls before the library is initialised (the dynamic linker and the constructors of
//     libraries initialised before this one), and calls from other threads while it is;
//   - calls made by numarena's own code (and Abseil's, libstdc++'s) while a thread is inside
//     numarena: numarena allocates while it holds its locks (creating arenas, formatting an
//     error, reading the topology), and sending those calls back into numarena would deadlock
//     or recurse. A per-thread depth counter says when a thread is inside;
//   - calls from a thread's last destructors (pthread keys that run after jemalloc's own),
//     which no arena can serve any more (the arena refuses them with Unavailable).
// free, realloc and malloc_usable_size ask numarena whether it owns the pointer (an O(1)
// lookup in its address-range table, no system call) and hand every other pointer to glibc,
// so memory glibc handed out before or around the override is freed by glibc.
//
// Initialisation runs in this library's constructor, after the C library's and those of the
// libstdc++ linked into it: numarena's C++ code needs them. (The Abseil linked into this library
// is constant-initialised: its objects' only constructors are <iostream>'s ios_base::Init,
// so their order beside this one does not matter.) A bad NUMARENA_POLICY or
// NUMARENA_BUDGET, or an arena the kernel refuses, ends the process there with a message
// ("numarena preload: ...") and exit status 127: running the program with its memory in
// the wrong place would hide the mistake. `numarena run` checks both before it starts the
// program, so under it these messages come from the launcher instead.
//
// NUMARENA_RETURN_IDLE_MS=D (default 1000; 0 turns it off): freed memory that nobody reuses
// for D milliseconds goes back to the kernel, by a thread of numarena's started at the first
// large free or cache overflow (ArenaOptions::return_idle_ms; docs/run.md, "Memory return").
//
// NUMARENA_HUGE_PAGES=1 asks for transparent huge pages on blocks of 2 MiB and more, as a
// linked arena does; unset or 0, the override asks for none, like the allocators it replaces
// (ArenaOptions::transparent_huge_pages says why).
//
// NUMARENA_METRICS_PORT=P (or a range P-Q) starts a thread that serves numarena's metrics
// (Prometheus text) at http://127.0.0.1:P/metrics (NUMARENA_METRICS_LISTEN changes the
// address); preload_metrics.hpp says how.
//
// fork: numarena's and jemalloc's pthread_atfork handlers keep the child's heap usable, and a
// child of a process that serves metrics serves its own, on the next free port of the range,
// from its first allocation on (AfterForkInChild says what runs in the child and when). exec:
// the environment (LD_PRELOAD, NUMARENA_POLICY, NUMARENA_BUDGET, NUMARENA_METRICS_PORT)
// carries the override on.
//
// The library is for LD_PRELOAD only (its thread-local depth counter uses initial-exec TLS,
// which a library loaded later with dlopen may not get); load libnumarena.so for the C API.
#include <dlfcn.h>
#include <malloc.h>
#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "numarena/excerpt.hpp"
#include "numarena/address_space.hpp"
#include "numarena/arena.hpp"
#include "numarena/numarena.h"
#include "numarena/policy.hpp"
#include "numarena/topology.hpp"
#include "alloc/large_growth.hpp"
#include "alloc/node_pages.hpp"
#include "preload/override_fast_path.hpp"
#include "preload/preload_metrics.hpp"

// numarena's headers include the private jemalloc's header, which (JEMALLOC_MANGLE) maps these
// names to nje_*; here they are the C library's names this file defines.
#undef malloc
#undef free
#undef calloc
#undef realloc
#undef memalign
#undef aligned_alloc
#undef posix_memalign
#undef valloc
#undef malloc_usable_size

extern "C" {
// glibc's allocator under its own names (exported by libc.so.6 since glibc 2.2.5).
void* __libc_malloc(std::size_t size);
void __libc_free(void* ptr);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* ptr, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
}

namespace numarena::preload {
namespace {

// kForkedChild: in the child of a fork() whose metrics server is still to be restarted
// (AfterForkInChild); its first allocation restarts it and makes the state kReady again.
enum State : int { kNotYet = 0, kInitializing = 1, kReady = 2, kForkedChild = 3 };
std::atomic<int> g_state{kNotYet};
Arena* g_arena = nullptr;  // written once before g_state becomes kReady
using UsableSizeFunction = std::size_t (*)(void*);
UsableSizeFunction g_libc_usable_size = nullptr;
// Whether the C library's own aligned_alloc takes any alignment, as memalign does (glibc before
// 2.38, Debian 12's 2.36 among them), or refuses one that is not a power of two with EINVAL
// (glibc 2.38 on). Asked of the C library once, at start-up: a drop-in answers as it would.
bool g_lenient_aligned_alloc = true;

// > 0 while this thread runs numarena's code (or initialises it): its allocations go to glibc.
__attribute__((tls_model("initial-exec"))) thread_local int t_depth = 0;

struct Inside {
  Inside() { ++t_depth; }
  ~Inside() { --t_depth; }
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
};

bool ResumeInForkedChild();

// True when this call may use the arena.
inline bool UseArena() {
  if (__builtin_expect(t_depth == 0 && g_state.load(std::memory_order_acquire) == kReady, 1)) {
    return true;
  }
  return ResumeInForkedChild();
}

constexpr std::size_t kMinAlign = alignof(std::max_align_t);

// glibc's page size for valloc/pvalloc; sysconf does not allocate.
std::size_t PageSize() {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// The rounding glibc applies to memalign's alignment: up to a power of two, at least kMinAlign.
std::size_t RoundAlignment(std::size_t alignment) {
  if (alignment <= kMinAlign) return kMinAlign;
  if ((alignment & (alignment - 1)) == 0) return alignment;
  if (alignment > (SIZE_MAX >> 1) + 1) return 0;
  return std::size_t{1} << (64 - __builtin_clzl(alignment));
}

// Refused by the arena: Unavailable means the calling thread is in its last destructors, after
// jemalloc released its state, where no arena can serve it; glibc can, and free hands the
// block back to glibc. Anything else is ENOMEM (the reason is in last_allocation_error()).
[[gnu::noinline, gnu::cold]] void* AfterArenaRefused(std::size_t size, std::size_t alignment) {
  bool thread_exiting;
  {
    Inside inside;  // the Status's message is allocated by glibc
    thread_exiting = absl::IsUnavailable(numarena::last_allocation_error());
  }
  if (thread_exiting) {
    return alignment <= kMinAlign ? __libc_malloc(size) : __libc_memalign(alignment, size);
  }
  errno = ENOMEM;
  return nullptr;
}

// From the arena; nullptr with errno ENOMEM when it refuses.
inline void* ArenaAllocate(std::size_t size, std::size_t alignment) {
  void* p;
  {
    Inside inside;
    p = g_arena->allocate(size, alignment);
  }
  if (__builtin_expect(p == nullptr, 0)) return AfterArenaRefused(size, alignment);
  return p;
}

inline void* Allocate(std::size_t size, std::size_t alignment) {
  if (UseArena()) return ArenaAllocate(size, alignment);
  return alignment <= kMinAlign ? __libc_malloc(size) : __libc_memalign(alignment, size);
}

// malloc's and operator new's first try: a pop from the thread's front list, outside the
// reentrancy guard and with no call (override_fast_path.hpp says why); nullptr: take the
// guarded path.
[[gnu::always_inline]] inline void* TryAllocateFast(std::size_t size) {
  if (t_depth != 0 || g_state.load(std::memory_order_acquire) != kReady) return nullptr;
  return arena_internal::OverrideFastPath::TryPop(*g_arena, size);
}

// malloc after TryAllocateFast: out of line, so that malloc's fast path saves no registers.
[[gnu::noinline]] void* MallocSlow(std::size_t size) { return Allocate(size, kMinAlign); }

// A numarena object that the front list did not take (or a free from inside numarena): the
// guarded path. Out of line, for the same reason.
[[gnu::noinline]] void FreeToHeap(int heap, void* p) {
  Inside inside;
  arena_internal::DeallocateFromHeap(heap, p);
}

inline void Free(void* p) {
  if (p == nullptr) return;
  // The ownership test is the heap lookup: it is done once, not again inside deallocate.
  const int heap = arena_internal::HeapOf(p);
  if (heap >= 0) {
    // The push alone first, unguarded (it calls nothing); only outside numarena's own code,
    // which may be in the middle of this thread's lists.
    if (t_depth == 0 && arena_internal::TryFreeToFrontList(heap, p)) return;
    FreeToHeap(heap, p);
    return;
  }
  __libc_free(p);
}

void* Reallocate(void* p, std::size_t size) {
  if (p == nullptr) return Allocate(size, kMinAlign);
  if (!owns(p)) return __libc_realloc(p, size);
  if (size == 0) {  // glibc's behaviour: free and return NULL
    Free(p);
    return nullptr;
  }
  std::size_t usable = arena_internal::RecordedUsableSize(p);
  if (usable == 0) {
    Inside inside;
    usable = usable_size(p);
  }
  // In place when it fits without wasting more than half of the block, or when a large block
  // can grow where it lies (the space after it free): nothing copied, and its pages are not
  // held beside a copy's (a server's request buffer that doubles, Python's bytearray +=).
  if (size <= usable && size >= usable / 2) return p;
  if (size > usable && usable >= arena_internal::kLargeAlignThreshold) {
    Inside inside;
    if (GrowLargeInPlace(arena_internal::HeapOf(p), p, usable, size)) return p;
  }
  void* fresh = Allocate(size, kMinAlign);
  if (fresh == nullptr) return nullptr;  // errno set; p untouched, as realloc promises
  // A large block that could not grow: its pages move into the new one (mremap, as glibc's
  // realloc of an mmap()ed block does), not copied.
  if (size > usable && usable >= arena_internal::kLargeAlignThreshold) {
    LargeMove move;
    {
      Inside inside;
      move = MoveLargePages(arena_internal::HeapOf(p), p, usable, fresh);
    }
    switch (move) {
      case LargeMove::kMoved:
        break;  // p holds zero pages now: freed below
      case LargeMove::kLost:
        return fresh;
      case LargeMove::kToLost:  // `fresh` is lost: copy into another block
        fresh = Allocate(size, kMinAlign);
        if (fresh == nullptr) return nullptr;
        std::memcpy(fresh, p, usable);
        break;
      case LargeMove::kNotMoved:
        std::memcpy(fresh, p, usable);
        break;
    }
  } else {
    std::memcpy(fresh, p, size < usable ? size : usable);
  }
  if (size > usable) {
    // Outgrown: a medium block goes back to jemalloc, which can carve the next step of the
    // growth from it, not into this thread's list of its size (arena_fast_path.hpp).
    Inside inside;
    if (arena_internal::FreeOutgrown(arena_internal::HeapOf(p), p)) return fresh;
  }
  Free(p);
  return fresh;
}

std::size_t UsableSize(void* p) {
  if (p == nullptr) return 0;
  if (owns(p)) {
    // From the class map, unguarded (a load or two, no call): programs that count their
    // memory call this on every malloc and free (redis's zmalloc), and jemalloc's lookup
    // behind the guard was 3 % of redis's time.
    if (const std::size_t bytes = arena_internal::RecordedUsableSize(p)) return bytes;
    Inside inside;
    return usable_size(p);
  }
  return g_libc_usable_size != nullptr ? g_libc_usable_size(p) : 0;
}

[[noreturn]] void Die(const std::string& message) {
  std::string line = "numarena preload: " + message + "\n";
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  _exit(127);
}

// Freed memory nobody reuses for this long goes back to the kernel, without calls
// (ArenaOptions::return_idle_ms; NUMARENA_RETURN_IDLE_MS overrides, 0 turns it off).
constexpr std::int64_t kDefaultReturnIdleMs = 1000;

// NUMARENA_RETURN_IDLE_MS: decimal milliseconds, 0 to ArenaOptions::kMaxReturnIdleMs. Returns
// what is wrong, or "".
std::string ParseReturnIdleMs(const char* text, std::int64_t* out) {
  std::int64_t value = 0;
  for (const char* c = text; *c != '\0' && value <= ArenaOptions::kMaxReturnIdleMs; ++c) {
    value = *c >= '0' && *c <= '9' ? value * 10 + (*c - '0') : -1;
    if (value < 0) break;
  }
  if (value < 0 || value > ArenaOptions::kMaxReturnIdleMs) {
    return "expected milliseconds, 0 (keep freed memory for reuse) to " +
           std::to_string(ArenaOptions::kMaxReturnIdleMs);
  }
  *out = value;
  return "";
}

// malloc_trim(pad): glibc's trims only glibc's heap, which under the override holds little
// (what numarena's own code and the first calls allocated), while what the program freed sits
// in numarena's caches and jemalloc's dirty pages. So: the calling thread's front caches, the
// heaps' shared caches and every dirty page of the arena go back to the kernel
// (Arena::purge; other threads' own front caches stay, as they do for Arena::purge), then
// glibc's malloc_trim runs on its heap. 1 when either released memory, as glibc answers.
int Trim(std::size_t pad) {
  using TrimFunction = int (*)(std::size_t);
  static const auto libc_trim = reinterpret_cast<TrimFunction>(dlsym(RTLD_NEXT, "malloc_trim"));
  int released = 0;
  if (UseArena()) {
    Inside inside;
    const std::size_t before = g_arena->stats().committed;
    g_arena->purge();
    released = g_arena->stats().committed < before ? 1 : 0;
  }
  if (libc_trim != nullptr && libc_trim(pad) != 0) released = 1;
  return released;
}

// The metrics thread's allocations go to glibc for its whole life (preload_metrics.hpp).
void MarkThreadInside() { ++t_depth; }

// The atfork child handler, registered after numarena's and jemalloc's own (so it runs after
// them, when the child's heap is usable again). Inside fork() it does only what is
// async-signal-safe: close() of the child's copies of the parent's metrics sockets and an
// atomic store. The restart itself (socket, bind, listen, pthread_create, allocations) waits
// for the child's first allocation call, in ResumeInForkedChild: normally the child's own code
// after fork() returned (an atfork child handler of another library registered after this one
// that allocates would be the first instead). A child that only execs (as it should after a
// fork in a threaded program) allocates nothing before exec and starts nothing.
void AfterForkInChild() {
  if (g_state.load(std::memory_order_relaxed) == kReady && AbandonMetricsInForkedChild()) {
    g_state.store(kForkedChild, std::memory_order_release);
  }
}

// A call UseArena() did not let through: in a forked child still to restart its metrics, the
// first call that is not inside numarena restarts them, then uses the arena.
[[gnu::noinline]] bool ResumeInForkedChild() {
  if (t_depth != 0 || g_state.load(std::memory_order_acquire) != kForkedChild) return false;
  int expected = kForkedChild;
  if (g_state.compare_exchange_strong(expected, kReady, std::memory_order_acq_rel)) {
    Inside inside;  // its allocations (and those of the thread it starts) go to glibc
    RestartMetricsInForkedChild();
  }
  return g_state.load(std::memory_order_acquire) == kReady;
}

void Initialize() {
  int expected = kNotYet;
  if (!g_state.compare_exchange_strong(expected, kInitializing)) return;
  Inside inside;
  // glibc's allocator serves only what is listed at the top of this file (numarena's own
  // allocations while a thread is inside, mostly one per thread: the registration of its
  // thread_local destructors). By default glibc gives each new thread that allocates an arena
  // of its own, a 64 MiB reservation with its first 132 KiB committed and four system calls:
  // one arena for all of it is enough.
  mallopt(M_ARENA_MAX, 1);
  g_libc_usable_size = reinterpret_cast<UsableSizeFunction>(dlsym(RTLD_NEXT, "malloc_usable_size"));
  using AlignedAllocFunction = void* (*)(std::size_t, std::size_t);
  if (auto libc_aligned_alloc =
          reinterpret_cast<AlignedAllocFunction>(dlsym(RTLD_NEXT, "aligned_alloc"))) {
    const int saved = errno;
    void* probe = libc_aligned_alloc(24, 48);  // 24: not a power of two
    g_lenient_aligned_alloc = probe != nullptr;
    __libc_free(probe);
    errno = saved;
  }
  const char* policy_text = std::getenv("NUMARENA_POLICY");
  if (policy_text == nullptr || policy_text[0] == '\0') policy_text = "local";
  auto policy = Policy::Parse(policy_text);
  if (!policy.ok()) {
    Die(std::string("NUMARENA_POLICY='") + Excerpt(policy_text) +
        "': " + Excerpt(policy.status().message(), 1000));
  }
  if (const char* budget_spec = std::getenv("NUMARENA_BUDGET");
      budget_spec != nullptr && budget_spec[0] != '\0') {
    // Installed for the life of the process (never destroyed).
    numarena_budget* budget = numarena_budget_create(budget_spec);
    if (budget == nullptr) {
      Die(std::string("NUMARENA_BUDGET='") + Excerpt(budget_spec) +
          "': " + Excerpt(numarena_last_error_message(), 1000));
    }
    if (numarena_budget_install(budget) != NUMARENA_OK) {
      Die(std::string("NUMARENA_BUDGET='") + Excerpt(budget_spec) +
          "': " + Excerpt(numarena_last_error_message(), 1000));
    }
  }
  // A limit on the address space (ulimit -v) that numarena's reservations cannot fit under
  // is said now, in one line, rather than as allocations failing later without a word.
  if (auto topology = Topology::system(); topology.ok()) {
    const int node_count = static_cast<int>((*topology)->node_ids().size());
    if (Status room = CheckAddressSpaceLimitNow(ReservedAddressSpace(*policy, node_count),
                                                std::string("NUMARENA_POLICY='") +
                                                    policy->ToString() + "'");
        !room.ok()) {
      Die(std::string(room.message()));
    }
  }
  ArenaOptions options;
  options.return_idle_ms = kDefaultReturnIdleMs;
  if (const char* text = std::getenv("NUMARENA_RETURN_IDLE_MS"); text != nullptr && *text) {
    if (std::string problem = ParseReturnIdleMs(text, &options.return_idle_ms);
        !problem.empty()) {
      Die(std::string("NUMARENA_RETURN_IDLE_MS='") + Excerpt(text) + "': " + problem);
    }
  }
  // No transparent huge pages unless asked (ArenaOptions::transparent_huge_pages says why).
  options.transparent_huge_pages = false;
  if (const char* text = std::getenv("NUMARENA_HUGE_PAGES"); text != nullptr && *text) {
    if (std::strcmp(text, "0") != 0 && std::strcmp(text, "1") != 0) {
      Die(std::string("NUMARENA_HUGE_PAGES='") + Excerpt(text) +
          "': expected 1 (transparent huge pages for blocks of 2 MiB and more) or 0 (none)");
    }
    options.transparent_huge_pages = text[0] == '1';
  }
  auto arena = Arena::ForPolicy(*policy, options);
  if (!arena.ok()) {
    Die(std::string("NUMARENA_POLICY='") + Excerpt(policy_text) +
        "': " + Excerpt(arena.status().message(), 1000));
  }
  g_arena = *arena;
#if defined(__x86_64__) && defined(NUMARENA_HAVE_GLIBC_RSEQ)
  // The fast path's copy of where a thread's CPU id is (override_fast_path.hpp); 4: the
  // offset of struct rseq's cpu_id. Without rseq, where t_no_rseq_cpu is: the preload's
  // thread-locals are static TLS, at the same offset from every thread's pointer.
  if (__rseq_size != 0) {
    arena_internal::rseq_cpu_id_offset = __rseq_offset + 4;
  } else {
    std::uintptr_t thread_pointer;
    asm("movq %%fs:0, %0" : "=r"(thread_pointer));
    arena_internal::rseq_cpu_id_offset = static_cast<std::ptrdiff_t>(
        reinterpret_cast<std::uintptr_t>(&arena_internal::t_no_rseq_cpu) - thread_pointer);
  }
#endif
  g_state.store(kReady, std::memory_order_release);
  if (std::string problem = StartMetrics(g_arena, MarkThreadInside); !problem.empty()) {
    Die(problem);
  }
  if (int err = pthread_atfork(nullptr, nullptr, AfterForkInChild); err != 0) {
    const std::string line = std::string("numarena preload: pthread_atfork failed (") +
                             std::strerror(err) + "): a fork()ed child serves no metrics\n";
    ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
  }
}

__attribute__((constructor)) void InitializeOnLoad() { Initialize(); }

// The program's new_handler. This library carries a copy of libstdc++ of its own (linked
// statically and hidden, cmake/NumarenaPreload.cmake), whose std::get_new_handler() knows only
// handlers set through that copy; a program's std::set_new_handler() goes to the libstdc++
// the program loaded, so that one is asked: libstdc++.so.6 if the process has loaded it,
// globally or not (a Python extension's is loaded RTLD_LOCAL; the handle is kept, and
// libstdc++ is never unloaded anyway). A process without it (C, or C++ not loaded yet) cannot
// have set one: then this library's copy answers (nullptr).
std::new_handler ProgramNewHandler() {
  using Getter = std::new_handler (*)();
  static std::atomic<Getter> program_getter{nullptr};
  Getter getter = program_getter.load(std::memory_order_acquire);
  if (getter == nullptr) {
    void* libstdcxx = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (libstdcxx != nullptr) {
      getter = reinterpret_cast<Getter>(dlsym(libstdcxx, "_ZSt15get_new_handlerv"));
    }
    if (getter == nullptr) return std::get_new_handler();
    program_getter.store(getter, std::memory_order_release);
  }
  return getter();
}

// operator new: the standard's loop (call the new_handler until it gives up or throws).
// Out of line: operator new(size) tries TryAllocateFast first and tail-calls this.
[[gnu::noinline]] void* New(std::size_t size, std::size_t alignment) {
  for (;;) {
    if (void* p = Allocate(size, alignment)) return p;
    std::new_handler handler = ProgramNewHandler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

void* NewNoThrow(std::size_t size, std::size_t alignment) noexcept {
  try {
    return New(size, alignment);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace
}  // namespace numarena::preload

using numarena::preload::Allocate;
using numarena::preload::Free;
using numarena::preload::kMinAlign;
using numarena::preload::New;
using numarena::preload::NewNoThrow;

extern "C" {

__attribute__((visibility("default"))) void* malloc(size_t size) {
  if (void* p = numarena::preload::TryAllocateFast(size)) return p;
  return numarena::preload::MallocSlow(size);
}

__attribute__((visibility("default"))) void free(void* ptr) { Free(ptr); }

__attribute__((visibility("default"))) void* calloc(size_t count, size_t size) {
  std::size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (!numarena::preload::UseArena()) return __libc_calloc(count, size);
  void* p = numarena::preload::ArenaAllocate(bytes, kMinAlign);
  if (p != nullptr) std::memset(p, 0, bytes);
  return p;
}

__attribute__((visibility("default"))) void* realloc(void* ptr, size_t size) {
  return numarena::preload::Reallocate(ptr, size);
}

__attribute__((visibility("default"))) void* memalign(size_t alignment, size_t size) {
  alignment = numarena::preload::RoundAlignment(alignment);
  if (alignment == 0) {
    errno = EINVAL;
    return nullptr;
  }
  return Allocate(size, alignment);
}

__attribute__((visibility("default"))) void* aligned_alloc(size_t alignment, size_t size) {
  // As the C library under the override answers: before glibc 2.38, memalign's rounding (0
  // and small alignments are malloc's, others rise to a power of two); from 2.38, a power of
  // two or EINVAL (C17 drops the multiple-of-alignment rule).
  if (numarena::preload::g_lenient_aligned_alloc) return memalign(alignment, size);
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  return Allocate(size, alignment < kMinAlign ? kMinAlign : alignment);
}

__attribute__((visibility("default"))) int posix_memalign(void** out, size_t alignment,
                                                          size_t size) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  const int saved = errno;  // posix_memalign reports through its result, not errno
  void* p = Allocate(size, alignment < kMinAlign ? kMinAlign : alignment);
  errno = saved;
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}

__attribute__((visibility("default"))) void* valloc(size_t size) {
  return Allocate(size, numarena::preload::PageSize());
}

__attribute__((visibility("default"))) void* pvalloc(size_t size) {
  const std::size_t page = numarena::preload::PageSize();
  std::size_t rounded;
  if (__builtin_add_overflow(size, page - 1, &rounded)) {
    errno = ENOMEM;
    return nullptr;
  }
  rounded &= ~(page - 1);
  return Allocate(rounded == 0 ? page : rounded, page);
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void* ptr) {
  return numarena::preload::UsableSize(ptr);
}

__attribute__((visibility("default"))) int malloc_trim(size_t pad) {
  return numarena::preload::Trim(pad);
}

// mlock, mlock2 and mlockall: the C library's, as system calls (glibc's are nothing more;
// mlock2 falls back to mlock without flags on a kernel that lacks it, as glibc's does), and a
// lock that succeeds tells numarena's page moves at once (NoteProcessLockedMemory: a moved
// large block's range is mapped again rather than kept with MREMAP_DONTUNMAP, which would
// unlock the whole mapping around it), instead of at their next reading of VmLck.
__attribute__((visibility("default"))) int mlock(const void* addr, size_t len) {
  const long result = syscall(SYS_mlock, addr, len);
  if (result == 0) numarena::NoteProcessLockedMemory();
  return static_cast<int>(result);
}

__attribute__((visibility("default"))) int mlock2(const void* addr, size_t len, unsigned int flags) {
  long result = syscall(SYS_mlock2, addr, len, flags);
  if (result != 0 && errno == ENOSYS && flags == 0) result = syscall(SYS_mlock, addr, len);
  if (result == 0) numarena::NoteProcessLockedMemory();
  return static_cast<int>(result);
}

__attribute__((visibility("default"))) int mlockall(int flags) {
  const long result = syscall(SYS_mlockall, flags);
  if (result == 0) numarena::NoteProcessLockedMemory();
  return static_cast<int>(result);
}

}  // extern "C"

// operator new/delete, every form. The sized and aligned deletes free by address: a program
// that passes a size or alignment that does not match its new (a common bug that glibc
// tolerates) must not corrupt numarena's size-class lists.
#define NUMARENA_EXPORT __attribute__((visibility("default")))
NUMARENA_EXPORT void* operator new(std::size_t size) {
  if (void* p = numarena::preload::TryAllocateFast(size)) return p;
  return New(size, kMinAlign);
}
NUMARENA_EXPORT void* operator new[](std::size_t size) {
  if (void* p = numarena::preload::TryAllocateFast(size)) return p;
  return New(size, kMinAlign);
}
NUMARENA_EXPORT void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return NewNoThrow(size, kMinAlign);
}
NUMARENA_EXPORT void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return NewNoThrow(size, kMinAlign);
}
NUMARENA_EXPORT void* operator new(std::size_t size, std::align_val_t alignment) {
  return New(size, static_cast<std::size_t>(alignment));
}
NUMARENA_EXPORT void* operator new[](std::size_t size, std::align_val_t alignment) {
  return New(size, static_cast<std::size_t>(alignment));
}
NUMARENA_EXPORT void* operator new(std::size_t size, std::align_val_t alignment,
                                   const std::nothrow_t&) noexcept {
  return NewNoThrow(size, static_cast<std::size_t>(alignment));
}
NUMARENA_EXPORT void* operator new[](std::size_t size, std::align_val_t alignment,
                                     const std::nothrow_t&) noexcept {
  return NewNoThrow(size, static_cast<std::size_t>(alignment));
}
NUMARENA_EXPORT void operator delete(void* p) noexcept { Free(p); }
NUMARENA_EXPORT void operator delete[](void* p) noexcept { Free(p); }
NUMARENA_EXPORT void operator delete(void* p, std::size_t) noexcept { Free(p); }
NUMARENA_EXPORT void operator delete[](void* p, std::size_t) noexcept { Free(p); }
NUMARENA_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { Free(p); }
NUMARENA_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { Free(p); }
NUMARENA_EXPORT void operator delete(void* p, std::align_val_t) noexcept { Free(p); }
NUMARENA_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { Free(p); }
NUMARENA_EXPORT void operator delete(void* p, std::size_t, std::align_val_t) noexcept { Free(p); }
NUMARENA_EXPORT void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { Free(p); }
NUMARENA_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  Free(p);
}
NUMARENA_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  Free(p);
}
