/* What a C program sees of its C library's allocator at the edges, printed so that a run
 * under glibc and a run under `numarena run` can be compared line by line
 * (tests/preload/libc_contract_test.py). Built without numarena.
 *
 *   libc_contract edges          prints each edge call's outcome (same under both)
 *   libc_contract double-free N  frees an N-byte block twice in a row, then allocates twice
 *   libc_contract refill         fills memory with 64 KiB blocks until malloc says no (at most
 *                                4 GiB), frees them all, and at once asks for 128 B to 4 KiB:
 *                                exit 0 only when every one of those is given
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char** argv) {
  numarena_owns = (int (*)(const void*))dlsym(RTLD_DEFAULT, "numarena_owns");
  if (argc >= 2 && strcmp(argv[1], "edges") == 0) return edges();
  if (argc >= 3 && strcmp(argv[1], "double-free") == 0) {
    return double_free((size_t)strtoull(argv[2], NULL, 10));
  }
  if (argc >= 2 && strcmp(argv[1], "refill") == 0) return refill();
  fprintf(stderr, "usage: libc_contract edges | double-free BYTES | refill\n");
  return 2;
}
