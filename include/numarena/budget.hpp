// The per-node memory budget: how much memory a NUMA node may hold before numarena warns,
// stops admitting new work, and finally refuses to commit more.
//
// A `Budget` is the `CapacityGate` the page provider charges (capacity.hpp): the provider
// calls `Charge(node, bytes, priority)` before it commits a span and `Release` after it
// purges one, so accounting happens per span and small objects cost nothing. Each node has
// a capacity and a usage, measured one of two ways (`BudgetMode`):
//
//   kQuota   capacity = a byte quota configured for this process on the node;
//            usage    = what numarena has committed there.
//   kSystem  capacity = the node's MemTotal, or the process's cgroup v2 memory.max when
//                       that is lower;
//            usage    = the node's used memory (MemTotal - MemFree - Inactive(file) of
//                       /sys/devices/system/node/nodeN/meminfo; with a cgroup limit, the
//                       tighter of the node's free memory and the cgroup's remaining
//                       memory.max - memory.current decides), re-read at most
//                       `refresh_interval` apart, plus numarena's own commits since then.
//
// Page cache (System mode). A server that has just read its model files has most of a node
// in page cache; counting it as used would trip the budget on memory the kernel hands out on
// demand. The inactive file pages are the cache the kernel reclaims first, so they count as
// free (`BudgetOptions::inactive_file_is_free`, on by default); active file pages (a model
// that is mmap'd and read every token, the server's own binaries) stay counted as used,
// since reclaiming them costs refaults. NodeBudgetSnapshot::inactive_file shows the amount.
// Under a cgroup v2 memory limit the same holds for the cgroup's own page cache, which
// memory.current includes: its memory.stat inactive_file counts as free too.
//
// Free pages on per-CPU lists (System mode). A CPU that frees pages keeps up to a limit of
// them on its own per-CPU list for the zone (the zone's low watermark divided by the node's
// CPUs: 15 MiB on a 256 MiB node with one CPU), and MemFree does not count them. usage counts
// them as used, on purpose: the kernel's watermark checks do not count them either, and when
// a node is nearly full and has nothing to reclaim, the page allocator gives up without
// draining those lists (Linux 6.1 __alloc_pages_direct_reclaim), so a bound allocation
// cannot rely on them; numarena's own free-memory guard does the same. The error this
// makes is bounded by the per-CPU lists' limits, at most the node's low watermark per CPU
// that frees on the node, plus up to one 2 MiB page per list that a CPU has just added and
// not yet drained (lists of CPUs on other nodes are drained after a few idle
// seconds). NodeBudgetSnapshot::per_cpu_free shows it at each refresh. One effect: pages
// numarena purges lower usage at once (Release), and a refresh may count the part that went
// onto a per-CPU list as used again until that CPU reuses it.
//
// Usage against capacity puts each node in one of four states (defaults in parentheses):
//
//   kNormal           below warn (80 %).
//   kWarn             at or above warn: listeners hear of it and reclaim hooks are asked
//                     for a gentle amount (down to the warn line); allocation proceeds.
//   kAdmissionClosed  at or above 1 - headroom (85 %): `Admit` answers kLater to new work of
//                     normal and low priority; high priority may still use the headroom;
//                     `Charge` of work already admitted proceeds.
//   kTripped          at or above trip (90 %), or at or above trip - hysteresis when a
//                     charge would pass trip: `Charge` of normal and low priority is
//                     refused (ResourceExhausted) after the reclaim hooks had a synchronous
//                     chance to free memory; high priority may go up to the capacity.
//
// A state is left only after usage falls `hysteresis` (5 points) below its threshold, so a
// node hovering at a threshold does not flap. Normal and low priority can never push usage
// past trip and high priority never past the capacity: each charge is a compare-and-swap
// of the node's usage against its limit, so concurrent charges cannot overshoot.
//
// Priorities (capacity.hpp, `PriorityScope`) also carry weights: a class may hold at most
// weight x capacity of a node by its own charges (defaults high 1.0, normal 0.9, low 0.5),
// so low-priority work can never take more than half a node. Reclaim hooks are registered
// with a class and asked in order low, normal, high: under pressure low priority gives
// memory back first.
//
// Where the work happens. `Charge` and `Release` are lock-free on their common path (a few
// atomics on the node's cache line, no allocation, no system call). Reclaim hooks and
// listeners run synchronously on the thread whose charge (or release, or refresh) changed
// the state, outside any budget lock, and never recursively on one thread: a hook that
// allocates, and so charges, does not start another reclaim. A `Charge` that would pass
// the trip line first runs the reclaim hooks and then tries again; only if that does not
// make room is it refused. In kSystem mode a background thread re-reads the kernel's
// figures every `refresh_interval` (its transitions, reclaim and events run there);
// `Charge` never reads a file.
//
//   numarena::BudgetOptions options;                 // kSystem, 80 / 85 / 90 %
//   auto budget = numarena::Budget::Create(options, *numarena::Topology::system().value());
//   if (!budget.ok()) { std::cerr << budget.status() << "\n"; return 2; }
//   // A KvPool given `KvPoolOptions::budget` registers its own hook; any cache can do the
//   // same, here a pool built without one:
//   (*budget)->AddReclaimHook(numarena::Priority::kLow, "kv-cold",
//       [&](int node, std::size_t bytes) -> numarena::StatusOr<std::size_t> {
//         return kv_pool->Reclaim(node, bytes);      // bytes actually freed
//       });
//   (*budget)->AddListener([](const numarena::BudgetEvent& e) { log(e); });
//   if (auto s = numarena::InstallProcessBudget(budget->get()); !s.ok()) ...  // now charged
//   if ((*budget)->Admit(node, request_bytes) == numarena::Admission::kLater) queue(request);
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "numarena/capacity.hpp"
#include "numarena/status.hpp"
#include "numarena/topology.hpp"

namespace numarena {

enum class BudgetMode : unsigned char { kQuota, kSystem };

// Node ids a budget accepts are below this (Linux's MAX_NUMNODES is at most 1024).
inline constexpr int kMaxBudgetNodeId = 1024;
// "quota", "system".
const char* BudgetModeName(BudgetMode mode);

// Ordered: a higher state is tighter.
enum class NodeState : unsigned char { kNormal = 0, kWarn = 1, kAdmissionClosed = 2, kTripped = 3 };
// "normal", "warn", "admission-closed", "tripped".
const char* NodeStateName(NodeState state);

// The answer to `Budget::Admit` (the vLLM scheduler's vocabulary).
enum class Admission : unsigned char {
  kOk,     // start the work now
  kLater,  // the node is too full now; retry when memory has been freed
  kNever,  // the request is larger than the node could ever give this priority
};
// "ok", "later", "never".
const char* AdmissionName(Admission admission);

// Fractions of a node's capacity. Valid when 0 < warn <= 1 - headroom <= trip <= 1,
// 0 <= hysteresis < warn and 0 <= gentle_reclaim <= 1.
struct BudgetThresholds {
  double warn = 0.80;        // kWarn from here
  double headroom = 0.15;    // kAdmissionClosed from 1 - headroom (0.85)
  double trip = 0.90;        // kTripped from here; normal and low priority never pass it
  double hysteresis = 0.05;  // a state is left below its threshold minus this
  // In kWarn and kAdmissionClosed the hooks are asked for usage - warn + this fraction of
  // the capacity: enough to get back under the warn line with a little slack.
  double gentle_reclaim = 0.01;

  double admission_closed() const { return 1.0 - headroom; }
};

// The most a priority class may hold of a node's capacity by its own charges, each in
// (0, 1]. High priority's limit is also the capacity; normal and low are also held below
// trip. The defaults keep low-priority work (prefill of batch jobs, speculative caches) to
// half a node, and let normal work fill up to the trip line.
struct PriorityWeights {
  double high = 1.0;
  double normal = 0.9;
  double low = 0.5;

  double of(Priority priority) const;
};

struct NodeQuota {
  int node = -1;
  std::uint64_t bytes = 0;
};

struct BudgetOptions {
  BudgetMode mode = BudgetMode::kSystem;

  // kQuota: the quota of each node; nodes not listed get `default_quota_bytes`. Create
  // fails when a node ends up with no quota (0) or a quota names an unknown node.
  std::vector<NodeQuota> quotas;
  std::uint64_t default_quota_bytes = 0;

  BudgetThresholds thresholds;
  PriorityWeights weights;

  // kSystem: how the kernel's figures are read (null: the live /sys and /proc through
  // MakeRootedReader()). Tests inject fixtures here. Shared with the refresh thread.
  std::shared_ptr<const SystemReader> reader;
  // kSystem: the longest time between two readings. A background thread refreshes at this
  // interval; zero means no thread, only explicit `Refresh()` calls.
  std::chrono::milliseconds refresh_interval{100};
  // kSystem: also respect the cgroup v2 memory.max of the process's cgroup (and its
  // ancestors) when it is lower than a node's MemTotal.
  bool respect_cgroup_limit = true;
  // kSystem: count the node's Inactive(file) page cache as free (see the header comment).
  // Off: usage is MemTotal - MemFree, every cached page counted as used.
  bool inactive_file_is_free = true;
};

// A state change of one node, delivered to listeners.
struct BudgetEvent {
  int node = -1;
  NodeState from = NodeState::kNormal;
  NodeState to = NodeState::kNormal;
  std::uint64_t usage = 0;     // bytes, when the change was decided
  std::uint64_t capacity = 0;  // bytes
};

// Asked to free about `bytes` on `node`; returns how many bytes it freed (a hint for
// statistics: the budget re-reads its own usage, which drops as the provider releases
// the freed spans). An error or an exception counts as a hook failure and never fails
// the allocation that triggered reclaim.
//
// May run on any thread, concurrently for different nodes, including inside an allocation
// of the hook's own owner: do not wait in a hook for a lock held while allocating (use
// try_lock and return 0). Memory freed to an arena only lowers usage once the arena purges
// it back to its provider.
using ReclaimHook = std::function<StatusOr<std::size_t>(int node, std::size_t bytes)>;
using BudgetListener = std::function<void(const BudgetEvent& event)>;

struct NodeBudgetSnapshot {
  int node = -1;
  NodeState state = NodeState::kNormal;
  std::uint64_t capacity = 0;
  std::uint64_t usage = 0;  // what is counted against capacity (see the mode)
  std::uint64_t peak = 0;   // highest usage seen
  std::uint64_t warn_bytes = 0, admission_bytes = 0, trip_bytes = 0;  // thresholds in bytes
  // numarena's own charges by priority (kHigh, kNormal, kLow). A Release takes at most
  // what its class holds (see unmatched_releases), so a class goes negative only for a
  // moment, when an unmatched Release races a charge that is then refused.
  std::array<std::int64_t, kPriorityCount> by_priority{};
  // kSystem: the kernel's figures at the last refresh. per_cpu_free: free pages waiting on
  // the node's per-CPU lists ("count:" under "pagesets" in /proc/zoneinfo), which MemFree
  // leaves out and usage counts as used (see the header comment): the most by which usage
  // may overstate the node's used memory.
  // inactive_file: the node's Inactive(file) page cache, counted as free when
  // BudgetOptions::inactive_file_is_free (then system_used leaves it out).
  std::uint64_t mem_total = 0, mem_free = 0, per_cpu_free = 0, system_used = 0;
  std::uint64_t inactive_file = 0;
  std::uint64_t refusals = 0;       // Charge calls answered ResourceExhausted
  std::uint64_t fallbacks_out = 0;  // RecordFallback(from = this node)
  std::uint64_t fallbacks_in = 0;   // RecordFallback(to = this node)
  std::uint64_t transitions = 0;
  std::uint64_t reclaim_runs = 0;     // times the hooks were run for this node
  std::uint64_t reclaim_asked = 0;    // bytes asked
  std::uint64_t reclaim_freed = 0;    // bytes the hooks reported freed
  std::uint64_t hook_failures = 0;    // hook calls that returned an error or threw
  std::uint64_t reclaim_skipped = 0;  // reclaim not run: nested on this thread or busy
  // Misuse of Release: calls that returned more than their priority class held on the node
  // (a Release without its Charge, twice, or with another priority or an invalid one), and
  // the bytes that were not released because of it. Non-zero means a caller's accounting
  // is wrong; usage stayed at what was really charged.
  std::uint64_t unmatched_releases = 0;
  std::uint64_t unmatched_release_bytes = 0;

  std::uint64_t numarena_bytes() const;  // sum of by_priority (>= 0)
  double usage_fraction() const { return capacity ? double(usage) / double(capacity) : 1.0; }
};

struct ReclaimHookSnapshot {
  std::string name;
  Priority priority = Priority::kNormal;
  std::uint64_t calls = 0, freed = 0, failures = 0;
};

struct BudgetSnapshot {
  BudgetMode mode = BudgetMode::kQuota;
  BudgetThresholds thresholds;
  PriorityWeights weights;
  std::vector<NodeBudgetSnapshot> nodes;   // ascending by node id
  std::vector<ReclaimHookSnapshot> hooks;  // in reclaim order (low first)
  std::uint64_t events = 0;                // state changes
  std::uint64_t listener_failures = 0;     // listener calls that threw
  std::uint64_t events_dropped = 0;        // nested events beyond the per-thread queue
  // kSystem.
  std::uint64_t refreshes = 0;
  std::uint64_t refresh_failures = 0;
  std::string last_refresh_error;             // empty when the last refresh succeeded
  std::optional<std::uint64_t> cgroup_limit;  // memory.max in force, if any
  std::optional<std::uint64_t> cgroup_usage;  // memory.current of that cgroup
  // inactive_file of that cgroup's memory.stat: page cache counted as free when
  // BudgetOptions::inactive_file_is_free (it is part of cgroup_usage).
  std::optional<std::uint64_t> cgroup_inactive_file;
  std::chrono::milliseconds refresh_interval{0};
  bool inactive_file_is_free = false;  // BudgetOptions::inactive_file_is_free in force

  // The node's entry, or nullptr.
  const NodeBudgetSnapshot* node(int id) const;
};

class Budget final : public CapacityGate {
 public:
  // A budget over the topology's online nodes. InvalidArgument names a bad threshold,
  // weight, quota or node id (negative, listed twice, or not below kMaxBudgetNodeId); in
  // kSystem mode the first reading of the kernel's files must succeed (NotFound / DataLoss
  // name the file).
  [[nodiscard]] static StatusOr<std::unique_ptr<Budget>> Create(BudgetOptions options,
                                                                const Topology& topology) {
    return Create(std::move(options), topology.node_ids());
  }
  // The same over explicit node ids (sparse ids allowed).
  [[nodiscard]] static StatusOr<std::unique_ptr<Budget>> Create(BudgetOptions options,
                                                                std::vector<int> node_ids);

  // Stops the refresh thread. Uninstall the budget (InstallProcessBudget(nullptr)) and make
  // sure no Charge/Release can still reach it first.
  //
  // fork(): a budget stays usable in the child of a multi-threaded process (numarena's fork
  // handlers hold its locks across fork()). The refresh thread does not survive fork(); the
  // child's first Charge, Admit, Snapshot or Refresh of the budget starts a new one.
  ~Budget() override;
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;

  // CapacityGate. Charge: OK (the bytes are now counted), InvalidArgument for an unknown
  // node or a `priority` that is not kHigh, kNormal or kLow (nothing is charged), or
  // ResourceExhausted naming the node, its usage, capacity and state and what the caller
  // can do. Release: returns bytes charged earlier with the same node and priority; any
  // thread; unknown nodes are ignored. A Release of more than the priority class holds on
  // the node releases only what it holds and counts the rest in the node's
  // unmatched_releases / unmatched_release_bytes (an invalid priority releases nothing), so
  // a wrong Release can never open the budget to charges it should refuse.
  [[nodiscard]] Status Charge(int node, std::size_t bytes, Priority priority) override;
  void Release(int node, std::size_t bytes, Priority priority) override;
  // True from kWarn on (state(node) >= kWarn): numarena's thread caches then keep at most
  // a few objects per list of that node's memory (arena.hpp, Arena::purge).
  bool CachesShouldShrink(int node) override;

  // Should work needing about `bytes` on `node` start now? Answers from the current usage
  // without charging anything (admission is not a reservation):
  //   normal/low: kLater when the node is kAdmissionClosed or tighter, or usage + bytes
  //               would reach past 1 - headroom, or past the class's weight;
  //               kNever when bytes exceed min(1 - headroom, weight) x capacity.
  //   high:       kLater when usage + bytes would pass the capacity or the class's weight;
  //               kNever when bytes exceed weight x capacity.
  // An unknown node or an invalid priority answers kNever.
  [[nodiscard]] Admission Admit(int node, std::size_t bytes,
                                Priority priority = CurrentPriority()) const;

  // The provider reports that memory meant for `from_node` went to `to_node` (-1: not
  // known) because `from_node` refused or was full.
  void RecordFallback(int from_node, int to_node = -1) override;

  // Registers a reclaim hook of `priority` class; hooks run low class first, then normal,
  // then high, in registration order within a class. Returns an id for RemoveReclaimHook.
  std::uint64_t AddReclaimHook(Priority priority, std::string name, ReclaimHook hook);
  // Unregisters; when it returns, the hook is not running on any other thread and will not
  // be called again (a hook may remove itself).
  void RemoveReclaimHook(std::uint64_t id);

  // Registers a listener for state changes, delivered on the thread that caused the
  // change, outside budget locks. Listener exceptions are caught and counted.
  std::uint64_t AddListener(BudgetListener listener);
  void RemoveListener(std::uint64_t id);

  // Runs the reclaim hooks for `node` now, asking for `bytes`; returns the bytes they
  // reported freed. 0 without running anything when called from inside a hook on this
  // thread, or when another thread is reclaiming this node.
  std::size_t Reclaim(int node, std::size_t bytes);

  // kSystem: re-reads the kernel's figures now (the background thread does this every
  // refresh_interval). On error the previous figures stay and the error is returned and
  // kept for Snapshot(). kQuota: OK, nothing to do.
  [[nodiscard]] Status Refresh();

  // The node's current state (kNormal for an unknown node).
  NodeState state(int node) const;
  // Capacity and usage of a node in bytes (0 for an unknown node).
  std::uint64_t capacity(int node) const;
  std::uint64_t usage(int node) const;

  // A consistent-enough copy of every figure (each counter is read atomically; the set is
  // not one instant).
  BudgetSnapshot Snapshot() const;

  BudgetMode mode() const { return options_.mode; }
  const BudgetOptions& options() const { return options_; }
  std::vector<int> node_ids() const;

 private:
  struct Node;
  struct Callbacks;
  struct RefreshThread;
  friend struct BudgetFork;  // fork() handlers (budget.cpp)

  explicit Budget(BudgetOptions options);
  Node* Find(int node) const;
  void SetCapacity(Node& n, std::uint64_t capacity);
  void Settle(Node& n, bool refused);
  void OnTransition(Node& n, NodeState from, NodeState to, std::int64_t usage, bool reclaim);
  void Deliver(const BudgetEvent& event);
  std::size_t RunReclaim(Node& n, std::size_t bytes);
  Status Refuse(Node& n, std::size_t bytes, Priority priority, const char* why, std::size_t freed);
  void StartRefresher();
  // In a fork child whose parent had a refresh thread: starts one (once).
  void RestartRefresherIfLost() const {
    if (refresher_lost_.load(std::memory_order_relaxed)) [[unlikely]] RestartRefresher();
  }
  void RestartRefresher() const;

  BudgetOptions options_;
  std::vector<std::unique_ptr<Node>> nodes_;  // ascending by id
  std::vector<Node*> by_id_;                  // index: node id
  std::unique_ptr<Callbacks> callbacks_;
  std::atomic<std::uint64_t> events_{0};
  std::atomic<std::uint64_t> listener_failures_{0};
  std::atomic<std::uint64_t> events_dropped_{0};

  // kSystem refresh state.
  mutable std::mutex refresh_mutex_;
  std::atomic<std::uint64_t> refreshes_{0};
  std::atomic<std::uint64_t> refresh_failures_{0};
  std::string last_refresh_error_;             // guarded by refresh_mutex_
  std::optional<std::uint64_t> cgroup_limit_;  // guarded by refresh_mutex_
  std::optional<std::uint64_t> cgroup_usage_;  // guarded by refresh_mutex_
  std::optional<std::uint64_t> cgroup_inactive_file_;  // guarded by refresh_mutex_
  std::unique_ptr<RefreshThread> refresher_;
  // Set in a fork child when the parent's refresh thread was lost with the fork.
  mutable std::atomic<bool> refresher_lost_{false};
};

// Makes `budget` the process-wide capacity gate that every numarena page provider charges
// (arena.hpp SetCapacityGate; nullptr uninstalls). Install before the first allocation you
// want counted: spans committed before are never released to it. The budget must outlive
// its installation. FailedPrecondition when a different gate is installed (swapping gates
// would release one gate's charges to the other; uninstall first).
[[nodiscard]] Status InstallProcessBudget(Budget* budget);

}  // namespace numarena
