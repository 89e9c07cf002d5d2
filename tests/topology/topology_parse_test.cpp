// Unit tests of the pure topology parsers (lib/topology/topology_parse.hpp) on synthetic inputs:
// the forms the kernel prints, the tolerances documented there, and every rejection with
// the words of its error message.
#include "topology/topology_parse.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace parse = numarena::parse;
using Ids = std::vector<int>;

namespace {

// The error message of a failed parse (empty when it succeeded, so REQUIREs read well).
template <typename T>
std::string ErrorOf(const numarena::StatusOr<T>& result) {
  return result.ok() ? std::string() : std::string(result.status().message());
}

Ids Range(int first, int last) {
  Ids out;
  for (int i = first; i <= last; ++i) out.push_back(i);
  return out;
}

Ids Concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("ID lists in the kernel's forms") {
  CHECK(*parse::ParseCpuList("0-47,96-143") == Concat(Range(0, 47), Range(96, 143)));
  CHECK(*parse::ParseCpuList("3") == Ids{3});
  CHECK(*parse::ParseCpuList("") == Ids{});
  CHECK(*parse::ParseCpuList("\n") == Ids{});               // memory-only node's cpulist
  CHECK(*parse::ParseNodeList("0-1,4\n") == Ids{0, 1, 4});  // sparse online nodes
  CHECK(*parse::ParseCpuList("5-5") == Ids{5});
  CHECK(*parse::ParseCpuList("007") == Ids{7});
}

TEST_CASE("ID lists tolerate spaces and merge overlaps") {
  CHECK(*parse::ParseCpuList("  0-3 , 8 \n") == Ids{0, 1, 2, 3, 8});
  CHECK(*parse::ParseCpuList("0 - 2") == Ids{0, 1, 2});
  CHECK(*parse::ParseCpuList("4,0-5,2") == Range(0, 5));
  CHECK(*parse::ParseCpuList("\t1\r\n") == Ids{1});
}

TEST_CASE("ID lists reject what the kernel never prints") {
  auto stride = parse::ParseCpuList("0-7:2/4");
  CHECK(absl::IsInvalidArgument(stride.status()));
  CHECK_THAT(ErrorOf(stride), Catch::Contains("stride form") && Catch::Contains("CPU list"));

  auto reversed = parse::ParseCpuList("0-3,7-5");
  CHECK_THAT(ErrorOf(reversed),
             Catch::Contains("element 2 '7-5'") && Catch::Contains("reversed range"));

  CHECK_THAT(ErrorOf(parse::ParseCpuList("1,,2")), Catch::Contains("empty element"));
  CHECK_THAT(ErrorOf(parse::ParseCpuList("1,")), Catch::Contains("empty element"));
  CHECK_THAT(ErrorOf(parse::ParseCpuList(",1")), Catch::Contains("element 1"));
  CHECK_THAT(ErrorOf(parse::ParseCpuList("-1")), Catch::Contains("negative"));
  CHECK_THAT(ErrorOf(parse::ParseCpuList("3-")), Catch::Contains("missing end"));
  CHECK_THAT(ErrorOf(parse::ParseCpuList("0x3")), Catch::Contains("decimal"));
  CHECK_THAT(ErrorOf(parse::ParseCpuList("1 2")), Catch::Contains("decimal"));
  CHECK_THAT(ErrorOf(parse::ParseCpuList("+1")), Catch::Contains("decimal"));
  CHECK_THAT(ErrorOf(parse::ParseCpuList("1-2-3")), Catch::Contains("decimal"));
  CHECK_THAT(ErrorOf(parse::ParseNodeList("a")), Catch::Contains("node list"));
}

TEST_CASE("ID lists bound the ids") {
  CHECK(parse::ParseCpuList("65535").ok());
  CHECK_THAT(ErrorOf(parse::ParseCpuList("65536")), Catch::Contains("exceeds the limit 65535"));
  // Node ids stop at Linux's 1024 nodes.
  CHECK(parse::ParseNodeList("0-1023").ok());
  CHECK_THAT(ErrorOf(parse::ParseNodeList("1024")), Catch::Contains("exceeds the limit 1023"));
  CHECK_THAT(ErrorOf(parse::ParseNodeList("2-55555")), Catch::Contains("node list"));
  CHECK_THAT(ErrorOf(parse::ParseCpuList("0-99999999999999999999999")),
             Catch::Contains("exceeds the limit"));
  // An error message quotes at most a bounded piece of a long input.
  std::string long_input(10000, '9');
  CHECK(ErrorOf(parse::ParseCpuList(long_input)).size() < 200);
}

TEST_CASE("FormatIdList is the inverse of ParseIdList") {
  CHECK(numarena::FormatIdList(Ids{}) == "");
  CHECK(numarena::FormatIdList(Ids{3}) == "3");
  CHECK(numarena::FormatIdList(Ids{0, 1, 2, 3, 8}) == "0-3,8");
  CHECK(numarena::FormatIdList(Ids{8, 0, 2, 1, 1}) == "0-2,8");
  CHECK(numarena::FormatIdList(Ids{0, 2, 4}) == "0,2,4");
  for (const char* text : {"0-47,96-143", "0-1,4", "5", "1,3,5-9,11"}) {
    CHECK(numarena::FormatIdList(*parse::ParseCpuList(text)) == text);
  }
}

TEST_CASE("distance rows") {
  CHECK(*parse::ParseDistanceRow("10 12 32 32\n") == Ids{10, 12, 32, 32});
  CHECK(*parse::ParseDistanceRow("10") == Ids{10});
  CHECK(*parse::ParseDistanceRow("  10\t21  ") == Ids{10, 21});
  CHECK(*parse::ParseDistanceRow("10 255") == Ids{10, 255});
  CHECK_THAT(ErrorOf(parse::ParseDistanceRow("")), Catch::Contains("empty"));
  CHECK_THAT(ErrorOf(parse::ParseDistanceRow("\n")), Catch::Contains("empty"));
  CHECK_THAT(ErrorOf(parse::ParseDistanceRow("10 1O")),
             Catch::Contains("entry 2") && Catch::Contains("'1O'"));
  CHECK_THAT(ErrorOf(parse::ParseDistanceRow("10 256")), Catch::Contains("exceeds the limit 255"));
  CHECK_THAT(ErrorOf(parse::ParseDistanceRow("10 -1")), Catch::Contains("entry 2"));
  CHECK_THAT(ErrorOf(parse::ParseDistanceRow("10,21")), Catch::Contains("entry 1"));
}

TEST_CASE("node meminfo") {
  const char* text =
      "Node 0 MemTotal:       201326592 kB\n"
      "Node 0 MemFree:        184549376 kB\n"
      "Node 0 MemUsed:         16777216 kB\n"
      "Node 0 Active(anon):        1512 kB\n"
      "Node 0 HugePages_Total:     0\n";
  auto info = parse::ParseNodeMeminfo(text);
  REQUIRE(info.ok());
  CHECK(info->node == 0);
  CHECK(info->total_bytes == 201326592ull * 1024);
  CHECK(info->free_bytes == 184549376ull * 1024);
  CHECK(info->used_bytes == 16777216ull * 1024);

  CHECK(info->reclaimable_bytes == 0);  // no page-cache lines

  SECTION("reclaimable: the page cache, not reclaimable kernel memory (it may be pinned)") {
    auto cached = parse::ParseNodeMeminfo(
        "Node 1 MemTotal: 1000 kB\nNode 1 MemFree: 100 kB\nNode 1 Active(file): 300 kB\n"
        "Node 1 Inactive(file): 200 kB\nNode 1 Active(anon): 250 kB\n"
        "Node 1 KReclaimable: 50 kB\n");
    REQUIRE(cached.ok());
    CHECK(cached->reclaimable_bytes == 500 * 1024);
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo(
                   "Node 1 MemTotal: 1 kB\nNode 1 MemFree: 1 kB\nNode 1 Active(file): 3\n")),
               Catch::Contains("kB"));
  }
  SECTION("the line parser the free-memory guard feeds gives the same figures, without a text") {
    const char* lines[] = {"Node 2 MemTotal: 1000 kB", "  Node 2 MemFree: 100 kB  ", "",
                           "Node 2 Active(file): 300 kB", "Node 2 Inactive(file): 200 kB",
                           "Node 2 HugePages_Total:     0"};
    parse::NodeMeminfoParser parser;
    for (const char* line : lines) CHECK(parser.Feed(line));
    REQUIRE(parser.Finish());
    CHECK(parser.info().node == 2);
    CHECK(parser.info().total_bytes == 1000 * 1024);
    CHECK(parser.info().free_bytes == 100 * 1024);
    CHECK(parser.info().used_bytes == 900 * 1024);
    CHECK(parser.info().reclaimable_bytes == 500 * 1024);
    CHECK(parser.info().inactive_file_bytes == 200 * 1024);

    parse::NodeMeminfoParser broken;
    CHECK(broken.Feed("Node 2 MemTotal: 1000 kB"));
    CHECK_FALSE(broken.Feed("Node 2 MemFree: 10 MB"));
    CHECK_FALSE(broken.Feed("Node 2 MemFree: 10 kB"));  // ignored after the first problem
    CHECK_FALSE(broken.Finish());
    CHECK(broken.problem() == parse::NodeMeminfoParser::Problem::kUnit);
    CHECK(broken.problem_line_number() == 2);
    CHECK(broken.problem_token() == "MB");
  }
  SECTION("MemUsed defaults to MemTotal - MemFree") {
    auto no_used = parse::ParseNodeMeminfo("Node 3 MemTotal: 100 kB\nNode 3 MemFree: 40 kB\n");
    REQUIRE(no_used.ok());
    CHECK(no_used->node == 3);
    CHECK(no_used->used_bytes == 60 * 1024);
  }
  SECTION("rejections") {
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo("Node 0 MemFree: 1 kB\n")),
               Catch::Contains("no 'MemTotal:' line"));
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo("Node 0 MemTotal: 1 kB\n")),
               Catch::Contains("no 'MemFree:' line"));
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo("Node 0 MemTotal: 1 kB\nNode 1 MemFree: 1 kB")),
               Catch::Contains("line 2") && Catch::Contains("differs"));
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo("Node 0 MemTotal: lots kB\n")),
               Catch::Contains("line 1") && Catch::Contains("'lots'"));
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo("MemTotal: 1 kB\n")),
               Catch::Contains("expected 'Node <id> <Key>: <value> [kB]'"));
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo("Node 0 MemTotal: 1 MB\nNode 0 MemFree: 1 kB")),
               Catch::Contains("unknown unit"));
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo("Node 0 MemTotal: 1\nNode 0 MemFree: 1 kB")),
               Catch::Contains("in kB"));
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo("Node 0 MemTotal: 1 kB\nNode 0 MemFree: 2 kB")),
               Catch::Contains("exceeds MemTotal"));
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo(
                   "Node 0 MemTotal: 18446744073709551615 kB\nNode 0 MemFree: 1 kB")),
               Catch::Contains("overflows"));
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo(
                   "Node 0 MemTotal: 2 kB\nNode 0 MemTotal: 2 kB\nNode 0 MemFree: 1 kB")),
               Catch::Contains("twice"));
    CHECK_THAT(ErrorOf(parse::ParseNodeMeminfo("")), Catch::Contains("no 'MemTotal:' line"));
  }
}

TEST_CASE("/proc/self/status cpuset lines") {
  auto limits = parse::ParseProcStatus(
      "Name:\tserver\nCpus_allowed:\tff\nCpus_allowed_list:\t0-7\n"
      "Mems_allowed:\t00000000,00000003\nMems_allowed_list:\t0-1\nThreads:\t4\n");
  REQUIRE(limits.ok());
  CHECK(*limits->cpus_allowed == Range(0, 7));
  CHECK(*limits->mems_allowed == Ids{0, 1});

  auto none = parse::ParseProcStatus("Name:\tx\nState:\tR (running)\n");
  REQUIRE(none.ok());
  CHECK(!none->cpus_allowed.has_value());
  CHECK(!none->mems_allowed.has_value());

  CHECK_THAT(ErrorOf(parse::ParseProcStatus("Cpus_allowed_list:\t3-1\n")),
             Catch::Contains("Cpus_allowed_list") && Catch::Contains("reversed"));
  CHECK_THAT(ErrorOf(parse::ParseProcStatus("Mems_allowed_list:\t0\nMems_allowed_list:\t1\n")),
             Catch::Contains("twice"));
}

TEST_CASE("/proc/self/cgroup") {
  auto v2 = parse::ParseProcCgroup("0::/system.slice/vllm.service\n");
  REQUIRE(v2.ok());
  CHECK(*v2->unified == "/system.slice/vllm.service");
  CHECK(!v2->cpuset_v1.has_value());

  auto hybrid =
      parse::ParseProcCgroup("9:name=systemd:/\n4:memory:/x\n3:cpuset,cpuacct:/docker/abc\n0::/\n");
  REQUIRE(hybrid.ok());
  CHECK(*hybrid->unified == "/");
  CHECK(*hybrid->cpuset_v1 == "/docker/abc");

  auto colon_in_path = parse::ParseProcCgroup("0::/a:b\n");
  REQUIRE(colon_in_path.ok());
  CHECK(*colon_in_path->unified == "/a:b");

  CHECK(parse::ParseProcCgroup("").ok());
  CHECK_THAT(ErrorOf(parse::ParseProcCgroup("0::/a/../../etc\n")), Catch::Contains("'..'"));
  CHECK_THAT(ErrorOf(parse::ParseProcCgroup("0::relative\n")), Catch::Contains("start with '/'"));
  CHECK_THAT(ErrorOf(parse::ParseProcCgroup("garbage\n")),
             Catch::Contains("line 1") && Catch::Contains("hierarchy:controllers:path"));
  CHECK_THAT(ErrorOf(parse::ParseProcCgroup("x::/\n")), Catch::Contains("hierarchy id"));
}

TEST_CASE("PCI class, ids and numa_node") {
  CHECK(*parse::ParsePciClass("0x030200\n") == 0x030200u);
  CHECK(*parse::ParsePciClass("0x020700") == 0x020700u);
  CHECK(*parse::ParsePciClass("0X0300aB") == 0x0300abu);
  CHECK_THAT(ErrorOf(parse::ParsePciClass("030200")), Catch::Contains("hex number like 0x10de"));
  CHECK_THAT(ErrorOf(parse::ParsePciClass("0x")), Catch::Contains("hex number"));
  CHECK_THAT(ErrorOf(parse::ParsePciClass("0x1000000")), Catch::Contains("exceeds 0xffffff"));
  CHECK_THAT(ErrorOf(parse::ParsePciClass("0x03g200")), Catch::Contains("bad hex digit"));

  CHECK(*parse::ParseHexId("0x10de\n") == 0x10de);
  CHECK(*parse::ParseHexId("0x15b3") == 0x15b3);
  CHECK_THAT(ErrorOf(parse::ParseHexId("0x10000")), Catch::Contains("exceeds 0xffff"));
  CHECK_THAT(ErrorOf(parse::ParseHexId("nvidia")), Catch::Contains("PCI id"));

  CHECK(*parse::ParseNumaNode("0\n") == std::optional<int>(0));
  CHECK(*parse::ParseNumaNode("4") == std::optional<int>(4));
  CHECK(*parse::ParseNumaNode("-1\n") == std::nullopt);  // unknown, never node 0
  CHECK_THAT(ErrorOf(parse::ParseNumaNode("-2")), Catch::Contains("only negative value"));
  CHECK_THAT(ErrorOf(parse::ParseNumaNode("")), Catch::Contains("numa_node"));
  CHECK_THAT(ErrorOf(parse::ParseNumaNode("70000")), Catch::Contains("exceeds"));
}

TEST_CASE("decimal values and node entry names") {
  CHECK(*parse::ParseDecimalU64("204800\n") == 204800u);
  CHECK(*parse::ParseDecimalU64("18446744073709551615") == 18446744073709551615ull);
  CHECK_THAT(ErrorOf(parse::ParseDecimalU64("18446744073709551616")), Catch::Contains("exceeds"));
  CHECK_THAT(ErrorOf(parse::ParseDecimalU64("12 MB")), Catch::Contains("decimal"));

  CHECK(parse::ParseNodeEntryName("node0") == std::optional<int>(0));
  CHECK(parse::ParseNodeEntryName("node12") == std::optional<int>(12));
  CHECK(parse::ParseNodeEntryName("node") == std::nullopt);
  CHECK(parse::ParseNodeEntryName("read_bandwidth") == std::nullopt);
  CHECK(parse::ParseNodeEntryName("node1x") == std::nullopt);

  using KB = std::optional<std::uint64_t>;
  CHECK(parse::ParseHugePageDirName("hugepages-2048kB") == KB(2048));
  CHECK(parse::ParseHugePageDirName("hugepages-1048576kB") == KB(1048576));
  for (const char* bad : {"hugepages-kB", "hugepages-2048", "hugepages-3000kB", "hugepages-0kB",
                          "hugepages- 2048kB", "hugepages-+2048kB", "x-2048kB",
                          "hugepages-36028797018963968kB", "hugepages-99999999999999999999kB"}) {
    INFO(bad);
    CHECK(parse::ParseHugePageDirName(bad) == std::nullopt);
  }
}
