// A capacity gate for tests: one byte limit for all nodes together, which the test may move;
// what is charged now, in all and per priority; and how many charges it refused. With
// GateScope, which installs it for a scope (numarena::SetCapacityGate) and uninstalls it.
//
//   LimitGate gate(16 << 20);
//   GateScope scope(&gate);
//   void* p = arena->allocate(64 << 20);  // nullptr: "limit gate: node 0 is full"
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "numarena/arena.hpp"
#include "numarena/capacity.hpp"

namespace numarena_test {

class LimitGate : public numarena::CapacityGate {
 public:
  explicit LimitGate(std::size_t limit) : limit_(limit) {}
  numarena::Status Charge(int node, std::size_t bytes, numarena::Priority priority) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (used_ > limit_ || bytes > limit_ - used_) {  // the limit may have moved below used_
      ++refused_;
      return absl::ResourceExhaustedError(absl::StrCat("limit gate: node ", node, " is full"));
    }
    used_ += bytes;
    by_priority_[priority] += static_cast<long long>(bytes);
    return absl::OkStatus();
  }
  void Release(int, std::size_t bytes, numarena::Priority priority) override {
    std::lock_guard<std::mutex> lock(mutex_);
    used_ -= bytes;
    by_priority_[priority] -= static_cast<long long>(bytes);
  }
  std::size_t used() {
    std::lock_guard<std::mutex> lock(mutex_);
    return used_;
  }
  long long by(numarena::Priority priority) {
    std::lock_guard<std::mutex> lock(mutex_);
    return by_priority_[priority];
  }
  int refused() {
    std::lock_guard<std::mutex> lock(mutex_);
    return refused_;
  }
  void set_limit(std::size_t limit) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = limit;
  }

 private:
  std::mutex mutex_;
  std::size_t limit_;
  std::size_t used_ = 0;
  int refused_ = 0;
  std::map<numarena::Priority, long long> by_priority_;
};

struct GateScope {
  explicit GateScope(numarena::CapacityGate* gate) { numarena::SetCapacityGate(gate); }
  ~GateScope() { numarena::SetCapacityGate(nullptr); }
  GateScope(const GateScope&) = delete;
  GateScope& operator=(const GateScope&) = delete;
};

}  // namespace numarena_test
