#include "rendezvous/etcd/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <mutex>
#include <set>

#include "common/endpoint.h"
#include "common/log.h"
#include "etcd/rpc.grpc.pb.h"

namespace ftrun::rendezvous::etcd {

bool EtcdStatus::cancelled() const { return code == static_cast<int>(grpc::StatusCode::CANCELLED); }

std::string EtcdStatus::ToString() const {
  return ok() ? "ok" : fmt::format("code={} {}", code, message);
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// Shared with gRPC's threads: the contexts in flight (for CancelAll) and the auth token.
struct EtcdClient::Shared {
  std::mutex mu;
  std::set<grpc::ClientContext*> in_flight;
  bool alive = true;
  std::string token;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Auth::Stub> auth;

  bool Register(grpc::ClientContext* ctx) {
    std::lock_guard lock(mu);
    if (!alive) return false;
    in_flight.insert(ctx);
    return true;
  }
  void Unregister(grpc::ClientContext* ctx) {
    std::lock_guard lock(mu);
    in_flight.erase(ctx);
  }
  void Cancel(grpc::ClientContext* ctx) {
    std::lock_guard lock(mu);
    if (in_flight.count(ctx)) ctx->TryCancel();
  }
  std::string Token() {
    std::lock_guard lock(mu);
    return token;
  }
};

namespace {

using WorkGuard = boost::asio::executor_work_guard<boost::asio::io_context::executor_type>;

std::atomic<uint64_t> calls_started{0};

EtcdStatus FromGrpc(const grpc::Status& s) {
  return {static_cast<int>(s.error_code()), s.error_message()};
}

bool IsTokenError(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         s.error_message().find("invalid auth token") != std::string::npos;
}

template <class Req, class Resp>
struct UnaryCall {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
};

// A bidirectional stream of etcd's (Watch, LeaseKeepAlive) driven by gRPC's callback API.
// Deletes itself when the stream is done.
template <class Req, class Resp>
class StreamReactor : public grpc::ClientBidiReactor<Req, Resp> {
 public:
  using OnResponse = std::function<void(const Resp&)>;
  using OnEnded = std::function<void(const EtcdStatus&)>;

  StreamReactor(boost::asio::io_context& io, std::shared_ptr<EtcdClient::Shared> shared, Req first,
                bool one_shot, OnResponse on_response, OnEnded on_ended)
      : io_(io),
        work_(io.get_executor()),
        shared_(std::move(shared)),
        req_(std::move(first)),
        one_shot_(one_shot),
        on_response_(std::move(on_response)),
        on_ended_(std::move(on_ended)) {}

  grpc::ClientContext* context() { return &ctx_; }

  template <class StartFn>
  void Begin(StartFn start) {
    calls_started.fetch_add(1, std::memory_order_relaxed);
    const std::string token = shared_->Token();
    if (!token.empty()) ctx_.AddMetadata("token", token);
    if (!shared_->Register(&ctx_)) {
      boost::asio::post(io_, [cb = std::move(on_ended_), w = std::move(work_)]() mutable {
        cb({static_cast<int>(grpc::StatusCode::CANCELLED), "client destroyed"});
      });
      delete this;
      return;
    }
    start(&ctx_, this);
    this->StartWrite(&req_);
    this->StartRead(&resp_);
    this->StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (ok && one_shot_) this->StartWritesDone();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    boost::asio::post(io_, [cb = on_response_, r = resp_] { cb(r); });
    if (one_shot_) {
      ctx_.TryCancel();  // one answer is all a keep-alive wants
      return;
    }
    this->StartRead(&resp_);
  }
  void OnDone(const grpc::Status& s) override {
    shared_->Unregister(&ctx_);
    EtcdStatus st = FromGrpc(s);
    if (IsTokenError(s)) {
      std::lock_guard lock(shared_->mu);
      shared_->token.clear();
    }
    boost::asio::post(io_,
                      [cb = std::move(on_ended_), st, w = std::move(work_)]() mutable { cb(st); });
    delete this;
  }

 private:
  boost::asio::io_context& io_;
  WorkGuard work_;
  std::shared_ptr<EtcdClient::Shared> shared_;
  grpc::ClientContext ctx_;
  Req req_;
  Resp resp_;
  bool one_shot_;
  OnResponse on_response_;
  OnEnded on_ended_;
};

class StreamHandle : public EtcdStream {
 public:
  StreamHandle(std::shared_ptr<EtcdClient::Shared> shared, grpc::ClientContext* ctx,
               std::shared_ptr<bool> alive)
      : shared_(std::move(shared)), ctx_(ctx), alive_(std::move(alive)) {}
  ~StreamHandle() override {
    *alive_ = false;
    shared_->Cancel(ctx_);
  }

 private:
  std::shared_ptr<EtcdClient::Shared> shared_;
  grpc::ClientContext* ctx_;
  std::shared_ptr<bool> alive_;
};

// gRPC 1.51 frees its callback completion queue with the last channel that used it, and a
// channel that uses one while the freed queue's thread winds down aborts the process
// (ref_counted "prior > 0"; seen when a test process made a client after its last had gone).
// So one channel, never freed, makes one callback call at the first client and keeps the
// queue for the process.
void KeepCallbackQueue() {
  static const bool kept = [] {
    auto* channel = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
    auto* stub = new std::unique_ptr<pb::KV::Stub>(pb::KV::NewStub(*channel));
    auto* call = new UnaryCall<pb::RangeRequest, pb::RangeResponse>();
    call->ctx.set_deadline(std::chrono::system_clock::now());
    (*stub)->async()->Range(&call->ctx, &call->req, &call->resp, [](grpc::Status) {});
    return true;
  }();
  (void)kept;
}

// "host:port" with an IP literal for gRPC's ipv4:/ipv6: target lists.
Result<std::string> ResolveEndpoint(const std::string& text) {
  auto ep = ParseEndpoint(text, 2379, "--rdzv-endpoint");
  if (!ep) return ep.error();
  boost::system::error_code ec;
  auto addr = boost::asio::ip::make_address(ep->host, ec);
  if (ec) {
    boost::asio::io_context io;
    boost::asio::ip::tcp::resolver resolver(io);
    auto results = resolver.resolve(ep->host, std::to_string(ep->port), ec);
    if (ec || results.empty()) {
      return Error{"--rdzv-endpoint: cannot resolve etcd member '" + ep->host +
                   "': " + (ec ? ec.message() : "no address")};
    }
    addr = results.begin()->endpoint().address();
  }
  return Ok(addr.is_v6() ? "[" + addr.to_string() + "]:" + std::to_string(ep->port)
                         : addr.to_string() + ":" + std::to_string(ep->port));
}

}  // namespace

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(boost::asio::io_context& io,
                                                       EtcdClientOptions options) {
  if (options.endpoints.empty()) return Error{"--rdzv-endpoint: no etcd endpoint given"};
  KeepCallbackQueue();
  std::vector<std::string> v4, v6;
  std::string tls_name;
  for (const auto& e : options.endpoints) {
    auto r = ResolveEndpoint(e);
    if (!r) return r.error();
    (r->front() == '[' ? v6 : v4).push_back(*r);
    if (tls_name.empty()) {
      if (auto ep = ParseEndpoint(e, 2379, "--rdzv-endpoint")) tls_name = ep->host;
    }
  }
  // One scheme per target: IPv4 members when there are any, else the IPv6 ones.
  const bool use_v4 = !v4.empty();
  std::string target = use_v4 ? "ipv4:" : "ipv6:";
  const auto& list = use_v4 ? v4 : v6;
  for (size_t i = 0; i < list.size(); ++i) target += (i ? "," : "") + list[i];
  if (!v4.empty() && !v6.empty()) {
    LauncherLog()->warn("etcd: mixing IPv4 and IPv6 members is not supported; using {}", target);
  }
  return std::unique_ptr<EtcdClient>(
      new EtcdClient(io, std::move(options), std::move(target), std::move(tls_name)));
}

EtcdClient::EtcdClient(boost::asio::io_context& io, EtcdClientOptions options, std::string target,
                       std::string tls_name)
    : io_(io), opts_(std::move(options)), shared_(std::make_shared<Shared>()) {
  grpc::ChannelArguments args;
  // A dead member is left quickly for the next one (pick_first walks the list again).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetLoadBalancingPolicyName("pick_first");
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (opts_.https) {
    if (!tls_name.empty()) args.SetSslTargetNameOverride(tls_name);
    creds = grpc::SslCredentials({opts_.tls.ca, opts_.tls.key, opts_.tls.cert});
  }
  channel_ = grpc::CreateCustomChannel(target, creds, args);
  shared_->kv = pb::KV::NewStub(channel_);
  shared_->lease = pb::Lease::NewStub(channel_);
  shared_->watch = pb::Watch::NewStub(channel_);
  shared_->auth = pb::Auth::NewStub(channel_);
}

EtcdClient::~EtcdClient() {
  std::lock_guard lock(shared_->mu);
  shared_->alive = false;
  for (auto* ctx : shared_->in_flight) ctx->TryCancel();
}

std::string EtcdClient::endpoints_text() const {
  std::string s;
  for (const auto& e : opts_.endpoints) s += (s.empty() ? "" : ",") + e;
  return s;
}

uint64_t EtcdClient::CallsStarted() { return calls_started.load(std::memory_order_relaxed); }

void EtcdClient::CancelAll() {
  std::lock_guard lock(shared_->mu);
  for (auto* ctx : shared_->in_flight) ctx->TryCancel();
}

template <class Req, class Resp, class Method>
void EtcdClient::Call(Method method, Req req, Done<Resp> done, Seconds timeout) {
  calls_started.fetch_add(1, std::memory_order_relaxed);
  auto call = std::make_shared<UnaryCall<Req, Resp>>();
  call->req = std::move(req);
  call->ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
  const std::string token = shared_->Token();
  if (!token.empty()) call->ctx.AddMetadata("token", token);
  auto shared = shared_;
  if (!shared->Register(&call->ctx)) return;
  WorkGuard work(io_.get_executor());
  std::weak_ptr<Shared> weak = shared_;
  method(
      shared.get(), &call->ctx, &call->req, &call->resp,
      [this, call, weak, done = std::move(done), work = std::move(work)](grpc::Status s) mutable {
        auto sh = weak.lock();
        if (sh) {
          sh->Unregister(&call->ctx);
          if (IsTokenError(s)) {
            std::lock_guard lock(sh->mu);
            sh->token.clear();
          }
        }
        boost::asio::post(io_, [weak, call, done = std::move(done), st = FromGrpc(s),
                                w = std::move(work)]() mutable {
          auto sh = weak.lock();
          if (!sh || !sh->alive) return;
          done(st, call->resp);
        });
      });
}

template <class Req, class Resp, class Method>
void EtcdClient::Unary(Method method, Req req, Done<Resp> done, Seconds timeout) {
  if (opts_.user.empty() || !shared_->Token().empty()) {
    return Call<Req, Resp>(method, std::move(req), std::move(done), timeout);
  }
  // Authenticate first; the token then goes with this call and the next ones.
  pb::AuthenticateRequest auth;
  auth.set_name(opts_.user);
  auth.set_password(opts_.password);
  Call<pb::AuthenticateRequest, pb::AuthenticateResponse>(
      [](Shared* s, grpc::ClientContext* c, const pb::AuthenticateRequest* q,
         pb::AuthenticateResponse* r,
         std::function<void(grpc::Status)> f) { s->auth->async()->Authenticate(c, q, r, f); },
      std::move(auth),
      [this, method, req = std::move(req), done = std::move(done), timeout](
          const EtcdStatus& st, const pb::AuthenticateResponse& resp) mutable {
        if (!st.ok()) {
          EtcdStatus failed = st;
          failed.message = "etcd authentication as user '" + opts_.user + "': " + st.message;
          return done(failed, Resp{});
        }
        {
          std::lock_guard lock(shared_->mu);
          shared_->token = resp.token();
        }
        Call<Req, Resp>(method, std::move(req), std::move(done), timeout);
      },
      opts_.call_timeout);
}

#define FTRUN_ETCD_METHOD(stub, name, Req, Resp)               \
  [](Shared* s, grpc::ClientContext* c, const Req* q, Resp* r, \
     std::function<void(grpc::Status)> f) { s->stub->async()->name(c, q, r, f); }

void EtcdClient::Range(pb::RangeRequest req, Done<pb::RangeResponse> done) {
  Unary<pb::RangeRequest, pb::RangeResponse>(
      FTRUN_ETCD_METHOD(kv, Range, pb::RangeRequest, pb::RangeResponse), std::move(req),
      std::move(done), opts_.call_timeout);
}

void EtcdClient::Put(pb::PutRequest req, Done<pb::PutResponse> done) {
  Unary<pb::PutRequest, pb::PutResponse>(
      FTRUN_ETCD_METHOD(kv, Put, pb::PutRequest, pb::PutResponse), std::move(req), std::move(done),
      opts_.call_timeout);
}

void EtcdClient::DeleteRange(pb::DeleteRangeRequest req, Done<pb::DeleteRangeResponse> done) {
  Unary<pb::DeleteRangeRequest, pb::DeleteRangeResponse>(
      FTRUN_ETCD_METHOD(kv, DeleteRange, pb::DeleteRangeRequest, pb::DeleteRangeResponse),
      std::move(req), std::move(done), opts_.call_timeout);
}

void EtcdClient::Txn(pb::TxnRequest req, Done<pb::TxnResponse> done) {
  Unary<pb::TxnRequest, pb::TxnResponse>(
      FTRUN_ETCD_METHOD(kv, Txn, pb::TxnRequest, pb::TxnResponse), std::move(req), std::move(done),
      opts_.call_timeout);
}

void EtcdClient::LeaseGrant(int64_t ttl_seconds, Done<pb::LeaseGrantResponse> done) {
  pb::LeaseGrantRequest req;
  req.set_ttl(ttl_seconds);
  Unary<pb::LeaseGrantRequest, pb::LeaseGrantResponse>(
      FTRUN_ETCD_METHOD(lease, LeaseGrant, pb::LeaseGrantRequest, pb::LeaseGrantResponse),
      std::move(req), std::move(done), opts_.call_timeout);
}

void EtcdClient::LeaseRevoke(int64_t id, Seconds timeout, Done<pb::LeaseRevokeResponse> done) {
  pb::LeaseRevokeRequest req;
  req.set_id(id);
  Unary<pb::LeaseRevokeRequest, pb::LeaseRevokeResponse>(
      FTRUN_ETCD_METHOD(lease, LeaseRevoke, pb::LeaseRevokeRequest, pb::LeaseRevokeResponse),
      std::move(req), std::move(done), timeout);
}

#undef FTRUN_ETCD_METHOD

void EtcdClient::KeepAliveOnce(int64_t id, Done<pb::LeaseKeepAliveResponse> done) {
  pb::LeaseKeepAliveRequest req;
  req.set_id(id);
  auto answer = std::make_shared<std::optional<pb::LeaseKeepAliveResponse>>();
  std::weak_ptr<Shared> weak = shared_;
  auto* r = new StreamReactor<pb::LeaseKeepAliveRequest, pb::LeaseKeepAliveResponse>(
      io_, shared_, std::move(req), /*one_shot=*/true,
      [answer](const pb::LeaseKeepAliveResponse& resp) { *answer = resp; },
      [answer, weak, done = std::move(done)](const EtcdStatus& st) {
        auto sh = weak.lock();
        if (!sh || !sh->alive) return;
        if (answer->has_value()) return done(EtcdStatus{}, **answer);
        done(st.ok() ? EtcdStatus{static_cast<int>(grpc::StatusCode::UNAVAILABLE),
                                  "keep-alive stream ended without an answer"}
                     : st,
             pb::LeaseKeepAliveResponse{});
      });
  // The answer is posted before the end (both from gRPC threads, in this order).
  r->context()->set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::duration_cast<std::chrono::milliseconds>(opts_.call_timeout));
  auto* stub = shared_->lease.get();
  r->Begin(
      [stub](grpc::ClientContext* c, auto* reactor) { stub->async()->LeaseKeepAlive(c, reactor); });
}

std::unique_ptr<EtcdStream> EtcdClient::Watch(pb::WatchCreateRequest create,
                                              std::function<void(const pb::WatchResponse&)> event,
                                              std::function<void(const EtcdStatus&)> ended) {
  pb::WatchRequest req;
  *req.mutable_create_request() = std::move(create);
  auto alive = std::make_shared<bool>(true);
  std::weak_ptr<bool> weak = alive;
  auto* r = new StreamReactor<pb::WatchRequest, pb::WatchResponse>(
      io_, shared_, std::move(req), /*one_shot=*/false,
      [weak, event = std::move(event)](const pb::WatchResponse& resp) {
        if (auto a = weak.lock(); a && *a) event(resp);
      },
      [weak, ended = std::move(ended)](const EtcdStatus& st) {
        if (auto a = weak.lock(); a && *a) ended(st);
      });
  auto handle = std::make_unique<StreamHandle>(shared_, r->context(), alive);
  auto* stub = shared_->watch.get();
  r->Begin([stub](grpc::ClientContext* c, auto* reactor) { stub->async()->Watch(c, reactor); });
  return handle;
}

}  // namespace ftrun::rendezvous::etcd
