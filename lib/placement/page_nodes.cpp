// page_nodes: per-page node queries over a range (see page_nodes.hpp), in fixed-size batches
// (page_walk.hpp).
#include "numarena/page_nodes.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/checked_math.hpp"
#include "os/os.hpp"
#include "placement/page_walk.hpp"

namespace numarena {

namespace placement_internal {

StatusOr<PageSpan> WidenToPages(const void* ptr, std::size_t len, const std::string& what) {
  const std::size_t page = os::PageSize();
  const auto start = reinterpret_cast<std::uintptr_t>(ptr);
  const std::optional<std::uintptr_t> end = RangeEndChecked(ptr, len);
  if (!end || *end > UINTPTR_MAX - (page - 1)) {  // the end or its page rounding wraps
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the range of ", len, " bytes from 0x", absl::Hex(start),
        " runs past the end of the address space; pass the length of memory you mapped"));
  }
  PageSpan span;
  span.begin = start & ~(page - 1);
  span.pages = (((*end + page - 1) & ~(page - 1)) - span.begin) / page;
  return span;
}

Status QueryPages(std::uintptr_t first, std::size_t count, int* status) {
  const std::size_t page = os::PageSize();
  void* pages[kQueryPages];
  for (std::size_t i = 0; i < count; ++i) {
    pages[i] = reinterpret_cast<void*>(first + i * page);
    status[i] = -ENOENT;
  }
  if (Status s = os::QueryPageNodes({pages, count}, {status, count}); !s.ok()) return s;
  // Kernels before 6.3 answer -EFAULT, not -ENOENT, for a mapped page that was never
  // touched (no page to look up). Ask the mapping itself, so "not resident" means the same
  // on every kernel and -EFAULT keeps meaning "not mapped".
  if (std::find(status, status + count, -EFAULT) == status + count) return absl::OkStatus();
  auto whole = os::RangeIsMapped(pages[0], count * page);
  if (!whole.ok()) return whole.status();
  for (std::size_t i = 0; i < count; ++i) {
    if (status[i] != -EFAULT) continue;
    bool mapped = *whole;
    if (!mapped) {
      auto one = os::RangeIsMapped(pages[i], page);
      if (!one.ok()) return one.status();
      mapped = *one;
    }
    if (mapped) status[i] = -ENOENT;
  }
  return absl::OkStatus();
}

StatusOr<std::size_t> UnmappedPagesAt(std::uintptr_t first, std::size_t limit) {
  StatusOr<std::uintptr_t> next = os::NextMappingStart(first);
  if (!next.ok()) return next.status();
  if (*next <= first) return std::size_t{0};
  return static_cast<std::size_t>(
      std::min<std::uintptr_t>((*next - first) / os::PageSize(), limit));
}

}  // namespace placement_internal

using placement_internal::PageSpan;
using placement_internal::WalkPages;
using placement_internal::WidenToPages;

std::size_t PageNodeCounts::on(int node) const {
  auto it = pages_on_node.find(node);
  return it == pages_on_node.end() ? 0 : it->second;
}

std::size_t PageNodeCounts::resident() const {
  std::size_t sum = 0;
  for (const auto& [node, pages] : pages_on_node) sum += pages;
  return sum;
}

StatusOr<std::vector<int>> page_node_list(const void* ptr, std::size_t len) {
  StatusOr<PageSpan> span = WidenToPages(ptr, len, "page_node_list");
  if (!span.ok()) return span.status();
  if (span->pages > kMaxPageNodeListPages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_node_list: the range has ", span->pages, " pages; the answer would take ",
        span->pages * sizeof(int) >> 20, " MiB (at most ", kMaxPageNodeListPages,
        " pages are listed); use page_nodes, which counts in fixed memory, or ask in pieces"));
  }
  std::vector<int> nodes;
  nodes.reserve(span->pages);
  Status walked = WalkPages(
      *span, os::PageSize(),
      [&](std::size_t, const int* status, std::size_t count) {
        nodes.insert(nodes.end(), status, status + count);
        return absl::OkStatus();
      },
      [&](std::size_t, std::size_t count) {
        nodes.insert(nodes.end(), count, -EFAULT);
        return absl::OkStatus();
      });
  if (!walked.ok()) return walked;
  return nodes;
}

StatusOr<PageNodeCounts> page_nodes(const void* ptr, std::size_t len) {
  StatusOr<PageSpan> span = WidenToPages(ptr, len, "page_nodes");
  if (!span.ok()) return span.status();
  PageNodeCounts counts;
  counts.total_pages = span->pages;
  Status walked = WalkPages(
      *span, os::PageSize(),
      [&](std::size_t, const int* status, std::size_t count) {
        for (std::size_t i = 0; i < count; ++i) {
          if (status[i] >= 0) {
            ++counts.pages_on_node[status[i]];
          } else if (status[i] == -ENOENT) {
            ++counts.not_resident;
          } else {
            ++counts.unmapped;
          }
        }
        return absl::OkStatus();
      },
      [&](std::size_t, std::size_t count) {
        counts.unmapped += count;
        return absl::OkStatus();
      });
  if (!walked.ok()) return walked;
  return counts;
}

}  // namespace numarena
