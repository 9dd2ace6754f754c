// StandbyPool: the standby interpreters of --warm-restart as a pure state machine (no I/O,
// time passed in): which exist, in which state, which to start or kill next, and which one a
// starting worker can take over. WarmSpawner (warm_spawner.h) does the I/O.
//
// A standby is made for a key (python_command.h: same command and environment): the workers
// of the latest attempt say which keys the next attempt wants, one standby each.
//
//   (spawn) -> starting --"ready"--> ready --Take--> handing-over --HandedOver--> (a worker)
//                 |                    |                   |
//                 | died, broken,      | died              | HandOverFailed (killed)
//                 | not ready in time  |                   |
//                 v                    v                   v
//               dead <-----------------+-------------------+   (removed once it has exited)
//
// A standby that died is replaced after a back-off (doubling, reset by a hand-over); surplus
// standbys (the wanted keys changed) are killed. The pool turns itself off for the rest of the
// job when a preloaded module cannot be imported (or touched the GPU), or after
// `max_startup_failures` standbys in a row died before they were ready: every worker then starts
// cold, as without --warm-restart.
//
// Thread: loop only (not thread-safe). Errors: none; reasons are strings for the log.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ftrun::launcher {

struct StandbyPoolOptions {
  std::chrono::milliseconds refill_delay{300};      // after a start of workers, before new standbys
  std::chrono::milliseconds ready_timeout{300000};  // starting longer than this: hung, killed
  std::chrono::milliseconds backoff_initial{1000};  // before replacing a standby that died
  std::chrono::milliseconds backoff_max{60000};
  int max_startup_failures = 3;
};

enum class StandbyState { kStarting, kReady, kHandingOver, kDead };
const char* StandbyStateName(StandbyState s);

class StandbyPool {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Action {
    enum class Kind { kSpawn, kKill };
    Kind kind;
    uint64_t id;
    std::string key;  // kSpawn: what to start
    std::string why;  // kKill: for the log
  };
  // Take's answer: a standby to hand over (id != 0), else why none ("no_standby",
  // "standby_starting", "standby_died ...", "warm_restart_off ...").
  struct Pick {
    uint64_t id = 0;
    std::string reason;
  };

  explicit StandbyPool(StandbyPoolOptions options = {}) : opts_(options) {}

  Pick Take(const std::string& key);
  void HandedOver(uint64_t id);
  // The standby did not take the hand-over; the caller kills it.
  void HandOverFailed(uint64_t id, const std::string& why, TimePoint now);
  // The workers just started want one standby each for the next attempt (count per key).
  void Want(const std::map<std::string, int>& keys, TimePoint now);

  void Ready(uint64_t id);
  // The standby reported that it cannot serve (then it exits by itself).
  void Broken(uint64_t id, const std::string& reason, const std::string& detail, TimePoint now);
  // A standby's process ended (`how`: "signal 9 (SIGKILL)", ...). Unknown ids are ignored.
  void Exited(uint64_t id, const std::string& how, TimePoint now);
  // A spawn the pool asked for could not be done.
  void SpawnFailed(uint64_t id, const std::string& why, TimePoint now);

  // What to do now: standbys to start (wanted, back-off over) and to kill (hung, surplus).
  std::vector<Action> Poll(TimePoint now);
  // When Poll next has something to do (nullopt: only on an event).
  std::optional<TimePoint> NextDeadline() const;
  // The job is over: the pool goes off; returns the standbys to kill.
  std::vector<uint64_t> Shutdown();

  bool off() const { return !off_reason_.empty(); }
  const std::string& off_reason() const { return off_reason_; }
  std::optional<StandbyState> state(uint64_t id) const;
  // Standbys in `s`.
  size_t Count(StandbyState s) const;

 private:
  struct Slot {
    std::string key;
    StandbyState state = StandbyState::kStarting;
    TimePoint started;
  };
  void Died(const std::string& key, const std::string& how, bool before_ready, TimePoint now);
  void TurnOff(const std::string& why);
  int LiveCount(const std::string& key) const;

  StandbyPoolOptions opts_;
  std::map<uint64_t, Slot> slots_;
  std::map<std::string, int> wanted_;
  std::map<std::string, std::string> last_death_;  // per key, for Take's reason
  TimePoint next_spawn_{};
  int deaths_ = 0;            // since the last hand-over: the back-off's exponent
  int startup_failures_ = 0;  // in a row, before ready
  uint64_t next_id_ = 1;
  std::string off_reason_;
};

}  // namespace ftrun::launcher
