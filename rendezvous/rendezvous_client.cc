#include "rendezvous/rendezvous_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <mutex>
#include <set>

#include "ftrun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {

bool RpcOutcome::transient() const {
  return code == static_cast<int>(grpc::StatusCode::UNAVAILABLE) ||
         code == static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED) ||
         code == static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED) ||
         code == static_cast<int>(grpc::StatusCode::UNKNOWN) ||
         code == static_cast<int>(grpc::StatusCode::INTERNAL);
}
bool RpcOutcome::unknown_node() const {
  return code == static_cast<int>(grpc::StatusCode::NOT_FOUND);
}
bool RpcOutcome::rank_held() const {
  return code == static_cast<int>(grpc::StatusCode::ALREADY_EXISTS);
}
bool RpcOutcome::retry_later() const { return code == static_cast<int>(grpc::StatusCode::ABORTED); }
bool RpcOutcome::cancelled() const { return code == static_cast<int>(grpc::StatusCode::CANCELLED); }

// The contexts of the calls in flight, so that CancelAll can reach them. Shared with the
// completion callbacks (which run on gRPC threads), hence the mutex.
struct RendezvousClient::Calls {
  std::mutex mu;
  std::set<grpc::ClientContext*> in_flight;
  bool alive = true;
  std::unique_ptr<v1::Rendezvous::Stub> stub;
};

namespace {

template <class Req, class Resp>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
};

}  // namespace

RendezvousClient::RendezvousClient(boost::asio::io_context& io, ClientOptions options)
    : io_(io), opts_(std::move(options)), calls_(std::make_shared<Calls>()) {
  grpc::ChannelArguments args;
  // Reconnect quickly: the server is often an agent that starts a moment later.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  if (!opts_.tls_target_name.empty()) {
    args.SetSslTargetNameOverride(opts_.tls_target_name);
  }
  if (opts_.node_secret.empty()) opts_.node_secret = NewSecret();
  channel_ = grpc::CreateCustomChannel(opts_.target, MakeChannelCredentials(opts_.tls), args);
  calls_->stub = v1::Rendezvous::NewStub(channel_);
}

void RendezvousClient::ReconnectNow() {
  grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
}

RendezvousClient::~RendezvousClient() {
  std::lock_guard lock(calls_->mu);
  calls_->alive = false;
  for (auto* ctx : calls_->in_flight) ctx->TryCancel();
}

namespace {

void FillHeader(const ClientOptions& o, v1::RequestHeader* h) {
  h->set_protocol_version(kProtocolVersion);
  h->set_run_id(o.run_id);
  h->set_token(o.token);
  h->set_node_id(o.node_id);
  if (!o.node_id.empty()) h->set_node_secret(o.node_secret);
}

// Starts `invoke` for `call`, keeping the loop busy until `done` has run on it.
// wait_for_ready: the call waits (up to its deadline) for the channel to connect, instead of
// failing at once while the server is unreachable.
template <class C, class Invoke, class ToOutcome>
void Launch(boost::asio::io_context& io, std::shared_ptr<RendezvousClient::Calls> calls,
            std::shared_ptr<C> call, Duration timeout, bool wait_for_ready, Invoke invoke,
            ToOutcome to_outcome, RendezvousClient::Done done) {
  call->ctx.set_wait_for_ready(wait_for_ready);
  call->ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  {
    std::lock_guard lock(calls->mu);
    calls->in_flight.insert(&call->ctx);
  }
  auto work =
      std::make_shared<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>(
          io.get_executor());
  invoke(calls->stub.get(), call,
         [&io, calls, call, work, to_outcome, done = std::move(done)](grpc::Status status) mutable {
           {
             std::lock_guard lock(calls->mu);
             calls->in_flight.erase(&call->ctx);
           }
           RpcOutcome out;
           out.code = static_cast<int>(status.error_code());
           out.message = status.error_message();
           if (status.ok()) to_outcome(*call, out);
           // Everything this callback holds is handed to the loop and released there: the call's
           // context and the stub keep the grpc::Channel alive, and the last reference to a Channel
           // dropped on gRPC's callback thread destroys that thread's completion queue under it (a
           // double free in gRPC 1.51, found by ASan when `ftrun status` exits).
           boost::asio::post(
               io, [calls = std::move(calls), call = std::move(call), work = std::move(work),
                    out = std::move(out), done = std::move(done)] {
                 bool alive;
                 {
                   std::lock_guard lock(calls->mu);
                   alive = calls->alive;
                 }
                 if (alive) done(out);
                 work->reset();
               });
         });
}

}  // namespace

void RendezvousClient::Join(const NodeInfo& node, Done done) {
  using C = Call<v1::JoinRequest, v1::JoinResponse>;
  auto call = std::make_shared<C>();
  FillHeader(opts_, call->req.mutable_header());
  ToWire(node, call->req.mutable_node());
  call->req.mutable_node()->set_min_nodes(opts_.min_nodes);
  call->req.mutable_node()->set_max_nodes(opts_.max_nodes);
  // Waiting for the channel lets a join go through the moment the server comes up; the short
  // deadline keeps the caller's retry log lines coming.
  Launch(
      io_, calls_, call, std::min<Duration>(opts_.call_timeout, Duration(1)), true,
      [](auto* stub, auto c, auto cb) {
        stub->async()->Join(&c->ctx, &c->req, &c->resp, std::move(cb));
      },
      [](C& c, RpcOutcome& out) {
        out.view = FromWire(c.resp.view());
        out.node_secret = c.resp.node_secret();
      },
      [this, done = std::move(done)](const RpcOutcome& out) {
        // A server that issued its own secret (one that did not take ours): carry that one.
        if (out.ok() && !out.node_secret.empty()) opts_.node_secret = out.node_secret;
        done(out);
      });
}

void RendezvousClient::Watch(uint64_t known_version, Duration wait, Done done) {
  using C = Call<v1::WatchRequest, v1::WatchResponse>;
  auto call = std::make_shared<C>();
  FillHeader(opts_, call->req.mutable_header());
  call->req.set_known_version(known_version);
  // The server caps the wait at seconds; the cap here only keeps the value in range.
  call->req.set_wait_ms(static_cast<uint32_t>(std::clamp(wait.count() * 1000, 0.0, 3.6e6)));
  Launch(
      io_, calls_, call, wait + opts_.call_timeout, false,
      [](auto* stub, auto c, auto cb) {
        stub->async()->Watch(&c->ctx, &c->req, &c->resp, std::move(cb));
      },
      [](C& c, RpcOutcome& out) { out.view = FromWire(c.resp.view()); }, std::move(done));
}

void RendezvousClient::Report(const RoundReport& report, Done done) {
  using C = Call<v1::ReportRequest, v1::ReportResponse>;
  auto call = std::make_shared<C>();
  FillHeader(opts_, call->req.mutable_header());
  ToWire(report, &call->req);
  Launch(
      io_, calls_, call, opts_.call_timeout, false,
      [](auto* stub, auto c, auto cb) {
        stub->async()->Report(&c->ctx, &c->req, &c->resp, std::move(cb));
      },
      [](C& c, RpcOutcome& out) { out.view = FromWire(c.resp.view()); }, std::move(done));
}

void RendezvousClient::Leave(Duration timeout, Done done) {
  using C = Call<v1::LeaveRequest, v1::LeaveResponse>;
  auto call = std::make_shared<C>();
  FillHeader(opts_, call->req.mutable_header());
  Launch(
      io_, calls_, call, timeout, false,
      [](auto* stub, auto c, auto cb) {
        stub->async()->Leave(&c->ctx, &c->req, &c->resp, std::move(cb));
      },
      [](C&, RpcOutcome&) {}, std::move(done));
}

void RendezvousClient::Status(std::function<void(const RpcOutcome&, const JobStatus&)> done) {
  Status(StatusQuery{}, std::move(done));
}

void RendezvousClient::Status(const StatusQuery& query,
                              std::function<void(const RpcOutcome&, const JobStatus&)> done) {
  using C = Call<v1::StatusRequest, v1::JobStatus>;
  auto call = std::make_shared<C>();
  FillHeader(opts_, call->req.mutable_header());
  call->req.set_dump_stacks(query.dump_stacks);
  call->req.set_stacks_id(query.stacks_id);
  auto status = std::make_shared<JobStatus>();
  Launch(
      io_, calls_, call, opts_.call_timeout, true,
      [](auto* stub, auto c, auto cb) {
        stub->async()->Status(&c->ctx, &c->req, &c->resp, std::move(cb));
      },
      [status](C& c, RpcOutcome&) { *status = FromWire(c.resp); },
      [status, done = std::move(done)](const RpcOutcome& out) { done(out, *status); });
}

void RendezvousClient::CancelAll() {
  std::lock_guard lock(calls_->mu);
  for (auto* ctx : calls_->in_flight) ctx->TryCancel();
}

}  // namespace ftrun::rendezvous
