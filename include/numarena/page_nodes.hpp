// Where the pages of a range really are, by the kernel's own answer.
//
// `page_nodes` asks the kernel (move_pages(2) with a null node list, in batches) which node
// holds each resident page of a range. It never faults a page in: pages not yet touched are
// counted apart as not resident. This is how numarena's tests, tools and first-touch
// correction verify placement. It works in fixed memory whatever the range's size, and
// steps over unmapped holes in one go.
#pragma once

#include <cstddef>
#include <map>
#include <vector>

#include "numarena/status.hpp"

namespace numarena {

// Per-node page counts of one range.
struct PageNodeCounts {
  std::size_t total_pages = 0;               // pages in the (page-rounded) range
  std::size_t not_resident = 0;              // never touched, or purged
  std::size_t unmapped = 0;                  // not mapped at all (EFAULT) or another error
  std::map<int, std::size_t> pages_on_node;  // node id -> resident pages there

  // Resident pages on `node` (0 when none).
  std::size_t on(int node) const;
  // Resident pages on any node.
  std::size_t resident() const;
};

// Counts the range's pages per node. The range is widened to whole pages. InvalidArgument
// when [ptr, ptr+len) runs past the end of the address space.
//
//   auto counts = numarena::page_nodes(buf, bytes);
//   if (counts.ok() && counts->on(1) == counts->total_pages) { /* all on node 1 */ }
[[nodiscard]] StatusOr<PageNodeCounts> page_nodes(const void* ptr, std::size_t len);

// The most pages page_node_list answers for (4 bytes each: 256 MiB of answer, a 256 GiB
// range of 4 KiB pages).
inline constexpr std::size_t kMaxPageNodeListPages = std::size_t{1} << 26;

// The node of every page of the range, in order; a negative entry is -errno from the kernel
// (-ENOENT: not resident, on every kernel version; -EFAULT: not mapped). For tests that
// assert page by page. InvalidArgument as page_nodes, and for a range of more than
// kMaxPageNodeListPages pages (use page_nodes, or ask in pieces).
[[nodiscard]] StatusOr<std::vector<int>> page_node_list(const void* ptr, std::size_t len);

}  // namespace numarena
