#include "launcher/coordinator/etcd_coordinator.h"

#include <boost/asio/post.hpp>

#include "common/log.h"
#include "launcher/config/host.h"
#include "rendezvous/wire.h"

namespace ftrun::launcher {
namespace {

using rendezvous::Clock;
using rendezvous::Duration;
using rendezvous::NodeView;
using rendezvous::Phase;
using rendezvous::ReportKind;
using rendezvous::etcd::EtcdStatus;
namespace pb = rendezvous::etcd::pb;

std::string Secs(Duration d) { return fmt::format("{:.3g}s", d.count()); }

}  // namespace

EtcdCoordinator::EtcdCoordinator(boost::asio::io_context& io, EtcdCoordinatorOptions options)
    : io_(io),
      opts_(std::move(options)),
      start_timer_(io),
      keepalive_timer_(io),
      report_timer_(io) {}

EtcdCoordinator::~EtcdCoordinator() { *alive_ = false; }

std::string EtcdCoordinator::Where() const { return "etcd at " + opts_.client->endpoints_text(); }

uint64_t EtcdCoordinator::CurrentRound() const {
  return follower_->started_round().value_or(follower_->last_view().round);
}

void EtcdCoordinator::After(boost::asio::steady_timer& timer, Duration delay,
                            std::function<void()> what) {
  timer.expires_after(std::chrono::duration_cast<Clock::duration>(delay));
  timer.async_wait([this, what = std::move(what)](const boost::system::error_code& ec) {
    if (!ec && !failed_) what();
  });
}

void EtcdCoordinator::Start(Listener* listener) {
  follower_.emplace(
      listener, [this](uint64_t round) { Report(StoppedReport(round)); }, opts_.role);
  started_ = Clock::now();
  last_contact_ = started_;
  if (opts_.store_port > 0) {
    store_checks_.emplace(io_, opts_.store_probe,
                          [this](rendezvous::RoundReport r) { Report(std::move(r)); });
  }
  Grant();
}

bool EtcdCoordinator::Contact(const EtcdStatus& st) {
  if (st.ok()) {
    last_contact_ = Clock::now();
    return true;
  }
  // etcd answered, and retrying will not change its mind: a bad user or password, or a user
  // without permission on the job's prefix.
  constexpr int kInvalidArgument = 3, kPermissionDenied = 7, kUnauthenticated = 16;
  if (st.code == kInvalidArgument || st.code == kPermissionDenied || st.code == kUnauthenticated) {
    Fail(Where() + " refused this agent: " + st.message);
  }
  return false;
}

void EtcdCoordinator::Grant() {
  if (shutting_down_) return;
  opts_.client->LeaseGrant(
      opts_.lease_ttl, [this](const EtcdStatus& st, const pb::LeaseGrantResponse& resp) {
        if (shutting_down_) return;
        if (!Contact(st) || resp.id() == 0) {
          const Duration waited = Clock::now() - started_;
          const std::string why = st.ok() ? resp.error() : st.message;
          if (waited > opts_.connect_timeout) {
            return Fail("cannot reach " + Where() +
                        " within timeout=" + Secs(opts_.connect_timeout) + ": " + why);
          }
          if (waited >= Duration(10.0 * wait_logs_)) {
            ++wait_logs_;
            LauncherLog()->info("waiting for {} elapsed={} (up to timeout={}): {}", Where(),
                                Secs(waited), Secs(opts_.connect_timeout), why);
          }
          return After(start_timer_, Duration(0.5), [this] { Grant(); });
        }
        lease_id_ = resp.id();
        LauncherLog()->info("etcd lease granted lease={:x} ttl={}s at {}", lease_id_, resp.ttl(),
                            Where());
        After(keepalive_timer_, Duration(opts_.lease_ttl / 3.0), [this] { KeepAlive(); });
        PutNode();
      });
}

void EtcdCoordinator::KeepAlive() {
  opts_.client->KeepAliveOnce(lease_id_, [this](const EtcdStatus& st,
                                                const pb::LeaseKeepAliveResponse& resp) {
    if (failed_ || lease_id_ == 0) return;
    if (Contact(st) && resp.ttl() <= 0) {
      return Fail("this agent's etcd lease expired (" + Where() +
                  " was unreachable for longer than lease_ttl=" + std::to_string(opts_.lease_ttl) +
                  "s, or the lease was revoked)");
    }
    const Duration silent = Clock::now() - last_contact_;
    if (!st.ok() && silent > Duration(opts_.lease_ttl)) {
      return Fail("lost contact with " + Where() + " for " + Secs(silent) +
                  " (longer than lease_ttl=" + std::to_string(opts_.lease_ttl) +
                  "s): " + st.message);
    }
    if (!st.ok()) {
      LauncherLog()->warn("etcd keep-alive failed ({}); silent for {}", st.ToString(),
                          Secs(silent));
    }
    // Faster while failing: a member that came back (or the next one) renews in time.
    const Duration next = st.ok() ? Duration(opts_.lease_ttl / 3.0) : Duration(0.25);
    After(keepalive_timer_, next, [this] { KeepAlive(); });
  });
}

void EtcdCoordinator::PutNode() {
  if (shutting_down_) return;
  opts_.node.store_listens = opts_.store_port > 0;
  if (opts_.store_port > 0) {
    opts_.node.free_port = opts_.store_port;
  } else if (auto port = PickFreePort()) {
    opts_.node.free_port = *port;
  }
  if (auto round = follower_->started_round()) {
    opts_.node.next_round = *round + 1;
    opts_.node.restart_count = follower_->last_view().restart_count;
    opts_.node.last_group_rank = follower_->started_group_rank();
  }
  claimed_round_ = opts_.node.next_round;
  claimed_restarts_ = opts_.node.restart_count;
  // Read by a leader when this node joins, or when it takes over; after that, the stopped
  // reports carry the inventory (a known node's record is not read again). Once a round has
  // started here, the workers save on past anything written now: a leader taking over must
  // not decide from it, so the record says nothing then.
  if (follower_->started_round()) {
    opts_.node.flash.clear();
    opts_.node.flash_reported = false;
  } else {
    TakeFlashInventory(opts_.node);
  }
  opts_.node.run_started_ms = run_started_ms();
  ::ftrun::v1::NodeInfo wire;
  rendezvous::ToWire(opts_.node, &wire);
  wire.set_min_nodes(opts_.job.min_nodes);
  wire.set_max_nodes(opts_.job.max_nodes);
  pb::PutRequest put;
  put.set_key(opts_.keys.node(opts_.node.node_id));
  put.set_value(wire.SerializeAsString());
  put.set_lease(lease_id_);
  opts_.client->Put(put, [this](const EtcdStatus& st, const pb::PutResponse&) {
    if (shutting_down_ || failed_) return;
    if (!Contact(st)) return After(start_timer_, Duration(0.2), [this] { PutNode(); });
    if (followed_) return;
    followed_ = true;
    LauncherLog()->info("joined the job in {} node_id={} prefix={}", Where(), opts_.node.node_id,
                        opts_.keys.root);
    Follow();
  });
}

void EtcdCoordinator::RefreshClaims() {
  // A leader that takes over reads these to carry the job on from where it is.
  auto round = follower_->started_round();
  if (!round || shutting_down_) return;
  if (*round + 1 == claimed_round_ && follower_->last_view().restart_count == claimed_restarts_) {
    return;
  }
  PutNode();
}

void EtcdCoordinator::Follow() {
  // The view and the leader key as they are, then their changes.
  pb::TxnRequest read;
  for (const auto& key : {opts_.keys.view(opts_.node.node_id), opts_.keys.leader()}) {
    read.add_success()->mutable_request_range()->set_key(key);
  }
  opts_.client->Txn(read, [this](const EtcdStatus& st, const pb::TxnResponse& resp) {
    if (shutting_down_ || failed_) return;
    if (!Contact(st) || resp.responses_size() != 2) {
      return After(start_timer_, Duration(0.2), [this] { Follow(); });
    }
    const int64_t next = resp.header().revision() + 1;
    const auto& view = resp.responses(0).response_range();
    if (view.kvs_size() == 1) OnView(view.kvs(0).value());
    // That view may have ended this node's job (a refusal): the agent has shut us down, and a
    // watch opened now would keep its loop alive for ever.
    if (shutting_down_ || failed_) return;
    watches_[0] = std::make_unique<rendezvous::etcd::EtcdWatch>(
        io_, *opts_.client, opts_.keys.view(opts_.node.node_id), "", next,
        [this](const std::vector<pb::Event>& events) {
          last_contact_ = Clock::now();
          for (const auto& e : events) {
            if (e.type() == pb::Event::PUT) OnView(e.kv().value());
          }
        });
    watches_[1] = std::make_unique<rendezvous::etcd::EtcdWatch>(
        io_, *opts_.client, opts_.keys.leader(), "", next,
        [this](const std::vector<pb::Event>& events) {
          for (const auto& e : events) OnLeaderEvent(e.type() == pb::Event::DELETE);
        },
        // The leader may have gone while we were not watching.
        [this] { Campaign(); });
    if (resp.responses(1).response_range().kvs_size() == 0) Campaign();
  });
}

void EtcdCoordinator::OnView(const std::string& value) {
  ::ftrun::v1::NodeView wire;
  if (!wire.ParseFromString(value)) {
    LauncherLog()->warn("etcd: this node's view is malformed; ignored");
    return;
  }
  NodeView view = rendezvous::FromWire(wire);
  // A watch may deliver a view older than one already applied (after a reconnect).
  if (view.version < known_version_) return;
  known_version_ = view.version;
  // The listener answers only the current check's members (pair_probe.h).
  if (opts_.probe_server && view.check) opts_.probe_server->SetKey(view.check->probe_key);
  follower_->Apply(view);
  CheckStores();
  RefreshClaims();
}

void EtcdCoordinator::CheckStores() {
  if (store_checks_) store_checks_->Follow(*follower_, shutting_down_ || failed_);
}

void EtcdCoordinator::OnLeaderEvent(bool deleted) {
  if (!deleted) return;
  LauncherLog()->info("the rendezvous leader in etcd is gone; campaigning");
  Campaign();
}

void EtcdCoordinator::Campaign() {
  if (campaigning_ || leader_ || shutting_down_ || failed_ || follower_->finished()) return;
  campaigning_ = true;
  pb::TxnRequest txn;
  auto* cmp = txn.add_compare();
  cmp->set_key(opts_.keys.leader());
  cmp->set_target(pb::Compare::CREATE);
  cmp->set_result(pb::Compare::EQUAL);
  cmp->set_create_revision(0);
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(opts_.keys.leader());
  put->set_value(opts_.node.node_id);
  put->set_lease(lease_id_);
  opts_.client->Txn(txn, [this](const EtcdStatus& st, const pb::TxnResponse& resp) {
    campaigning_ = false;
    if (shutting_down_ || failed_) return;
    if (!Contact(st)) return After(start_timer_, Duration(0.2), [this] { Campaign(); });
    if (!resp.succeeded()) return;  // another agent leads; its key's deletion wakes us
    rendezvous::etcd::EtcdLeaderOptions lo;
    lo.keys = opts_.keys;
    lo.job = opts_.job;
    lo.lease_id = lease_id_;
    lo.epoch = resp.header().revision();
    lo.self = opts_.node.node_id;
    lo.event_log = opts_.event_log;
    leader_ = std::make_unique<rendezvous::etcd::EtcdLeader>(
        io_, *opts_.client, lo, [this](const std::string& why) {
          boost::asio::post(io_, [this, why, alive = std::weak_ptr<bool>(alive_)] {
            if (!alive.expired()) Fail("no longer the rendezvous leader: " + why);
          });
        });
    leader_->Start();
  });
}

void EtcdCoordinator::Report(rendezvous::RoundReport report) {
  report.round =
      report.kind == ReportKind::kChecked ? follower_->last_view().round : CurrentRound();
  reports_.push_back(std::move(report));
  SendReport();
}

void EtcdCoordinator::SendReport() {
  if (report_in_flight_ || reports_.empty() || shutting_down_ || failed_ || lease_id_ == 0) return;
  report_in_flight_ = true;
  rendezvous::RoundReport& r = reports_.front();
  if (r.kind == ReportKind::kStopped) {
    if (opts_.store_port > 0) {
      r.free_port = opts_.store_port;
    } else if (auto port = PickFreePort()) {
      r.free_port = *port;
    }
  }
  ::ftrun::v1::ReportRequest wire;
  rendezvous::ToWire(r, &wire);
  pb::PutRequest put;
  put.set_key(opts_.keys.report(opts_.node.node_id, report_seq_));
  put.set_value(wire.SerializeAsString());
  put.set_lease(lease_id_);
  opts_.client->Put(put, [this](const EtcdStatus& st, const pb::PutResponse&) {
    report_in_flight_ = false;
    if (shutting_down_ || failed_) return;
    if (!Contact(st)) return After(report_timer_, Duration(0.2), [this] { SendReport(); });
    ++report_seq_;
    reports_.pop_front();
    SendReport();
  });
}

void EtcdCoordinator::WorkersStopped() {
  std::weak_ptr<bool> alive = alive_;
  boost::asio::post(io_, [this, alive] {
    if (auto a = alive.lock(); a && *a && !shutting_down_) {
      follower_->WorkersStopped();
      CheckStores();
    }
  });
}

void EtcdCoordinator::Fail(const std::string& reason) {
  if (failed_ || !follower_) return;
  failed_ = true;
  LauncherLog()->error("etcd rendezvous: {}", reason);
  if (leader_) leader_->Stop();
  for (auto& w : watches_) w.reset();
  NodeView v = follower_->last_view();
  v.phase = Phase::kFailed;
  v.reason = reason;
  v.failures.clear();
  follower_->Apply(v);
  CheckStores();
}

void EtcdCoordinator::Shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  start_timer_.cancel();
  report_timer_.cancel();
  for (auto& w : watches_) w.reset();
  if (opts_.probe_server) opts_.probe_server->Stop();
  if (store_checks_) store_checks_->Stop();
  if (leader_ && !failed_ && leader_->state().finished()) {
    // The others must read the job's end from their views before this lease takes them.
    leader_->FinishAndStop("", opts_.linger, [this] { Revoke(); });
    return;
  }
  // A job still going is not ended by its leader leaving: the lease goes, another agent
  // takes the leader key and the round re-forms without this node.
  if (leader_) leader_->Stop();
  Revoke();
}

void EtcdCoordinator::Revoke() {
  keepalive_timer_.cancel();
  if (lease_id_ == 0) return opts_.client->CancelAll();
  // Revoking deletes this agent's keys at once: the others see it leave now, not at expiry.
  opts_.client->LeaseRevoke(
      lease_id_, Duration(1),
      [this](const EtcdStatus&, const pb::LeaseRevokeResponse&) { opts_.client->CancelAll(); });
  lease_id_ = 0;
}

}  // namespace ftrun::launcher
