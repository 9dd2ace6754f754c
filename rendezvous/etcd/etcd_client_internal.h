// The parts of EtcdClient shared by its unary calls (etcd_client.cc) and its streams
// (etcd_streams.cc). Internal: only those two files include it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <mutex>
#include <set>

#include "etcd/rpc.grpc.pb.h"
#include "rendezvous/etcd/etcd_client.h"

namespace ftrun::rendezvous::etcd {

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

namespace internal {

using WorkGuard = boost::asio::executor_work_guard<boost::asio::io_context::executor_type>;

inline std::atomic<uint64_t> calls_started{0};

inline EtcdStatus FromGrpc(const grpc::Status& s) {
  return {static_cast<int>(s.error_code()), s.error_message()};
}

inline bool IsTokenError(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         s.error_message().find("invalid auth token") != std::string::npos;
}

template <class Req, class Resp>
struct UnaryCall {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
};

}  // namespace internal
}  // namespace ftrun::rendezvous::etcd
