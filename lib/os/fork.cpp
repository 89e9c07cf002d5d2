// numarena's pthread_atfork handler (see fork.hpp).
#include "os/fork.hpp"

#include <jemalloc/jemalloc.h>
#include <pthread.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace numarena::os {
namespace {

constexpr int kStages = static_cast<int>(ForkStage::kCount);

std::atomic<const ForkStageHandlers*> g_stages[kStages];

// The stages the calling thread's prepare saw; its parent or child step (on the same thread,
// or the same thread's copy in the child) runs exactly those. Per thread because two threads
// may fork at once (the second one's prepare waits for the first one's locks).
thread_local const ForkStageHandlers* t_prepared[kStages];

void Prepare() {
  for (int i = 0; i < kStages; ++i) {
    const ForkStageHandlers* stage = g_stages[i].load(std::memory_order_acquire);
    t_prepared[i] = stage;
    if (stage != nullptr && stage->prepare != nullptr) stage->prepare();
  }
}

void Parent() {
  for (int i = kStages - 1; i >= 0; --i) {
    const ForkStageHandlers* stage = t_prepared[i];
    t_prepared[i] = nullptr;
    if (stage != nullptr && stage->parent != nullptr) stage->parent();
  }
}

void Child() {
  for (int i = kStages - 1; i >= 0; --i) {
    const ForkStageHandlers* stage = t_prepared[i];
    t_prepared[i] = nullptr;
    if (stage != nullptr && stage->child != nullptr) stage->child();
  }
}

void Install() {
  // jemalloc registers its handler when it initializes; any call that needs it initialized
  // does. Ours must come after it (see fork.hpp), whether or not jemalloc is the process's
  // malloc (under ASan and TSan it is not, and initializes on first use; the preload and
  // libnumarena.so run their constructors before their own jemalloc's). The call must be one
  // the compiler keeps: jemalloc declares nallocx pure, and a pure call whose result is unused
  // is deleted. mallctl is not, and initializes jemalloc before it reads anything.
  const char* version = nullptr;
  std::size_t length = sizeof(version);
  if (int err = mallctl("version", &version, &length, nullptr, 0); err != 0) {
    std::fprintf(stderr,
                 "numarena: jemalloc did not initialize (%s); a child of fork() may hang on "
                 "numarena's or jemalloc's locks\n",
                 std::strerror(err));
  }
  if (int err = pthread_atfork(Prepare, Parent, Child); err != 0) {
    std::fprintf(stderr,
                 "numarena: pthread_atfork failed (%s); a child of fork() may hang on "
                 "numarena's locks\n",
                 std::strerror(err));
  }
}

}  // namespace

void SetForkStage(ForkStage stage, const ForkStageHandlers* handlers) {
  g_stages[static_cast<int>(stage)].store(handlers, std::memory_order_release);
}

const ForkStageHandlers* ForkStageOf(ForkStage stage) {
  return g_stages[static_cast<int>(stage)].load(std::memory_order_acquire);
}

void InstallForkHandlers() {
  // pthread_once underneath: unlike a function-local static's guard, glibc's pthread_once
  // recovers in a child whose fork() interrupted another thread's call.
  static std::once_flag once;
  std::call_once(once, Install);
}

}  // namespace numarena::os
