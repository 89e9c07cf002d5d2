/* numarena's C API: NUMA-placed memory for programs that are not built as C++20.
 *
 * Everything here is plain C11 (and valid C++): no Abseil, jemalloc or standard-library
 * types, so a C program, a Rust or Go FFI binding, or Python's ctypes can use numarena
 * without sharing its build. It wraps the C++ API one to one: arenas for a node or for a
 * policy string, malloc-shaped allocation, where pages are (`numarena_page_nodes`), moving
 * them (`numarena_prefault`, `numarena_correct`), a per-node budget, the machine's
 * topology, and Prometheus metrics.
 *
 * Errors. Functions that can fail return a `numarena_code` (0 = NUMARENA_OK) or, for the
 * allocation functions, NULL; either way the calling thread's last error is set, and
 * `numarena_last_error()` / `numarena_last_error_message()` say what happened and what the
 * caller can do (the message names the node, the sizes, the kernel's errno). A call that
 * succeeds leaves the last error as it was. Codes are the numbers of absl::StatusCode, which
 * the C++ API returns.
 *
 * Threads. Every function may be called from any thread; memory may be freed on another
 * thread than the one that allocated it. Arenas live for the whole process and are never
 * freed.
 *
 *   numarena_arena* arena = numarena_arena_for_policy("bind(1)");
 *   if (arena == NULL) { fprintf(stderr, "%s\n", numarena_last_error_message()); return 1; }
 *   float* weights = numarena_malloc(arena, bytes);
 *   if (weights == NULL) { fprintf(stderr, "%s\n", numarena_last_error_message()); ... }
 *   ...
 *   numarena_free(weights);
 */
#ifndef NUMARENA_NUMARENA_H_
#define NUMARENA_NUMARENA_H_

#include <stddef.h>
#include <stdint.h>

#include "numarena/version.h" /* NUMARENA_VERSION_STRING and the other version macros */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ---------------------------------------------------------------------------- */

typedef enum numarena_code {
  NUMARENA_OK = 0,
  NUMARENA_UNKNOWN = 2,
  NUMARENA_INVALID_ARGUMENT = 3,      /* a bad node, size, alignment or policy string */
  NUMARENA_NOT_FOUND = 5,             /* a kernel file is missing (no NUMA support?) */
  NUMARENA_PERMISSION_DENIED = 7,     /* the kernel refused mbind/move_pages (seccomp) */
  NUMARENA_RESOURCE_EXHAUSTED = 8,    /* the node or the budget is full */
  NUMARENA_FAILED_PRECONDITION = 9,   /* e.g. no hugetlb pages, pages not movable */
  NUMARENA_OUT_OF_RANGE = 11,         /* a caller's buffer is too small (see *count) */
  NUMARENA_UNIMPLEMENTED = 12,
  NUMARENA_INTERNAL = 13,
  NUMARENA_DATA_LOSS = 15             /* a kernel file says something unexpected */
} numarena_code;

/* The code of the calling thread's most recent failure (NUMARENA_OK when none yet). */
numarena_code numarena_last_error(void);

/* The message of that failure ("" when none). The string belongs to the thread and stays
 * valid until the thread's next failing numarena call or numarena_clear_error(). */
const char* numarena_last_error_message(void);

/* Forgets the calling thread's last error. */
void numarena_clear_error(void);

/* The library's version, "MAJOR.MINOR.PATCH" (NUMARENA_VERSION_STRING of the headers it was
 * built with, <numarena/version.h>). */
const char* numarena_version(void);

/* ---- arenas ---------------------------------------------------------------------------- */

/* An arena: a heap whose pages are placed by one policy and bound before first touch.
 * Opaque. Arenas from numarena_arena_for_node / _for_policy are shared and live for the
 * process; those from numarena_arena_create are the caller's, until numarena_arena_destroy. */
typedef struct numarena_arena numarena_arena;

/* The arena that binds to `node` (strict), created on first use; the same node always
 * gives the same arena. NULL with NUMARENA_INVALID_ARGUMENT for a node that is not online
 * or not allowed to this process. */
numarena_arena* numarena_arena_for_node(int node);

/* The arena for a policy string (the syntax of numarena::Policy::Parse, shared with the
 * CLI and `numarena run`):
 *   "bind(1)"  "bind(0-1)/advisory"  "preferred(2)"  "preferred(2,0)"  "interleave(0-3)"
 *   "weighted(0:3,1:1)"  "weighted(0:1,1:1)/chunk=64K"  "local"
 * NULL with NUMARENA_INVALID_ARGUMENT for a malformed string or a node the machine does
 * not have (the message shows the syntax), NUMARENA_PERMISSION_DENIED or
 * NUMARENA_FAILED_PRECONDITION when the kernel refuses a strict policy,
 * NUMARENA_RESOURCE_EXHAUSTED when numarena's arena table is full. */
numarena_arena* numarena_arena_for_policy(const char* policy);

/* A new arena of its own for a policy string (the syntax of numarena_arena_for_policy),
 * never shared: every call makes another (numarena::Arena::Create). Errors as
 * numarena_arena_for_policy; NUMARENA_RESOURCE_EXHAUSTED when numarena's heap table (256,
 * shared with the shared arenas) is full: destroy arenas you no longer need. */
numarena_arena* numarena_arena_create(const char* policy);

/* How an arena backs its memory (numarena::ArenaOptions, include/numarena/policy.hpp).
 * Zero it, set `size` to sizeof(numarena_arena_options), then set what you need: a program
 * built against this header keeps working with a later numarena that adds fields.
 *   hugetlb_page_bytes  0 (ordinary pages, transparent huge pages for 2 MiB and more), or
 *                       2 MiB or 1 GiB: hugetlbfs pages of that size from the bound node's
 *                       own pool (NUMARENA_FAILED_PRECONDITION when it holds none).
 *   shards              jemalloc arenas per heap; 0: one per 4 CPUs, at least 1; 1 to 8.
 * Example:
 *   numarena_arena_options options = {sizeof options};
 *   options.shards = 2;
 *   numarena_arena* arena = numarena_arena_create_with_options("bind(1)", &options); */
typedef struct numarena_arena_options {
  size_t size;
  size_t hugetlb_page_bytes;
  int shards;
} numarena_arena_options;

/* numarena_arena_create with options; NULL options are the defaults. NULL with
 * NUMARENA_INVALID_ARGUMENT for a `size` smaller than this header's struct or over 4096, for
 * bytes past the struct that are not zero (fields of a later numarena this one does not know),
 * for a shard count outside 0-8 or a huge page size other than 0, 2 MiB and 1 GiB; other
 * errors as numarena_arena_create. */
numarena_arena* numarena_arena_create_with_options(const char* policy,
                                                   const numarena_arena_options* options);

/* Writes the options `arena` was made with into `*out` (shards 0 stays 0: the default count)
 * and sets out->size. NUMARENA_INVALID_ARGUMENT for a NULL arena or `out`, or out->size
 * smaller than this header's struct. */
numarena_code numarena_arena_options_of(const numarena_arena* arena,
                                        numarena_arena_options* out);

/* Destroys an arena made by numarena_arena_create (numarena::Arena::Destroy): every
 * allocation still in it is freed at once, its pages go back to the kernel and its budget
 * charge is released. Every pointer it handed out is invalid afterwards (using or freeing one
 * is undefined; a free usually aborts with a message), and so is `arena`. No thread may be
 * inside a call on the arena meanwhile; other threads' caches of it are dropped by this call.
 * NUMARENA_OK; NUMARENA_INVALID_ARGUMENT for NULL; NUMARENA_FAILED_PRECONDITION, with nothing
 * destroyed, for a shared arena (numarena_arena_for_node / _for_policy) and for a handle
 * whose arena was already destroyed. A handle names its arena by a slot and a generation, not
 * by address: once destroyed, every call given the handle (allocation, policy, purge,
 * options, metrics, a second destroy) fails with NUMARENA_FAILED_PRECONDITION ("stale"), and
 * numarena_arena_contains answers 0, even after a new arena reuses the slot. */
numarena_code numarena_arena_destroy(numarena_arena* arena);

/* Writes the arena's policy in canonical form (as numarena_arena_for_policy reads it) into
 * `buffer` (NUL-terminated, truncated to `size`), and returns the length of the whole
 * string, like snprintf. */
size_t numarena_arena_policy(const numarena_arena* arena, char* buffer, size_t size);

/* Returns the arena's unused dirty pages to the kernel now, and their budget charge. */
void numarena_arena_purge(numarena_arena* arena);

/* ---- allocation ------------------------------------------------------------------------ */
/* Like their C library namesakes, on `arena`. On failure: NULL (errno is left alone) and the
 * thread's last error says why (NUMARENA_RESOURCE_EXHAUSTED: the node or the budget is full;
 * NUMARENA_INVALID_ARGUMENT: size overflow, bad alignment, NULL arena). Memory is aligned to
 * at least 16 bytes (alignof(max_align_t)); size 0 gives a unique minimal allocation. */

void* numarena_malloc(numarena_arena* arena, size_t size);

/* `count` x `size` bytes, zeroed. NULL with NUMARENA_INVALID_ARGUMENT when the product
 * overflows. */
void* numarena_calloc(numarena_arena* arena, size_t count, size_t size);

/* Resizes `ptr` (NULL: like numarena_malloc) keeping its contents up to the smaller size.
 * The result is `ptr` itself when `arena` made it and the new size fits its block without
 * leaving more than half of it unused (or falls in its size class); otherwise a new block
 * from `arena`, which may differ from the one `ptr` came from (a way to move a buffer to
 * another node), and `ptr` is freed. size 0 frees `ptr` and returns NULL. On failure `ptr` is
 * untouched and still owned by the caller. `ptr` must be a numarena pointer. */
void* numarena_realloc(numarena_arena* arena, void* ptr, size_t size);

/* `size` bytes aligned to `alignment`, a power of two (any size, unlike C11's rule that it
 * be a multiple), and to at least 16 bytes like every allocation here. NULL with
 * NUMARENA_INVALID_ARGUMENT for another alignment. */
void* numarena_aligned_alloc(numarena_arena* arena, size_t alignment, size_t size);

/* posix_memalign's contract: returns 0 and sets *out (aligned to at least 16 bytes), or
 * EINVAL (alignment not a power of two multiple of sizeof(void*), NULL out or arena) or ENOMEM
 * (no room, or a size no allocation can have), leaving *out alone; the thread's last error is
 * set too. */
int numarena_posix_memalign(numarena_arena* arena, void** out, size_t alignment, size_t size);

/* Frees memory from any numarena arena, on any thread. NULL is ignored. A pointer numarena
 * did not allocate is a bug (see numarena/arena.hpp for what is detected). */
void numarena_free(void* ptr);

/* Usable bytes at `ptr` (at least the size asked for); 0 when numarena does not own it. */
size_t numarena_usable_size(const void* ptr);

/* 1 when `ptr` points into memory numarena's arenas manage, else 0. No system call. */
int numarena_owns(const void* ptr);

/* 1 when `arena` allocated `ptr` (a live block of one of its heaps), else 0: an arena made by
 * numarena_arena_create contains nothing another arena handed out, even on the same node.
 * 0 for a NULL arena or pointer. No system call. */
int numarena_arena_contains(const numarena_arena* arena, const void* ptr);

/* The node the arena of `ptr` places its pages on; NUMARENA_NODE_MIXED for interleaved or
 * multi-node arenas, NUMARENA_NODE_NONE when numarena does not own `ptr`. No system call:
 * it reports the placement asked for; numarena_page_nodes tells where pages really are. */
#define NUMARENA_NODE_NONE (-1)
#define NUMARENA_NODE_MIXED (-2)
int numarena_node_of(const void* ptr);

/* ---- where pages are, and moving them --------------------------------------------------- */

typedef struct numarena_page_counts {
  size_t total_pages;     /* pages in the (page-widened) range */
  size_t not_resident;    /* never touched, or purged */
  size_t unmapped;        /* not mapped, or another per-page error */
  size_t on_other_nodes;  /* resident on a node >= the caller's node_slots */
} numarena_page_counts;

/* Asks the kernel where each resident page of [ptr, ptr+len) is (move_pages with no target,
 * never faulting a page in). pages_on_node[n] gets the pages on node n for n < node_slots
 * (pages_on_node may be NULL when node_slots is 0); `counts` gets the rest. Returns
 * NUMARENA_OK, or NUMARENA_INVALID_ARGUMENT (NULL counts, a range past the address space),
 * or NUMARENA_PERMISSION_DENIED. */
numarena_code numarena_page_nodes(const void* ptr, size_t len, size_t* pages_on_node,
                                  size_t node_slots, numarena_page_counts* counts);

/* What numarena_prefault / numarena_correct found and did, in pages:
 * pages_checked == already_local + moved + not_resident + failed. */
typedef struct numarena_placement_report {
  int node;
  size_t pages_checked;
  size_t already_local;
  size_t moved;
  size_t not_resident;
  size_t failed;
} numarena_placement_report;

/* Binds [ptr, ptr+len) to `node`, faults every page in there and migrates pages already
 * resident elsewhere (numarena::prefault). `report` may be NULL. Works on any mapping the
 * caller owns (a numpy array's data, a tensor's storage). NUMARENA_INVALID_ARGUMENT for a
 * bad node or an unmapped range, NUMARENA_PERMISSION_DENIED when the kernel refuses,
 * NUMARENA_RESOURCE_EXHAUSTED when the node cannot take the pages. */
numarena_code numarena_prefault(void* ptr, size_t len, int node,
                                numarena_placement_report* report);

/* Migrates the resident pages of [ptr, ptr+len) that are not on `node` to it, never
 * faulting a page in (numarena::correct). Pages the kernel will not move are counted in
 * report->failed, which is not an error of the call; so are unmapped pages in the range
 * (never faulted, they are pages it cannot move). Errors otherwise as numarena_prefault. */
numarena_code numarena_correct(void* ptr, size_t len, int node, numarena_placement_report* report);

/* ---- the per-node budget ---------------------------------------------------------------- */

/* A per-node memory budget: warn at 80 %, admission closes at 85 %, trip at 90 %. */
typedef struct numarena_budget numarena_budget;

/* Creates a budget over the machine's online nodes. `spec` is "system" (capacity = the
 * node's memory, usage = what the kernel says is used) or "quota:SIZE" (each node may hold
 * SIZE bytes of numarena memory, e.g. "quota:8G"). NULL with NUMARENA_INVALID_ARGUMENT for
 * another spec; kernel-file errors as NUMARENA_NOT_FOUND / NUMARENA_DATA_LOSS. */
numarena_budget* numarena_budget_create(const char* spec);

/* Destroys a budget. NUMARENA_FAILED_PRECONDITION (and nothing is destroyed) while it is
 * installed: uninstall it first with numarena_budget_install(NULL). NULL is ignored. */
numarena_code numarena_budget_destroy(numarena_budget* budget);

/* Makes `budget` the process-wide gate every arena charges before it commits memory (NULL
 * uninstalls). Install before the allocations you want counted. NUMARENA_FAILED_PRECONDITION
 * when another budget is installed. */
numarena_code numarena_budget_install(numarena_budget* budget);

typedef enum numarena_node_state {
  NUMARENA_NODE_NORMAL = 0,
  NUMARENA_NODE_WARN = 1,
  NUMARENA_NODE_ADMISSION_CLOSED = 2,
  NUMARENA_NODE_TRIPPED = 3
} numarena_node_state;

typedef struct numarena_budget_node {
  int node;
  numarena_node_state state;
  uint64_t capacity;
  uint64_t usage;
  uint64_t peak;
  uint64_t warn_bytes;
  uint64_t admission_bytes;
  uint64_t trip_bytes;
  uint64_t numarena_bytes; /* charged by numarena's allocations */
  uint64_t refusals;       /* charges refused */
} numarena_budget_node;

/* Copies one entry per node (ascending ids) into nodes[0 .. capacity) and sets *count to the
 * number of nodes. NUMARENA_OUT_OF_RANGE when `capacity` is too small (*count says how many
 * are needed; the first `capacity` entries are written). */
numarena_code numarena_budget_snapshot(const numarena_budget* budget, numarena_budget_node* nodes,
                                       size_t capacity, size_t* count);

typedef enum numarena_priority {
  NUMARENA_PRIORITY_HIGH = 0,
  NUMARENA_PRIORITY_NORMAL = 1,
  NUMARENA_PRIORITY_LOW = 2
} numarena_priority;

typedef enum numarena_admission {
  NUMARENA_ADMIT_OK = 0,    /* start the work now */
  NUMARENA_ADMIT_LATER = 1, /* the node is too full now; retry when memory was freed */
  NUMARENA_ADMIT_NEVER = 2  /* more than the node could ever give this priority */
} numarena_admission;

/* Should work needing about `bytes` on `node` start now? Charges nothing. Sets *answer and
 * returns NUMARENA_OK, or NUMARENA_INVALID_ARGUMENT for a NULL budget or answer, a priority
 * outside the enum, or a node the budget does not know. */
numarena_code numarena_budget_admit(const numarena_budget* budget, int node, size_t bytes,
                                    numarena_priority priority, numarena_admission* answer);

/* ---- topology --------------------------------------------------------------------------- */

typedef struct numarena_node_info {
  int id;
  int cpu_count;            /* 0 for a memory-only node (CXL, HBM) */
  int allowed;              /* 1 when the process may allocate there (cpuset, mems_allowed) */
  uint64_t mem_total_bytes;
  uint64_t mem_free_bytes;  /* when the topology was read */
} numarena_node_info;

/* The machine's online nodes, ascending, as numarena_budget_snapshot fills its array
 * (NUMARENA_OUT_OF_RANGE with *count when `capacity` is too small). Errors reading the
 * kernel's files as NUMARENA_NOT_FOUND / NUMARENA_DATA_LOSS. */
numarena_code numarena_topology_nodes(numarena_node_info* nodes, size_t capacity, size_t* count);

/* The SLIT distance from node `from` to node `to` (10 = local), or -1 with
 * NUMARENA_INVALID_ARGUMENT for a node that is not online. */
int numarena_distance(int from, int to);

/* The node of the CPU the calling thread runs on now, or -1 (last error set). */
int numarena_current_node(void);

/* A human-readable summary of the topology (nodes, CPUs, memory, distances, devices and what
 * the process may use), written like snprintf: NUL-terminated, truncated to `size`, the
 * length of the whole text returned. 0 with the last error set when discovery fails. */
size_t numarena_topology_summary(char* buffer, size_t size);

/* ---- metrics ---------------------------------------------------------------------------- */

/* One Prometheus scrape (text exposition format 0.0.4, the families listed in
 * docs/metrics.md): the kernel's per-node counters and memory, the devices, this process's
 * memory per node, the statistics of arenas[0 .. arena_count) (arenas may be NULL when
 * arena_count is 0; the policy label tells them apart) and, when `budget` is not NULL, the
 * budget's. Written like snprintf (NUL-terminated, truncated to `size`, the length of the
 * whole text returned); the figures are live, so a second call may need more room. 0 with
 * the last error set: NUMARENA_INVALID_ARGUMENT for NULL arenas with a count or a NULL entry,
 * NUMARENA_NOT_FOUND / NUMARENA_DATA_LOSS when kernel files cannot be read. */
size_t numarena_metrics_text(const numarena_arena* const* arenas, size_t arena_count,
                             const numarena_budget* budget, char* buffer, size_t size);

/* ---- the KV-cache pool ---------------------------------------------------------------- */
/* numarena::KvPool (numarena/kv_pool.hpp) for C and Python: attention K/V blocks placed by
 * head group on home nodes, demoted to a cold tier and promoted back. Sequences and blocks are
 * 64-bit handles; a block's memory is reachable only while it is pinned
 * (numarena_kv_pin ... numarena_kv_unpin), and a pinned block never moves.
 *
 * Lifetime: numarena_kv_pool_destroy gives up the caller's hold on the pool; the pool itself
 * goes when the last pin is released too, so a pin (or a tensor viewing a block, see
 * numarena.torch) never outlives its memory. */
typedef struct numarena_kv_pool numarena_kv_pool;
typedef struct numarena_kv_block_pin numarena_kv_block_pin;

typedef enum numarena_kv_dtype {
  NUMARENA_KV_FP32 = 0,
  NUMARENA_KV_FP16 = 1,
  NUMARENA_KV_BF16 = 2,
  NUMARENA_KV_FP8 = 3
} numarena_kv_dtype;

/* Zero it, set `size` to sizeof(numarena_kv_pool_options), then the geometry (layers,
 * kv_heads, head_dim, dtype; tokens_per_block 0 means 16, layers_per_block 0 means 1,
 * heads_per_group 0 means kv_heads / home nodes when that divides, else 1) and what else you
 * need:
 *   home_nodes, home_node_count  the head groups' nodes (0 nodes: the nodes with CPUs)
 *   cold_tier   NULL or "" (no cold tier), "node:N", "farthest", "interleave:0,2",
 *               "target:capacity" / "target:bandwidth" / "target:latency"
 *   hot_blocks_per_node, cold_blocks  limits in blocks (0: only the memory's)
 *   no_promote_on_touch  1: pinning a cold block serves it from the cold tier
 * Block memory is mmap'ed and bound to its node, charged to the installed budget, if any. */
typedef struct numarena_kv_pool_options {
  size_t size;
  int layers;
  int kv_heads;
  int head_dim;
  numarena_kv_dtype dtype;
  int tokens_per_block;
  int layers_per_block;
  int heads_per_group;
  const int* home_nodes;
  size_t home_node_count;
  const char* cold_tier;
  size_t hot_blocks_per_node;
  size_t cold_blocks;
  int no_promote_on_touch;
} numarena_kv_pool_options;

/* A new pool, or NULL with NUMARENA_INVALID_ARGUMENT (a bad geometry, node, cold tier or
 * options size; the message names it) or NUMARENA_FAILED_PRECONDITION (no node left for the
 * cold tier). */
numarena_kv_pool* numarena_kv_pool_create(const numarena_kv_pool_options* options);

/* Gives up the caller's hold on `pool` (NULL is ignored): it is destroyed now, or when its
 * last pin is released. The handle must not be used afterwards. */
void numarena_kv_pool_destroy(numarena_kv_pool* pool);

/* The pool's shape: head groups, KV heads per group, layer ranges, bytes of a block, and the
 * home node of each group (group_nodes[g] for g < group_capacity; may be NULL when 0). */
typedef struct numarena_kv_pool_layout {
  int head_groups;
  int heads_per_group;
  int layer_ranges;
  int layers_per_block;
  int tokens_per_block;
  int head_dim;
  numarena_kv_dtype dtype;
  size_t block_bytes;
} numarena_kv_pool_layout;
numarena_code numarena_kv_pool_layout_of(const numarena_kv_pool* pool, numarena_kv_pool_layout* out, int* group_nodes, size_t group_capacity);

/* A new sequence holding `count` prompt tokens (shares cached prefix spans; *reused, which may
 * be NULL, gets how many leading tokens already have K/V). NUMARENA_RESOURCE_EXHAUSTED when no
 * memory is left. */
numarena_code numarena_kv_sequence_create(numarena_kv_pool* pool, const int32_t* tokens, size_t count, uint64_t* sequence, size_t* reused);
/* Appends tokens (their K/V to be written afterwards). */
numarena_code numarena_kv_sequence_append(numarena_kv_pool* pool, uint64_t sequence, const int32_t* tokens, size_t count);
/* Declares the first `tokens` tokens' K/V written and final (KvPool::MarkComputed). */
numarena_code numarena_kv_sequence_mark_computed(numarena_kv_pool* pool, uint64_t sequence, size_t tokens);
/* Releases the sequence; its spans become cached or free. */
numarena_code numarena_kv_sequence_free(numarena_kv_pool* pool, uint64_t sequence);

/* The block ids of `sequence` for (layer, group) in token order, like
 * numarena_budget_snapshot fills its array (NUMARENA_OUT_OF_RANGE with *count when `capacity`
 * is too small). */
numarena_code numarena_kv_blocks(const numarena_kv_pool* pool, uint64_t sequence, int layer, int group, uint64_t* blocks, size_t capacity, size_t* count);

/* Where a pinned block's memory is. For layer l of the block's range and head h of its group,
 * the K row of token t is at data + l*layer_stride_bytes + h*head_stride_bytes +
 * t*row_bytes, and its V row value_offset_bytes further. tier: 1 hot, 2 cold. */
typedef struct numarena_kv_pin_info {
  void* data;
  int tier;
  int node;
  int first_layer;
  int first_head;
  int group;
  size_t row_bytes;
  size_t head_stride_bytes;
  size_t layer_stride_bytes;
  size_t value_offset_bytes;
} numarena_kv_pin_info;

/* Pins a block (promoting it first when it is cold, promotion on touch is on and the hot tier
 * has room) and fills *info (may be NULL). NULL with NUMARENA_FAILED_PRECONDITION for a stale or
 * unused block id. The pin keeps the pool alive. */
numarena_kv_block_pin* numarena_kv_pin(numarena_kv_pool* pool, uint64_t block, numarena_kv_pin_info* info);
/* Releases a pin, on any thread (NULL is ignored). */
void numarena_kv_unpin(numarena_kv_block_pin* pin);

/* Where a block is now, without pinning it: tier (0 none, 1 hot, 2 cold), node and pins (each
 * pointer may be NULL). NUMARENA_FAILED_PRECONDITION for a stale id. */
numarena_code numarena_kv_locate(const numarena_kv_pool* pool, uint64_t block, int* tier, int* node, int* pins);
/* Moves one block to the cold tier / back to its home node now. NUMARENA_FAILED_PRECONDITION
 * when it is pinned, unused, already there or there is no cold tier;
 * NUMARENA_RESOURCE_EXHAUSTED when the target tier has no room. */
numarena_code numarena_kv_demote_block(numarena_kv_pool* pool, uint64_t block);
numarena_code numarena_kv_promote_block(numarena_kv_pool* pool, uint64_t block);
/* Demotes up to `max_blocks` hot blocks of `node` by the hotness policy (urgently); returns
 * how many moved. */
size_t numarena_kv_demote(numarena_kv_pool* pool, int node, size_t max_blocks);

/* What numarena_kv_audit found and did (KvPool::AuditPlacement: pages of blocks the kernel's
 * own tiering moved off the node the pool put them on; "hot": demoted from a home node,
 * "cold": promoted off a cold-tier node). */
typedef struct numarena_kv_audit_report {
  size_t blocks_checked;
  size_t pages_checked;
  size_t hot_blocks_misplaced;
  size_t cold_blocks_misplaced;
  size_t hot_pages_misplaced;
  size_t cold_pages_misplaced;
  size_t pages_moved_back;
  size_t pages_not_moved;
  size_t blocks_left;
  int wrapped;
} numarena_kv_audit_report;
/* Asks the kernel where the pages of the next `max_blocks` blocks holding data are and, when
 * `correct` is not 0, moves pages found off their block's node back, for at most
 * `max_corrected_blocks` blocks (else only counts them). Fills *report (may be NULL).
 * NUMARENA_INVALID_ARGUMENT for max_blocks 0; the kernel's refusal (e.g.
 * NUMARENA_PERMISSION_DENIED) when it will not say where pages are. Pages the kernel would
 * not move back are counted in pages_not_moved, not an error. */
numarena_code numarena_kv_audit(numarena_kv_pool* pool, int correct, size_t max_blocks, size_t max_corrected_blocks, numarena_kv_audit_report* report);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NUMARENA_NUMARENA_H_ */
