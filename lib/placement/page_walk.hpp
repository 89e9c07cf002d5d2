// Walking the pages of a range in fixed-size batches: the shared core of page_nodes,
// page_node_list, correct and prefault (page_nodes.cpp).
//
// A range given by a caller can be anything: it may wrap past the top of the address space,
// be far larger than memory (a 64 GiB PROT_NONE reservation), or span holes. The walk
// therefore checks its arithmetic, asks the kernel about at most kQueryPages pages at a time
// (12 bytes of stack a page, whatever the range size), and steps over a hole in one go
// (from /proc/self/maps) instead of page by page.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>

#include "numarena/status.hpp"

namespace numarena::placement_internal {

// Pages per move_pages(2) query.
inline constexpr std::size_t kQueryPages = 1024;

// A range widened to whole pages.
struct PageSpan {
  std::uintptr_t begin = 0;  // page-aligned
  std::size_t pages = 0;
};

// [ptr, ptr + len) widened to the pages it touches. InvalidArgument, naming `what`, when the
// range runs past the top of the address space (ptr + len, or its last page, wraps).
[[nodiscard]] StatusOr<PageSpan> WidenToPages(const void* ptr, std::size_t len,
                                              const std::string& what);

// Fills status[0, count) (count <= kQueryPages) with the node of each page from `first`
// on, or -errno: -ENOENT for a mapped page that is not resident (on every kernel; 6.1 says
// -EFAULT), -EFAULT for an unmapped one. Never faults a page in.
[[nodiscard]] Status QueryPages(std::uintptr_t first, std::size_t count, int* status);

// The number of unmapped pages from the page at `first` on, at most `limit`; 0 when that
// page is mapped.
[[nodiscard]] StatusOr<std::size_t> UnmappedPagesAt(std::uintptr_t first, std::size_t limit);

// Calls on_batch(index, status, count) for each batch of up to kQueryPages pages of `span`
// in order (index: the batch's first page in the span), or on_hole(index, count) for a run
// of unmapped pages of at least a batch. Stops at the first error, of the kernel or of a
// callback (which return Status).
template <typename OnBatch, typename OnHole>
Status WalkPages(const PageSpan& span, std::size_t page, OnBatch&& on_batch, OnHole&& on_hole) {
  int status[kQueryPages];
  for (std::size_t done = 0; done < span.pages;) {
    const std::size_t count = span.pages - done < kQueryPages ? span.pages - done : kQueryPages;
    const std::uintptr_t first = span.begin + done * page;
    if (Status s = QueryPages(first, count, status); !s.ok()) return s;
    bool all_unmapped = true;
    for (std::size_t i = 0; i < count && all_unmapped; ++i) all_unmapped = status[i] == -EFAULT;
    if (all_unmapped) {
      StatusOr<std::size_t> hole = UnmappedPagesAt(first, span.pages - done);
      if (!hole.ok()) return hole.status();
      if (*hole >= count) {
        if (Status s = on_hole(done, *hole); !s.ok()) return s;
        done += *hole;
        continue;
      }
    }
    if (Status s = on_batch(done, static_cast<const int*>(status), count); !s.ok()) return s;
    done += count;
  }
  return absl::OkStatus();
}

}  // namespace numarena::placement_internal
