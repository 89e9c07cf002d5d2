// numarena::torch's allocator on the host (one node): which tensors numarena makes, where
// they are freed, and what a refused tensor does. Placement itself is proven in the lab
// (tests/lab/torch_lab.py). Every test case runs under a 256 MiB-per-node quota installed
// once, so that a lost free or an unbounded tensor shows up as a refusal.
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/randn.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "numarena/numarena.h"
#include "numarena/torch.hpp"

namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

void InstallQuotaOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    numarena_budget* budget = numarena_budget_create("quota:256M");
    REQUIRE(budget != nullptr);
    REQUIRE(numarena_budget_install(budget) == NUMARENA_OK);
  });
}

numarena_arena* ArenaFor(const char* policy) {
  numarena_arena* arena = numarena_arena_for_policy(policy);
  INFO(numarena_last_error_message());
  REQUIRE(arena != nullptr);
  return arena;
}

bool Owned(const at::Tensor& t) { return numarena_owns(t.data_ptr()) != 0; }

}  // namespace

TEST_CASE("torch: Install makes numarena the CPU allocator and keeps libtorch's behind it") {
  InstallQuotaOnce();
  numarena::torch::Install();
  numarena::torch::Install();  // idempotent
  CHECK(numarena::torch::Installed());
  CHECK(c10::GetCPUAllocator() == numarena::torch::GetAllocator());
  // Outside any scope, with no Use(): libtorch's own memory, freed by the same deleter.
  numarena::torch::Use(nullptr);
  CHECK(numarena::torch::CurrentArena() == nullptr);
  at::Tensor outside = at::empty({4096}, at::kFloat);
  CHECK_FALSE(Owned(outside));
  outside.fill_(1.0f);
  outside.reset();
  // The raw interface (raw_allocate/raw_deallocate) frees both kinds correctly.
  c10::Allocator* allocator = c10::GetCPUAllocator();
  REQUIRE(allocator->raw_deleter() != nullptr);
  void* plain = allocator->raw_allocate(1000);
  CHECK(numarena_owns(plain) == 0);
  allocator->raw_deallocate(plain);
  numarena::torch::Scope scope(ArenaFor("local"));
  void* placed = allocator->raw_allocate(1000);
  CHECK(numarena_owns(placed) == 1);
  CHECK(reinterpret_cast<std::uintptr_t>(placed) % 64 == 0);
  allocator->raw_deallocate(placed);
}

TEST_CASE("torch: every CPU tensor made under a scope is numarena's, and only those") {
  InstallQuotaOnce();
  numarena::torch::Use(nullptr);
  numarena_arena* arena = ArenaFor("bind(0)");
  at::Tensor before = at::randn({64, 64});
  std::vector<at::Tensor> inside;
  {
    numarena::torch::Scope scope(arena);
    CHECK(numarena::torch::CurrentArena() == arena);
    inside.push_back(at::empty({3}, at::kByte));
    inside.push_back(at::randn({64, 64}));
    inside.push_back(at::mm(inside.back(), inside.back()));  // an operator's output
    inside.push_back(at::empty({3 * kMiB}, at::kHalf));       // a large one
    for (const at::Tensor& t : inside) {
      CHECK(Owned(t));
      CHECK(numarena_arena_contains(arena, t.data_ptr()) == 1);
      CHECK(numarena_node_of(t.data_ptr()) == 0);
      CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 64 == 0);
    }
    // A tensor of no elements has no data pointer (libtorch reports nullptr for it).
    CHECK(at::empty({0}, at::kFloat).data_ptr() == nullptr);
    {
      // An inner scope wins; nullptr sends the thread back to libtorch's allocator.
      numarena::torch::Scope plain(nullptr);
      CHECK_FALSE(Owned(at::empty({100})));
    }
    CHECK(Owned(at::empty({100})));
    // Another thread is not in this thread's scope.
    bool other_owned = true;
    std::thread([&] { other_owned = Owned(at::empty({100})); }).join();
    CHECK_FALSE(other_owned);
  }
  CHECK(numarena::torch::CurrentArena() == nullptr);
  at::Tensor after = at::randn({64, 64});
  CHECK_FALSE(Owned(before));
  CHECK_FALSE(Owned(after));
  // Tensors made in the scope are usable and freed after it ended.
  CHECK(at::mm(inside[1], inside[1]).equal(inside[2]));
  inside.clear();
}

TEST_CASE("torch: Use() places tensors outside scopes, on every thread") {
  InstallQuotaOnce();
  numarena_arena* arena = ArenaFor("interleave(0)");
  numarena::torch::Use(arena);
  CHECK(numarena::torch::UsedArena() == arena);
  bool other_in_arena = false;
  std::thread([&] {
    at::Tensor t = at::empty({1000});
    other_in_arena = numarena_arena_contains(arena, t.data_ptr()) == 1;
  }).join();
  CHECK(other_in_arena);
  CHECK(numarena_arena_contains(arena, at::empty({10}).data_ptr()) == 1);
  numarena::torch::Use(nullptr);
  CHECK_FALSE(Owned(at::empty({10})));
}

TEST_CASE("torch: a memory-target policy is a scope like any other") {
  InstallQuotaOnce();
  numarena_arena* arena = ArenaFor("target(capacity@any)");
  numarena::torch::Scope scope(arena);
  at::Tensor t = at::empty({1000});
  CHECK(numarena_arena_contains(arena, t.data_ptr()) == 1);
}

TEST_CASE("torch: tensors freed on other threads and after the scope go back to numarena") {
  InstallQuotaOnce();
  numarena::torch::Use(nullptr);
  numarena_arena* arena = ArenaFor("bind(0)");
  // 96 tensors of 8 MiB, 768 MiB in all, under a quota of 256 MiB per node: only frees that
  // reach numarena keep this going (a free that went to glibc would crash; one that went
  // nowhere would leave the quota full and the next tensor refused).
  for (int round = 0; round < 12; ++round) {
    std::vector<at::Tensor> made;
    {
      numarena::torch::Scope scope(arena);
      for (int i = 0; i < 8; ++i) {
        made.push_back(at::empty({8 * kMiB}, at::kByte));
        made.back().fill_(static_cast<std::uint8_t>(round));
      }
    }
    // Half freed here after the scope, half on two other threads.
    std::vector<at::Tensor> first(made.begin(), made.begin() + 4);
    std::vector<at::Tensor> second(made.begin() + 4, made.end());
    made.clear();
    std::thread a([list = std::move(first)]() mutable { list.clear(); });
    std::thread b([list = std::move(second)]() mutable { list.clear(); });
    a.join();
    b.join();
  }
  numarena::torch::Scope scope(arena);
  CHECK(Owned(at::empty({8 * kMiB}, at::kByte)));
}

TEST_CASE("torch: a tensor over the quota raises c10::OutOfMemoryError with numarena's reason") {
  InstallQuotaOnce();
  numarena::torch::Scope scope(ArenaFor("bind(0)"));
  std::string message;
  try {
    at::Tensor huge = at::empty({512 * kMiB}, at::kByte);  // twice the quota
    FAIL("a 512 MiB tensor passed a 256 MiB quota");
  } catch (const c10::OutOfMemoryError& error) {
    message = error.what();
  }
  INFO(message);
  CHECK(message.find("numarena: cannot allocate a tensor of 536870912 bytes") != std::string::npos);
  CHECK(message.find("bind(0)") != std::string::npos);
  CHECK(message.find("node 0") != std::string::npos);  // numarena's own reason
  // The process carries on, in the same scope.
  at::Tensor small = at::ones_like(at::empty({16}));
  CHECK(Owned(small));
  CHECK(small.sum().item<float>() == 16.0f);
}

TEST_CASE("torch: the C functions refuse to end a scope that is not the innermost") {
  numarena_torch_scope* outer = numarena_torch_scope_enter(ArenaFor("bind(0)"));
  numarena_torch_scope* inner = numarena_torch_scope_enter(nullptr);
  REQUIRE(outer != nullptr);
  REQUIRE(inner != nullptr);
  CHECK(numarena_torch_current_arena() == nullptr);
  CHECK(numarena_torch_scope_exit(outer) == NUMARENA_FAILED_PRECONDITION);
  CHECK(numarena_torch_scope_exit(nullptr) == NUMARENA_FAILED_PRECONDITION);
  bool refused_on_other_thread = false;
  std::thread([&] {
    refused_on_other_thread = numarena_torch_scope_exit(inner) == NUMARENA_FAILED_PRECONDITION;
  }).join();
  CHECK(refused_on_other_thread);
  CHECK(numarena_torch_scope_exit(inner) == NUMARENA_OK);
  CHECK(numarena_torch_current_arena() == numarena_arena_for_policy("bind(0)"));
  CHECK(numarena_torch_scope_exit(outer) == NUMARENA_OK);
  CHECK(numarena_torch_current_arena() == numarena_torch_used());
}

TEST_CASE("torch: ArenaFor gives the shared arena of a policy, or c10::ValueError") {
  CHECK(numarena::torch::ArenaFor("bind(0)") == numarena_arena_for_policy("bind(0)"));
  {
    numarena::torch::Scope scope(numarena::torch::ArenaFor("interleave(0)"));
    CHECK(numarena_arena_contains(numarena_arena_for_policy("interleave(0)"),
                                  at::empty({100}).data_ptr()) == 1);
  }
  for (const char* bad : {"bind(99)", "bind(", "nonsense"}) {
    INFO(bad);
    std::string message;
    try {
      numarena::torch::ArenaFor(bad);
      FAIL("ArenaFor accepted a bad policy");
    } catch (const c10::ValueError& error) {
      message = error.what();
    }
    CHECK(message.find("numarena::torch::ArenaFor: ") != std::string::npos);
    CHECK(message.size() > 40);  // numarena's own explanation follows
  }
}
