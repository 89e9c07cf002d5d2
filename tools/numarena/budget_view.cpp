// The budget view (see budget_view.hpp).
#include "budget_view.hpp"

#include <iomanip>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "numarena/format.hpp"

namespace numarena::cli {


StatusOr<BudgetSnapshot> SystemBudgetSnapshot(const Topology& topology,
                                              const SystemReader& reader) {
  BudgetOptions options;
  options.mode = BudgetMode::kSystem;
  // The budget lives only inside this function, so it may borrow the caller's reader.
  options.reader = std::shared_ptr<const SystemReader>(&reader, [](const SystemReader*) {});
  options.refresh_interval = std::chrono::milliseconds(0);
  auto budget = Budget::Create(std::move(options), topology);
  if (!budget.ok()) return budget.status();
  return (*budget)->Snapshot();
}

namespace {

bool AnyActivity(const BudgetSnapshot& s) {
  if (!s.hooks.empty() || s.events > 0) return true;
  for (const NodeBudgetSnapshot& n : s.nodes) {
    if (n.numarena_bytes() > 0 || n.refusals || n.fallbacks_out || n.fallbacks_in ||
        n.reclaim_runs || n.hook_failures) {
      return true;
    }
  }
  return false;
}

std::string Signed(std::int64_t v) {
  return v < 0 ? "-" + FormatBytes(static_cast<std::uint64_t>(-v))
               : FormatBytes(static_cast<std::uint64_t>(v));
}

}  // namespace

void PrintBudgetView(std::ostream& out, const BudgetSnapshot& s) {
  const BudgetThresholds& t = s.thresholds;
  out << "budget (" << BudgetModeName(s.mode) << " mode: "
      << (s.mode == BudgetMode::kSystem
              ? (s.inactive_file_is_free
                     ? "capacity = node MemTotal, or cgroup memory.max when lower; used = "
                       "MemTotal - MemFree - Inactive(file), the inactive page cache counted "
                       "as free"
                     : "capacity = node MemTotal, or cgroup memory.max when lower; used = "
                       "MemTotal - MemFree")
              : "capacity = configured quota; used = what numarena committed")
      << ")\n";
  out << "thresholds: warn " << FormatPercent(t.warn) << ", admission closes "
      << FormatPercent(t.admission_closed()) << ", trip " << FormatPercent(t.trip)
      << ", hysteresis " << FormatPercent(t.hysteresis) << "\n";
  if (s.cgroup_limit) {
    out << "cgroup memory.max " << FormatBytes(*s.cgroup_limit);
    if (s.cgroup_usage) {
      out << " (memory.current " << FormatBytes(*s.cgroup_usage);
      if (s.cgroup_inactive_file) {
        out << ", of it inactive page cache " << FormatBytes(*s.cgroup_inactive_file);
      }
      out << ")";
    }
    out << "\n";
  }
  auto row = [&out](const std::string& a, const std::string& b, const std::string& c,
                    const std::string& d, const std::string& e, const std::string& f,
                    const std::string& g, const std::string& h) {
    out << std::left << std::setw(6) << a << std::setw(12) << b << std::setw(12) << c
        << std::setw(9) << d << std::setw(18) << e << std::setw(12) << f << std::setw(12) << g << h
        << "\n";
  };
  row("node", "capacity", "used", "used %", "state", "warn at", "closes at", "trips at");
  for (const NodeBudgetSnapshot& n : s.nodes) {
    row(absl::StrCat(n.node), FormatBytes(n.capacity), FormatBytes(n.usage),
        FormatPercent(n.usage_fraction()), NodeStateName(n.state), FormatBytes(n.warn_bytes),
        FormatBytes(n.admission_bytes), FormatBytes(n.trip_bytes));
  }
  if (!s.last_refresh_error.empty()) {
    out << "last refresh failed: " << s.last_refresh_error << "\n";
  }
  if (!AnyActivity(s)) return;
  out << "\nnumarena's charges and events\n";
  out << std::left << std::setw(6) << "node" << std::setw(12) << "high" << std::setw(12) << "normal"
      << std::setw(12) << "low" << std::setw(10) << "refusals" << std::setw(11) << "fallbacks"
      << std::setw(13) << "transitions"
      << "reclaim (runs, asked, freed, failures)\n";
  for (const NodeBudgetSnapshot& n : s.nodes) {
    out << std::left << std::setw(6) << n.node << std::setw(12) << Signed(n.by_priority[0])
        << std::setw(12) << Signed(n.by_priority[1]) << std::setw(12) << Signed(n.by_priority[2])
        << std::setw(10) << n.refusals << std::setw(11)
        << absl::StrCat(n.fallbacks_out, " out/", n.fallbacks_in, " in") << std::setw(13)
        << n.transitions << n.reclaim_runs << ", " << FormatBytes(n.reclaim_asked) << ", "
        << FormatBytes(n.reclaim_freed) << ", " << n.hook_failures << "\n";
  }
  for (const ReclaimHookSnapshot& h : s.hooks) {
    out << "hook " << h.name << " (" << PriorityName(h.priority) << "): " << h.calls
        << " calls, freed " << FormatBytes(h.freed) << ", " << h.failures << " failures\n";
  }
  if (s.listener_failures || s.events_dropped) {
    out << "listener failures " << s.listener_failures << ", events dropped " << s.events_dropped
        << "\n";
  }
}

void WriteBudgetJson(JsonWriter& json, const BudgetSnapshot& s) {
  json.BeginObject();
  json.Key("schema").String("numarena.budget/1");
  json.Key("mode").String(BudgetModeName(s.mode));
  json.Key("thresholds").BeginObject();
  json.Key("warn").Double(s.thresholds.warn);
  json.Key("admission_closed").Double(s.thresholds.admission_closed());
  json.Key("trip").Double(s.thresholds.trip);
  json.Key("hysteresis").Double(s.thresholds.hysteresis);
  json.Key("gentle_reclaim").Double(s.thresholds.gentle_reclaim);
  json.EndObject();
  json.Key("weights").BeginObject();
  json.Key("high").Double(s.weights.high);
  json.Key("normal").Double(s.weights.normal);
  json.Key("low").Double(s.weights.low);
  json.EndObject();
  json.Key("cgroup");
  if (s.cgroup_limit) {
    json.BeginObject();
    json.Key("limit_bytes").Uint(*s.cgroup_limit);
    json.Key("usage_bytes");
    if (s.cgroup_usage) {
      json.Uint(*s.cgroup_usage);
    } else {
      json.Null();
    }
    json.Key("inactive_file_bytes");
    if (s.cgroup_inactive_file) {
      json.Uint(*s.cgroup_inactive_file);
    } else {
      json.Null();
    }
    json.EndObject();
  } else {
    json.Null();
  }
  json.Key("refresh").BeginObject();
  json.Key("interval_ms").Int(s.refresh_interval.count());
  json.Key("refreshes").Uint(s.refreshes);
  json.Key("failures").Uint(s.refresh_failures);
  json.Key("last_error");
  if (s.last_refresh_error.empty()) {
    json.Null();
  } else {
    json.String(s.last_refresh_error);
  }
  json.EndObject();
  json.Key("nodes").BeginArray();
  for (const NodeBudgetSnapshot& n : s.nodes) {
    json.BeginObject();
    json.Key("id").Int(n.node);
    json.Key("state").String(NodeStateName(n.state));
    json.Key("capacity_bytes").Uint(n.capacity);
    json.Key("usage_bytes").Uint(n.usage);
    json.Key("usage_fraction").Double(n.usage_fraction());
    json.Key("peak_bytes").Uint(n.peak);
    json.Key("warn_bytes").Uint(n.warn_bytes);
    json.Key("admission_bytes").Uint(n.admission_bytes);
    json.Key("trip_bytes").Uint(n.trip_bytes);
    json.Key("mem_total_bytes").Uint(n.mem_total);
    json.Key("mem_free_bytes").Uint(n.mem_free);
    json.Key("system_used_bytes").Uint(n.system_used);
    json.Key("numarena_bytes").BeginObject();
    for (int p = 0; p < kPriorityCount; ++p) {
      json.Key(PriorityName(static_cast<Priority>(p))).Int(n.by_priority[p]);
    }
    json.EndObject();
    json.Key("refusals").Uint(n.refusals);
    json.Key("fallbacks_out").Uint(n.fallbacks_out);
    json.Key("fallbacks_in").Uint(n.fallbacks_in);
    json.Key("transitions").Uint(n.transitions);
    json.Key("reclaim").BeginObject();
    json.Key("runs").Uint(n.reclaim_runs);
    json.Key("asked_bytes").Uint(n.reclaim_asked);
    json.Key("freed_bytes").Uint(n.reclaim_freed);
    json.Key("hook_failures").Uint(n.hook_failures);
    json.Key("skipped").Uint(n.reclaim_skipped);
    json.EndObject();
    json.EndObject();
  }
  json.EndArray();
  json.Key("hooks").BeginArray();
  for (const ReclaimHookSnapshot& h : s.hooks) {
    json.BeginObject();
    json.Key("name").String(h.name);
    json.Key("priority").String(PriorityName(h.priority));
    json.Key("calls").Uint(h.calls);
    json.Key("freed_bytes").Uint(h.freed);
    json.Key("failures").Uint(h.failures);
    json.EndObject();
  }
  json.EndArray();
  json.Key("events").Uint(s.events);
  json.Key("listener_failures").Uint(s.listener_failures);
  json.Key("events_dropped").Uint(s.events_dropped);
  json.EndObject();
}

}  // namespace numarena::cli
