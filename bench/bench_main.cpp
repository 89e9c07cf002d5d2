// The main() of every benchmark program: Google Benchmark's, run with one idle thread alive.
//
// glibc leaves the lock prefix out of pthread mutexes (and of malloc's arena locks) while a
// process has a single thread. A one-thread benchmark in a single-threaded process therefore
// times a mutex lock+unlock at about 3 ns where any server, which always has other threads,
// pays about 13 ns (measured on the 2-vCPU CI machine). The idle thread keeps every run on
// the multi-threaded path, so one-thread and two-thread results compare like for like.
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <mutex>
#include <thread>

int main(int argc, char** argv) {
  std::mutex mu;
  std::condition_variable wake;
  bool done = false;
  std::thread idle([&] {
    std::unique_lock lock(mu);
    wake.wait(lock, [&] { return done; });
  });
  benchmark::Initialize(&argc, argv);
  int status = 0;
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    status = 1;
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  benchmark::Shutdown();
  {
    std::lock_guard lock(mu);
    done = true;
  }
  wake.notify_one();
  idle.join();
  return status;
}
