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

// A child made by fork() without exec has none of the parent's threads, so no metrics thread,
// but it has copies of the parent's listening socket. These two give it its own endpoint:
//
// AbandonMetricsInForkedChild: for the atfork child handler, inside fork(). Closes the
// child's copies of the parent's server sockets (close() only: async-signal-safe, no lock, no
// allocation) and leaks the server object. Returns whether the process serves metrics
// (NUMARENA_METRICS_PORT was set), i.e. whether the child should restart them.
bool AbandonMetricsInForkedChild();
// RestartMetricsInForkedChild: later, from the child's ordinary code (preload.cpp calls it
// from the child's first allocation): listens on the first free port of the range again,
// which the parent's port is not, and starts the thread that serves it. Says on stderr when
// every port is taken, as at start-up.
void RestartMetricsInForkedChild();

}  // namespace numarena::preload
