// Unit tests of the operations parsers (lib/ops/ops_parse.hpp): numa_maps, numastat, sysctl
// values, THP selectors, IRQ affinity lists and /proc/PID/stat, on the kernel's real
// formats and on the malformed inputs a fixture or a broken kernel could produce.
#include "ops/ops_parse.hpp"

#include <catch2/catch.hpp>
#include <string>

namespace {

using namespace numarena::parse;

std::string Message(const numarena::Status& status) { return std::string(status.message()); }

}  // namespace

TEST_CASE("numa_maps: anonymous, file, heap, stack and hugetlb lines", "[ops_parse]") {
  const char* text =
      "55d0c0a00000 default file=/usr/bin/python3.11 mapped=64 mapmax=2 N0=64 "
      "kernelpagesize_kB=4\n"
      "55d0c2000000 default heap anon=300 dirty=300 N0=200 N1=100 kernelpagesize_kB=4\n"
      "7f3c00000000 bind:1 anon=16384 dirty=16384 active=0 N1=16384 kernelpagesize_kB=4\n"
      "7f3e00000000 interleave:0-1 huge anon=4 dirty=4 N0=2 N1=2 kernelpagesize_kB=2048\n"
      "7ffc12340000 default stack anon=33 dirty=33 N0=33 kernelpagesize_kB=4\n"
      "7ffc12400000 default\n";
  auto maps = ParseNumaMaps(text);
  REQUIRE(maps.ok());
  REQUIRE(maps->size() == 6);
  const auto& file = (*maps)[0];
  CHECK(file.address == 0x55d0c0a00000);
  CHECK(file.kind == MappingKind::kFile);
  CHECK(file.file == "/usr/bin/python3.11");
  CHECK(file.pages_on(0) == 64);
  const auto& heap = (*maps)[1];
  CHECK(heap.kind == MappingKind::kHeap);
  CHECK(heap.pages_on(0) == 200);
  CHECK(heap.pages_on(1) == 100);
  CHECK(heap.resident_pages() == 300);
  CHECK(heap.anon_pages == 300);
  CHECK(heap.dirty_pages == 300);
  const auto& bound = (*maps)[2];
  CHECK(bound.policy == "bind:1");
  CHECK(bound.kind == MappingKind::kAnonymous);
  CHECK(bound.pages_on(0) == 0);
  CHECK(bound.pages_on(1) * bound.page_size_bytes == std::uint64_t{64} << 20);
  const auto& huge = (*maps)[3];
  CHECK(huge.kind == MappingKind::kHugetlb);
  CHECK(huge.page_size_bytes == std::uint64_t{2} << 20);
  CHECK(huge.policy == "interleave:0-1");
  CHECK((*maps)[4].kind == MappingKind::kStack);
  CHECK((*maps)[5].resident_pages() == 0);
  CHECK((*maps)[5].page_size_bytes == 4096);
}

TEST_CASE("numa_maps: sparse node ids and empty input", "[ops_parse]") {
  auto maps = ParseNumaMaps("1000 default anon=1 N4=7 N12=1 kernelpagesize_kB=4\n");
  REQUIRE(maps.ok());
  CHECK((*maps)[0].pages_on(4) == 7);
  CHECK((*maps)[0].pages_on(12) == 1);
  auto empty = ParseNumaMaps("");
  REQUIRE(empty.ok());
  CHECK(empty->empty());
}

TEST_CASE("numa_maps: malformed lines name the line and the token", "[ops_parse]") {
  auto bad_count = ParseNumaMaps("1000 default N0=1\n2000 default N1=x\n");
  REQUIRE_FALSE(bad_count.ok());
  CHECK(bad_count.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Message(bad_count.status()).find("line 2") != std::string::npos);
  CHECK(Message(bad_count.status()).find("N1=x") != std::string::npos);

  auto bad_address = ParseNumaMaps("zz00 default N0=1\n");
  REQUIRE_FALSE(bad_address.ok());
  CHECK(Message(bad_address.status()).find("address") != std::string::npos);

  CHECK_FALSE(ParseNumaMaps("1000\n").ok());                                  // no policy
  CHECK_FALSE(ParseNumaMaps("1000 default N0=1 N0=2\n").ok());                // node twice
  CHECK_FALSE(ParseNumaMaps("1000 default kernelpagesize_kB=0\n").ok());      // zero page
  CHECK_FALSE(ParseNumaMaps("1000 default N0=99999999999999999999\n").ok());  // overflow
  CHECK_FALSE(ParseNumaMaps("1000 default N70000=1\n").ok());                 // node id bound
  CHECK_FALSE(ParseNumaMaps("11112222333344445 default\n").ok());             // 17 hex digits
}

TEST_CASE("numastat: the six counters", "[ops_parse]") {
  auto stat = ParseNodeNumastat(
      "numa_hit 996318\nnuma_miss 12451\nnuma_foreign 8021\ninterleave_hit 4\n"
      "local_node 990000\nother_node 18769\n");
  REQUIRE(stat.ok());
  CHECK(stat->numa_hit == 996318);
  CHECK(stat->numa_miss == 12451);
  CHECK(stat->numa_foreign == 8021);
  CHECK(stat->interleave_hit == 4);
  CHECK(stat->local_node == 990000);
  CHECK(stat->other_node == 18769);

  auto missing = ParseNodeNumastat("numa_hit 1\nnuma_miss 0\n");
  REQUIRE_FALSE(missing.ok());
  CHECK(Message(missing.status()).find("numa_foreign is missing") != std::string::npos);
  CHECK_FALSE(ParseNodeNumastat("numa_hit -1\n").ok());
  CHECK_FALSE(ParseNodeNumastat("numa_hit 1 2\n").ok());
}

TEST_CASE("sysctl integers", "[ops_parse]") {
  CHECK(ParseSysctlInteger("0\n").value() == 0);
  CHECK(ParseSysctlInteger("2097152\n").value() == 2097152);
  CHECK(ParseSysctlInteger("-1").value() == -1);
  CHECK_FALSE(ParseSysctlInteger("").ok());
  CHECK_FALSE(ParseSysctlInteger("1 2").ok());
  CHECK_FALSE(ParseSysctlInteger("0x10").ok());
  CHECK_FALSE(ParseSysctlInteger("-").ok());
  CHECK_FALSE(ParseSysctlInteger("99999999999999999999").ok());
}

TEST_CASE("THP selectors", "[ops_parse]") {
  auto enabled = ParseSelector("always [madvise] never\n");
  REQUIRE(enabled.ok());
  CHECK(enabled->selected == "madvise");
  CHECK(enabled->options == std::vector<std::string>{"always", "madvise", "never"});
  auto defrag = ParseSelector("always defer [defer+madvise] madvise never\n");
  REQUIRE(defrag.ok());
  CHECK(defrag->selected == "defer+madvise");
  CHECK_FALSE(ParseSelector("always madvise never").ok());      // nothing selected
  CHECK_FALSE(ParseSelector("[always] [madvise] never").ok());  // two selected
  CHECK_FALSE(ParseSelector("[always madvise] never").ok());    // unbalanced
  CHECK_FALSE(ParseSelector("[]").ok());
}

TEST_CASE("IRQ affinity lists", "[ops_parse]") {
  CHECK(ParseIrqAffinityList("0-3,8\n").value() == std::vector<int>{0, 1, 2, 3, 8});
  auto bad = ParseIrqAffinityList("3-1");
  REQUIRE_FALSE(bad.ok());
  CHECK(Message(bad.status()).find("IRQ affinity list") != std::string::npos);
}

TEST_CASE("/proc/PID/stat processor field", "[ops_parse]") {
  // 52 fields as printed by Linux 6.1; field 39 (processor) is 5. The command name holds a
  // space and a ')' to check that fields are counted after the last ')'.
  std::string stat = "4242 (my (server) x) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 4 0 ";
  stat +=
      "1000 10000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 5 0 0 0 0 0 0 0 0 0 0 0 0 "
      "0\n";
  auto cpu = ParseProcStatProcessor(stat);
  REQUIRE(cpu.ok());
  CHECK(*cpu == 5);
  CHECK_FALSE(ParseProcStatProcessor("4242 (x) S 1 2 3\n").ok());
  CHECK_FALSE(ParseProcStatProcessor("no parenthesis").ok());
}

TEST_CASE("decimal entries", "[ops_parse]") {
  CHECK(ParseDecimalEntry("123").value() == 123);
  CHECK_FALSE(ParseDecimalEntry("12a").ok());
  CHECK_FALSE(ParseDecimalEntry("").ok());
  CHECK_FALSE(ParseDecimalEntry("99999999999").ok());
}
