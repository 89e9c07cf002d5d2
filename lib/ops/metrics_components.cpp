// Metrics contributions of numarena's components (metrics.hpp): arenas, the per-node
// budget, KV pools and first-touch migrations, each rendered from the component's own
// snapshot type through the ExpositionWriter.
#include <array>

#include "absl/strings/str_cat.h"
#include "numarena/arena.hpp"
#include "numarena/budget.hpp"
#include "numarena/first_touch.hpp"
#include "numarena/kv_pool.hpp"
#include "numarena/ops/metrics.hpp"

namespace numarena {
namespace {

std::string Node(int node) { return absl::StrCat(node); }

}  // namespace

void MigrationTotals::Add(const PlacementReport& report) {
  ++calls;
  pages_checked += report.pages_checked;
  already_local += report.already_local;
  moved += report.moved;
  not_resident += report.not_resident;
  failed += report.failed;
}

void AppendArenaMetrics(ExpositionWriter& out, const std::vector<const Arena*>& arenas) {
  std::vector<std::pair<std::string, ArenaStats>> rows;
  for (const Arena* arena : arenas) {
    if (arena != nullptr) rows.emplace_back(arena->policy().ToString(), arena->stats());
  }
  struct Gauge {
    const char* name;
    std::size_t ArenaStats::*field;
    const char* help;
  };
  static constexpr Gauge kGauges[] = {
      {"numarena_arena_allocated_bytes", &ArenaStats::allocated, "Bytes in live allocations."},
      {"numarena_arena_cached_bytes", &ArenaStats::cached,
       "Part of the allocated bytes that is freed objects the arena's shared caches keep."},
      {"numarena_arena_active_bytes", &ArenaStats::active,
       "Bytes of pages holding live allocations."},
      {"numarena_arena_resident_bytes", &ArenaStats::resident,
       "Bytes jemalloc believes resident (upper bound)."},
      {"numarena_arena_mapped_bytes", &ArenaStats::mapped,
       "Bytes of provider spans jemalloc holds."},
      {"numarena_arena_committed_bytes", &ArenaStats::committed,
       "Bytes the page provider committed and charged to the capacity gate."},
      {"numarena_arena_retained_bytes", &ArenaStats::retained,
       "Address space held but purged (no memory)."},
  };
  for (const Gauge& g : kGauges) {
    out.Family(g.name, MetricType::kGauge, g.help);
    for (const auto& [policy, stats] : rows) {
      out.Sample({{"policy", policy}}, static_cast<double>(stats.*(g.field)));
    }
  }
  out.Family("numarena_arena_fallbacks_total", MetricType::kCounter,
             "Times an arena placed memory elsewhere than its policy asked.");
  for (const auto& [policy, stats] : rows) {
    out.Sample({{"policy", policy}}, static_cast<double>(stats.fallbacks));
  }
  out.Family("numarena_arena_refusals_total", MetricType::kCounter,
             "Commits refused by the capacity gate or the node's free memory.");
  for (const auto& [policy, stats] : rows) {
    out.Sample({{"policy", policy}}, static_cast<double>(stats.refusals));
  }
}

void AppendBudgetMetrics(ExpositionWriter& out, const BudgetSnapshot& budget) {
  using N = NodeBudgetSnapshot;
  auto gauge = [&](const char* name, const char* help, auto value) {
    out.Family(name, MetricType::kGauge, help);
    for (const N& n : budget.nodes) out.Sample({{"node", Node(n.node)}}, value(n));
  };
  auto counter = [&](const char* name, const char* help, std::uint64_t N::*field) {
    out.Family(name, MetricType::kCounter, help);
    for (const N& n : budget.nodes) {
      out.Sample({{"node", Node(n.node)}}, static_cast<double>(n.*field));
    }
  };
  gauge("numarena_budget_capacity_bytes", "Capacity of the node's budget.",
        [](const N& n) { return static_cast<double>(n.capacity); });
  gauge("numarena_budget_usage_bytes", "Usage counted against the node's capacity.",
        [](const N& n) { return static_cast<double>(n.usage); });
  gauge("numarena_budget_peak_bytes", "Highest usage seen on the node.",
        [](const N& n) { return static_cast<double>(n.peak); });
  gauge("numarena_budget_usage_ratio", "Usage / capacity of the node.",
        [](const N& n) { return n.usage_fraction(); });
  out.Family("numarena_budget_threshold_ratio", MetricType::kGauge,
             "The budget's thresholds as fractions of capacity (warn, admission, trip).");
  for (const N& n : budget.nodes) {
    out.Sample({{"node", Node(n.node)}, {"threshold", "warn"}}, budget.thresholds.warn);
    out.Sample({{"node", Node(n.node)}, {"threshold", "admission"}},
               budget.thresholds.admission_closed());
    out.Sample({{"node", Node(n.node)}, {"threshold", "trip"}}, budget.thresholds.trip);
  }
  out.Family("numarena_budget_state", MetricType::kGauge,
             "1 for the node's current budget state, 0 for the others.");
  static constexpr std::array<NodeState, 4> kStates = {
      NodeState::kNormal, NodeState::kWarn, NodeState::kAdmissionClosed, NodeState::kTripped};
  for (const N& n : budget.nodes) {
    for (NodeState s : kStates) {
      out.Sample({{"node", Node(n.node)}, {"state", NodeStateName(s)}}, n.state == s ? 1 : 0);
    }
  }
  out.Family("numarena_budget_numarena_bytes", MetricType::kGauge,
             "Bytes numarena itself has charged on the node, by priority class.");
  static constexpr std::array<Priority, kPriorityCount> kPriorities = {
      Priority::kHigh, Priority::kNormal, Priority::kLow};
  for (const N& n : budget.nodes) {
    for (Priority p : kPriorities) {
      out.Sample({{"node", Node(n.node)}, {"priority", PriorityName(p)}},
                 static_cast<double>(n.by_priority[static_cast<int>(p)]));
    }
  }
  counter("numarena_budget_refusals_total", "Charges refused (ResourceExhausted).", &N::refusals);
  counter("numarena_budget_fallbacks_out_total", "Allocations that fell back away from the node.",
          &N::fallbacks_out);
  counter("numarena_budget_fallbacks_in_total", "Allocations that fell back onto the node.",
          &N::fallbacks_in);
  counter("numarena_budget_transitions_total", "Budget state changes of the node.",
          &N::transitions);
  counter("numarena_budget_reclaim_runs_total", "Times the reclaim hooks ran for the node.",
          &N::reclaim_runs);
  counter("numarena_budget_reclaim_freed_bytes_total", "Bytes the reclaim hooks reported freed.",
          &N::reclaim_freed);
  counter("numarena_budget_hook_failures_total", "Reclaim hook calls that failed.",
          &N::hook_failures);
}

void AppendKvPoolMetrics(ExpositionWriter& out, std::string_view pool_name, const KvPoolStats& kv) {
  std::string pool(pool_name);
  out.Family("numarena_kv_blocks", MetricType::kGauge, "KV cache blocks per node and tier.");
  for (const KvNodeStats& n : kv.nodes) {
    out.Sample({{"pool", pool}, {"node", Node(n.node)}, {"tier", "hot"}},
               static_cast<double>(n.hot_blocks));
    out.Sample({{"pool", pool}, {"node", Node(n.node)}, {"tier", "cold"}},
               static_cast<double>(n.cold_blocks));
  }
  out.Family("numarena_kv_slab_bytes", MetricType::kGauge,
             "Memory the KV cache tiers hold per node.");
  for (const KvNodeStats& n : kv.nodes) {
    out.Sample({{"pool", pool}, {"node", Node(n.node)}, {"tier", "hot"}},
               static_cast<double>(n.hot_slab_bytes));
    out.Sample({{"pool", pool}, {"node", Node(n.node)}, {"tier", "cold"}},
               static_cast<double>(n.cold_slab_bytes));
  }
  out.Family("numarena_kv_pinned_blocks", MetricType::kGauge, "KV blocks pinned now.");
  out.Sample({{"pool", pool}}, static_cast<double>(kv.pinned_blocks));
  out.Family("numarena_kv_sequences", MetricType::kGauge, "Sequences holding KV spans.");
  out.Sample({{"pool", pool}}, static_cast<double>(kv.sequences));
  out.Family("numarena_kv_spans", MetricType::kGauge, "KV spans by state.");
  out.Sample({{"pool", pool}, {"state", "in_use"}}, static_cast<double>(kv.spans_in_use));
  out.Sample({{"pool", pool}, {"state", "cached"}}, static_cast<double>(kv.spans_cached));
  out.Sample({{"pool", pool}, {"state", "free"}}, static_cast<double>(kv.spans_free));
  out.Family("numarena_kv_hot_hit_ratio", MetricType::kGauge,
             "Pins served from the hot tier / all pins.");
  out.Sample({{"pool", pool}}, kv.hot_hit_rate);
  out.Family("numarena_kv_pins_total", MetricType::kCounter,
             "Block pins by the tier serving them.");
  out.Sample({{"pool", pool}, {"tier", "hot"}}, static_cast<double>(kv.hot_pins));
  out.Sample({{"pool", pool}, {"tier", "cold"}}, static_cast<double>(kv.cold_pins));
  struct Counter {
    const char* name;
    std::uint64_t KvPoolStats::*field;
    const char* help;
  };
  static constexpr Counter kCounters[] = {
      {"numarena_kv_demotions_total", &KvPoolStats::demotions, "Blocks demoted hot -> cold."},
      {"numarena_kv_promotions_total", &KvPoolStats::promotions, "Blocks promoted cold -> hot."},
      {"numarena_kv_demoted_bytes_total", &KvPoolStats::bytes_demoted, "Bytes demoted."},
      {"numarena_kv_promoted_bytes_total", &KvPoolStats::bytes_promoted, "Bytes promoted."},
      {"numarena_kv_prefix_lookups_total", &KvPoolStats::prefix_lookups,
       "Full spans looked up for prefix reuse."},
      {"numarena_kv_prefix_hits_total", &KvPoolStats::prefix_hits,
       "Prefix lookups found and shared."},
      {"numarena_kv_cached_evictions_total", &KvPoolStats::cached_evictions,
       "Cached spans dropped to make room."},
      {"numarena_kv_refusals_total", &KvPoolStats::refusals, "KV allocations refused."},
      {"numarena_kv_copy_on_writes_total", &KvPoolStats::copy_on_writes,
       "Shared blocks copied before a write."},
      {"numarena_kv_audits_total", &KvPoolStats::audits,
       "Placement audits (KvPool::AuditPlacement calls)."},
      {"numarena_kv_audited_pages_total", &KvPoolStats::audited_pages,
       "Resident pages of KV blocks whose node an audit asked the kernel."},
      {"numarena_kv_pages_moved_back_total", &KvPoolStats::pages_moved_back,
       "Pages the kernel had moved that an audit moved back to their block's node."},
      {"numarena_kv_pages_not_moved_total", &KvPoolStats::pages_not_moved,
       "Pages an audit tried to move back and the kernel refused."},
  };
  for (const Counter& c : kCounters) {
    out.Family(c.name, MetricType::kCounter, c.help);
    out.Sample({{"pool", pool}}, static_cast<double>(kv.*(c.field)));
  }
  // The kernel's own tiering (KvPool::AuditPlacement): tier "hot" is what memory tiering
  // demoted, "cold" what tiering-mode NUMA balancing promoted.
  out.Family("numarena_kv_kernel_moved_pages_total", MetricType::kCounter,
             "Pages of KV blocks an audit found moved off their node by the kernel, by the "
             "tier the pool keeps the block in.");
  out.Sample({{"pool", pool}, {"tier", "hot"}}, static_cast<double>(kv.kernel_demoted_pages));
  out.Sample({{"pool", pool}, {"tier", "cold"}}, static_cast<double>(kv.kernel_promoted_pages));
  out.Family("numarena_kv_misplaced_blocks", MetricType::kGauge,
             "KV blocks with pages the last audit found off their node and left there.");
  out.Sample({{"pool", pool}, {"tier", "hot"}}, static_cast<double>(kv.hot_blocks_misplaced));
  out.Sample({{"pool", pool}, {"tier", "cold"}}, static_cast<double>(kv.cold_blocks_misplaced));
  out.Family("numarena_kv_misplaced_pages", MetricType::kGauge,
             "Pages of KV blocks the last audit found off their node and left there.");
  out.Sample({{"pool", pool}, {"tier", "hot"}}, static_cast<double>(kv.hot_pages_misplaced));
  out.Sample({{"pool", pool}, {"tier", "cold"}}, static_cast<double>(kv.cold_pages_misplaced));
}

void AppendMigrationMetrics(ExpositionWriter& out, const MigrationTotals& t) {
  struct Counter {
    const char* name;
    std::uint64_t MigrationTotals::*field;
    const char* help;
  };
  static constexpr Counter kCounters[] = {
      {"numarena_migration_calls_total", &MigrationTotals::calls, "First-touch correction calls."},
      {"numarena_migration_pages_checked_total", &MigrationTotals::pages_checked,
       "Pages whose node was checked."},
      {"numarena_migration_pages_already_local_total", &MigrationTotals::already_local,
       "Checked pages already on their target node."},
      {"numarena_migration_pages_moved_total", &MigrationTotals::moved,
       "Pages migrated to their target node."},
      {"numarena_migration_pages_not_resident_total", &MigrationTotals::not_resident,
       "Checked pages not resident yet."},
      {"numarena_migration_pages_failed_total", &MigrationTotals::failed,
       "Pages that could not be moved to their target node."},
  };
  for (const Counter& c : kCounters) {
    out.Family(c.name, MetricType::kCounter, c.help);
    out.Sample(static_cast<double>(t.*(c.field)));
  }
}

}  // namespace numarena
