// The per-node memory budget (see include/numarena/budget.hpp).
//
// Each node keeps its usage in one atomic that every charge moves by compare-and-swap
// against the limit of the charging priority (trip for normal and low, the capacity for
// high), so no interleaving of threads can push usage past that limit. A class's own usage
// is a second atomic checked the same way against its weight. The state is a third atomic;
// after every change of usage the charging (or releasing, or refreshing) thread checks
// whether usage left the band of the current state and, if so, moves the state with a CAS.
// The thread whose CAS wins delivers the event and, for a rise, asks the reclaim hooks for
// memory: the slow work happens once per transition, on one thread, outside any lock.
//
// System mode keeps `usage = system_base + since_refresh`: system_base is the kernel's used
// memory at the last refresh, since_refresh numarena's net charges after it. A refresh
// swaps in the new base and subtracts what since_refresh held at that moment, in one
// fetch_add on usage, so charges racing with it are neither lost nor counted twice.
#include "numarena/budget.hpp"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "budget/budget_callbacks.hpp"
#include "numarena/format.hpp"
#include "budget/budget_system.hpp"
#include "os/fork.hpp"
#include "os/os.hpp"

namespace numarena {

const char* BudgetModeName(BudgetMode mode) {
  return mode == BudgetMode::kQuota ? "quota" : "system";
}

const char* NodeStateName(NodeState state) {
  switch (state) {
    case NodeState::kNormal:
      return "normal";
    case NodeState::kWarn:
      return "warn";
    case NodeState::kAdmissionClosed:
      return "admission-closed";
    case NodeState::kTripped:
      return "tripped";
  }
  return "?";
}

const char* AdmissionName(Admission admission) {
  switch (admission) {
    case Admission::kOk:
      return "ok";
    case Admission::kLater:
      return "later";
    case Admission::kNever:
      return "never";
  }
  return "?";
}

double PriorityWeights::of(Priority priority) const {
  switch (priority) {
    case Priority::kHigh:
      return high;
    case Priority::kNormal:
      return normal;
    case Priority::kLow:
      return low;
  }
  return 0;
}

std::uint64_t NodeBudgetSnapshot::numarena_bytes() const {
  std::int64_t sum = 0;
  for (std::int64_t v : by_priority) sum += v;
  return sum > 0 ? static_cast<std::uint64_t>(sum) : 0;
}

const NodeBudgetSnapshot* BudgetSnapshot::node(int id) const {
  for (const NodeBudgetSnapshot& n : nodes) {
    if (n.node == id) return &n;
  }
  return nullptr;
}

namespace {

constexpr int kStates = 4;

// Priority is an enum a caller can fill with any byte; it indexes per-class arrays.
bool ValidPriority(Priority priority) {
  return static_cast<unsigned>(priority) < static_cast<unsigned>(kPriorityCount);
}

// Reclaim order: low priority first, then normal, then high.
int ReclaimRank(Priority priority) {
  switch (priority) {
    case Priority::kLow:
      return 0;
    case Priority::kNormal:
      return 1;
    case Priority::kHigh:
      return 2;
  }
  return 3;
}

// Set while this thread runs reclaim hooks: a hook's own allocations must not start another
// reclaim (of any node or budget).
thread_local int t_reclaim_depth = 0;

// Events raised while this thread delivers events (a listener that allocates) are queued
// and delivered after the current listener returns, in order, instead of recursing.
struct PendingEvent {
  Budget* budget;
  BudgetEvent event;
};
struct EventQueue {
  static constexpr int kCapacity = 16;
  bool delivering = false;
  int count = 0;
  PendingEvent events[kCapacity];
};
thread_local EventQueue t_events;

std::uint64_t NonNegative(std::int64_t v) { return v > 0 ? static_cast<std::uint64_t>(v) : 0; }

// capacity * fraction rounded to the nearest byte (halves up). Both are non-negative (the
// options are checked fractions), so truncation and one comparison do what std::llround
// would, without libm: the override library links no libm at all (cmake/NumarenaPreload.cmake).
std::int64_t FractionOf(std::int64_t capacity, double fraction) {
  const double exact = static_cast<double>(capacity) * fraction;
  auto rounded = static_cast<std::int64_t>(exact);
  if (exact - static_cast<double>(rounded) >= 0.5) ++rounded;
  return rounded;
}

Status CheckFraction(const char* name, double value, bool zero_ok) {
  if (std::isnan(value) || value > 1.0 || value < 0.0 || (!zero_ok && value == 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("BudgetOptions: ", name, " is ", value,
                                                   "; it must be a fraction in ",
                                                   zero_ok ? "[0, 1]" : "(0, 1]"));
  }
  return absl::OkStatus();
}

Status ValidateOptions(const BudgetOptions& o) {
  const BudgetThresholds& t = o.thresholds;
  for (auto [name, value, zero_ok] : {std::tuple{"thresholds.warn", t.warn, false},
                                      {"thresholds.headroom", t.headroom, true},
                                      {"thresholds.trip", t.trip, false},
                                      {"thresholds.hysteresis", t.hysteresis, true},
                                      {"thresholds.gentle_reclaim", t.gentle_reclaim, true},
                                      {"weights.high", o.weights.high, false},
                                      {"weights.normal", o.weights.normal, false},
                                      {"weights.low", o.weights.low, false}}) {
    if (Status s = CheckFraction(name, value, zero_ok); !s.ok()) return s;
  }
  if (!(t.warn <= t.admission_closed() && t.admission_closed() <= t.trip)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BudgetOptions.thresholds: need warn <= 1 - headroom <= trip, got warn %.3f, "
        "1 - headroom %.3f (headroom %.3f), trip %.3f",
        t.warn, t.admission_closed(), t.headroom, t.trip));
  }
  if (t.hysteresis >= t.warn) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BudgetOptions.thresholds: hysteresis %.3f must be below warn %.3f", t.hysteresis, t.warn));
  }
  if (o.refresh_interval.count() < 0) {
    return absl::InvalidArgumentError("BudgetOptions.refresh_interval must not be negative");
  }
  return absl::OkStatus();
}

}  // namespace

// One node's account. The figures charges touch sit together on the first cache line;
// the limits (written only when the capacity changes) and the statistics sit apart.
struct alignas(64) Budget::Node {
  int id = -1;
  std::atomic<std::int64_t> usage{0};
  std::atomic<std::int64_t> by_priority[kPriorityCount] = {};
  std::atomic<std::int64_t> since_refresh{0};
  std::atomic<NodeState> state{NodeState::kNormal};

  alignas(64) std::atomic<std::int64_t> capacity{0};
  std::atomic<std::int64_t> enter[kStates] = {};  // usage at which each state starts
  std::atomic<std::int64_t> margin{0};            // hysteresis in bytes
  std::atomic<std::int64_t> gentle{0};            // gentle reclaim slack in bytes
  std::atomic<std::int64_t> class_limit[kPriorityCount] = {};

  alignas(64) std::atomic<std::int64_t> peak{0};
  std::atomic<std::uint64_t> refusals{0}, fallbacks_out{0}, fallbacks_in{0}, transitions{0};
  std::atomic<std::uint64_t> reclaim_runs{0}, reclaim_asked{0}, reclaim_freed{0};
  std::atomic<std::uint64_t> hook_failures{0}, reclaim_skipped{0};
  std::atomic<std::uint64_t> unmatched_releases{0}, unmatched_release_bytes{0};
  std::atomic<bool> reclaiming{false};
  // System mode: written by Refresh under refresh_mutex_.
  std::int64_t system_base = 0;
  std::atomic<std::uint64_t> mem_total{0}, mem_free{0}, per_cpu_free{0}, system_used{0};
  std::atomic<std::uint64_t> inactive_file{0};

  // The state usage `u` calls for, starting from `s`: down while usage is a margin below
  // the current state's threshold, then up while it reaches the next one.
  NodeState Target(NodeState s, std::int64_t u) const {
    int level = static_cast<int>(s);
    const std::int64_t m = margin.load(std::memory_order_relaxed);
    while (level > 0 && u < enter[level].load(std::memory_order_relaxed) - m) --level;
    while (level < kStates - 1 && u >= enter[level + 1].load(std::memory_order_relaxed)) ++level;
    return static_cast<NodeState>(level);
  }
};

struct Budget::Callbacks {
  budget_internal::CallbackRegistry<ReclaimHook> hooks;
  budget_internal::CallbackRegistry<BudgetListener> listeners;
};

struct Budget::RefreshThread {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;
  std::thread thread;
};

// fork() handlers (end of this file).
struct BudgetFork {
  static void Register(Budget* budget);
  static void Unregister(Budget* budget);
  static void Prepare();
  static void Parent();
  static void Child();
  static void ChildCallbacks();
};

Budget::Budget(BudgetOptions options)
    : options_(std::move(options)), callbacks_(std::make_unique<Callbacks>()) {}

Budget::~Budget() {
  BudgetFork::Unregister(this);
  if (refresher_) {
    {
      std::lock_guard<std::mutex> lock(refresher_->mutex);
      refresher_->stop = true;
    }
    refresher_->wake.notify_all();
    refresher_->thread.join();
  }
}

StatusOr<std::unique_ptr<Budget>> Budget::Create(BudgetOptions options, std::vector<int> node_ids) {
  if (Status s = ValidateOptions(options); !s.ok()) return s;
  if (node_ids.empty()) {
    return absl::InvalidArgumentError("Budget::Create: no nodes (the topology lists none)");
  }
  std::sort(node_ids.begin(), node_ids.end());
  if (node_ids.front() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Budget::Create: node id ", node_ids.front(), " is negative"));
  }
  if (node_ids.back() >= kMaxBudgetNodeId) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Budget::Create: node id ", node_ids.back(), " is not a NUMA node id (Linux ids are below ",
        kMaxBudgetNodeId, "); pass the ids of the topology's nodes"));
  }
  if (auto dup = std::adjacent_find(node_ids.begin(), node_ids.end()); dup != node_ids.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Budget::Create: node ", *dup, " is listed twice"));
  }

  std::unique_ptr<Budget> budget(new Budget(std::move(options)));
  const BudgetOptions& o = budget->options_;
  budget->by_id_.assign(static_cast<std::size_t>(node_ids.back()) + 1, nullptr);
  for (int id : node_ids) {
    auto node = std::make_unique<Node>();
    node->id = id;
    budget->by_id_[static_cast<std::size_t>(id)] = node.get();
    budget->nodes_.push_back(std::move(node));
  }

  if (o.mode == BudgetMode::kQuota) {
    std::vector<std::uint64_t> quota(budget->by_id_.size(), o.default_quota_bytes);
    std::vector<bool> seen(budget->by_id_.size(), false);
    for (const NodeQuota& q : o.quotas) {
      if (budget->Find(q.node) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("BudgetOptions.quotas: node ", q.node,
                                                       " is not one of the budget's nodes (",
                                                       absl::StrJoin(node_ids, ","), ")"));
      }
      if (seen[static_cast<std::size_t>(q.node)]) {
        return absl::InvalidArgumentError(
            absl::StrCat("BudgetOptions.quotas: node ", q.node, " has two quotas"));
      }
      seen[static_cast<std::size_t>(q.node)] = true;
      quota[static_cast<std::size_t>(q.node)] = q.bytes;
    }
    for (auto& node : budget->nodes_) {
      std::uint64_t bytes = quota[static_cast<std::size_t>(node->id)];
      if (bytes == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "BudgetOptions: node ", node->id,
            " has no quota in quota mode; add a NodeQuota for it or set default_quota_bytes"));
      }
      if (bytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() / 2)) {
        return absl::InvalidArgumentError(
            absl::StrCat("BudgetOptions: the quota of node ", node->id, " is too large"));
      }
      budget->SetCapacity(*node, bytes);
    }
    BudgetFork::Register(budget.get());
    return budget;
  }

  if (!budget->options_.reader) budget->options_.reader = MakeRootedReader();
  if (Status s = budget->Refresh(); !s.ok()) {
    return Status(s.code(), absl::StrCat("System-mode budget: ", std::string(s.message()),
                                         " (where node meminfo cannot be read, use "
                                         "BudgetMode::kQuota with explicit quotas)"));
  }
  if (o.refresh_interval.count() > 0) budget->StartRefresher();
  BudgetFork::Register(budget.get());
  return budget;
}

void Budget::StartRefresher() {
  refresher_ = std::make_unique<RefreshThread>();
  RefreshThread* r = refresher_.get();
  r->thread = std::thread([this, r] {
    std::unique_lock<std::mutex> lock(r->mutex);
    while (!r->wake.wait_for(lock, options_.refresh_interval, [&] { return r->stop; })) {
      lock.unlock();
      (void)Refresh();  // errors are counted and kept for Snapshot()
      lock.lock();
    }
  });
}

void Budget::RestartRefresher() const {
  if (refresher_lost_.exchange(false, std::memory_order_acq_rel)) {
    const_cast<Budget*>(this)->StartRefresher();
  }
}

Budget::Node* Budget::Find(int node) const {
  if (node < 0 || static_cast<std::size_t>(node) >= by_id_.size()) return nullptr;
  return by_id_[static_cast<std::size_t>(node)];
}

std::vector<int> Budget::node_ids() const {
  std::vector<int> ids;
  for (const auto& n : nodes_) ids.push_back(n->id);
  return ids;
}

void Budget::SetCapacity(Node& n, std::uint64_t capacity_bytes) {
  const auto cap = static_cast<std::int64_t>(
      std::min<std::uint64_t>(capacity_bytes, std::numeric_limits<std::int64_t>::max() / 2));
  if (n.capacity.load(std::memory_order_relaxed) == cap && cap != 0) return;
  const BudgetThresholds& t = options_.thresholds;
  n.enter[0].store(std::numeric_limits<std::int64_t>::min() / 2, std::memory_order_relaxed);
  n.enter[1].store(FractionOf(cap, t.warn), std::memory_order_relaxed);
  n.enter[2].store(FractionOf(cap, t.admission_closed()), std::memory_order_relaxed);
  n.enter[3].store(FractionOf(cap, t.trip), std::memory_order_relaxed);
  n.margin.store(FractionOf(cap, t.hysteresis), std::memory_order_relaxed);
  n.gentle.store(FractionOf(cap, t.gentle_reclaim), std::memory_order_relaxed);
  for (int p = 0; p < kPriorityCount; ++p) {
    n.class_limit[p].store(FractionOf(cap, options_.weights.of(static_cast<Priority>(p))),
                           std::memory_order_relaxed);
  }
  n.capacity.store(cap, std::memory_order_release);
}

// ---- charging ------------------------------------------------------------------------

namespace {
enum class ChargeResult { kCharged, kTripped, kOverClass, kOverLimit };
}  // namespace

Status Budget::Charge(int node, std::size_t bytes, Priority priority) {
  RestartRefresherIfLost();
  Node* n = Find(node);
  if (n == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("budget: node ", node,
                                                   " is not one of the budget's nodes (",
                                                   absl::StrJoin(node_ids(), ","), ")"));
  }
  if (!ValidPriority(priority)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "budget: priority ", static_cast<int>(priority),
        " is not a Priority (kHigh, kNormal or kLow); node ", node, " was not charged"));
  }
  if (bytes == 0) return absl::OkStatus();
  const int p = static_cast<int>(priority);
  const bool high = priority == Priority::kHigh;
  const auto b = static_cast<std::int64_t>(
      std::min<std::size_t>(bytes, std::numeric_limits<std::int64_t>::max() / 4));

  auto try_charge = [&]() -> ChargeResult {
    if (!high && n->state.load(std::memory_order_acquire) == NodeState::kTripped) {
      return ChargeResult::kTripped;
    }
    const std::int64_t limit = high ? n->capacity.load(std::memory_order_relaxed)
                                    : n->enter[3].load(std::memory_order_relaxed);
    const std::int64_t class_limit = n->class_limit[p].load(std::memory_order_relaxed);
    std::atomic<std::int64_t>& mine = n->by_priority[p];
    if (class_limit < limit) {
      std::int64_t held = mine.load(std::memory_order_relaxed);
      do {
        if (held + b > class_limit) return ChargeResult::kOverClass;
      } while (!mine.compare_exchange_weak(held, held + b, std::memory_order_relaxed));
    } else {
      mine.fetch_add(b, std::memory_order_relaxed);
    }
    std::int64_t used = n->usage.load(std::memory_order_relaxed);
    do {
      if (used + b > limit) {
        mine.fetch_sub(b, std::memory_order_relaxed);
        return ChargeResult::kOverLimit;
      }
    } while (!n->usage.compare_exchange_weak(used, used + b, std::memory_order_acq_rel,
                                             std::memory_order_relaxed));
    if (options_.mode == BudgetMode::kSystem) {
      n->since_refresh.fetch_add(b, std::memory_order_relaxed);
    }
    const std::int64_t now = used + b;
    std::int64_t peak = n->peak.load(std::memory_order_relaxed);
    while (now > peak && !n->peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    return ChargeResult::kCharged;
  };

  ChargeResult result = try_charge();
  if (result == ChargeResult::kCharged) {
    Settle(*n, /*refused=*/false);
    return absl::OkStatus();
  }
  // Refused: make room with the reclaim hooks (unless this thread is already reclaiming),
  // then try once more. Passing the limit (or finding the node tripped) trips the node.
  if (result != ChargeResult::kOverClass) Settle(*n, /*refused=*/true);
  std::size_t freed = 0;
  if (t_reclaim_depth == 0) {
    std::int64_t ask;
    if (result == ChargeResult::kOverClass) {
      ask = n->by_priority[p].load(std::memory_order_relaxed) + b -
            n->class_limit[p].load(std::memory_order_relaxed);
    } else {
      ask = n->usage.load(std::memory_order_relaxed) + b -
            n->enter[1].load(std::memory_order_relaxed) + n->gentle.load(std::memory_order_relaxed);
    }
    ask = std::max(ask, b);
    freed = RunReclaim(*n, static_cast<std::size_t>(ask));
    Settle(*n, /*refused=*/false);
    result = try_charge();
    if (result == ChargeResult::kCharged) {
      Settle(*n, /*refused=*/false);
      return absl::OkStatus();
    }
    if (result != ChargeResult::kOverClass) Settle(*n, /*refused=*/true);
  } else {
    n->reclaim_skipped.fetch_add(1, std::memory_order_relaxed);  // a hook is allocating
  }
  const char* why = result == ChargeResult::kOverClass ? "class" : "limit";
  return Refuse(*n, bytes, priority, why, freed);
}

Status Budget::Refuse(Node& n, std::size_t bytes, Priority priority, const char* why,
                      std::size_t freed) {
  n.refusals.fetch_add(1, std::memory_order_relaxed);
  const auto cap = NonNegative(n.capacity.load(std::memory_order_relaxed));
  const auto used = NonNegative(n.usage.load(std::memory_order_relaxed));
  const int p = static_cast<int>(priority);
  const NodeState state = n.state.load(std::memory_order_relaxed);
  std::string reason;
  if (why[0] == 'c') {
    const double w = options_.weights.of(priority);
    reason = absl::StrCat(PriorityName(priority), "-priority work already holds ",
                          FormatBytes(NonNegative(n.by_priority[p].load())), " of node ", n.id,
                          " and may hold at most ", FormatPercent(w),
                          " of it = ", FormatBytes(NonNegative(n.class_limit[p].load())),
                          " (PriorityWeights)");
  } else if (priority == Priority::kHigh) {
    reason = absl::StrCat("high priority may not pass the capacity");
  } else {
    reason = absl::StrCat(
        "normal and low priority stop at the trip threshold ",
        FormatPercent(options_.thresholds.trip), " = ", FormatBytes(NonNegative(n.enter[3].load())),
        state == NodeState::kTripped
            ? absl::StrCat(" and wait until usage falls below ",
                           FormatBytes(NonNegative(n.enter[3].load() - n.margin.load())))
            : std::string());
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "numarena budget (", BudgetModeName(options_.mode), " mode) refused ", FormatBytes(bytes),
      " on node ", n.id, " for ", PriorityName(priority), "-priority work: usage ",
      FormatBytes(used), " of capacity ", FormatBytes(cap), " (",
      FormatPercent(cap ? double(used) / double(cap) : 1.0), "), state ", NodeStateName(state),
      "; ", reason, "; reclaim hooks freed ", FormatBytes(freed), ". Free memory on node ", n.id,
      ", register reclaim hooks (Budget::AddReclaimHook), run the work at high priority "
      "(PriorityScope), or place it on another node (Preferred policy)"));
}

void Budget::Release(int node, std::size_t bytes, Priority priority) {
  Node* n = Find(node);
  if (n == nullptr || bytes == 0) return;
  const auto b = static_cast<std::int64_t>(
      std::min<std::size_t>(bytes, std::numeric_limits<std::int64_t>::max() / 4));
  if (!ValidPriority(priority)) {
    n->unmatched_releases.fetch_add(1, std::memory_order_relaxed);
    n->unmatched_release_bytes.fetch_add(static_cast<std::uint64_t>(b), std::memory_order_relaxed);
    return;
  }
  // Release no more than the class holds: a Release without its Charge would otherwise
  // drive usage below what is really committed and let later charges pass the limits.
  std::atomic<std::int64_t>& held = n->by_priority[static_cast<int>(priority)];
  std::int64_t before = held.load(std::memory_order_relaxed);
  std::int64_t released;
  do {
    released = std::clamp<std::int64_t>(before, 0, b);
  } while (!held.compare_exchange_weak(before, before - released, std::memory_order_relaxed));
  if (released < b) {
    n->unmatched_releases.fetch_add(1, std::memory_order_relaxed);
    n->unmatched_release_bytes.fetch_add(static_cast<std::uint64_t>(b - released),
                                         std::memory_order_relaxed);
  }
  if (released == 0) return;
  n->usage.fetch_sub(released, std::memory_order_acq_rel);
  if (options_.mode == BudgetMode::kSystem) {
    n->since_refresh.fetch_sub(released, std::memory_order_relaxed);
  }
  Settle(*n, /*refused=*/false);
}

// ---- states, events, reclaim ---------------------------------------------------------

void Budget::Settle(Node& n, bool refused) {
  NodeState s = n.state.load(std::memory_order_acquire);
  // Each round either finds the state right or moves it; a handful of rounds settles even
  // when other threads change usage meanwhile (they settle it again after their change).
  for (int round = 0; round < 8; ++round) {
    const std::int64_t u = n.usage.load(std::memory_order_acquire);
    // A refused charge trips the node when usage is already within the trip band (at or
    // above trip - hysteresis, where Tripped would hold anyway); one oversized request on a
    // roomy node is refused without changing the state.
    const bool trips = refused && u >= n.enter[3].load(std::memory_order_relaxed) -
                                           n.margin.load(std::memory_order_relaxed);
    const NodeState target = trips ? NodeState::kTripped : n.Target(s, u);
    if (target == s) return;
    if (n.state.compare_exchange_strong(s, target, std::memory_order_acq_rel)) {
      // A refusal reclaims with the size of the refused request in mind (Charge does it).
      OnTransition(n, s, target, u, /*reclaim=*/!refused && target > s);
      refused = false;
      s = n.state.load(std::memory_order_acquire);
    }
  }
}

void Budget::OnTransition(Node& n, NodeState from, NodeState to, std::int64_t usage, bool reclaim) {
  n.transitions.fetch_add(1, std::memory_order_relaxed);
  events_.fetch_add(1, std::memory_order_relaxed);
  Deliver(BudgetEvent{n.id, from, to, NonNegative(usage),
                      NonNegative(n.capacity.load(std::memory_order_relaxed))});
  if (reclaim && to != NodeState::kNormal) {
    // Down to the warn line plus a little slack: gentle at kWarn, where usage has only just
    // passed it; at kTripped, everything above warn.
    const std::int64_t ask = n.usage.load(std::memory_order_relaxed) -
                             n.enter[1].load(std::memory_order_relaxed) +
                             n.gentle.load(std::memory_order_relaxed);
    if (ask > 0) RunReclaim(n, static_cast<std::size_t>(ask));
  }
}

void Budget::Deliver(const BudgetEvent& event) {
  EventQueue& q = t_events;
  if (q.delivering) {
    if (q.count < EventQueue::kCapacity) {
      q.events[q.count++] = PendingEvent{this, event};
    } else {
      events_dropped_.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  q.delivering = true;
  auto deliver_now = [](Budget* budget, const BudgetEvent& e) {
    auto listeners = budget->callbacks_->listeners.Current();
    for (const auto& entry : *listeners) {
      using Registry = budget_internal::CallbackRegistry<BudgetListener>;
      Registry::Invoke(*entry, [&](Registry::Entry& l) {
        l.calls.fetch_add(1, std::memory_order_relaxed);
        try {
          l.fn(e);
        } catch (...) {
          l.failures.fetch_add(1, std::memory_order_relaxed);
          budget->listener_failures_.fetch_add(1, std::memory_order_relaxed);
        }
      });
    }
  };
  deliver_now(this, event);
  for (int i = 0; i < q.count; ++i) {
    const PendingEvent pending = q.events[i];
    deliver_now(pending.budget, pending.event);
  }
  q.count = 0;
  q.delivering = false;
}

std::size_t Budget::RunReclaim(Node& n, std::size_t bytes) {
  if (t_reclaim_depth > 0 || n.reclaiming.exchange(true, std::memory_order_acq_rel)) {
    n.reclaim_skipped.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  struct Guard {
    Node& n;
    explicit Guard(Node& node) : n(node) { ++t_reclaim_depth; }
    ~Guard() {
      --t_reclaim_depth;
      n.reclaiming.store(false, std::memory_order_release);
    }
  } guard(n);

  auto hooks = callbacks_->hooks.Current();
  if (hooks->empty()) return 0;
  n.reclaim_runs.fetch_add(1, std::memory_order_relaxed);
  n.reclaim_asked.fetch_add(bytes, std::memory_order_relaxed);
  const std::int64_t target =
      n.usage.load(std::memory_order_acquire) - static_cast<std::int64_t>(bytes);
  std::size_t freed = 0;
  using Registry = budget_internal::CallbackRegistry<ReclaimHook>;
  for (const auto& entry : *hooks) {
    if (freed >= bytes || n.usage.load(std::memory_order_acquire) <= target) break;
    Registry::Invoke(*entry, [&](Registry::Entry& h) {
      h.calls.fetch_add(1, std::memory_order_relaxed);
      bool failed = false;
      try {
        StatusOr<std::size_t> result = h.fn(n.id, bytes - freed);
        if (result.ok()) {
          freed += *result;
          h.freed.fetch_add(*result, std::memory_order_relaxed);
        } else {
          failed = true;
        }
      } catch (...) {
        failed = true;
      }
      if (failed) {
        h.failures.fetch_add(1, std::memory_order_relaxed);
        n.hook_failures.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  n.reclaim_freed.fetch_add(freed, std::memory_order_relaxed);
  return freed;
}

std::size_t Budget::Reclaim(int node, std::size_t bytes) {
  Node* n = Find(node);
  if (n == nullptr || bytes == 0) return 0;
  std::size_t freed = RunReclaim(*n, bytes);
  Settle(*n, /*refused=*/false);
  return freed;
}

// ---- admission, registration, figures ------------------------------------------------

Admission Budget::Admit(int node, std::size_t bytes, Priority priority) const {
  RestartRefresherIfLost();
  const Node* n = Find(node);
  if (n == nullptr || !ValidPriority(priority)) return Admission::kNever;
  const int p = static_cast<int>(priority);
  const auto b = static_cast<std::int64_t>(
      std::min<std::size_t>(bytes, std::numeric_limits<std::int64_t>::max() / 4));
  const std::int64_t class_limit = n->class_limit[p].load(std::memory_order_relaxed);
  const std::int64_t used = n->usage.load(std::memory_order_relaxed);
  const std::int64_t held = n->by_priority[p].load(std::memory_order_relaxed);
  const std::int64_t ceiling = priority == Priority::kHigh
                                   ? n->capacity.load(std::memory_order_relaxed)
                                   : n->enter[2].load(std::memory_order_relaxed);
  if (b > std::min(ceiling, class_limit)) return Admission::kNever;
  if (priority != Priority::kHigh &&
      n->state.load(std::memory_order_acquire) >= NodeState::kAdmissionClosed) {
    return Admission::kLater;
  }
  if (used + b > ceiling || held + b > class_limit) return Admission::kLater;
  return Admission::kOk;
}

void Budget::RecordFallback(int from_node, int to_node) {
  if (Node* from = Find(from_node)) from->fallbacks_out.fetch_add(1, std::memory_order_relaxed);
  if (Node* to = Find(to_node)) to->fallbacks_in.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t Budget::AddReclaimHook(Priority priority, std::string name, ReclaimHook hook) {
  return callbacks_->hooks.Add(priority, std::move(name), std::move(hook), ReclaimRank);
}

void Budget::RemoveReclaimHook(std::uint64_t id) { callbacks_->hooks.Remove(id); }

std::uint64_t Budget::AddListener(BudgetListener listener) {
  return callbacks_->listeners.Add(Priority::kNormal, "listener", std::move(listener),
                                   [](Priority) { return 0; });
}

void Budget::RemoveListener(std::uint64_t id) { callbacks_->listeners.Remove(id); }

bool Budget::CachesShouldShrink(int node) { return state(node) >= NodeState::kWarn; }

NodeState Budget::state(int node) const {
  const Node* n = Find(node);
  return n ? n->state.load(std::memory_order_acquire) : NodeState::kNormal;
}

std::uint64_t Budget::capacity(int node) const {
  const Node* n = Find(node);
  return n ? NonNegative(n->capacity.load(std::memory_order_acquire)) : 0;
}

std::uint64_t Budget::usage(int node) const {
  const Node* n = Find(node);
  return n ? NonNegative(n->usage.load(std::memory_order_acquire)) : 0;
}

BudgetSnapshot Budget::Snapshot() const {
  RestartRefresherIfLost();
  BudgetSnapshot s;
  s.mode = options_.mode;
  s.thresholds = options_.thresholds;
  s.weights = options_.weights;
  for (const auto& node : nodes_) {
    const Node& n = *node;
    NodeBudgetSnapshot v;
    v.node = n.id;
    v.state = n.state.load();
    v.capacity = NonNegative(n.capacity.load());
    v.usage = NonNegative(n.usage.load());
    v.peak = NonNegative(n.peak.load());
    v.warn_bytes = NonNegative(n.enter[1].load());
    v.admission_bytes = NonNegative(n.enter[2].load());
    v.trip_bytes = NonNegative(n.enter[3].load());
    for (int p = 0; p < kPriorityCount; ++p) v.by_priority[p] = n.by_priority[p].load();
    v.mem_total = n.mem_total.load();
    v.mem_free = n.mem_free.load();
    v.per_cpu_free = n.per_cpu_free.load();
    v.inactive_file = n.inactive_file.load();
    v.system_used = n.system_used.load();
    v.refusals = n.refusals.load();
    v.fallbacks_out = n.fallbacks_out.load();
    v.fallbacks_in = n.fallbacks_in.load();
    v.transitions = n.transitions.load();
    v.reclaim_runs = n.reclaim_runs.load();
    v.reclaim_asked = n.reclaim_asked.load();
    v.reclaim_freed = n.reclaim_freed.load();
    v.hook_failures = n.hook_failures.load();
    v.reclaim_skipped = n.reclaim_skipped.load();
    v.unmatched_releases = n.unmatched_releases.load();
    v.unmatched_release_bytes = n.unmatched_release_bytes.load();
    s.nodes.push_back(v);
  }
  for (const auto& entry : *callbacks_->hooks.Current()) {
    s.hooks.push_back(ReclaimHookSnapshot{entry->name, entry->priority, entry->calls.load(),
                                          entry->freed.load(), entry->failures.load()});
  }
  s.events = events_.load();
  s.listener_failures = listener_failures_.load();
  s.events_dropped = events_dropped_.load();
  s.refreshes = refreshes_.load();
  s.refresh_failures = refresh_failures_.load();
  if (options_.mode == BudgetMode::kSystem) {
    std::lock_guard<std::mutex> lock(refresh_mutex_);
    s.last_refresh_error = last_refresh_error_;
    s.cgroup_limit = cgroup_limit_;
    s.cgroup_usage = cgroup_usage_;
    s.cgroup_inactive_file = cgroup_inactive_file_;
    s.refresh_interval = options_.refresh_interval;
    s.inactive_file_is_free = options_.inactive_file_is_free;
  }
  return s;
}

// ---- System mode ---------------------------------------------------------------------

Status Budget::Refresh() {
  RestartRefresherIfLost();
  if (options_.mode != BudgetMode::kSystem) return absl::OkStatus();
  const SystemReader& reader = *options_.reader;
  std::vector<Node*> changed;
  {
    std::lock_guard<std::mutex> lock(refresh_mutex_);
    auto fail = [&](const Status& s) {
      refresh_failures_.fetch_add(1, std::memory_order_relaxed);
      last_refresh_error_ = std::string(s.message());
      return s;
    };
    budget_internal::CgroupMemory cgroup;
    if (options_.respect_cgroup_limit) {
      auto read = budget_internal::ReadCgroupMemory(reader);
      if (!read.ok()) return fail(read.status());
      cgroup = *std::move(read);
    }
    // Read every node first, so a failure leaves all figures as they were.
    std::vector<budget_internal::NodeMemory> memory;
    std::vector<int> ids;
    for (const auto& node : nodes_) {
      auto m = budget_internal::ReadNodeMemory(reader, node->id);
      if (!m.ok()) return fail(m.status());
      memory.push_back(*m);
      ids.push_back(node->id);
    }
    auto per_cpu = budget_internal::ReadPerCpuFreeBytes(reader, ids, os::PageSize());
    if (!per_cpu.ok()) return fail(per_cpu.status());
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      Node& n = *nodes_[i];
      const budget_internal::NodeMemory& m = memory[i];
      std::uint64_t capacity = m.total;
      // Free pages on per-CPU lists count as used, as MemFree has them: see budget.hpp.
      std::uint64_t available = m.free + (options_.inactive_file_is_free ? m.inactive_file : 0);
      if (cgroup.limit) {
        capacity = std::min(capacity, *cgroup.limit);
        std::uint64_t current = cgroup.current.value_or(0);
        // The cgroup's own page cache is in memory.current; its inactive part counts as free
        // here as the node's does (read a moment later, it may exceed what current showed).
        if (options_.inactive_file_is_free) {
          current -= std::min(current, cgroup.inactive_file.value_or(0));
        }
        available = std::min(available, *cgroup.limit > current ? *cgroup.limit - current : 0);
      }
      const auto used = static_cast<std::int64_t>(capacity > available ? capacity - available : 0);
      SetCapacity(n, capacity);
      n.mem_total.store(m.total, std::memory_order_relaxed);
      n.mem_free.store(m.free, std::memory_order_relaxed);
      n.inactive_file.store(m.inactive_file, std::memory_order_relaxed);
      n.per_cpu_free.store((*per_cpu)[i], std::memory_order_relaxed);
      n.system_used.store(static_cast<std::uint64_t>(used), std::memory_order_relaxed);
      // usage = base + since_refresh  ->  used + (charges after the exchange).
      const std::int64_t since = n.since_refresh.exchange(0, std::memory_order_acq_rel);
      n.usage.fetch_add(used - n.system_base - since, std::memory_order_acq_rel);
      n.system_base = used;
      const std::int64_t now = n.usage.load(std::memory_order_relaxed);
      std::int64_t peak = n.peak.load(std::memory_order_relaxed);
      while (now > peak && !n.peak.compare_exchange_weak(peak, now)) {
      }
      changed.push_back(&n);
    }
    cgroup_limit_ = cgroup.limit;
    cgroup_usage_ = cgroup.current;
    cgroup_inactive_file_ = cgroup.inactive_file;
    last_refresh_error_.clear();
    refreshes_.fetch_add(1, std::memory_order_relaxed);
  }
  // Outside the refresh lock: transitions deliver events and may run reclaim hooks.
  for (Node* n : changed) Settle(*n, /*refused=*/false);
  return absl::OkStatus();
}

// ---- fork (os/fork.hpp) ----------------------------------------------------------------
//
// Every live budget is listed, so that fork() can take each one's refresh lock (held while
// reading the kernel's files, which allocates) before jemalloc's handler takes jemalloc's
// locks, and so that the child can put right what the threads it does not have left behind:
// their reclaim flags, their calls in flight of hooks and listeners, the refresh thread.

namespace {
std::mutex g_budgets_mutex;
std::vector<Budget*>* g_budgets = nullptr;  // guarded by g_budgets_mutex; never freed
}  // namespace

// Set when the library is loaded, before any thread can take these locks (os/fork.hpp).
[[maybe_unused]] const bool g_budget_fork_stages_set = [] {
  static const os::ForkStageHandlers budgets{BudgetFork::Prepare, BudgetFork::Parent,
                                             BudgetFork::Child};
  static const os::ForkStageHandlers callbacks{nullptr, nullptr, BudgetFork::ChildCallbacks};
  os::SetForkStage(os::ForkStage::kBudgets, &budgets);
  os::SetForkStage(os::ForkStage::kCallbackLocks, &callbacks);
  return true;
}();

void BudgetFork::Register(Budget* budget) {
  os::InstallForkHandlers();  // before the first of the stage's locks is taken
  std::lock_guard<std::mutex> lock(g_budgets_mutex);
  if (g_budgets == nullptr) g_budgets = new std::vector<Budget*>();
  g_budgets->push_back(budget);
}

void BudgetFork::Unregister(Budget* budget) {
  std::lock_guard<std::mutex> lock(g_budgets_mutex);
  if (g_budgets == nullptr) return;
  auto at = std::find(g_budgets->begin(), g_budgets->end(), budget);
  if (at != g_budgets->end()) g_budgets->erase(at);
}

void BudgetFork::Prepare() {
  g_budgets_mutex.lock();
  if (g_budgets == nullptr) return;
  for (Budget* budget : *g_budgets) budget->refresh_mutex_.lock();
}

void BudgetFork::Parent() {
  if (g_budgets != nullptr) {
    for (auto it = g_budgets->rbegin(); it != g_budgets->rend(); ++it) {
      (*it)->refresh_mutex_.unlock();
    }
  }
  g_budgets_mutex.unlock();
}

void BudgetFork::Child() {
  if (g_budgets != nullptr) {
    for (Budget* budget : *g_budgets) {
      // A node another thread was reclaiming would never be reclaimed again. When this
      // thread is inside a hook itself (it forked from one), the flags may be its own.
      if (t_reclaim_depth == 0) {
        for (auto& node : budget->nodes_) node->reclaiming.store(false);
      }
      if (budget->refresher_ != nullptr) {
        // Its thread is not in the child: it cannot be joined, and its mutex and condition
        // variable may be in use by that thread. Leave it (never destroyed) and start
        // another on first use.
        (void)budget->refresher_.release();
        budget->refresher_lost_.store(true, std::memory_order_release);
      }
    }
  }
  Parent();
}

// The hook and listener lists' locks (taken inside jemalloc hooks, so not before fork):
// re-created in the child (budget_callbacks.hpp). g_budgets_mutex is held (kBudgets).
void BudgetFork::ChildCallbacks() {
  if (g_budgets == nullptr) return;
  for (Budget* budget : *g_budgets) {
    budget->callbacks_->hooks.RecreateInForkChild();
    budget->callbacks_->listeners.RecreateInForkChild();
  }
}

}  // namespace numarena
