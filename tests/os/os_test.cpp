// The OS layer (lib/os/os.hpp) on the host: every call's contract that a one-node machine
// can show. Errors keep errno (name and number) and name what was asked, node masks are sized
// for ids past the first 64-bit word, bad node and CPU ids are InvalidArgument naming the id,
// the memory calls reserve, commit, purge and populate exactly the pages they say, and file
// reads refuse at once what is not a regular file (a link to /dev/zero, a FIFO, a socket, a
// directory, a bad link) and stop at a size limit.
// Placement across nodes is proven in the NUMA lab (tests/lab/placement_lab.cpp).
#include "os/current_node.hpp"
#include "os/os.hpp"

#include <fcntl.h>
#include <numaif.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "hostile_files.hpp"
#include "numarena/page_nodes.hpp"

namespace numarena {
namespace {

const std::size_t kPage = os::PageSize();

bool Contains(const Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

// The node this host's memory is on (the lab machines have more; the host has one).
int HostNode() {
  int node = os::CurrentCpuAndNode().node;
  REQUIRE(node >= 0);
  return node;
}

// An anonymous mapping owned by a test.
struct Mapping {
  explicit Mapping(std::size_t pages, std::size_t alignment = 0) : bytes(pages * kPage) {
    auto p = os::MapAnonymous(bytes, alignment);
    REQUIRE(p.ok());
    data = static_cast<unsigned char*>(*p);
  }
  ~Mapping() { os::Unmap(data, bytes); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  unsigned char* page(std::size_t i) const { return data + i * kPage; }

  std::size_t bytes;
  unsigned char* data = nullptr;
};

// Online node ids from /sys/devices/system/node/online ("0", "0-3,5").
std::vector<int> OnlineNodes() {
  auto text = os::ReadFile("/sys/devices/system/node/online");
  REQUIRE(text.ok());
  std::vector<int> ids;
  for (const char* p = text->c_str(); *p != '\0';) {
    char* end = nullptr;
    long first = std::strtol(p, &end, 10);
    long last = first;
    if (*end == '-') last = std::strtol(end + 1, &end, 10);
    for (long id = first; id <= last; ++id) ids.push_back(static_cast<int>(id));
    p = (*end == ',') ? end + 1 : end + std::strlen(end);
  }
  REQUIRE_FALSE(ids.empty());
  return ids;
}

bool IsOnline(int node) {
  auto online = OnlineNodes();
  return std::find(online.begin(), online.end(), node) != online.end();
}

std::size_t Resident(const void* p, std::size_t bytes) {
  auto counts = page_nodes(p, bytes);
  REQUIRE(counts.ok());
  return counts->resident();
}

TEST_CASE("file errors are NotFound naming the path and keeping errno") {
  const std::string missing = "/proc/numarena-does-not-exist";
  auto file = os::ReadFile(missing);
  REQUIRE_FALSE(file.ok());
  CHECK(file.status().code() == absl::StatusCode::kNotFound);
  CHECK(Contains(file.status(), missing));
  CHECK(Contains(file.status(), "errno 2 ENOENT"));

  auto dir = os::ListDirectory(missing);
  REQUIRE_FALSE(dir.ok());
  CHECK(dir.status().code() == absl::StatusCode::kNotFound);
  CHECK(Contains(dir.status(), missing));

  auto link = os::ReadLink(missing);
  REQUIRE_FALSE(link.ok());
  CHECK(link.status().code() == absl::StatusCode::kNotFound);
  CHECK(Contains(link.status(), missing));

  // A directory is not a file: EISDIR is kept in the message.
  auto not_file = os::ReadFile("/proc");
  REQUIRE_FALSE(not_file.ok());
  CHECK(Contains(not_file.status(), "/proc"));
  CHECK(Contains(not_file.status(), "errno " + std::to_string(EISDIR)));
}

// Opens `fifo` for writing after `seconds` unless stopped first: an open(2) of a FIFO that
// blocks for want of a writer then returns, so a regression fails the test instead of
// hanging it.
class FifoRescuer {
 public:
  FifoRescuer(std::string fifo, bool armed, int seconds = 5) {
    if (!armed) return;
    thread_ = std::thread([this, fifo = std::move(fifo), seconds] {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return stopped_; })) return;
      int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    });
  }
  ~FifoRescuer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::thread thread_;
};

// What ReadFile must say about each hostile entry: the code and a phrase of the message.
struct HostileExpectation {
  absl::StatusCode code;
  std::string words;
  int no_alloc_errno;  // ReadFileNoAlloc's answer, negated
};

HostileExpectation Expected(testing::Hostile kind) {
  using testing::Hostile;
  switch (kind) {
    case Hostile::kLinkToZero:
    case Hostile::kLinkToUrandom:
      return {absl::StatusCode::kFailedPrecondition, "a character device, not a regular file",
              EINVAL};
    case Hostile::kFifo:
      return {absl::StatusCode::kFailedPrecondition, "a FIFO, not a regular file", EINVAL};
    case Hostile::kSocket:
      return {absl::StatusCode::kFailedPrecondition, "(errno 6 ENXIO)", ENXIO};
    case Hostile::kDirectory:
      return {absl::StatusCode::kFailedPrecondition, "(errno 21 EISDIR)", EISDIR};
    case Hostile::kDanglingLink:
      return {absl::StatusCode::kNotFound, "(errno 2 ENOENT)", ENOENT};
    case Hostile::kLoopingLink:
      return {absl::StatusCode::kFailedPrecondition, "(errno 40 ELOOP)", ELOOP};
  }
  return {};
}

TEST_CASE("ReadFile refuses devices, FIFOs, sockets, directories and bad links at once") {
  testing::TempDir dir;
  for (testing::Hostile kind : testing::AllHostile()) {
    INFO(testing::HostileName(kind));
    const std::string path = (dir.path() / "meminfo").string();
    testing::MakeHostile(path, kind);
    const HostileExpectation expected = Expected(kind);

    const auto begin = std::chrono::steady_clock::now();
    StatusOr<std::string> text = absl::UnknownError("not read");
    {
      FifoRescuer rescue(path, kind == testing::Hostile::kFifo);
      text = os::ReadFile(path);
    }
    const auto elapsed = std::chrono::steady_clock::now() - begin;
    CHECK(elapsed < std::chrono::seconds(2));
    REQUIRE_FALSE(text.ok());
    INFO(text.status().message());
    CHECK(text.status().code() == expected.code);
    CHECK(Contains(text.status(), path));
    CHECK(Contains(text.status(), expected.words));

    char buffer[64];
    long read = 0;
    {
      FifoRescuer rescue(path, kind == testing::Hostile::kFifo);
      read = os::ReadFileNoAlloc(path.c_str(), buffer, sizeof buffer);
    }
    CHECK(read == -expected.no_alloc_errno);
  }
}

TEST_CASE("ReadFile stops at its size limit with a clear error") {
  testing::TempDir dir;
  const std::string path = (dir.path() / "distance").string();
  {
    std::string text(10000, '1');
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fwrite(text.data(), 1, text.size(), f) == text.size());
    std::fclose(f);
  }
  auto exact = os::ReadFile(path, 10000);
  REQUIRE(exact.ok());
  CHECK(exact->size() == 10000);

  auto over = os::ReadFile(path, 9999);
  REQUIRE_FALSE(over.ok());
  CHECK(over.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(over.status(), path));
  CHECK(Contains(over.status(), "larger than 9999 bytes"));

  // procfs reports a size of 0 whatever a file holds: the limit holds while reading too.
  auto maps = os::ReadFile("/proc/self/maps", 16);
  REQUIRE_FALSE(maps.ok());
  CHECK(maps.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(maps.status(), "larger than 16 bytes"));

  // The default limit, on a sparse file one byte over it (refused before any read).
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(os::kMaxFileBytes + 1)) == 0);
  auto huge = os::ReadFile(path);
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(huge.status(), absl::StrCat("larger than ", os::kMaxFileBytes, " bytes")));
}

TEST_CASE("files, directories and links of the live system are read whole") {
  auto meminfo = os::ReadFile("/proc/meminfo");
  REQUIRE(meminfo.ok());
  CHECK(meminfo->rfind("MemTotal:", 0) == 0);
  CHECK(meminfo->size() > 4096 / 4);  // several lines, not one read's worth cut short

  auto nodes = os::ListDirectory("/sys/devices/system/node");
  REQUIRE(nodes.ok());
  CHECK(std::count(nodes->begin(), nodes->end(), "node" + std::to_string(HostNode())) == 1);
  CHECK(std::count(nodes->begin(), nodes->end(), ".") == 0);
  CHECK(std::count(nodes->begin(), nodes->end(), "..") == 0);

  auto self = os::ReadLink("/proc/self/exe");
  REQUIRE(self.ok());
  CHECK(self->find("os_test") != std::string::npos);
}

TEST_CASE("ListDirectory reads a directory longer than one getdents64 buffer, and no other kind") {
  testing::TempDir dir;
  std::vector<std::string> made;
  for (int i = 0; i < 300; ++i) {  // ~300 records of ~80 bytes: several 4 KiB reads
    made.push_back("entry_" + std::to_string(i) + "_" +
                   std::string(static_cast<std::size_t>(i % 60), 'x'));
    std::FILE* f = std::fopen((dir.path() / made.back()).c_str(), "w");
    REQUIRE(f != nullptr);
    std::fclose(f);
  }
  auto listed = os::ListDirectory(dir.path().string());
  REQUIRE(listed.ok());
  std::sort(made.begin(), made.end());
  std::sort(listed->begin(), listed->end());
  CHECK(*listed == made);

  // Not a directory: refused at once (a FIFO must not block), the path named.
  for (testing::Hostile kind : {testing::Hostile::kFifo, testing::Hostile::kLinkToZero,
                                testing::Hostile::kSocket, testing::Hostile::kLoopingLink}) {
    INFO(testing::HostileName(kind));
    const std::string path = (dir.path() / "node0").string();
    testing::MakeHostile(path, kind);
    const auto begin = std::chrono::steady_clock::now();
    auto refused = os::ListDirectory(path);
    CHECK(std::chrono::steady_clock::now() - begin < std::chrono::seconds(2));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(Contains(refused.status(), path));
  }
}

TEST_CASE("AllowedCpuCount counts the process's CPUs at load, whoever pins itself later") {
  auto process = os::ProcessAffinity();
  REQUIRE(process.ok());
  CHECK(os::AllowedCpuCount() == process->size());  // nothing in this test program pins at load
  unsigned pinned_count = 0;
  Status pinned;
  std::thread([&] {
    const int one[] = {process->front()};
    pinned = os::SetThreadAffinity(one);
    pinned_count = os::AllowedCpuCount();
  }).join();
  REQUIRE(pinned.ok());
  CHECK(pinned_count == process->size());  // a pinned thread does not shrink the shards
}

TEST_CASE("GetEnv returns the variable or an empty string") {
  ::setenv("NUMARENA_OS_TEST_VARIABLE", "value with spaces", 1);
  CHECK(os::GetEnv("NUMARENA_OS_TEST_VARIABLE") == "value with spaces");
  ::unsetenv("NUMARENA_OS_TEST_VARIABLE");
  CHECK(os::GetEnv("NUMARENA_OS_TEST_VARIABLE").empty());
}

TEST_CASE("reserved address space is aligned, committed on demand and decommitted") {
  const std::size_t kAlign = std::size_t{2} << 20;
  const std::size_t kBytes = 4 * kAlign;
  auto reserved = os::ReserveAddressSpace(kBytes, kAlign);
  REQUIRE(reserved.ok());
  auto* base = static_cast<unsigned char*>(*reserved);
  CHECK(reinterpret_cast<std::uintptr_t>(base) % kAlign == 0);
  // Reserved is mapped (mincore knows it) but nothing is resident.
  auto mapped = os::RangeIsMapped(base, kBytes);
  REQUIRE(mapped.ok());
  CHECK(*mapped);
  CHECK(Resident(base, kBytes) == 0);

  REQUIRE(os::CommitRange(base + kAlign, kAlign).ok());
  std::memset(base + kAlign, 0x7e, kAlign);
  CHECK(Resident(base, kBytes) == kAlign / kPage);

  REQUIRE(os::DecommitRange(base + kAlign, kAlign).ok());
  CHECK(Resident(base, kBytes) == 0);
  mapped = os::RangeIsMapped(base, kBytes);
  REQUIRE(mapped.ok());
  CHECK(*mapped);  // the range stays reserved
  os::Unmap(base, kBytes);

  // Committing what is not mapped fails and keeps errno (mprotect: ENOMEM).
  Status s = os::CommitRange(base, kPage);
  CHECK_FALSE(s.ok());
  CHECK(Contains(s, "mprotect"));
  CHECK(Contains(s, "errno " + std::to_string(ENOMEM)));
}

TEST_CASE("MapAnonymous honours alignment, RangeIsMapped sees holes") {
  const std::size_t kAlign = std::size_t{2} << 20;
  Mapping map(kAlign / kPage, kAlign);
  CHECK(reinterpret_cast<std::uintptr_t>(map.data) % kAlign == 0);
  CHECK(Resident(map.data, map.bytes) == 0);

  os::Unmap(map.page(3), kPage);  // a hole
  auto whole = os::RangeIsMapped(map.data, map.bytes);
  REQUIRE(whole.ok());
  CHECK_FALSE(*whole);
  auto before = os::RangeIsMapped(map.data, 3 * kPage);
  REQUIRE(before.ok());
  CHECK(*before);
  auto hole = os::RangeIsMapped(map.page(3) + 100, 1);  // rounded down to the page
  REQUIRE(hole.ok());
  CHECK_FALSE(*hole);
}

TEST_CASE("PurgeRange drops pages, PopulateWrite faults them in keeping contents") {
  Mapping map(64);
  std::memset(map.data, 0x42, map.bytes);
  CHECK(Resident(map.data, map.bytes) == 64);

  REQUIRE(os::PurgeRange(map.page(0), 32 * kPage).ok());
  CHECK(Resident(map.data, map.bytes) == 32);
  CHECK(map.data[0] == 0);         // purged anonymous memory reads back as zero
  CHECK(map.page(32)[0] == 0x42);  // the rest is untouched

  REQUIRE(os::PurgeRange(map.data, map.bytes).ok());
  map.page(5)[17] = 9;
  REQUIRE(os::PopulateWrite(map.data, map.bytes).ok());
  CHECK(Resident(map.data, map.bytes) == 64);
  CHECK(map.page(5)[17] == 9);
}

TEST_CASE("huge page advice and hugetlb mappings") {
  const std::size_t kHuge = std::size_t{2} << 20;
  Mapping map(2 * kHuge / kPage, kHuge);
  bool thp = os::ReadFile("/sys/kernel/mm/transparent_hugepage/enabled").ok();
  Status advise = os::AdviseHugePages(map.data, map.bytes);
  Status no_advise = os::AdviseNoHugePages(map.data, map.bytes);
  if (thp) {
    CHECK(advise.ok());
    CHECK(no_advise.ok());
  } else {
    CHECK(Contains(advise, "HUGEPAGE"));
  }

  // Without a hugetlbfs pool the mapping is refused as FailedPrecondition naming the sysfs
  // knob to turn; with one it works.
  auto pool = os::ReadFile("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
  auto huge = os::MapHugetlb(kHuge, kHuge);
  if (pool.ok() && std::atoi(pool->c_str()) == 0) {
    REQUIRE_FALSE(huge.ok());
    CHECK(huge.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(Contains(huge.status(), "hugepages-2048kB/nr_hugepages"));
  } else if (huge.ok()) {
    os::Unmap(*huge, kHuge);
  }
}

TEST_CASE("policy mode names are the kernel's") {
  CHECK(std::string(os::PolicyModeName(os::PolicyMode::kDefault)) == "MPOL_DEFAULT");
  CHECK(std::string(os::PolicyModeName(os::PolicyMode::kBind)) == "MPOL_BIND");
  CHECK(std::string(os::PolicyModeName(os::PolicyMode::kPreferred)) == "MPOL_PREFERRED");
  CHECK(std::string(os::PolicyModeName(os::PolicyMode::kInterleave)) == "MPOL_INTERLEAVE");
  CHECK(std::string(os::PolicyModeName(os::PolicyMode::kLocal)) == "MPOL_LOCAL");
  CHECK(std::string(os::PolicyModeName(os::PolicyMode::kPreferredMany)) == "MPOL_PREFERRED_MANY");
}

// MPOL_PREFERRED_MANY is in every kernel since 5.15; the OS layer says whether this one took
// it, and the range's policy as the kernel reports it matches (get_mempolicy MPOL_F_ADDR).
TEST_CASE(
    "BindRange(MPOL_PREFERRED_MANY) places pages on the set and reports the kernel's "
    "support") {
  const int node = HostNode();
  Mapping map(64);
  const int nodes[] = {node};
  Status s = os::BindRange(map.data, map.bytes, os::PolicyMode::kPreferredMany, nodes);
  INFO(s);
  REQUIRE(s.ok());
  int mode = -1;
  REQUIRE(get_mempolicy(&mode, nullptr, 0, map.data, MPOL_F_ADDR) == 0);
  struct utsname uts;
  REQUIRE(uname(&uts) == 0);
  int major = 0, minor = 0;
  std::sscanf(uts.release, "%d.%d", &major, &minor);
  const bool has_mode = major > 5 || (major == 5 && minor >= 15);
  CHECK(os::KernelHasPreferredMany() == (has_mode ? 1 : 0));
  CHECK(mode == (has_mode ? 5 /* MPOL_PREFERRED_MANY */ : MPOL_PREFERRED));
  std::memset(map.data, 1, map.bytes);
  auto counts = page_nodes(map.data, map.bytes);
  REQUIRE(counts.ok());
  CHECK(counts->on(node) == 64);
  // A bad id is still an error, not a silent fallback to MPOL_PREFERRED.
  const int bad[] = {OnlineNodes().back() + 7};
  Status refused = os::BindRange(map.data, map.bytes, os::PolicyMode::kPreferredMany, bad);
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(refused, "MPOL_PREFERRED_MANY"));
}

TEST_CASE("PossibleNodeCount is the shortest node mask get_mempolicy takes") {
  const int count = os::PossibleNodeCount();
  INFO("PossibleNodeCount() = " << count);
  // /sys/devices/system/node/possible: "0" or "0-3" or "0,2-5"; the highest id is last.
  auto possible = os::ReadFile("/sys/devices/system/node/possible");
  REQUIRE(possible.ok());
  const std::string text(absl::StripAsciiWhitespace(*possible));
  const int highest = std::stoi(text.substr(text.find_last_of(",-") == std::string::npos
                                                ? 0
                                                : text.find_last_of(",-") + 1));
  CHECK(count > highest);
  CHECK(count % 64 == 0);
  std::vector<unsigned long> words(static_cast<std::size_t>(count) / 64 + 1);
  int mode = -1;
  // libnuma's wrapper: the kernel's answer through a route other than the library's.
  CHECK(get_mempolicy(&mode, words.data(), static_cast<unsigned long>(count), nullptr, 0) == 0);
  CHECK(count - 64 <= highest);  // the shortest: one word less would not hold every id
}

TEST_CASE("BindRange to the host node places every page there") {
  const int node = HostNode();
  CHECK(IsOnline(node));
  CHECK(os::PossibleNodeCount() > OnlineNodes().back());
  Mapping map(256);
  const int nodes[] = {node};
  for (auto mode :
       {os::PolicyMode::kBind, os::PolicyMode::kPreferred, os::PolicyMode::kInterleave}) {
    INFO(os::PolicyModeName(mode));
    REQUIRE(os::BindRange(map.data, map.bytes, mode, nodes).ok());
  }
  REQUIRE(os::BindRange(map.data, map.bytes, os::PolicyMode::kLocal, {}).ok());
  REQUIRE(os::BindRange(map.data, map.bytes, os::PolicyMode::kBind, nodes).ok());
  std::memset(map.data, 1, map.bytes);
  auto counts = page_nodes(map.data, map.bytes);
  REQUIRE(counts.ok());
  CHECK(counts->on(node) == 256);
  auto where = os::NodeOfAddress(map.page(100));
  REQUIRE(where.ok());
  CHECK(*where == node);
  // MPOL_MF_STRICT: every page already conforms.
  REQUIRE(os::BindRange(map.data, map.bytes, os::PolicyMode::kBind, nodes, MPOL_MF_STRICT).ok());
}

TEST_CASE("BindRange with a node id the machine lacks is InvalidArgument naming it") {
  Mapping map(4);
  // Ids just past the online nodes, at the end of the first mask word and past it, at the
  // kernel's node limit (CONFIG_NODES_SHIFT=10 on Debian) and far beyond it.
  const int past_last = OnlineNodes().back() + 1;
  for (int bad : {past_last, past_last + 1, 63, 64, 65, 200, 1023, 1024, 100000}) {
    if (IsOnline(bad)) continue;
    DYNAMIC_SECTION("node " << bad) {
      const int nodes[] = {bad};
      for (auto mode :
           {os::PolicyMode::kBind, os::PolicyMode::kInterleave, os::PolicyMode::kPreferred}) {
        Status s = os::BindRange(map.data, map.bytes, mode, nodes);
        INFO(os::PolicyModeName(mode) << ": " << s);
        CHECK(s.code() == absl::StatusCode::kInvalidArgument);
        CHECK(Contains(s, "nodes=" + std::to_string(bad)));
        CHECK(Contains(s, os::PolicyModeName(mode)));
        CHECK(Contains(s, "errno 22 EINVAL"));
      }
    }
  }
  SECTION("negative id, bind and interleave") {
    const int nodes[] = {-1};
    for (auto mode : {os::PolicyMode::kBind, os::PolicyMode::kInterleave}) {
      Status s = os::BindRange(map.data, map.bytes, mode, nodes);
      INFO(os::PolicyModeName(mode) << ": " << s);
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK(Contains(s, "nodes=-1"));
    }
  }
  SECTION("an empty node set for a mode that needs nodes") {
    Status s = os::BindRange(map.data, map.bytes, os::PolicyMode::kBind, {});
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(s, "MPOL_BIND"));
  }
  SECTION("a range that is not page aligned") {
    const int nodes[] = {HostNode()};
    Status s = os::BindRange(map.data + 1, kPage, os::PolicyMode::kBind, nodes);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(s, "mbind("));
  }
}

// A NodeMask cannot hold a negative id, and an empty mask with MPOL_PREFERRED means
// "allocate locally" to the kernel: BindRange must refuse the id rather than drop it.
TEST_CASE("BindRange(MPOL_PREFERRED) with a negative id is InvalidArgument") {
  Mapping map(1);
  const int nodes[] = {-1};
  Status s = os::BindRange(map.data, map.bytes, os::PolicyMode::kPreferred, nodes);
  INFO(s);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "nodes=-1"));
}

TEST_CASE("SetThreadPolicy binds the calling thread only, bad ids are refused") {
  const int node = HostNode();
  const int nodes[] = {node};
  const int bad[] = {OnlineNodes().back() + 7};
  // A thread of its own, so the test thread's policy never changes. Catch2's assertions are
  // not thread-safe: the thread only records, the test thread checks.
  Status bind, refused, reset;
  std::size_t on_node = 0, resident = 0;
  std::thread([&] {
    bind = os::SetThreadPolicy(os::PolicyMode::kBind, nodes);
    auto p = os::MapAnonymous(16 * kPage);
    if (p.ok()) {
      std::memset(*p, 3, 16 * kPage);
      auto counts = page_nodes(*p, 16 * kPage);
      if (counts.ok()) {
        on_node = counts->on(node);
        resident = counts->resident();
      }
      os::Unmap(*p, 16 * kPage);
    }
    refused = os::SetThreadPolicy(os::PolicyMode::kInterleave, bad);
    reset = os::SetThreadPolicy(os::PolicyMode::kDefault, {});
  }).join();
  CHECK(bind.ok());
  CHECK(on_node == 16);
  CHECK(resident == 16);
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(refused, "set_mempolicy(MPOL_INTERLEAVE"));
  CHECK(Contains(refused, "nodes=" + std::to_string(bad[0])));
  CHECK(reset.ok());
}

TEST_CASE("QueryPageNodes and MovePages report per page, check their arguments") {
  const int node = HostNode();
  Mapping map(8);
  std::memset(map.page(0), 1, 4 * kPage);
  std::vector<void*> pages;
  for (std::size_t i = 0; i < 8; ++i) pages.push_back(map.page(i));
  std::vector<int> status(8, 12345);
  REQUIRE(os::QueryPageNodes(pages, status).ok());
  for (std::size_t i = 0; i < 4; ++i) CHECK(status[i] == node);
  for (std::size_t i = 4; i < 8; ++i) CHECK(status[i] < 0);  // not resident

  std::vector<int> target(8, node);
  REQUIRE(os::MovePages(std::span<void* const>(pages.data(), 4),
                        std::span<const int>(target.data(), 4), std::span<int>(status.data(), 4))
              .ok());
  for (std::size_t i = 0; i < 4; ++i) CHECK(status[i] == node);

  std::vector<int> short_status(3);
  Status s = os::QueryPageNodes(pages, short_status);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  s = os::MovePages(pages, std::span<const int>(target.data(), 2), status);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(s, "target"));

  // Moving to a node that does not exist is refused by the kernel (ENODEV) and reported.
  std::vector<int> bad(1, OnlineNodes().back() + 3);
  std::vector<int> one(1);
  s = os::MovePages(std::span<void* const>(pages.data(), 1), bad, one);
  CHECK_FALSE(s.ok());
  CHECK(Contains(s, "move_pages(move)"));
  CHECK(Contains(s, "errno " + std::to_string(ENODEV)));
}

TEST_CASE("MovePagesNoAlloc moves pages, and keep_source leaves the source mapped with its policy") {
  const std::size_t page = os::PageSize();
  const std::size_t bytes = 4 * page;
  auto map = [&] {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    return static_cast<unsigned char*>(p);
  };
  for (const bool keep_source : {true, false}) {
    INFO("keep_source " << keep_source);
    unsigned char* from = map();
    unsigned char* to = map();
    unsigned long node0 = 1;
    REQUIRE(mbind(from, bytes, MPOL_BIND, &node0, sizeof node0 * 8, 0) == 0);
    for (std::size_t i = 0; i < bytes; ++i) from[i] = static_cast<unsigned char>(i * 7 + 1);
    const int error = os::MovePagesNoAlloc(from, to, bytes, keep_source);
    if (keep_source && error == EINVAL) {  // a kernel before 5.7: nothing was touched
      WARN("MREMAP_DONTUNMAP not supported by this kernel");
      munmap(from, bytes);
      munmap(to, bytes);
      continue;
    }
    REQUIRE(error == 0);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < bytes; ++i) wrong += to[i] != static_cast<unsigned char>(i * 7 + 1);
    CHECK(wrong == 0);
    int to_mode = -1;  // the moved pages' mapping took the source's policy
    REQUIRE(get_mempolicy(&to_mode, nullptr, 0, to, MPOL_F_ADDR) == 0);
    CHECK(to_mode == MPOL_BIND);
    std::size_t resident = 0;
    const int mapped = os::ResidentPagesNoAlloc(from, bytes, &resident);
    if (keep_source) {
      // Still mapped (MREMAP_DONTUNMAP), empty, bound as before, and writable.
      REQUIRE(mapped == 0);
      CHECK(resident == 0);
      int mode = -1;
      REQUIRE(get_mempolicy(&mode, nullptr, 0, from, MPOL_F_ADDR) == 0);
      CHECK(mode == MPOL_BIND);
      std::size_t nonzero = 0;
      for (std::size_t i = 0; i < bytes; ++i) nonzero += from[i] != 0;
      CHECK(nonzero == 0);
      std::memset(from, 3, bytes);
      munmap(from, bytes);
    } else {
      CHECK(mapped == ENOMEM);  // a hole
    }
    munmap(to, bytes);
  }
}

TEST_CASE("thread affinity: read, pin, restore, a bad CPU id is named") {
  auto before = os::ThreadAffinity();
  REQUIRE(before.ok());
  REQUIRE_FALSE(before->empty());
  CHECK(std::is_sorted(before->begin(), before->end()));

  const int cpu = before->back();
  const int cpus[] = {cpu};
  const int bad[] = {100000};
  Status pinned, refused;
  StatusOr<std::vector<int>> now = absl::UnknownError("not run");
  os::CpuAndNode running;
  int fast_node = -2;
  std::thread([&] {  // records only; checked below (Catch2 is not thread-safe)
    pinned = os::SetThreadAffinity(cpus);
    now = os::ThreadAffinity();
    running = os::CurrentCpuAndNode();
    fast_node = os::CurrentNodeFast();
    refused = os::SetThreadAffinity(bad);
  })
      .join();
  CHECK(pinned.ok());
  REQUIRE(now.ok());
  CHECK(*now == std::vector<int>{cpu});
  CHECK(running.cpu == cpu);
  CHECK(fast_node == running.node);
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(refused, "cpus=100000"));
  CHECK(Contains(refused, "EINVAL"));

  auto after = os::ThreadAffinity();
  REQUIRE(after.ok());
  CHECK(*after == *before);  // the pinned thread was another thread
}

TEST_CASE("process affinity: the union of the threads' masks, whichever thread pins itself") {
  auto before = os::ProcessAffinity();
  REQUIRE(before.ok());
  REQUIRE(*before == *os::ThreadAffinity());  // nobody is pinned yet
  if (before->size() < 2) {
    WARN("one allowed CPU: pinning cannot narrow it, nothing to tell apart");
    return;
  }
  // Another thread stays unpinned; this (the main) thread pins itself, as a server's
  // control thread might, and a pinned worker asks too.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread unpinned([&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  });
  const int only[] = {before->front()};
  REQUIRE(os::SetThreadAffinity(only).ok());
  auto from_pinned_main = os::ProcessAffinity();
  StatusOr<std::vector<int>> from_pinned_worker = absl::UnknownError("not run");
  std::thread([&] {
    const int other[] = {before->back()};
    if (os::SetThreadAffinity(other).ok()) from_pinned_worker = os::ProcessAffinity();
  }).join();
  REQUIRE(os::SetThreadAffinity(*before).ok());  // restore before checking
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_one();
  unpinned.join();
  REQUIRE(from_pinned_main.ok());
  CHECK(*from_pinned_main == *before);
  REQUIRE(from_pinned_worker.ok());
  CHECK(*from_pinned_worker == *before);
}

TEST_CASE("allocation-free node masks refuse ids they cannot hold") {
  os::KernelNodeMask mask;
  const int good[] = {HostNode()};
  REQUIRE(os::MakeKernelNodeMask(good, &mask) == 0);
  Mapping map(4);
  CHECK(os::BindRangeNoAlloc(map.data, map.bytes, os::PolicyMode::kBind, mask) == 0);
  std::memset(map.data, 1, map.bytes);
  CHECK(Resident(map.data, map.bytes) == 4);

  const int negative[] = {-1};
  CHECK(os::MakeKernelNodeMask(negative, &mask) == EINVAL);
  const int too_big[] = {os::KernelNodeMask::kMaxNodes};
  CHECK(os::MakeKernelNodeMask(too_big, &mask) == EINVAL);
  const int absent[] = {OnlineNodes().back() + 5};
  REQUIRE(os::MakeKernelNodeMask(absent, &mask) == 0);
  CHECK(os::BindRangeNoAlloc(map.data, map.bytes, os::PolicyMode::kBind, mask) == EINVAL);
}

}  // namespace
}  // namespace numarena
