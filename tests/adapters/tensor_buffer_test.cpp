// TensorBuffer: alignment defaults, move-only ownership, spans, errors.
#include "numarena/tensor_buffer.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <type_traits>

using numarena::Policy;
using numarena::TensorBuffer;

TEST_CASE("tensor_buffer: default alignment is 64 B, 2 MiB for large buffers", "[tensor]") {
  auto small = TensorBuffer::OnNode(4096, 0);
  REQUIRE(small.ok());
  CHECK(small->alignment() == 64);
  CHECK(reinterpret_cast<std::uintptr_t>(small->data()) % 64 == 0);

  auto large = TensorBuffer::OnNode(std::size_t{8} << 20, 0);
  REQUIRE(large.ok());
  CHECK(large->alignment() == TensorBuffer::kLargeAlignment);
  CHECK(reinterpret_cast<std::uintptr_t>(large->data()) % TensorBuffer::kLargeAlignment == 0);
  CHECK(large->size() == std::size_t{8} << 20);
  CHECK(large->node() == 0);
  CHECK(large->policy() == Policy::Bind(0));
}

TEST_CASE("tensor_buffer: explicit alignment", "[tensor]") {
  auto b = TensorBuffer::Allocate(1000, Policy::Bind(0), 4096);
  REQUIRE(b.ok());
  CHECK(reinterpret_cast<std::uintptr_t>(b->data()) % 4096 == 0);
  auto bad = TensorBuffer::Allocate(1000, Policy::Bind(0), 48);
  REQUIRE_FALSE(bad.ok());
  CHECK(absl::IsInvalidArgument(bad.status()));
}

TEST_CASE("tensor_buffer: spans view the same bytes", "[tensor]") {
  auto b = TensorBuffer::OnNode(1 << 20, 0);
  REQUIRE(b.ok());
  std::span<float> floats = b->as_span<float>();
  CHECK(floats.size() == (1 << 20) / sizeof(float));
  std::iota(floats.begin(), floats.end(), 0.0f);
  CHECK(b->as_span<float>()[1000] == 1000.0f);
  CHECK(b->bytes().size() == 1 << 20);
}

TEST_CASE("tensor_buffer: move-only ownership", "[tensor]") {
  static_assert(!std::is_copy_constructible_v<TensorBuffer>);
  static_assert(std::is_nothrow_move_constructible_v<TensorBuffer>);
  auto b = TensorBuffer::OnNode(1 << 16, 0);
  REQUIRE(b.ok());
  void* data = b->data();
  TensorBuffer moved = std::move(*b);
  CHECK(b->empty());
  CHECK(moved.data() == data);
  TensorBuffer assigned;
  assigned = std::move(moved);
  CHECK(moved.empty());
  CHECK(assigned.data() == data);
  assigned.reset();
  CHECK(assigned.empty());
  CHECK(assigned.node() == numarena::kNodeNone);
}

TEST_CASE("tensor_buffer: errors", "[tensor]") {
  auto zero = TensorBuffer::OnNode(0, 0);
  CHECK(absl::IsInvalidArgument(zero.status()));
  auto bad_node = TensorBuffer::OnNode(4096, 40);
  REQUIRE_FALSE(bad_node.ok());
  CHECK(absl::IsInvalidArgument(bad_node.status()));
  CHECK_THAT(std::string(bad_node.status().message()), Catch::Matchers::Contains("40"));
}
