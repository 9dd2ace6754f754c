// StoreProbe: partition detection for a member of a multi-node round. While this node's
// workers run a round, it checks that it reaches the other members' stores (every agent's
// store listens for the whole job; group rank 0's is the round's MASTER_ADDR:MASTER_PORT,
// which every worker must reach to start and to rejoin): a check is a TCP connection accepted
// within `timeout`, closed at once.
//
// Bounded in rate, so that a node of a 500-node job sends a few checks a second and each
// store receives a few: every `interval` it checks its ring neighbours (the next and the
// previous group rank), one more member in rotation (in a round of N nodes each member comes
// up every N-3 intervals or so; in step, the rotation sends each store about one check an
// interval), group rank 0 (every ceil(N/128) intervals, so that it sees at most about 128
// checks an interval), and again, each interval, any member whose last check
// failed (a suspect) until it answers or is reported. A member still being checked is not
// checked again.
//
// A partition between two members that are not ring neighbours is otherwise found only when
// the rotation reaches it, about N intervals: so on a sign of trouble the probe sweeps, i.e.
// checks every member at once, at most `sweep_concurrency` connections in flight (the rest
// as those complete). The signs: the first failed check of any member in a round (a node cut
// from one peer is often cut from more), and Sweep(cause), which the owner calls when the job
// looks hung (the rendezvous orders a job-wide stack dump, which every member sees: so both
// ends of the pair check each other). A sweep costs N checks once, not every interval. After
// `failures` failed checks of one member in a row it calls `unreachable` once for that member and
// round, with the last error
// ("10.0.0.7:29500: Connection refused").
//
// Only meaningful with the agent store (it listens for the whole job); with worker rank 0
// hosting the store nothing listens until the workers do, so the owner does not probe.
//
// Thread: loop only, fully asynchronous (resolve, connect, timers on the caller's
// io_context). Ownership: destroying the probe or calling Stop() cancels what is in flight;
// the callback never runs after that.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ftrun::launcher {

struct StoreProbeOptions {
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds timeout{2000};
  int failures = 3;
  size_t sweep_concurrency = 32;  // checks in flight during a sweep
};

// A member's store: its group rank and where the others reach it.
struct StoreTarget {
  int group_rank = 0;
  std::string host;
  int port = 0;
};

class StoreProbe {
 public:
  using Unreachable =
      std::function<void(uint64_t round, const StoreTarget& target, const std::string& error)>;

  StoreProbe(boost::asio::io_context& io, StoreProbeOptions options, Unreachable unreachable);
  ~StoreProbe();

  // Checks, for `round` of `nodes` nodes in which this node is group rank `self`, the stores
  // in `stores` (its own, if there, is skipped). A new round (or new stores) starts again from
  // no failures; the same round with the same stores again changes nothing.
  void Watch(uint64_t round, int self, int nodes, std::vector<StoreTarget> stores);
  void Stop();
  // Sweeps the current round's members (see above) for `cause`, a number that grows with each
  // new reason (the rendezvous' stack-dump order id): a cause not above the last one swept
  // changes nothing, so the same view applied again does not sweep again.
  void Sweep(uint64_t cause);
  // Checks completed so far, in all and of one group rank (for tests).
  int checks() const { return checks_; }
  int checks_of(int group_rank) const;
  // The most checks that were in flight at once (for tests).
  size_t max_in_flight() const { return max_in_flight_; }

 private:
  struct Peer {
    StoreTarget target;
    int failed = 0;  // failed checks in a row
    int checks = 0;
    bool in_flight = false;
    bool reported = false;
  };
  struct Attempt;

  void Tick();
  void Arm();
  // The group ranks to check at tick `tick_`.
  std::vector<int> Due();
  void Check(Peer& peer);
  void Done(int group_rank, const std::string& error);  // "" : reached
  void SweepNow(const std::string& why);                // `why` for the log line
  void Pump();  // starts the queued sweep checks the concurrency allows

  boost::asio::io_context& io_;
  StoreProbeOptions opts_;
  Unreachable unreachable_;
  boost::asio::steady_timer timer_;
  std::optional<uint64_t> round_;
  int self_ = 0;
  int nodes_ = 1;
  std::map<int, Peer> peers_;  // by group rank, without this node
  std::string stores_key_;     // the stores Watch was given, to tell a change
  uint64_t tick_ = 0;
  int checks_ = 0;
  // The checks in flight; the generation tells a stale handler (of a stopped or replaced
  // watch) from a current one.
  std::vector<std::shared_ptr<Attempt>> attempts_;
  uint64_t generation_ = 0;
  std::deque<int> sweep_queue_;    // group ranks the current sweep has still to check
  bool swept_this_round_ = false;  // a failed check sweeps only if nothing did this round
  uint64_t last_sweep_cause_ = 0;  // across rounds: a stack order is swept once
  size_t max_in_flight_ = 0;
};

}  // namespace ftrun::launcher
