// KV test seams: points where a test may run code inside a lock-free path.
//
// The races these paths handle need one thread to stop in a window a few instructions wide
// while others change the pool; on two cores that happens too rarely for a stress test to
// prove anything. A test installs a hook here and does the other threads' part inside it,
// which makes the interleaving deterministic. Production code never installs one; an unset
// hook costs one relaxed load.
#pragma once

#include <atomic>
#include <cstdint>

namespace numarena::kv::testing {

// Called by a prefix lookup that may share a span (CreateSequence) after it found `span` in
// the lock-free index and before it adds its reference.
inline std::atomic<void (*)(std::uint32_t span)> after_prefix_find{nullptr};

}  // namespace numarena::kv::testing
