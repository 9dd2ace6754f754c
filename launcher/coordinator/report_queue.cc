#include "launcher/coordinator/report_queue.h"

#include "launcher/config/host.h"

namespace ftrun::launcher {

ReportQueue::ReportQueue(boost::asio::io_context& io, rendezvous::RendezvousClient& client,
                         Callbacks callbacks, int store_port)
    : client_(client), callbacks_(std::move(callbacks)), store_port_(store_port), retry_(io) {}

ReportQueue::~ReportQueue() {
  *alive_ = false;
  retry_.cancel();
}

void ReportQueue::Push(rendezvous::RoundReport report) {
  reports_.push_back(std::move(report));
  SendNext();
}

void ReportQueue::Stop() {
  stopped_ = true;
  retry_.cancel();
  reports_.clear();
}

void ReportQueue::SendNext() {
  if (stopped_ || in_flight_ || reports_.empty()) return;
  in_flight_ = true;
  rendezvous::RoundReport& r = reports_.front();
  if (r.kind == rendezvous::ReportKind::kStopped) {
    if (store_port_ > 0) {
      r.free_port = store_port_;
    } else if (auto port = PickFreePort()) {
      r.free_port = *port;
    }
  }
  client_.Report(r, [this, alive = std::weak_ptr<bool>(alive_)](const rendezvous::RpcOutcome& out) {
    if (auto a = alive.lock(); a && *a) OnAnswer(out);
  });
}

void ReportQueue::OnAnswer(const rendezvous::RpcOutcome& out) {
  in_flight_ = false;
  if (stopped_) return;
  if (out.ok()) {
    reports_.pop_front();
    callbacks_.answered(out.view);
    return SendNext();
  }
  if (out.unknown_node() || out.retry_later()) {
    if (callbacks_.not_now) callbacks_.not_now(out);
    if (stopped_) return;
  } else if (callbacks_.lost(out)) {
    return;
  }
  retry_.expires_after(std::chrono::milliseconds(200));
  retry_.async_wait(
      [this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& ec) {
        if (auto a = alive.lock(); !ec && a && *a && !stopped_) SendNext();
      });
}

}  // namespace ftrun::launcher
