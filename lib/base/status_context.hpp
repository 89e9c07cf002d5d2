// Adding context to a status as it travels up: each layer prefixes what it was doing
// ("AllocateOnNode(4096 bytes, node 1): mbind(...): Invalid argument"), keeping the code, so
// the message a caller reads names every step without any layer reformatting another's.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "numarena/status.hpp"

namespace numarena {

// `status` with "context: " before its message and the same code. OK stays OK.
inline Status WithContext(const Status& status, std::string_view context) {
  if (status.ok()) return status;
  return Status(status.code(), absl::StrCat(absl::string_view(context.data(), context.size()),
                                            ": ", absl::string_view(status.message())));
}

}  // namespace numarena
