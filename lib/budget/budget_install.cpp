// Installing a budget as the process-wide capacity gate of the page provider (budget.hpp).
//
// Kept apart from budget.cpp so that programs which use a Budget without arenas (tests,
// tools) do not link the arena layer.
#include "absl/strings/str_format.h"
#include "numarena/arena.hpp"
#include "numarena/budget.hpp"

namespace numarena {

Status InstallProcessBudget(Budget* budget) {
  CapacityGate* current = GetCapacityGate();
  if (budget != nullptr && current != nullptr && current != budget) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "InstallProcessBudget: another capacity gate (%p) is installed; spans it charged would "
        "be released to the new budget. Uninstall it first with InstallProcessBudget(nullptr) "
        "while nothing is allocated",
        static_cast<const void*>(current)));
  }
  SetCapacityGate(budget);
  return absl::OkStatus();
}

}  // namespace numarena
