// Arena::reallocate and Arena::contains on the host: contents kept through growth and
// shrinking across every kind of class (front-cached, medium, large), in place only within
// the object's class (so a sized free of the new size names the right class), a pointer of
// another arena moved to this one, alignment, refusals that keep the pointer, a pointer
// allocated on another thread, a full node (the old block kept), and checked mode (which
// always moves).
#include "numarena/arena.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "limit_gate.hpp"

namespace {

using numarena::Arena;
using numarena::Policy;
using numarena_test::GateScope;
using numarena_test::LimitGate;

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;

Arena* NodeArena() {
  auto arena = Arena::ForNode(0);
  INFO(arena.status().ToString());
  REQUIRE(arena.ok());
  return *arena;
}

// A byte pattern that differs at every offset of a class and between buffers.
unsigned char PatternByte(std::size_t i, unsigned seed) {
  return static_cast<unsigned char>((i * 131u + seed) ^ (i >> 8));
}
void Fill(void* p, std::size_t n, unsigned seed) {
  auto* c = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) c[i] = PatternByte(i, seed);
}
// The first offset whose byte is not the pattern's, or n.
std::size_t FirstMismatch(const void* p, std::size_t n, unsigned seed) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (c[i] != PatternByte(i, seed)) return i;
  }
  return n;
}

}  // namespace

TEST_CASE("reallocate keeps the contents while a buffer grows from 24 B to 8 MiB and shrinks") {
  Arena* arena = NodeArena();
  std::size_t size = 24;
  void* p = arena->allocate(size);
  REQUIRE(p != nullptr);
  Fill(p, size, 7);
  // Front-cached small and medium classes, then 2 MiB and larger (the large cache's).
  for (std::size_t next : {std::size_t{100}, 4 * kKiB, 5000 * std::size_t{1}, 64 * kKiB,
                           1792 * kKiB, 3 * kMiB, 8 * kMiB}) {
    void* q = arena->reallocate(p, next);
    INFO("from " << size << " to " << next);
    REQUIRE(q != nullptr);
    CHECK(arena->contains(q));
    CHECK(numarena::usable_size(q) >= next);
    CHECK(FirstMismatch(q, size, 7) == size);
    Fill(q, next, 7);
    p = q;
    size = next;
  }
  for (std::size_t next : {5 * kMiB, 100 * kKiB, std::size_t{40}}) {
    void* q = arena->reallocate(p, next);
    INFO("from " << size << " to " << next);
    REQUIRE(q != nullptr);
    CHECK(numarena::usable_size(q) >= next);
    CHECK(FirstMismatch(q, next, 7) == next);
    p = q;
    size = next;
  }
  arena->deallocate(p, size);
}

TEST_CASE("reallocate stays in place within the size class, and moves out of it") {
  Arena* arena = NodeArena();
  void* p = arena->allocate(100);
  REQUIRE(p != nullptr);
  const std::size_t usable = numarena::usable_size(p);  // jemalloc's class: 112 bytes
  REQUIRE(usable >= 100);
  Fill(p, 100, 3);
  void* same = arena->reallocate(p, usable);
  REQUIRE(same != nullptr);
  if (numarena::checked_mode()) {
    CHECK(same != p);  // checked mode records exact sizes: it always moves
  } else {
    CHECK(same == p);
  }
  CHECK(FirstMismatch(same, 100, 3) == 100);
  // Past the class: a new object. Far below it (less than the class below): a new one too, so
  // that a sized free of the small size names the small class.
  void* bigger = arena->reallocate(same, usable + 1);
  REQUIRE(bigger != nullptr);
  CHECK(bigger != same);
  CHECK(numarena::usable_size(bigger) > usable);
  CHECK(FirstMismatch(bigger, 100, 3) == 100);
  void* smaller = arena->reallocate(bigger, 16);
  REQUIRE(smaller != nullptr);
  CHECK(smaller != bigger);
  CHECK(numarena::usable_size(smaller) < usable);
  CHECK(FirstMismatch(smaller, 16, 3) == 16);
  arena->deallocate(smaller, 16);
}

TEST_CASE("a sized free of the size given to reallocate puts the object back in its class") {
  Arena* arena = NodeArena();
  void* p = arena->allocate(200);
  REQUIRE(p != nullptr);
  const std::size_t usable = numarena::usable_size(p);
  void* q = arena->reallocate(p, usable - 1);
  REQUIRE(q != nullptr);
  arena->deallocate(q, usable - 1);
  if (!numarena::checked_mode()) {
    // The calling thread's list of that class is LIFO: the next request of the class gets it.
    void* again = arena->allocate(usable);
    CHECK(again == q);
    CHECK(numarena::usable_size(again) == usable);
    arena->deallocate(again, usable);
  }
}

TEST_CASE("reallocate moves a pointer of another arena on the same node into this arena") {
  Arena* shared = NodeArena();
  auto own = Arena::Create(Policy::Bind(0));
  INFO(own.status().ToString());
  REQUIRE(own.ok());
  for (std::size_t size : {std::size_t{64}, 64 * kKiB, 4 * kMiB}) {
    INFO("size " << size);
    void* p = shared->allocate(size);
    REQUIRE(p != nullptr);
    CHECK(shared->contains(p));
    CHECK_FALSE((*own)->contains(p));
    Fill(p, size, 11);
    // The same size, which would fit in place: it still moves, so that destroying either
    // arena cannot take the buffer with it.
    void* q = (*own)->reallocate(p, size);
    REQUIRE(q != nullptr);
    CHECK(q != p);
    CHECK((*own)->contains(q));
    CHECK_FALSE(shared->contains(q));
    CHECK(FirstMismatch(q, size, 11) == size);
    (*own)->deallocate(q);
  }
  REQUIRE(Arena::Destroy(*own).ok());
}

TEST_CASE("contains is false for foreign pointers, nullptr and other arenas' objects") {
  Arena* node = NodeArena();
  Arena* local = *Arena::ForPolicy(Policy::Local());
  int on_stack = 0;
  std::vector<char> on_heap(64);
  CHECK_FALSE(node->contains(nullptr));
  CHECK_FALSE(node->contains(&on_stack));
  CHECK_FALSE(node->contains(on_heap.data()));
  void* p = local->allocate(256);
  REQUIRE(p != nullptr);
  CHECK(local->contains(p));
  CHECK_FALSE(node->contains(p));
  local->deallocate(p);
}

TEST_CASE("reallocate honours the alignment it is given") {
  Arena* arena = NodeArena();
  void* p = arena->allocate(100);
  REQUIRE(p != nullptr);
  Fill(p, 100, 5);
  for (std::size_t alignment : {std::size_t{64}, std::size_t{4096}, 2 * kMiB}) {
    INFO("alignment " << alignment);
    void* q = arena->reallocate(p, 100, alignment);
    REQUIRE(q != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(q) % alignment == 0);
    CHECK(FirstMismatch(q, 100, 5) == 100);
    p = q;
  }
  arena->deallocate(p);
}

TEST_CASE("refused reallocations leave the pointer allocated and unchanged") {
  Arena* arena = NodeArena();
  void* p = arena->allocate(1000);
  REQUIRE(p != nullptr);
  Fill(p, 1000, 9);

  SECTION("a size near SIZE_MAX") {
    for (std::size_t size : {SIZE_MAX, SIZE_MAX - 4095, (std::size_t{1} << 62) + 1}) {
      CHECK(arena->reallocate(p, size) == nullptr);
      CHECK(numarena::last_allocation_error().code() == absl::StatusCode::kInvalidArgument);
    }
  }
  SECTION("an alignment that is not a power of two") {
    CHECK(arena->reallocate(p, 2000, 48) == nullptr);
    CHECK(numarena::last_allocation_error().code() == absl::StatusCode::kInvalidArgument);
    CHECK(arena->reallocate(p, 2000, 0) == nullptr);
  }
  SECTION("a pointer numarena does not own is neither resized nor freed") {
    std::vector<char> foreign(32, 'x');
    CHECK(arena->reallocate(foreign.data(), 64) == nullptr);
    const numarena::Status error = numarena::last_allocation_error();
    CHECK(error.code() == absl::StatusCode::kInvalidArgument);
    CHECK(error.message().find("not allocated by numarena") != std::string::npos);
    CHECK(foreign[31] == 'x');
  }
  CHECK(FirstMismatch(p, 1000, 9) == 1000);
  CHECK(arena->contains(p));
  arena->deallocate(p, 1000);
}

TEST_CASE("reallocate of nullptr allocates, and size 0 gives a minimal allocation") {
  Arena* arena = NodeArena();
  void* p = arena->reallocate(nullptr, 300);
  REQUIRE(p != nullptr);
  CHECK(arena->contains(p));
  CHECK(numarena::usable_size(p) >= 300);
  void* q = arena->reallocate(p, 0);
  REQUIRE(q != nullptr);
  CHECK(arena->contains(q));
  CHECK(numarena::usable_size(q) >= 1);
  arena->deallocate(q, 0);
}

TEST_CASE("reallocate of a buffer another thread allocated, and of one from an exited thread") {
  Arena* arena = NodeArena();
  void* from_thread = nullptr;
  std::thread([&] {
    from_thread = arena->allocate(3000);
    Fill(from_thread, 3000, 13);
  }).join();
  REQUIRE(from_thread != nullptr);
  void* q = arena->reallocate(from_thread, 300 * kKiB);
  REQUIRE(q != nullptr);
  CHECK(FirstMismatch(q, 3000, 13) == 3000);
  // And back: grown here, resized on another thread, freed here.
  void* r = nullptr;
  std::thread([&] { r = arena->reallocate(q, 50); }).join();
  REQUIRE(r != nullptr);
  CHECK(FirstMismatch(r, 50, 13) == 50);
  arena->deallocate(r);
}

TEST_CASE("reallocate on a full node refuses, and the old block stays allocated and intact") {
  auto created = Arena::Create(Policy::Bind(0));
  INFO(created.status().ToString());
  REQUIRE(created.ok());
  Arena* arena = *created;
  // One block of each kind of class: front-cached, medium, large (the large cache's range).
  const std::vector<std::size_t> sizes = {1000, 96 * kKiB, 4 * kMiB};
  std::vector<void*> blocks;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    blocks.push_back(arena->allocate(sizes[i]));
    REQUIRE(blocks.back() != nullptr);
    Fill(blocks.back(), sizes[i], static_cast<unsigned>(i + 20));
  }
  LimitGate gate(16 * kMiB);  // room for 16 MiB more than the node holds now
  std::optional<GateScope> scope(&gate);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("block of " << sizes[i] << " B grown to 256 MiB");
    CHECK(arena->reallocate(blocks[i], 256 * kMiB) == nullptr);
    const numarena::Status error = numarena::last_allocation_error();
    INFO(error.ToString());
    CHECK(error.code() == absl::StatusCode::kResourceExhausted);
    CHECK(error.message().find("limit gate") != std::string::npos);
    CHECK(arena->contains(blocks[i]));
    CHECK(numarena::usable_size(blocks[i]) >= sizes[i]);
    CHECK(FirstMismatch(blocks[i], sizes[i], static_cast<unsigned>(i + 20)) == sizes[i]);
  }
  CHECK(gate.refused() >= static_cast<int>(sizes.size()));
  // Growth the node has room for still works, and keeps the contents.
  void* grown = arena->reallocate(blocks[0], 2 * kMiB + 1);
  REQUIRE(grown != nullptr);
  CHECK(FirstMismatch(grown, sizes[0], 20) == sizes[0]);
  blocks[0] = grown;
  scope.reset();
  for (void* block : blocks) numarena::deallocate(block);
  REQUIRE(Arena::Destroy(arena).ok());
}
