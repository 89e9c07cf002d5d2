// numarena::memory_resource: a std::pmr::memory_resource whose memory follows a policy.
//
// Use it directly with pmr containers, or as the upstream of the standard pooling
// resources, so a whole request's scratch memory lands on the right node:
//
//   numarena::memory_resource* node1 = numarena::node_resource(1).value();
//   std::pmr::unsynchronized_pool_resource pool(node1);
//   std::pmr::vector<float> scores(&pool);           // pages on node 1
//   std::pmr::monotonic_buffer_resource arena(1 << 20, node1);
//
// Allocation failure throws std::bad_alloc (the pmr contract); the reason is in
// numarena::last_allocation_error(). Two numarena resources are equal when they use the
// same arena (memory from either can be freed by the other in any case).
#pragma once

#include <cstddef>
#include <memory_resource>

#include "numarena/arena.hpp"
#include "numarena/policy.hpp"
#include "numarena/status.hpp"

namespace numarena {

class memory_resource final : public std::pmr::memory_resource {
 public:
  // A resource over `arena` (never null; arenas live for the whole process).
  explicit memory_resource(Arena* arena) noexcept : arena_(arena) {}

  // A resource for `policy`; errors as Arena::ForPolicy.
  [[nodiscard]] static StatusOr<memory_resource> ForPolicy(const Policy& policy);

  Arena* arena() const noexcept { return arena_; }

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override;

  Arena* arena_;
};

// The process-wide resource of a node (Policy::Bind(node)), created once. InvalidArgument
// for a node that is not online or not allowed.
[[nodiscard]] StatusOr<memory_resource*> node_resource(int node);

// The process-wide resource of any policy, created once per distinct policy.
[[nodiscard]] StatusOr<memory_resource*> policy_resource(const Policy& policy);

}  // namespace numarena
