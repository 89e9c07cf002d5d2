// The STL, pmr and tensor-buffer adapters over arenas (allocator.hpp, memory_resource.hpp,
// tensor_buffer.hpp). They add no placement logic of their own: each one turns an arena's
// nullptr-or-status contract into the contract its callers expect (bad_alloc, StatusOr).
#include <bit>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "numarena/allocator.hpp"
#include "numarena/memory_resource.hpp"
#include "numarena/tensor_buffer.hpp"
#include "os/fork.hpp"

namespace numarena {

namespace adapters_internal {

Arena* ArenaForPolicyOrThrow(const Policy& policy) {
  StatusOr<Arena*> arena = Arena::ForPolicy(policy);
  if (arena.ok()) return *arena;
  if (absl::IsInvalidArgument(arena.status())) {
    throw std::invalid_argument(std::string(arena.status().message()));
  }
  throw std::bad_alloc();
}

void ThrowBadAlloc() { throw std::bad_alloc(); }

}  // namespace adapters_internal

// ---- std::pmr -------------------------------------------------------------------------

StatusOr<memory_resource> memory_resource::ForPolicy(const Policy& policy) {
  StatusOr<Arena*> arena = Arena::ForPolicy(policy);
  if (!arena.ok()) return arena.status();
  return memory_resource(*arena);
}

void* memory_resource::do_allocate(std::size_t bytes, std::size_t alignment) {
  void* p = arena_->allocate(bytes, alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void memory_resource::do_deallocate(void* p, std::size_t bytes, std::size_t alignment) {
  numarena::deallocate(p, bytes, alignment);
}

bool memory_resource::do_is_equal(const std::pmr::memory_resource& other) const noexcept {
  const auto* same = dynamic_cast<const memory_resource*>(&other);
  return same != nullptr && same->arena_ == arena_;
}

namespace {
// Held while an arena is created: fork() takes it before the arena layer's locks
// (os/fork.hpp, stage kResources).
std::mutex g_resources_mutex;
void LockResources() { g_resources_mutex.lock(); }
void UnlockResources() { g_resources_mutex.unlock(); }
// Set when the library is loaded, before any thread can take the lock (os/fork.hpp).
[[maybe_unused]] const bool g_resources_fork_stage_set = [] {
  static const os::ForkStageHandlers stage{LockResources, UnlockResources, UnlockResources};
  os::SetForkStage(os::ForkStage::kResources, &stage);
  return true;
}();
}  // namespace

StatusOr<memory_resource*> policy_resource(const Policy& policy) {
  // Resources live for the whole process, like the arenas under them; node_hash_map-like
  // stability comes from owning each resource through a pointer.
  // call_once, not a function-local static: pthread_once recovers in a fork child.
  static std::once_flag once;
  static absl::flat_hash_map<Policy, memory_resource*>* resources = nullptr;
  std::call_once(once, [] {
    resources = new absl::flat_hash_map<Policy, memory_resource*>();
    os::InstallForkHandlers();  // the stage is set at load (g_resources_fork_stage_set)
  });
  std::lock_guard<std::mutex> lock(g_resources_mutex);
  if (auto it = resources->find(policy); it != resources->end()) return it->second;
  StatusOr<Arena*> arena = Arena::ForPolicy(policy);
  if (!arena.ok()) return arena.status();
  auto* resource = new memory_resource(*arena);
  resources->emplace(policy, resource);
  return resource;
}

StatusOr<memory_resource*> node_resource(int node) { return policy_resource(Policy::Bind(node)); }

// ---- tensor buffers ---------------------------------------------------------------------

StatusOr<TensorBuffer> TensorBuffer::Allocate(std::size_t bytes, const Policy& policy,
                                              std::size_t alignment) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("TensorBuffer: zero bytes requested");
  }
  if (alignment == 0) alignment = bytes >= kLargeThreshold ? kLargeAlignment : kDefaultAlignment;
  if (!std::has_single_bit(alignment)) {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorBuffer: alignment ", alignment, " is not a power of two"));
  }
  StatusOr<Arena*> arena = Arena::ForPolicy(policy);
  if (!arena.ok()) return arena.status();
  StatusOr<void*> data = (*arena)->try_allocate(bytes, alignment);
  if (!data.ok()) return data.status();
  return TensorBuffer(*data, bytes, alignment, *arena);
}

StatusOr<TensorBuffer> TensorBuffer::OnNode(std::size_t bytes, int node, std::size_t alignment) {
  return Allocate(bytes, Policy::Bind(node), alignment);
}

TensorBuffer::TensorBuffer(TensorBuffer&& other) noexcept
    : data_(other.data_), size_(other.size_), alignment_(other.alignment_), arena_(other.arena_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

TensorBuffer& TensorBuffer::operator=(TensorBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    size_ = other.size_;
    alignment_ = other.alignment_;
    arena_ = other.arena_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void TensorBuffer::reset() noexcept {
  if (data_ != nullptr) numarena::deallocate(data_, size_, alignment_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace numarena
