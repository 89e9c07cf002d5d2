// Where the memory an arena causes to exist goes, in the NUMA lab. Beyond the pages of the
// objects it hands out, an arena makes bookkeeping: numarena's page tables, front caches and
// arena objects, and jemalloc's thread caches, arena statistics and extent-map leaves, some
// of it in jemalloc's default arena and metadata, whose pages the calling thread touches
// first. A thread on node W that makes or uses an arena for node T must add (almost) no
// anonymous page on W: without numarena's placement it added 4 pages making the arena and
// 514-520 on its first use (a 2 MiB block of jemalloc's metadata, first touched on W); with
// it, none and at most 2 (pages jemalloc touches after numarena's hooks have returned).
// What lands on T must be charged to the capacity gate except for jemalloc's own metadata,
// which numarena places but cannot charge (documented bound).
// The kernel's answer is /proc/self/numa_maps (anonymous mappings; shared libraries a thread
// maps for the first time are page cache, not new memory).
// lab-topologies: tiny 2s cxl
#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lab_support.hpp"
#include "numarena/arena.hpp"
#include "numarena/budget.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/topology.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Pages per node of each anonymous mapping of the process, keyed by the mapping's start;
// and the mapping's numa_maps line, for the messages.
struct AnonMapping {
  std::map<int, long> nodes;
  std::string line;
};
using AnonPages = std::map<std::string, AnonMapping>;

AnonPages ReadAnonPages() {
  AnonPages out;
  std::ifstream in("/proc/self/numa_maps");
  for (std::string line; std::getline(in, line);) {
    if (line.find(" file=") != std::string::npos) continue;
    std::istringstream words(line);
    std::string start, word;
    words >> start;
    std::map<int, long> nodes;
    while (words >> word) {
      if (word.size() > 2 && word[0] == 'N' && word[1] >= '0' && word[1] <= '9') {
        const auto eq = word.find('=');
        nodes[std::stoi(word.substr(1, eq - 1))] = std::stol(word.substr(eq + 1));
      }
    }
    out[start] = AnonMapping{nodes, line};
  }
  return out;
}

// Pages added on `node` between two readings, with the mappings that grew. The mapping
// `skip` starts (the measured thread's own stack and static TLS) is left out: they are the
// thread's, allocated when it started.
long AddedOn(const AnonPages& before, const AnonPages& after, int node, std::string* detail,
             const std::string& skip = std::string()) {
  long added = 0;
  for (const auto& [start, mapping] : after) {
    if (start == skip) continue;
    auto it = mapping.nodes.find(node);
    const long now = it == mapping.nodes.end() ? 0 : it->second;
    long was = 0;
    if (auto b = before.find(start); b != before.end()) {
      if (auto n = b->second.nodes.find(node); n != b->second.nodes.end()) was = n->second;
    }
    if (now > was) {  // pages the thread freed elsewhere do not make up for new ones
      added += now - was;
      *detail += std::to_string(was) + " -> " + std::to_string(now) + " pages: " + mapping.line +
                 "\n";
    }
  }
  return added;
}

// Runs `work` on a thread pinned to `cpus`, reading the process's anonymous pages just
// before and after it (from this thread, which allocates nothing on the worker's node).
// The worker first touches 1 MiB of its stack, mallocs, and reads the topology (done once
// per process by whichever thread asks first), so only what `work` causes is measured.
struct Readings {
  AnonPages before, after;
  std::string stack;  // numa_maps start of the mapping holding the thread's stack and TLS
};

// The numa_maps start (hex, no 0x) of the mapping that contains `address`.
std::string MappingOf(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream in("/proc/self/maps");
  for (std::string line; std::getline(in, line);) {
    const auto dash = line.find('-');
    const auto space = line.find(' ');
    const std::uintptr_t begin = std::stoull(line.substr(0, dash), nullptr, 16);
    const std::uintptr_t end = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
    if (at >= begin && at < end) return line.substr(0, dash);
  }
  return std::string();
}

Readings MeasureOnThread(const std::vector<int>& cpus, const std::function<void()>& work) {
  std::mutex mutex;
  std::condition_variable changed;
  int phase = 0;
  auto advance_and_wait = [&](int to, int until) {
    std::unique_lock<std::mutex> lock(mutex);
    phase = to;
    changed.notify_all();
    changed.wait(lock, [&] { return phase >= until; });
  };
  std::string stack;
  std::thread worker([&] {
    lab::PinnedTo pin(cpus);
    int on_stack = 0;
    stack = MappingOf(&on_stack);
    {
      volatile char stack[1 << 20];
      for (std::size_t i = 0; i < sizeof stack; i += 4096) stack[i] = 1;
    }
    std::free(std::malloc(1000));
    (void)Topology::system();
    advance_and_wait(1, 2);
    work();
    advance_and_wait(3, 4);
  });
  Readings readings;
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return phase >= 1; });
  }
  readings.before = ReadAnonPages();
  {
    std::unique_lock<std::mutex> lock(mutex);
    phase = 2;
    changed.notify_all();
    changed.wait(lock, [&] { return phase >= 3; });
  }
  readings.after = ReadAnonPages();
  {
    std::unique_lock<std::mutex> lock(mutex);
    phase = 4;
    changed.notify_all();
  }
  worker.join();
  readings.stack = stack;
  return readings;
}

// Objects of every kind of size, written, and kept in `blocks` (reserved by the caller, so
// the list itself allocates nothing on the measured thread); false when one failed or the
// thread's memory policy was not put back. No
// Catch2 assertion here: it runs on the measured thread.
constexpr std::size_t kMixObjects = 1005;
bool AllocateMix(Arena* arena, std::vector<void*>& blocks) {
  for (std::size_t size : {std::size_t{64}, std::size_t{4096}, std::size_t{64} << 10, kMiB,
                           8 * kMiB}) {
    void* p = arena->allocate(size);
    if (p == nullptr) return false;
    std::memset(p, 0x5a, size);
    blocks.push_back(p);
  }
  for (std::size_t i = 5; i < kMixObjects; ++i) {
    void* p = arena->allocate(64);
    if (p == nullptr) return false;
    std::memset(p, 0x5b, 64);
    blocks.push_back(p);
  }
  // numarena changes the thread's memory policy only while jemalloc makes the heap's
  // bookkeeping: afterwards it is the thread's own again (the default here).
  os::ThreadPolicy policy;
  return os::GetThreadPolicyNoAlloc(&policy) == 0 && policy.mode == 0 /* MPOL_DEFAULT */;
}

// What a thread's use of an arena may still add on its own node: a few pages of jemalloc's
// default arena and metadata that jemalloc touches after numarena's hooks have returned
// (1 or 2 pages per thread in the lab, in one mapping of jemalloc's; without numarena's
// placement, 20 and more). numarena cannot reach them (arena.hpp says so).
constexpr long kUnplacedPagesPerUse = 4;
// Plus, now and then, one leaf of jemalloc's extent map (2 MiB: 512 pages). The map is shared
// by every arena, so no node is right for it; a leaf is made when an extent boundary first
// falls in a new GiB of address space, which happens inside jemalloc when it splits an extent
// it already holds, with no hook call before it to open a placement window (the grow window
// covers only fresh address space). The lab saw it on a first use in about one run of
// several; without numarena's placement a first use added 514-520 pages every time. Known
// gap, recorded in issue 14.
constexpr long kExtentMapLeafPages = 512;

TEST_CASE("a thread on another node that makes and uses an arena adds no page to its own node") {
  const auto& lab = lab::Expected();
  for (const auto& target : lab.nodes) {
    std::optional<int> toucher = lab.farthest_cpu_node(target.id);
    if (!toucher) continue;
    DYNAMIC_SECTION("arena for node " << target.id << ", thread on node " << *toucher) {
      // This thread reads numa_maps (and allocates doing so) from another node.
      int reader = -1;
      for (int id : lab.cpu_node_ids()) {
        if (id != *toucher) reader = id;
      }
      REQUIRE(reader >= 0);
      lab::PinnedTo main_pin(lab.node(reader).cpus);
      // The process's one-time setup, made by its first Arena::ForPolicy whatever the policy
      // (the arena registry, its fork handlers; 12 pages in the lab), is made here first,
      // like the topology reading: it belongs to no arena.
      REQUIRE(Arena::ForPolicy(Policy::Bind(reader)).ok());
      const std::vector<int>& cpus = lab.node(*toucher).cpus;
      // A new arena (this policy is used nowhere else), made by a remote thread.
      StatusOr<Arena*> created = absl::UnknownError("not made");
      Readings made = MeasureOnThread(cpus, [&] {
        created = Arena::ForPolicy(Policy::Bind(target.id, BindMode::kAdvisory));
      });
      INFO(created.status().ToString());
      REQUIRE(created.ok());
      Arena* arena = *created;
      std::string detail;
      const long added = AddedOn(made.before, made.after, *toucher, &detail, made.stack);
      INFO("making the arena: " << detail);
      CHECK(added == 0);

      // Its first use, by another remote thread: the arena's first address space, slabs,
      // the thread's caches.
      std::vector<void*> blocks;
      blocks.reserve(kMixObjects);
      bool allocated = false;
      Readings first = MeasureOnThread(cpus, [&] { allocated = AllocateMix(arena, blocks); });
      CHECK(allocated);
      std::string detail1;
      const long added1 = AddedOn(first.before, first.after, *toucher, &detail1, first.stack);
      INFO("first use: " << detail1);
      CHECK(added1 <= kUnplacedPagesPerUse + kExtentMapLeafPages);
      for (void* p : blocks) CHECK(node_of(p) == target.id);

      // A second remote thread on the same arena: its own thread cache and front cache.
      std::vector<void*> more;
      more.reserve(kMixObjects);
      bool allocated2 = false;
      Readings used = MeasureOnThread(cpus, [&] { allocated2 = AllocateMix(arena, more); });
      CHECK(allocated2);
      std::string detail2;
      const long added2 = AddedOn(used.before, used.after, *toucher, &detail2, used.stack);
      INFO("a second thread allocating: " << detail2);
      CHECK(added2 <= kUnplacedPagesPerUse + kExtentMapLeafPages);
      for (void* p : blocks) deallocate(p);
      for (void* p : more) deallocate(p);
      arena->purge();
    }
  }
}

TEST_CASE("what an arena adds on its node is charged, but for jemalloc's own metadata") {
  const auto& lab = lab::Expected();
  const int target = lab.nodes.back().id;
  std::optional<int> toucher = lab.farthest_cpu_node(target);
  REQUIRE(toucher);
  // This thread reads numa_maps from a node other than the target.
  std::optional<lab::PinnedTo> main_pin;
  for (int id : lab.cpu_node_ids()) {
    if (id != target && !main_pin) main_pin.emplace(lab.node(id).cpus);
  }
  BudgetOptions options;
  options.mode = BudgetMode::kQuota;
  options.default_quota_bytes = std::uint64_t{1} << 40;
  auto budget = Budget::Create(options, *Topology::system().value());
  REQUIRE(budget.ok());
  REQUIRE(InstallProcessBudget(budget->get()).ok());
  struct Uninstall {
    ~Uninstall() { (void)InstallProcessBudget(nullptr); }
  } uninstall;
  const std::uint64_t charged_before = (*budget)->usage(target);
  StatusOr<Arena*> created = absl::UnknownError("not made");
  std::vector<void*> blocks;
  blocks.reserve(kMixObjects);
  bool allocated = false;
  Readings made = MeasureOnThread(lab.node(*toucher).cpus, [&] {
    created = Arena::ForPolicy(Policy::WeightedInterleave({{target, 1}}));
    if (created.ok()) allocated = AllocateMix(*created, blocks);
  });
  REQUIRE(created.ok());
  REQUIRE(allocated);
  Arena* arena = *created;
  std::string detail;
  const long resident = AddedOn(made.before, made.after, target, &detail, made.stack);
  const std::uint64_t charged = (*budget)->usage(target) - charged_before;
  const ArenaStats stats = arena->stats();
  const std::uint64_t resident_bytes = static_cast<std::uint64_t>(resident) * os::PageSize();
  INFO("resident on node " << target << ": " << (resident_bytes >> 10) << " KiB; charged "
                           << (charged >> 10) << " KiB, of which page tables "
                           << (stats.tables >> 10) << " KiB; " << detail);
  CHECK(charged == stats.committed);  // the page tables go through the gate too
  CHECK(stats.tables > 0);
  // What numarena cannot charge: jemalloc's extent-map leaf for the arena's first GiB of
  // address space (2 MiB, a transparent huge page) and the small metadata of a jemalloc
  // arena and thread cache, placed on the node but made inside jemalloc (arena.hpp).
  CHECK(resident_bytes <= charged + 2 * kMiB + 256 * 1024);
  for (void* p : blocks) deallocate(p);
  arena->purge();
  CHECK((*budget)->usage(target) - charged_before == arena->stats().committed);
}

}  // namespace
}  // namespace numarena
