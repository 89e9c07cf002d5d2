/* Runs one program and reports what it cost, for bench/override_bench.py:
 *
 *   override_spawn RESULT_FILE PROGRAM [ARGS...]
 *
 * forks, execs PROGRAM (searched in PATH) in the child, waits for it with wait4 and writes
 * "wall_ns=W maxrss_kib=M utime_us=U stime_us=S status=X" to RESULT_FILE (X: the exit status,
 * or 128 + the signal that killed it). Exit status: 0 when the result was written, 2 on bad
 * arguments, 3 when fork or the result file failed; an exec failure is the child's status 127.
 *
 * Why a program of its own: ru_maxrss counts the largest resident set the process had, and a
 * child forked from the harness (a Python interpreter, ~15 MiB) starts out with the parent's,
 * which would hide the difference of a 1 MiB program. This one is linked statically and touches
 * almost nothing, so what wait4 reports is the program's own peak.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: override_spawn RESULT_FILE PROGRAM [ARGS...]\n");
    return 2;
  }
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  pid_t child = fork();
  if (child < 0) {
    fprintf(stderr, "override_spawn: fork: %s\n", strerror(errno));
    return 3;
  }
  if (child == 0) {
    execvp(argv[2], argv + 2);
    fprintf(stderr, "override_spawn: cannot run '%s': %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  int status = 0;
  struct rusage usage;
  while (wait4(child, &status, 0, &usage) < 0) {
    if (errno != EINTR) {
      fprintf(stderr, "override_spawn: wait4: %s\n", strerror(errno));
      return 3;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  const long long wall_ns =
      (long long)(end.tv_sec - start.tv_sec) * 1000000000LL + (end.tv_nsec - start.tv_nsec);
  const int exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  FILE* result = fopen(argv[1], "w");
  if (result == NULL) {
    fprintf(stderr, "override_spawn: cannot write '%s': %s\n", argv[1], strerror(errno));
    return 3;
  }
  fprintf(result, "wall_ns=%lld maxrss_kib=%ld utime_us=%lld stime_us=%lld status=%d\n", wall_ns,
          usage.ru_maxrss, (long long)usage.ru_utime.tv_sec * 1000000 + usage.ru_utime.tv_usec,
          (long long)usage.ru_stime.tv_sec * 1000000 + usage.ru_stime.tv_usec, exit_status);
  return fclose(result) == 0 ? 0 : 3;
}
