// A thread that runs a body which, at some point, publishes a value and sleeps until the test
// releases it: for tests of what happens to a thread's caches while it sleeps. Joined (released
// first) when destroyed, so a failed REQUIRE leaves no thread behind.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace numarena::testing {

// Runs `body` on a thread that, once it reaches Wait(), blocks until Release(); joined when
// this goes out of scope (released first), so a failed REQUIRE in the test leaves no thread
// behind.
class SleepingThread {
 public:
  template <typename Body>
  explicit SleepingThread(Body body) : thread_([this, body] { body(*this); }) {}
  ~SleepingThread() { Join(); }
  // On the thread: publish `value`, then block until Release().
  void Wait(void* value) {
    std::unique_lock<std::mutex> lock(mutex_);
    value_ = value;
    reached_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return released_; });
  }
  // On the test's thread: what the thread published once it waits.
  void* Reached() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return reached_; });
    return value_;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }
  void Join() {
    Release();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  void* value_ = nullptr;
  bool reached_ = false;
  bool released_ = false;
  std::thread thread_;
};

}  // namespace numarena::testing
