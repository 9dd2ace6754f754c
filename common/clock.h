// Clock: the agent's source of time and timers, so that what waits (grace periods, hang
// checks, save deadlines) can be driven by a fake clock in tests.
//
// Timer contract: Start() replaces any pending expiry; after Cancel() (or the Timer's
// destruction) the callback never runs, even if the expiry was already due. The callback runs
// on the loop the clock belongs to, never inside Start() or Cancel().
//
// Thread: loop only. Ownership: a Timer must not outlive its Clock.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace ftrun {

class Timer {
 public:
  virtual ~Timer() = default;
  virtual void Start(std::chrono::steady_clock::duration after, std::function<void()> fire) = 0;
  virtual void Cancel() = 0;
};

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  virtual std::unique_ptr<Timer> NewTimer() = 0;
};

// The real clock: std::chrono::steady_clock and Asio timers on `io`.
std::unique_ptr<Clock> MakeSteadyClock(boost::asio::io_context& io);

// A duration of any unit as the clock's, for Timer::Start.
template <typename Rep, typename Period>
std::chrono::steady_clock::duration ClockDuration(std::chrono::duration<Rep, Period> d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(d);
}

// Whole seconds since the Unix epoch (wall time, for records read by people and tools).
inline int64_t WallSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ftrun
