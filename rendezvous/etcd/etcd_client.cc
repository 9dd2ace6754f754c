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
#include "rendezvous/etcd/etcd_client_internal.h"

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

namespace {

using namespace internal;

// gRPC 1.51 frees its callback completion queue with the last channel that used it, and a
// channel that uses one while the freed queue's thread winds down aborts the process
// (ref_counted "prior > 0"; seen when a test process made a client after its last had gone).
// So one channel, never freed, makes one callback call at the first client and keeps the
// queue for the process. Held by static pointers, so it stays reachable (LeakSanitizer saw
// locals' allocations as leaked once gRPC had let go of the finished call).
void KeepCallbackQueue() {
  static auto* const channel = new std::shared_ptr<grpc::Channel>(
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
  static auto* const stub = new std::unique_ptr<pb::KV::Stub>(pb::KV::NewStub(*channel));
  static auto* const call = [] {
    auto* c = new UnaryCall<pb::RangeRequest, pb::RangeResponse>();
    c->ctx.set_deadline(std::chrono::system_clock::now());
    (*stub)->async()->Range(&c->ctx, &c->req, &c->resp, [](grpc::Status) {});
    return c;
  }();
  (void)call;
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

}  // namespace ftrun::rendezvous::etcd
