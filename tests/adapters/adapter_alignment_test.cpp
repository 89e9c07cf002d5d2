// The adapters keep the alignment contract for every small size: allocator<T> (alignof(T),
// at least alignof(max_align_t)) and the pmr resource (std::pmr::memory_resource's contract:
// any power-of-two alignment). jemalloc's 8-byte class is only 8-aligned, so requests of up
// to 8 bytes with alignment 16 must come from the 16-byte class, and their sized frees must
// go back there. Sizes near SIZE_MAX throw instead of returning memory.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory_resource>
#include <new>

#include "numarena/allocator.hpp"
#include "numarena/memory_resource.hpp"
#include "numarena/tensor_buffer.hpp"

namespace {

using numarena::Policy;

bool Aligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

template <std::size_t A>
struct alignas(A) Element {
  unsigned char bytes[A];
};

// Objects held at once per request: a freed object comes straight back from the LIFO
// caches, so one at a time would test a single address; 16 live ones are consecutive
// regions of a slab, half of them 8-aligned only if the class is.
constexpr int kLive = 16;

// Every element count whose total is at most 4160 bytes, through allocator<Element<A>>.
template <std::size_t A>
std::size_t CheckAllocator(const Policy& policy) {
  numarena::allocator<Element<A>> alloc(policy);
  constexpr std::size_t kAlign = A > alignof(std::max_align_t) ? A : alignof(std::max_align_t);
  std::size_t bad = 0;
  Element<A>* live[kLive];
  for (std::size_t n = 1; n * sizeof(Element<A>) <= 4160; ++n) {
    for (Element<A>*& p : live) {
      p = alloc.allocate(n);
      if (!Aligned(p, kAlign) && ++bad <= 3) {
        FAIL_CHECK("allocator<" << A << "-aligned>::allocate(" << n << ") = " << p);
      }
      std::memset(static_cast<void*>(p), 0x11, n * sizeof(Element<A>));
    }
    for (Element<A>* p : live) alloc.deallocate(p, n);
  }
  return bad;
}

}  // namespace

TEST_CASE("allocator<T>: every size up to 4160 B and every alignment up to 4 KiB") {
  const Policy policy = Policy::Bind(0);
  std::size_t bad = 0;
  {
    numarena::allocator<char> chars(policy);  // sizes 1..4160, alignment max_align_t
    char* live[kLive];
    for (std::size_t n = 1; n <= 4160; ++n) {
      for (char*& p : live) {
        p = chars.allocate(n);
        if (!Aligned(p, alignof(std::max_align_t)) && ++bad <= 3) {
          FAIL_CHECK("allocator<char>::allocate(" << n << ") = " << static_cast<void*>(p));
        }
        std::memset(p, 0x22, n);
      }
      for (char* p : live) chars.deallocate(p, n);
    }
  }
  bad += CheckAllocator<1>(policy) + CheckAllocator<2>(policy) + CheckAllocator<4>(policy) +
         CheckAllocator<8>(policy) + CheckAllocator<16>(policy) + CheckAllocator<32>(policy) +
         CheckAllocator<64>(policy) + CheckAllocator<128>(policy) + CheckAllocator<256>(policy) +
         CheckAllocator<512>(policy) + CheckAllocator<1024>(policy) + CheckAllocator<2048>(policy) +
         CheckAllocator<4096>(policy);
  CHECK(bad == 0);
}

TEST_CASE("pmr resource: every size up to 4160 B with every alignment up to 4 KiB") {
  std::pmr::memory_resource* resource = numarena::node_resource(0).value();
  std::size_t bad = 0;
  void* live[kLive];
  for (std::size_t alignment = 1; alignment <= 4096; alignment <<= 1) {
    for (std::size_t size = 1; size <= 4160; ++size) {
      for (void*& p : live) {
        p = resource->allocate(size, alignment);
        if (!Aligned(p, alignment) && ++bad <= 5) {
          FAIL_CHECK("allocate(" << size << ", " << alignment << ") = " << p);
        }
        std::memset(p, 0x33, size);
      }
      for (void* p : live) resource->deallocate(p, size, alignment);
    }
  }
  CHECK(bad == 0);
  // The request from the report: 4 bytes with alignment 16, many live at once (the 8-byte
  // class hands out 8-aligned objects every other time).
  void* many[64];
  for (void*& p : many) {
    p = resource->allocate(4, 16);
    CHECK(Aligned(p, 16));
  }
  for (void* p : many) resource->deallocate(p, 4, 16);
}

TEST_CASE("adapters: sizes near SIZE_MAX throw or fail, never return memory") {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  std::pmr::memory_resource* resource = numarena::node_resource(0).value();
  for (std::size_t size : {kMax, kMax - 4094, std::size_t{1} << 62}) {
    INFO("size " << size);
    CHECK_THROWS_AS(resource->allocate(size, 16), std::bad_alloc);
    auto tensor = numarena::TensorBuffer::Allocate(size, Policy::Bind(0));
    CHECK_FALSE(tensor.ok());
  }
  numarena::allocator<double> doubles(Policy::Bind(0));
  CHECK_THROWS_AS(doubles.allocate(kMax / sizeof(double) + 1), std::bad_array_new_length);
  CHECK_THROWS_AS(doubles.allocate(kMax / sizeof(double)), std::bad_alloc);
}
