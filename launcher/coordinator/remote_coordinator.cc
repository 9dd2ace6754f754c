#include "launcher/coordinator/remote_coordinator.h"

#include <algorithm>
#include <boost/asio/post.hpp>

#include "common/log.h"
#include "launcher/config/host.h"

namespace ftrun::launcher {
namespace {

using rendezvous::Clock;
using rendezvous::Duration;
using rendezvous::NodeView;
using rendezvous::Phase;
using rendezvous::ReportKind;
using rendezvous::RpcOutcome;

std::string Secs(Duration d) { return fmt::format("{:.3g}s", d.count()); }

}  // namespace

RemoteCoordinator::RemoteCoordinator(boost::asio::io_context& io, RemoteCoordinatorOptions options)
    : io_(io),
      opts_(std::move(options)),
      endpoint_(opts_.client.target),
      client_(io, opts_.client),
      join_timer_(io),
      watch_timer_(io),
      reports_(io, client_,
               {[this](const NodeView& view) {
                  Contact();
                  Apply(view);
                },
                [this](const RpcOutcome& out) { return ServerLost(out); },
                [this](const RpcOutcome& out) {
                  Contact();
                  if (out.unknown_node()) Rejoin(out.message);
                }},
               opts_.store_port),
      stacks_(io, client_) {}

RemoteCoordinator::~RemoteCoordinator() { *alive_ = false; }

void RemoteCoordinator::ProbeStore() {
  if (store_checks_) store_checks_->Follow(*follower_, shutting_down_);
}

void RemoteCoordinator::Start(Listener* listener) {
  follower_.emplace(
      listener, [this](uint64_t round) { reports_.Push(StoppedReport(round)); }, opts_.role);
  join_started_ = Clock::now();
  last_wait_log_ = join_started_;
  if (opts_.store_port > 0) {
    store_checks_.emplace(io_, opts_.store_probe,
                          [this](rendezvous::RoundReport r) { reports_.Push(std::move(r)); });
  }
  Join();
}

uint64_t RemoteCoordinator::CurrentRound() const {
  return follower_->started_round().value_or(follower_->last_view().round);
}

void RemoteCoordinator::Join() {
  if (shutting_down_) return;
  ++join_attempts_;
  opts_.node.store_listens = opts_.store_port > 0;
  if (opts_.store_port > 0) {
    opts_.node.free_port = opts_.store_port;
  } else if (auto port = PickFreePort()) {
    opts_.node.free_port = *port;
  }
  opts_.node.running.reset();
  TakeFlashInventory(opts_.node);
  opts_.node.run_started_ms = run_started_ms();
  if (auto round = follower_->started_round()) {  // a server that forgot us goes on from here
    const NodeView& v = follower_->last_view();
    opts_.node.next_round = *round + 1;
    opts_.node.restart_count = v.restart_count;
    // Its workers run (or just ran) that round: the server may take it over unchanged.
    if (v.phase == Phase::kRunning && v.member && v.round == *round) {
      opts_.node.running = v.assignment;
    }
  }
  client_.Join(opts_.node, [this](const RpcOutcome& out) { OnJoined(out); });
}

void RemoteCoordinator::OnJoined(const RpcOutcome& out) {
  if (shutting_down_) return;
  const auto now = Clock::now();
  if (out.ok()) {
    joined_ = true;
    ever_joined_ = true;
    rejoining_ = false;
    Contact();
    known_version_ = 0;  // a (re)join may meet a new server whose versions start again
    LauncherLog()->info("joined the job at {} node_id={} attempts={} nodes_joined={} phase={}",
                        endpoint_, opts_.client.node_id, join_attempts_, out.view.nodes_joined,
                        rendezvous::PhaseName(out.view.phase));
    Apply(out.view);
    if (!watching_) {
      watching_ = true;
      Watch();
    }
    return;
  }
  if (out.transient() && ever_joined_) {  // rejoining: the outage window applies
    if (ServerLost(out)) return;
    return RetryAfter(join_timer_, Duration(0.2), &RemoteCoordinator::Join);
  }
  if (out.transient() || out.rank_held()) {
    const Duration waited = now - join_started_;
    if (waited > opts_.connect_timeout) {
      return Fail("cannot join the rendezvous at " + endpoint_ +
                  " within timeout=" + Secs(opts_.connect_timeout) + ": " + out.message);
    }
    if (now - last_wait_log_ >= std::chrono::seconds(1) || join_attempts_ == 1) {
      last_wait_log_ = now;
      LauncherLog()->info(
          "waiting for the rendezvous server at {} attempt={} elapsed={} timeout={}: {}", endpoint_,
          join_attempts_, Secs(waited), Secs(opts_.connect_timeout), out.message);
    }
    // Quick retries first: the hosting agent usually starts a moment later.
    Duration delay = join_attempts_ < 10 ? Duration(0.05) : Duration(0.5);
    return RetryAfter(join_timer_, delay, &RemoteCoordinator::Join);
  }
  Fail("the rendezvous server at " + endpoint_ + " refused this node: " + out.message);
}

void RemoteCoordinator::Watch() {
  if (shutting_down_) return;
  client_.Watch(known_version_, opts_.watch_wait,
                [this](const RpcOutcome& out) { OnWatched(out); });
}

void RemoteCoordinator::OnWatched(const RpcOutcome& out) {
  if (shutting_down_ || follower_->finished()) return;
  if (out.ok()) {
    Contact();
    const bool news =
        out.view.version > known_version_ || out.view.phase != follower_->last_view().phase;
    // Watching again first: applying a view may take a while (starting the workers), and the
    // server counts a node that does not call again after an answer as gone.
    known_version_ = std::max(known_version_, out.view.version);
    Watch();
    if (news) Apply(out.view);
    return;
  }
  if (out.unknown_node()) {
    Contact();
    watching_ = false;  // the join starts it again
    return Rejoin(out.message);
  }
  if (ServerLost(out)) return;
  RetryAfter(watch_timer_, Duration(0.2), &RemoteCoordinator::Watch);
}

void RemoteCoordinator::Rejoin(const std::string& why) {
  if (rejoining_ || shutting_down_ || follower_->finished()) return;
  rejoining_ = true;
  const auto round = follower_->started_round();
  const NodeView& v = follower_->last_view();
  const bool claim = round && v.phase == Phase::kRunning && v.member && v.round == *round;
  LauncherLog()->warn("the rendezvous server no longer knows this node ({}); joining again{}", why,
                      claim
                          ? fmt::format(" with the round its workers run (round={} group_rank={})",
                                        *round, v.assignment.group_rank)
                          : "");
  joined_ = false;
  join_started_ = Clock::now();
  join_attempts_ = 0;
  Join();
}

void RemoteCoordinator::Contact() {
  if (!outage_since_) return;
  LauncherLog()->info("the rendezvous server at {} answers again after {}", endpoint_,
                      Secs(Clock::now() - *outage_since_));
  outage_since_.reset();
}

bool RemoteCoordinator::ServerLost(const RpcOutcome& out) {
  if (!out.transient()) {
    Fail("the rendezvous server at " + endpoint_ + " answered: " + out.message);
    return true;
  }
  const auto now = Clock::now();
  if (!outage_since_) {
    // The window counts from the first failed call: a long poll in flight when the server
    // went away may have been answered seconds before.
    outage_since_ = now;
    LauncherLog()->warn(
        "the rendezvous server at {} does not answer ({}); the workers go on, waiting up to {} "
        "for it to come back",
        endpoint_, out.message, Secs(opts_.lost_after));
    return false;
  }
  if (now - *outage_since_ <= opts_.lost_after) return false;
  // gRPC tries an unreachable server again only after its reconnect backoff, up to 1.2 s
  // later: a server back in the window's last second would go unseen. So for a second after
  // the window's end each retried call makes the channel try at once.
  if (now - *outage_since_ < opts_.lost_after + std::chrono::seconds(1)) {
    client_.ReconnectNow();
    return false;
  }
  const std::string lost = "lost contact with the rendezvous server at " + endpoint_ + " for " +
                           Secs(opts_.lost_after) + ": " + out.message;
  if (succeeded_round_ && succeeded_round_ == follower_->started_round()) {
    // As torchrun's agent, whose workers succeeded, exits 0 without the others' outcome.
    NodeView v = follower_->last_view();
    v.phase = Phase::kSucceeded;
    v.reason = "this node's workers succeeded; " + lost + " (the other nodes' outcome is unknown)";
    v.failures.clear();
    LauncherLog()->warn("{}", v.reason);
    follower_->Apply(v);
    ProbeStore();
    return true;
  }
  Fail(lost);
  return true;
}

void RemoteCoordinator::Apply(const NodeView& view) {
  // Answers to reports and watches cross on the wire: an answer to an earlier call may
  // arrive after a newer view, and applying it would undo what the newer one said (e.g.
  // ask to stop the workers of a round that has just started).
  if (view.version < known_version_) return;
  known_version_ = view.version;
  // The listener answers only the current check's members (pair_probe.h).
  if (opts_.probe_server && view.check) opts_.probe_server->SetKey(view.check->probe_key);
  follower_->Apply(view);
  ProbeStore();
}

void RemoteCoordinator::RetryAfter(boost::asio::steady_timer& timer, Duration delay,
                                   void (RemoteCoordinator::*what)()) {
  timer.expires_after(std::chrono::duration_cast<Clock::duration>(delay));
  timer.async_wait([this, what](const boost::system::error_code& ec) {
    if (!ec && !shutting_down_) (this->*what)();
  });
}

void RemoteCoordinator::Fail(const std::string& reason) {
  NodeView v = follower_->last_view();
  v.phase = Phase::kFailed;
  v.reason = reason;
  v.failures.clear();
  follower_->Apply(v);
  ProbeStore();
}

void RemoteCoordinator::Report(rendezvous::RoundReport report) {
  // A check belongs to the round being formed, not to the last one this node ran.
  report.round =
      report.kind == ReportKind::kChecked ? follower_->last_view().round : CurrentRound();
  if (report.kind == ReportKind::kSucceeded) succeeded_round_ = report.round;
  reports_.Push(std::move(report));
}

void RemoteCoordinator::GatherJobStacks(rendezvous::Duration wait, GatherDone done) {
  stacks_.Gather(
      wait, [done = std::move(done)](const RpcOutcome& out, const rendezvous::StacksCollection& c) {
        done(true, out, c);
      });
}

void RemoteCoordinator::WorkersStopped() {
  std::weak_ptr<bool> alive = alive_;
  boost::asio::post(io_, [this, alive] {
    if (auto a = alive.lock(); a && *a && !shutting_down_) {
      follower_->WorkersStopped();
      ProbeStore();
    }
  });
}

void RemoteCoordinator::Shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  join_timer_.cancel();
  watch_timer_.cancel();
  reports_.Stop();
  if (store_checks_) store_checks_->Stop();
  client_.CancelAll();
  if (joined_ && !(follower_ && follower_->finished())) {
    // Leaving tells the others at once; they re-form without us (or wait for a replacement).
    client_.Leave(Duration(1), [](const RpcOutcome&) {});
  }
  if (opts_.probe_server) opts_.probe_server->Stop();
  if (opts_.server) {
    opts_.server->FinishAndShutdown(
        "the agent hosting the rendezvous (" + opts_.node.host + ") stopped", opts_.linger);
  }
}

}  // namespace ftrun::launcher
