/* The C API (numarena/numarena.h), compiled as C11: every function, and every error path a
 * caller can reach, on the host's own node 0 (placement across nodes is proven by the lab
 * tests of the C++ API that these functions wrap one to one). */
#include "numarena/numarena.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error %d: %s\n", __FILE__,    \
              __LINE__, #cond, (int)numarena_last_error(), numarena_last_error_message()); \
      ++failures;                                                                   \
    }                                                                               \
  } while (0)

/* The call failed with `code` and a message that contains `text`. */
#define CHECK_ERROR(code, text)                                           \
  do {                                                                    \
    CHECK(numarena_last_error() == (code));                               \
    CHECK(strstr(numarena_last_error_message(), (text)) != NULL);         \
    numarena_clear_error();                                               \
  } while (0)

static void test_errors_start_clear(void) {
  CHECK(numarena_last_error() == NUMARENA_OK);
  CHECK(strcmp(numarena_last_error_message(), "") == 0);
  CHECK(strcmp(numarena_version(), NUMARENA_VERSION_STRING) == 0);
}

static void test_arenas(void) {
  numarena_arena* node0 = numarena_arena_for_node(0);
  CHECK(node0 != NULL);
  CHECK(numarena_arena_for_node(0) == node0);
  CHECK(numarena_arena_for_policy("bind(0)") == node0);

  CHECK(numarena_arena_for_node(-1) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "node -1");
  CHECK(numarena_arena_for_node(4000) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "4000");
  CHECK(numarena_arena_for_policy(NULL) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "NULL");
  CHECK(numarena_arena_for_policy("bogus(0)") == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "expected bind(NODES)");
  CHECK(numarena_arena_for_policy("bind(7)") == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "node 7");

  /* Each policy string, and the canonical form the arena reports back. */
  const char* policies[][2] = {{"preferred(0)", "preferred(0)"},
                               {"interleave(0)", "interleave(0)"},
                               {"local", "local"},
                               {"weighted(0:1)/chunk=64K", "weighted(0:1)/chunk=65536"},
                               {"membind(0)/advisory", "bind(0)/advisory"}};
  for (size_t i = 0; i < sizeof policies / sizeof policies[0]; ++i) {
    numarena_arena* arena = numarena_arena_for_policy(policies[i][0]);
    CHECK(arena != NULL);
    char text[64];
    size_t length = numarena_arena_policy(arena, text, sizeof text);
    CHECK(length == strlen(policies[i][1]));
    CHECK(strcmp(text, policies[i][1]) == 0);
    /* Truncated like snprintf: the whole length is still returned. */
    char small[4];
    CHECK(numarena_arena_policy(arena, small, sizeof small) == length);
    CHECK(strlen(small) == 3);
  }
  numarena_arena_purge(node0);
  numarena_arena_purge(NULL);
}

static void test_allocation(void) {
  numarena_arena* arena = numarena_arena_for_node(0);
  static const size_t sizes[] = {0, 1, 7, 8, 15, 16, 100, 4096, 65536, 3u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    unsigned char* p = numarena_malloc(arena, sizes[i]);
    CHECK(p != NULL);
    CHECK(((uintptr_t)p & 15) == 0);
    CHECK(numarena_owns(p));
    CHECK(numarena_usable_size(p) >= sizes[i]);
    CHECK(numarena_node_of(p) == 0);
    if (sizes[i] > 0) memset(p, 0xab, sizes[i]);
    numarena_free(p);
  }
  numarena_free(NULL);

  CHECK(numarena_malloc(NULL, 16) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "arena is NULL");
  CHECK(numarena_malloc(arena, SIZE_MAX) == NULL);
  CHECK(numarena_last_error() == NUMARENA_INVALID_ARGUMENT ||
        numarena_last_error() == NUMARENA_RESOURCE_EXHAUSTED);
  numarena_clear_error();

  /* calloc: zeroed even when the memory is reused, and the product is checked. */
  unsigned char* dirty = numarena_malloc(arena, 1000);
  memset(dirty, 0xff, 1000);
  numarena_free(dirty);
  unsigned char* zeroed = numarena_calloc(arena, 10, 100);
  CHECK(zeroed != NULL);
  for (int i = 0; i < 1000; ++i) {
    if (zeroed[i] != 0) {
      CHECK(zeroed[i] == 0);
      break;
    }
  }
  numarena_free(zeroed);
  CHECK(numarena_calloc(arena, SIZE_MAX / 2, 3) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "overflows");

  int on_stack = 0;
  CHECK(!numarena_owns(&on_stack));
  CHECK(numarena_usable_size(&on_stack) == 0);
  CHECK(numarena_node_of(&on_stack) == NUMARENA_NODE_NONE);
  CHECK(numarena_node_of(NULL) == NUMARENA_NODE_NONE);
  void* spread = numarena_malloc(numarena_arena_for_policy("interleave(0)"), 64);
  CHECK(numarena_node_of(spread) == NUMARENA_NODE_MIXED || numarena_node_of(spread) == 0);
  numarena_free(spread);
}

static void test_realloc(void) {
  numarena_arena* arena = numarena_arena_for_node(0);
  char* p = numarena_realloc(arena, NULL, 10);
  CHECK(p != NULL);
  memcpy(p, "numarena!", 10);
  for (size_t size = 16; size <= (size_t)64 << 20; size *= 4) {
    p = numarena_realloc(arena, p, size);
    CHECK(p != NULL);
    CHECK(memcmp(p, "numarena!", 10) == 0);
    CHECK(numarena_usable_size(p) >= size);
  }
  char* small = numarena_realloc(arena, p, 5);
  CHECK(small != NULL);
  CHECK(memcmp(small, "numar", 5) == 0);
  /* A realloc that fails leaves the block with the caller. */
  CHECK(numarena_realloc(arena, small, SIZE_MAX) == NULL);
  CHECK(numarena_last_error() != NUMARENA_OK);
  numarena_clear_error();
  CHECK(memcmp(small, "numar", 5) == 0);
  CHECK(numarena_realloc(arena, small, 0) == NULL);
  CHECK(numarena_last_error() == NUMARENA_OK);

  int on_stack = 0;
  CHECK(numarena_realloc(arena, &on_stack, 64) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "not allocated by numarena");
  CHECK(numarena_realloc(NULL, numarena_malloc(arena, 8), 64) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "the arena is NULL");
}

/* In place only in the arena that made the block; into another arena of the same node it
 * moves, so destroying either arena cannot take the other's buffer. */
static void test_realloc_between_arenas(void) {
  numarena_arena* shared = numarena_arena_for_node(0);
  numarena_arena* own = numarena_arena_create("bind(0)");
  numarena_arena* spread = numarena_arena_for_policy("interleave(0)");
  CHECK(own != NULL && spread != NULL);
  char* p = numarena_malloc(shared, 1000);
  CHECK(p != NULL);
  memset(p, 'a', 1000);
  CHECK(numarena_arena_contains(shared, p) == 1);
  CHECK(numarena_arena_contains(own, p) == 0);
  CHECK(numarena_arena_contains(NULL, p) == 0);
  CHECK(numarena_arena_contains(shared, NULL) == 0);
  /* Shrinking by less than half stays in place, in its own arena. */
  CHECK(numarena_realloc(shared, p, 900) == p);
  char* moved = numarena_realloc(own, p, 900);
  CHECK(moved != NULL && moved != p);
  CHECK(numarena_arena_contains(own, moved) == 1);
  CHECK(numarena_arena_contains(shared, moved) == 0);
  CHECK(moved[0] == 'a' && moved[899] == 'a');
  /* An interleaved arena keeps its own blocks in place too. */
  char* wide = numarena_realloc(spread, moved, 900);
  CHECK(wide != NULL && wide != moved && numarena_arena_contains(spread, wide) == 1);
  CHECK(numarena_realloc(spread, wide, 600) == wide);
  CHECK(wide[599] == 'a');
  numarena_free(wide);
  CHECK(numarena_arena_destroy(own) == NUMARENA_OK);
}

static void test_aligned(void) {
  numarena_arena* arena = numarena_arena_for_node(0);
  for (size_t alignment = 1; alignment <= 4096; alignment *= 2) {
    void* p = numarena_aligned_alloc(arena, alignment, 24);
    CHECK(p != NULL);
    CHECK(((uintptr_t)p & (alignment - 1)) == 0);
    numarena_free(p);
  }
  /* Below 16 the header's minimum holds: an 8-byte request with alignment 1-8 is not put in
   * jemalloc's 8-byte class (half of 1000 such blocks were only 8-aligned). */
  for (size_t alignment = 1; alignment <= 8; alignment *= 2) {
    int misaligned = 0;
    void* blocks[1000];
    for (int i = 0; i < 1000; ++i) {
      blocks[i] = numarena_aligned_alloc(arena, alignment, 8);
      CHECK(blocks[i] != NULL);
      misaligned += ((uintptr_t)blocks[i] & 15) != 0;
    }
    CHECK(misaligned == 0);
    for (int i = 0; i < 1000; ++i) numarena_free(blocks[i]);
  }
  {
    int misaligned = 0;
    void* blocks[1000];
    for (int i = 0; i < 1000; ++i) {
      CHECK(numarena_posix_memalign(arena, &blocks[i], 8, 8) == 0);
      misaligned += ((uintptr_t)blocks[i] & 15) != 0;
    }
    CHECK(misaligned == 0);
    for (int i = 0; i < 1000; ++i) numarena_free(blocks[i]);
  }
  CHECK(numarena_aligned_alloc(arena, 3, 24) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "power of two");
  CHECK(numarena_aligned_alloc(arena, 0, 24) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "power of two");

  void* out = (void*)&out;
  CHECK(numarena_posix_memalign(arena, &out, 64, 100) == 0);
  CHECK(((uintptr_t)out & 63) == 0);
  numarena_free(out);
  void* untouched = (void*)0x1;
  CHECK(numarena_posix_memalign(arena, &untouched, 4, 100) == EINVAL);
  CHECK(untouched == (void*)0x1);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "sizeof(void*)");
  CHECK(numarena_posix_memalign(arena, NULL, 64, 100) == EINVAL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "NULL");
  CHECK(numarena_posix_memalign(NULL, &untouched, 64, 100) == EINVAL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "NULL");
  /* A size no allocation can have is ENOMEM, as posix_memalign's contract says (the
   * alignment is fine), with *out untouched and the reason kept. */
  const size_t hopeless[] = {SIZE_MAX, SIZE_MAX - 15, ((size_t)1 << 62) + 1};
  for (size_t i = 0; i < sizeof hopeless / sizeof hopeless[0]; ++i) {
    CHECK(numarena_posix_memalign(arena, &untouched, 64, hopeless[i]) == ENOMEM);
    CHECK(untouched == (void*)0x1);
    CHECK(numarena_last_error() != NUMARENA_OK);
  }
}

struct handoff {
  void* block;
  numarena_code code_seen;
};

static void* free_elsewhere(void* arg) {
  struct handoff* h = arg;
  numarena_free(h->block);
  /* This thread's failure stays on this thread. */
  (void)numarena_arena_for_node(-5);
  h->code_seen = numarena_last_error();
  return NULL;
}

static void test_arena_lifecycle(void) {
  numarena_clear_error();
  CHECK(numarena_arena_create(NULL) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "NULL");
  CHECK(numarena_arena_create("bogus(0)") == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "bind(");
  CHECK(numarena_arena_destroy(NULL) == NUMARENA_INVALID_ARGUMENT);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "NULL");
  /* The shared arenas are not the caller's to destroy. */
  CHECK(numarena_arena_destroy(numarena_arena_for_node(0)) == NUMARENA_FAILED_PRECONDITION);
  CHECK_ERROR(NUMARENA_FAILED_PRECONDITION, "Arena::Create");
  for (int i = 0; i < 100; ++i) {
    numarena_arena* arena = numarena_arena_create("bind(0)");
    CHECK(arena != NULL);
    if (arena == NULL) return;
    CHECK(arena != numarena_arena_for_node(0));
    char policy[32];
    numarena_arena_policy(arena, policy, sizeof policy);
    CHECK(strcmp(policy, "bind(0)") == 0);
    unsigned char* p = numarena_malloc(arena, 1 << 20);
    CHECK(p != NULL);
    if (p != NULL) memset(p, 7, 1 << 20);
    numarena_free(numarena_malloc(arena, 100));
    CHECK(numarena_arena_destroy(arena) == NUMARENA_OK); /* p goes with it */
  }
  CHECK(numarena_last_error() == NUMARENA_OK);
}

/* A handle kept past numarena_arena_destroy is stale: every call refuses it, a second destroy
 * too, even after a new arena reuses its slot (and, often, its address). */
static void test_stale_arena_handle(void) {
  numarena_clear_error();
  numarena_arena* old = numarena_arena_create("bind(0)");
  CHECK(old != NULL);
  if (old == NULL) return;
  CHECK(numarena_arena_destroy(old) == NUMARENA_OK);
  numarena_arena* fresh = numarena_arena_create("bind(0)");
  CHECK(fresh != NULL && fresh != old);
  CHECK(numarena_malloc(old, 64) == NULL);
  CHECK_ERROR(NUMARENA_FAILED_PRECONDITION, "stale");
  CHECK(numarena_calloc(old, 2, 64) == NULL);
  CHECK_ERROR(NUMARENA_FAILED_PRECONDITION, "numarena_arena_destroy");
  CHECK(numarena_aligned_alloc(old, 64, 64) == NULL);
  void* out = NULL;
  CHECK(numarena_posix_memalign(old, &out, 64, 64) == ENOMEM && out == NULL);
  void* live = numarena_malloc(fresh, 64);
  CHECK(live != NULL);
  CHECK(numarena_realloc(old, live, 4096) == NULL); /* live is untouched */
  CHECK_ERROR(NUMARENA_FAILED_PRECONDITION, "stale");
  CHECK(numarena_arena_contains(old, live) == 0);
  CHECK(numarena_arena_contains(fresh, live) == 1);
  char policy[32] = "x";
  CHECK(numarena_arena_policy(old, policy, sizeof policy) == 0 && policy[0] == '\0');
  numarena_arena_options seen;
  memset(&seen, 0, sizeof seen);
  seen.size = sizeof seen;
  CHECK(numarena_arena_options_of(old, &seen) == NUMARENA_FAILED_PRECONDITION);
  numarena_arena_purge(old); /* nothing to do, nothing broken */
  const numarena_arena* arenas[] = {old};
  char text[64];
  CHECK(numarena_metrics_text(arenas, 1, NULL, text, sizeof text) == 0);
  CHECK_ERROR(NUMARENA_FAILED_PRECONDITION, "stale");
  CHECK(numarena_arena_destroy(old) == NUMARENA_FAILED_PRECONDITION); /* not `fresh` */
  CHECK_ERROR(NUMARENA_FAILED_PRECONDITION, "stale");
  CHECK(numarena_arena_policy(fresh, policy, sizeof policy) > 0 &&
        strcmp(policy, "bind(0)") == 0);
  numarena_free(live);
  CHECK(numarena_arena_destroy(fresh) == NUMARENA_OK);
  /* Not a handle numarena gave out at all. */
  CHECK(numarena_malloc((numarena_arena*)(uintptr_t)0x1000, 64) == NULL);
  CHECK_ERROR(NUMARENA_FAILED_PRECONDITION, "not an arena handle");
  /* The shared arenas keep one handle for the life of the process. */
  CHECK(numarena_arena_for_node(0) == numarena_arena_for_node(0));
}

static void test_arena_options(void) {
  numarena_clear_error();
  numarena_arena_options options;
  memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.shards = 2;
  numarena_arena* arena = numarena_arena_create_with_options("bind(0)", &options);
  CHECK(arena != NULL);
  if (arena != NULL) {
    numarena_arena_options seen;
    memset(&seen, 0, sizeof seen);
    seen.size = sizeof seen;
    CHECK(numarena_arena_options_of(arena, &seen) == NUMARENA_OK);
    CHECK(seen.shards == 2 && seen.hugetlb_page_bytes == 0 && seen.size == sizeof seen);
    unsigned char* p = numarena_malloc(arena, 3 << 20);
    CHECK(p != NULL);
    if (p != NULL) memset(p, 5, 3 << 20);
    CHECK(numarena_node_of(p) == 0);
    CHECK(numarena_arena_destroy(arena) == NUMARENA_OK);
  }
  /* NULL options are the defaults. */
  arena = numarena_arena_create_with_options("bind(0)", NULL);
  CHECK(arena != NULL);
  if (arena != NULL) {
    numarena_arena_options seen = {sizeof seen, 1, 7};
    CHECK(numarena_arena_options_of(arena, &seen) == NUMARENA_OK);
    CHECK(seen.shards == 0 && seen.hugetlb_page_bytes == 0);
    CHECK(numarena_arena_destroy(arena) == NUMARENA_OK);
  }
  /* Out of range, and a struct that does not say its size. */
  options.shards = 9;
  CHECK(numarena_arena_create_with_options("bind(0)", &options) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "shards 9");
  options.shards = 0;
  options.hugetlb_page_bytes = (size_t)3 << 20;
  CHECK(numarena_arena_create_with_options("bind(0)", &options) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "hugetlb_page_bytes");
  options.hugetlb_page_bytes = 0;
  options.size = 0;
  CHECK(numarena_arena_create_with_options("bind(0)", &options) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "sizeof(numarena_arena_options)");
  options.size = (size_t)-1; /* never read that far */
  CHECK(numarena_arena_create_with_options("bind(0)", &options) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "more than any");
  options.size = sizeof options;
  CHECK(numarena_arena_create_with_options(NULL, NULL) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "NULL");
  /* A caller built against a later header: unknown fields must be zero. */
  struct {
    numarena_arena_options known;
    int later_field;
  } later;
  memset(&later, 0, sizeof later);
  later.known.size = sizeof later;
  arena = numarena_arena_create_with_options("bind(0)", &later.known);
  CHECK(arena != NULL);
  if (arena != NULL) CHECK(numarena_arena_destroy(arena) == NUMARENA_OK);
  later.later_field = 1;
  CHECK(numarena_arena_create_with_options("bind(0)", &later.known) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "knows only the first");
  numarena_arena_options small = {0, 0, 0};
  CHECK(numarena_arena_options_of(numarena_arena_for_node(0), &small) == NUMARENA_INVALID_ARGUMENT);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "out->size");
  CHECK(numarena_arena_options_of(NULL, &small) == NUMARENA_INVALID_ARGUMENT);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "NULL");
  CHECK(numarena_last_error() == NUMARENA_OK);
}

static void test_threads(void) {
  numarena_clear_error();
  struct handoff h = {numarena_malloc(numarena_arena_for_node(0), 256), NUMARENA_OK};
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, free_elsewhere, &h) == 0);
  pthread_join(thread, NULL);
  CHECK(h.code_seen == NUMARENA_INVALID_ARGUMENT);
  CHECK(numarena_last_error() == NUMARENA_OK);
}

static void test_pages(void) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t len = 64 * page;
  unsigned char* buffer = numarena_malloc(numarena_arena_for_node(0), len);
  CHECK(buffer != NULL);
  memset(buffer, 1, len);
  size_t on_node[4] = {9, 9, 9, 9};
  numarena_page_counts counts;
  CHECK(numarena_page_nodes(buffer, len, on_node, 4, &counts) == NUMARENA_OK);
  CHECK(counts.total_pages >= 64);
  CHECK(on_node[0] == counts.total_pages);
  CHECK(on_node[1] == 0 && on_node[2] == 0 && on_node[3] == 0);
  CHECK(counts.on_other_nodes == 0 && counts.unmapped == 0 && counts.not_resident == 0);
  CHECK(numarena_page_nodes(buffer, len, NULL, 0, &counts) == NUMARENA_OK);
  CHECK(counts.on_other_nodes == counts.total_pages);
  CHECK(numarena_page_nodes(buffer, len, on_node, 4, NULL) == NUMARENA_INVALID_ARGUMENT);
  numarena_clear_error();
  CHECK(numarena_page_nodes(buffer, len, NULL, 4, &counts) == NUMARENA_INVALID_ARGUMENT);
  numarena_clear_error();
  numarena_free(buffer);

  /* Any mapping the caller owns, e.g. memory a foreign allocator made. */
  unsigned char* mapping = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                -1, 0);
  CHECK(mapping != MAP_FAILED);
  numarena_placement_report report;
  CHECK(numarena_prefault(mapping, len, 0, &report) == NUMARENA_OK);
  CHECK(report.node == 0);
  CHECK(report.pages_checked == 64);
  CHECK(report.already_local + report.moved == 64);
  CHECK(report.not_resident == 0 && report.failed == 0);
  CHECK(numarena_correct(mapping, len, 0, &report) == NUMARENA_OK);
  CHECK(report.already_local == 64);
  CHECK(numarena_correct(mapping, len, 0, NULL) == NUMARENA_OK);
  CHECK(numarena_prefault(mapping, len, 99, &report) == NUMARENA_INVALID_ARGUMENT);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "99");
  CHECK(numarena_correct(mapping, len, -3, NULL) == NUMARENA_INVALID_ARGUMENT);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "-3");
  munmap(mapping, len);
}

static void test_topology(void) {
  size_t count = 0;
  CHECK(numarena_topology_nodes(NULL, 0, &count) == NUMARENA_OUT_OF_RANGE);
  CHECK(count >= 1);
  numarena_clear_error();
  CHECK(numarena_topology_nodes(NULL, 0, NULL) == NUMARENA_INVALID_ARGUMENT);
  numarena_clear_error();
  numarena_node_info nodes[64];
  CHECK(numarena_topology_nodes(nodes, 64, &count) == NUMARENA_OK);
  CHECK(nodes[0].id == 0);
  CHECK(nodes[0].cpu_count >= 1);
  CHECK(nodes[0].allowed == 1);
  CHECK(nodes[0].mem_total_bytes > 0 && nodes[0].mem_free_bytes <= nodes[0].mem_total_bytes);

  CHECK(numarena_distance(0, 0) == 10);
  CHECK(numarena_distance(0, 999) == -1);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "999");
  CHECK(numarena_current_node() == 0);

  char text[4096];
  size_t length = numarena_topology_summary(text, sizeof text);
  CHECK(length > 0 && length < sizeof text);
  CHECK(strstr(text, "node 0: CPUs") == text);
  CHECK(strstr(text, "process: CPUs") != NULL);
  char tiny[8];
  CHECK(numarena_topology_summary(tiny, sizeof tiny) == length);
  CHECK(strlen(tiny) == 7);
  CHECK(numarena_topology_summary(NULL, 0) == length);
}

static void test_metrics(void) {
  numarena_arena* arena = numarena_arena_for_node(0);
  CHECK(arena != NULL);
  void* p = numarena_malloc(arena, 1 << 20);
  CHECK(p != NULL);
  memset(p, 1, 1 << 20);
  const numarena_arena* arenas[1] = {arena};
  size_t length = numarena_metrics_text(arenas, 1, NULL, NULL, 0);
  CHECK(length > 0);
  char* text = malloc(length + 4096);  /* the figures may grow between the calls */
  CHECK(text != NULL);
  size_t again = numarena_metrics_text(arenas, 1, NULL, text, length + 4096);
  CHECK(again > 0 && again < length + 4096 && strlen(text) == again);
  CHECK(strstr(text, "# TYPE numarena_node_memory_total_bytes gauge") != NULL);
  CHECK(strstr(text, "numarena_arena_allocated_bytes{policy=\"bind(0)\"}") != NULL);
  CHECK(strstr(text, "numarena_budget_") == NULL);
  char tiny[8];
  CHECK(numarena_metrics_text(arenas, 1, NULL, tiny, sizeof tiny) > sizeof tiny);
  CHECK(strlen(tiny) == 7);
  free(text);
  numarena_free(p);

  CHECK(numarena_metrics_text(NULL, 1, NULL, tiny, sizeof tiny) == 0);
  CHECK(tiny[0] == '\0');
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "NULL arenas");
  const numarena_arena* holes[2] = {arena, NULL};
  CHECK(numarena_metrics_text(holes, 2, NULL, NULL, 0) == 0);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "arenas[1] is NULL");
}

/* Last: installing a budget changes the whole process. */
static void test_budget(void) {
  CHECK(numarena_budget_create("bogus") == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "quota:SIZE");
  CHECK(numarena_budget_create(NULL) == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "quota:SIZE");
  CHECK(numarena_budget_create("quota:") == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "positive size");
  CHECK(numarena_budget_create("quota:0") == NULL);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "positive size");
  CHECK(numarena_budget_destroy(NULL) == NUMARENA_OK);

  numarena_budget* system = numarena_budget_create("system");
  CHECK(system != NULL);
  CHECK(numarena_budget_destroy(system) == NUMARENA_OK);

  numarena_budget* budget = numarena_budget_create("quota:64M");
  CHECK(budget != NULL);
  size_t count = 0;
  CHECK(numarena_budget_snapshot(budget, NULL, 0, &count) == NUMARENA_OUT_OF_RANGE);
  CHECK(count >= 1);
  numarena_clear_error();
  CHECK(numarena_budget_snapshot(NULL, NULL, 0, &count) == NUMARENA_INVALID_ARGUMENT);
  numarena_clear_error();
  numarena_budget_node nodes[64];
  CHECK(numarena_budget_snapshot(budget, nodes, 64, &count) == NUMARENA_OK);
  CHECK(nodes[0].node == 0);
  CHECK(nodes[0].capacity == (uint64_t)64 << 20);
  CHECK(nodes[0].state == NUMARENA_NODE_NORMAL);
  CHECK(nodes[0].trip_bytes > nodes[0].admission_bytes &&
        nodes[0].admission_bytes > nodes[0].warn_bytes);

  numarena_admission answer = NUMARENA_ADMIT_NEVER;
  CHECK(numarena_budget_admit(budget, 0, 1 << 20, NUMARENA_PRIORITY_NORMAL, &answer) ==
        NUMARENA_OK);
  CHECK(answer == NUMARENA_ADMIT_OK);
  CHECK(numarena_budget_admit(budget, 0, (size_t)1 << 30, NUMARENA_PRIORITY_NORMAL, &answer) ==
        NUMARENA_OK);
  CHECK(answer == NUMARENA_ADMIT_NEVER);
  CHECK(numarena_budget_admit(budget, 77, 1, NUMARENA_PRIORITY_NORMAL, &answer) ==
        NUMARENA_INVALID_ARGUMENT);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "node 77");
  CHECK(numarena_budget_admit(budget, 0, 1, (numarena_priority)7, &answer) ==
        NUMARENA_INVALID_ARGUMENT);
  CHECK_ERROR(NUMARENA_INVALID_ARGUMENT, "priority 7");
  CHECK(numarena_budget_admit(budget, 0, 1, NUMARENA_PRIORITY_LOW, NULL) ==
        NUMARENA_INVALID_ARGUMENT);
  numarena_clear_error();

  CHECK(numarena_budget_install(budget) == NUMARENA_OK);
  numarena_budget* other = numarena_budget_create("quota:1G");
  CHECK(numarena_budget_install(other) == NUMARENA_FAILED_PRECONDITION);
  numarena_clear_error();
  CHECK(numarena_budget_destroy(other) == NUMARENA_OK);

  /* A full quota: NULL and ResourceExhausted, never an OOM kill. */
  void* too_big = numarena_malloc(numarena_arena_for_node(0), (size_t)256 << 20);
  CHECK(too_big == NULL);
  CHECK(numarena_last_error() == NUMARENA_RESOURCE_EXHAUSTED);
  numarena_clear_error();
  CHECK(numarena_budget_snapshot(budget, nodes, 64, &count) == NUMARENA_OK);
  CHECK(nodes[0].refusals >= 1);

  CHECK(numarena_budget_destroy(budget) == NUMARENA_FAILED_PRECONDITION);
  CHECK_ERROR(NUMARENA_FAILED_PRECONDITION, "numarena_budget_install(NULL)");
  {
    size_t length = numarena_metrics_text(NULL, 0, budget, NULL, 0);
    CHECK(length > 0);
    char* text = malloc(length + 4096);
    CHECK(text != NULL && numarena_metrics_text(NULL, 0, budget, text, length + 4096) > 0);
    CHECK(text != NULL && strstr(text, "numarena_budget_capacity_bytes{node=\"0\"} 67108864") != NULL);
    free(text);
  }
  CHECK(numarena_budget_install(NULL) == NUMARENA_OK);
  CHECK(numarena_budget_destroy(budget) == NUMARENA_OK);
}

int main(void) {
  test_errors_start_clear();
  test_arenas();
  test_arena_lifecycle();
  test_stale_arena_handle();
  test_arena_options();
  test_allocation();
  test_realloc();
  test_realloc_between_arenas();
  test_aligned();
  test_threads();
  test_pages();
  test_topology();
  test_metrics();
  test_budget();
  if (failures != 0) {
    fprintf(stderr, "capi_test: %d checks failed\n", failures);
    return 1;
  }
  printf("capi_test: all checks passed\n");
  return 0;
}
