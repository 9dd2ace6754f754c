#include "launcher/diagnostics/stacks_gatherer.h"

namespace ftrun::launcher {

using rendezvous::Clock;
using rendezvous::JobStatus;
using rendezvous::RpcOutcome;
using rendezvous::StatusQuery;

StacksGatherer::StacksGatherer(boost::asio::io_context& io, rendezvous::RendezvousClient& client)
    : client_(client), timer_(io), deadline_timer_(io) {}

StacksGatherer::~StacksGatherer() {
  *alive_ = false;
  timer_.cancel();
  deadline_timer_.cancel();
}

void StacksGatherer::Gather(rendezvous::Duration wait, Done done, rendezvous::Duration poll) {
  done_ = std::move(done);
  poll_ = poll;
  last_out_ = RpcOutcome{4, "the rendezvous server did not answer in time", {}, {}};
  last_ = {};
  deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(wait);
  deadline_timer_.expires_at(deadline_);
  deadline_timer_.async_wait(
      [this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& ec) {
        if (!ec && alive.lock()) Finish();
      });
  Ask(0);
}

void StacksGatherer::Finish() {
  timer_.cancel();
  deadline_timer_.cancel();
  if (done_) std::exchange(done_, nullptr)(last_out_, last_);
}

// id 0: open (or join) an order; then poll it.
void StacksGatherer::Ask(uint64_t id) {
  StatusQuery q;
  q.dump_stacks = id == 0;
  q.stacks_id = id;
  client_.Status(q, [this, alive = std::weak_ptr<bool>(alive_), id](const RpcOutcome& out,
                                                                    const JobStatus& s) {
    if (!alive.lock() || !done_) return;
    if (out.ok() || id == 0) last_out_ = out;
    if (out.ok() && s.stacks) last_ = *s.stacks;
    if (!out.ok() && id == 0) return Finish();  // no server to ask
    if (out.ok() && (last_.complete || last_.id == 0)) return Finish();
    if (Clock::now() >= deadline_) return Finish();
    const uint64_t next = last_.id != 0 ? last_.id : id;
    timer_.expires_after(std::chrono::duration_cast<Clock::duration>(poll_));
    timer_.async_wait([this, alive, next](const boost::system::error_code& ec) {
      if (!ec && alive.lock()) Ask(next);
    });
  });
}

}  // namespace ftrun::launcher
