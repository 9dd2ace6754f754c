#include "launcher/local_coordinator.h"

#include <boost/asio/post.hpp>

#include "launcher/host.h"
#include "rendezvous/log.h"

namespace ftrun::launcher {

LocalCoordinator::LocalCoordinator(boost::asio::io_context& io, LocalCoordinatorOptions options)
    : io_(io), opts_(std::move(options)) {}

template <class F>
void LocalCoordinator::Post(F f) {
  std::weak_ptr<bool> alive = alive_;
  boost::asio::post(io_, [alive, f = std::move(f)]() mutable {
    if (auto a = alive.lock(); a && *a) f();
  });
}

void LocalCoordinator::Start(Listener* listener) {
  listener_ = listener;
  StartRound();
}

void LocalCoordinator::StartRound() {
  rendezvous::NodeAssignment a;
  a.round = round_++;
  a.restart_count = restart_count_;
  a.group_rank = 0;
  a.group_world_size = 1;
  a.base_rank = 0;
  a.world_size = opts_.nproc_per_node;
  a.master_addr = opts_.master_addr;
  auto port = PickFreePort();
  if (!port) {
    finished_ = true;
    JobResult r{false, {}, port.error().message};
    Post([this, r] { listener_->OnJobFinished(r); });
    return;
  }
  a.master_port = *port;
  Post([this, a] { listener_->OnRoundStarted(a); });
}

void LocalCoordinator::WorkersFailed(const std::vector<WorkerFailure>& failures) {
  if (finished_ || restart_pending_) return;
  failures_ = failures;
  if (restart_count_ < opts_.max_restarts) {
    int left = opts_.max_restarts - restart_count_;
    Logger("launcher")->warn(
        "[{}] Worker group FAILED. {}/{} attempts left; will restart worker group", opts_.role,
        left, opts_.max_restarts);
    restart_pending_ = true;
    Post([this] { listener_->OnRestartRequested("worker failed"); });
    return;
  }
  finished_ = true;
  JobResult r{false, failures_,
              opts_.max_restarts == 0
                  ? "a worker failed and --max-restarts is 0"
                  : "restarts exhausted (" + std::to_string(opts_.max_restarts) + "/" +
                        std::to_string(opts_.max_restarts) + ")"};
  Post([this, r] { listener_->OnJobFinished(r); });
}

void LocalCoordinator::WorkersSucceeded() {
  if (finished_) return;
  finished_ = true;
  Post([this] { listener_->OnJobFinished(JobResult{true, {}, "all workers succeeded"}); });
}

void LocalCoordinator::WorkersStopped() {
  if (!restart_pending_ || finished_) return;
  restart_pending_ = false;
  ++restart_count_;
  StartRound();
}

void LocalCoordinator::Shutdown() {
  finished_ = true;
  *alive_ = false;
}

}  // namespace ftrun::launcher
