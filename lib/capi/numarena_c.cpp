// The C API (include/numarena/numarena.h): a thin layer over the C++ API that turns
// absl::Status into a numarena_code plus a per-thread message, and C++ values into C structs.
// It adds no behaviour of its own beyond what C callers need and C++ callers get from the
// type system: NULL checks, checked products (calloc), realloc, posix_memalign's contract.
#include "numarena/numarena.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "capi/arena_handles.hpp"
#include "capi/capi_errors.hpp"
#include "numarena/arena.hpp"
#include "numarena/budget.hpp"
#include "numarena/first_touch.hpp"
#include "numarena/format.hpp"
#include "numarena/ops/metrics.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/policy.hpp"
#include "numarena/topology.hpp"

struct numarena_budget {
  std::unique_ptr<numarena::Budget> budget;
};

namespace numarena {
namespace {

// What numarena.h promises every allocation: alignof(max_align_t), whatever a caller asks.
constexpr std::size_t kMinAlignment = alignof(std::max_align_t);

struct LastError {
  numarena_code code = NUMARENA_OK;
  std::string message;
};
thread_local LastError last_error;

numarena_code CodeOf(const Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return NUMARENA_OK;
    case absl::StatusCode::kInvalidArgument:
      return NUMARENA_INVALID_ARGUMENT;
    case absl::StatusCode::kNotFound:
      return NUMARENA_NOT_FOUND;
    case absl::StatusCode::kPermissionDenied:
      return NUMARENA_PERMISSION_DENIED;
    case absl::StatusCode::kResourceExhausted:
      return NUMARENA_RESOURCE_EXHAUSTED;
    case absl::StatusCode::kFailedPrecondition:
      return NUMARENA_FAILED_PRECONDITION;
    case absl::StatusCode::kOutOfRange:
      return NUMARENA_OUT_OF_RANGE;
    case absl::StatusCode::kUnimplemented:
      return NUMARENA_UNIMPLEMENTED;
    case absl::StatusCode::kInternal:
      return NUMARENA_INTERNAL;
    case absl::StatusCode::kDataLoss:
      return NUMARENA_DATA_LOSS;
    default:
      return NUMARENA_UNKNOWN;
  }
}

// Records `status` as the thread's last error (unless OK) and returns its code.
numarena_code Fail(const Status& status) {
  if (status.ok()) return NUMARENA_OK;
  last_error.code = CodeOf(status);
  last_error.message = std::string(status.message());
  return last_error.code;
}

numarena_code Invalid(std::string message) {
  return Fail(absl::InvalidArgumentError(std::move(message)));
}

// The arena a non-NULL handle names, or nullptr with the stale-handle error recorded.
Arena* ArenaOf(const numarena_arena* handle, const char* function) {
  Arena* arena = capi::ArenaOfHandle(handle);
  if (arena == nullptr) {
    Fail(absl::FailedPreconditionError(capi::StaleHandleMessage(function)));
  }
  return arena;
}

// The handle of `arena`, or NULL with the error recorded (the handle table is full).
numarena_arena* Handle(Arena* arena) {
  StatusOr<numarena_arena*> handle = capi::HandleOf(arena);
  if (!handle.ok()) {
    Fail(handle.status());
    return nullptr;
  }
  return *handle;
}

// snprintf's contract for a C++ string.
std::size_t CopyOut(const std::string& text, char* buffer, std::size_t size) {
  if (buffer != nullptr && size > 0) {
    std::size_t n = text.size() < size - 1 ? text.size() : size - 1;
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
  }
  return text.size();
}

// The arena `make` (Arena::ForPolicy or Arena::Create with its options) gives for the policy
// string, or NULL with the error recorded; `function` names the C entry point.
template <typename Make>
numarena_arena* ArenaForString(const char* function, const char* policy, Make make) {
  if (policy == nullptr) {
    Invalid(absl::StrCat(function, ": the policy string is NULL"));
    return nullptr;
  }
  auto parsed = Policy::Parse(policy);
  if (!parsed.ok()) {
    Fail(parsed.status());
    return nullptr;
  }
  StatusOr<Arena*> arena = make(*parsed);
  if (!arena.ok()) {
    Fail(arena.status());
    return nullptr;
  }
  return Handle(*arena);
}

// `options` as ArenaOptions (NULL: the defaults), or InvalidArgument recorded and false.
bool ReadOptions(const numarena_arena_options* options, ArenaOptions* out) {
  *out = ArenaOptions();
  if (options == nullptr) return true;
  if (options->size < sizeof(numarena_arena_options)) {
    Invalid(absl::StrCat("numarena_arena_create_with_options: options->size is ", options->size,
                         ", less than sizeof(numarena_arena_options) (",
                         sizeof(numarena_arena_options),
                         "): zero the struct and set size = sizeof(numarena_arena_options)"));
    return false;
  }
  // A caller built against a later header may pass more fields; they must be unset here.
  // Past kMaxOptionsSize the size is not an options struct's (uninitialised, or hostile):
  // reading that far could run off the caller's memory.
  constexpr std::size_t kMaxOptionsSize = 4096;
  if (options->size > kMaxOptionsSize) {
    Invalid(absl::StrCat("numarena_arena_create_with_options: options->size is ", options->size,
                         ", more than any numarena's options struct (", kMaxOptionsSize,
                         "): set size = sizeof(numarena_arena_options)"));
    return false;
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(options);
  for (std::size_t i = sizeof(numarena_arena_options); i < options->size; ++i) {
    if (bytes[i] != 0) {
      Invalid(absl::StrCat("numarena_arena_create_with_options: byte ", i,
                           " of the options is set, but this numarena (", NUMARENA_VERSION_STRING,
                           ") knows only the first ", sizeof(numarena_arena_options)));
      return false;
    }
  }
  out->hugetlb_page_bytes = options->hugetlb_page_bytes;
  out->shards = options->shards;
  return true;
}

void* Allocate(numarena_arena* arena, std::size_t size, std::size_t alignment) {
  if (arena == nullptr) {
    Invalid("numarena allocation: the arena is NULL (numarena_arena_for_node or "
            "numarena_arena_for_policy returned NULL; see the error it left)");
    return nullptr;
  }
  Arena* target = ArenaOf(arena, "numarena allocation");
  if (target == nullptr) return nullptr;
  void* p = target->allocate(size, alignment);
  if (p == nullptr) Fail(last_allocation_error());
  return p;
}

void ToReport(const PlacementReport& in, numarena_placement_report* out) {
  if (out == nullptr) return;
  out->node = in.node;
  out->pages_checked = in.pages_checked;
  out->already_local = in.already_local;
  out->moved = in.moved;
  out->not_resident = in.not_resident;
  out->failed = in.failed;
}

StatusOr<const Topology*> SystemTopology() { return Topology::system(); }

}  // namespace

numarena_code capi::RecordError(const Status& status) { return Fail(status); }

}  // namespace numarena

using namespace numarena;  // NOLINT: the C entry points below implement numarena's API

extern "C" {

numarena_code numarena_last_error(void) { return last_error.code; }

const char* numarena_last_error_message(void) { return last_error.message.c_str(); }

void numarena_clear_error(void) {
  last_error.code = NUMARENA_OK;
  last_error.message.clear();
}

const char* numarena_version(void) { return NUMARENA_VERSION_STRING; }

numarena_arena* numarena_arena_for_node(int node) {
  auto arena = Arena::ForNode(node);
  if (!arena.ok()) {
    Fail(arena.status());
    return nullptr;
  }
  return Handle(*arena);
}

numarena_arena* numarena_arena_for_policy(const char* policy) {
  return ArenaForString("numarena_arena_for_policy", policy,
                        [](const Policy& parsed) { return Arena::ForPolicy(parsed); });
}

numarena_arena* numarena_arena_create(const char* policy) {
  return ArenaForString("numarena_arena_create", policy,
                        [](const Policy& parsed) { return Arena::Create(parsed); });
}

numarena_arena* numarena_arena_create_with_options(const char* policy,
                                                   const numarena_arena_options* options) {
  ArenaOptions arena_options;
  if (!ReadOptions(options, &arena_options)) return nullptr;
  return ArenaForString(
      "numarena_arena_create_with_options", policy,
      [&arena_options](const Policy& parsed) { return Arena::Create(parsed, arena_options); });
}

numarena_code numarena_arena_options_of(const numarena_arena* arena,
                                        numarena_arena_options* out) {
  if (arena == nullptr || out == nullptr) {
    return Invalid("numarena_arena_options_of: the arena or the output is NULL");
  }
  if (out->size < sizeof(numarena_arena_options)) {
    return Invalid(absl::StrCat("numarena_arena_options_of: out->size is ", out->size,
                                ", less than sizeof(numarena_arena_options) (",
                                sizeof(numarena_arena_options), ")"));
  }
  const Arena* target = ArenaOf(arena, "numarena_arena_options_of");
  if (target == nullptr) return last_error.code;
  const ArenaOptions& options = target->options();
  out->size = sizeof(numarena_arena_options);
  out->hugetlb_page_bytes = options.hugetlb_page_bytes;
  out->shards = options.shards;
  return NUMARENA_OK;
}

numarena_code numarena_arena_destroy(numarena_arena* arena) {
  if (arena == nullptr) return Invalid("numarena_arena_destroy: the arena is NULL");
  return Fail(capi::DestroyByHandle(arena));
}

size_t numarena_arena_policy(const numarena_arena* arena, char* buffer, size_t size) {
  const Arena* target = arena == nullptr ? nullptr : ArenaOf(arena, "numarena_arena_policy");
  if (target == nullptr) return CopyOut("", buffer, size);
  return CopyOut(target->policy().ToString(), buffer, size);
}

void numarena_arena_purge(numarena_arena* arena) {
  if (arena == nullptr) return;
  if (Arena* target = ArenaOf(arena, "numarena_arena_purge")) target->purge();
}

void* numarena_malloc(numarena_arena* arena, size_t size) {
  return Allocate(arena, size, alignof(std::max_align_t));
}

void* numarena_calloc(numarena_arena* arena, size_t count, size_t size) {
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    Invalid(absl::StrCat("numarena_calloc: ", count, " x ", size,
                         " bytes overflows the address space"));
    return nullptr;
  }
  void* p = Allocate(arena, bytes, alignof(std::max_align_t));
  if (p != nullptr) std::memset(p, 0, bytes);
  return p;
}

void* numarena_realloc(numarena_arena* arena, void* ptr, size_t size) {
  if (ptr == nullptr) return numarena_malloc(arena, size);
  if (!owns(ptr)) {
    Invalid("numarena_realloc: the pointer was not allocated by numarena; realloc it with "
            "the allocator that made it");
    return nullptr;
  }
  if (size == 0) {
    numarena::deallocate(ptr);
    return nullptr;
  }
  if (arena == nullptr) {
    Invalid("numarena_realloc: the arena is NULL (numarena_arena_for_node or "
            "numarena_arena_for_policy returned NULL; see the error it left); ptr is unchanged");
    return nullptr;
  }
  Arena* target = ArenaOf(arena, "numarena_realloc");
  if (target == nullptr) return nullptr;  // ptr is unchanged
  // Kept in place when the arena made it and it fits without wasting more than half of it:
  // C callers free unsized, so a smaller class than the object's does no harm. Anything else
  // is the C++ reallocate (in place only within the object's class, else moved to `arena`).
  const std::size_t usable = usable_size(ptr);
  if (size <= usable && size >= usable / 2 && target->contains(ptr)) return ptr;
  void* resized = target->reallocate(ptr, size);
  if (resized == nullptr) Fail(last_allocation_error());
  return resized;
}

void* numarena_aligned_alloc(numarena_arena* arena, size_t alignment, size_t size) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    Invalid(absl::StrCat("numarena_aligned_alloc: alignment ", alignment,
                         " is not a power of two"));
    return nullptr;
  }
  return Allocate(arena, size, std::max(alignment, kMinAlignment));
}

int numarena_posix_memalign(numarena_arena* arena, void** out, size_t alignment, size_t size) {
  if (out == nullptr || arena == nullptr) {
    Invalid("numarena_posix_memalign: NULL out pointer or arena");
    return EINVAL;
  }
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) {
    Invalid(absl::StrCat("numarena_posix_memalign: alignment ", alignment,
                         " is not a power of two multiple of sizeof(void*)"));
    return EINVAL;
  }
  // The arguments posix_memalign may call invalid are checked above; whatever refuses the
  // request now (room, a size too large for any allocation) is ENOMEM, as glibc answers.
  void* p = Allocate(arena, size, std::max(alignment, kMinAlignment));
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}

void numarena_free(void* ptr) { numarena::deallocate(ptr); }

size_t numarena_usable_size(const void* ptr) { return owns(ptr) ? usable_size(ptr) : 0; }

int numarena_owns(const void* ptr) { return owns(ptr) ? 1 : 0; }

int numarena_arena_contains(const numarena_arena* arena, const void* ptr) {
  if (arena == nullptr) return 0;
  const Arena* target = capi::ArenaOfHandle(arena);
  return target != nullptr && target->contains(ptr) ? 1 : 0;
}

int numarena_node_of(const void* ptr) { return node_of(ptr); }

numarena_code numarena_page_nodes(const void* ptr, size_t len, size_t* pages_on_node,
                                  size_t node_slots, numarena_page_counts* counts) {
  if (counts == nullptr || (pages_on_node == nullptr && node_slots > 0)) {
    return Invalid("numarena_page_nodes: NULL counts, or NULL pages_on_node with slots");
  }
  auto found = page_nodes(ptr, len);
  if (!found.ok()) return Fail(found.status());
  *counts = {found->total_pages, found->not_resident, found->unmapped, 0};
  for (std::size_t i = 0; i < node_slots; ++i) pages_on_node[i] = 0;
  for (const auto& [node, pages] : found->pages_on_node) {
    if (node >= 0 && static_cast<std::size_t>(node) < node_slots) {
      pages_on_node[node] = pages;
    } else {
      counts->on_other_nodes += pages;
    }
  }
  return NUMARENA_OK;
}

numarena_code numarena_prefault(void* ptr, size_t len, int node,
                                numarena_placement_report* report) {
  auto done = prefault(ptr, len, node);
  if (!done.ok()) return Fail(done.status());
  ToReport(*done, report);
  return NUMARENA_OK;
}

numarena_code numarena_correct(void* ptr, size_t len, int node,
                               numarena_placement_report* report) {
  auto done = correct(ptr, len, node);
  if (!done.ok()) return Fail(done.status());
  ToReport(*done, report);
  return NUMARENA_OK;
}

numarena_budget* numarena_budget_create(const char* spec) {
  const std::string text = spec == nullptr ? "" : spec;
  BudgetOptions options;
  if (text == "system") {
    options.mode = BudgetMode::kSystem;
  } else if (text.rfind("quota:", 0) == 0) {
    auto bytes = ParseByteSize(std::string_view(text).substr(6));
    if (!bytes.ok() || *bytes == 0) {
      Invalid(absl::StrCat("numarena_budget_create: '", text,
                           "': the quota must be a positive size, e.g. quota:8G",
                           bytes.ok() ? "" : absl::StrCat(" (", bytes.status().message(), ")")));
      return nullptr;
    }
    options.mode = BudgetMode::kQuota;
    options.default_quota_bytes = *bytes;
  } else {
    Invalid(absl::StrCat("numarena_budget_create: '", text,
                         "' is not a budget; use \"system\" or \"quota:SIZE\" (e.g. quota:8G)"));
    return nullptr;
  }
  auto topology = SystemTopology();
  if (!topology.ok()) {
    Fail(topology.status());
    return nullptr;
  }
  auto budget = Budget::Create(std::move(options), **topology);
  if (!budget.ok()) {
    Fail(budget.status());
    return nullptr;
  }
  return new numarena_budget{*std::move(budget)};
}

numarena_code numarena_budget_destroy(numarena_budget* budget) {
  if (budget == nullptr) return NUMARENA_OK;
  if (GetCapacityGate() == budget->budget.get()) {
    return Fail(absl::FailedPreconditionError(
        "numarena_budget_destroy: the budget is installed; call numarena_budget_install(NULL) "
        "first"));
  }
  delete budget;
  return NUMARENA_OK;
}

numarena_code numarena_budget_install(numarena_budget* budget) {
  return Fail(InstallProcessBudget(budget == nullptr ? nullptr : budget->budget.get()));
}

numarena_code numarena_budget_snapshot(const numarena_budget* budget, numarena_budget_node* nodes,
                                       size_t capacity, size_t* count) {
  if (budget == nullptr || count == nullptr || (nodes == nullptr && capacity > 0)) {
    return Invalid("numarena_budget_snapshot: NULL budget or count, or NULL nodes with capacity");
  }
  const BudgetSnapshot snapshot = budget->budget->Snapshot();
  *count = snapshot.nodes.size();
  for (std::size_t i = 0; i < snapshot.nodes.size() && i < capacity; ++i) {
    const NodeBudgetSnapshot& n = snapshot.nodes[i];
    nodes[i] = {n.node,
                static_cast<numarena_node_state>(n.state),
                n.capacity,
                n.usage,
                n.peak,
                n.warn_bytes,
                n.admission_bytes,
                n.trip_bytes,
                n.numarena_bytes(),
                n.refusals};
  }
  if (capacity < snapshot.nodes.size()) {
    return Fail(absl::OutOfRangeError(absl::StrCat("numarena_budget_snapshot: ",
                                                   snapshot.nodes.size(), " nodes, room for ",
                                                   capacity)));
  }
  return NUMARENA_OK;
}

numarena_code numarena_budget_admit(const numarena_budget* budget, int node, size_t bytes,
                                    numarena_priority priority, numarena_admission* answer) {
  if (budget == nullptr || answer == nullptr) {
    return Invalid("numarena_budget_admit: NULL budget or answer");
  }
  const int level = static_cast<int>(priority);
  if (level < 0 || level >= kPriorityCount) {
    return Invalid(absl::StrCat("numarena_budget_admit: priority ", level,
                                " is not NUMARENA_PRIORITY_HIGH, _NORMAL or _LOW"));
  }
  if (budget->budget->Snapshot().node(node) == nullptr) {
    return Invalid(absl::StrCat("numarena_budget_admit: node ", node,
                                " is not one of the budget's nodes"));
  }
  *answer = static_cast<numarena_admission>(
      budget->budget->Admit(node, bytes, static_cast<Priority>(level)));
  return NUMARENA_OK;
}

numarena_code numarena_topology_nodes(numarena_node_info* nodes, size_t capacity, size_t* count) {
  if (count == nullptr || (nodes == nullptr && capacity > 0)) {
    return Invalid("numarena_topology_nodes: NULL count, or NULL nodes with capacity");
  }
  auto topology = SystemTopology();
  if (!topology.ok()) return Fail(topology.status());
  const auto& all = (*topology)->nodes();
  *count = all.size();
  for (std::size_t i = 0; i < all.size() && i < capacity; ++i) {
    nodes[i] = {all[i].id, static_cast<int>(all[i].cpus.size()),
                (*topology)->memory_allowed(all[i].id) ? 1 : 0, all[i].mem_total_bytes,
                all[i].mem_free_bytes};
  }
  if (capacity < all.size()) {
    return Fail(absl::OutOfRangeError(
        absl::StrCat("numarena_topology_nodes: ", all.size(), " nodes, room for ", capacity)));
  }
  return NUMARENA_OK;
}

int numarena_distance(int from, int to) {
  auto topology = SystemTopology();
  if (!topology.ok()) {
    Fail(topology.status());
    return -1;
  }
  const int distance = (*topology)->distance(from, to);
  if (distance < 0) {
    Invalid(absl::StrCat("numarena_distance: node ", (*topology)->has_node(from) ? to : from,
                         " is not online (online: ", FormatIdList((*topology)->node_ids()), ")"));
  }
  return distance;
}

int numarena_current_node(void) {
  const int node = Topology::current_node();
  if (node < 0) Fail(absl::UnavailableError("numarena_current_node: the kernel did not say"));
  return node;
}

size_t numarena_topology_summary(char* buffer, size_t size) {
  auto topology = SystemTopology();
  if (!topology.ok()) {
    Fail(topology.status());
    return CopyOut("", buffer, size);
  }
  const Topology& t = **topology;
  std::string text;
  for (const NodeInfo& node : t.nodes()) {
    std::vector<int> distances;
    for (const NodeInfo& other : t.nodes()) distances.push_back(t.distance(node.id, other.id));
    absl::StrAppend(&text, "node ", node.id, ": ",
                    node.cpus.empty() ? std::string("no CPUs (memory-only)")
                                      : absl::StrCat("CPUs ", FormatIdList(node.cpus)),
                    ", ", FormatBytes(node.mem_total_bytes), " (",
                    FormatBytes(node.mem_free_bytes), " free), distances ",
                    absl::StrJoin(distances, " "),
                    t.memory_allowed(node.id) ? "" : ", not allowed to this process", "\n");
  }
  for (const PciDevice& device : t.devices()) {
    absl::StrAppend(&text, DeviceKindName(device.kind), " ", device.bus_id, ": node ",
                    device.node ? absl::StrCat(*device.node) : std::string("unknown"), "\n");
  }
  absl::StrAppend(&text, "process: CPUs ", FormatIdList(t.process().allowed_cpus),
                  ", memory nodes ", FormatIdList(t.process().allowed_mem_nodes), "\n");
  return CopyOut(text, buffer, size);
}

size_t numarena_metrics_text(const numarena_arena* const* arenas, size_t arena_count,
                             const numarena_budget* budget, char* buffer, size_t size) {
  if (arenas == nullptr && arena_count > 0) {
    Invalid("numarena_metrics_text: NULL arenas with a count");
    return CopyOut("", buffer, size);
  }
  MetricsSources sources;
  for (std::size_t i = 0; i < arena_count; ++i) {
    if (arenas[i] == nullptr) {
      Invalid(absl::StrCat("numarena_metrics_text: arenas[", i, "] is NULL"));
      return CopyOut("", buffer, size);
    }
    const Arena* target = ArenaOf(arenas[i], "numarena_metrics_text");
    if (target == nullptr) return CopyOut("", buffer, size);
    sources.arenas.push_back(target);
  }
  BudgetSnapshot snapshot;
  if (budget != nullptr) {
    snapshot = budget->budget->Snapshot();
    sources.budget = &snapshot;
  }
  auto text = RenderMetrics(sources);
  if (!text.ok()) {
    Fail(text.status());
    return CopyOut("", buffer, size);
  }
  return CopyOut(*text, buffer, size);
}

}  // extern "C"
