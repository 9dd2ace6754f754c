// RunningOperation: the owner's handle on an asynchronous operation whose state is shared
// with its pending callbacks (which keep that state alive). Destroying the handle abandons
// the operation: `abandon` stops it, and the operation's completion handler must not run
// afterwards. One owner: not copyable. Thread: the owner's (the loop).
#pragma once

#include <functional>
#include <utility>

namespace ftrun {

class RunningOperation {
 public:
  explicit RunningOperation(std::function<void()> abandon) : abandon_(std::move(abandon)) {}
  ~RunningOperation() {
    if (abandon_) abandon_();
  }
  RunningOperation(const RunningOperation&) = delete;
  RunningOperation& operator=(const RunningOperation&) = delete;

 private:
  std::function<void()> abandon_;
};

}  // namespace ftrun
