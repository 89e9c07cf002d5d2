// operator new/delete of a C++ program that knows nothing of numarena (built without it), run
// under `numarena run` (tests/CMakeLists.txt): every form of new gives numarena memory
// (numarena_owns, found with dlsym as the program cannot link it), aligned new is aligned,
// delete of each form works, a request no heap can hold throws std::bad_alloc and the nothrow
// forms return nullptr, and the standard library's containers run on it.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <new>
#include <string>
#include <vector>

namespace {

int failures = 0;
int (*owns)(const void*) = nullptr;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "new_delete: FAILED %s\n", what);
    ++failures;
  }
}

struct alignas(256) Wide {
  unsigned char bytes[1000];
};

}  // namespace

int main() {
  owns = reinterpret_cast<int (*)(const void*)>(dlsym(RTLD_DEFAULT, "numarena_owns"));
  if (owns == nullptr) {
    std::fprintf(stderr,
                 "new_delete: FAILED numarena_owns not found: not running under numarena\n");
    return 1;
  }
  int* one = new int(7);
  Check(owns(one) == 1, "new int is numarena's");
  delete one;
  int* many = new int[1000]();
  Check(owns(many) == 1 && many[999] == 0, "new int[] is numarena's and value-initialised");
  delete[] many;
  Wide* wide = new Wide;
  Check(owns(wide) == 1, "aligned new is numarena's");
  Check(reinterpret_cast<std::uintptr_t>(wide) % 256 == 0, "aligned new is 256-byte aligned");
  delete wide;
  Wide* wides = new Wide[3];
  Check(owns(wides) == 1 && reinterpret_cast<std::uintptr_t>(wides) % 256 == 0,
        "aligned new[] is numarena's and aligned");
  delete[] wides;
  void* raw = ::operator new (100, std::align_val_t{4096}, std::nothrow);
  Check(raw != nullptr && owns(raw) == 1 && reinterpret_cast<std::uintptr_t>(raw) % 4096 == 0,
        "nothrow aligned new");
  ::operator delete (raw, 100, std::align_val_t{4096});
  void* sized = ::operator new(48);
  ::operator delete(sized, 48);

  // Far more than any node holds: numarena refuses it, so new throws and nothrow gives null.
  const std::size_t absurd = std::size_t{1} << 62;
  bool threw = false;
  try {
    void* p = ::operator new(absurd);
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  Check(threw, "new of 4 EiB throws std::bad_alloc");
  Check(::operator new(absurd, std::nothrow) == nullptr, "nothrow new of 4 EiB is nullptr");

  // The new_handler this program sets (through its own libstdc++) is the one operator new
  // calls, until it uninstalls itself; then new throws.
  static int handler_calls = 0;
  std::set_new_handler([] {
    if (++handler_calls == 3) std::set_new_handler(nullptr);
  });
  threw = false;
  try {
    void* p = ::operator new(absurd);
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  Check(threw && handler_calls == 3,
        "new of 4 EiB calls the program's new_handler until it is uninstalled, then throws");
  Check(::operator new[](absurd, std::align_val_t{64}, std::nothrow) == nullptr,
        "nothrow aligned new[] of 4 EiB is nullptr");

  std::map<int, std::string> table;
  for (int i = 0; i < 20000; ++i) table[i] = std::string(static_cast<std::size_t>(i % 300), 'x');
  std::size_t total = 0;
  for (const auto& [key, value] : table) total += value.size();
  Check(total == 20000 / 300 * (299 * 300 / 2) + (20000 % 300) * (20000 % 300 - 1) / 2,
        "a std::map of strings holds what was put in");
  Check(owns(&table.begin()->second) == 1, "std::map nodes are numarena's");
  std::vector<double> grow;
  for (int i = 0; i < 1000000; ++i) grow.push_back(i);
  Check(owns(grow.data()) == 1 && grow[999999] == 999999.0, "a growing std::vector");

  if (failures != 0) return 1;
  std::printf("new_delete: every form of new/delete on numarena\n");
  return 0;
}
