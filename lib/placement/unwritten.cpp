// The registry behind placement_internal::UnwrittenBytesOnNode (see unwritten.hpp): one
// function pointer, constant-initialized, so an arena registering from a static initializer
// never runs before it exists.
#include "placement/unwritten.hpp"

#include <algorithm>
#include <atomic>

namespace numarena::placement_internal {
namespace {

constinit std::atomic<UnwrittenBytesSource> g_source{nullptr};

}  // namespace

void SetUnwrittenBytesSource(UnwrittenBytesSource source) noexcept {
  g_source.store(source, std::memory_order_release);
}

std::int64_t UnwrittenBytesOnNode(int node, const void* skip, std::size_t skip_bytes) noexcept {
  UnwrittenBytesSource source = g_source.load(std::memory_order_acquire);
  if (source == nullptr || node < 0) return 0;
  return std::max<std::int64_t>(source(node, skip, skip_bytes), 0);
}

}  // namespace numarena::placement_internal
