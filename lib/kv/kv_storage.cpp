// KV storage: node-bound anonymous slabs for the KV pool's tiers.
//
// The default `KvStorage` maps a slab, binds it to its node with mbind before any page is
// touched (so the first write faults every page in on that node), and optionally charges a
// capacity gate first so a budget sees the pool's memory and can refuse it. Unmapping gives
// the pages back at once, which is what demotion needs for the budget to go down.
#include <memory>

#include "absl/strings/str_cat.h"
#include "numarena/arena.hpp"
#include "numarena/kv_pool.hpp"
#include "os/os.hpp"

namespace numarena {
namespace {

class BoundMmapStorage final : public KvStorage {
 public:
  BoundMmapStorage(CapacityGate* gate, BindMode mode, Priority priority)
      : gate_(gate), mode_(mode), priority_(priority) {}

  StatusOr<void*> AllocateSlab(int node, std::size_t bytes) override {
    const Priority priority = priority_;
    if (gate_ != nullptr) {
      if (Status s = gate_->Charge(node, bytes, priority); !s.ok()) return s;
    }
    auto mapped = os::MapAnonymous(bytes, os::PageSize());
    if (!mapped.ok()) {
      if (gate_ != nullptr) gate_->Release(node, bytes, priority);
      return mapped.status();
    }
    const int nodes[] = {node};
    Status bound = os::BindRange(
        *mapped, bytes,
        mode_ == BindMode::kStrict ? os::PolicyMode::kBind : os::PolicyMode::kPreferred, nodes);
    if (!bound.ok()) {
      os::Unmap(*mapped, bytes);
      if (gate_ != nullptr) gate_->Release(node, bytes, priority);
      return Status(bound.code(), absl::StrCat("KV storage: binding a slab to node ", node, ": ",
                                               bound.message()));
    }
    return *mapped;
  }

  void FreeSlab(int node, void* slab, std::size_t bytes) override {
    os::Unmap(slab, bytes);
    if (gate_ != nullptr) gate_->Release(node, bytes, priority_);
  }

 private:
  CapacityGate* gate_;
  BindMode mode_;
  Priority priority_;  // charge and release with the same priority, whatever the thread
};

class ArenaStorage final : public KvStorage {
 public:
  StatusOr<void*> AllocateSlab(int node, std::size_t bytes) override {
    auto arena = Arena::ForNode(node);
    if (!arena.ok()) return arena.status();
    return (*arena)->try_allocate(bytes, os::PageSize());
  }
  void FreeSlab(int node, void* slab, std::size_t bytes) override {
    auto arena = Arena::ForNode(node);
    if (!arena.ok()) return;  // cannot happen: the slab came from this arena
    (*arena)->deallocate(slab, bytes, os::PageSize());
    (*arena)->purge();  // give the pages (and their charge) back now, not after decay
  }
};

}  // namespace

std::shared_ptr<KvStorage> MakeArenaStorage() { return std::make_shared<ArenaStorage>(); }

std::shared_ptr<KvStorage> MakeBoundMmapStorage(CapacityGate* gate, BindMode mode,
                                                Priority priority) {
  return std::make_shared<BoundMmapStorage>(gate, mode, priority);
}

}  // namespace numarena
