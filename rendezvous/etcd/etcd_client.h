// EtcdClient: the agent's thin, asynchronous client of etcd's v3 gRPC API (proto/etcd/rpc.proto).
// Unary calls (Range, Put, DeleteRange, Txn, LeaseGrant, LeaseRevoke), a lease keep-alive and
// watch streams; every completion is posted to the loop. Retry policy belongs to the caller.
//
// Members: one channel over every endpoint (gRPC's pick_first over the resolved addresses), so
// a call after a member died goes to the next one; calls in flight on the dead member fail
// with UNAVAILABLE and the caller retries. Auth: with a user, the client authenticates first
// and carries the token in every call; an expired token is renewed on the next call.
//
// Thread: loop only (gRPC threads only post). Every call in flight holds the loop's work, so
// run() cannot return before its completion was delivered; CancelAll() makes calls and
// streams complete at once (CANCELLED). Callbacks never run after the client is destroyed.
// Errors: Create() names the endpoint or file at fault; calls report grpc::Status as EtcdStatus.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "etcd/rpc.pb.h"
#include "rendezvous/credentials.h"

namespace grpc {
class Channel;
}

namespace ftrun::rendezvous::etcd {

namespace pb = ::etcdserverpb;
using Seconds = std::chrono::duration<double>;

struct EtcdClientOptions {
  std::vector<std::string> endpoints;  // host:port of etcd's members (client URLs)
  bool https = false;                  // protocol=https: TLS (tls.ca "" : the system's roots)
  TlsConfig tls;
  std::string user;  // "" : no etcd authentication
  std::string password;
  Seconds call_timeout{5};
};

struct EtcdStatus {
  int code = 0;  // grpc::StatusCode
  std::string message;
  bool ok() const { return code == 0; }
  bool cancelled() const;
  std::string ToString() const;
};

// A watch or keep-alive stream; dropping the handle cancels it.
class EtcdStream {
 public:
  virtual ~EtcdStream() = default;
};

class EtcdClient {
 public:
  template <class Resp>
  using Done = std::function<void(const EtcdStatus&, const Resp&)>;

  // Resolves every endpoint's host (blocking DNS: call at start-up). The error names the
  // endpoint.
  static Result<std::unique_ptr<EtcdClient>> Create(boost::asio::io_context& io,
                                                    EtcdClientOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  const EtcdClientOptions& options() const { return opts_; }
  std::string endpoints_text() const;

  void Range(pb::RangeRequest req, Done<pb::RangeResponse> done);
  void Put(pb::PutRequest req, Done<pb::PutResponse> done);
  void DeleteRange(pb::DeleteRangeRequest req, Done<pb::DeleteRangeResponse> done);
  void Txn(pb::TxnRequest req, Done<pb::TxnResponse> done);
  void LeaseGrant(int64_t ttl_seconds, Done<pb::LeaseGrantResponse> done);
  void LeaseRevoke(int64_t id, Seconds timeout, Done<pb::LeaseRevokeResponse> done);
  // One keep-alive of the lease (a short stream: one request, one answer).
  void KeepAliveOnce(int64_t id, Done<pb::LeaseKeepAliveResponse> done);
  // A watch of [key, range_end) from start_revision; `event` gets each response (events,
  // progress), `ended` once when the stream ends (its status; CANCELLED when the handle went).
  std::unique_ptr<EtcdStream> Watch(pb::WatchCreateRequest create,
                                    std::function<void(const pb::WatchResponse&)> event,
                                    std::function<void(const EtcdStatus&)> ended);
  void CancelAll();
  // Calls and streams started by every client of this process (for the load benchmark).
  static uint64_t CallsStarted();

  struct Shared;  // state shared with gRPC's threads

 private:
  EtcdClient(boost::asio::io_context& io, EtcdClientOptions options, std::string target,
             std::string tls_name);
  template <class Req, class Resp, class Method>
  void Unary(Method method, Req req, Done<Resp> done, Seconds timeout);
  template <class Req, class Resp, class Method>
  void Call(Method method, Req req, Done<Resp> done, Seconds timeout);

  boost::asio::io_context& io_;
  EtcdClientOptions opts_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<Shared> shared_;
};

// The end of the range of every key under `prefix` (prefix with its last byte increased).
std::string PrefixEnd(const std::string& prefix);

}  // namespace ftrun::rendezvous::etcd
