// Unit tests of the per-node memory budget (include/numarena/budget.hpp): the state machine
// and its hysteresis on synthetic capacities, admission answers, priority weights, reclaim
// hooks (order, failures, no recursion), listeners, System mode through an injected reader,
// and concurrent charging (run under TSan in build-*-tsan).
#include "numarena/budget.hpp"
#include "os/os.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "budget/budget_system.hpp"

namespace numarena {
namespace {

using std::chrono::milliseconds;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
// A quota of one million bytes makes every threshold a round number: warn 800'000,
// admission 850'000, trip 900'000, hysteresis 50'000, gentle reclaim 10'000.
constexpr std::uint64_t kCap = 1'000'000;

std::unique_ptr<Budget> QuotaBudget(std::vector<int> nodes = {0}, std::uint64_t quota = kCap,
                                    PriorityWeights weights = {}) {
  BudgetOptions options;
  options.mode = BudgetMode::kQuota;
  options.default_quota_bytes = quota;
  options.weights = weights;
  auto budget = Budget::Create(options, std::move(nodes));
  REQUIRE(budget.ok());
  return *std::move(budget);
}

std::string Message(const Status& s) { return std::string(s.message()); }

// A SystemReader over an in-memory file map that tests change while the budget runs.
class FakeReader final : public SystemReader {
 public:
  void Set(const std::string& path, std::string content) {
    std::lock_guard<std::mutex> lock(mutex_);
    files_[path] = std::move(content);
    ++version_;
  }
  void Erase(const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex_);
    files_.erase(path);
  }
  void SetNode(int node, std::uint64_t total, std::uint64_t free) {
    Set(absl::StrCat("/sys/devices/system/node/node", node, "/meminfo"),
        absl::StrCat("Node ", node, " MemTotal:       ", total / 1024, " kB\n", "Node ", node,
                     " MemFree:        ", free / 1024, " kB\n", "Node ", node,
                     " MemUsed:        ", (total - free) / 1024, " kB\n"));
  }
  StatusOr<std::string> Read(const std::string& path) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++reads_;
    auto it = files_.find(path);
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return it->second;
  }
  StatusOr<std::vector<std::string>> List(const std::string& path) const override {
    return absl::NotFoundError(absl::StrCat(path, ": no such directory"));
  }
  int reads() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return reads_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::string> files_;
  mutable int reads_ = 0;
  int version_ = 0;
};

BudgetOptions SystemOptions(std::shared_ptr<FakeReader> reader, milliseconds interval) {
  BudgetOptions options;
  options.mode = BudgetMode::kSystem;
  options.reader = std::move(reader);
  options.refresh_interval = interval;
  return options;
}

// ---- creation ------------------------------------------------------------------------

TEST_CASE("Create rejects bad options with a message naming the problem") {
  auto expect_invalid = [](BudgetOptions options, std::vector<int> nodes, const char* needle) {
    auto budget = Budget::Create(options, nodes);
    REQUIRE_FALSE(budget.ok());
    CHECK(budget.status().code() == absl::StatusCode::kInvalidArgument);
    INFO(Message(budget.status()));
    CHECK(Message(budget.status()).find(needle) != std::string::npos);
  };
  BudgetOptions quota;
  quota.mode = BudgetMode::kQuota;
  quota.default_quota_bytes = kCap;

  expect_invalid(quota, {}, "no nodes");
  expect_invalid(quota, {0, 0}, "node 0 is listed twice");
  expect_invalid(quota, {-1, 0}, "negative");
  BudgetOptions o = quota;
  o.thresholds.warn = 0.95;
  expect_invalid(o, {0}, "need warn <= 1 - headroom <= trip");
  o = quota;
  o.thresholds.trip = 1.5;
  expect_invalid(o, {0}, "thresholds.trip is 1.5");
  o = quota;
  o.thresholds.hysteresis = 0.9;
  expect_invalid(o, {0}, "hysteresis");
  o = quota;
  o.weights.low = 0;
  expect_invalid(o, {0}, "weights.low");
  o = quota;
  o.default_quota_bytes = 0;
  o.quotas = {{0, kCap}};
  expect_invalid(o, {0, 1}, "node 1 has no quota");
  o.quotas = {{0, kCap}, {7, kCap}};
  expect_invalid(o, {0, 1}, "node 7 is not one of the budget's nodes (0,1)");
}

TEST_CASE("Quota mode: per-node quotas, sparse node ids, unknown nodes") {
  BudgetOptions options;
  options.mode = BudgetMode::kQuota;
  options.quotas = {{0, 4 * kMiB}, {4, 8 * kMiB}};
  auto budget = Budget::Create(options, {4, 0});
  REQUIRE(budget.ok());
  Budget& b = **budget;
  CHECK(b.node_ids() == std::vector<int>{0, 4});
  CHECK(b.capacity(0) == 4 * kMiB);
  CHECK(b.capacity(4) == 8 * kMiB);
  Status s = b.Charge(2, 4096, Priority::kNormal);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Message(s).find("node 2 is not one of the budget's nodes (0,4)") != std::string::npos);
  b.Release(2, 4096, Priority::kNormal);  // ignored
  CHECK(b.Admit(2, 1) == Admission::kNever);
  REQUIRE(b.Charge(4, kMiB, Priority::kNormal).ok());
  CHECK(b.usage(4) == kMiB);
  CHECK(b.usage(0) == 0);
}

// ---- the state machine ---------------------------------------------------------------

TEST_CASE("States rise at warn / admission / trip and fall only a margin below") {
  auto budget = QuotaBudget();
  Budget& b = *budget;
  std::vector<std::pair<NodeState, NodeState>> seen;
  b.AddListener([&](const BudgetEvent& e) { seen.push_back({e.from, e.to}); });

  REQUIRE(b.Charge(0, 799'999, Priority::kNormal).ok());
  CHECK(b.state(0) == NodeState::kNormal);
  REQUIRE(b.Charge(0, 1, Priority::kNormal).ok());  // 800'000: warn
  CHECK(b.state(0) == NodeState::kWarn);
  REQUIRE(b.Charge(0, 50'000, Priority::kNormal).ok());  // 850'000: admission closed
  CHECK(b.state(0) == NodeState::kAdmissionClosed);
  REQUIRE(b.Charge(0, 50'000, Priority::kNormal).ok());  // 900'000: exactly trip
  CHECK(b.state(0) == NodeState::kTripped);
  CHECK(b.usage(0) == 900'000);

  // Hysteresis: tripped until below 850'000, closed until below 800'000, warn until
  // below 750'000.
  b.Release(0, 40'000, Priority::kNormal);  // 860'000
  CHECK(b.state(0) == NodeState::kTripped);
  b.Release(0, 10'000, Priority::kNormal);  // 850'000 is not below 850'000
  CHECK(b.state(0) == NodeState::kTripped);
  b.Release(0, 1, Priority::kNormal);  // 849'999
  CHECK(b.state(0) == NodeState::kAdmissionClosed);
  b.Release(0, 49'999, Priority::kNormal);  // 800'000
  CHECK(b.state(0) == NodeState::kAdmissionClosed);
  b.Release(0, 1, Priority::kNormal);  // 799'999
  CHECK(b.state(0) == NodeState::kWarn);
  b.Release(0, 49'999, Priority::kNormal);  // 750'000
  CHECK(b.state(0) == NodeState::kWarn);
  b.Release(0, 1, Priority::kNormal);  // 749'999
  CHECK(b.state(0) == NodeState::kNormal);
  // And back up through every state again in one charge.
  REQUIRE(b.Charge(0, 150'001, Priority::kHigh).ok());  // 900'000
  CHECK(b.state(0) == NodeState::kTripped);
  // One large release falls through several states at once (each class gives back what it
  // charged: a Release never takes more than its priority holds).
  b.Release(0, 150'001, Priority::kHigh);  // 749'999
  CHECK(b.state(0) == NodeState::kNormal);
  b.Release(0, 749'999, Priority::kNormal);

  using S = NodeState;
  const std::vector<std::pair<S, S>> expected = {{S::kNormal, S::kWarn},
                                                 {S::kWarn, S::kAdmissionClosed},
                                                 {S::kAdmissionClosed, S::kTripped},
                                                 {S::kTripped, S::kAdmissionClosed},
                                                 {S::kAdmissionClosed, S::kWarn},
                                                 {S::kWarn, S::kNormal},
                                                 {S::kNormal, S::kTripped},
                                                 {S::kTripped, S::kNormal}};
  CHECK(seen == expected);
  BudgetSnapshot snap = b.Snapshot();
  CHECK(snap.events == expected.size());
  CHECK(snap.node(0)->transitions == expected.size());
  CHECK(snap.node(0)->peak == 900'000);
  CHECK(snap.node(0)->usage == 0);
}

TEST_CASE("A budget asks numarena's caches to shrink from its warn line on") {
  auto budget = QuotaBudget({0, 1});
  Budget& b = *budget;
  CapacityGate& gate = b;  // the caches ask through the gate interface
  REQUIRE(b.Charge(0, 799'999, Priority::kNormal).ok());
  CHECK_FALSE(gate.CachesShouldShrink(0));
  REQUIRE(b.Charge(0, 1, Priority::kNormal).ok());  // 800'000: warn
  CHECK(gate.CachesShouldShrink(0));
  CHECK_FALSE(gate.CachesShouldShrink(1));  // only the node at its warn line
  CHECK_FALSE(gate.CachesShouldShrink(7));  // a node the budget does not know
  b.Release(0, 50'001, Priority::kNormal);  // 749'999: back to normal
  CHECK_FALSE(gate.CachesShouldShrink(0));
  b.Release(0, 749'999, Priority::kNormal);
}

TEST_CASE("Tripped: normal and low are refused with a useful message, high goes to capacity") {
  auto budget = QuotaBudget({0, 1});
  Budget& b = *budget;
  REQUIRE(b.Charge(1, 880'000, Priority::kNormal).ok());
  CHECK(b.state(1) == NodeState::kAdmissionClosed);
  // Passing trip is refused and trips the node.
  Status s = b.Charge(1, 30'000, Priority::kNormal);
  REQUIRE(s.code() == absl::StatusCode::kResourceExhausted);
  const std::string m = Message(s);
  INFO(m);
  CHECK(m.find("on node 1") != std::string::npos);
  CHECK(m.find("usage 859.4 KiB of capacity 976.6 KiB (88.0%)") != std::string::npos);
  CHECK(m.find("state tripped") != std::string::npos);
  CHECK(m.find("trip threshold 90.0%") != std::string::npos);
  CHECK(m.find("PriorityScope") != std::string::npos);
  CHECK(b.state(1) == NodeState::kTripped);
  CHECK(b.usage(1) == 880'000);
  // Tripped: even a charge that would fit below trip is refused for normal and low.
  CHECK(b.Charge(1, 1'000, Priority::kNormal).code() == absl::StatusCode::kResourceExhausted);
  CHECK(b.Charge(1, 1'000, Priority::kLow).code() == absl::StatusCode::kResourceExhausted);
  // High priority may use everything up to the capacity, not a byte more.
  REQUIRE(b.Charge(1, 120'000, Priority::kHigh).ok());
  CHECK(b.usage(1) == kCap);
  s = b.Charge(1, 1, Priority::kHigh);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK(Message(s).find("high priority may not pass the capacity") != std::string::npos);
  // The other node is untouched.
  CHECK(b.state(0) == NodeState::kNormal);
  REQUIRE(b.Charge(0, 1'000, Priority::kNormal).ok());
  BudgetSnapshot snap = b.Snapshot();
  CHECK(snap.node(1)->refusals == 4);
  CHECK(snap.node(0)->refusals == 0);
  CHECK(snap.node(1)->by_priority[int(Priority::kHigh)] == 120'000);
  CHECK(snap.node(1)->by_priority[int(Priority::kNormal)] == 880'000);
}

TEST_CASE("One oversized request on a roomy node is refused without tripping it") {
  auto budget = QuotaBudget();
  Budget& b = *budget;
  REQUIRE(b.Charge(0, 100'000, Priority::kNormal).ok());
  CHECK(b.Charge(0, 900'000, Priority::kNormal).code() == absl::StatusCode::kResourceExhausted);
  CHECK(b.state(0) == NodeState::kNormal);
  CHECK(b.Snapshot().events == 0);
  REQUIRE(b.Charge(0, 800'000, Priority::kNormal).ok());
  CHECK(b.state(0) == NodeState::kTripped);
}

// ---- admission -----------------------------------------------------------------------

TEST_CASE("Admit answers ok / later / never, high priority uses the headroom") {
  auto budget = QuotaBudget();
  Budget& b = *budget;
  CHECK(b.Admit(0, 100'000, Priority::kNormal) == Admission::kOk);
  CHECK(b.Admit(0, 850'000, Priority::kNormal) == Admission::kOk);
  CHECK(b.Admit(0, 850'001, Priority::kNormal) == Admission::kNever);  // past 1 - headroom
  CHECK(b.Admit(0, 500'001, Priority::kLow) == Admission::kNever);     // past low's weight
  CHECK(b.Admit(0, kCap, Priority::kHigh) == Admission::kOk);
  CHECK(b.Admit(0, kCap + 1, Priority::kHigh) == Admission::kNever);

  REQUIRE(b.Charge(0, 800'000, Priority::kNormal).ok());  // warn: admission still open
  CHECK(b.state(0) == NodeState::kWarn);
  CHECK(b.Admit(0, 50'000, Priority::kNormal) == Admission::kOk);
  CHECK(b.Admit(0, 50'001, Priority::kNormal) == Admission::kLater);  // would pass 85 %
  CHECK(b.Admit(0, 200'000, Priority::kHigh) == Admission::kOk);

  REQUIRE(b.Charge(0, 60'000, Priority::kNormal).ok());  // 860'000: admission closed
  CHECK(b.state(0) == NodeState::kAdmissionClosed);
  CHECK(b.Admit(0, 1, Priority::kNormal) == Admission::kLater);
  CHECK(b.Admit(0, 1, Priority::kLow) == Admission::kLater);
  CHECK(b.Admit(0, 140'000, Priority::kHigh) == Admission::kOk);  // the headroom
  CHECK(b.Admit(0, 140'001, Priority::kHigh) == Admission::kLater);
  // Already-admitted work keeps allocating while admission is closed.
  REQUIRE(b.Charge(0, 30'000, Priority::kNormal).ok());

  // Admission reopens only once the state falls back below the margin.
  b.Release(0, 90'000, Priority::kNormal);  // 800'000: still closed (hysteresis)
  CHECK(b.Admit(0, 1, Priority::kNormal) == Admission::kLater);
  b.Release(0, 1, Priority::kNormal);
  CHECK(b.state(0) == NodeState::kWarn);
  CHECK(b.Admit(0, 1, Priority::kNormal) == Admission::kOk);
}

// ---- priority weights ----------------------------------------------------------------

TEST_CASE("Priority weights cap what each class may hold of a node") {
  SECTION("defaults: low may hold half a node") {
    auto budget = QuotaBudget();
    Budget& b = *budget;
    REQUIRE(b.Charge(0, 500'000, Priority::kLow).ok());
    Status s = b.Charge(0, 1, Priority::kLow);
    REQUIRE(s.code() == absl::StatusCode::kResourceExhausted);
    INFO(Message(s));
    CHECK(Message(s).find("low-priority work already holds") != std::string::npos);
    CHECK(Message(s).find("PriorityWeights") != std::string::npos);
    // A class limit does not trip the node, and other classes still charge.
    CHECK(b.state(0) == NodeState::kNormal);
    REQUIRE(b.Charge(0, 300'000, Priority::kNormal).ok());
    b.Release(0, 100'000, Priority::kLow);
    REQUIRE(b.Charge(0, 100'000, Priority::kLow).ok());
  }
  SECTION("custom weights") {
    auto budget = QuotaBudget({0}, kCap, PriorityWeights{1.0, 0.6, 0.2});
    Budget& b = *budget;
    REQUIRE(b.Charge(0, 200'000, Priority::kLow).ok());
    CHECK_FALSE(b.Charge(0, 1, Priority::kLow).ok());
    REQUIRE(b.Charge(0, 600'000, Priority::kNormal).ok());
    CHECK_FALSE(b.Charge(0, 1, Priority::kNormal).ok());
    CHECK(b.Admit(0, 1, Priority::kNormal) == Admission::kLater);
    CHECK(b.Admit(0, 600'001, Priority::kNormal) == Admission::kNever);
    REQUIRE(b.Charge(0, 200'000, Priority::kHigh).ok());
    auto snap = b.Snapshot();
    CHECK(snap.node(0)->by_priority == std::array<std::int64_t, 3>{200'000, 600'000, 200'000});
    CHECK(snap.node(0)->numarena_bytes() == kCap);
  }
}

// ---- reclaim -------------------------------------------------------------------------

// A stand-in for the KV pool: holds charged memory of one class and gives it back when a
// reclaim hook asks.
struct Pool {
  Budget& budget;
  int node;
  Priority priority;
  std::uint64_t held = 0;
  StatusOr<std::size_t> Free(std::size_t bytes) {
    const std::uint64_t n = std::min<std::uint64_t>(bytes, held);
    held -= n;
    budget.Release(node, n, priority);
    return n;
  }
};

TEST_CASE("Reclaim runs low first and makes room before a charge is refused") {
  auto budget = QuotaBudget();
  Budget& b = *budget;
  std::vector<std::string> order;
  std::vector<std::size_t> asked;
  Pool low_pool{b, 0, Priority::kLow};
  REQUIRE(b.Charge(0, 300'000, Priority::kLow).ok());
  low_pool.held = 300'000;
  b.AddReclaimHook(Priority::kHigh, "high", [&](int, std::size_t) -> StatusOr<std::size_t> {
    order.push_back("high");
    return 0;
  });
  b.AddReclaimHook(Priority::kNormal, "normal", [&](int, std::size_t) -> StatusOr<std::size_t> {
    order.push_back("normal");
    return 0;
  });
  b.AddReclaimHook(Priority::kLow, "low", [&](int node, std::size_t n) -> StatusOr<std::size_t> {
    CHECK(node == 0);
    order.push_back("low");
    asked.push_back(n);
    return low_pool.Free(std::min<std::size_t>(n, 20'000));  // frees only a little
  });
  REQUIRE(b.Charge(0, 600'000, Priority::kNormal).ok());  // 900'000: tripped
  // The rise into each state asked the hooks; the low hook came first every time.
  REQUIRE(order.size() >= 3);
  CHECK(order[0] == "low");
  CHECK(order[1] == "normal");
  CHECK(order[2] == "high");
  order.clear();
  asked.clear();

  // A charge that passes trip: the hooks run first (low first), then the charge is retried.
  low_pool.held = 0;  // nothing left to give: refused after reclaim
  const auto before = b.usage(0);
  Status s = b.Charge(0, 50'000, Priority::kNormal);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK(order == std::vector<std::string>{"low", "normal", "high"});
  CHECK(b.usage(0) == before);

  SECTION("a hook that frees enough lets the charge through") {
    // Hand the low pool memory to free (charged at high so the class has room).
    b.Release(0, 600'000, Priority::kNormal);  // 280'000 + 0 low: normal again
    REQUIRE(b.state(0) == NodeState::kNormal);
    REQUIRE(b.Charge(0, 200'000, Priority::kLow).ok());
    low_pool.held = 480'000;
    REQUIRE(b.Charge(0, 400'000, Priority::kNormal).ok());  // 880'000 (warn/closed asked)
    order.clear();
    low_pool.held = b.Snapshot().node(0)->by_priority[int(Priority::kLow)];
    b.RemoveReclaimHook(1);  // the "high" hook (first registered)
    auto hook_calls_before = b.Snapshot().node(0)->reclaim_runs;
    // A generous low hook now: frees whatever is asked.
    b.AddReclaimHook(Priority::kLow, "low-generous",
                     [&](int, std::size_t n) -> StatusOr<std::size_t> {
                       order.push_back("generous");
                       return low_pool.Free(n);
                     });
    const auto used = b.usage(0);
    REQUIRE(b.Charge(0, 100'000, Priority::kNormal).ok());  // would pass 900'000
    CHECK(b.Snapshot().node(0)->reclaim_runs == hook_calls_before + 1);
    CHECK(std::find(order.begin(), order.end(), "high") == order.end());
    CHECK(b.usage(0) < used + 100'000);
    CHECK(b.usage(0) <= 800'000);  // brought back under warn, then charged
  }
}

TEST_CASE("Warn asks the hooks for a gentle amount down to the warn line") {
  auto budget = QuotaBudget();
  Budget& b = *budget;
  std::vector<std::size_t> asked;
  b.AddReclaimHook(Priority::kLow, "probe", [&](int, std::size_t n) -> StatusOr<std::size_t> {
    asked.push_back(n);
    return 0;
  });
  REQUIRE(b.Charge(0, 820'000, Priority::kNormal).ok());
  // usage - warn + 1 % of capacity = 820'000 - 800'000 + 10'000.
  CHECK(asked == std::vector<std::size_t>{30'000});
  // No transition, no new request.
  REQUIRE(b.Charge(0, 10'000, Priority::kNormal).ok());
  CHECK(asked.size() == 1);
  auto snap = b.Snapshot();
  CHECK(snap.node(0)->reclaim_runs == 1);
  CHECK(snap.node(0)->reclaim_asked == 30'000);
  CHECK(snap.node(0)->reclaim_freed == 0);
  REQUIRE(snap.hooks.size() == 1);
  CHECK(snap.hooks[0].name == "probe");
  CHECK(snap.hooks[0].calls == 1);
}

TEST_CASE("Failing and throwing hooks are counted and never break allocation") {
  auto budget = QuotaBudget();
  Budget& b = *budget;
  int later_calls = 0;
  b.AddReclaimHook(Priority::kLow, "fails", [](int, std::size_t) -> StatusOr<std::size_t> {
    return absl::InternalError("pool is busy");
  });
  b.AddReclaimHook(Priority::kLow, "throws", [](int, std::size_t) -> StatusOr<std::size_t> {
    throw std::runtime_error("boom");
  });
  b.AddReclaimHook(Priority::kNormal, "after", [&](int, std::size_t) -> StatusOr<std::size_t> {
    ++later_calls;
    return 0;
  });
  // Normal -> admission closed in one step: one reclaim run.
  REQUIRE(b.Charge(0, 850'000, Priority::kNormal).ok());
  CHECK(later_calls == 1);
  CHECK(b.Charge(0, 100'000, Priority::kNormal).code() ==
        absl::StatusCode::kResourceExhausted);  // run 2, then refused cleanly
  CHECK(later_calls == 2);
  auto snap = b.Snapshot();
  CHECK(snap.node(0)->hook_failures == 4);
  CHECK(snap.node(0)->reclaim_runs == 2);
  REQUIRE(snap.hooks.size() == 3);
  CHECK(snap.hooks[0].name == "fails");
  CHECK(snap.hooks[0].failures == 2);
  CHECK(snap.hooks[1].failures == 2);
  CHECK(snap.hooks[2].failures == 0);
  CHECK(b.usage(0) == 850'000);
}

TEST_CASE("A hook that allocates does not start another reclaim") {
  auto budget = QuotaBudget({0, 1});
  Budget& b = *budget;
  int calls = 0;
  Status inner;
  b.AddReclaimHook(Priority::kLow, "allocates", [&](int, std::size_t) -> StatusOr<std::size_t> {
    ++calls;
    // Demoting to node 1 needs memory there; node 1 is tight too, so this charge would
    // trip it and (without the guard) reclaim again, into this hook.
    inner = b.Charge(1, 200'000, Priority::kNormal);
    return 0;
  });
  REQUIRE(b.Charge(1, 860'000, Priority::kHigh).ok());  // node 1 closed: the hook runs once
  CHECK(calls == 1);
  CHECK(inner.code() == absl::StatusCode::kResourceExhausted);  // inside: refused, no reclaim
  auto snap = b.Snapshot();
  CHECK(snap.node(1)->reclaim_runs == 1);
  CHECK(snap.node(1)->reclaim_skipped >= 1);
  CHECK(snap.node(1)->state == NodeState::kTripped);
  CHECK(b.Reclaim(1, 1000) == 0);  // public Reclaim runs the hook again (once)
  CHECK(calls == 2);
}

TEST_CASE("Removed hooks are not called, a hook may remove itself") {
  auto budget = QuotaBudget();
  Budget& b = *budget;
  int a = 0, c = 0;
  std::uint64_t self_id = 0;
  std::uint64_t id_a = b.AddReclaimHook(Priority::kLow, "a", [&](int, std::size_t) {
    ++a;
    return StatusOr<std::size_t>(0);
  });
  self_id = b.AddReclaimHook(Priority::kLow, "once", [&](int, std::size_t) {
    ++c;
    b.RemoveReclaimHook(self_id);
    return StatusOr<std::size_t>(0);
  });
  CHECK(b.Reclaim(0, 10) == 0);
  CHECK(a == 1);
  CHECK(c == 1);
  b.RemoveReclaimHook(id_a);
  CHECK(b.Reclaim(0, 10) == 0);
  CHECK(a == 1);
  CHECK(c == 1);
  CHECK(b.Snapshot().hooks.empty());
}

// ---- listeners -----------------------------------------------------------------------

TEST_CASE("Listeners hear every change in order, even ones raised inside a listener") {
  auto budget = QuotaBudget({0, 1});
  Budget& b = *budget;
  std::vector<std::string> log;
  bool charged_inside = false;
  b.AddListener([&](const BudgetEvent& e) {
    log.push_back(absl::StrCat(e.node, ":", NodeStateName(e.from), ">", NodeStateName(e.to)));
    if (e.node == 0 && e.to == NodeState::kWarn && !charged_inside) {
      charged_inside = true;
      // Raises node 1's own warn event while this one is being delivered.
      REQUIRE(b.Charge(1, 800'000, Priority::kNormal).ok());
      CHECK(log.size() == 1);  // not delivered recursively
    }
  });
  b.AddListener([](const BudgetEvent&) { throw std::runtime_error("listener bug"); });
  int third = 0;
  std::uint64_t third_id = b.AddListener([&](const BudgetEvent& e) {
    ++third;
    CHECK(e.capacity == kCap);
  });
  REQUIRE(b.Charge(0, 800'000, Priority::kNormal).ok());
  CHECK(log == std::vector<std::string>{"0:normal>warn", "1:normal>warn"});
  CHECK(third == 2);
  b.RemoveListener(third_id);
  b.Release(0, 800'000, Priority::kNormal);
  CHECK(log.back() == "0:warn>normal");
  CHECK(third == 2);
  auto snap = b.Snapshot();
  CHECK(snap.events == 3);
  CHECK(snap.listener_failures == 3);
  CHECK(snap.events_dropped == 0);
}

TEST_CASE("RecordFallback is counted on both nodes") {
  auto budget = QuotaBudget({0, 1});
  Budget& b = *budget;
  b.RecordFallback(0, 1);
  b.RecordFallback(0);
  b.RecordFallback(9, 1);  // unknown node: only the known side counts
  auto snap = b.Snapshot();
  CHECK(snap.node(0)->fallbacks_out == 2);
  CHECK(snap.node(1)->fallbacks_in == 2);
  CHECK(snap.node(1)->fallbacks_out == 0);
}

// ---- System mode ---------------------------------------------------------------------

TEST_CASE("System mode: capacity is MemTotal, usage the node's used memory plus our commits") {
  auto reader = std::make_shared<FakeReader>();
  reader->SetNode(0, 1000 * kMiB, 500 * kMiB);
  reader->SetNode(1, 2000 * kMiB, 1900 * kMiB);
  auto created = Budget::Create(SystemOptions(reader, milliseconds(0)), {0, 1});
  REQUIRE(created.ok());
  Budget& b = **created;
  CHECK(b.mode() == BudgetMode::kSystem);
  CHECK(b.capacity(0) == 1000 * kMiB);
  CHECK(b.usage(0) == 500 * kMiB);
  CHECK(b.usage(1) == 100 * kMiB);
  CHECK(b.state(0) == NodeState::kNormal);

  REQUIRE(b.Charge(0, 100 * kMiB, Priority::kNormal).ok());
  CHECK(b.usage(0) == 600 * kMiB);  // our commit counts before the kernel shows it
  // The kernel now shows our 100 MiB plus 150 MiB of someone else's.
  reader->SetNode(0, 1000 * kMiB, 250 * kMiB);
  REQUIRE(b.Refresh().ok());
  CHECK(b.usage(0) == 750 * kMiB);  // not 850: our commit is not counted twice
  CHECK(b.state(0) == NodeState::kNormal);
  // Someone else fills the node: the refresh moves the state and tells listeners.
  std::vector<NodeState> states;
  b.AddListener([&](const BudgetEvent& e) { states.push_back(e.to); });
  reader->SetNode(0, 1000 * kMiB, 80 * kMiB);  // 920 MiB used
  REQUIRE(b.Refresh().ok());
  CHECK(b.state(0) == NodeState::kTripped);
  CHECK(states == std::vector<NodeState>{NodeState::kTripped});
  Status s = b.Charge(0, kMiB, Priority::kNormal);
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK(Message(s).find("system mode") != std::string::npos);
  REQUIRE(b.Charge(0, kMiB, Priority::kHigh).ok());
  // Our release counts at once; the kernel's figure follows at the next refresh.
  b.Release(0, 100 * kMiB, Priority::kNormal);
  CHECK(b.usage(0) == 821 * kMiB);
  CHECK(b.state(0) == NodeState::kAdmissionClosed);
  reader->SetNode(0, 1000 * kMiB, 600 * kMiB);
  REQUIRE(b.Refresh().ok());
  CHECK(b.usage(0) == 400 * kMiB);
  CHECK(b.state(0) == NodeState::kNormal);
  auto snap = b.Snapshot();
  CHECK(snap.refreshes == 4);
  CHECK(snap.node(0)->mem_total == 1000 * kMiB);
  CHECK(snap.node(0)->mem_free == 600 * kMiB);
  CHECK(snap.node(0)->system_used == 400 * kMiB);
  CHECK(snap.node(0)->peak == 921 * kMiB);
  CHECK_FALSE(snap.cgroup_limit.has_value());
}

TEST_CASE("memory.stat's inactive_file line: found, absent, malformed, twice") {
  using numarena::budget_internal::ParseCgroupInactiveFile;
  const std::string path = "/sys/fs/cgroup/x/memory.stat";
  auto found = ParseCgroupInactiveFile("anon 5\ninactive_file 4096\nactive_file 7\n", path);
  REQUIRE(found.ok());
  CHECK(*found == std::optional<std::uint64_t>(4096));
  // "inactive_file_x" or a key that merely contains it is another key.
  auto absent = ParseCgroupInactiveFile("anon 5\ninactive_filex 3\nxinactive_file 3\n", path);
  REQUIRE(absent.ok());
  CHECK_FALSE(absent->has_value());
  CHECK(ParseCgroupInactiveFile("", path)->has_value() == false);
  for (const char* bad : {"inactive_file\n", "inactive_file -1\n", "inactive_file 1 2\n",
                          "inactive_file 99999999999999999999999\n", "inactive_file 0x10\n",
                          "inactive_file 1\ninactive_file 2\n"}) {
    INFO(bad);
    auto parsed = ParseCgroupInactiveFile(bad, path);
    CHECK(parsed.status().code() == absl::StatusCode::kDataLoss);
    CHECK(Message(parsed.status()).find(path) != std::string::npos);
  }
}

TEST_CASE("System mode: the cgroup's inactive page cache counts as free, as the node's does") {
  auto reader = std::make_shared<FakeReader>();
  reader->SetNode(0, 1000 * kMiB, 900 * kMiB);
  reader->Set("/proc/self/cgroup", "0::/pod\n");
  reader->Set("/sys/fs/cgroup/pod/memory.max", "419430400\n");      // 400 MiB
  reader->Set("/sys/fs/cgroup/pod/memory.current", "377487360\n");  // 360 MiB: 90 %
  // A server that just read its model files: 200 MiB of the 360 are inactive page cache.
  reader->Set("/sys/fs/cgroup/pod/memory.stat",
              "anon 94371840\nfile 283115520\nactive_anon 94371840\ninactive_anon 0\n"
              "active_file 73400320\ninactive_file 209715200\n");
  auto created = Budget::Create(SystemOptions(reader, milliseconds(0)), {0});
  REQUIRE(created.ok());
  Budget& b = **created;
  CHECK(b.capacity(0) == 400 * kMiB);
  CHECK(b.usage(0) == 160 * kMiB);
  CHECK(b.state(0) == NodeState::kNormal);
  auto snap = b.Snapshot();
  REQUIRE(snap.cgroup_inactive_file.has_value());
  CHECK(*snap.cgroup_inactive_file == 200 * kMiB);
  CHECK(*snap.cgroup_usage == 360 * kMiB);

  // Read a moment after memory.current, the cache may have grown past it: nothing below 0.
  reader->Set("/sys/fs/cgroup/pod/memory.stat", "inactive_file 524288000\n");
  REQUIRE(b.Refresh().ok());
  CHECK(b.usage(0) == 0);

  // Without the option every cached page counts as used: 360 of 400 MiB trips the budget.
  BudgetOptions strict = SystemOptions(reader, milliseconds(0));
  strict.inactive_file_is_free = false;
  auto counted = Budget::Create(strict, {0});
  REQUIRE(counted.ok());
  CHECK((*counted)->usage(0) == 360 * kMiB);
  CHECK((*counted)->state(0) == NodeState::kTripped);

  // No memory.stat (or no inactive_file line): memory.current alone, as before.
  reader->Erase("/sys/fs/cgroup/pod/memory.stat");
  REQUIRE(b.Refresh().ok());
  CHECK(b.usage(0) == 360 * kMiB);
  CHECK_FALSE(b.Snapshot().cgroup_inactive_file.has_value());

  // A malformed line fails the refresh, names the file and keeps the figures.
  reader->Set("/sys/fs/cgroup/pod/memory.stat", "inactive_file lots\n");
  Status s = b.Refresh();
  CHECK(s.code() == absl::StatusCode::kDataLoss);
  CHECK(Message(s).find("/sys/fs/cgroup/pod/memory.stat") != std::string::npos);
  CHECK(Message(s).find("inactive_file lots") != std::string::npos);
  CHECK(b.usage(0) == 360 * kMiB);
}

TEST_CASE("System mode: a lower cgroup memory.max is the capacity") {
  auto reader = std::make_shared<FakeReader>();
  reader->SetNode(0, 1000 * kMiB, 900 * kMiB);
  reader->Set("/proc/self/cgroup", "0::/svc/worker\n");
  reader->Set("/sys/fs/cgroup/svc/memory.max", "419430400\n");      // 400 MiB
  reader->Set("/sys/fs/cgroup/svc/memory.current", "314572800\n");  // 300 MiB
  reader->Set("/sys/fs/cgroup/svc/worker/memory.max", "max\n");
  auto created = Budget::Create(SystemOptions(reader, milliseconds(0)), {0});
  REQUIRE(created.ok());
  Budget& b = **created;
  CHECK(b.capacity(0) == 400 * kMiB);
  // The cgroup has 100 MiB left, less than the node's 900 MiB free: that decides.
  CHECK(b.usage(0) == 300 * kMiB);
  auto snap = b.Snapshot();
  REQUIRE(snap.cgroup_limit.has_value());
  CHECK(*snap.cgroup_limit == 400 * kMiB);
  CHECK(*snap.cgroup_usage == 300 * kMiB);
  // The node, not the cgroup, is the tighter one now.
  reader->SetNode(0, 1000 * kMiB, 20 * kMiB);
  REQUIRE(b.Refresh().ok());
  CHECK(b.usage(0) == 380 * kMiB);
  CHECK(b.state(0) == NodeState::kTripped);
  // A malformed limit fails the refresh, keeps the figures and is reported.
  reader->Set("/sys/fs/cgroup/svc/memory.max", "lots\n");
  Status s = b.Refresh();
  CHECK(s.code() == absl::StatusCode::kDataLoss);
  CHECK(Message(s).find("/sys/fs/cgroup/svc/memory.max") != std::string::npos);
  CHECK(b.usage(0) == 380 * kMiB);
  snap = b.Snapshot();
  CHECK(snap.refresh_failures == 1);
  CHECK(snap.last_refresh_error.find("lots") != std::string::npos);
  // Ignoring the cgroup: MemTotal is the capacity again.
  BudgetOptions options = SystemOptions(reader, milliseconds(0));
  options.respect_cgroup_limit = false;
  auto plain = Budget::Create(options, {0});
  REQUIRE(plain.ok());
  CHECK((*plain)->capacity(0) == 1000 * kMiB);
}

TEST_CASE("System mode: free pages on per-CPU lists are reported apart and counted as used") {
  auto reader = std::make_shared<FakeReader>();
  reader->SetNode(0, 1000 * kMiB, 600 * kMiB);
  reader->SetNode(1, 1000 * kMiB, 900 * kMiB);
  // Node 0 has 300 + 212 pages on two CPUs' lists (two zones), node 1 has none listed.
  reader->Set("/proc/zoneinfo",
              "Node 0, zone    DMA32\n  pages free     1000\n        low      30\n"
              "  pagesets\n    cpu: 0\n              count: 300\n              high:  900\n"
              "    cpu: 1\n              count: 200\n              high:  900\n"
              "  node_unreclaimable:  0\n"
              "Node 0, zone   Normal\n  pages free     2000\n  pagesets\n    cpu: 0\n"
              "              count: 12\n"
              "Node 1, zone   Normal\n  pages free     0\n");
  auto created = Budget::Create(SystemOptions(reader, milliseconds(0)), {0, 1});
  REQUIRE(created.ok());
  Budget& b = **created;
  const std::uint64_t page = numarena::os::PageSize();
  auto snap = b.Snapshot();
  CHECK(snap.node(0)->per_cpu_free == 512 * page);
  CHECK(snap.node(1)->per_cpu_free == 0);
  CHECK(b.usage(0) == 400 * kMiB);  // MemTotal - MemFree: the lists' pages count as used
  CHECK(snap.node(0)->system_used == 400 * kMiB);

  // Without the file (a fixture, an old kernel) there is nothing to report, and no error.
  reader->Erase("/proc/zoneinfo");
  REQUIRE(b.Refresh().ok());
  CHECK(b.Snapshot().node(0)->per_cpu_free == 0);
  // A malformed file fails the refresh, names the file and line, and keeps the figures.
  reader->Set("/proc/zoneinfo", "Node 0, zone DMA\n  pagesets\n    count: many\n");
  reader->SetNode(0, 1000 * kMiB, 100 * kMiB);
  Status s = b.Refresh();
  CHECK(s.code() == absl::StatusCode::kDataLoss);
  CHECK(Message(s).find("/proc/zoneinfo") != std::string::npos);
  CHECK(Message(s).find("line 3") != std::string::npos);
  CHECK(b.usage(0) == 400 * kMiB);
}

TEST_CASE("System mode: inactive page cache counts as free, active page cache as used") {
  // Node 0: 1000 MiB, 100 MiB free, 500 MiB Inactive(file) (a model file just read), 200 MiB
  // Active(file). Node 1 without the lines: a kernel or fixture that lacks them.
  auto reader = std::make_shared<FakeReader>();
  reader->Set("/sys/devices/system/node/node0/meminfo",
              "Node 0 MemTotal:        1024000 kB\nNode 0 MemFree:          102400 kB\n"
              "Node 0 Active(file):     204800 kB\nNode 0 Inactive(file):   512000 kB\n");
  reader->SetNode(1, 1000 * kMiB, 900 * kMiB);
  auto created = Budget::Create(SystemOptions(reader, milliseconds(0)), {0, 1});
  REQUIRE(created.ok());
  Budget& b = **created;
  CHECK(b.usage(0) == 400 * kMiB);  // 1000 - 100 free - 500 inactive cache
  CHECK(b.Snapshot().node(0)->inactive_file == 500 * kMiB);
  CHECK(b.Snapshot().node(0)->system_used == 400 * kMiB);
  CHECK(b.Snapshot().node(0)->state == NodeState::kNormal);
  CHECK(b.usage(1) == 100 * kMiB);
  CHECK(b.Snapshot().node(1)->inactive_file == 0);

  // Off: every cached page is used, and the node is past its trip line (900 of 1000 MiB).
  BudgetOptions strict = SystemOptions(reader, milliseconds(0));
  strict.inactive_file_is_free = false;
  auto counted = Budget::Create(strict, {0, 1});
  REQUIRE(counted.ok());
  CHECK((*counted)->usage(0) == 900 * kMiB);
  CHECK((*counted)->Snapshot().node(0)->state == NodeState::kTripped);

  // More inactive cache than used memory is a malformed file, named.
  reader->Set("/sys/devices/system/node/node0/meminfo",
              "Node 0 MemTotal: 1024000 kB\nNode 0 MemFree: 102400 kB\n"
              "Node 0 Inactive(file): 1000000 kB\n");
  Status s = b.Refresh();
  CHECK(s.code() == absl::StatusCode::kDataLoss);
  CHECK(Message(s).find("Inactive(file)") != std::string::npos);
  CHECK(Message(s).find("node0/meminfo") != std::string::npos);
  CHECK(b.usage(0) == 400 * kMiB);  // the figures of the last good reading stay
}

TEST_CASE("System mode: unreadable meminfo fails Create naming the file") {
  auto reader = std::make_shared<FakeReader>();
  reader->SetNode(0, 1000 * kMiB, 900 * kMiB);
  auto missing = Budget::Create(SystemOptions(reader, milliseconds(0)), {0, 1});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(Message(missing.status()).find("/sys/devices/system/node/node1/meminfo") !=
        std::string::npos);
  CHECK(Message(missing.status()).find("BudgetMode::kQuota") != std::string::npos);
  reader->Set("/sys/devices/system/node/node1/meminfo", "Node 1 MemTotal: 12 kB\n");
  auto malformed = Budget::Create(SystemOptions(reader, milliseconds(0)), {0, 1});
  REQUIRE_FALSE(malformed.ok());
  CHECK(malformed.status().code() == absl::StatusCode::kDataLoss);
  CHECK(Message(malformed.status()).find("no 'MemFree:' line") != std::string::npos);
  // A line that is not "Node <id> <Key>: <value> [kB]" is refused and named (the budget reads
  // meminfo with the topology's parser, parse::ParseNodeMeminfo).
  reader->Set("/sys/devices/system/node/node1/meminfo",
              "Node 1 MemTotal: 12 kB\nNode 1 MemFree: 1 kB\nMemUsed 3\n");
  auto bad_line = Budget::Create(SystemOptions(reader, milliseconds(0)), {0, 1});
  REQUIRE_FALSE(bad_line.ok());
  CHECK(bad_line.status().code() == absl::StatusCode::kDataLoss);
  CHECK(Message(bad_line.status()).find("line 3 'MemUsed 3'") != std::string::npos);
}

TEST_CASE("System mode: the background thread refreshes at the interval") {
  auto reader = std::make_shared<FakeReader>();
  reader->SetNode(0, 1000 * kMiB, 900 * kMiB);
  auto created = Budget::Create(SystemOptions(reader, milliseconds(5)), {0});
  REQUIRE(created.ok());
  Budget& b = **created;
  CHECK(b.usage(0) == 100 * kMiB);
  std::atomic<int> tripped{0};
  b.AddListener([&](const BudgetEvent& e) {
    if (e.to == NodeState::kTripped) tripped.fetch_add(1);
  });
  reader->SetNode(0, 1000 * kMiB, 50 * kMiB);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (b.usage(0) != 950 * kMiB && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  CHECK(b.usage(0) == 950 * kMiB);
  while (tripped.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  CHECK(tripped.load() == 1);  // delivered on the refresh thread
  CHECK(b.Snapshot().refreshes >= 2);
  CHECK(b.Snapshot().refresh_interval == milliseconds(5));
}

// ---- concurrency ---------------------------------------------------------------------

#if defined(__SANITIZE_THREAD__)
constexpr int kOpsPerThread = 150'000;  // TSan is ~10x slower; keep the test short
#else
constexpr int kOpsPerThread = 1'000'000;
#endif

TEST_CASE("Concurrent charges never pass the limit and usage returns exactly to zero") {
  constexpr std::uint64_t kSpan = 64 * 1024;
  constexpr std::uint64_t kQuota = 40 * kSpan;  // trip at 36 spans: hit constantly
  auto budget = QuotaBudget({0, 1}, kQuota);
  Budget& b = *budget;
  // Spans charged and not yet released, per priority; either thread may release any of
  // them, so releases come from the other thread about half the time.
  std::atomic<std::int64_t> outstanding[kPriorityCount] = {};
  std::atomic<std::uint64_t> refused{0}, charged{0};
  auto worker = [&](unsigned seed) {
    std::minstd_rand rng(seed);
    for (int i = 0; i < kOpsPerThread; ++i) {
      const auto p = static_cast<Priority>(rng() % 3);
      std::atomic<std::int64_t>& pool = outstanding[int(p)];
      if (rng() % 2 == 0) {
        if (b.Charge(0, kSpan, p).ok()) {
          pool.fetch_add(1);
          charged.fetch_add(1, std::memory_order_relaxed);
        } else {
          refused.fetch_add(1, std::memory_order_relaxed);
        }
      } else {
        std::int64_t n = pool.load();
        while (n > 0 && !pool.compare_exchange_weak(n, n - 1)) {
        }
        if (n > 0) b.Release(0, kSpan, p);
      }
    }
  };
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> max_seen{0};
  std::thread watcher([&] {
    while (!stop.load()) {
      std::uint64_t u = b.usage(0);
      if (u > max_seen.load()) max_seen.store(u);
      std::this_thread::yield();  // two cores: let the workers run
    }
  });
  const auto start = std::chrono::steady_clock::now();
  std::thread t1(worker, 1), t2(worker, 2);
  t1.join();
  t2.join();
  stop.store(true);
  watcher.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("charged " << charged.load() << ", refused " << refused.load() << " in " << seconds << " s");
  CHECK(charged.load() > 1000);
  CHECK(refused.load() > 0);
  // Release what is left; nothing may be lost or counted twice.
  for (int p = 0; p < kPriorityCount; ++p) {
    for (std::int64_t n = outstanding[p].exchange(0); n > 0; --n) {
      b.Release(0, kSpan, static_cast<Priority>(p));
    }
  }
  auto snap = b.Snapshot();
  CHECK(snap.node(0)->usage == 0);
  CHECK(snap.node(0)->by_priority == std::array<std::int64_t, 3>{0, 0, 0});
  // High priority may reach the capacity, normal and low never pass trip; the peak is the
  // exact maximum usage ever charged.
  CHECK(snap.node(0)->peak <= kQuota);
  CHECK(max_seen.load() <= kQuota);
  CHECK(snap.node(0)->state == NodeState::kNormal);
  CHECK(snap.node(1)->usage == 0);
}

TEST_CASE("Concurrent normal-priority charges never pass trip") {
  constexpr std::uint64_t kSpan = 2 * kMiB;
  constexpr std::uint64_t kQuota = 100 * kSpan;
  auto budget = QuotaBudget({0}, kQuota);
  Budget& b = *budget;
  const std::uint64_t trip = b.Snapshot().node(0)->trip_bytes;
  std::atomic<int> ready{0};
  auto worker = [&] {
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    for (int round = 0; round < kOpsPerThread / 400; ++round) {
      int held = 0;
      while (b.Charge(0, kSpan, Priority::kNormal).ok()) ++held;
      for (; held > 0; --held) b.Release(0, kSpan, Priority::kNormal);
    }
  };
  std::thread t1(worker), t2(worker);
  t1.join();
  t2.join();
  auto snap = b.Snapshot();
  CHECK(snap.node(0)->peak == trip);  // reached exactly, never passed
  CHECK(snap.node(0)->usage == 0);
  CHECK(snap.node(0)->state == NodeState::kNormal);
}

// ---- the `numarena budget` command ---------------------------------------------------

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

CommandResult RunCli(const std::string& args) {
  CommandResult result;
  const std::string command = std::string(NUMARENA_CLI) + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  const int raw = ::pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return result;
}

TEST_CASE("numarena budget shows a recorded machine's nodes") {
  const std::string sys = std::string(NUMARENA_FIXTURES) + "/xeon-2s/sys";
  CommandResult json = RunCli("budget --json --sysfs-root " + sys);
  INFO(json.output);
  REQUIRE(json.status == 0);
  CHECK(json.output.find("\"schema\":\"numarena.budget/1\",\"mode\":\"system\"") !=
        std::string::npos);
  // Node 0: MemTotal 268435456 kB, MemFree 204800000 kB.
  CHECK(json.output.find("{\"id\":0,\"state\":\"normal\",\"capacity_bytes\":274877906944,"
                         "\"usage_bytes\":65162706944,") != std::string::npos);
  CHECK(json.output.find("\"id\":1,") != std::string::npos);

  CommandResult text = RunCli("budget --sysfs-root " + sys);
  INFO(text.output);
  REQUIRE(text.status == 0);
  CHECK(text.output.find("warn 80.0%, admission closes 85.0%, trip 90.0%") != std::string::npos);
  CHECK(text.output.find("256.0 GiB   60.7 GiB") != std::string::npos);

  CommandResult bad = RunCli("budget --frobnicate");
  CHECK(bad.status == 2);
  CHECK(bad.output.find("numarena budget: unknown option '--frobnicate'") != std::string::npos);
}

TEST_CASE("numarena budget applies a cgroup memory.max and shows the state it causes") {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("numarena-budget-test-" + std::to_string(::getpid()));
  auto write = [&](const std::string& rel, const std::string& content) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << content;
  };
  write("sys/devices/system/node/online", "0\n");
  write("sys/devices/system/node/node0/cpulist", "0-3\n");
  write("sys/devices/system/node/node0/distance", "10\n");
  write("sys/devices/system/node/node0/meminfo",
        "Node 0 MemTotal:       16777216 kB\nNode 0 MemFree:        12582912 kB\n");
  write("proc/self/cgroup", "0::/inference\n");
  write("sys/fs/cgroup/inference/memory.max", "4294967296\n");      // 4 GiB
  write("sys/fs/cgroup/inference/memory.current", "3758096384\n");  // 3.5 GiB: 87.5 %
  CommandResult text = RunCli("budget --sysfs-root " + (root / "sys").string());
  INFO(text.output);
  CHECK(text.status == 0);
  CHECK(text.output.find("cgroup memory.max 4.0 GiB (memory.current 3.5 GiB)") !=
        std::string::npos);
  CHECK(text.output.find("4.0 GiB     3.5 GiB     87.5%    admission-closed") != std::string::npos);

  fs::remove(root / "sys/devices/system/node/node0/meminfo");
  CommandResult missing = RunCli("budget --sysfs-root " + (root / "sys").string());
  CHECK(missing.status == 2);
  CHECK(missing.output.find("node0/meminfo") != std::string::npos);
  fs::remove_all(root);
}

}  // namespace
}  // namespace numarena
