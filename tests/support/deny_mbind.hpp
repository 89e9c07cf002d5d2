// Runs a function on a thread where some system calls fail with EPERM, as under a
// container's seccomp profile: a filter (SECCOMP_RET_ERRNO) installed on that thread only (no
// TSYNC), inherited by the threads it starts, so the rest of the test process is unaffected.
// Each runner returns false when the filter cannot be installed here (no seccomp in the
// kernel, or a sandbox that refuses it); `body` has not run then.
#pragma once

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <thread>
#include <vector>

namespace numarena::testing {

// The filter's last instructions: allow, or refuse with EPERM.
inline constexpr sock_filter kAllow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
inline constexpr sock_filter kRefuse =
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA));

// Installs `checks` behind a prologue that allows every call of another architecture and
// leaves the system call number in the accumulator, then runs `body` on a new thread.
inline bool RunUnderSeccomp(std::initializer_list<sock_filter> checks,
                            const std::function<void()>& body) {
  std::vector<sock_filter> filter = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      kAllow,
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
  };
  filter.insert(filter.end(), checks);
  bool installed = false;
  std::thread worker([&] {
    sock_fprog program = {static_cast<unsigned short>(filter.size()), filter.data()};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return;
    if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &program) != 0) return;
    installed = true;
    body();
  });
  worker.join();
  return installed;
}

// mbind refused, everything else allowed.
inline bool RunWithMbindRefused(const std::function<void()>& body) {
  return RunUnderSeccomp({BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mbind, 0, 1), kRefuse, kAllow},
                         body);
}

}  // namespace numarena::testing
