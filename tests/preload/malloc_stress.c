/* A multi-threaded malloc stress program that knows nothing of numarena: plain C, linked with
 * libc, libpthread and libdl only. `numarena run` runs it in ctest (tests/CMakeLists.txt).
 *
 *   malloc_stress [--expect-numarena] [--threads N] [--rounds N] [--rss-limit-mib N]
 *
 * It checks every result itself and exits 0 only when all held:
 *   - workers allocate blocks of mixed sizes (malloc, calloc, realloc, and the aligned
 *     functions), fill them with a pattern of (owner, serial), and hand half of them to other
 *     workers through a shared exchange; whoever frees a block checks its pattern first
 *     (cross-thread frees);
 *   - realloc growth keeps the contents (step by step and by doubling), shrinking too;
 *   - memalign, posix_memalign, aligned_alloc, valloc and pvalloc return memory aligned as
 *     asked, malloc_usable_size is at least the size asked for, calloc memory is zero;
 *   - waves of short-lived threads allocate and exit, leaving blocks that the main thread
 *     checks and frees after they are gone;
 *   - fork while the workers run: the child allocates, checks and frees, and exits 0;
 *   - a thread's last destructor (a pthread key made after the allocator's own, so it runs
 *     after the allocator released the thread's state) allocates, grows, aligns and frees
 *     blocks of every size: the blocks are usable and freeing them does not crash (numarena
 *     hands such late calls to glibc);
 *   - with --rss-limit-mib, the peak resident set stays under it (the live set is small while
 *     the volume allocated over the run must be at least 4 times the limit, so a leak shows);
 *   - --expect-numarena: the allocations belong to numarena, as numarena_owns() (found with
 *     dlsym(RTLD_DEFAULT), i.e. in libnumarena_preload.so) says; without the override the
 *     symbol is missing and the program fails.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int (*owns)(const void*);
static int expect_numarena;
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
static int failures;

static void fail(const char* what, size_t a, size_t b) {
  pthread_mutex_lock(&fail_lock);
  if (failures++ < 20) fprintf(stderr, "malloc_stress: FAILED %s (%zu, %zu)\n", what, a, b);
  pthread_mutex_unlock(&fail_lock);
}

static void check_owned(const void* p, const char* what) {
  if (expect_numarena && p != NULL && !owns(p)) fail(what, (size_t)(uintptr_t)p, 0);
}

/* A block: its header says who filled it and how; the rest is the pattern. */
typedef struct block {
  size_t size;
  uint32_t owner;
  uint32_t serial;
} block;

static unsigned char pattern_byte(uint32_t owner, uint32_t serial, size_t i) {
  return (unsigned char)((owner * 131u) ^ (serial * 31u) ^ (uint32_t)(i * 7u));
}

static void fill(block* b, size_t size, uint32_t owner, uint32_t serial) {
  b->size = size;
  b->owner = owner;
  b->serial = serial;
  unsigned char* bytes = (unsigned char*)b;
  for (size_t i = sizeof(block); i < size; ++i) bytes[i] = pattern_byte(owner, serial, i);
}

static void verify(const block* b, const char* what) {
  const unsigned char* bytes = (const unsigned char*)b;
  for (size_t i = sizeof(block); i < b->size; ++i) {
    if (bytes[i] != pattern_byte(b->owner, b->serial, i)) {
      fail(what, b->size, i);
      return;
    }
  }
}

/* ---- the exchange: blocks handed from one worker to another ------------------------------ */
#define EXCHANGE_SLOTS 256
static block* exchange[EXCHANGE_SLOTS];
static pthread_mutex_t exchange_lock = PTHREAD_MUTEX_INITIALIZER;

/* Puts `b` into a slot and returns what was there (NULL if empty), for the caller to free. */
static block* swap_in(block* b, unsigned slot) {
  pthread_mutex_lock(&exchange_lock);
  block* old = exchange[slot % EXCHANGE_SLOTS];
  exchange[slot % EXCHANGE_SLOTS] = b;
  pthread_mutex_unlock(&exchange_lock);
  return old;
}

static uint64_t next_random(uint64_t* state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

static size_t random_size(uint64_t* rng) {
  uint64_t r = next_random(rng);
  switch (r % 16) {
    case 0: return (size_t)(64u << 10) + (size_t)(r >> 20) % (960u << 10); /* 64 KiB .. 1 MiB */
    case 1: case 2: return 4096 + (size_t)(r >> 20) % 60000;
    default: return sizeof(block) + (size_t)(r >> 20) % 1024;
  }
}

/* ---- realloc and the aligned functions ----------------------------------------------------- */
static void realloc_growth(uint32_t owner, uint32_t serial) {
  unsigned char* p = NULL;
  size_t size = 0;
  /* Step by step, then by doubling: each time the old bytes must still be there. */
  for (int step = 0; step < 64; ++step) {
    size_t next = step < 32 ? size + 97 : size * 2;
    unsigned char* q = realloc(p, next);
    if (q == NULL) { fail("realloc returned NULL", next, 0); free(p); return; }
    check_owned(q, "realloc'd block not numarena's");
    for (size_t i = 0; i < size; ++i) {
      if (q[i] != pattern_byte(owner, serial, i)) { fail("realloc lost contents", next, i); break; }
    }
    for (size_t i = size; i < next; ++i) q[i] = pattern_byte(owner, serial, i);
    p = q;
    size = next;
    if (size > ((size_t)8 << 20)) break;
  }
  unsigned char* shrunk = realloc(p, 100);
  if (shrunk == NULL) { fail("realloc shrink returned NULL", size, 100); free(p); return; }
  for (size_t i = 0; i < 100; ++i) {
    if (shrunk[i] != pattern_byte(owner, serial, i)) { fail("realloc shrink lost contents", 100, i); break; }
  }
  /* reallocarray is glibc's, built on the realloc it finds through the PLT: ours. */
  unsigned char* array = reallocarray(shrunk, 1000, 10);
  if (array == NULL) { fail("reallocarray returned NULL", 1000, 10); free(shrunk); return; }
  check_owned(array, "reallocarray'd block not numarena's");
  for (size_t i = 0; i < 100; ++i) {
    if (array[i] != pattern_byte(owner, serial, i)) { fail("reallocarray lost contents", 10000, i); break; }
  }
  free(array);
}

static void aligned_allocations(void) {
  static const size_t alignments[] = {8, 16, 32, 64, 256, 4096, 65536, (size_t)2 << 20};
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (size_t a = 0; a < sizeof(alignments) / sizeof(alignments[0]); ++a) {
    size_t alignment = alignments[a];
    for (size_t size = 1; size < ((size_t)1 << 20); size = size * 5 + 3) {
      void* ptrs[5] = {0};
      if (posix_memalign(&ptrs[0], alignment, size) != 0) fail("posix_memalign", alignment, size);
      ptrs[1] = aligned_alloc(alignment, size);
      ptrs[2] = memalign(alignment, size);
      ptrs[3] = valloc(size);
      ptrs[4] = pvalloc(size);
      size_t want[5] = {alignment, alignment, alignment, page, page};
      for (int i = 0; i < 5; ++i) {
        if (ptrs[i] == NULL) { fail("aligned allocation returned NULL", alignment, size); continue; }
        if ((uintptr_t)ptrs[i] % want[i] != 0) fail("misaligned", want[i], (size_t)(uintptr_t)ptrs[i]);
        if (malloc_usable_size(ptrs[i]) < size) fail("usable size too small", malloc_usable_size(ptrs[i]), size);
        if (i == 4 && malloc_usable_size(ptrs[i]) < (size + page - 1) / page * page)
          fail("pvalloc did not round up to pages", malloc_usable_size(ptrs[i]), size);
        check_owned(ptrs[i], "aligned block not numarena's");
        memset(ptrs[i], 0xa5, size);
      }
      for (int i = 0; i < 5; ++i) free(ptrs[i]);
    }
  }
  /* The error paths glibc has too. */
  void* p = (void*)1;
  if (posix_memalign(&p, 24, 64) != EINVAL || p != (void*)1) fail("posix_memalign(24) not EINVAL", 24, 0);
  errno = 0;
  volatile size_t huge = SIZE_MAX / 2; /* volatile: the compiler must not see the overflow */
  if (calloc(huge, 4) != NULL || errno != ENOMEM) fail("calloc overflow not ENOMEM", 0, 0);
}

static void calloc_zero(uint64_t* rng) {
  size_t count = 1 + (size_t)(next_random(rng) % 5000);
  /* Dirty memory first, so that a calloc that reuses it must clear it. */
  unsigned char* dirty = malloc(count * 8);
  if (dirty == NULL) { fail("malloc", count * 8, 0); return; }
  memset(dirty, 0xff, count * 8);
  free(dirty);
  unsigned char* z = calloc(count, 8);
  if (z == NULL) { fail("calloc returned NULL", count, 8); return; }
  check_owned(z, "calloc'd block not numarena's");
  for (size_t i = 0; i < count * 8; ++i) {
    if (z[i] != 0) { fail("calloc memory not zero", count, i); break; }
  }
  free(z);
}

/* ---- workers -------------------------------------------------------------------------------- */
static int rounds = 20000;
static pthread_mutex_t volume_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t volume; /* bytes the workers allocated over the run */
static volatile int stop_forking;

typedef struct worker_arg {
  uint32_t id;
} worker_arg;

#define KEEP 64
static void* worker(void* raw) {
  worker_arg* arg = raw;
  uint64_t rng = 0x9e3779b97f4a7c15ull * (arg->id + 1);
  block* kept[KEEP] = {0};
  size_t allocated = 0;
  for (int round = 0; round < rounds; ++round) {
    size_t size = random_size(&rng);
    block* b = malloc(size);
    if (b == NULL) { fail("malloc returned NULL", size, 0); continue; }
    check_owned(b, "malloc'd block not numarena's");
    fill(b, size, arg->id, (uint32_t)round);
    allocated += size;
    if (round % 2 == 0) {
      /* Cross-thread: whatever another worker left in the slot is checked and freed here. */
      block* other = swap_in(b, (unsigned)(next_random(&rng) % EXCHANGE_SLOTS));
      if (other != NULL) { verify(other, "cross-thread block corrupted"); free(other); }
    } else {
      unsigned slot = (unsigned)(next_random(&rng) % KEEP);
      if (kept[slot] != NULL) { verify(kept[slot], "kept block corrupted"); free(kept[slot]); }
      kept[slot] = b;
    }
    if (round % 1000 == 0) {
      realloc_growth(arg->id, (uint32_t)round);
      calloc_zero(&rng);
    }
    if (round % 5000 == 0) aligned_allocations();
  }
  for (int i = 0; i < KEEP; ++i) {
    if (kept[i] != NULL) { verify(kept[i], "kept block corrupted"); free(kept[i]); }
  }
  pthread_mutex_lock(&volume_lock);
  volume += allocated;
  pthread_mutex_unlock(&volume_lock);
  return NULL;
}

/* Short-lived threads: each allocates, keeps its blocks in `out`, and exits; the main thread
 * checks and frees them after the thread is gone (its caches torn down). */
typedef struct ephemeral_arg {
  uint32_t id;
  block* out[16];
} ephemeral_arg;

static void* ephemeral(void* raw) {
  ephemeral_arg* arg = raw;
  uint64_t rng = 0x1234567ull * (arg->id + 7);
  for (int i = 0; i < 16; ++i) {
    size_t size = random_size(&rng);
    arg->out[i] = malloc(size);
    if (arg->out[i] == NULL) { fail("malloc in short-lived thread", size, 0); continue; }
    check_owned(arg->out[i], "short-lived thread's block not numarena's");
    fill(arg->out[i], size, 1000 + arg->id, (uint32_t)i);
  }
  /* And some garbage it frees itself, which fills its caches before it exits. */
  for (int i = 0; i < 200; ++i) free(malloc(random_size(&rng)));
  return NULL;
}

/* ---- allocations from a thread's last destructor ---- */
static pthread_key_t late_key;
static int late_ran;

static void late_destructor(void* first) {
  free(first);
  static const size_t sizes[] = {24, 3000, 40000, 300000, 3 << 20, 9 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    block* b = malloc(sizes[i]);
    if (b == NULL) {
      fail("late malloc returned NULL", sizes[i], 0);
      continue;
    }
    fill(b, sizes[i], 99, (uint32_t)i);
    block* grown = realloc(b, sizes[i] * 2);
    if (grown == NULL) {
      fail("late realloc returned NULL", sizes[i], 0);
      free(b);
      continue;
    }
    verify(grown, "late realloc lost the contents");
    free(grown);
    void* aligned = NULL;
    if (posix_memalign(&aligned, 4096, sizes[i]) != 0 || ((uintptr_t)aligned & 4095) != 0) {
      fail("late posix_memalign", sizes[i], (size_t)(uintptr_t)aligned);
    }
    free(aligned);
  }
  late_ran = 1;
}

static void* late_thread(void* arg) {
  (void)arg;
  void* first = malloc(200);
  if (first == NULL) {
    fail("late thread's malloc returned NULL", 200, 0);
    return NULL;
  }
  memset(first, 0x3c, 200);
  if (expect_numarena && owns(first) != 1)
    fail("late thread's first block is not numarena's", 200, 0);
  pthread_setspecific(late_key, first);
  return NULL;
}

static void late_destructors(void) {
  if (pthread_key_create(&late_key, late_destructor) != 0) {
    fail("pthread_key_create", 0, 0);
    return;
  }
  pthread_t thread;
  if (pthread_create(&thread, NULL, late_thread, NULL) != 0) {
    fail("pthread_create (late)", 0, 0);
    return;
  }
  pthread_join(thread, NULL);
  if (!late_ran) fail("the late destructor did not run", 0, 0);
  pthread_key_delete(late_key);
}

static void thread_waves(void) {
  for (int wave = 0; wave < 8; ++wave) {
    pthread_t threads[8];
    ephemeral_arg args[8];
    for (int t = 0; t < 8; ++t) {
      args[t].id = (uint32_t)(wave * 8 + t);
      if (pthread_create(&threads[t], NULL, ephemeral, &args[t]) != 0) {
        fail("pthread_create", (size_t)wave, (size_t)t);
        return;
      }
    }
    for (int t = 0; t < 8; ++t) {
      pthread_join(threads[t], NULL);
      for (int i = 0; i < 16; ++i) {
        if (args[t].out[i] != NULL) { verify(args[t].out[i], "exited thread's block corrupted"); free(args[t].out[i]); }
      }
    }
  }
}

/* fork while the workers run: the child must be able to allocate (numarena's and jemalloc's
 * locks were not left held by threads the child does not have). */
static void fork_children(void) {
  for (int i = 0; i < 6; ++i) {
    pid_t pid = fork();
    if (pid < 0) { fail("fork", (size_t)errno, 0); return; }
    if (pid == 0) {
      uint64_t rng = 99 + (uint64_t)i;
      int bad = 0;
      for (int round = 0; round < 2000; ++round) {
        size_t size = random_size(&rng);
        block* b = malloc(size);
        if (b == NULL || (expect_numarena && !owns(b))) { bad = 1; break; }
        fill(b, size, 7, (uint32_t)round);
        verify(b, "child's block corrupted");
        free(b);
      }
      realloc_growth(8, 1);
      _exit(bad || failures != 0 ? 3 : 0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) { fail("waitpid", (size_t)errno, 0); continue; }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("fork child did not exit 0", (size_t)status, (size_t)i);
    usleep(20000);
  }
}

static long peak_rss_kib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "VmHWM:", 6) == 0) kib = strtol(line + 6, NULL, 10);
  }
  fclose(f);
  return kib;
}

int main(int argc, char** argv) {
  int threads = 4;
  long rss_limit_mib = 0; /* 0: no RSS check */
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--expect-numarena") == 0) expect_numarena = 1;
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rss-limit-mib") == 0 && i + 1 < argc) rss_limit_mib = atol(argv[++i]);
    else { fprintf(stderr, "usage: %s [--expect-numarena] [--threads N] [--rounds N] [--rss-limit-mib N]\n", argv[0]); return 2; }
  }
  if (threads < 1 || threads > 64) threads = 4;
  if (expect_numarena) {
    owns = (int (*)(const void*))dlsym(RTLD_DEFAULT, "numarena_owns");
    if (owns == NULL) {
      fprintf(stderr, "malloc_stress: FAILED numarena_owns not found: not running under numarena\n");
      return 1;
    }
  }

  pthread_t workers[64];
  worker_arg args[64];
  for (int t = 0; t < threads; ++t) {
    args[t].id = (uint32_t)t;
    if (pthread_create(&workers[t], NULL, worker, &args[t]) != 0) { fail("pthread_create", (size_t)t, 0); return 1; }
  }
  fork_children();
  thread_waves();
  late_destructors();
  for (int t = 0; t < threads; ++t) pthread_join(workers[t], NULL);
  for (int i = 0; i < EXCHANGE_SLOTS; ++i) {
    if (exchange[i] != NULL) { verify(exchange[i], "exchange block corrupted"); free(exchange[i]); }
  }

  /* The bound means something only when far more than it went through the heap. */
  long peak = peak_rss_kib();
  if (rss_limit_mib > 0 && (peak < 0 || peak > rss_limit_mib * 1024)) fail("peak RSS (KiB) over the limit", (size_t)peak, (size_t)rss_limit_mib * 1024);
  if (rss_limit_mib > 0 && volume / 4 < (size_t)rss_limit_mib << 20) fail("volume (bytes) not 4x the RSS limit: more --rounds", volume, (size_t)rss_limit_mib << 20);
  printf(
      "malloc_stress: %d workers x %d rounds (%zu MiB allocated), fork, 64 short-lived threads, "
      "late destructors; "
      "peak RSS %ld KiB (limit %ld MiB)%s\n",
      threads, rounds, volume >> 20, peak, rss_limit_mib,
      expect_numarena ? "; every block checked was numarena's" : "");
  if (failures != 0) {
    fprintf(stderr, "malloc_stress: %d failures\n", failures);
    return 1;
  }
  return 0;
}
