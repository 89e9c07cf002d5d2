// fork() from a busy multi-threaded parent (lib/os/fork.hpp). While threads allocate and
// free from several arenas, create arenas, start short-lived threads (each joins heap shards
// under the heap-creation lock), snapshot and refresh budgets and run reclaim hooks, the main
// thread forks 240 times. Every child must allocate from existing and new arenas, use both
// budgets (charges, snapshots, hooks and listeners), see its system budget's refresh thread
// come back, start a thread of its own, and exit; a child that does not finish within the
// timeout is killed and reported with the step it hung at.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "numarena/arena.hpp"
#include "numarena/budget.hpp"
#include "numarena/topology.hpp"

// TSan refuses to start threads in the child of a multi-threaded process unless told not to;
// the children here start one on purpose (and the budget restarts its refresh thread).
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_options() { return "die_after_fork=0"; }
#endif

// Not under ASan: GCC 12's AddressSanitizer runtime does not hold its own allocator's locks
// across fork(), so a child forked while a parent thread is inside ASan's malloc or free
// waits forever on that lock, in ASan's code, whatever the program does (seen here: a child's
// first free hung in __sanitizer::SizeClassAllocator64::GetFromAllocator, its new thread in
// the same lock). The plain build runs it (and a TSan build can: its runtime handles fork).
#if !defined(__SANITIZE_ADDRESS__)

namespace {

using numarena::Arena;
using numarena::Budget;
using numarena::BudgetMode;
using numarena::BudgetOptions;
using numarena::Policy;
using numarena::Priority;
using std::chrono::milliseconds;

constexpr std::size_t kMiB = std::size_t{1} << 20;
#if defined(__SANITIZE_THREAD__)
constexpr int kForks = 200;
#else
constexpr int kForks = 240;
#endif
// A deadlocked child never finishes; a slow one (a loaded CI machine running the lab's QEMU
// beside this test) can take seconds. The timeout only has to tell the two apart.
constexpr auto kChildTimeout = std::chrono::seconds(60);

// How far a child got; written to a shared page so the parent can name where a child hung.
enum Step : int {
  kNotStarted = 0,
  kStarted,
  kExistingArenas,
  kNewArena,
  kQuotaBudget,
  kCallbacks,
  kSystemBudget,
  kRefreshThread,
  kChildThread,
  kDone,
};
const char* StepName(int step) {
  static const char* const kNames[] = {
      "before its first step",
      "starting",
      "allocating from the parent's arenas",
      "creating a new arena",
      "using the quota budget",
      "adding and removing budget hooks and listeners",
      "charging and snapshotting the system budget",
      "waiting for the system budget's refresh thread",
      "running a thread of its own",
      "exiting",
  };
  return step >= 0 && step <= kDone ? kNames[step] : "?";
}

Arena* Get(const Policy& policy) {
  auto arena = Arena::ForPolicy(policy);
  INFO(arena.status().ToString());
  REQUIRE(arena.ok());
  return *arena;
}

// The child checks with exit codes: Catch2 does not report from a forked child.
[[noreturn]] void Fail(int step, const std::string& what) {
  std::fprintf(stderr, "fork child %d: %s: %s\n", static_cast<int>(getpid()), StepName(step),
               what.c_str());
  _exit(10 + step);
}

bool AllocateAndFree(Arena* arena, std::size_t size) {
  auto* p = static_cast<unsigned char*>(arena->allocate(size));
  if (p == nullptr) return false;
  std::memset(p, 0x5a, size);
  if (size % 2 == 0) {
    numarena::deallocate(p, size);
  } else {
    numarena::deallocate(p);
  }
  return true;
}

struct ChildContext {
  std::vector<Arena*> arenas;
  Budget* quota = nullptr;
  Budget* system = nullptr;
  std::uint64_t parent_hook = 0;
  std::atomic<int>* step = nullptr;
  int index = 0;
};

[[noreturn]] void RunChild(const ChildContext& c) {
  auto at = [&](Step s) { c.step->store(s, std::memory_order_relaxed); };
  at(kStarted);
  at(kExistingArenas);
  for (Arena* arena : c.arenas) {
    for (std::size_t size : {std::size_t{24}, std::size_t{333}, std::size_t{4096},
                             std::size_t{100'000}, 3 * kMiB}) {
      if (!AllocateAndFree(arena, size)) {
        Fail(kExistingArenas, absl::StrCat(arena->policy().ToString(), ": ", size, " bytes: ",
                                           numarena::last_allocation_error().ToString()));
      }
    }
  }

  at(kNewArena);
  // A policy no other process of the test made: chunks of (2000 + child) pages.
  auto fresh = Arena::ForPolicy(Policy::WeightedInterleave(
      {{0, 1}}, numarena::BindMode::kStrict, std::size_t(2000 + c.index) * 4096));
  if (!fresh.ok()) Fail(kNewArena, fresh.status().ToString());
  for (std::size_t size : {std::size_t{64}, std::size_t{70'000}, 5 * kMiB}) {
    if (!AllocateAndFree(*fresh, size)) {
      Fail(kNewArena, numarena::last_allocation_error().ToString());
    }
  }

  at(kQuotaBudget);
  {
    // The quota budget is the process's capacity gate: a fresh arena's commits charge it.
    std::uint64_t before = c.quota->usage(0);
    auto big = Arena::ForPolicy(Policy::WeightedInterleave(
        {{0, 2}}, numarena::BindMode::kStrict, std::size_t(2000 + c.index) * 4096));
    if (!big.ok()) Fail(kQuotaBudget, big.status().ToString());
    void* p = (*big)->allocate(8 * kMiB);
    if (p == nullptr) Fail(kQuotaBudget, numarena::last_allocation_error().ToString());
    std::memset(p, 1, 8 * kMiB);
    if (c.quota->usage(0) < before + 8 * kMiB) {
      Fail(kQuotaBudget, absl::StrCat("8 MiB in a new arena charged only ",
                                      c.quota->usage(0) - before, " bytes"));
    }
    numarena::deallocate(p);
    if (c.quota->Snapshot().nodes.size() != 1) Fail(kQuotaBudget, "snapshot has no node");
  }

  at(kCallbacks);
  {
    // The parent's hook ran on other threads; the child must be able to run and remove it.
    std::atomic<int> calls{0};
    std::uint64_t hook = c.quota->AddReclaimHook(
        Priority::kLow, "child", [&](int, std::size_t) -> numarena::StatusOr<std::size_t> {
          calls.fetch_add(1);
          return std::size_t{0};
        });
    std::uint64_t listener = c.quota->AddListener([](const numarena::BudgetEvent&) {});
    c.quota->Reclaim(0, 4096);
    if (calls.load() != 1) Fail(kCallbacks, "Reclaim in the child did not run the hooks");
    c.quota->RemoveListener(listener);
    c.quota->RemoveReclaimHook(hook);
    // Removing a hook waits for its calls in flight; the parent's threads that were running
    // it are not in the child.
    c.quota->RemoveReclaimHook(c.parent_hook);
    if (c.quota->Snapshot().hooks.size() != 0) Fail(kCallbacks, "hooks left after removal");
  }

  at(kSystemBudget);
  std::uint64_t refreshes = 0;
  {
    if (!c.system->Charge(0, kMiB, Priority::kHigh).ok()) Fail(kSystemBudget, "Charge refused");
    c.system->Release(0, kMiB, Priority::kHigh);
    (void)c.system->Admit(0, kMiB);
    refreshes = c.system->Snapshot().refreshes;
  }

  at(kRefreshThread);
  {
    // The parent's refresh thread did not survive fork(); the budget starts another.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (c.system->Snapshot().refreshes <= refreshes + 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        Fail(kRefreshThread, "the refresh thread did not come back within 10 s");
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
  }

  at(kChildThread);
  {
    bool ok = false;
    std::thread t([&] {
      ok = AllocateAndFree(c.arenas[c.index % c.arenas.size()], 512) &&
           AllocateAndFree(*fresh, 2 * kMiB);
    });
    t.join();
    if (!ok) Fail(kChildThread, "a thread started in the child could not allocate");
  }

  at(kDone);
  _exit(0);
}

}  // namespace

TEST_CASE("fork from a busy multi-threaded parent: every child allocates, creates arenas and "
          "uses its budgets") {
  BudgetOptions quota_options;
  quota_options.mode = BudgetMode::kQuota;
  quota_options.default_quota_bytes = std::uint64_t{16} << 30;
  auto quota = Budget::Create(quota_options, {0});
  REQUIRE(quota.ok());
  REQUIRE(numarena::InstallProcessBudget(quota->get()).ok());
  BudgetOptions system_options;
  system_options.mode = BudgetMode::kSystem;
  system_options.refresh_interval = milliseconds(1);
  auto system = Budget::Create(system_options, *numarena::Topology::system().value());
  REQUIRE(system.ok());

  ChildContext context;
  context.quota = quota->get();
  context.system = system->get();
  context.arenas = {Get(Policy::Bind(0)), Get(Policy::Bind(0, numarena::BindMode::kAdvisory)),
                    Get(Policy::Preferred(0)), Get(Policy::Local()),
                    Get(Policy::Interleave({0}))};
  REQUIRE(AllocateAndFree(context.arenas[0], 100));  // the forking thread has caches too

  // The parent's hook runs on the budget thread; children remove it.
  context.parent_hook = (*quota)->AddReclaimHook(Priority::kNormal, "parent",
                           [](int, std::size_t) -> numarena::StatusOr<std::size_t> {
                             std::this_thread::yield();
                             return std::size_t{0};
                           });

  auto* steps = static_cast<std::atomic<int>*>(mmap(nullptr, kForks * sizeof(std::atomic<int>),
                                                    PROT_READ | PROT_WRITE,
                                                    MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(steps != MAP_FAILED);

  std::atomic<bool> stop{false};
  std::atomic<long> parent_ops{0};
  std::vector<std::thread> load;
  for (int t = 0; t < 3; ++t) {  // allocate and free over every arena and many sizes
    load.emplace_back([&, t] {
      std::mt19937 rng(t);
      const std::size_t sizes[] = {16, 24, 200, 4000, 9000, 70'000, 600'000, 2 * kMiB};
      std::vector<std::pair<void*, std::size_t>> live;
      while (!stop.load(std::memory_order_relaxed)) {
        Arena* arena = context.arenas[rng() % context.arenas.size()];
        std::size_t size = sizes[rng() % std::size(sizes)];
        if (void* p = arena->allocate(size)) {
          static_cast<char*>(p)[0] = 1;
          live.emplace_back(p, size);
        }
        if (live.size() > 16 || (rng() % 3 == 0 && !live.empty())) {
          std::size_t i = rng() % live.size();
          numarena::deallocate(live[i].first, live[i].second);
          live[i] = live.back();
          live.pop_back();
        }
        // Purging runs the decommit hooks (budget releases) and keeps the parent small, so
        // each fork copies little.
        if (parent_ops.fetch_add(1, std::memory_order_relaxed) % 512 == 0) arena->purge();
      }
      for (auto [p, size] : live) numarena::deallocate(p, size);
    });
  }
  load.emplace_back([&] {  // short-lived threads: each joins heap shards and exits
    while (!stop.load(std::memory_order_relaxed)) {
      std::thread([&] {
        AllocateAndFree(context.arenas[1], 48);
        AllocateAndFree(context.arenas[4], 5000);
      }).join();
    }
  });
  load.emplace_back([&] {  // new arenas while the test runs
    for (int k = 1; k <= 16 && !stop.load(std::memory_order_relaxed); ++k) {
      auto arena = Arena::ForPolicy(Policy::WeightedInterleave(
          {{0, 1}}, numarena::BindMode::kStrict, std::size_t(k) * 4096));
      if (arena.ok()) AllocateAndFree(*arena, 1000);
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  load.emplace_back([&] {  // budgets: snapshots, refreshes, charges, reclaim hooks
    while (!stop.load(std::memory_order_relaxed)) {
      (void)(*system)->Snapshot();
      (void)(*system)->Refresh();
      if ((*system)->Charge(0, 4096, Priority::kHigh).ok()) {
        (*system)->Release(0, 4096, Priority::kHigh);
      }
      (void)(*quota)->Snapshot();
      (*quota)->Reclaim(0, 4096);
    }
  });

  std::mt19937 rng(42);
  int hung = 0;
  int failed = 0;
  std::string report;
  for (int i = 0; i < kForks; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    steps[i].store(kNotStarted);
    context.step = &steps[i];
    context.index = i;
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) RunChild(context);
    const auto deadline = std::chrono::steady_clock::now() + kChildTimeout;
    int status = 0;
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    if (done == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ++hung;
      std::string line = absl::StrCat("child ", i, " hung ", StepName(steps[i].load()), "\n");
      std::fputs(line.c_str(), stderr);  // now: a run with many hangs takes a while
      report += line;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed;
      std::string line = absl::StrCat("child ", i, " failed ", StepName(steps[i].load()),
                                      " (status ", status, ")\n");
      std::fputs(line.c_str(), stderr);
      report += line;
    }
  }
  stop.store(true);
  for (std::thread& t : load) t.join();
  munmap(steps, kForks * sizeof(std::atomic<int>));
  REQUIRE(numarena::InstallProcessBudget(nullptr).ok());

  INFO(report);
  CHECK(hung == 0);
  CHECK(failed == 0);
  CHECK(parent_ops.load() > 0);
}

#endif  // !defined(__SANITIZE_ADDRESS__)
