// SpanFailure: the thread's last span failure (see span_failure.hpp; its Status is made in
// node_pages.cpp, which knows the provider's limits).
#include "alloc/span_failure.hpp"

namespace numarena {

void SpanFailure::Clear() { *this = SpanFailure(); }

SpanFailure& ThreadSpanFailure() {
  thread_local SpanFailure failure;
  return failure;
}

}  // namespace numarena
