// What the per-node memory budget costs (include/numarena/budget.hpp).
//
//   BM_AtomicAddSub              the floor: one fetch_add and one fetch_sub on a shared atomic
//   BM_ChargeRelease/<mode>      Budget::Charge + Budget::Release of a 64 KiB span, quota and
//                                system mode, one and two threads on the same node
//   BM_ArenaAllocFree/<size>/<gate>/<commit>
//                                Arena::ForNode(0) allocate + deallocate of 64 KiB or 2 MiB,
//                                without (gate=0) and with (gate=1) a System-mode budget
//                                installed as the capacity gate. commit=0: steady state
//                                (jemalloc reuses its extents, the provider is not asked);
//                                commit=1: the arena is purged after every free, so every
//                                allocation commits a span and charges the gate, and every
//                                purge releases it: the gate's worst case.
// Compare the gate=0 and gate=1 rows of the same size in the same run; absolute times on
// shared machines drift.
//
//   build/bench/budget_bench --benchmark_out=budget.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "numarena/arena.hpp"
#include "numarena/budget.hpp"
#include "numarena/topology.hpp"

namespace {

using numarena::Budget;
using numarena::BudgetMode;
using numarena::BudgetOptions;
using numarena::Priority;

constexpr std::size_t kSpan = 64 * 1024;

Budget& SharedBudget(BudgetMode mode) {
  auto make = [](BudgetMode m) {
    BudgetOptions options;
    options.mode = m;
    options.default_quota_bytes = std::uint64_t{1} << 40;  // never refuses
    auto topology = numarena::Topology::system();
    if (!topology.ok()) {
      std::fprintf(stderr, "budget_bench: %s\n", std::string(topology.status().message()).c_str());
      std::exit(2);
    }
    auto budget = Budget::Create(options, **topology);
    if (!budget.ok()) {
      std::fprintf(stderr, "budget_bench: %s\n", std::string(budget.status().message()).c_str());
      std::exit(2);
    }
    return *std::move(budget);
  };
  static std::unique_ptr<Budget> quota = make(BudgetMode::kQuota);
  static std::unique_ptr<Budget> system = make(BudgetMode::kSystem);
  return mode == BudgetMode::kQuota ? *quota : *system;
}

int FirstNode() {
  static const int node = numarena::Topology::system().value()->nodes().front().id;
  return node;
}

void BM_AtomicAddSub(benchmark::State& state) {
  static std::atomic<std::int64_t> counter{0};
  for (auto _ : state) {
    counter.fetch_add(kSpan, std::memory_order_relaxed);
    counter.fetch_sub(kSpan, std::memory_order_relaxed);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AtomicAddSub)->Threads(1)->Threads(2);

void BM_ChargeRelease(benchmark::State& state) {
  const auto mode = state.range(0) == 0 ? BudgetMode::kQuota : BudgetMode::kSystem;
  Budget& budget = SharedBudget(mode);
  const int node = FirstNode();
  state.SetLabel(numarena::BudgetModeName(mode));
  for (auto _ : state) {
    if (!budget.Charge(node, kSpan, Priority::kNormal).ok()) {
      state.SkipWithError("the budget refused");
      break;
    }
    budget.Release(node, kSpan, Priority::kNormal);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ChargeRelease)->Arg(0)->Arg(1)->Threads(1)->Threads(2);

void BM_ArenaAllocFree(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const bool gated = state.range(1) != 0;
  const bool commit_each = state.range(2) != 0;
  auto arena = numarena::Arena::ForNode(FirstNode());
  if (!arena.ok()) {
    state.SkipWithError(std::string(arena.status().message()).c_str());
    return;
  }
  // Nothing committed while the gate changes, so every charge is released to its gate.
  (*arena)->purge();
  numarena::SetCapacityGate(gated ? &SharedBudget(BudgetMode::kSystem) : nullptr);
  for (auto _ : state) {
    void* p = (*arena)->allocate(size);
    if (p == nullptr) {
      state.SkipWithError("allocation failed");
      break;
    }
    benchmark::DoNotOptimize(p);
    numarena::deallocate(p);
    if (commit_each) (*arena)->purge();
  }
  (*arena)->purge();
  numarena::SetCapacityGate(nullptr);
  state.SetLabel(gated ? "gated" : "no gate");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ArenaAllocFree)
    ->ArgNames({"size", "gate", "commit"})
    ->Args({64 << 10, 0, 0})
    ->Args({64 << 10, 1, 0})
    ->Args({2 << 20, 0, 0})
    ->Args({2 << 20, 1, 0})
    ->Args({64 << 10, 0, 1})
    ->Args({64 << 10, 1, 1})
    ->Args({2 << 20, 0, 1})
    ->Args({2 << 20, 1, 1});

}  // namespace
