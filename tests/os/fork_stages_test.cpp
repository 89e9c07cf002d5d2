// os/fork.hpp's contract: every fork stage is set when the library is loaded, before any
// thread can take the stage's locks. A stage set on first use can be missed by a fork that
// another thread runs at that moment, and the child then inherits the lock taken (the heap
// creation lock, in a TSan run of arena_lifecycle_test). This program creates nothing: the
// stages must be set before its first test runs.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "numarena/arena.hpp"
#include "numarena/budget.hpp"
#include "numarena/memory_resource.hpp"
#include "os/fork.hpp"

namespace numarena {
namespace {

// Referenced, never called: the files that own the stages (the allocator, the budget, the
// adapters) are linked into this program as into any user of them.
using BudgetCreate = StatusOr<std::unique_ptr<Budget>> (*)(BudgetOptions, std::vector<int>);
const void* volatile const kLinked[] = {
    reinterpret_cast<const void*>(&Arena::Create),
    reinterpret_cast<const void*>(static_cast<BudgetCreate>(&Budget::Create)),
    reinterpret_cast<const void*>(&policy_resource)};

TEST_CASE("every fork stage with a prepare or child step is set before anything is created") {
  for (const void* linked : kLinked) REQUIRE(linked != nullptr);
  using os::ForkStage;
  for (ForkStage stage : {ForkStage::kResources, ForkStage::kArenaRegistry, ForkStage::kNodeHeaps,
                          ForkStage::kHeapCreation, ForkStage::kHeapLifecycle,
                          ForkStage::kCheckedTable, ForkStage::kBudgets, ForkStage::kProviderLocks,
                          ForkStage::kCallbackLocks, ForkStage::kMemoryReturn}) {
    INFO("stage " << static_cast<int>(stage));
    const os::ForkStageHandlers* handlers = os::ForkStageOf(stage);
    REQUIRE(handlers != nullptr);
    CHECK(handlers->child != nullptr);
  }
}

}  // namespace
}  // namespace numarena
