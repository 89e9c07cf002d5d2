// The malloc override's /metrics endpoint (NUMARENA_METRICS_PORT), apart from the allocation
// paths in preload.cpp.
#pragma once

#include <string>

namespace numarena {
class Arena;
}

namespace numarena::preload {

// Reads NUMARENA_METRICS_PORT ("P", or a range "P-Q": the first free port of it, so that every
// process of a multi-process server serves its own), NUMARENA_METRICS_LISTEN (the address,
// default 127.0.0.1) and NUMARENA_METRICS_DEVICES (bus ids, comma-separated, of the GPUs/NICs
// the program serves: numarena_device_distance). Does nothing when NUMARENA_METRICS_PORT is
// unset or empty. Otherwise starts a detached thread serving GET /metrics (the node, process,
// `arena` and installed-budget figures of ops/metrics.hpp) through numarena::MetricsHttpServer;
// that thread first calls `mark_thread_inside`, so its allocations bypass the override.
// Returns what is wrong with a setting that cannot be read (the caller ends the process);
// when every port is taken it says so on stderr and returns "" (the program runs on).
std::string StartMetrics(Arena* arena, void (*mark_thread_inside)());

}  // namespace numarena::preload
