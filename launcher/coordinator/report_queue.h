// ReportQueue: this node's reports to the rendezvous server (RoundReport: failed, succeeded,
// stopped, a save's progress and answers, a check's results), sent in the order they were
// made with one in flight, each retried every 0.2 s while the server cannot be reached. A
// kStopped report gets a fresh free port (the next round's master port) at every try.
//
// Thread: loop only. Ownership: borrows the client (it outlives the queue). Errors: a failed
// call goes to `lost`, which decides whether the server is gone for good (then the queue
// stops retrying; the owner ends the job). NOT_FOUND (the server does not know the node: a
// restarted master) and ABORTED (it is rebuilding the round) keep the report and retry it:
// `not_now` tells the owner, which rejoins. A report is never dropped unanswered, so a
// success reported while the master was down still counts. Callbacks never run after Stop()
// or destruction.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <memory>

#include "rendezvous/rendezvous_client.h"

namespace ftrun::launcher {

class ReportQueue {
 public:
  struct Callbacks {
    std::function<void(const rendezvous::NodeView&)> answered;   // the view in an answer
    std::function<bool(const rendezvous::RpcOutcome&)> lost;     // true: stop retrying
    std::function<void(const rendezvous::RpcOutcome&)> not_now;  // answered; retried later
  };

  // `store_port` > 0: a stopped report's free_port (the agent store); else a port free then.
  ReportQueue(boost::asio::io_context& io, rendezvous::RendezvousClient& client,
              Callbacks callbacks, int store_port = 0);
  ~ReportQueue();

  void Push(rendezvous::RoundReport report);
  // No more sending or retrying; what is queued is dropped.
  void Stop();

 private:
  void SendNext();
  void OnAnswer(const rendezvous::RpcOutcome& out);

  rendezvous::RendezvousClient& client_;
  Callbacks callbacks_;
  int store_port_ = 0;
  boost::asio::steady_timer retry_;
  std::deque<rendezvous::RoundReport> reports_;
  bool in_flight_ = false;
  bool stopped_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::launcher
