#include "rendezvous/rendezvous_server.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <set>

#include "common/log.h"
#include "common/metrics_server.h"
#include "ftrun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/credentials.h"
#include "rendezvous/rendezvous_server_call.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {
namespace {

// A Watch reactor that reports the transport's cancellation (the agent went away).
class WatchReactor : public grpc::ServerUnaryReactor {
 public:
  WatchReactor(boost::asio::io_context& io, RendezvousServer* server, uint64_t id)
      : io_(io), server_(server), id_(id) {}
  void OnCancel() override {
    boost::asio::post(io_, [s = server_, id = id_] { s->OnWatchCancelled(id); });
  }
  void OnDone() override { delete this; }

 private:
  boost::asio::io_context& io_;
  RendezvousServer* server_;
  uint64_t id_;
};

}  // namespace

class RendezvousServer::Service : public v1::Rendezvous::CallbackService {
 public:
  Service(boost::asio::io_context& io, RendezvousServer* server) : io_(io), server_(server) {}

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const v1::JoinRequest* req,
                                 v1::JoinResponse* resp) override {
    return Post(ctx, ctx->DefaultReactor(), Call::Join{*req, resp});
  }
  grpc::ServerUnaryReactor* Watch(grpc::CallbackServerContext* ctx, const v1::WatchRequest* req,
                                  v1::WatchResponse* resp) override {
    uint64_t id = next_watch_id_++;
    return Post(ctx, new WatchReactor(io_, server_, id), Call::Watch{*req, resp, id});
  }
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx, const v1::ReportRequest* req,
                                   v1::ReportResponse* resp) override {
    return Post(ctx, ctx->DefaultReactor(), Call::Report{*req, resp});
  }
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const v1::StatusRequest* req,
                                   v1::JobStatus* resp) override {
    return Post(ctx, ctx->DefaultReactor(), Call::Status{*req, resp});
  }
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const v1::LeaveRequest* req,
                                  v1::LeaveResponse*) override {
    return Post(ctx, ctx->DefaultReactor(), Call::Leave{*req});
  }

 private:
  // Copies the request off gRPC's thread and hands it to the loop.
  grpc::ServerUnaryReactor* Post(grpc::CallbackServerContext* ctx,
                                 grpc::ServerUnaryReactor* reactor, Call::Request request) {
    auto call = std::make_shared<Call>(Call{reactor, ctx->peer(), std::move(request)});
    boost::asio::post(io_, [s = server_, call = std::move(call)] { s->Handle(call); });
    return reactor;
  }

  boost::asio::io_context& io_;
  RendezvousServer* server_;
  std::atomic<uint64_t> next_watch_id_{1};
};

namespace {

// Each server makes its own replica key: a restarted master hands out a new one with its
// first round, and every agent takes the key of its newest assignment.
ServerOptions WithReplicaKey(ServerOptions options) {
  if (options.job.replica_key.empty()) options.job.replica_key = NewSecret();
  return options;
}

}  // namespace

RendezvousServer::RendezvousServer(boost::asio::io_context& io, ServerOptions options)
    : io_(io),
      opts_(WithReplicaKey(std::move(options))),
      state_(opts_.job, Clock::now()),
      service_(std::make_unique<Service>(io, this)),
      timer_(io),
      linger_timer_(io),
      transitions_(opts_.event_log) {}

RendezvousServer::~RendezvousServer() {
  if (shutdown_thread_.joinable()) shutdown_thread_.join();
  if (server_ && !shutting_down_) {
    RendezvousLog()->error("rendezvous server destroyed without Shutdown(); stopping it now");
    server_->Shutdown(std::chrono::system_clock::now());
  }
}

Result<int> RendezvousServer::Start() {
  // gRPC reports a failed bind only as a null server; a plain bind first gives the reason.
  namespace ip = boost::asio::ip;
  boost::system::error_code ec;
  std::vector<std::string> addrs;
  if (opts_.listen_host.empty()) {
    addrs = {"[::]", "0.0.0.0"};
  } else {
    bool v6 = opts_.listen_host.find(':') != std::string::npos;
    addrs = {v6 ? "[" + opts_.listen_host + "]" : opts_.listen_host};
  }
  if (opts_.port != 0) {
    boost::asio::io_context probe_io;
    ip::tcp::acceptor probe(probe_io);
    ip::address any = opts_.listen_host.empty() ? ip::address(ip::address_v6::any())
                                                : ip::make_address(opts_.listen_host, ec);
    if (!ec) probe.open(ip::tcp::endpoint(any, 0).protocol(), ec);
    if (!ec) probe.set_option(ip::tcp::acceptor::reuse_address(true), ec);
    if (!ec) probe.bind(ip::tcp::endpoint(any, static_cast<unsigned short>(opts_.port)), ec);
    if (ec == boost::asio::error::address_in_use || ec == boost::asio::error::access_denied) {
      return Error{"cannot listen on port " + std::to_string(opts_.port) + ": " + ec.message()};
    }
  }
  auto creds = MakeServerCredentials(opts_.tls);
  if (!creds) return creds.error();
  for (const auto& host : addrs) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(host + ":" + std::to_string(opts_.port), *creds, &port);
    // Without this two agents could share the port and split the job between them.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
    // Calls in flight on one connection (each costs memory until the loop answers it).
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 64);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    if (server_ && port > 0) {
      work_.emplace(io_.get_executor());
      RendezvousLog()->info(
          "rendezvous server listening addr={}:{} run_id={} nnodes={}:{} max_restarts={} "
          "token={} tls={}",
          host, port, opts_.job.run_id, opts_.job.min_nodes, opts_.job.max_nodes,
          opts_.job.max_restarts, opts_.token.empty() ? "off" : "on",
          !opts_.tls.enabled()    ? "off"
          : opts_.tls.client_auth ? "mutual"
                                  : "on");
      ArmTimer();
      return port;
    }
    server_.reset();
  }
  return Error{"cannot listen on " + (opts_.listen_host.empty() ? "*" : opts_.listen_host) + ":" +
               std::to_string(opts_.port) + " (address in use or not local)"};
}

void RendezvousServer::Shutdown(std::function<void()> done) {
  if (shutting_down_ || !server_) {
    if (done) boost::asio::post(io_, std::move(done));
    return;
  }
  shutting_down_ = true;
  timer_.cancel();
  linger_timer_.cancel();
  while (!watches_.empty()) {
    auto call = watches_.begin()->second->call;
    DropWatch(watches_.begin());
    Answer(*call);
  }
  // grpc::Server::Shutdown waits for calls that need the loop: never on the loop.
  shutdown_thread_ = std::thread([this, done = std::move(done)]() mutable {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    boost::asio::post(io_, [this, done = std::move(done)] {
      if (shutdown_thread_.joinable()) shutdown_thread_.join();
      work_.reset();
      if (done) done();
    });
  });
}

void RendezvousServer::Handle(std::shared_ptr<Call> call) {
  try {
    Process(call);
  } catch (const std::exception& e) {  // never let a request take the loop down
    RendezvousLog()->error("internal error handling a request from {}: {}", call->peer, e.what());
    call->reactor->Finish(grpc::Status(grpc::StatusCode::INTERNAL, e.what()));
  }
}

void RendezvousServer::OnWatchCancelled(uint64_t watch_id) {
  auto it = watches_.find(watch_id);
  if (it == watches_.end()) return;  // already answered
  auto call = it->second->call;
  DropWatch(it);
  const std::string& node = call->header().node_id();
  RendezvousLog()->debug("watch cancelled by the transport node={} peer={}", node, call->peer);
  state_.Disconnected(node, Clock::now());
  call->reactor->Finish(grpc::Status::CANCELLED);
  AfterEvent();
}

void RendezvousServer::Answer(Call& call) {
  const std::string& node = call.header().node_id();
  ToWire(state_.View(node), call.watch().response->mutable_view());
  NoteAnswered(node);
  MarkInformed(node);
  call.reactor->Finish(grpc::Status::OK);
}

void RendezvousServer::NoteAnswered(const std::string& node_id) {
  if (!watch_of_node_.count(node_id)) state_.Answered(node_id, Clock::now());
}

void RendezvousServer::MarkInformed(const std::string& node_id) {
  if (state_.finished()) informed_.insert(node_id);
}

bool RendezvousServer::AllInformed() const {
  for (const auto& id : state_.NodeIds()) {
    if (!informed_.count(id)) return false;
  }
  return true;
}

void RendezvousServer::FinishAndShutdown(const std::string& abort_reason, Duration linger,
                                         std::function<void()> done) {
  if (shutting_down_ || !server_) return Shutdown(std::move(done));
  if (!state_.finished()) {
    state_.Abort(abort_reason);
    AfterEvent();
  }
  auto finish = std::make_shared<std::function<void()>>(
      [this, done = std::move(done)]() mutable { Shutdown(std::move(done)); });
  if (AllInformed()) return (*finish)();
  on_all_informed_ = [finish] { (*finish)(); };
  linger_timer_.expires_after(std::chrono::duration_cast<Clock::duration>(linger));
  linger_timer_.async_wait([this, finish](const boost::system::error_code& ec) {
    if (ec || shutting_down_) return;
    RendezvousLog()->info(
        "not every node has seen the job's end after the linger; stopping anyway");
    on_all_informed_ = nullptr;
    (*finish)();
  });
}

void RendezvousServer::AfterEvent() {
  LogTransitions();
  ForgetCredentials();
  if (state_.finished() && on_finished_) {
    auto f = std::move(on_finished_);
    on_finished_ = nullptr;
    f(state_.View(""));
  }
  NotifyWatchers();
  ArmTimer();
  if (on_all_informed_ && AllInformed()) {
    auto f = std::move(on_all_informed_);
    on_all_informed_ = nullptr;
    f();
  }
}

void RendezvousServer::NotifyWatchers() {
  if (state_.version() == notified_version_) return;
  notified_version_ = state_.version();
  for (auto it = watches_.begin(); it != watches_.end();) {
    Call& call = *it->second->call;
    if (call.watch().request.known_version() < state_.version() || state_.finished()) {
      auto keep = it->second->call;
      DropWatch(it++);
      Answer(*keep);
    } else {
      ++it;
    }
  }
}

void RendezvousServer::ArmTimer() {
  if (shutting_down_) return;
  std::optional<TimePoint> next = state_.NextDeadline();
  if (!watch_deadlines_.empty()) {
    TimePoint w = watch_deadlines_.begin()->first;
    next = next ? std::min(*next, w) : w;
  }
  if (!next) return;
  timer_.expires_at(*next);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    // Behind the calls already queued: a node whose call waits there is not silent.
    boost::asio::post(io_, [this] {
      if (!shutting_down_) OnTimer();
    });
  });
}

void RendezvousServer::OnTimer() {
  const TimePoint now = Clock::now();
  // A node waiting in a long poll is alive, however long the poll.
  for (const auto& [id, w] : watches_) state_.Seen(w->call->header().node_id(), now);
  state_.Tick(now);
  while (!watch_deadlines_.empty() && watch_deadlines_.begin()->first <= now) {
    uint64_t id = watch_deadlines_.begin()->second;
    watch_deadlines_.erase(watch_deadlines_.begin());
    auto it = watches_.find(id);
    if (it == watches_.end()) continue;
    auto call = it->second->call;
    it->second->deadline = watch_deadlines_.end();  // already erased
    DropWatch(it);
    Answer(*call);
  }
  AfterEvent();
}

}  // namespace ftrun::rendezvous
