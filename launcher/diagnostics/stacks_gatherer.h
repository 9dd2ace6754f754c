// StacksGatherer: a job's stacks, through its rendezvous server (`ftrun master` or the
// hosting agent). Status(dump_stacks) opens a stack-dump order — or joins one younger than
// 5 s — that every member agent answers with its ranks' stacks; then Status(stacks_id) every
// `poll` until every member has answered or `wait` has passed. The last collection is
// handed over either way (complete or not: `missing` names the silent hosts), at the latest
// at the deadline even if a call is still in flight.
//
// Thread: loop only. Ownership: borrows the client (it outlives the gatherer). One Gather at
// a time. Errors: the last call's outcome (a server that never answered: not ok).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>

#include "rendezvous/rendezvous_client.h"

namespace ftrun::launcher {

class StacksGatherer {
 public:
  using Done =
      std::function<void(const rendezvous::RpcOutcome&, const rendezvous::StacksCollection&)>;
  StacksGatherer(boost::asio::io_context& io, rendezvous::RendezvousClient& client);
  ~StacksGatherer();

  void Gather(rendezvous::Duration wait, Done done,
              rendezvous::Duration poll = rendezvous::Duration(0.1));

 private:
  void Ask(uint64_t id);
  void Finish();

  rendezvous::RendezvousClient& client_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer deadline_timer_;  // a call slower than the wait ends it too
  rendezvous::RpcOutcome last_out_;
  rendezvous::StacksCollection last_;
  rendezvous::TimePoint deadline_;
  rendezvous::Duration poll_{0.1};
  Done done_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::launcher
