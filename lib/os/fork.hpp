// fork() support: numarena's locks and threads around fork().
//
// The child of a multi-threaded process has only the thread that called fork(). A lock another
// thread held at that instant stays locked in the child for ever, and whatever that lock
// guarded may be half updated; a thread (the budget's refresh thread) is simply gone.
// numarena registers one pthread_atfork handler that runs "stages", one per family of locks:
//
//   prepare  in the parent before fork(), stages in ascending order: each takes its locks,
//            so no other thread is inside what they guard when the address space is copied;
//   parent   after fork() in the parent, descending order: each releases them;
//   child    after fork() in the child, descending order: each releases or re-creates its
//            locks and resets state that belonged to threads the child does not have.
//
// Stage order is lock order: numarena's code may take a later stage's lock while holding an
// earlier stage's, never the other way round, so prepare cannot deadlock against a thread
// that holds one of these locks and waits for the next.
//
// jemalloc. jemalloc's own handler takes every jemalloc lock in its prepare. numarena holds its
// locks while it calls jemalloc (creating a jemalloc arena, and every malloc), so its prepare
// must run first: InstallForkHandlers initializes jemalloc (which registers its handler then)
// before registering numarena's, and prepare handlers run in reverse order of registration
// (parent and child handlers in order, so jemalloc is whole again before numarena's run).
// Locks that jemalloc's extent hooks take (the page provider's) are the other way round: a
// thread may wait for them while it holds a jemalloc lock, so no handler that runs before
// jemalloc's may take them. They are never held across an allocation or a jemalloc call, and
// what they guard is consistent between any two instructions of their critical sections, so
// their stages (kProviderLocks, kCallbackLocks) have no prepare step: the child re-creates
// them.
#pragma once

#include <atomic>

namespace numarena::os {

// In prepare order (see above).
enum class ForkStage : int {
  kResources,      // adapters: the policy_resource table (held while creating arenas)
  kArenaRegistry,  // alloc: the registry of arenas (held while creating heaps)
  kNodeHeaps,      // alloc: per-node heaps of Preferred and Local arenas
  kHeapCreation,   // alloc: heap and shard creation (held while creating jemalloc arenas)
  kHeapLifecycle,  // alloc: heap destruction against walks over every heap (purges, exits)
  kCheckedTable,   // alloc: the checked mode's table of live allocations
  kBudgets,        // budget: the list of budgets and their refresh locks
  kProviderLocks,  // alloc: the page providers' locks (taken in jemalloc hooks); child only
  kCallbackLocks,  // budget: the hook and listener lists' locks (taken in hooks); child only
  kMemoryReturn,   // alloc: the memory returner's thread state and wake-up lock; child only
  kCount,
};

struct ForkStageHandlers {
  void (*prepare)() = nullptr;
  void (*parent)() = nullptr;
  void (*child)() = nullptr;
};

// Sets the handlers of `stage` (a pointer to a constant that lives for ever). Call it from the
// static initialization of the file that owns the stage's locks, so that the stage is set
// before any thread can take them, and call InstallForkHandlers() before the first of them is
// taken. A stage set lazily can be missed: once the handler is installed (by any other
// stage's first use), a fork on one thread may run prepare just before another thread sets
// the stage and takes its lock, and the child then inherits the lock taken. A fork that starts while a stage is
// being set uses the handlers it saw in prepare for all three steps.
void SetForkStage(ForkStage stage, const ForkStageHandlers* handlers);

// The handlers of `stage`, nullptr when none are set (tests check that every stage of the
// layers linked in is set at load).
const ForkStageHandlers* ForkStageOf(ForkStage stage);

// Registers numarena's pthread_atfork handler, after initializing jemalloc (see above). Once
// per process; later calls return at once. If pthread_atfork fails (ENOMEM) it says so on
// stderr and fork() children may hang on numarena's locks.
void InstallForkHandlers();

}  // namespace numarena::os
