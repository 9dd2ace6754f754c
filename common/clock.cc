#include "common/clock.h"

#include <boost/asio/steady_timer.hpp>

namespace ftrun {
namespace {

class SteadyTimer : public Timer {
 public:
  explicit SteadyTimer(boost::asio::io_context& io) : timer_(io) {}
  ~SteadyTimer() override {
    *alive_ = false;  // a completion already queued must not touch this object
    timer_.cancel();
  }

  void Start(std::chrono::steady_clock::duration after, std::function<void()> fire) override {
    // The generation makes a completion that was already queued when we cancelled a no-op.
    const uint64_t generation = ++generation_;
    timer_.expires_after(after);
    timer_.async_wait([this, alive = alive_, generation,
                       fire = std::move(fire)](const boost::system::error_code& ec) {
      if (ec || !*alive || generation != generation_) return;
      fire();
    });
  }

  void Cancel() override {
    ++generation_;
    timer_.cancel();
  }

 private:
  boost::asio::steady_timer timer_;
  uint64_t generation_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

class SteadyClock : public Clock {
 public:
  explicit SteadyClock(boost::asio::io_context& io) : io_(io) {}
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  std::unique_ptr<Timer> NewTimer() override { return std::make_unique<SteadyTimer>(io_); }

 private:
  boost::asio::io_context& io_;
};

}  // namespace

std::unique_ptr<Clock> MakeSteadyClock(boost::asio::io_context& io) {
  return std::make_unique<SteadyClock>(io);
}

}  // namespace ftrun
