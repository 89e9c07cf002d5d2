/* A program that knows nothing of numarena: it allocates and writes a burst (64 MiB of 8 KiB
 * blocks and 64 MiB of 4 MiB blocks), frees it all, makes no further allocation call and
 * watches its own resident set (VmRSS) while it idles. tests/preload/idle_return_test.py runs
 * it under `numarena run`.
 *
 *   idle_return returned SECONDS   exit 0 as soon as VmRSS is back within 24 MiB of what it
 *                                  was before the burst, 1 if SECONDS pass first
 *   idle_return kept SECONDS       idles SECONDS, then exit 0 if VmRSS still holds at least
 *                                  half of the burst, 1 if not
 *   idle_return trimmed 0          calls malloc_trim(0) right after the frees: exit 0 if it
 *                                  returned 1 and VmRSS is back within 24 MiB at once
 * Both print "before=B peak=P now=N" (KiB).
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long VmRssKib(void) {
  char line[256];
  long kib = -1;
  FILE* status = fopen("/proc/self/status", "r");
  if (status == NULL) return -1;
  while (fgets(line, sizeof line, status) != NULL) {
    if (strncmp(line, "VmRSS:", 6) == 0) kib = strtol(line + 6, NULL, 10);
  }
  fclose(status);
  return kib;
}

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

enum { kSmall = 8192, kSmallCount = 8192, kLarge = 4 << 20, kLargeCount = 16 };
static void* blocks[kSmallCount + kLargeCount];

int main(int argc, char** argv) {
  if (argc != 3 || (strcmp(argv[1], "returned") != 0 && strcmp(argv[1], "kept") != 0 &&
                    strcmp(argv[1], "trimmed") != 0)) {
    fprintf(stderr, "usage: idle_return returned|kept|trimmed SECONDS\n");
    return 2;
  }
  const int want_returned = strcmp(argv[1], "returned") == 0;
  const double seconds = atof(argv[2]);
  /* The reading itself (stdio's buffer) before the burst, so it is not counted in it. */
  const long before = VmRssKib();
  int n = 0;
  for (int i = 0; i < kSmallCount + kLargeCount; ++i) {
    const size_t size = i < kSmallCount ? kSmall : kLarge;
    blocks[n] = malloc(size);
    if (blocks[n] == NULL) return 3;
    memset(blocks[n], 0x5a, size);
    ++n;
  }
  const long peak = VmRssKib();
  for (int i = 0; i < n; ++i) free(blocks[i]);
  const long burst = peak - before;
  if (strcmp(argv[1], "trimmed") == 0) {
    const int released = malloc_trim(0);
    const long now = VmRssKib();
    printf("before=%ld peak=%ld now=%ld released=%d\n", before, peak, now, released);
    return released == 1 && now - before <= 24 * 1024 ? 0 : 1;
  }
  const double end = Now() + seconds;
  long now = VmRssKib();
  while (Now() < end) {
    if (want_returned && now - before <= 24 * 1024) break;
    usleep(50 * 1000);
    now = VmRssKib();
  }
  printf("before=%ld peak=%ld now=%ld\n", before, peak, now);
  if (want_returned) return now - before <= 24 * 1024 ? 0 : 1;
  return now - before >= burst / 2 ? 0 : 1;
}
