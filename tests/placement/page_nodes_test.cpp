// page_nodes on the host's one node: the counts are exact. Touched pages are on the host
// node, untouched and purged ones are not resident, holes in the range are unmapped, the
// range is widened to whole pages, and ranges longer than one move_pages batch (1024 pages)
// are counted page by page in order. Placement on several nodes is proven in the NUMA lab.
#include "numarena/page_nodes.hpp"

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "os/os.hpp"

namespace numarena {
namespace {

const std::size_t kPage = os::PageSize();

int HostNode() {
  int node = os::CurrentCpuAndNode().node;
  REQUIRE(node >= 0);
  return node;
}

struct Mapping {
  explicit Mapping(std::size_t pages) : bytes(pages * kPage) {
    auto p = os::MapAnonymous(bytes);
    REQUIRE(p.ok());
    data = static_cast<unsigned char*>(*p);
    // Base pages only: a transparent huge page would make one touch resident 512 pages.
    REQUIRE(os::AdviseNoHugePages(data, bytes).ok());
  }
  ~Mapping() { os::Unmap(data, bytes); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  unsigned char* page(std::size_t i) const { return data + i * kPage; }

  std::size_t bytes;
  unsigned char* data = nullptr;
};

TEST_CASE("an untouched range is all not resident") {
  Mapping map(32);
  auto counts = page_nodes(map.data, map.bytes);
  REQUIRE(counts.ok());
  CHECK(counts->total_pages == 32);
  CHECK(counts->not_resident == 32);
  CHECK(counts->unmapped == 0);
  CHECK(counts->resident() == 0);
  CHECK(counts->pages_on_node.empty());
  CHECK(counts->on(HostNode()) == 0);
}

TEST_CASE("touched pages are counted on the host node, the rest apart") {
  const int node = HostNode();
  Mapping map(40);
  for (std::size_t i = 0; i < 40; i += 4) map.page(i)[kPage - 1] = 1;  // 10 pages
  auto counts = page_nodes(map.data, map.bytes);
  REQUIRE(counts.ok());
  CHECK(counts->total_pages == 40);
  CHECK(counts->on(node) == 10);
  CHECK(counts->resident() == 10);
  CHECK(counts->not_resident == 30);
  CHECK(counts->unmapped == 0);
  CHECK(counts->on(node + 1) == 0);  // a node without pages

  auto list = page_node_list(map.data, map.bytes);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 40);
  for (std::size_t i = 0; i < 40; ++i) {
    INFO("page " << i);
    if (i % 4 == 0) {
      CHECK((*list)[i] == node);
    } else {
      CHECK((*list)[i] < 0);
    }
  }
}

TEST_CASE("purged pages are not resident again") {
  const int node = HostNode();
  Mapping map(16);
  std::memset(map.data, 7, map.bytes);
  REQUIRE(page_nodes(map.data, map.bytes)->on(node) == 16);
  REQUIRE(os::PurgeRange(map.page(4), 8 * kPage).ok());
  auto counts = page_nodes(map.data, map.bytes);
  REQUIRE(counts.ok());
  CHECK(counts->on(node) == 8);
  CHECK(counts->not_resident == 8);
}

TEST_CASE("a hole in the range is counted as unmapped, not as a node") {
  const int node = HostNode();
  Mapping map(6);
  std::memset(map.data, 1, map.bytes);
  os::Unmap(map.page(2), 2 * kPage);
  auto counts = page_nodes(map.data, map.bytes);
  REQUIRE(counts.ok());
  CHECK(counts->total_pages == 6);
  CHECK(counts->on(node) == 4);
  CHECK(counts->unmapped == 2);
  CHECK(counts->not_resident == 0);
  auto list = page_node_list(map.data, map.bytes);
  REQUIRE(list.ok());
  CHECK((*list)[2] == -EFAULT);
  CHECK((*list)[3] == -EFAULT);
}

TEST_CASE("the range is widened to whole pages") {
  const int node = HostNode();
  Mapping map(4);
  std::memset(map.data, 1, map.bytes);
  // One byte in the middle of a page: that page.
  auto one = page_nodes(map.page(1) + 100, 1);
  REQUIRE(one.ok());
  CHECK(one->total_pages == 1);
  CHECK(one->on(node) == 1);
  // Two bytes straddling a page boundary: both pages.
  auto two = page_nodes(map.page(2) - 1, 2);
  REQUIRE(two.ok());
  CHECK(two->total_pages == 2);
  // A whole page from its start: exactly one.
  auto exact = page_nodes(map.page(3), kPage);
  REQUIRE(exact.ok());
  CHECK(exact->total_pages == 1);
  // Nothing at an aligned address: no pages.
  auto none = page_nodes(map.page(0), 0);
  REQUIRE(none.ok());
  CHECK(none->total_pages == 0);
  CHECK(none->resident() == 0);
}

TEST_CASE("ranges longer than one move_pages batch are counted page by page, in order") {
  const int node = HostNode();
  constexpr std::size_t kPages = 2500;  // crosses two batch boundaries (1024, 2048)
  Mapping map(kPages);
  std::size_t touched = 0;
  for (std::size_t i = 0; i < kPages; ++i) {
    if (i % 3 == 0 || (i >= 1020 && i < 1030)) {
      map.page(i)[0] = 1;
      ++touched;
    }
  }
  auto list = page_node_list(map.data, map.bytes);
  REQUIRE(list.ok());
  REQUIRE(list->size() == kPages);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < kPages; ++i) {
    bool want_resident = i % 3 == 0 || (i >= 1020 && i < 1030);
    if (want_resident != ((*list)[i] == node)) ++mismatches;
  }
  CHECK(mismatches == 0);
  auto counts = page_nodes(map.data, map.bytes);
  REQUIRE(counts.ok());
  CHECK(counts->on(node) == touched);
  CHECK(counts->not_resident == kPages - touched);
}

TEST_CASE("a transparent huge page is reported for each of its base pages") {
  const int node = HostNode();
  const std::size_t kHuge = std::size_t{2} << 20;
  auto p = os::MapAnonymous(2 * kHuge, kHuge);
  REQUIRE(p.ok());
  auto* data = static_cast<unsigned char*>(*p);
  (void)os::AdviseHugePages(data, 2 * kHuge);  // advisory; the counts hold either way
  std::memset(data, 1, kHuge);
  auto counts = page_nodes(data, 2 * kHuge);
  REQUIRE(counts.ok());
  CHECK(counts->total_pages == 2 * kHuge / kPage);
  CHECK(counts->on(node) == kHuge / kPage);
  CHECK(counts->not_resident == kHuge / kPage);
  os::Unmap(data, 2 * kHuge);
}

}  // namespace
}  // namespace numarena
