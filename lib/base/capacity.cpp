// Thread priority scopes for the capacity gate (see capacity.hpp).
#include "numarena/capacity.hpp"

namespace numarena {
namespace {
thread_local Priority current_priority = Priority::kNormal;
}  // namespace

const char* PriorityName(Priority priority) {
  switch (priority) {
    case Priority::kHigh:
      return "high";
    case Priority::kNormal:
      return "normal";
    case Priority::kLow:
      return "low";
  }
  return "?";
}

Priority CurrentPriority() { return current_priority; }

PriorityScope::PriorityScope(Priority priority) : previous_(current_priority) {
  current_priority = priority;
}

PriorityScope::~PriorityScope() { current_priority = previous_; }

}  // namespace numarena
