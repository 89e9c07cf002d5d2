// Budget misuse is contained: a Release without its Charge (or twice, or with another
// priority) cannot open the budget to charges it must refuse, and is counted; a Priority
// outside the enum is refused instead of indexing past the per-class arrays (UBSan runs this
// in the ASan build); node ids beyond any NUMA id are InvalidArgument, not bad_alloc.
#include <catch2/catch.hpp>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "numarena/budget.hpp"

namespace numarena {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

std::unique_ptr<Budget> QuotaBudget(std::uint64_t quota, std::vector<int> nodes = {0}) {
  BudgetOptions options;
  options.mode = BudgetMode::kQuota;
  options.default_quota_bytes = quota;
  auto budget = Budget::Create(options, std::move(nodes));
  REQUIRE(budget.ok());
  return *std::move(budget);
}

// Charges `step` at a time until the budget refuses; returns the bytes it accepted.
std::uint64_t ChargeUntilRefused(Budget& budget, std::uint64_t step, Priority priority) {
  std::uint64_t accepted = 0;
  for (int i = 0; i < 100'000; ++i) {
    if (!budget.Charge(0, step, priority).ok()) break;
    accepted += step;
  }
  return accepted;
}

}  // namespace

TEST_CASE("an unmatched Release does not let charges pass the quota") {
  auto budget = QuotaBudget(100 * kMiB);
  budget->Release(0, 1023 * kMiB, Priority::kNormal);  // nothing was charged
  CHECK(budget->usage(0) == 0);
  const NodeBudgetSnapshot after_release = *budget->Snapshot().node(0);
  CHECK(after_release.unmatched_releases == 1);
  CHECK(after_release.unmatched_release_bytes == 1023 * kMiB);
  CHECK(after_release.by_priority[static_cast<int>(Priority::kNormal)] == 0);

  // Normal priority stops at trip (90 % of 100 MiB), as if the Release had not happened.
  const std::uint64_t accepted = ChargeUntilRefused(*budget, kMiB, Priority::kNormal);
  CHECK(accepted == 90 * kMiB);
  CHECK(budget->usage(0) == 90 * kMiB);
  CHECK(budget->state(0) == NodeState::kTripped);
}

TEST_CASE("a double Release and a Release with another priority release only what is held") {
  auto budget = QuotaBudget(100 * kMiB);
  REQUIRE(budget->Charge(0, 10 * kMiB, Priority::kNormal).ok());
  REQUIRE(budget->Charge(0, 5 * kMiB, Priority::kLow).ok());

  budget->Release(0, 10 * kMiB, Priority::kHigh);  // high holds nothing
  CHECK(budget->usage(0) == 15 * kMiB);

  budget->Release(0, 10 * kMiB, Priority::kNormal);
  budget->Release(0, 10 * kMiB, Priority::kNormal);  // the second one is unmatched
  CHECK(budget->usage(0) == 5 * kMiB);

  budget->Release(0, 8 * kMiB, Priority::kLow);  // 3 MiB more than low holds
  CHECK(budget->usage(0) == 0);

  const NodeBudgetSnapshot n = *budget->Snapshot().node(0);
  CHECK(n.unmatched_releases == 3);
  CHECK(n.unmatched_release_bytes == (10 + 10 + 3) * kMiB);
  for (std::int64_t held : n.by_priority) CHECK(held == 0);
  CHECK(n.numarena_bytes() == 0);
  // And the budget still refuses at trip.
  CHECK(ChargeUntilRefused(*budget, kMiB, Priority::kNormal) == 90 * kMiB);
}

TEST_CASE("a Priority outside the enum is refused by Charge and ignored by Release and Admit") {
  auto budget = QuotaBudget(100 * kMiB);
  REQUIRE(budget->Charge(0, kMiB, Priority::kNormal).ok());
  for (int bad : {3, 4, 7, 255}) {
    INFO("priority " << bad);
    const auto priority = static_cast<Priority>(bad);
    Status charged = budget->Charge(0, kMiB, priority);
    CHECK(charged.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(charged.message()), Catch::Contains("is not a Priority"));
    budget->Release(0, kMiB, priority);
    CHECK(budget->Admit(0, kMiB, priority) == Admission::kNever);
  }
  CHECK(budget->usage(0) == kMiB);
  const NodeBudgetSnapshot n = *budget->Snapshot().node(0);
  CHECK(n.unmatched_releases == 4);
  CHECK(n.by_priority[static_cast<int>(Priority::kNormal)] == static_cast<std::int64_t>(kMiB));
  CHECK(n.refusals == 0);  // not a capacity refusal
}

TEST_CASE("Budget::Create refuses node ids beyond any NUMA node id") {
  BudgetOptions options;
  options.mode = BudgetMode::kQuota;
  options.default_quota_bytes = 100 * kMiB;
  for (int id : {INT_MAX, kMaxBudgetNodeId, kMaxBudgetNodeId + 1}) {
    INFO("node " << id);
    auto budget = Budget::Create(options, std::vector<int>{0, id});
    REQUIRE_FALSE(budget.ok());
    CHECK(budget.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(budget.status().message()), Catch::Contains("is not a NUMA node id"));
  }
  auto highest = Budget::Create(options, std::vector<int>{kMaxBudgetNodeId - 1});
  REQUIRE(highest.ok());
  CHECK((*highest)->Charge(kMaxBudgetNodeId - 1, kMiB, Priority::kNormal).ok());
}

}  // namespace numarena
