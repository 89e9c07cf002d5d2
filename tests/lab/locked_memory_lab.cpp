// lab-topologies: 2s
// lab-kernel-6.12: 2s
//
// Placement in a process that locked its memory (mlockall(MCL_CURRENT | MCL_FUTURE), as
// latency-sensitive servers do). There the kernel faults a range in as soon as it becomes
// writable, not at the first write, so numarena must bind a range before it makes it
// accessible: a range bound after its mprotect keeps the pages where they were faulted (the
// calling thread's node; mbind without MPOL_MF_MOVE moves nothing). Every page of an arena's
// objects, allocated from a thread on another node and never written, is asserted on the
// arena's node with move_pages; so is a large block after realloc moved its pages, and a block
// carved from the range it left, which is mapped again in the locked process (bound after it
// was writable, that block's pages were all on the thread's node, 2026-12-08).
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <vector>

#include "lab_support.hpp"
#include "numarena/arena.hpp"
#include "numarena/page_nodes.hpp"

namespace numarena {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Pages of [p, p + bytes) that are resident and not on `node`, and pages not resident.
struct Placement {
  std::size_t off_node = 0;
  std::size_t absent = 0;
};
Placement PlacementOf(const void* p, std::size_t bytes, int node) {
  Placement out;
  auto nodes = page_node_list(p, bytes);
  REQUIRE(nodes.ok());
  for (int n : *nodes) {
    if (n < 0) {
      ++out.absent;
    } else if (n != node) {
      ++out.off_node;
    }
  }
  return out;
}

// Locks the process's memory for the scope, as the server would; unlocks at the end so the
// next test starts as usual. As system calls: the sanitizers' interceptors turn mlockall into
// a no-op that says it succeeded.
class LockedProcess {
 public:
  LockedProcess() { locked_ = syscall(SYS_mlockall, MCL_CURRENT | MCL_FUTURE) == 0; }
  ~LockedProcess() {
    if (locked_) (void)syscall(SYS_munlockall);
  }
  bool locked() const { return locked_; }

 private:
  bool locked_ = false;
};

TEST_CASE("under mlockall, an arena's objects are on its node before anything writes them") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Locking a sanitized process locks its shadow memory too: more than the lab VM has (CI's
  // ASan run was OOM-killed in mlockall). The plain build runs it.
  WARN("built with a sanitizer: mlockall would fault its shadow memory in; skipped");
  return;
#endif
  const auto& lab = lab::Expected();
  REQUIRE(lab.nodes.size() >= 2);
  const lab::ExpectedNode& home = lab.nodes[0];   // where the allocating thread runs
  const lab::ExpectedNode& bound = lab.nodes[1];  // where the arena's memory must be
  REQUIRE_FALSE(home.cpus.empty());
  lab::PinnedTo pin(home.cpus);
  LockedProcess locked;
  INFO("mlockall: " << std::strerror(errno));
  REQUIRE(locked.locked());  // the lab runs as root: no RLIMIT_MEMLOCK in the way

  // A new arena after the lock: its ranges are mapped, and made writable, from now on.
  ArenaOptions options;
  options.transparent_huge_pages = false;
  auto made = Arena::ForPolicy(Policy::Bind(bound.id), options);
  REQUIRE(made.ok());
  Arena* arena = *made;

  void* large = arena->allocate(8 * kMiB);
  REQUIRE(large != nullptr);
  std::vector<void*> small;
  for (int i = 0; i < 64; ++i) {
    small.push_back(arena->allocate(4096));
    REQUIRE(small.back() != nullptr);
  }
  // Not written: under the lock the kernel has faulted them in already, and where it did is
  // what is checked.
  const Placement large_placement = PlacementOf(large, 8 * kMiB, bound.id);
  CHECK(large_placement.absent == 0);  // the lock faulted them in
  CHECK(large_placement.off_node == 0);
  std::size_t small_off = 0;
  for (void* p : small) small_off += PlacementOf(p, 4096, bound.id).off_node;
  CHECK(small_off == 0);
  // More than one 64 MiB step of the arena's range (NodePages::kMapStep): a step mapped under
  // the lock, whatever the arena had mapped before.
  void* big = arena->allocate(72 * kMiB);
  REQUIRE(big != nullptr);
  const Placement big_placement = PlacementOf(big, 72 * kMiB, bound.id);
  CHECK(big_placement.absent == 0);
  CHECK(big_placement.off_node == 0);
  deallocate(big);

  // realloc past a neighbour moves the block's pages (the range it leaves is mapped again in
  // the locked process, MREMAP_DONTUNMAP being out): the moved block and a new block carved
  // from the range left behind are both on the arena's node.
  void* neighbour = arena->allocate(8 * kMiB);
  REQUIRE(neighbour != nullptr);
  std::memset(large, 0x5a, 8 * kMiB);
  void* grown = arena->reallocate(large, 20 * kMiB);
  REQUIRE(grown != nullptr);
  CHECK(static_cast<unsigned char*>(grown)[8 * kMiB - 1] == 0x5a);
  CHECK(PlacementOf(grown, 20 * kMiB, bound.id).off_node == 0);
  void* again = arena->allocate(6 * kMiB);
  REQUIRE(again != nullptr);
  CHECK(PlacementOf(again, 6 * kMiB, bound.id).off_node == 0);

  deallocate(again);
  deallocate(grown);
  deallocate(neighbour);
  for (void* p : small) deallocate(p);
  arena->purge();
}

}  // namespace
}  // namespace numarena
