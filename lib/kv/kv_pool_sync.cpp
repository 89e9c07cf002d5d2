// KV pool synchronisation primitives: the spin lock's slow path and thread slots
// (see kv_pool_sync.hpp).
#include "kv/kv_pool_sync.hpp"

#include <chrono>
#include <thread>

namespace numarena::kv {

void SpinLock::LockSlow() {
  unsigned waits = 0;
  do {
    while (flag_.load(std::memory_order_relaxed)) {
      if (++waits <= 64) continue;
      if (waits <= 128) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  } while (flag_.exchange(true, std::memory_order_acquire));
}

namespace {

class ThreadSlots {
 public:
  static constexpr std::size_t kSlots = 256;
  std::size_t Acquire() {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < kSlots; ++i) {
      if (!used_[i]) {
        used_[i] = true;
        return i;
      }
    }
    return kSlots + overflow_++;  // more live threads than slots: striping only gets coarser
  }
  void Release(std::size_t slot) {
    std::lock_guard lock(mu_);
    if (slot < kSlots) used_[slot] = false;
  }

 private:
  std::mutex mu_;
  bool used_[kSlots] = {};
  std::size_t overflow_ = 0;
};

ThreadSlots& Slots() {
  static auto* slots = new ThreadSlots();  // never destroyed: threads may exit after main
  return *slots;
}

}  // namespace

std::size_t ThreadSlot() {
  struct Holder {
    std::size_t slot = Slots().Acquire();
    ~Holder() { Slots().Release(slot); }
  };
  thread_local Holder holder;
  return holder.slot;
}

}  // namespace numarena::kv
