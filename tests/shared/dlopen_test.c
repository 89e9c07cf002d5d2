/* libnumarena.so loaded the way an FFI or a plugin host loads it: dlopen() at run time, no
 * LD_PRELOAD, the program itself linked against neither numarena nor jemalloc. Runs the C
 * API through the loaded library (allocation, page placement, errors, threads that exit),
 * after a dlclose() that must not unload it (-z nodelete; see test_dlclose_first).
 *
 *   dlopen_test PATH/libnumarena.so */
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "numarena/numarena.h"

static int failures = 0;

#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                      \
    }                                                                  \
  } while (0)

/* The C API, through function pointers found with dlsym. */
static struct {
  numarena_arena* (*arena_for_node)(int);
  void* (*malloc_)(numarena_arena*, size_t);
  void (*free_)(void*);
  int (*owns)(const void*);
  int (*node_of)(const void*);
  size_t (*usable_size)(const void*);
  numarena_code (*page_nodes)(const void*, size_t, size_t*, size_t, numarena_page_counts*);
  numarena_code (*last_error)(void);
  const char* (*last_error_message)(void);
  const char* (*version)(void);
} api;

static void* need(void* handle, const char* name) {
  void* symbol = dlsym(handle, name);
  if (symbol == NULL) {
    fprintf(stderr, "dlopen_test: libnumarena.so does not export %s: %s\n", name, dlerror());
    exit(1);
  }
  return symbol;
}

static void* load(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    fprintf(stderr, "dlopen_test: dlopen(%s) failed: %s\n", path, dlerror());
    exit(1);
  }
  /* The casts go through a data pointer, as POSIX dlsym requires. */
  *(void**)&api.arena_for_node = need(handle, "numarena_arena_for_node");
  *(void**)&api.malloc_ = need(handle, "numarena_malloc");
  *(void**)&api.free_ = need(handle, "numarena_free");
  *(void**)&api.owns = need(handle, "numarena_owns");
  *(void**)&api.node_of = need(handle, "numarena_node_of");
  *(void**)&api.usable_size = need(handle, "numarena_usable_size");
  *(void**)&api.page_nodes = need(handle, "numarena_page_nodes");
  *(void**)&api.last_error = need(handle, "numarena_last_error");
  *(void**)&api.last_error_message = need(handle, "numarena_last_error_message");
  *(void**)&api.version = need(handle, "numarena_version");
  return handle;
}

static void test_allocate_and_place(void) {
  numarena_arena* arena = api.arena_for_node(0);
  CHECK(arena != NULL);
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t len = 64 * page;
  unsigned char* p = api.malloc_(arena, len);
  CHECK(p != NULL);
  if (p == NULL) return;
  memset(p, 0x5a, len);
  CHECK(api.owns(p));
  CHECK(api.node_of(p) == 0);
  CHECK(api.usable_size(p) >= len);
  size_t on_node[2] = {0, 0};
  numarena_page_counts counts;
  CHECK(api.page_nodes(p, len, on_node, 2, &counts) == NUMARENA_OK);
  CHECK(counts.total_pages >= 64);
  CHECK(on_node[0] == counts.total_pages);
  CHECK(on_node[1] == 0 && counts.not_resident == 0 && counts.unmapped == 0);
  api.free_(p);

  /* Memory from the process's own malloc is not numarena's: the library did not take over
   * malloc. */
  void* from_libc = malloc(64);
  CHECK(!api.owns(from_libc));
  free(from_libc);
}

static void test_errors(void) {
  CHECK(api.arena_for_node(4000) == NULL);
  CHECK(api.last_error() == NUMARENA_INVALID_ARGUMENT);
  CHECK(strstr(api.last_error_message(), "4000") != NULL);
}

/* Threads that allocate, free each other's blocks and exit: jemalloc's thread state lives in
 * dynamically allocated TLS here and is torn down at each thread's exit. */
enum { kThreads = 4, kBlocks = 2000 };
static void* blocks[kThreads][kBlocks];

static void* allocate_blocks(void* arg) {
  const int t = (int)(intptr_t)arg;
  numarena_arena* arena = api.arena_for_node(0);
  for (int i = 0; i < kBlocks; ++i) {
    const size_t size = (size_t)(16 + (i * 37 + t * 101) % 20000);
    blocks[t][i] = api.malloc_(arena, size);
    if (blocks[t][i] != NULL) memset(blocks[t][i], t, size);
  }
  return NULL;
}

static void* free_blocks(void* arg) {
  const int t = (int)(intptr_t)arg;
  for (int i = 0; i < kBlocks; ++i) api.free_(blocks[t][i]);
  return NULL;
}

static void test_threads(void) {
  pthread_t threads[kThreads];
  for (int t = 0; t < kThreads; ++t)
    CHECK(pthread_create(&threads[t], NULL, allocate_blocks, (void*)(intptr_t)t) == 0);
  for (int t = 0; t < kThreads; ++t) pthread_join(threads[t], NULL);
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kBlocks; ++i) {
      CHECK(blocks[t][i] != NULL);
      if (blocks[t][i] == NULL) return;
    }
  /* Each block freed by a thread other than the one that allocated it. */
  for (int t = 0; t < kThreads; ++t)
    CHECK(pthread_create(&threads[t], NULL, free_blocks, (void*)(intptr_t)((t + 1) % kThreads)) == 0);
  for (int t = 0; t < kThreads; ++t) pthread_join(threads[t], NULL);
}

/* dlclose() while a thread is inside numarena's state: the first call into the library, in
 * that thread, set up jemalloc's per-thread state, whose destructor runs when the thread
 * exits, after the dlclose; so the library must still be mapped then, and a second dlopen
 * must find the same arenas. It is linked -z nodelete for this. (glibc also keeps a library
 * whose C++ thread_local destructors are pending, which numarena's arena code has today, so
 * this test would pass without -z nodelete too; the flag makes it independent of that.) */
static sem_t started, closed;
static numarena_arena* first_arena;

static void* first_call_then_exit(void* arg) {
  (void)arg;
  first_arena = api.arena_for_node(0);
  sem_post(&started);
  sem_wait(&closed);
  return NULL;
}

static void test_dlclose_first(const char* path, void* handle) {
  sem_init(&started, 0, 0);
  sem_init(&closed, 0, 0);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, first_call_then_exit, NULL) == 0);
  sem_wait(&started);
  CHECK(first_arena != NULL);

  CHECK(dlclose(handle) == 0);
  void* still = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  CHECK(still != NULL); /* -z nodelete: dlclose left it loaded */
  if (still != NULL) dlclose(still);

  sem_post(&closed);
  pthread_join(thread, NULL);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH/libnumarena.so\n", argv[0]);
    return 2;
  }
  test_dlclose_first(argv[1], load(argv[1]));
  void* handle = load(argv[1]);
  CHECK(api.arena_for_node(0) == first_arena);
  CHECK(api.version()[0] >= '0' && api.version()[0] <= '9');
  test_allocate_and_place();
  test_errors();
  test_threads();
  CHECK(dlclose(handle) == 0);
  if (failures != 0) {
    fprintf(stderr, "dlopen_test: %d checks failed\n", failures);
    return 1;
  }
  printf("dlopen_test: all checks passed (numarena %s)\n", api.version());
  return 0;
}
