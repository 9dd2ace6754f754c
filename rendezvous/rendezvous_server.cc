#include "rendezvous/rendezvous_server.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <set>

#include "ftrun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/log.h"
#include "rendezvous/metrics_server.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {
namespace {

auto& Log() {
  static auto logger = Logger("rendezvous");
  return logger;
}

}  // namespace

struct RendezvousServer::Call {
  enum class Kind { kJoin, kWatch, kReport, kLeave, kStatus } kind = Kind::kJoin;
  grpc::ServerUnaryReactor* reactor = nullptr;
  std::string peer;
  v1::JoinRequest join;
  v1::WatchRequest watch;
  v1::ReportRequest report;
  v1::LeaveRequest leave;
  v1::StatusRequest status;
  v1::JobStatus* status_response = nullptr;
  v1::JoinResponse* join_response = nullptr;
  v1::WatchResponse* watch_response = nullptr;
  v1::ReportResponse* report_response = nullptr;
  uint64_t watch_id = 0;

  const v1::RequestHeader& header() const {
    switch (kind) {
      case Kind::kJoin: return join.header();
      case Kind::kWatch: return watch.header();
      case Kind::kReport: return report.header();
      case Kind::kLeave: return leave.header();
      case Kind::kStatus: return status.header();
    }
    return join.header();
  }
};

struct RendezvousServer::PendingWatch {
  std::shared_ptr<Call> call;
  std::multimap<TimePoint, uint64_t>::iterator deadline;
};

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
    auto call = Make(ctx, Call::Kind::kJoin, ctx->DefaultReactor());
    call->join = *req;
    call->join_response = resp;
    return Post(call);
  }
  grpc::ServerUnaryReactor* Watch(grpc::CallbackServerContext* ctx, const v1::WatchRequest* req,
                                  v1::WatchResponse* resp) override {
    uint64_t id = next_watch_id_++;
    auto call = Make(ctx, Call::Kind::kWatch, new WatchReactor(io_, server_, id));
    call->watch_id = id;
    call->watch = *req;
    call->watch_response = resp;
    return Post(call);
  }
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx,
                                   const v1::ReportRequest* req,
                                   v1::ReportResponse* resp) override {
    auto call = Make(ctx, Call::Kind::kReport, ctx->DefaultReactor());
    call->report = *req;
    call->report_response = resp;
    return Post(call);
  }
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const v1::StatusRequest* req, v1::JobStatus* resp) override {
    auto call = Make(ctx, Call::Kind::kStatus, ctx->DefaultReactor());
    call->status = *req;
    call->status_response = resp;
    return Post(call);
  }
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const v1::LeaveRequest* req,
                                  v1::LeaveResponse*) override {
    auto call = Make(ctx, Call::Kind::kLeave, ctx->DefaultReactor());
    call->leave = *req;
    return Post(call);
  }

 private:
  std::shared_ptr<Call> Make(grpc::CallbackServerContext* ctx, Call::Kind kind,
                             grpc::ServerUnaryReactor* reactor) {
    auto call = std::make_shared<Call>();
    call->kind = kind;
    call->reactor = reactor;
    call->peer = ctx->peer();
    return call;
  }
  grpc::ServerUnaryReactor* Post(std::shared_ptr<Call> call) {
    grpc::ServerUnaryReactor* reactor = call->reactor;
    boost::asio::post(io_, [s = server_, call = std::move(call)] { s->Handle(call); });
    return reactor;
  }

  boost::asio::io_context& io_;
  RendezvousServer* server_;
  std::atomic<uint64_t> next_watch_id_{1};
};

RendezvousServer::RendezvousServer(boost::asio::io_context& io, ServerOptions options)
    : io_(io),
      opts_(std::move(options)),
      state_(opts_.job, Clock::now()),
      service_(std::make_unique<Service>(io, this)),
      timer_(io),
      linger_timer_(io) {}

RendezvousServer::~RendezvousServer() {
  if (shutdown_thread_.joinable()) shutdown_thread_.join();
  if (server_ && !shutting_down_) {
    Log()->error("rendezvous server destroyed without Shutdown(); stopping it now");
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
  for (const auto& host : addrs) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(host + ":" + std::to_string(opts_.port),
                             grpc::InsecureServerCredentials(), &port);
    // Without this two agents could share the port and split the job between them.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.SetMaxReceiveMessageSize(8 * 1024 * 1024);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    if (server_ && port > 0) {
      work_.emplace(io_.get_executor());
      Log()->info("rendezvous server listening addr={}:{} run_id={} nnodes={}:{} max_restarts={}",
                  host, port, opts_.job.run_id, opts_.job.min_nodes, opts_.job.max_nodes,
                  opts_.job.max_restarts);
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
    watches_.erase(watches_.begin());
    Answer(*call);
  }
  watch_deadlines_.clear();
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
    Log()->error("internal error handling a request from {}: {}", call->peer, e.what());
    call->reactor->Finish(grpc::Status(grpc::StatusCode::INTERNAL, e.what()));
  }
}

void RendezvousServer::OnWatchCancelled(uint64_t watch_id) {
  auto it = watches_.find(watch_id);
  if (it == watches_.end()) return;  // already answered
  auto call = it->second->call;
  watch_deadlines_.erase(it->second->deadline);
  watches_.erase(it);
  const std::string& node = call->watch.header().node_id();
  Log()->debug("watch cancelled by the transport node={} peer={}", node, call->peer);
  state_.Disconnected(node, Clock::now());
  call->reactor->Finish(grpc::Status::CANCELLED);
  AfterEvent();
}

void RendezvousServer::Process(const std::shared_ptr<Call>& call_ptr) {
  using grpc::StatusCode;
  Call& call = *call_ptr;
  auto reject = [&](StatusCode code, const std::string& message) {
    Log()->warn("rejected {} from node={} peer={}: {}",
                call.kind == Call::Kind::kJoin ? "join" : "request", call.header().node_id(),
                call.peer, message);
    call.reactor->Finish(grpc::Status(code, message));
  };
  const v1::RequestHeader& h = call.header();
  const JobSpec& spec = state_.spec();
  if (shutting_down_) return call.reactor->Finish({StatusCode::UNAVAILABLE, "server stopping"});
  if (h.protocol_version() != kProtocolVersion) {
    return reject(StatusCode::FAILED_PRECONDITION,
                  "protocol version " + std::to_string(h.protocol_version()) +
                      " differs from the server's " + std::to_string(kProtocolVersion));
  }
  if (!opts_.token.empty() && h.token() != opts_.token) {
    return reject(StatusCode::PERMISSION_DENIED, "missing or wrong job token");
  }
  if (call.kind == Call::Kind::kStatus && (h.run_id().empty() || h.run_id() == spec.run_id)) {
    ToWire(state_.Status(Clock::now()), call.status_response);
    return call.reactor->Finish(grpc::Status::OK);
  }
  if (h.run_id() != spec.run_id) {
    return reject(StatusCode::FAILED_PRECONDITION, "run id '" + h.run_id() +
                                                       "' differs from the server's '" +
                                                       spec.run_id + "'");
  }
  if (h.node_id().empty() || h.node_id().size() > 256) {
    return reject(StatusCode::INVALID_ARGUMENT, "node id missing or too long");
  }
  const std::string& node = h.node_id();
  const TimePoint now = Clock::now();
  if (call.kind == Call::Kind::kJoin) {
    const v1::NodeInfo& n = call.join.node();
    if (auto s = CheckLimits(n); !s) {
      return reject(StatusCode::INVALID_ARGUMENT, s.error().message);
    }
    if (n.max_nodes() != 0 &&
        (n.min_nodes() != spec.min_nodes || n.max_nodes() != spec.max_nodes)) {
      return reject(StatusCode::FAILED_PRECONDITION,
                    "--nnodes " + std::to_string(n.min_nodes()) + ":" +
                        std::to_string(n.max_nodes()) + " on " + n.host() +
                        " differs from the server's " + std::to_string(spec.min_nodes) + ":" +
                        std::to_string(spec.max_nodes));
    }
    if (auto refusal = state_.Join(FromWire(n, node), now)) {
      return reject(refusal->kind == JoinRefusal::Kind::kRetry ? StatusCode::ALREADY_EXISTS
                                                               : StatusCode::FAILED_PRECONDITION,
                    refusal->message);
    }

    ToWire(state_.View(node), call.join_response->mutable_view());
    MarkInformed(node);
    call.reactor->Finish(grpc::Status::OK);
    return AfterEvent();
  }
  if (call.kind == Call::Kind::kLeave) {
    state_.Leave(node, now);
    informed_.erase(node);
    call.reactor->Finish(grpc::Status::OK);
    return AfterEvent();
  }
  if (!state_.IsNode(node) && !state_.IsExcluded(node)) {
    return call.reactor->Finish({StatusCode::NOT_FOUND, "node " + node +
                                                            " is not in the job (lost, or never "
                                                            "joined); join again"});
  }
  state_.Seen(node, now);
  if (call.kind == Call::Kind::kWatch) {
    if (state_.version() > call.watch.known_version() || state_.finished()) {
      Answer(call);
      return AfterEvent();
    }
    auto wait = std::min<Duration>(Duration(call.watch.wait_ms() / 1000.0), opts_.max_watch_wait);
    TimePoint deadline = now + std::chrono::duration_cast<Clock::duration>(wait);
    auto pending = std::make_unique<PendingWatch>();
    pending->call = call_ptr;
    pending->deadline = watch_deadlines_.emplace(deadline, call.watch_id);
    watches_[call.watch_id] = std::move(pending);
    return ArmTimer();
  }
  // Report.
  const v1::ReportRequest& r = call.report;
  if (auto s = CheckLimits(r); !s) return reject(StatusCode::INVALID_ARGUMENT, s.error().message);

  switch (r.kind()) {
    case v1::ReportRequest::KIND_FAILED: {
      std::vector<WorkerFailure> failures;
      for (const auto& f : r.failures()) failures.push_back(FromWire(f));
      if (failures.empty()) {
        return reject(StatusCode::INVALID_ARGUMENT, "failure report without failures");
      }
      state_.ReportFailed(node, r.round(), failures, now);
      break;
    }
    case v1::ReportRequest::KIND_SUCCEEDED:
      state_.ReportSucceeded(node, r.round(), now);
      break;
    case v1::ReportRequest::KIND_STOPPED:
      state_.ReportStopped(node, r.round(), r.free_port(), now);
      break;
    case v1::ReportRequest::KIND_PROGRESS: {
      std::vector<RankProgress> ranks;
      for (const auto& p : r.progress()) ranks.push_back(FromWire(p));
      state_.ReportProgress(node, r.round(), r.save_id(), ranks, now);
      break;
    }
    case v1::ReportRequest::KIND_SAVED:
      state_.ReportSaved(node, r.round(), r.save_id(), r.saver_rank(), r.finalize(), r.ok(),
                         r.error(), now);
      break;
    case v1::ReportRequest::KIND_CHECKED: {
      std::vector<CheckTaskResult> results;
      for (const auto& c : r.check_results()) results.push_back(FromWire(c));
      state_.ReportCheck(node, r.round(), r.check_id(), results, now);
      break;
    }
    default:
      return reject(StatusCode::INVALID_ARGUMENT,
                    "unknown report kind " + std::to_string(r.kind()));
  }
  ToWire(state_.View(node), call.report_response->mutable_view());
  MarkInformed(node);
  call.reactor->Finish(grpc::Status::OK);
  AfterEvent();
}

void RendezvousServer::Answer(Call& call) {
  const std::string& node = call.watch.header().node_id();
  ToWire(state_.View(node), call.watch_response->mutable_view());
  MarkInformed(node);
  call.reactor->Finish(grpc::Status::OK);
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
    Log()->info("not every node has seen the job's end after the linger; stopping anyway");
    on_all_informed_ = nullptr;
    (*finish)();
  });
}

void RendezvousServer::AfterEvent() {
  LogTransitions();
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
    if (call.watch.known_version() < state_.version() || state_.finished()) {
      watch_deadlines_.erase(it->second->deadline);
      auto keep = it->second->call;
      it = watches_.erase(it);
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
    if (!ec) OnTimer();
  });
}

void RendezvousServer::OnTimer() {
  const TimePoint now = Clock::now();
  // A node waiting in a long poll is alive, however long the poll.
  for (const auto& [id, w] : watches_) state_.Seen(w->call->watch.header().node_id(), now);
  state_.Tick(now);
  while (!watch_deadlines_.empty() && watch_deadlines_.begin()->first <= now) {
    uint64_t id = watch_deadlines_.begin()->second;
    watch_deadlines_.erase(watch_deadlines_.begin());
    auto it = watches_.find(id);
    if (it == watches_.end()) continue;
    auto call = it->second->call;
    watches_.erase(it);
    Answer(*call);
  }
  AfterEvent();
}

}  // namespace ftrun::rendezvous
