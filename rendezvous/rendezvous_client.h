// RendezvousClient: the agent side of the rendezvous service. Thin: one async gRPC call per
// method, completions posted to the loop; retry policy belongs to the caller.
//
// Thread: loop only (gRPC threads only post completions). Every call in flight holds the
// loop's work, so run() cannot return before its completion has been delivered; CancelAll()
// makes them complete at once (with CANCELLED). Callbacks never run after the client is
// destroyed (they check a liveness token).
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/credentials.h"
#include "rendezvous/job_state.h"

namespace grpc {
class Channel;
}

namespace ftrun::rendezvous {

struct ClientOptions {
  std::string target;  // host:port of the server
  std::string run_id;
  std::string token;
  std::string node_id;
  // This node's credential ("" : a new one, 128 random bits); the server binds it to node_id
  // at the first Join and the client carries it in every call (credentials.h).
  std::string node_secret;
  TlsConfig tls;                // off: plain HTTP/2
  std::string tls_target_name;  // the name the server's certificate must hold ("" : target's)
  int min_nodes = 0;            // sent with Join so that the server can refuse a mismatch
  int max_nodes = 0;
  Duration call_timeout{10};
};

// The outcome of one call.
struct RpcOutcome {
  int code = 0;  // grpc::StatusCode; 0 is OK
  std::string message;
  NodeView view;            // valid when ok()
  std::string node_secret;  // Join: the credential the server bound to the node
  bool ok() const { return code == 0; }
  // The server is unreachable or slow: worth retrying.
  bool transient() const;
  bool unknown_node() const;  // NOT_FOUND: join again
  bool rank_held() const;     // ALREADY_EXISTS: join again later
  bool retry_later() const;   // ABORTED: the server answers, but not yet (rebuilding a round)
  bool cancelled() const;
};

class RendezvousClient {
 public:
  using Done = std::function<void(const RpcOutcome&)>;

  RendezvousClient(boost::asio::io_context& io, ClientOptions options);
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  const ClientOptions& options() const { return opts_; }

  void Join(const NodeInfo& node, Done done);
  // Long poll: answered once the view's version exceeds known_version, or after `wait`.
  void Watch(uint64_t known_version, Duration wait, Done done);
  void Report(const RoundReport& report, Done done);
  void Leave(Duration timeout, Done done);
  // The channel tries the server again now instead of after its reconnect backoff (up to
  // 1.2 s after a failed attempt); calls made from here on wait for that attempt.
  void ReconnectNow();
  // For operators: the job and its nodes (an empty run id in the options: any job).
  void Status(std::function<void(const RpcOutcome&, const JobStatus&)> done);
  // The same, asking for a stack dump or what one collected (JobStatus::stacks).
  void Status(const StatusQuery& query,
              std::function<void(const RpcOutcome&, const JobStatus&)> done);
  // Cancels every call in flight; their callbacks still run, with a cancelled outcome.
  void CancelAll();

  struct Calls;  // the calls in flight (shared with gRPC's completion threads)

 private:
  boost::asio::io_context& io_;
  ClientOptions opts_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<Calls> calls_;
};

}  // namespace ftrun::rendezvous
