// numarena::torch's c10::Allocator (include/numarena/torch.hpp). Written over numarena's C
// API only, so the same objects link against libnumarena_c.a (numarena::torch, for C++
// programs) and against libnumarena.so (libnumarena_torch.so, for Python), and in each case
// share the one numarena of the process. Only c10's allocator and exception headers are
// included: no ATen, no torch/torch.h.
#include "numarena/torch.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <new>

namespace numarena::torch {

namespace {

thread_local Scope* innermost_scope = nullptr;
std::atomic<numarena_arena*> used_arena{nullptr};

// What Install() found installed before it, fixed by the first Install().
c10::Allocator* previous_allocator = nullptr;
c10::DeleterFnPtr previous_raw_deleter = nullptr;
std::atomic<bool> installed{false};
std::once_flag install_once;

// The deleter of every storage this allocator hands out (and its raw_deleter): numarena's
// memory goes back to numarena whatever its arena and whichever thread frees it; memory the
// previous allocator made goes back to that allocator.
void FreeStorage(void* ptr) {
  if (ptr == nullptr) return;
  if (numarena_owns(ptr) != 0) {
    numarena_free(ptr);
  } else {
    previous_raw_deleter(ptr);
  }
}

c10::DataPtr FromPreviousAllocator(std::size_t bytes) {
  c10::DataPtr data = previous_allocator->allocate(bytes);
  // The contract of raw_deleter(): every DataPtr carries it. Re-wrap the previous
  // allocator's memory so that it does, when that allocator frees by data pointer (libtorch's
  // default does); otherwise hand its DataPtr on as it is (raw_deleter() is then nullptr).
  if (previous_raw_deleter != nullptr && data.get() == data.get_context() &&
      data.get_deleter() == previous_raw_deleter) {
    void* ptr = data.release_context();
    return {ptr, ptr, &FreeStorage, data.device()};
  }
  return data;
}

class NumarenaTensorAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) const override {
    numarena_arena* arena = CurrentArena();
    if (arena == nullptr) return FromPreviousAllocator(bytes);
    void* ptr = numarena_aligned_alloc(arena, c10::gAlignment, bytes);
    if (ptr == nullptr) {
      char policy[128] = "";
      numarena_arena_policy(arena, policy, sizeof policy);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "numarena: cannot allocate a tensor of ",
                       bytes, " bytes in the arena for ", policy, ": ",
                       numarena_last_error_message(),
                       " (free tensors, raise the budget, or allocate with another policy)");
    }
    return {ptr, ptr, &FreeStorage, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return previous_raw_deleter != nullptr ? &FreeStorage : nullptr;
  }
};

NumarenaTensorAllocator the_allocator;

}  // namespace

c10::Allocator* GetAllocator() { return &the_allocator; }

void Install() {
  std::call_once(install_once, [] {
    c10::Allocator* current = c10::GetCPUAllocator();
    previous_allocator = current != &the_allocator ? current : c10::GetDefaultCPUAllocator();
    previous_raw_deleter = previous_allocator->raw_deleter();
    c10::SetCPUAllocator(&the_allocator, kPriority);
    installed.store(true, std::memory_order_release);
  });
}

bool Installed() { return installed.load(std::memory_order_acquire); }

void Use(numarena_arena* arena) {
  Install();
  used_arena.store(arena, std::memory_order_release);
}

numarena_arena* UsedArena() { return used_arena.load(std::memory_order_acquire); }

Scope::Scope(numarena_arena* arena) : arena_(arena), outer_(innermost_scope) {
  Install();
  innermost_scope = this;
}

Scope::~Scope() { innermost_scope = outer_; }

numarena_arena* ArenaFor(const char* policy) {
  numarena_arena* arena = numarena_arena_for_policy(policy);
  if (arena == nullptr) {
    const char* reason = numarena_last_error_message();
    if (numarena_last_error() == NUMARENA_INVALID_ARGUMENT) {
      TORCH_CHECK_VALUE(false, "numarena::torch::ArenaFor: ", reason);
    }
    TORCH_CHECK(false, "numarena::torch::ArenaFor: ", reason);
  }
  return arena;
}

numarena_arena* CurrentArena() {
  if (const Scope* scope = innermost_scope) return scope->arena();
  return used_arena.load(std::memory_order_acquire);
}

}  // namespace numarena::torch

// ---- the C functions ------------------------------------------------------------------

struct numarena_torch_scope {
  explicit numarena_torch_scope(numarena_arena* arena) : scope(arena) {}
  numarena::torch::Scope scope;
};

extern "C" {

void numarena_torch_install(void) { numarena::torch::Install(); }
int numarena_torch_installed(void) { return numarena::torch::Installed() ? 1 : 0; }
void numarena_torch_use(numarena_arena* arena) { numarena::torch::Use(arena); }
numarena_arena* numarena_torch_used(void) { return numarena::torch::UsedArena(); }
numarena_arena* numarena_torch_current_arena(void) { return numarena::torch::CurrentArena(); }

numarena_torch_scope* numarena_torch_scope_enter(numarena_arena* arena) {
  return new (std::nothrow) numarena_torch_scope(arena);
}

numarena_code numarena_torch_scope_exit(numarena_torch_scope* scope) {
  if (scope == nullptr || numarena::torch::innermost_scope != &scope->scope) {
    return NUMARENA_FAILED_PRECONDITION;
  }
  delete scope;
  return NUMARENA_OK;
}

}  // extern "C"
