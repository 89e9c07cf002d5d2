// numarena::allocator<T>: a standard allocator whose memory follows a placement policy.
//
// Put it under any allocator-aware container (std::vector, std::deque, absl::flat_hash_map,
// ...) and the container's elements live on the node (or node set) the policy names:
//
//   numarena::allocator<float> on_node1(numarena::Policy::Bind(1));
//   std::vector<float, numarena::allocator<float>> weights(4096, 0.0f, on_node1);
//   numarena::vector<float> local;  // default: Policy::Local(), the caller's node
//
// Contract and choices:
// - Allocation goes to the arena of the policy (Arena::ForPolicy), so small and large
//   element buffers are bound before first touch and served at jemalloc speed. Failure
//   (node full, budget refused, kernel refused a Strict binding) throws std::bad_alloc;
//   numarena::last_allocation_error() has the reason.
// - Two allocators compare equal when they use the same arena, i.e. the same policy. Any
//   numarena allocator can in fact free any numarena memory (numarena::deallocate needs no
//   arena), so a mismatch never corrupts memory; equality tells containers whether the
//   *placement* of their storage would change.
// - Propagation: moves and swaps carry the allocator along with the storage
//   (propagate_on_container_move_assignment / _swap are true): a buffer that lives on node 1
//   keeps growing on node 1 after it was moved into another container, and move assignment
//   never copies elements. Copy assignment does not propagate: the destination keeps its own
//   policy, so copying node-1 data into a node-0 container makes a node-0 copy — the usual
//   way to replicate read-only data per node.
// - Over-aligned types are honoured (alignof(T) is passed to the arena).
#pragma once

#include <cstddef>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

#include "numarena/arena.hpp"
#include "numarena/policy.hpp"

namespace numarena {

namespace adapters_internal {
// The arena of `policy`, or throws std::bad_alloc / std::invalid_argument explaining why.
Arena* ArenaForPolicyOrThrow(const Policy& policy);
[[noreturn]] void ThrowBadAlloc();
}  // namespace adapters_internal

template <typename T>
class allocator {
 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using propagate_on_container_copy_assignment = std::false_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  using is_always_equal = std::false_type;

  template <typename U>
  struct rebind {
    using other = allocator<U>;
  };

  // The calling thread's local node at allocation time (Policy::Local()).
  allocator() : arena_(adapters_internal::ArenaForPolicyOrThrow(Policy::Local())) {}
  // Memory placed by `policy`. Throws std::invalid_argument for a policy that does not fit
  // this machine (the message names the node), std::bad_alloc when no arena can be created.
  explicit allocator(const Policy& policy)
      : arena_(adapters_internal::ArenaForPolicyOrThrow(policy)) {}
  // Memory from an existing arena (never null).
  explicit allocator(Arena* arena) noexcept : arena_(arena) {}

  template <typename U>
  allocator(const allocator<U>& other) noexcept : arena_(other.arena()) {}

  [[nodiscard]] T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) {
      throw std::bad_array_new_length();
    }
    void* p = arena_->allocate(n * sizeof(T), kAlignment);
    if (p == nullptr) adapters_internal::ThrowBadAlloc();
    return static_cast<T*>(p);
  }

  void deallocate(T* p, std::size_t n) noexcept {
    numarena::deallocate(p, n * sizeof(T), kAlignment);
  }

  Arena* arena() const noexcept { return arena_; }
  const Policy& policy() const noexcept { return arena_->policy(); }

  template <typename U>
  friend bool operator==(const allocator& a, const allocator<U>& b) noexcept {
    return a.arena() == b.arena();
  }

 private:
  static constexpr std::size_t kAlignment = alignof(T) > alignof(std::max_align_t)
                                                ? alignof(T)
                                                : alignof(std::max_align_t);
  Arena* arena_;
};

// A std::vector whose storage follows a numarena policy.
//
//   numarena::vector<int> v(numarena::allocator<int>(numarena::Policy::Bind(0)));
template <typename T>
using vector = std::vector<T, allocator<T>>;

}  // namespace numarena
