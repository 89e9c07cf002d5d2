// The class map's slow side (class_map.cpp; the inline reads and writes are in
// numarena/internal/arena_fast_path.hpp).
#pragma once

#include <cstdint>

namespace numarena::arena_internal {

// Unmaps the class map's table of `granule` (its pages go back to the kernel) and leaves the
// granule without one, so the next owner of the granule starts from an empty table placed on
// its own node. For a granule whose heap is gone: no live object may start in it, and no
// thread may record or read a class in it meanwhile.
void DropClassTable(std::uintptr_t granule) noexcept;

}  // namespace numarena::arena_internal
