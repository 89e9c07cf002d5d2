// Unit tests of the /proc/zoneinfo parser (lib/topology/zoneinfo_parse.hpp): a file captured
// in the NUMA lab (Linux 6.1, `tiny`), the same with the per-CPU fields newer kernels add,
// line-by-line feeding, node filtering, and every rejection.
#include "topology/zoneinfo_parse.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace parse = numarena::parse;

namespace {

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(NUMARENA_FIXTURES) + "/zoneinfo/" + name, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The sums of the captured file, counted by hand from its zones.
void CheckLabTiny(const std::vector<parse::ZoneinfoNode>& nodes) {
  REQUIRE(nodes.size() >= 2);
  CHECK(nodes[0].seen);
  CHECK(nodes[0].free_pages == 176394);
  CHECK(nodes[0].min_pages == 9089);
  CHECK(nodes[0].low_pages == 11360);
  CHECK(nodes[0].high_pages == 13631);
  CHECK(nodes[0].managed_pages == 185069);
  CHECK(nodes[0].pcp_pages == 2806);
  CHECK(nodes[1].seen);
  CHECK(nodes[1].free_pages == 60857);
  CHECK(nodes[1].min_pages == 3150);
  CHECK(nodes[1].low_pages == 3937);
  CHECK(nodes[1].high_pages == 4724);
  CHECK(nodes[1].managed_pages == 64366);
  CHECK(nodes[1].pcp_pages == 1032);  // "count:" only, not the lists' "high:" limits
}

}  // namespace

TEST_CASE("zoneinfo: a Linux 6.1 file from the lab, summed per node") {
  std::vector<parse::ZoneinfoNode> nodes(4);
  REQUIRE(parse::ParseZoneinfo(Fixture("linux-6.1-lab-tiny"), nodes).ok());
  CheckLabTiny(nodes);
  CHECK_FALSE(nodes[2].seen);
  CHECK(nodes[2].free_pages == 0);
}

TEST_CASE("zoneinfo: fields newer kernels add (high_min, high_max, ...) are skipped") {
  std::vector<parse::ZoneinfoNode> nodes(2);
  REQUIRE(parse::ParseZoneinfo(Fixture("linux-6.7-style-high-min-max"), nodes).ok());
  CheckLabTiny(nodes);
}

TEST_CASE("zoneinfo: fed line by line, with a window of nodes") {
  const std::string text = Fixture("linux-6.1-lab-tiny");
  parse::ZoneinfoNode one;
  parse::ZoneinfoParser parser(std::span<parse::ZoneinfoNode>(&one, 1), /*first_node=*/1);
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    // With the newline and a carriage return, as a line reader may pass them.
    REQUIRE(parser.Feed(text.substr(start, end - start) + "\r\n"));
    start = end + 1;
  }
  CHECK(parser.ok());
  CHECK(parser.error_line() == 0);
  CHECK(one.seen);
  CHECK(one.pcp_pages == 1032);
  CHECK(one.low_pages == 3937);
}

TEST_CASE("zoneinfo: malformed values are errors naming the line") {
  std::vector<parse::ZoneinfoNode> nodes(2);
  auto error_of = [&](const std::string& name) {
    numarena::Status s = parse::ParseZoneinfo(Fixture(name), nodes);
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  CHECK_THAT(error_of("bad-watermark"), Catch::Contains("line 3") && Catch::Contains("watermark"));
  CHECK_THAT(error_of("bad-count"), Catch::Contains("line 4") && Catch::Contains("count:"));
  CHECK_THAT(error_of("bad-node"), Catch::Contains("line 1") && Catch::Contains("node id"));

  for (const char* text : {"Node 1 zone DMA\n", "Node 1,\n", "Nodes 1, zone DMA\n",
                           "Node 70000, zone DMA\n", "garbage\n"}) {
    INFO(text);
    CHECK_FALSE(parse::ParseZoneinfo(text, nodes).ok());
  }
  // A sum that would wrap.
  CHECK_FALSE(parse::ParseZoneinfo("Node 0, zone A\n  pages free 18446744073709551615\n"
                                   "Node 0, zone B\n  pages free 1\n",
                                   nodes)
                  .ok());
  // Values of nodes outside the window are still checked.
  CHECK_FALSE(parse::ParseZoneinfo("Node 9, zone A\n        min      x\n", nodes).ok());
}

TEST_CASE("zoneinfo: after an error the parser stops and keeps the first error") {
  parse::ZoneinfoNode node;
  parse::ZoneinfoParser parser(std::span<parse::ZoneinfoNode>(&node, 1));
  CHECK(parser.Feed("Node 0, zone DMA"));
  CHECK_FALSE(parser.Feed("        low      twelve"));
  CHECK_FALSE(parser.Feed("        low      12"));
  CHECK_FALSE(parser.ok());
  CHECK(parser.error_line() == 2);
  CHECK(node.low_pages == 0);
}

TEST_CASE("zoneinfo: lines before the first zone and unknown lines are skipped") {
  std::vector<parse::ZoneinfoNode> nodes(1);
  REQUIRE(parse::ParseZoneinfo("  count: 5\n\nNode 0, zone DMA\n  whatever 12\n"
                               "  pagesets\n    cpu: 0\n      count: 7\n      high: 100\n"
                               "  node_unreclaimable:  0\n  count: 9\n  high 4\n",
                               nodes)
              .ok());
  CHECK(nodes[0].pcp_pages == 7);  // the count after node_unreclaimable: is not a list's
  CHECK(nodes[0].high_pages == 4);
}

TEST_CASE("NodeReserveBytes: 1/64 of the node within 16 MiB..1 GiB, at least the high watermark") {
  constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
  CHECK(parse::NodeReserveBytes(256 * kMiB, 0) == 16 * kMiB);
  CHECK(parse::NodeReserveBytes(256 * kMiB, 29 * kMiB) == 29 * kMiB);
  CHECK(parse::NodeReserveBytes(4096 * kMiB, 0) == 64 * kMiB);
  CHECK(parse::NodeReserveBytes(std::uint64_t{1} << 40, 0) == 1024 * kMiB);
  CHECK(parse::NodeReserveBytes(std::uint64_t{1} << 40, 2048 * kMiB) == 2048 * kMiB);
}

TEST_CASE("NodeObtainableBytes: free memory plus half the page cache beyond the low watermark") {
  constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
  CHECK(parse::NodeObtainableBytes(100 * kMiB, 0, 15 * kMiB) == 100 * kMiB);
  CHECK(parse::NodeObtainableBytes(100 * kMiB, 20 * kMiB, 15 * kMiB) == 100 * kMiB);  // all on per-CPU lists
  CHECK(parse::NodeObtainableBytes(100 * kMiB, 50 * kMiB, 15 * kMiB) == 110 * kMiB);
  CHECK(parse::NodeObtainableBytes(100 * kMiB, 50 * kMiB, 0) == 125 * kMiB);
  CHECK(parse::NodeObtainableBytes(UINT64_MAX - 1, UINT64_MAX, 0) == UINT64_MAX);  // no wrap
}
