/* What a C program sees of its C library's allocator at the edges, printed so that a run
 * under glibc and a run under `numarena run` can be compared line by line
 * (tests/preload/libc_contract_test.py). Built without numarena.
 *
 *   libc_contract edges          prints each edge call's outcome (same under both)
 *   libc_contract double-free N  frees an N-byte block twice in a row, then allocates twice
 *   libc_contract refill         fills memory with 64 KiB blocks until malloc says no (at most
 *                                4 GiB), frees them all, and at once asks for 128 B to 4 KiB:
 *                                exit 0 only when every one of those is given
 *   libc_contract usable         malloc_usable_size of malloc, calloc, memalign and realloc
 *                                blocks of 0 B to 3 MiB, each checked: at least the size
 *                                asked, at most a size class above it, all of it writable,
 *                                the same answer after the block's neighbours were freed, and
 *                                (numarena's blocks) realloc to it keeps the block in place;
 *                                exit 0 when all hold
 *   libc_contract grow           three buffers grown by realloc, in turns, from 1 B to 3 MiB
 *                                by steps of 1/8 (outgrown blocks of one are reused for the
 *                                others), every byte checked after each step; exit 0 when
 *                                none changed
 *   libc_contract move           a written 6 MiB block that cannot grow (a 6 MiB block right
 *                                after it) realloc()ed to 13 MiB, then every byte checked;
 *                                prints "move: faults=N" with N the page faults the realloc
 *                                and a read of the new block's first 6 MiB took (glibc moves
 *                                an mmap()ed block with mremap: none; a copy faults in 1536
 *                                pages), exit 0 when all bytes hold
 *   libc_contract locked-move    the move, then the same under mlockall(MCL_CURRENT) (the
 *                                program's memory locked); prints "locked-move: neighbour
 *                                locked before=1 after=1 moved" (whether the blocker's mapping
 *                                is locked around the second realloc), exit 0 when it stayed
 *                                locked (MREMAP_DONTUNMAP unlocks the whole mapping its source
 *                                lies in); "locked-move: skipped" when mlockall is refused
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

static int (*numarena_owns)(const void*);
static int owned, allocated;

static void note(void* p) {
  if (p == NULL) return;
  ++allocated;
  if (numarena_owns != NULL && numarena_owns(p)) ++owned;
}

static size_t round_pow2(size_t a) {
  size_t r = 1;
  while (r < a) r <<= 1;
  return r;
}

static void show(const char* call, void* p, int err, size_t alignment) {
  if (p == NULL) {
    printf("%s: NULL errno %s\n", call, err == EINVAL ? "EINVAL" : err == ENOMEM ? "ENOMEM" : "other");
    return;
  }
  const size_t want = round_pow2(alignment < 16 ? 16 : alignment);
  printf("%s: memory, aligned to %zu: %s\n", call, want,
         ((uintptr_t)p % want) == 0 ? "yes" : "no");
  note(p);
  free(p);
}

static int edges(void) {
  static const size_t alignments[] = {0, 1, 8, 16, 24, 48, 64, 100, 4096, 12288};
  char call[96];
  for (size_t i = 0; i < sizeof alignments / sizeof alignments[0]; ++i) {
    const size_t a = alignments[i];
    errno = 0;
    void* p = aligned_alloc(a, 100);
    snprintf(call, sizeof call, "aligned_alloc(%zu, 100)", a);
    show(call, p, errno, a);
    errno = 0;
    p = memalign(a, 100);
    snprintf(call, sizeof call, "memalign(%zu, 100)", a);
    show(call, p, errno, a);
    p = NULL;
    const int rc = posix_memalign(&p, a, 100);
    snprintf(call, sizeof call, "posix_memalign(%zu, 100)", a);
    show(call, rc == 0 ? p : NULL, rc, a);
  }
  /* volatile: the compiler would refuse sizes it can see are impossible */
  volatile size_t impossible = SIZE_MAX - 4096, half = SIZE_MAX / 2, count = SIZE_MAX / 8;
  errno = 0;
  void* huge = aligned_alloc(64, impossible);
  show("aligned_alloc(64, SIZE_MAX - 4096)", huge, errno, 64);
  errno = 0;
  huge = malloc(half);
  show("malloc(SIZE_MAX / 2)", huge, errno, 16);
  errno = 0;
  huge = calloc(count, 16);
  show("calloc(SIZE_MAX / 8, 16)", huge, errno, 16);
  fprintf(stderr, "owned by numarena: %d of %d\n", owned, allocated);
  return 0;
}

static int double_free(size_t size) {
  char* p = malloc(size);
  if (p == NULL) return 3;
  memset(p, 1, size);
  char* volatile again = p; /* the mistake under test, hidden from -Wuse-after-free */
  free(p);
  free(again);
  void* a = malloc(size);
  void* b = malloc(size);
  printf("not detected: %p %p%s\n", a, b, a == b ? " (the same block twice)" : "");
  return 0;
}

static int refill(void) {
  enum { kBlock = 64 << 10, kMax = 65536 };
  static void* blocks[kMax];
  int count = 0;
  while (count < kMax) {
    void* p = malloc(kBlock);
    if (p == NULL) break;
    memset(p, 2, kBlock);
    blocks[count++] = p;
  }
  printf("filled %d blocks of 64 KiB (%s)\n", count, count == kMax ? "the 4 GiB cap" : "malloc said no");
  for (int i = 0; i < count; ++i) free(blocks[i]);
  int refused = 0;
  for (size_t size = 128; size <= 4096; size *= 2) {
    for (int i = 0; i < 16; ++i) {
      void* p = malloc(size);
      if (p == NULL) {
        printf("refused: malloc(%zu) right after the frees\n", size);
        ++refused;
        break;
      }
      memset(p, 3, size);
      note(p);
    }
  }
  fprintf(stderr, "owned by numarena: %d of %d\n", owned, allocated);
  return refused == 0 && count < kMax ? 0 : 1;
}

/* Checks the usable size of `p`, asked for `size` bytes at `alignment` (0: malloc's). */
static int check_usable(void* p, size_t size, size_t alignment, const char* how) {
  if (p == NULL) {
    printf("%s(%zu): NULL\n", how, size);
    return 1;
  }
  const size_t usable = malloc_usable_size(p);
  /* jemalloc's classes are at most a quarter of the size apart above 64 B, 16 B below
   * (glibc's smallest chunk holds 24 B); an aligned block may be rounded up to its alignment
   * too. */
  const size_t slack = (size / 4 > 32 ? size / 4 : 32) + alignment;
  if (usable < size || usable > size + slack) {
    printf("%s(%zu): malloc_usable_size %zu\n", how, size, usable);
    return 1;
  }
  memset(p, 0x5a, usable);
  return 0;
}

static int usable(void) {
  int failures = 0;
  enum { kKept = 64 };
  void* kept[kKept] = {0};
  size_t kept_size[kKept] = {0};
  int slot = 0;
  for (size_t size = 0; size <= (3u << 20); size += size < 4200 ? 1 : size < 70000 ? 61 : 40961) {
    void* a = malloc(size);
    void* b = calloc(1, size);
    void* c = memalign(64, size);
    failures += check_usable(a, size, 0, "malloc") + check_usable(b, size, 0, "calloc") +
                check_usable(c, size, 64, "memalign");
    /* realloc to the usable size keeps numarena's block where it is (glibc may move an
     * mmapped chunk) */
    if (a != NULL && numarena_owns != NULL && numarena_owns(a)) {
      const size_t usable_a = malloc_usable_size(a);
      void* same = realloc(a, usable_a);
      if (same != a) {
        printf("realloc(%zu -> its usable %zu) moved the block\n", size, usable_a);
        ++failures;
      }
      a = same;
    }
    note(a), note(b), note(c);
    /* one of them kept a while, so later answers come from blocks whose neighbours were freed */
    free(kept[slot]);
    kept[slot] = b;
    kept_size[slot] = b != NULL ? malloc_usable_size(b) : 0;
    slot = (slot + 1) % kKept;
    free(a);
    free(c);
    for (int i = 0; i < kKept; ++i) {
      if (kept[i] != NULL && malloc_usable_size(kept[i]) != kept_size[i]) {
        printf("a kept block's usable size changed: %zu -> %zu\n", kept_size[i],
               malloc_usable_size(kept[i]));
        ++failures;
        kept_size[i] = malloc_usable_size(kept[i]);
      }
    }
    if (failures > 20) break;
  }
  for (int i = 0; i < kKept; ++i) free(kept[i]);
  fprintf(stderr, "owned by numarena: %d of %d\n", owned, allocated);
  printf("usable: %d failures\n", failures);
  return failures == 0 ? 0 : 1;
}

/* Byte i of buffer k holds (i * 7 + k) & 0xff: checked every `stride` bytes. */
static int check_grown(const unsigned char* p, size_t size, int k, size_t stride) {
  for (size_t i = 0; i < size; i += stride) {
    if (p[i] != (unsigned char)(i * 7 + (size_t)k)) {
      printf("grow: buffer %d byte %zu of %zu is %u\n", k, i, size, p[i]);
      return 1;
    }
  }
  return 0;
}

static long minor_faults(void) {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

/* A 6 MiB block and a 6 MiB block after it, so that the first cannot grow in place: 0, or 1
 * (said as "MODE: malloc failed"). */
static int block_and_blocker(const char* mode, unsigned char** block, unsigned char** blocker) {
  *block = malloc(6u << 20);
  *blocker = malloc(6u << 20);
  if (*block != NULL && *blocker != NULL) return 0;
  printf("%s: malloc failed\n", mode);
  return 1;
}

static int move(void) {
  const size_t old_size = 6u << 20, new_size = 13u << 20;
  unsigned char *block, *blocker;
  if (block_and_blocker("move", &block, &blocker) != 0) return 1;
  note(block);
  for (size_t i = 0; i < old_size; ++i) block[i] = (unsigned char)(i * 13 + (i >> 12));
  memset(blocker, 1, old_size);
  const long before = minor_faults();
  unsigned char* moved = realloc(block, new_size);
  if (moved == NULL) {
    printf("move: realloc failed\n");
    return 1;
  }
  note(moved);
  size_t wrong = 0;
  for (size_t i = 0; i < old_size; ++i) wrong += moved[i] != (unsigned char)(i * 13 + (i >> 12));
  const long faults = minor_faults() - before;
  memset(moved + old_size, 2, new_size - old_size);  /* the rest is writable */
  free(moved);
  free(blocker);
  fprintf(stderr, "owned by numarena: %d of %d\n", owned, allocated);
  printf("move: faults=%ld wrong=%zu %s\n", faults, wrong,
         moved == block ? "grown in place" : "moved");
  return wrong == 0 ? 0 : 1;
}

/* Whether the mapping holding `p` is locked ("lo" in its VmFlags in /proc/self/smaps): 1,
 * 0, or -1 when the file does not say. */
static int mapping_locked(const void* p) {
  FILE* smaps = fopen("/proc/self/smaps", "r");
  if (smaps == NULL) return -1;
  char line[512];
  int inside = 0, locked = -1;
  const uintptr_t at = (uintptr_t)p;
  while (fgets(line, sizeof line, smaps) != NULL) {
    unsigned long begin, end;
    if (sscanf(line, "%lx-%lx ", &begin, &end) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      inside = at >= begin && at < end;
    } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      locked = strstr(line, " lo") != NULL;
      break;
    }
  }
  fclose(smaps);
  return locked;
}

static int locked_move(void) {
  /* A first move while nothing is locked, so that a mover that remembers what it read then
   * would still believe it at the second. */
  if (move() != 0) return 1;
  const size_t old_size = 6u << 20, new_size = 13u << 20;
  unsigned char *block, *blocker;
  if (block_and_blocker("locked-move", &block, &blocker) != 0) return 1;
  memset(block, 3, old_size);
  memset(blocker, 4, old_size);
  if (mlockall(MCL_CURRENT) != 0) {
    printf("locked-move: skipped (mlockall: %s)\n", strerror(errno));
    return 0;
  }
  const int before = mapping_locked(blocker);
  unsigned char* moved = realloc(block, new_size);
  const int after = mapping_locked(blocker);
  munlockall();
  printf("locked-move: neighbour locked before=%d after=%d %s\n", before, after,
         moved == block ? "grown in place" : "moved");
  const int ok = moved != NULL && moved[0] == 3 && moved[old_size - 1] == 3 && before == 1 &&
                 after == 1;
  free(moved);
  free(blocker);
  return ok ? 0 : 1;
}

static int grow(void) {
  enum { kBuffers = 3 };
  unsigned char* buffers[kBuffers] = {0};
  size_t sizes[kBuffers] = {0};
  int failures = 0;
  for (int round = 0; failures == 0; ++round) {
    const int k = round % kBuffers;
    const size_t next = sizes[k] + sizes[k] / 8 + 1 + (size_t)k;
    if (next > (3u << 20)) break;
    unsigned char* grown = realloc(buffers[k], next);
    if (grown == NULL) {
      printf("grow: realloc(%zu) failed\n", next);
      return 1;
    }
    failures += check_grown(grown, sizes[k], k, 1);
    for (size_t i = sizes[k]; i < next; ++i) grown[i] = (unsigned char)(i * 7 + (size_t)k);
    buffers[k] = grown;
    sizes[k] = next;
    for (int other = 0; other < kBuffers; ++other) {
      /* the others (a block freed while in use would be carved for this one) */
      if (other != k) failures += check_grown(buffers[other], sizes[other], other, 61);
    }
  }
  for (int k = 0; k < kBuffers; ++k) {
    note(buffers[k]);
    free(buffers[k]);
  }
  fprintf(stderr, "owned by numarena: %d of %d\n", owned, allocated);
  printf("grow: %d failures\n", failures);
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  numarena_owns = (int (*)(const void*))dlsym(RTLD_DEFAULT, "numarena_owns");
  if (argc >= 2 && strcmp(argv[1], "edges") == 0) return edges();
  if (argc >= 3 && strcmp(argv[1], "double-free") == 0) {
    return double_free((size_t)strtoull(argv[2], NULL, 10));
  }
  if (argc >= 2 && strcmp(argv[1], "refill") == 0) return refill();
  if (argc >= 2 && strcmp(argv[1], "usable") == 0) return usable();
  if (argc >= 2 && strcmp(argv[1], "grow") == 0) return grow();
  if (argc >= 2 && strcmp(argv[1], "move") == 0) return move();
  if (argc >= 2 && strcmp(argv[1], "locked-move") == 0) return locked_move();
  fprintf(stderr, "usage: libc_contract edges | double-free BYTES | refill | usable\n");
  return 2;
}
