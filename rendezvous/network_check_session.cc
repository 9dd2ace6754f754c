#include "rendezvous/network_check_session.h"

#include <fmt/format.h>

#include <algorithm>

namespace ftrun::rendezvous {
namespace {

// Slack on top of the pair timeout: the agents' own timers fire first and report the reason.
constexpr Duration kWaveSlack{5};

}  // namespace

NetworkCheckSession::NetworkCheckSession(std::vector<NodeInfo> members, CheckSettings settings,
                                         uint64_t first_id, TimePoint now, std::string probe_key)
    : members_(std::move(members)),
      settings_(settings),
      probe_key_(std::move(probe_key)),
      next_id_(first_id) {
  for (const auto& m : members_) ids_.push_back(m.node_id);
  options_.straggler_fraction = settings_.straggler_fraction;
  options_.min_bandwidth_mbps = settings_.min_bandwidth_mbps;
  StartRound(0, PlanRound0(ids_), now);
}

const NodeInfo* NetworkCheckSession::Member(const std::string& node_id) const {
  for (const auto& m : members_) {
    if (m.node_id == node_id) return &m;
  }
  return nullptr;
}

std::string NetworkCheckSession::HostOf(const std::string& node_id) const {
  const NodeInfo* m = Member(node_id);
  return m ? m->host : node_id;
}

void NetworkCheckSession::StartRound(int round, std::vector<CheckPair> pairs, TimePoint now) {
  round_ = round;
  round_pairs_ = std::move(pairs);
  wave_ = -1;
  last_wave_ = -1;
  for (const auto& p : round_pairs_) last_wave_ = std::max(last_wave_, p.wave);
  if (round_pairs_.empty()) {
    report_ = Evaluate(ids_, results_[0], results_[1], options_);
    done_ = true;
    return;
  }
  StartWave(now);
}

void NetworkCheckSession::StartWave(TimePoint now) {
  pending_.clear();
  while (pending_.empty() && wave_ < last_wave_) {
    ++wave_;
    for (size_t i = 0; i < round_pairs_.size(); ++i) {
      if (round_pairs_[i].wave == wave_) pending_[static_cast<int>(i)].pair = round_pairs_[i];
    }
  }
  order_id_ = next_id_++;
  deadline_ = After(now, settings_.pair_timeout * (settings_.run_command ? 2 : 1) + kWaveSlack);
}

std::optional<CheckOrder> NetworkCheckSession::OrderFor(const std::string& node_id) const {
  if (done_ || !Member(node_id)) return std::nullopt;
  CheckOrder o;
  o.id = order_id_;
  o.round = round_;
  o.wave = wave_;
  o.bytes = settings_.bytes;
  o.timeout = settings_.pair_timeout;
  o.run_command = settings_.run_command;
  o.probe_key = probe_key_;
  for (const auto& [index, p] : pending_) {
    if (p.pair.a != node_id && p.pair.b != node_id) continue;
    const NodeInfo* a = Member(p.pair.a);
    const bool client = p.pair.b == node_id;
    CheckTask t;
    t.index = index;
    t.client = client;
    t.peer = client ? p.pair.a : p.pair.b;
    t.peer_host = HostOf(t.peer);
    t.peer_addr = a->addr;
    t.peer_port = a->probe_port;
    t.master_addr = a->addr;
    t.master_port = a->free_port;
    o.tasks.push_back(t);
  }
  return o;
}

bool NetworkCheckSession::Report(const std::string& node_id, uint64_t order_id,
                                 const std::vector<CheckTaskResult>& results, TimePoint now) {
  if (done_ || order_id != order_id_) return false;
  for (const auto& r : results) {
    auto it = pending_.find(r.index);
    if (it == pending_.end()) continue;
    Pending& p = it->second;
    const bool is_a = p.pair.a == node_id;
    const bool is_b = p.pair.b == node_id;
    if (!is_a && !is_b) continue;  // not its pair: ignore
    if (r.probed && is_b) p.probe = r;
    if (r.ran_command) (is_a ? p.cmd_a : p.cmd_b) = r;
  }
  if (!WaveComplete()) return false;
  FinishWave(now);
  return true;
}

bool NetworkCheckSession::Tick(TimePoint now) {
  if (done_ || now < deadline_) return false;
  FinishWave(now);
  return true;
}

bool NetworkCheckSession::WaveComplete() const {
  for (const auto& [index, p] : pending_) {
    if (!p.probe) return false;
    if (settings_.run_command && (!p.cmd_a || !p.cmd_b)) return false;
  }
  return true;
}

PairResult NetworkCheckSession::Resolve(const Pending& p) const {
  PairResult r;
  r.pair = p.pair;
  const std::string wait = fmt::format("{:g}s", settings_.pair_timeout.count());
  if (!p.probe) {
    r.reason = "no result from " + HostOf(p.pair.b) + " within " + wait;
    return r;
  }
  r.ok = p.probe->probe_ok;
  r.reason = p.probe->reason;
  r.mbps_ab = p.probe->mbps_ab;
  r.mbps_ba = p.probe->mbps_ba;
  r.rtt_ms = p.probe->rtt_ms;
  if (!r.ok || !settings_.run_command) return r;
  for (const auto* side : {&p.cmd_a, &p.cmd_b}) {
    const std::string& host = HostOf(side == &p.cmd_a ? p.pair.a : p.pair.b);
    if (!*side) {
      r.ok = false;
      r.reason = "no check-command result from " + host + " within " + wait;
      return r;
    }
    if (!(*side)->command_ok) {
      r.ok = false;
      r.reason = "check command on " + host + ": " + (*side)->command_reason;
      return r;
    }
  }
  return r;
}

void NetworkCheckSession::FinishWave(TimePoint now) {
  for (const auto& [index, p] : pending_) results_[round_].push_back(Resolve(p));
  pending_.clear();
  if (wave_ < last_wave_) {
    StartWave(now);
    return;
  }
  if (round_ == 0) {
    StartRound(1, PlanRound1(ids_, results_[0], options_), now);
    return;
  }
  report_ = Evaluate(ids_, results_[0], results_[1], options_);
  done_ = true;
}

}  // namespace ftrun::rendezvous
