// The callback registries of a budget (reclaim hooks and listeners): registered rarely,
// called from allocation paths on any thread.
//
// Calling must not allocate or hold a lock while the callback runs, and unregistering must
// be safe against a call in flight on another thread: when Remove returns, the callback is
// neither running elsewhere nor called again, so its owner may destroy what it captured.
// The list is an immutable vector behind a shared_ptr; a caller copies the pointer under a
// short mutex (an atomic increment, no allocation) and iterates without any lock. Each
// entry counts its callers in flight; Remove marks it removed and waits for that count to
// drop (not counting calls of the removing thread itself, so a callback may remove itself).
//
// fork(): the mutex is taken on allocation paths inside jemalloc's hooks (a charge that changes
// a node's state delivers events), so it cannot be taken before fork (os/fork.hpp); a child
// re-creates it instead (RecreateInForkChild). For that, nothing is allocated or freed under
// it, and the list is switched by one pointer store, so it is whole at any instant.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "numarena/capacity.hpp"

namespace numarena::budget_internal {

// The entries the calling thread is inside of (nesting is rare and shallow; deeper calls
// are not tracked, which only matters if such a callback removed itself).
struct ActiveCalls {
  static constexpr int kMax = 8;
  const void* entries[kMax] = {};
  int depth = 0;

  int CountOf(const void* entry) const {
    int n = 0;
    for (int i = 0; i < std::min(depth, kMax); ++i) n += entries[i] == entry;
    return n;
  }
};
inline thread_local ActiveCalls t_active_calls;

template <typename Fn>
class CallbackRegistry {
 public:
  struct Entry {
    std::uint64_t id = 0;
    Priority priority = Priority::kNormal;
    std::string name;
    Fn fn;
    std::atomic<int> in_flight{0};
    std::atomic<bool> removed{false};
    std::atomic<std::uint64_t> calls{0};
    std::atomic<std::uint64_t> freed{0};
    std::atomic<std::uint64_t> failures{0};
  };
  using List = std::vector<std::shared_ptr<Entry>>;

  // Adds an entry; the list is ordered by `rank(priority)` ascending, then by id.
  template <typename Rank>
  std::uint64_t Add(Priority priority, std::string name, Fn fn, Rank rank) {
    auto entry = std::make_shared<Entry>();
    entry->priority = priority;
    entry->name = std::move(name);
    entry->fn = std::move(fn);
    entry->id = last_id_.fetch_add(1, std::memory_order_relaxed) + 1;
    Update([&](List& list) {
      auto at = std::find_if(list.begin(), list.end(), [&](const std::shared_ptr<Entry>& e) {
        return rank(e->priority) > rank(priority);
      });
      list.insert(at, entry);
      return true;
    });
    return entry->id;
  }

  // Removes the entry and waits until no other thread runs it. False for an unknown id.
  bool Remove(std::uint64_t id) {
    std::shared_ptr<Entry> gone;
    bool found = Update([&](List& list) {
      auto at = std::find_if(list.begin(), list.end(),
                             [&](const std::shared_ptr<Entry>& e) { return e->id == id; });
      if (at == list.end()) return false;
      gone = *at;
      list.erase(at);
      return true;
    });
    if (!found) return false;
    gone->removed.store(true);
    const int mine = t_active_calls.CountOf(gone.get());
    while (gone->in_flight.load() > mine) std::this_thread::yield();
    return true;
  }

  std::shared_ptr<const List> Current() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_->list;
  }

  // In a fork() child: re-creates the lock, which a thread the child does not have may have
  // held, and resets each entry's calls in flight to this thread's own (the other callers
  // are gone; a Remove would wait for them for ever).
  void RecreateInForkChild() {
    new (&mutex_) std::mutex();
    for (const std::shared_ptr<Entry>& entry : *current_->list) {
      entry->in_flight.store(t_active_calls.CountOf(entry.get()));
    }
  }

  CallbackRegistry() = default;
  ~CallbackRegistry() { delete current_; }
  CallbackRegistry(const CallbackRegistry&) = delete;
  CallbackRegistry& operator=(const CallbackRegistry&) = delete;

  // Runs `call(entry)` unless the entry was removed; false when it was skipped.
  template <typename Call>
  static bool Invoke(Entry& entry, Call&& call) {
    if (entry.removed.load()) return false;
    entry.in_flight.fetch_add(1);
    if (entry.removed.load()) {
      entry.in_flight.fetch_sub(1);
      return false;
    }
    struct Scope {
      Entry& e;
      explicit Scope(Entry& entry) : e(entry) {
        ActiveCalls& a = t_active_calls;
        if (a.depth < ActiveCalls::kMax) a.entries[a.depth] = &e;
        ++a.depth;
      }
      ~Scope() {
        --t_active_calls.depth;
        e.in_flight.fetch_sub(1);
      }
    } scope(entry);
    call(entry);
    return true;
  }

 private:
  struct Holder {
    std::shared_ptr<const List> list;
  };

  // Builds the next list from the current one with `edit` (false: no change) and switches
  // to it; retries when another thread switched meanwhile. Allocates and frees outside the
  // lock. Returns what `edit` returned.
  template <typename Edit>
  bool Update(Edit&& edit) {
    for (;;) {
      std::shared_ptr<const List> base = Current();  // held: its address is not reused
      auto next = std::make_shared<List>(*base);
      if (!edit(*next)) return false;
      auto* holder = new Holder{std::move(next)};
      const Holder* old = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (current_->list == base) {
          old = current_;
          current_ = holder;
        }
      }
      if (old != nullptr) {
        delete old;
        return true;
      }
      delete holder;  // another thread switched first: start again from its list
    }
  }

  mutable std::mutex mutex_;
  const Holder* current_ = new Holder{std::make_shared<const List>()};
  std::atomic<std::uint64_t> last_id_{0};
};

}  // namespace numarena::budget_internal
