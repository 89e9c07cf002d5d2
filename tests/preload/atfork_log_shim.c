/* A test shim, preloaded beside numarena: it logs every pthread_atfork registration of the
 * process (pthread_atfork is libc_nonshared's wrapper around __register_atfork, which this
 * defines) and forwards it to the C library. fork_handler_order_test.py reads the log.
 *
 * Each registration appends a line "<index> <object path> <offset of prepare in it>" (offset 0
 * when prepare is null) to the file named by ATFORK_LOG. It writes with open/write only:
 * registrations happen inside allocator initialization, where malloc may not be called.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*register_atfork_fn)(void (*)(void), void (*)(void), void (*)(void), void*);

static int registrations;

int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void),
                      void* dso_handle) {
  register_atfork_fn real =
      (register_atfork_fn)dlvsym(RTLD_NEXT, "__register_atfork", "GLIBC_2.3.2");
  if (real == NULL) abort();
  const char* log = getenv("ATFORK_LOG");
  if (log != NULL) {
    Dl_info info = {0};
    const void* where = prepare != NULL ? (const void*)prepare : (const void*)child;
    const char* object = "?";
    uintptr_t offset = 0;
    if (where != NULL && dladdr(where, &info) != 0 && info.dli_fname != NULL) {
      object = info.dli_fname;
      if (prepare != NULL) offset = (uintptr_t)prepare - (uintptr_t)info.dli_fbase;
    }
    char line[4096];
    int length = snprintf(line, sizeof line, "%d %s %#lx\n", registrations++, object,
                          (unsigned long)offset);
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0 && length > 0) {
      ssize_t ignored = write(fd, line, (size_t)length < sizeof line ? (size_t)length : sizeof line);
      (void)ignored;
    }
    if (fd >= 0) close(fd);
  }
  return real(prepare, parent, child, dso_handle);
}
