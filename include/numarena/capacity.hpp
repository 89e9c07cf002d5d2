// The capacity gate: how the page provider asks "may I commit N more bytes on node X?".
//
// numarena commits memory in spans at one place, the node page provider. Before it makes a
// span resident it calls `CapacityGate::Charge`, and when it purges a span it calls
// `Release`. A budget (budget.hpp) is one implementation; tests plug in others. Because the
// gate sits at span granularity, small-object allocation never pays for accounting.
//
// Work is classed by priority: under pressure, high-priority work may use the headroom that
// normal and low priority may not, and low priority is reclaimed first. The priority of an
// allocation is the calling thread's current priority (`PriorityScope`).
//
//   {
//     numarena::PriorityScope high(numarena::Priority::kHigh);
//     void* p = arena->allocate(64 << 20);  // charged as high priority
//   }
#pragma once

#include <cstddef>

#include "numarena/status.hpp"

namespace numarena {

enum class Priority : unsigned char { kHigh = 0, kNormal = 1, kLow = 2 };
inline constexpr int kPriorityCount = 3;
const char* PriorityName(Priority priority);

class CapacityGate {
 public:
  virtual ~CapacityGate() = default;

  // Asks to commit `bytes` more on `node` for work of `priority`. OK means the bytes are now
  // charged and the caller must Release them later with the same node and priority.
  // ResourceExhausted means refused; the message names the node, its usage and the limit.
  // Must be thread-safe, must not allocate through numarena, and must not block for long.
  [[nodiscard]] virtual Status Charge(int node, std::size_t bytes, Priority priority) = 0;

  // Returns `bytes` charged earlier on `node` with `priority`. May be called from any thread.
  virtual void Release(int node, std::size_t bytes, Priority priority) = 0;

  // True when numarena's per-thread caches should keep little of `node`'s memory: objects
  // they hold stay committed and charged, so a gate under pressure wants them back. Asked
  // only on the caches' cold paths (a full list, about once per half list of frees), never
  // per allocation; must be cheap, thread-safe, and must not allocate through numarena.
  // The default says no: caches are then sized for an installed gate (smaller than with
  // none, see Arena::purge in arena.hpp). A Budget says yes from the warn line on.
  virtual bool CachesShouldShrink(int node) {
    (void)node;
    return false;
  }

  // Told when an allocation meant for `from_node` was placed on `to_node` instead (a
  // Preferred arena moving on to the next node by distance because `from_node` refused or
  // was full). For accounting only; the default ignores it. Same rules as Charge.
  virtual void RecordFallback(int from_node, int to_node) {
    (void)from_node;
    (void)to_node;
  }
};

// The calling thread's priority for the allocations it makes (default kNormal).
Priority CurrentPriority();

// Sets the calling thread's priority for its lifetime, restoring the previous one after.
class PriorityScope {
 public:
  explicit PriorityScope(Priority priority);
  ~PriorityScope();
  PriorityScope(const PriorityScope&) = delete;
  PriorityScope& operator=(const PriorityScope&) = delete;

 private:
  Priority previous_;
};

}  // namespace numarena
