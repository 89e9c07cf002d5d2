// numarena::allocator<T>: the standard allocator requirements, one test each, containers of
// several element types, moves and swaps between policies, over-aligned types, and
// std::bad_alloc when the capacity gate refuses. Placement itself is proven in the lab
// (tests/lab/adapters_lab.cpp); this machine has one node.
#include "numarena/allocator.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "numarena/capacity.hpp"
#include "numarena/topology.hpp"

namespace {

using numarena::allocator;
using numarena::Policy;

// Two distinct policies that both work on a one-node machine.
Policy PolicyA() { return Policy::Bind(0); }
Policy PolicyB() { return Policy::Preferred(0); }

struct alignas(256) OverAligned {
  float lanes[64];
};

}  // namespace

TEST_CASE("allocator: value_type and rebind", "[allocator]") {
  static_assert(std::is_same_v<allocator<int>::value_type, int>);
  using Rebound = std::allocator_traits<allocator<int>>::rebind_alloc<double>;
  static_assert(std::is_same_v<Rebound, allocator<double>>);
  allocator<int> a(PolicyA());
  Rebound b(a);
  CHECK(b.arena() == a.arena());
  CHECK(allocator<int>(b) == a);
}

TEST_CASE("allocator: allocate returns usable, aligned storage for n objects", "[allocator]") {
  allocator<std::uint64_t> a(PolicyA());
  for (std::size_t n : {1u, 7u, 64u, 4096u, 1u << 20}) {
    std::uint64_t* p = a.allocate(n);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % alignof(std::uint64_t) == 0);
    for (std::size_t i = 0; i < n; ++i) p[i] = i;
    CHECK(p[n - 1] == n - 1);
    CHECK(numarena::node_of(p) == 0);
    a.deallocate(p, n);
  }
}

TEST_CASE("allocator: copies compare equal and free each other's memory", "[allocator]") {
  allocator<int> a(PolicyA());
  allocator<int> copy = a;
  CHECK(copy == a);
  int* p = a.allocate(100);
  copy.deallocate(p, 100);  // must not crash or leak (ASan checks)
}

TEST_CASE("allocator: different policies compare unequal", "[allocator]") {
  allocator<int> a(PolicyA());
  allocator<int> b(PolicyB());
  CHECK_FALSE(a == b);
  CHECK(a != b);
  CHECK(allocator<int>(PolicyA()) == a);  // same policy, same arena
}

TEST_CASE("allocator: propagation traits", "[allocator]") {
  using Traits = std::allocator_traits<allocator<int>>;
  static_assert(!Traits::propagate_on_container_copy_assignment::value);
  static_assert(Traits::propagate_on_container_move_assignment::value);
  static_assert(Traits::propagate_on_container_swap::value);
  static_assert(!Traits::is_always_equal::value);
  SUCCEED();
}

TEST_CASE("allocator: is nothrow copyable and default constructible", "[allocator]") {
  static_assert(std::is_nothrow_copy_constructible_v<allocator<int>>);
  allocator<int> local;  // Policy::Local()
  CHECK(local.policy().kind() == numarena::PolicyKind::kLocal);
  int* p = local.allocate(10);
  p[9] = 9;
  local.deallocate(p, 10);
}

TEST_CASE("allocator: too many elements throws bad_array_new_length", "[allocator]") {
  allocator<std::uint64_t> a(PolicyA());
  CHECK_THROWS_AS(a.allocate(std::numeric_limits<std::size_t>::max() / 4), std::bad_alloc);
}

TEST_CASE("allocator: an invalid policy names the node", "[allocator]") {
  try {
    allocator<int> a(Policy::Bind(63));
    FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("node 63"));
  }
}

TEST_CASE("allocator: containers of several element types", "[allocator]") {
  allocator<char> base(PolicyA());

  numarena::vector<float> floats(base);
  for (int i = 0; i < 100000; ++i) floats.push_back(static_cast<float>(i));
  CHECK(floats[99999] == 99999.0f);

  std::vector<std::string, allocator<std::string>> strings(base);
  for (int i = 0; i < 1000; ++i) strings.push_back(std::string(100, 'a' + i % 26));
  CHECK(strings[27] == std::string(100, 'b'));

  std::deque<int, allocator<int>> deque(base);
  for (int i = 0; i < 10000; ++i) deque.push_front(i);
  CHECK(deque.front() == 9999);

  std::list<double, allocator<double>> list(base);
  list.assign(1000, 2.5);
  CHECK(list.size() == 1000);

  std::map<int, int, std::less<int>, allocator<std::pair<const int, int>>> map(base);
  for (int i = 0; i < 1000; ++i) map[i] = i * i;
  CHECK(map[31] == 961);

  absl::flat_hash_map<int, std::string, absl::Hash<int>, std::equal_to<int>,
                      allocator<std::pair<const int, std::string>>>
      hash_map(0, absl::Hash<int>(), std::equal_to<int>(), base);
  for (int i = 0; i < 5000; ++i) hash_map[i] = std::to_string(i);
  CHECK(hash_map[4321] == "4321");
}

TEST_CASE("allocator: move assignment carries storage and allocator across policies",
          "[allocator]") {
  numarena::vector<int> on_a{allocator<int>(PolicyA())};
  numarena::vector<int> on_b{allocator<int>(PolicyB())};
  on_a.assign(1000, 7);
  const int* storage = on_a.data();
  on_b = std::move(on_a);
  CHECK(on_b.data() == storage);  // no element copy
  CHECK(on_b.get_allocator() == allocator<int>(PolicyA()));
  on_b.push_back(8);  // grows with the propagated allocator
  CHECK(on_b.size() == 1001);
}

TEST_CASE("allocator: copy assignment keeps the destination's policy", "[allocator]") {
  numarena::vector<int> on_a{allocator<int>(PolicyA())};
  numarena::vector<int> on_b{allocator<int>(PolicyB())};
  on_a.assign(500, 3);
  on_b = on_a;
  CHECK(on_b.get_allocator() == allocator<int>(PolicyB()));
  CHECK(on_b.data() != on_a.data());
  CHECK(on_b == on_a);
}

TEST_CASE("allocator: swap exchanges storage and allocators", "[allocator]") {
  numarena::vector<int> on_a{allocator<int>(PolicyA())};
  numarena::vector<int> on_b{allocator<int>(PolicyB())};
  on_a.assign(10, 1);
  on_b.assign(20, 2);
  const int* a_storage = on_a.data();
  on_a.swap(on_b);
  CHECK(on_b.data() == a_storage);
  CHECK(on_b.get_allocator() == allocator<int>(PolicyA()));
  CHECK(on_a.get_allocator() == allocator<int>(PolicyB()));
  CHECK(on_a.size() == 20);
}

TEST_CASE("allocator: over-aligned types are aligned", "[allocator]") {
  numarena::vector<OverAligned> v{allocator<OverAligned>(PolicyA())};
  for (int i = 0; i < 300; ++i) {
    v.emplace_back();
    CHECK(reinterpret_cast<std::uintptr_t>(v.data()) % alignof(OverAligned) == 0);
  }
}

namespace {

// A capacity gate that refuses every commit: the shape of a budget that has tripped.
class RefuseEverything : public numarena::CapacityGate {
 public:
  numarena::Status Charge(int node, std::size_t bytes, numarena::Priority) override {
    ++refused;
    return absl::ResourceExhaustedError(
        absl::StrCat("test gate refuses ", bytes, " bytes on node ", node));
  }
  void Release(int, std::size_t, numarena::Priority) override {}
  int refused = 0;
};

}  // namespace

TEST_CASE("allocator: throws bad_alloc when the capacity gate refuses", "[allocator]") {
  RefuseEverything gate;
  // A policy no other test uses, so its arena has no memory cached from before.
  allocator<std::byte> fresh(Policy::Bind(std::vector<int>{0}, numarena::BindMode::kAdvisory));
  numarena::CapacityGate* previous = numarena::SetCapacityGate(&gate);
  CHECK_THROWS_AS(fresh.allocate(std::size_t{64} << 20), std::bad_alloc);
  numarena::SetCapacityGate(previous);
  CHECK(gate.refused > 0);
  CHECK(absl::IsResourceExhausted(numarena::last_allocation_error()));
}
