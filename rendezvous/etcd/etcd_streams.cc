// EtcdClient's streams: lease keep-alives and watches (gRPC's callback API).
#include <boost/asio/post.hpp>

#include "rendezvous/etcd/etcd_client_internal.h"

namespace ftrun::rendezvous::etcd {
namespace {

using namespace internal;

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

}  // namespace

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
