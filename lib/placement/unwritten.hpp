// Memory numarena has committed on a node and not written yet.
//
// A committed page takes a node's free memory only when it is first written, so the node's
// meminfo does not show a large object an arena has just handed out. Every check of a node's
// room has to subtract it -- the arenas' free-memory guard (alloc/node_pages.cpp) and
// AllocateOnNode and prefault here -- or each sees the same free memory, both are let in,
// and writing everything faults the node past its reserve (an OOM kill under a bind).
//
// The arenas know their spans and sit above this layer: they register the source when
// they are linked in (a program without arenas has nothing committed and unwritten).
#pragma once

#include <cstddef>
#include <cstdint>

namespace numarena::placement_internal {

// Returns the bytes committed on `node` and not written yet, looked at now, leaving out those
// in [skip, skip + skip_bytes) (a range the caller is about to fault in itself); never blocks
// for long and never allocates.
using UnwrittenBytesSource = std::int64_t (*)(int node, const void* skip,
                                              std::size_t skip_bytes) noexcept;

// Installs the source (one per process: the arenas' guard). Passing nullptr removes it.
void SetUnwrittenBytesSource(UnwrittenBytesSource source) noexcept;

// Bytes numarena has committed on `node` and not written yet, per the source, less those in
// [skip, skip + skip_bytes): prefault over an arena's own object must not count the pages it
// is about to write twice. 0 without a source or for a node id outside the kernel's range.
[[nodiscard]] std::int64_t UnwrittenBytesOnNode(int node, const void* skip = nullptr,
                                                std::size_t skip_bytes = 0) noexcept;

}  // namespace numarena::placement_internal
