// RendezvousServer: the gRPC adapter around RendezvousState. Hosted by the agent that owns
// the rendezvous address, or alone by `ftrun master`.
//
// Thread: gRPC threads only copy requests and post them to the loop (the io_context passed
// in); every state change, answer and timer runs on the loop. Pending Watch calls (long
// polls) are answered when the node's view changes, or after their wait. A Watch cancelled
// by the transport (the agent died) makes the node "disconnected" (lost after a grace), as
// does an answered one the node does not follow with a call (RendezvousState::Answered).
//
// Who may call (ftrun(1), SECURITY): with a token, only callers that carry it; a node that
// joined speaks only with the secret it joined with (per-node credentials, also without a
// token). Rejections are logged at most once a second, without the peer's text before it is
// authenticated. Pending watches are capped per node (one), per peer address and in all.
//
// Lifetime: Start() binds; Shutdown() answers what is pending and stops gRPC on a helper
// thread while the loop keeps running; the loop's run() returns only once that is done.
// The object must outlive the loop's run(). Errors: Start() names the address; bad requests
// get a gRPC status naming the problem and a log line; nothing a peer sends crashes it.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "common/event_log.h"
#include "common/result.h"
#include "rendezvous/credentials.h"
#include "rendezvous/rendezvous_state.h"
#include "rendezvous/stacks_board.h"
#include "rendezvous/transition_log.h"

namespace grpc {
class Server;
}
namespace ftrun::v1 {
class StatusRequest;
class ReportRequest;
}  // namespace ftrun::v1

namespace ftrun::rendezvous {

struct ServerOptions {
  std::string listen_host;  // "" : every address ([::] and 0.0.0.0)
  int port = 0;             // 0 : any free port
  JobSpec job;
  std::string token;  // "" : no token required (compared in constant time)
  TlsConfig tls;      // off: plain HTTP/2
  Duration max_watch_wait{10};
  std::shared_ptr<EventLog> event_log;  // optional
  // Bounds on what peers may hold; a call past one gets RESOURCE_EXHAUSTED.
  size_t max_nodes_joined = 0;        // nodes (0: 4 x job.max_nodes + 64)
  size_t max_watches_per_peer = 512;  // pending Watch calls from one address (one per node)
};

// Requests bigger than this are refused by gRPC (RESOURCE_EXHAUSTED).
inline constexpr int kMaxRequestBytes = 8 * 1024 * 1024;

class RendezvousServer {
 public:
  RendezvousServer(boost::asio::io_context& io, ServerOptions options);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  // Binds and starts serving; returns the port. "address in use" and the like name it.
  Result<int> Start();
  // Idempotent. `done` (optional) runs on the loop once gRPC has stopped.
  void Shutdown(std::function<void()> done = {});
  // Fails the job if it is still going (the hosting agent is leaving), then keeps serving
  // until every node has seen the job's end or `linger` passes, then shuts down.
  void FinishAndShutdown(const std::string& abort_reason, Duration linger,
                         std::function<void()> done = {});

  // Loop only.
  const RendezvousState& state() const { return state_; }
  // Watch calls waiting for a change (loop only; lets tests wait for a watch to arrive).
  size_t pending_watches() const { return watches_.size(); }
  // Prometheus text for --metrics-port (loop only).
  std::string RenderMetrics() const;
  // Runs once, on the loop, when the job succeeds or fails.
  void OnJobFinished(std::function<void(const NodeView&)> callback) {
    on_finished_ = std::move(callback);
  }

  // Posted by the gRPC service (defined in the .cc); public for that only.
  struct Call;
  void Handle(std::shared_ptr<Call> call);
  void OnWatchCancelled(uint64_t watch_id);

 private:
  class Service;
  struct PendingWatch;

  void Process(const std::shared_ptr<Call>& call);
  // rendezvous_server_requests.cc: refusals, the caps and the nodes' credentials.
  void Reject(Call& call, int grpc_code, const std::string& message, bool authenticated);
  std::optional<std::string> AdmitWatch(Call& call);  // why a new watch is refused
  void DropWatch(std::map<uint64_t, std::unique_ptr<PendingWatch>>::iterator it);
  size_t MaxNodes() const;
  void ForgetCredentials();  // of nodes the job no longer knows
  void Answer(Call& call);
  // A call of the node was answered: with no watch of it pending, it has no call in flight.
  void NoteAnswered(const std::string& node_id);
  void AfterEvent();
  void NotifyWatchers();
  void ArmTimer();
  void OnTimer();
  void LogTransitions();
  bool AllInformed() const;
  void MarkInformed(const std::string& node_id);
  // rendezvous_server_stacks.cc: stack-dump orders (stacks_board.h). AddStacks fills the
  // status with what `request` asks for; true when it opened a new order.
  bool AddStacks(const v1::StatusRequest& request, JobStatus& job);
  void TakeStacks(const std::string& node, const v1::ReportRequest& report);

  boost::asio::io_context& io_;
  ServerOptions opts_;
  RendezvousState state_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread shutdown_thread_;
  bool shutting_down_ = false;

  // State below is touched only on the loop.
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer linger_timer_;
  uint64_t next_watch_id_ = 1;
  std::map<uint64_t, std::unique_ptr<PendingWatch>> watches_;
  std::multimap<TimePoint, uint64_t> watch_deadlines_;
  uint64_t notified_version_ = 0;
  std::map<std::string, size_t> watches_per_peer_;   // peer address -> pending watches
  std::map<std::string, uint64_t> watch_of_node_;    // node -> its pending watch
  std::map<std::string, std::string> node_secrets_;  // node -> the secret it joined with
  uint64_t rejected_total_ = 0;
  uint64_t rejects_unlogged_ = 0;
  TimePoint last_reject_log_{};
  std::set<std::string> informed_;  // nodes that were sent the job's final view
  std::function<void()> on_all_informed_;
  std::function<void(const NodeView&)> on_finished_;
  TransitionLog transitions_;
  StacksBoard stacks_;
};

}  // namespace ftrun::rendezvous
