// The C API's arena handles: a numarena_arena* names an arena by a slot of a table and the
// slot's generation, not by the arena's address. A handle kept past numarena_arena_destroy is
// then recognised as stale -- its generation has moved on -- instead of reaching whatever
// arena was later made at the same address, and a second destroy is refused instead of
// freeing that arena (or crashing). The check is one table load and one comparison.
#pragma once

#include "numarena/arena.hpp"
#include "numarena/numarena.h"
#include "numarena/status.hpp"

namespace numarena::capi {

// The handle of `arena`: the same handle for as long as the arena lives. ResourceExhausted
// when the table (65,536 live arenas) is full.
[[nodiscard]] StatusOr<numarena_arena*> HandleOf(Arena* arena);

// The arena `handle` names, or nullptr when the handle is stale (its arena was destroyed) or
// was never one numarena gave out. `handle` must not be NULL.
Arena* ArenaOfHandle(const numarena_arena* handle) noexcept;

// Destroys the arena `handle` names (Arena::Destroy) and retires the handle. FailedPrecondition
// for a stale handle, and Arena::Destroy's error (a shared arena), with nothing destroyed.
// Two threads destroying the same handle: one destroys, the other is told it is stale.
[[nodiscard]] Status DestroyByHandle(numarena_arena* handle);

// The message for a handle ArenaOfHandle does not know, naming the C function `function`.
std::string StaleHandleMessage(const char* function);

}  // namespace numarena::capi
