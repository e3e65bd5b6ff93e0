// Releases of resources taken one after another (driver contexts, pinned memory, streams),
// run in reverse order when the stack goes. As a member of an engine, it also releases what a
// constructor took before it threw: the members built so far are destroyed then, the
// destructor's body is not run.
#pragma once

#include <functional>
#include <utility>
#include <vector>

namespace iris::daemon {

class ReleaseStack {
 public:
  ReleaseStack() = default;
  ReleaseStack(const ReleaseStack&) = delete;
  ReleaseStack& operator=(const ReleaseStack&) = delete;
  ~ReleaseStack() {
    while (!releases_.empty()) {
      releases_.back()();
      releases_.pop_back();
    }
  }
  void push(std::function<void()> release) { releases_.push_back(std::move(release)); }

 private:
  std::vector<std::function<void()>> releases_;
};

}  // namespace iris::daemon
