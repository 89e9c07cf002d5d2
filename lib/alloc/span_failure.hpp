// Why the last span operation of this thread failed (SpanFailure), written by the
// free-memory guard and the node page provider inside jemalloc's extent hooks and turned into
// a Status by the arena's slow path (span_failure.cpp, node_pages.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "numarena/status.hpp"

namespace numarena {

// Why the last span operation of this thread failed. Written inside extent hooks (no
// allocation: `gate_status` is a copy of the gate's status, a reference-count increment)
// and read by the arena's slow path.
struct SpanFailure {
  enum class Kind : unsigned char {
    kNone,
    kGateRefused,   // CapacityGate::Charge said no (gate_status)
    kNodeFull,      // the node's free memory is below the safety margin
    kBind,          // mbind refused for a Strict placement (err)
    kMap,           // mprotect / mmap failed (err)
    kHugetlb,       // no hugetlbfs pages (err)
    kAddressSpace,  // the provider's address ranges are exhausted
    kNeverFits,     // bytes exceed the MemTotal of every placement node together (node_total)
    kBadPriority,   // the thread's Priority is not one of the enum's values (err)
  };
  Kind kind = Kind::kNone;
  int node = -1;
  int err = 0;
  std::size_t bytes = 0;
  std::int64_t node_available = 0;  // kNodeFull: bytes the guard saw available
  std::int64_t node_total = 0;      // kNodeFull: the node's MemTotal
  std::int64_t margin = 0;          // kNodeFull: the safety margin kept free
  // kNodeFull: bytes of spans numarena committed on the node and has not written yet, which
  // its free memory does not show as used (already subtracted from node_available).
  std::int64_t node_unwritten = 0;
  std::size_t huge_page_bytes = 0;  // kHugetlb
  Status gate_status;

  bool failed() const { return kind != Kind::kNone; }
  void Clear();  // not allocation-free (may drop the last reference of gate_status)
  // The failure as a Status (OK when none); `what` names the operation.
  Status ToStatus(const std::string& what) const;
};
SpanFailure& ThreadSpanFailure();

}  // namespace numarena
