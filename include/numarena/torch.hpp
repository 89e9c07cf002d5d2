// numarena::torch: PyTorch CPU tensors placed by numarena, without LD_PRELOAD.
//
// libtorch allocates the storage of every CPU tensor through one process-wide
// `c10::Allocator` (c10::GetCPUAllocator()). numarena::torch is such an allocator over
// numarena's arenas. Install() makes it the process's CPU allocator (c10::SetCPUAllocator,
// priority kPriority) and keeps the allocator that was installed before; which arena a
// tensor's storage comes from is then decided, at allocation time, on the allocating thread:
//   1. the innermost live Scope of the thread: its arena, or the previous allocator for a
//      Scope(nullptr);
//   2. else the process-wide arena set by Use(arena) (Use(nullptr): none);
//   3. else the previous allocator (libtorch's own, normally), unchanged.
// A storage's memory is freed by the allocator's deleter, on whatever thread drops the last
// reference and whenever that is (after its Scope ended too): numarena_free finds the arena
// from the pointer (numarena_owns), and memory of the previous allocator goes back to it.
//
// Out of memory: when numarena refuses a storage (the node is full, or a budget installed
// with numarena_budget_install / numarena::SetCapacityGate refuses it), allocate() throws
// c10::OutOfMemoryError, PyTorch's own out-of-memory error (torch.cuda.OutOfMemoryError, a
// RuntimeError, in Python), whose message carries numarena's reason; nothing is committed,
// so the process is not OOM-killed and carries on.
//
// Where pages are: numarena_node_of(tensor.data_ptr()) gives the node the tensor's arena
// binds to (no system call; NUMARENA_NODE_MIXED for interleaved arenas) and
// numarena_page_nodes(...) where each page really is.
//
// Storages are 64-byte aligned (c10::gAlignment), like libtorch's own allocator's. One
// allocator per process: a program linking numarena::torch statically and a Python process
// loading libnumarena_torch.so (numarena.torch) each hold exactly one. In Python the shared
// library uses libnumarena.so, the same numarena the `numarena` module loads, so
// numarena.owns() and budgets see the tensors.
//
//   numarena::torch::Install();
//   {
//     numarena::torch::Scope scope(numarena::torch::ArenaFor("bind(1)"));  // -> node 1
//     at::Tensor kv = at::empty({1 << 20}, at::kHalf);
//   }                                                  // kv lives on, still on node 1
//   numarena::torch::Use(numarena::torch::ArenaFor("interleave(0,1)"));  // everyone else's
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>

#include "numarena/numarena.h"

namespace numarena::torch {

// The priority Install() passes to c10::SetCPUAllocator: above libtorch's default allocator
// (0), so it wins whatever the order of static initialisation was.
inline constexpr std::uint8_t kPriority = 1;

// The process's one numarena tensor allocator (not installed by this call).
c10::Allocator* GetAllocator();

// Makes GetAllocator() the process's CPU allocator, keeping the one installed before (the
// "previous allocator" above) to delegate to. Idempotent and thread-safe; the first call
// decides the previous allocator. Tensors allocated before keep their own deleters.
void Install();
bool Installed();

// The arena for tensors allocated outside any Scope (nullptr: the previous allocator).
// Installs the allocator. Thread-safe; applies to allocations that start afterwards.
void Use(numarena_arena* arena);
numarena_arena* UsedArena();

// Sends the tensors this thread allocates while the scope lives to `arena` (nullptr: to the
// previous allocator, e.g. to step out of a Use() for a while). Scopes nest; the innermost
// wins. Installs the allocator. Must be destroyed on the thread that made it, innermost
// first (a stack object does that by itself).
class Scope {
 public:
  explicit Scope(numarena_arena* arena);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  numarena_arena* arena() const { return arena_; }

 private:
  numarena_arena* arena_;
  Scope* outer_;  // the thread's scope this one hides, restored by the destructor
};

// The arena the calling thread's tensors go to now: the innermost scope's, else Use()'s;
// nullptr when they go to the previous allocator.
numarena_arena* CurrentArena();

// The shared arena for a policy string ("bind(1)", "interleave(0,1)", "target(bandwidth)",
// ...: numarena_arena_for_policy), for a Scope or Use(). Throws c10::ValueError (ValueError
// in Python) with numarena's message for a malformed policy or a node the machine lacks, and
// c10::Error for a policy the kernel refuses.
//
//   numarena::torch::Scope scope(numarena::torch::ArenaFor("bind(1)"));
numarena_arena* ArenaFor(const char* policy);

}  // namespace numarena::torch

// The same for C and for Python's ctypes (numarena.torch loads libnumarena_torch.so).
// Scopes made here are heap objects; numarena_torch_scope_exit must be given the thread's
// innermost scope (it refuses another with NUMARENA_FAILED_PRECONDITION and changes nothing)
// and frees it.
extern "C" {
typedef struct numarena_torch_scope numarena_torch_scope;
void numarena_torch_install(void);
int numarena_torch_installed(void);
void numarena_torch_use(numarena_arena* arena);
numarena_arena* numarena_torch_used(void);
numarena_arena* numarena_torch_current_arena(void);
numarena_torch_scope* numarena_torch_scope_enter(numarena_arena* arena);  // NULL: no memory
numarena_code numarena_torch_scope_exit(numarena_torch_scope* scope);

// A DLPack tensor (DLManagedTensor*, DLPack 0.6 as libtorch 1.13 reads it) viewing the K
// (value 0) or V (value != 0) rows of layer `layer_in_block` of a KV-pool block without a
// copy: shape [tokens_per_block, heads_per_group, head_dim], strided like torch_kv.hpp's
// views, the pool's dtype (fp8 as uint8). It holds a pin on the block until its deleter runs
// (torch.utils.dlpack.from_dlpack hands that to the tensor; numarena_torch_dlpack_delete
// calls it for a tensor never consumed). NULL when the block cannot be pinned (the reason in
// numarena_last_error_message) or the layer is outside the block's range.
void* numarena_torch_kv_block_dlpack(numarena_kv_pool* pool, uint64_t block, int layer_in_block,
                                     int value);
void numarena_torch_dlpack_delete(void* managed);
}
