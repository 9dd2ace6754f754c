#include "launcher/coordinator/local_coordinator.h"

#include <boost/asio/post.hpp>

#include "common/log.h"
#include "launcher/config/host.h"
#include "rendezvous/apply_report.h"

namespace ftrun::launcher {

LocalCoordinator::LocalCoordinator(boost::asio::io_context& io, LocalCoordinatorOptions options)
    : io_(io), opts_(std::move(options)), timer_(io) {
  opts_.job = OneNodeJob(std::move(opts_.job));
}

rendezvous::JobSpec OneNodeJob(rendezvous::JobSpec job) {
  job.liveness_timeout = std::chrono::hours(24 * 365);
  job.join_timeout = std::chrono::hours(24 * 365);
  return job;
}

Result<int> LocalCoordinator::MasterPort() const {
  return opts_.store_port > 0 ? Ok(opts_.store_port) : PickFreePort();
}

uint64_t LocalCoordinator::Round() const {
  return follower_->started_round().value_or(state_->round());
}

void LocalCoordinator::Start(Listener* listener) {
  follower_.emplace(
      listener,
      [this](uint64_t round) {
        auto stopped = rendezvous::RoundReport::Of(rendezvous::ReportKind::kStopped, round);
        if (auto port = MasterPort()) stopped.free_port = *port;
        Apply(stopped);
      },
      opts_.role);
  state_.emplace(opts_.job, Now());
  if (auto port = MasterPort()) opts_.node.free_port = *port;
  if (auto refusal = state_->Join(opts_.node, Now())) {
    LauncherLog()->error("{}", refusal->message);  // cannot happen with one node
  }
  Publish();
}

void LocalCoordinator::Publish() {
  // Only the save and a restart's back-off have deadlines that matter for a single node.
  if (state_->phase() == rendezvous::Phase::kSaving ||
      state_->phase() == rendezvous::Phase::kForming) {
    if (auto d = state_->NextDeadline()) {
      timer_.expires_at(*d);
      timer_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](auto ec) {
        if (auto a = alive.lock(); !ec && a && *a) {
          state_->Tick(Now());
          Publish();
        }
      });
    }
  } else {
    timer_.cancel();
  }
  std::weak_ptr<bool> alive = alive_;
  boost::asio::post(io_, [this, alive, v = state_->View(opts_.node.node_id)] {
    if (auto a = alive.lock(); a && *a) follower_->Apply(v);
  });
}

void LocalCoordinator::Report(rendezvous::RoundReport report) {
  report.round = Round();
  Apply(report);
}

void LocalCoordinator::Apply(const rendezvous::RoundReport& report) {
  if (auto s = rendezvous::ApplyReport(*state_, opts_.node.node_id, report, Now()); !s) {
    LauncherLog()->error("{}", s.error().message);  // cannot happen: the agent's own reports
  }
  Publish();
}

void LocalCoordinator::WorkersStopped() {
  std::weak_ptr<bool> alive = alive_;
  boost::asio::post(io_, [this, alive] {
    if (auto a = alive.lock(); a && *a) follower_->WorkersStopped();
  });
}

void LocalCoordinator::Shutdown() {
  *alive_ = false;
  timer_.cancel();
}

}  // namespace ftrun::launcher
