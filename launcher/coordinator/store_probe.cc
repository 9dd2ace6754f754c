#include "launcher/coordinator/store_probe.h"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <set>

#include "common/log.h"

namespace ftrun::launcher {

struct StoreProbe::Attempt {
  explicit Attempt(boost::asio::io_context& io) : resolver(io), socket(io), deadline(io) {}
  boost::asio::ip::tcp::resolver resolver;
  boost::asio::ip::tcp::socket socket;
  boost::asio::steady_timer deadline;
  bool over = false;
  void Cancel() {
    over = true;
    resolver.cancel();
    boost::system::error_code ec;
    socket.close(ec);
    deadline.cancel();
  }
};

StoreProbe::StoreProbe(boost::asio::io_context& io, StoreProbeOptions options,
                       Unreachable unreachable)
    : io_(io), opts_(options), unreachable_(std::move(unreachable)), timer_(io) {}

StoreProbe::~StoreProbe() { Stop(); }

int StoreProbe::checks_of(int group_rank) const {
  auto it = peers_.find(group_rank);
  return it == peers_.end() ? 0 : it->second.checks;
}

void StoreProbe::Watch(uint64_t round, int self, int nodes, std::vector<StoreTarget> stores) {
  // The same round again changes nothing, unless its stores changed (a rebuilt round's first
  // views list none: they come once the master has taken it over).
  std::string key;
  for (const auto& t : stores) {
    key += std::to_string(t.group_rank) + " " + t.host + " " + std::to_string(t.port) + "\n";
  }
  if (round_ == round && self_ == self && key == stores_key_) return;
  Stop();
  stores_key_ = std::move(key);
  round_ = round;
  self_ = self;
  nodes_ = std::max(1, nodes);
  peers_.clear();
  for (auto& t : stores) {
    if (t.group_rank == self || t.port <= 0 || t.host.empty()) continue;
    Peer p;
    p.target = std::move(t);
    peers_.emplace(p.target.group_rank, std::move(p));
  }
  tick_ = 0;
  swept_this_round_ = false;
  if (!peers_.empty()) Arm();
}

void StoreProbe::Sweep(uint64_t cause) {
  if (cause <= last_sweep_cause_) return;
  last_sweep_cause_ = cause;
  if (round_) SweepNow("a job-wide stack dump (a suspected hang)");
}

void StoreProbe::SweepNow(const std::string& why) {
  swept_this_round_ = true;
  LauncherLog()->info("partition check: {}: checking the stores of all {} other member(s) now", why,
                      peers_.size());
  sweep_queue_.clear();
  for (const auto& [rank, p] : peers_) {
    if (!p.in_flight && !p.reported) sweep_queue_.push_back(rank);
  }
  Pump();
}

void StoreProbe::Pump() {
  const size_t limit = std::max<size_t>(1, opts_.sweep_concurrency);
  while (!sweep_queue_.empty() && attempts_.size() < limit) {
    auto it = peers_.find(sweep_queue_.front());
    sweep_queue_.pop_front();
    if (it != peers_.end() && !it->second.in_flight && !it->second.reported) Check(it->second);
  }
}

void StoreProbe::Stop() {
  ++generation_;
  round_.reset();
  timer_.cancel();
  for (auto& a : attempts_) a->Cancel();
  attempts_.clear();
  sweep_queue_.clear();
  for (auto& [rank, p] : peers_) p.in_flight = false;
}

void StoreProbe::Arm() {
  timer_.expires_after(opts_.interval);
  timer_.async_wait([this, gen = generation_](const boost::system::error_code& ec) {
    if (!ec && gen == generation_) Tick();
  });
}

std::vector<int> StoreProbe::Due() {
  std::vector<int> ranks;
  for (const auto& [rank, p] : peers_) ranks.push_back(rank);  // sorted
  std::set<int> due;
  auto after = std::upper_bound(ranks.begin(), ranks.end(), self_);
  const int next = after == ranks.end() ? ranks.front() : *after;
  auto before = std::lower_bound(ranks.begin(), ranks.end(), self_);
  const int previous = before == ranks.begin() ? ranks.back() : *(before - 1);
  due.insert(next);
  due.insert(previous);
  const bool has_leader = peers_.count(0) != 0;
  // Every ceil(N/128) intervals: group rank 0 sees at most 128 checks an interval.
  if (has_leader && tick_ % static_cast<uint64_t>((nodes_ + 127) / 128) == 0) due.insert(0);
  std::vector<int> others;
  for (int r : ranks) {
    if (r != next && r != previous && r != 0) others.push_back(r);
  }
  if (!others.empty()) {
    // Offset by this node's rank: members in step check different stores each interval.
    due.insert(others[(static_cast<uint64_t>(self_) + tick_) % others.size()]);
  }
  for (const auto& [rank, p] : peers_) {
    if (p.failed > 0 && !p.reported) due.insert(rank);
  }
  return {due.begin(), due.end()};
}

void StoreProbe::Tick() {
  for (int rank : Due()) {
    Peer& p = peers_.at(rank);
    if (!p.in_flight && !p.reported) Check(p);
  }
  ++tick_;
  Arm();
}

void StoreProbe::Check(Peer& peer) {
  auto a = std::make_shared<Attempt>(io_);
  attempts_.push_back(a);
  max_in_flight_ = std::max(max_in_flight_, attempts_.size());
  peer.in_flight = true;
  const uint64_t gen = generation_;
  const int rank = peer.target.group_rank;
  auto finish = [this, a, gen, rank](const std::string& error) {
    if (a->over || gen != generation_) return;
    a->Cancel();
    attempts_.erase(std::remove(attempts_.begin(), attempts_.end(), a), attempts_.end());
    Done(rank, error);
  };
  a->deadline.expires_after(opts_.timeout);
  a->deadline.async_wait([finish, t = opts_.timeout](const boost::system::error_code& ec) {
    if (!ec) finish("no answer within " + std::to_string(t.count()) + " ms");
  });
  a->resolver.async_resolve(
      peer.target.host, std::to_string(peer.target.port),
      [a, finish](const boost::system::error_code& ec,
                  boost::asio::ip::tcp::resolver::results_type results) {
        if (a->over) return;
        if (ec) return finish(ec.message());
        boost::asio::async_connect(
            a->socket, results,
            [finish](const boost::system::error_code& ec, const boost::asio::ip::tcp::endpoint&) {
              finish(ec ? ec.message() : "");
            });
      });
}

void StoreProbe::Done(int group_rank, const std::string& error) {
  auto it = peers_.find(group_rank);
  if (!round_ || it == peers_.end()) return;
  Peer& p = it->second;
  p.in_flight = false;
  ++p.checks;
  ++checks_;
  if (error.empty()) {
    p.failed = 0;
  } else if (++p.failed >= opts_.failures && !p.reported) {
    p.reported = true;
    unreachable_(*round_, p.target,
                 p.target.host + ":" + std::to_string(p.target.port) + ": " + error);
    return;  // the callback may have stopped or replaced the watch
  }
  if (!error.empty() && !swept_this_round_) {
    return SweepNow("group rank " + std::to_string(group_rank) + "'s store did not answer");
  }
  Pump();
}

}  // namespace ftrun::launcher
