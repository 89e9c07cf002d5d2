// TensorBuffer: an owning, aligned, placed block of bytes for tensors.
//
// A tensor runtime wants three things from the memory under a tensor: alignment for SIMD
// (64 bytes; 2 MiB for large buffers so they map onto huge pages), placement (the node or
// node set a policy names), and single ownership. TensorBuffer is exactly that: move-only,
// freed on destruction, viewed through std::span without copying.
//
//   auto kv = numarena::TensorBuffer::Allocate(64 << 20, numarena::Policy::Bind(1));
//   if (!kv.ok()) return kv.status();
//   std::span<float> values = kv->as_span<float>();     // 16 M floats on node 1
//   assert(kv->alignment() == numarena::TensorBuffer::kLargeAlignment);
#pragma once

#include <cstddef>
#include <span>

#include "numarena/arena.hpp"
#include "numarena/policy.hpp"
#include "numarena/status.hpp"

namespace numarena {

class TensorBuffer {
 public:
  static constexpr std::size_t kDefaultAlignment = 64;
  static constexpr std::size_t kLargeAlignment = std::size_t{2} << 20;
  // Buffers of at least this size get kLargeAlignment when no alignment is asked for.
  static constexpr std::size_t kLargeThreshold = std::size_t{2} << 20;

  // `bytes` placed by `policy`, aligned to `alignment` (0: 64 B, or 2 MiB for buffers of
  // 2 MiB and more). Errors: InvalidArgument (bad policy naming the node, alignment not a
  // power of two, zero bytes), ResourceExhausted (node or budget full), PermissionDenied /
  // FailedPrecondition (the kernel refused a Strict binding).
  [[nodiscard]] static StatusOr<TensorBuffer> Allocate(std::size_t bytes, const Policy& policy,
                                                       std::size_t alignment = 0);
  // Shorthand for Allocate(bytes, Policy::Bind(node)).
  [[nodiscard]] static StatusOr<TensorBuffer> OnNode(std::size_t bytes, int node,
                                                     std::size_t alignment = 0);

  TensorBuffer() = default;
  TensorBuffer(TensorBuffer&& other) noexcept;
  TensorBuffer& operator=(TensorBuffer&& other) noexcept;
  TensorBuffer(const TensorBuffer&) = delete;
  TensorBuffer& operator=(const TensorBuffer&) = delete;
  ~TensorBuffer() { reset(); }

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t alignment() const noexcept { return alignment_; }
  bool empty() const noexcept { return data_ == nullptr; }
  // The policy the buffer was placed with (valid only when !empty()).
  const Policy& policy() const { return arena_->policy(); }
  // The node numarena placed it on (numarena::node_of): a node id, or kNodeMixed for
  // interleaved policies; kNodeNone when empty.
  int node() const noexcept { return numarena::node_of(data_); }

  std::span<std::byte> bytes() const noexcept { return {static_cast<std::byte*>(data_), size_}; }
  // The buffer as elements of T (size() / sizeof(T) of them). T's alignment must not exceed
  // the buffer's.
  template <typename T>
  std::span<T> as_span() const noexcept {
    static_assert(std::is_trivially_copyable_v<T>, "tensor elements are trivially copyable");
    return {static_cast<T*>(data_), size_ / sizeof(T)};
  }

  // Frees the memory now; the buffer becomes empty.
  void reset() noexcept;

 private:
  TensorBuffer(void* data, std::size_t size, std::size_t alignment, Arena* arena)
      : data_(data), size_(size), alignment_(alignment), arena_(arena) {}

  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t alignment_ = 0;
  Arena* arena_ = nullptr;
};

}  // namespace numarena
