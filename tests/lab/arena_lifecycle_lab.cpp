// Arena lifecycle in the NUMA lab: a destroyed node-N arena gives node N its pages back (the
// kernel's MemFree for the node) and the budget its charge, and an arena created afterwards
// in the same heap slot places every page on its own node (move_pages), whether it binds to
// the same node or another, also for a thread that had cached objects of the destroyed one.
// Memory is written from a CPU on the farthest other node wherever one exists, so a page on
// the right node proves the binding, not first-touch locality.
// lab-topologies: 2s cxl
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
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

namespace numarena {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kBlock = 16 * kMiB;
constexpr int kBlocks = 8;  // 128 MiB per arena: a fifth of the lab's smallest node

Budget& TheBudget() {
  static Budget* budget = [] {
    BudgetOptions options;
    options.mode = BudgetMode::kQuota;
    options.default_quota_bytes = std::uint64_t{1} << 40;
    auto made = Budget::Create(options, **Topology::system());
    REQUIRE(made.ok());
    Budget* b = made->release();
    SetCapacityGate(b);
    return b;
  }();
  return *budget;
}

std::int64_t ChargedOn(int node) {
  const BudgetSnapshot snapshot = TheBudget().Snapshot();  // node() points into it
  const NodeBudgetSnapshot* n = snapshot.node(node);
  REQUIRE(n != nullptr);
  return static_cast<std::int64_t>(n->usage);
}

// The node's MemFree (kernel's answer), in bytes.
std::int64_t MemFree(int node) {
  std::ifstream in("/sys/devices/system/node/node" + std::to_string(node) + "/meminfo");
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("MemFree:");
    if (at == std::string::npos) continue;
    std::istringstream rest(line.substr(at + 8));
    std::int64_t kb = -1;
    rest >> kb;
    return kb * 1024;
  }
  FAIL("no MemFree in node" << node << "'s meminfo");
  return -1;
}

// Pins the calling thread to the farthest other node's CPUs, if there is one.
void PinFar(std::optional<lab::PinnedTo>& pin, int node) {
  pin.reset();
  if (std::optional<int> toucher = lab::Expected().farthest_cpu_node(node)) {
    pin.emplace(lab::Expected().node(*toucher).cpus);
  }
}

// Pages of [p, p+size) that the kernel says are not on `node`.
std::size_t PagesOffNode(const void* p, std::size_t size, int node) {
  auto nodes = page_node_list(p, size);
  REQUIRE(nodes.ok());
  INFO(lab::SummarizePageNodes(*nodes));
  std::size_t wrong = 0;
  for (int n : *nodes) wrong += n != node;
  CHECK(wrong == 0);
  return wrong;
}

struct Filled {
  std::vector<void*> blocks;  // kBlock each
  std::vector<void*> small;   // 4 KiB each
};

// Writes kBlocks blocks and 2048 small objects from `arena`, checking every page is on `node`.
Filled FillAndCheck(Arena* arena, int node) {
  Filled out;
  for (int i = 0; i < kBlocks; ++i) {
    void* p = arena->allocate(kBlock);
    INFO(last_allocation_error().ToString());
    REQUIRE(p != nullptr);
    std::memset(p, 0x6b, kBlock);
    PagesOffNode(p, kBlock, node);
    out.blocks.push_back(p);
  }
  for (int i = 0; i < 2048; ++i) {
    void* p = arena->allocate(4096);
    REQUIRE(p != nullptr);
    std::memset(p, 0x2d, 4096);
    PagesOffNode(p, 4096, node);
    out.small.push_back(p);
  }
  return out;
}

// This process's resident bytes on `node`, by the kernel's own count (/proc/self/numa_maps:
// N<node>=pages of every mapping, times its page size). Unlike the node's MemFree it does not
// move with the page cache or the per-CPU free lists.
std::int64_t ResidentOn(int node) {
  std::ifstream in("/proc/self/numa_maps");
  const std::string key = "N" + std::to_string(node) + "=";
  std::int64_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    std::int64_t pages = 0, page_kb = 4;
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      if (word.rfind(key, 0) == 0) pages = std::stoll(word.substr(key.size()));
      if (word.rfind("kernelpagesize_kB=", 0) == 0) page_kb = std::stoll(word.substr(18));
    }
    bytes += pages * page_kb * 1024;
  }
  return bytes;
}

TEST_CASE("a destroyed node arena returns its pages and charge; the next one in its slot places "
          "every page on its own node") {
  const auto& lab = lab::Expected();
  INFO("topology " << lab.name);
  TheBudget();
  // Warm up: the process's one-time costs (jemalloc's own arena 0 and extent map leaves, the
  // C library's per-thread memory) are not the arena's memory. A first full cycle per node
  // pays them; what it leaves is printed, not bounded.
  for (const auto& node : lab.nodes) {
    const std::int64_t resident_before = ResidentOn(node.id);
    auto arena = Arena::Create(Policy::Bind(node.id));
    REQUIRE(arena.ok());
    (void)FillAndCheck(*arena, node.id);
    REQUIRE(Arena::Destroy(*arena).ok());
    WARN("warm-up on node " << node.id << ": this process's pages there grew by "
                            << (ResidentOn(node.id) - resident_before) / 1024 << " KiB");
  }
  for (const auto& target : lab.nodes) {
    // The node the next arena in the slot binds to: another one, so a binding left over from
    // the destroyed arena would show.
    const int next = lab.nodes[(&target - lab.nodes.data() + 1) % lab.nodes.size()].id;
    DYNAMIC_SECTION("node " << target.id << " then node " << next) {
      std::optional<lab::PinnedTo> pin;
      PinFar(pin, target.id);
      // A thread that will cache objects of the arena, started (and its own one-time memory
      // made) before anything is measured.
      std::atomic<int> phase{0};
      Arena* old_arena = nullptr;
      Arena* next_arena = nullptr;
      std::vector<void*> thread_got;
      std::thread cacher([&] {
        std::optional<lab::PinnedTo> far;
        PinFar(far, next);
        std::vector<void*> mine;
        mine.reserve(4096);
        thread_got.reserve(4096);
        phase.store(1);
        while (phase.load() != 2) std::this_thread::yield();
        for (int i = 0; i < 64; ++i) mine.push_back(old_arena->allocate(4096));
        for (void* p : mine) deallocate(p);
        phase.store(3);
        while (phase.load() != 4) std::this_thread::yield();
        for (int i = 0; i < 512; ++i) {
          void* p = next_arena->allocate(4096);
          if (p != nullptr) std::memset(p, 0x11, 4096);
          thread_got.push_back(p);
        }
      });
      while (phase.load() != 1) std::this_thread::yield();

      const std::int64_t charged_before = ChargedOn(target.id);
      const std::int64_t resident_before = ResidentOn(target.id);
      const std::int64_t free_before = MemFree(target.id);
      auto arena = Arena::Create(Policy::Bind(target.id));
      INFO(arena.status().ToString());
      REQUIRE(arena.ok());
      old_arena = *arena;
      Filled filled = FillAndCheck(*arena, target.id);
      const int slot = arena_internal::HeapOf(filled.blocks.front());
      // Half of everything freed (into the caches), the rest left live for Destroy.
      for (std::size_t i = 0; i < filled.blocks.size(); i += 2) deallocate(filled.blocks[i]);
      for (std::size_t i = 0; i < filled.small.size(); i += 2) deallocate(filled.small[i]);
      phase.store(2);
      while (phase.load() != 3) std::this_thread::yield();
      const std::int64_t used = kBlocks * static_cast<std::int64_t>(kBlock);
      CHECK(ChargedOn(target.id) - charged_before >= used);
      CHECK(ResidentOn(target.id) - resident_before >= used);
      const std::int64_t free_full = MemFree(target.id);

      REQUIRE(Arena::Destroy(*arena).ok());
      // The kernel has the pages back, and the budget has the charge back.
      CHECK(ChargedOn(target.id) == charged_before);
      const std::int64_t resident_after = ResidentOn(target.id);
      INFO("this process on node " << target.id << ": " << resident_before << " bytes before, "
                                   << resident_after << " after");
      CHECK(resident_after <= resident_before + static_cast<std::int64_t>(kMiB));
      const std::int64_t free_after = MemFree(target.id);
      INFO("node " << target.id << " MemFree: " << free_before << " before, " << free_full
                   << " full, " << free_after << " after");
      // The node's own free memory moves with the rest of the system (page cache, per-CPU
      // lists), so only most of the 128 MiB must be seen coming back.
      CHECK(free_after - free_full >= used - static_cast<std::int64_t>(32 * kMiB));

      // The next arena takes the same slot and places everything on its own node.
      auto again = Arena::Create(Policy::Bind(next));
      REQUIRE(again.ok());
      next_arena = *again;
      PinFar(pin, next);
      Filled refilled = FillAndCheck(*again, next);
      CHECK(arena_internal::HeapOf(refilled.blocks.front()) == slot);
      phase.store(4);
      cacher.join();
      for (void* p : thread_got) {
        REQUIRE(p != nullptr);
        CHECK(arena_internal::HeapOf(p) == slot);
        PagesOffNode(p, 4096, next);
      }
      // And the same node as before, once more in the same slot.
      REQUIRE(Arena::Destroy(*again).ok());
      PinFar(pin, target.id);
      auto same = Arena::Create(Policy::Bind(target.id));
      REQUIRE(same.ok());
      Filled third = FillAndCheck(*same, target.id);
      CHECK(arena_internal::HeapOf(third.blocks.front()) == slot);
      REQUIRE(Arena::Destroy(*same).ok());
      CHECK(ChargedOn(target.id) == charged_before);
    }
  }
  // Nothing of any of them is still charged anywhere.
  for (const auto& node : lab.nodes) {
    INFO("node " << node.id);
    CHECK(ChargedOn(node.id) == 0);
  }
}

}  // namespace
}  // namespace numarena
