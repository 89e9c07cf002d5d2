// numarena::memory_resource: the std::pmr contract, use as upstream of the standard pool
// resources, equality, and bad_alloc on refusal. Placement is proven in the lab.
#include "numarena/memory_resource.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory_resource>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "numarena/capacity.hpp"

using numarena::Policy;

TEST_CASE("memory_resource: node_resource is created once per node", "[pmr]") {
  auto a = numarena::node_resource(0);
  auto b = numarena::node_resource(0);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == *b);
  CHECK((*a)->is_equal(**b));
}

TEST_CASE("memory_resource: an unknown node is InvalidArgument naming it", "[pmr]") {
  auto r = numarena::node_resource(57);
  REQUIRE_FALSE(r.ok());
  CHECK(absl::IsInvalidArgument(r.status()));
  CHECK_THAT(std::string(r.status().message()), Catch::Matchers::Contains("57"));
}

TEST_CASE("memory_resource: allocate honours size and alignment", "[pmr]") {
  std::pmr::memory_resource* r = numarena::node_resource(0).value();
  for (std::size_t align : {8u, 64u, 4096u, 1u << 21}) {
    void* p = r->allocate(3000, align);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % align == 0);
    std::memset(p, 0xab, 3000);
    CHECK(numarena::node_of(p) == 0);
    r->deallocate(p, 3000, align);
  }
}

TEST_CASE("memory_resource: pmr containers and pool resources on top", "[pmr]") {
  std::pmr::memory_resource* upstream = numarena::node_resource(0).value();
  {
    std::pmr::vector<std::pmr::string> names(upstream);
    for (int i = 0; i < 2000; ++i) names.emplace_back(absl::StrCat("request-", i, "-padding-xx"));
    CHECK(names[1999] == "request-1999-padding-xx");
    CHECK(numarena::owns(names.data()));
  }
  {
    std::pmr::unsynchronized_pool_resource pool(upstream);
    std::pmr::vector<int> v(&pool);
    for (int i = 0; i < 100000; ++i) v.push_back(i);
    CHECK(v[12345] == 12345);
    CHECK(numarena::owns(v.data()));
  }
  {
    std::pmr::monotonic_buffer_resource mono(1 << 16, upstream);
    std::pmr::vector<double> v(&mono);
    v.resize(50000, 1.5);
    CHECK(numarena::owns(v.data()));
  }
}

TEST_CASE("memory_resource: equality follows the arena", "[pmr]") {
  auto bind = numarena::memory_resource::ForPolicy(Policy::Bind(0));
  auto preferred = numarena::memory_resource::ForPolicy(Policy::Preferred(0));
  REQUIRE(bind.ok());
  REQUIRE(preferred.ok());
  CHECK_FALSE(bind->is_equal(*preferred));
  CHECK(bind->is_equal(*numarena::node_resource(0).value()));
  CHECK_FALSE(bind->is_equal(*std::pmr::new_delete_resource()));
}

namespace {
class RefuseEverything : public numarena::CapacityGate {
 public:
  numarena::Status Charge(int node, std::size_t, numarena::Priority) override {
    return absl::ResourceExhaustedError(absl::StrCat("test gate: node ", node, " is full"));
  }
  void Release(int, std::size_t, numarena::Priority) override {}
};
}  // namespace

TEST_CASE("memory_resource: throws bad_alloc when the capacity gate refuses", "[pmr]") {
  RefuseEverything gate;
  auto fresh =
      numarena::memory_resource::ForPolicy(Policy::Preferred(0, numarena::BindMode::kStrict));
  REQUIRE(fresh.ok());
  numarena::CapacityGate* previous = numarena::SetCapacityGate(&gate);
  CHECK_THROWS_AS(fresh->allocate(std::size_t{96} << 20, 64), std::bad_alloc);
  numarena::SetCapacityGate(previous);
}
