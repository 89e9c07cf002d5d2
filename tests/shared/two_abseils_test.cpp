// A program with an Abseil of its own (Debian's shared libabsl_*.so, linked the usual way)
// that loads libnumarena.so, which carries another Abseil inside it, hidden. Run as is, and
// under LD_PRELOAD=libnumarena_preload.so (a third, hidden copy, now also the malloc): the two
// (three) copies must not meet.
//
//   two_abseils_test PATH/libnumarena.so
//
// Checks: the program's Abseil functions are the ones of Debian's libraries (a copy exported
// by a numarena library would win the dynamic linker's lookup and take their place, mixing
// two copies' state); both copies work at once from several threads (the program's Mutex,
// Status, flat_hash_map and StrFormat beside numarena calls that use its Mutex, Status and
// string formatting: allocations, an error, a metrics scrape).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "numarena/numarena.h"

namespace {

int failures = 0;
absl::Mutex failures_mutex;

void Fail(const std::string& what) {
  absl::MutexLock lock(&failures_mutex);
  std::fprintf(stderr, "two_abseils_test: %s\n", what.c_str());
  ++failures;
}

// The file that defines the function the program calls through `address`.
std::string DefiningFile(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "(unknown)";
  return info.dli_fname;
}

struct Api {
  numarena_arena* (*arena_for_policy)(const char*);
  void* (*malloc_)(numarena_arena*, size_t);
  void (*free_)(void*);
  const char* (*last_error_message)();
  size_t (*metrics_text)(const numarena_arena* const*, size_t, const numarena_budget*, char*,
                         size_t);
};

template <typename F>
void Need(void* handle, const char* name, F* out) {
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    std::fprintf(stderr, "two_abseils_test: no %s: %s\n", name, dlerror());
    std::exit(1);
  }
  std::memcpy(out, &symbol, sizeof symbol);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: two_abseils_test PATH/libnumarena.so\n");
    return 2;
  }
  void* handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "two_abseils_test: dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  Api api{};
  Need(handle, "numarena_arena_for_policy", &api.arena_for_policy);
  Need(handle, "numarena_malloc", &api.malloc_);
  Need(handle, "numarena_free", &api.free_);
  Need(handle, "numarena_last_error_message", &api.last_error_message);
  Need(handle, "numarena_metrics_text", &api.metrics_text);

  // Where the program's Abseil comes from, after libnumarena.so (and under LD_PRELOAD, the
  // preload library) joined the process.
  const std::pair<const void*, const char*> functions[] = {
      {reinterpret_cast<const void*>(&absl::StatusCodeToString), "libabsl_status"},
      {reinterpret_cast<const void*>(&absl::SetMutexDeadlockDetectionMode),
       "libabsl_synchronization"},
  };
  for (const auto& [address, library] : functions) {
    const std::string file = DefiningFile(address);
    if (file.find(library) == std::string::npos) {
      Fail(absl::StrFormat("the program's Abseil function at %p comes from %s, not %s", address,
                           file, library));
    }
  }

  numarena_arena* arena = api.arena_for_policy("local");
  if (arena == nullptr) {
    Fail(std::string("numarena_arena_for_policy(local): ") + api.last_error_message());
    return 1;
  }

  absl::Mutex map_mutex;
  absl::flat_hash_map<int, std::string> seen;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        // The program's copy.
        const absl::Status status = absl::InvalidArgumentError(absl::StrFormat("t%d i%d", t, i));
        const std::string text = status.ToString();
        if (text != absl::StrFormat("INVALID_ARGUMENT: t%d i%d", t, i)) {
          Fail("the program's Status prints " + text);
        }
        {
          absl::MutexLock lock(&map_mutex);
          seen[t * 1000 + i] = text;
        }
        // numarena's copy: allocations, an error message it formats, now and then a scrape.
        void* p = api.malloc_(arena, 64 + static_cast<size_t>(i) * 8);
        if (p == nullptr) Fail(std::string("numarena_malloc: ") + api.last_error_message());
        std::memset(p, t, 64);
        api.free_(p);
        if (api.arena_for_policy("bind(") != nullptr) Fail("bind( was accepted");
        const std::string message = api.last_error_message();
        if (message.find("bind(") == std::string::npos) {
          Fail("numarena's error message does not name the policy: " + message);
        }
        if (i % 100 == 0) {
          char buffer[1 << 16];
          if (api.metrics_text(&arena, 1, nullptr, buffer, sizeof buffer) == 0) {
            Fail(std::string("numarena_metrics_text: ") + api.last_error_message());
          } else if (std::strstr(buffer, "numarena_build_info") == nullptr) {
            Fail("numarena_metrics_text has no numarena_build_info");
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (seen.size() != 4 * 500) Fail(absl::StrFormat("the map holds %d entries", seen.size()));

  if (failures != 0) return 1;
  std::printf("two_abseils_test: the program's Abseil and numarena's hidden one ran side by side "
              "in 4 threads%s\n",
              std::getenv("LD_PRELOAD") != nullptr ? " (under LD_PRELOAD)" : "");
  return 0;
}
