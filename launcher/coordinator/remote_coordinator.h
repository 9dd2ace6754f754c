// RemoteCoordinator: a node of a multi-node job. Joins the rendezvous server (retrying while
// it is not up yet, until connect_timeout), follows the job through long-poll watches, and
// reports this node's worker outcomes in order (ReportQueue: one report in flight). When this agent
// hosts the server, it owns it and shuts it down once every node has seen the job's end.
//
// A server that forgets this node (a restarted `ftrun master`) is joined again with the round
// this node's workers run (NodeInfo::running), so that it can take that round over and the
// workers go on; reports wait meanwhile and are never dropped.
//
// Every join and every stopped report carries the agent's flash-checkpoint inventory: the
// server decides the next round's restore step from it, and a restarted server learns it as
// the nodes join again.
//
// A member checks that it reaches the other members' stores while its workers run
// (StoreProbe, with the agent store only: NodeInfo::store_listens, NodeView::store_peers) and
// reports a partition to the server, naming the member it cannot reach.
//
// Thread: loop only. Listener calls happen in RPC completions or posted, never inside a
// Coordinator call. Errors: a refusal (token, run id, --nnodes/--nproc-per-node mismatch) or
// a server that has not answered for lost_after since the first call it failed ends the job
// with a reason naming it; as a success when this node's workers had all succeeded (the
// server was lost before it could say that the others had too).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <optional>
#include <string>

#include "launcher/coordinator/coordinator.h"
#include "launcher/coordinator/member_store_checks.h"
#include "launcher/coordinator/report_queue.h"
#include "launcher/coordinator/view_follower.h"
#include "launcher/diagnostics/stacks_gatherer.h"
#include "launcher/netcheck/pair_probe.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"

namespace ftrun::launcher {

struct RemoteCoordinatorOptions {
  rendezvous::ClientOptions client;
  rendezvous::NodeInfo node;
  int store_port = 0;  // > 0: every join's and report's free_port (the agent store)
  rendezvous::Duration connect_timeout{900};  // the server is not reachable yet
  rendezvous::Duration lost_after{15};        // the server stopped answering (outage window)
  rendezvous::Duration watch_wait{5};
  rendezvous::Duration linger{10};  // hosting: wait for every node to see the end
  std::unique_ptr<rendezvous::RendezvousServer> server;  // started; hosted by this agent
  std::unique_ptr<ProbeServer> probe_server;  // --network-check: answers the other agents
  std::string role = "default";
  StoreProbeOptions store_probe;  // used when store_port > 0
};

class RemoteCoordinator : public Coordinator {
 public:
  RemoteCoordinator(boost::asio::io_context& io, RemoteCoordinatorOptions options);
  ~RemoteCoordinator() override;

  void Start(Listener* listener) override;
  void WorkersStopped() override;
  void Shutdown() override;
  std::string ServerMetrics() const override {
    return opts_.server ? opts_.server->RenderMetrics() : "";
  }
  bool HostsRendezvous() const override { return opts_.server != nullptr; }
  void GatherJobStacks(rendezvous::Duration wait, GatherDone done) override;

 private:
  // Every report goes to the server, in order, retried while it is unreachable.
  void Report(rendezvous::RoundReport report) override;

  void Join();
  // The server no longer knows this node: join again (once at a time).
  void Rejoin(const std::string& why);
  void OnJoined(const rendezvous::RpcOutcome& out);
  // The server answered: an outage is over.
  void Contact();
  void Watch();
  void OnWatched(const rendezvous::RpcOutcome& out);
  void Apply(const rendezvous::NodeView& view);
  void Fail(const std::string& reason);
  void RetryAfter(boost::asio::steady_timer& timer, rendezvous::Duration delay,
                  void (RemoteCoordinator::*what)());
  bool ServerLost(const rendezvous::RpcOutcome& out);
  uint64_t CurrentRound() const;
  // Starts or stops the store probe after the view or the workers changed.
  void ProbeStore();

  boost::asio::io_context& io_;
  RemoteCoordinatorOptions opts_;
  std::string endpoint_;
  rendezvous::RendezvousClient client_;
  std::optional<ViewFollower> follower_;

  // State below is touched only on the loop.
  boost::asio::steady_timer join_timer_;
  boost::asio::steady_timer watch_timer_;
  rendezvous::TimePoint join_started_;
  std::optional<rendezvous::TimePoint> outage_since_;  // the first failed call since an answer
  rendezvous::TimePoint last_wait_log_;
  int join_attempts_ = 0;
  bool joined_ = false;
  bool ever_joined_ = false;
  bool rejoining_ = false;
  std::optional<uint64_t> succeeded_round_;  // this node reported its workers' success
  bool watching_ = false;
  uint64_t known_version_ = 0;
  ReportQueue reports_;    // after client_: borrows it
  StacksGatherer stacks_;  // likewise
  std::optional<MemberStoreChecks> store_checks_;
  bool shutting_down_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::launcher
