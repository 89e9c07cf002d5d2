/* A program that knows nothing of numarena (plain C and libpthread) and says whether two
 * threads' small blocks share memory pages. Under the malloc override each thread should
 * refill from slabs of its own (jemalloc's bin shards, BinShardCount in
 * lib/alloc/heap_table.hpp), so that one thread's writes never take the cache lines of the
 * other's blocks; with one bin per size class the two threads' refills come from the same slab,
 * side by side.
 *
 *   slab_sharing [--expect-own-slabs]
 *
 * The main thread allocates first, then thread A, then thread B (each thread's first call
 * fixes its bins). A and B then take turns, 40 times each, allocating 64 blocks of 48 bytes
 * and writing them, and keep all of them. Prints one line:
 *
 *   pages_a=N pages_b=M shared_pages=S cpus=C
 *
 * With --expect-own-slabs, exits 1 when S > 0, and 77 (skipped) when fewer than 2 CPUs are
 * online (the override then keeps one bin per class). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kTurns = 40, kPerTurn = 64, kBlock = 48, kBlocks = kTurns * kPerTurn };

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_changed = PTHREAD_COND_INITIALIZER;
static int g_turn = 0; /* even: A's turn, odd: B's; 2 * kTurns: done */
static int g_b_may_start = 0;

struct Thread {
  int parity;
  unsigned char* blocks[kBlocks];
};

static void WaitFor(int (*ready)(int), int argument) {
  pthread_mutex_lock(&g_lock);
  while (!ready(argument)) pthread_cond_wait(&g_changed, &g_lock);
  pthread_mutex_unlock(&g_lock);
}

static int IsTurnOf(int parity) { return g_turn >= 2 * kTurns || g_turn % 2 == parity; }
static int BMayStart(int unused) {
  (void)unused;
  return g_b_may_start;
}

static void* Run(void* arg) {
  struct Thread* self = arg;
  int taken = 0;
  for (int turn = 0; turn < kTurns; ++turn) {
    WaitFor(IsTurnOf, self->parity);
    for (int i = 0; i < kPerTurn; ++i) {
      unsigned char* block = malloc(kBlock);
      if (block == NULL) {
        fprintf(stderr, "slab_sharing: malloc(%d) returned NULL\n", kBlock);
        exit(2);
      }
      memset(block, self->parity + 1, kBlock);
      self->blocks[taken++] = block;
    }
    pthread_mutex_lock(&g_lock);
    ++g_turn;
    if (self->parity == 0) g_b_may_start = 1;
    pthread_cond_broadcast(&g_changed);
    pthread_mutex_unlock(&g_lock);
  }
  return NULL;
}

static int ComparePages(const void* left, const void* right) {
  uintptr_t a = *(const uintptr_t*)left, b = *(const uintptr_t*)right;
  return a < b ? -1 : a > b;
}

/* Sorts and deduplicates the pages of `blocks` into `pages`; returns how many. */
static size_t PagesOf(unsigned char* const* blocks, uintptr_t* pages, uintptr_t page_size) {
  for (int i = 0; i < kBlocks; ++i) pages[i] = (uintptr_t)blocks[i] / page_size;
  qsort(pages, kBlocks, sizeof pages[0], ComparePages);
  size_t unique = 0;
  for (int i = 0; i < kBlocks; ++i) {
    if (unique == 0 || pages[unique - 1] != pages[i]) pages[unique++] = pages[i];
  }
  return unique;
}

int main(int argc, char** argv) {
  const int expect_own_slabs = argc > 1 && strcmp(argv[1], "--expect-own-slabs") == 0;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  void* first = malloc(kBlock); /* the main thread's first call comes first */
  static struct Thread a = {.parity = 0}, b = {.parity = 1};
  pthread_t thread_a, thread_b;
  if (pthread_create(&thread_a, NULL, Run, &a) != 0) return 2;
  WaitFor(BMayStart, 0); /* A has made its first call */
  if (pthread_create(&thread_b, NULL, Run, &b) != 0) return 2;
  pthread_join(thread_a, NULL);
  pthread_join(thread_b, NULL);

  const uintptr_t page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
  static uintptr_t pages_a[kBlocks], pages_b[kBlocks];
  const size_t count_a = PagesOf(a.blocks, pages_a, page_size);
  const size_t count_b = PagesOf(b.blocks, pages_b, page_size);
  size_t shared = 0;
  for (size_t i = 0, j = 0; i < count_a && j < count_b;) {
    if (pages_a[i] == pages_b[j]) {
      ++shared;
      ++i;
      ++j;
    } else if (pages_a[i] < pages_b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  for (int i = 0; i < kBlocks; ++i) {
    if (a.blocks[i][kBlock - 1] != 1 || b.blocks[i][kBlock - 1] != 2) {
      fprintf(stderr, "slab_sharing: block %d was overwritten\n", i);
      return 2;
    }
    free(a.blocks[i]);
    free(b.blocks[i]);
  }
  free(first);
  printf("pages_a=%zu pages_b=%zu shared_pages=%zu cpus=%ld\n", count_a, count_b, shared, cpus);
  if (!expect_own_slabs) return 0;
  if (cpus < 2) {
    printf("slab_sharing: skipped: %ld CPU online, the override keeps one bin per class\n", cpus);
    return 77;
  }
  if (shared > 0) {
    fprintf(stderr,
            "slab_sharing: %zu pages hold small blocks of both threads: the two threads refill "
            "from the same slabs\n",
            shared);
    return 1;
  }
  return 0;
}
