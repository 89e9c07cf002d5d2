// The C API's error reporting, shared by its source files (numarena_c.cpp, kv_c.cpp).
#pragma once

#include "numarena/numarena.h"
#include "numarena/status.hpp"

namespace numarena::capi {

// Records `status` as the calling thread's last error (numarena_last_error*) unless it is OK,
// and returns its numarena_code.
numarena_code RecordError(const Status& status);

}  // namespace numarena::capi
