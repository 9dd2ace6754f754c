// FakeClock: a Clock whose time moves only when a test calls Advance(). Timers fire inside
// Advance(), in order of expiry, each at its own instant (Now() says so while it runs).
// Starts at the real steady_clock's now, so times other parts take from the real clock
// (e.g. a control channel's last progress) compare sensibly with it.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>

#include "common/clock.h"

namespace ftrun::testing {

class FakeClock : public Clock {
 public:
  TimePoint Now() const override { return now_; }

  std::unique_ptr<Timer> NewTimer() override { return std::make_unique<FakeTimer>(*this); }

  // Moves time forward by `d`, firing every timer that falls due on the way.
  void Advance(std::chrono::steady_clock::duration d) {
    const TimePoint until = now_ + d;
    while (FakeTimer* next = NextDue(until)) {
      now_ = *next->at;
      next->at.reset();
      auto fire = std::move(next->fire);  // the callback may restart or destroy its timer
      fire();
    }
    now_ = until;
  }
  template <typename Rep, typename Period>
  void Advance(std::chrono::duration<Rep, Period> d) {
    Advance(std::chrono::duration_cast<std::chrono::steady_clock::duration>(d));
  }

  // Timers started and not yet fired or cancelled.
  size_t pending() const {
    return std::count_if(timers_.begin(), timers_.end(), [](auto* t) { return t->at.has_value(); });
  }

 private:
  struct FakeTimer : Timer {
    explicit FakeTimer(FakeClock& c) : clock(c) { clock.timers_.insert(this); }
    ~FakeTimer() override { clock.timers_.erase(this); }
    void Start(std::chrono::steady_clock::duration after, std::function<void()> f) override {
      at = clock.now_ + after;
      seq = ++clock.seq_;
      fire = std::move(f);
    }
    void Cancel() override {
      at.reset();
      fire = nullptr;
    }
    FakeClock& clock;
    std::optional<TimePoint> at;
    uint64_t seq = 0;
    std::function<void()> fire;
  };

  FakeTimer* NextDue(TimePoint until) const {
    FakeTimer* best = nullptr;
    for (FakeTimer* t : timers_) {
      if (!t->at || *t->at > until) continue;
      if (!best || *t->at < *best->at || (*t->at == *best->at && t->seq < best->seq)) best = t;
    }
    return best;
  }

  TimePoint now_ = std::chrono::steady_clock::now();
  uint64_t seq_ = 0;
  std::set<FakeTimer*> timers_;
};

}  // namespace ftrun::testing
