// page_nodes: per-page node queries over a range (see page_nodes.hpp).
#include "numarena/page_nodes.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "os/os.hpp"

namespace numarena {

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
  const std::size_t page = os::PageSize();
  auto begin = reinterpret_cast<std::uintptr_t>(ptr) & ~(page - 1);
  auto end = (reinterpret_cast<std::uintptr_t>(ptr) + len + page - 1) & ~(page - 1);
  std::vector<void*> pages;
  pages.reserve((end - begin) / page);
  for (std::uintptr_t p = begin; p < end; p += page) pages.push_back(reinterpret_cast<void*>(p));
  std::vector<int> status(pages.size(), -ENOENT);
  if (Status s = os::QueryPageNodes(pages, status); !s.ok()) return s;
  // Kernels before 6.3 answer -EFAULT, not -ENOENT, for a mapped page that was never
  // touched (no page to look up). Ask the mapping itself, so "not resident" means the same
  // on every kernel and -EFAULT keeps meaning "not mapped".
  if (std::find(status.begin(), status.end(), -EFAULT) != status.end()) {
    auto whole = os::RangeIsMapped(reinterpret_cast<void*>(begin), end - begin);
    if (!whole.ok()) return whole.status();
    for (std::size_t i = 0; i < status.size(); ++i) {
      if (status[i] != -EFAULT) continue;
      bool mapped = *whole;
      if (!mapped) {
        auto one = os::RangeIsMapped(pages[i], page);
        if (!one.ok()) return one.status();
        mapped = *one;
      }
      if (mapped) status[i] = -ENOENT;
    }
  }
  return status;
}

StatusOr<PageNodeCounts> page_nodes(const void* ptr, std::size_t len) {
  auto list = page_node_list(ptr, len);
  if (!list.ok()) return list.status();
  PageNodeCounts counts;
  counts.total_pages = list->size();
  for (int node : *list) {
    if (node >= 0) {
      ++counts.pages_on_node[node];
    } else if (node == -ENOENT) {
      ++counts.not_resident;
    } else {
      ++counts.unmapped;
    }
  }
  return counts;
}

}  // namespace numarena
