/* A program that knows nothing of numarena (plain C, libc and libpthread only) and reports
 * where the kernel put its heap pages. tests/lab/preload_lab.cpp runs it under
 * `numarena run` in the NUMA lab and checks the numbers.
 *
 *   heap_probe place            malloc'd blocks (one 32 MiB, 2000 x 3000 bytes), an 8 MiB
 *                               calloc and a 4 MiB posix_memalign, all written, then one line
 *                               "pages=T node0=C0 node1=C1 ... errors=E owned=O" (O: 1 when
 *                               numarena_owns(), found with dlsym, says every block is
 *                               numarena's; 0 when it is missing or says no)
 *   heap_probe local N:CPU ...  per pair a thread pinned to CPU allocates and writes 16 MiB,
 *                               and 256 x 3000 bytes after it filled its cache of small
 *                               objects on the next pair's CPU (so a Local heap that followed
 *                               the thread's earlier CPU would show), and reports
 *                               "thread node=N pages=T on_node=C errors=E"
 *   heap_probe migrate N:CPU M:CPU
 *                               one thread, pinned to the first CPU, allocates and writes
 *                               blocks of 3000 bytes, 64 KiB and 16 MiB and keeps them; then it
 *                               moves itself to the second CPU (sched_setaffinity) and does it
 *                               again, then back to the first: per phase a line
 *                               "phase=P node=N pages=T on_node=C errors=E" (the pages of that
 *                               phase's blocks, asked after all three phases)
 *   heap_probe exhaust MIB      mallocs and writes MIB-sized blocks until malloc returns NULL,
 *                               then "refused after=A MiB errno=ENOMEM" (or errno=<number>) and
 *                               exit 0; exit 1 if nothing was refused after 64 GiB
 *   heap_probe refill KIB       mallocs and writes KIB-sized blocks until malloc returns NULL,
 *                               frees them all and at once fills again the same way, frees
 *                               those, then asks for 16 blocks of each of 128 B to 4 KiB:
 *                               "refill first=F second=S small_refused=R" (exit 1 if 262,144
 *                               blocks were never refused)
 *
 * Pages are asked of the kernel with move_pages(2) with no target nodes: per page, the node it
 * is on, or a negative errno (not present, ...), which counts in errors.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_NODES 64

typedef struct counts {
  long pages;
  long errors;
  long on[MAX_NODES];
} counts;

/* Adds the node of every page of [p, p+len) to `c`. */
static int count_pages(const void* p, size_t len, counts* c) {
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t first = (uintptr_t)p & ~(page - 1);
  uintptr_t end = ((uintptr_t)p + len + page - 1) & ~(page - 1);
  size_t n = (end - first) / page;
  void** pages = calloc(n, sizeof(void*));
  int* status = calloc(n, sizeof(int));
  if (pages == NULL || status == NULL) return -1;
  for (size_t i = 0; i < n; ++i) pages[i] = (void*)(first + i * page);
  if (syscall(SYS_move_pages, 0, (unsigned long)n, pages, NULL, status, 0) != 0) {
    perror("heap_probe: move_pages");
    return -1;
  }
  for (size_t i = 0; i < n; ++i) {
    c->pages++;
    if (status[i] >= 0 && status[i] < MAX_NODES) c->on[status[i]]++;
    else c->errors++;
  }
  free(pages);
  free(status);
  return 0;
}

static int (*owns)(const void*);

static int place(void) {
  counts c;
  memset(&c, 0, sizeof c);
  int all_owned = owns != NULL;
  const size_t big = (size_t)32 << 20;
  char* large = malloc(big);
  if (large == NULL) { perror("heap_probe: malloc 32 MiB"); return 1; }
  memset(large, 1, big);
  enum { SMALL = 2000 };
  static char* small[SMALL];
  for (int i = 0; i < SMALL; ++i) {
    small[i] = malloc(3000);
    if (small[i] == NULL) { perror("heap_probe: malloc 3000"); return 1; }
    memset(small[i], 2, 3000);
  }
  char* zeroed = calloc((size_t)8 << 20, 1);
  void* aligned = NULL;
  if (zeroed == NULL || posix_memalign(&aligned, 4096, (size_t)4 << 20) != 0) {
    perror("heap_probe: calloc/posix_memalign");
    return 1;
  }
  memset(zeroed, 3, (size_t)8 << 20);
  memset(aligned, 4, (size_t)4 << 20);
  if (count_pages(large, big, &c) != 0 || count_pages(zeroed, (size_t)8 << 20, &c) != 0 ||
      count_pages(aligned, (size_t)4 << 20, &c) != 0) {
    return 1;
  }
  for (int i = 0; i < SMALL; ++i) {
    if (count_pages(small[i], 3000, &c) != 0) return 1;
    if (owns != NULL && !owns(small[i])) all_owned = 0;
  }
  if (owns != NULL && (!owns(large) || !owns(zeroed) || !owns(aligned))) all_owned = 0;
  printf("pages=%ld", c.pages);
  for (int n = 0; n < MAX_NODES; ++n) {
    if (c.on[n] != 0) printf(" node%d=%ld", n, c.on[n]);
  }
  printf(" errors=%ld owned=%d\n", c.errors, all_owned);
  return 0;
}

typedef struct local_arg {
  int node;
  int cpu;
  int other_cpu; /* the next pair's CPU (its own when alone) */
  int failed;
  counts c;
} local_arg;

static int pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) { perror("heap_probe: sched_setaffinity"); return -1; }
  return 0;
}

#define SMALL_COUNT 256
#define SMALL_BYTES 3000

static void* local_thread(void* raw) {
  local_arg* arg = raw;
  void* small[SMALL_COUNT];
  /* Small objects allocated and freed on the other CPU's node stay in this thread's cache for
   * that node's heap; back on its own CPU, the thread's next ones must come from its node. */
  if (pin(arg->other_cpu) != 0) { arg->failed = 1; return NULL; }
  for (int i = 0; i < SMALL_COUNT; ++i) small[i] = malloc(SMALL_BYTES);
  for (int i = 0; i < SMALL_COUNT; ++i) free(small[i]);
  if (pin(arg->cpu) != 0) { arg->failed = 1; return NULL; }
  for (int i = 0; i < SMALL_COUNT; ++i) {
    small[i] = malloc(SMALL_BYTES);
    if (small[i] == NULL) { perror("heap_probe: malloc small"); arg->failed = 1; return NULL; }
    memset(small[i], 4, SMALL_BYTES);
  }
  for (int i = 0; i < SMALL_COUNT; ++i) {
    if (count_pages(small[i], SMALL_BYTES, &arg->c) != 0) arg->failed = 1;
    if (owns != NULL && !owns(small[i])) arg->failed = 1;
  }
  for (int i = 0; i < SMALL_COUNT; ++i) free(small[i]);
  const size_t size = (size_t)16 << 20;
  char* p = malloc(size);
  if (p == NULL) { perror("heap_probe: malloc 16 MiB"); arg->failed = 1; return NULL; }
  memset(p, 5, size);
  if (count_pages(p, size, &arg->c) != 0) arg->failed = 1;
  if (owns != NULL && !owns(p)) arg->failed = 1;
  free(p);
  return NULL;
}

static int local(int argc, char** argv) {
  local_arg args[MAX_NODES];
  int n = 0;
  for (int i = 0; i < argc && n < MAX_NODES; ++i, ++n) {
    memset(&args[n], 0, sizeof args[n]);
    if (sscanf(argv[i], "%d:%d", &args[n].node, &args[n].cpu) != 2) {
      fprintf(stderr, "heap_probe: '%s' is not NODE:CPU\n", argv[i]);
      return 2;
    }
  }
  /* One after another: each thread alone on its CPU, so the pages cannot be another's. */
  for (int i = 0; i < n; ++i) {
    pthread_t thread;
    args[i].other_cpu = args[(i + 1) % n].cpu;
    if (pthread_create(&thread, NULL, local_thread, &args[i]) != 0) return 1;
    pthread_join(thread, NULL);
    if (args[i].failed) return 1;
    printf("thread node=%d pages=%ld on_node=%ld errors=%ld\n", args[i].node, args[i].c.pages,
           args[i].node < MAX_NODES ? args[i].c.on[args[i].node] : 0, args[i].c.errors);
  }
  return 0;
}

#define MIGRATE_PHASES 3
#define MIGRATE_SMALL 256

typedef struct phase_blocks {
  void* small[MIGRATE_SMALL];
  void* medium[16];
  void* large;
} phase_blocks;

static int allocate_phase(phase_blocks* b) {
  for (int i = 0; i < MIGRATE_SMALL; ++i) {
    if ((b->small[i] = malloc(SMALL_BYTES)) == NULL) return -1;
    memset(b->small[i], 9, SMALL_BYTES);
  }
  for (int i = 0; i < 16; ++i) {
    if ((b->medium[i] = malloc(64 << 10)) == NULL) return -1;
    memset(b->medium[i], 10, 64 << 10);
  }
  if ((b->large = malloc((size_t)16 << 20)) == NULL) return -1;
  memset(b->large, 11, (size_t)16 << 20);
  return 0;
}

static int count_phase(const phase_blocks* b, counts* c) {
  for (int i = 0; i < MIGRATE_SMALL; ++i) {
    if (count_pages(b->small[i], SMALL_BYTES, c) != 0) return -1;
  }
  for (int i = 0; i < 16; ++i) {
    if (count_pages(b->medium[i], 64 << 10, c) != 0) return -1;
  }
  return count_pages(b->large, (size_t)16 << 20, c);
}

/* One thread that changes CPU between phases, keeping every block: a Local heap must follow
 * the thread at once, and the earlier phases' pages must stay where they were. */
static int migrate(int argc, char** argv) {
  int node[2], cpu[2];
  if (argc != 2 || sscanf(argv[0], "%d:%d", &node[0], &cpu[0]) != 2 ||
      sscanf(argv[1], "%d:%d", &node[1], &cpu[1]) != 2) {
    fprintf(stderr, "heap_probe: migrate needs two NODE:CPU pairs\n");
    return 2;
  }
  static phase_blocks blocks[MIGRATE_PHASES];
  for (int phase = 0; phase < MIGRATE_PHASES; ++phase) {
    if (pin(cpu[phase % 2]) != 0) return 1;
    if (allocate_phase(&blocks[phase]) != 0) {
      perror("heap_probe: malloc");
      return 1;
    }
  }
  for (int phase = 0; phase < MIGRATE_PHASES; ++phase) {
    counts c;
    memset(&c, 0, sizeof c);
    if (count_phase(&blocks[phase], &c) != 0) return 1;
    const int n = node[phase % 2];
    printf("phase=%d node=%d pages=%ld on_node=%ld errors=%ld\n", phase, n, c.pages,
           n >= 0 && n < MAX_NODES ? c.on[n] : 0, c.errors);
  }
  return 0;
}

static int exhaust(size_t mib) {
  size_t total = 0;
  while (total < ((size_t)64 << 10)) {
    errno = 0;
    char* p = malloc(mib << 20);
    if (p == NULL) {
      if (errno == ENOMEM) printf("refused after=%zu MiB errno=ENOMEM\n", total);
      else printf("refused after=%zu MiB errno=%d\n", total, errno);
      return 0;
    }
    memset(p, 6, mib << 20); /* the pages are really taken: an overcommitted node would OOM */
    total += mib;
  }
  printf("never refused after=%zu MiB\n", total);
  return 1;
}

/* Fills with `kib`-sized written blocks until malloc says no; returns how many it got, and
 * frees them (all, or none when `keep`). */
static long fill(size_t kib, void** blocks, long max, int keep) {
  long count = 0;
  while (count < max) {
    char* p = malloc(kib << 10);
    if (p == NULL) break;
    memset(p, 7, kib << 10);
    blocks[count++] = p;
  }
  if (!keep) {
    for (long i = 0; i < count; ++i) free(blocks[i]);
  }
  return count;
}

static int refill(size_t kib) {
  const long max = 1L << 18; /* 262,144 blocks: 4 GiB of 16 KiB ones */
  void** blocks = calloc((size_t)max, sizeof(void*));
  if (blocks == NULL) return 2;
  const long first = fill(kib, blocks, max, 0);
  const long second = fill(kib, blocks, max, 0);
  int small_refused = 0;
  for (size_t size = 128; size <= 4096; size *= 2) {
    for (int i = 0; i < 16; ++i) {
      void* p = malloc(size);
      if (p == NULL) {
        ++small_refused;
        continue;
      }
      memset(p, 8, size);
      free(p);
    }
  }
  printf("refill first=%ld second=%ld small_refused=%d\n", first, second, small_refused);
  free(blocks);
  return first < max ? 0 : 1;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  owns = (int (*)(const void*))dlsym(RTLD_DEFAULT, "numarena_owns");
  if (argc >= 2 && strcmp(argv[1], "place") == 0) return place();
  if (argc >= 2 && strcmp(argv[1], "local") == 0) return local(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "migrate") == 0) return migrate(argc - 2, argv + 2);
  if (argc == 3 && strcmp(argv[1], "exhaust") == 0) return exhaust((size_t)atol(argv[2]));
  if (argc == 3 && strcmp(argv[1], "refill") == 0) return refill((size_t)atol(argv[2]));
  fprintf(stderr, "usage: heap_probe place | local NODE:CPU... | migrate N:CPU M:CPU | "
                  "exhaust MIB | refill KIB\n");
  return 2;
}
