// RendezvousServer::Call: one gRPC request, copied off gRPC's thread and answered on the loop
// (internal to rendezvous_server*.cc). The reactor and the response are gRPC's; the call ends
// when the loop calls reactor->Finish, once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <variant>

#include "common/log.h"
#include "ftrun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/rendezvous_server.h"

namespace ftrun::rendezvous {

// One struct per request; `response` is gRPC's, answered through `reactor`.
struct RendezvousServer::Call {
  struct Join {
    v1::JoinRequest request;
    v1::JoinResponse* response = nullptr;
  };
  struct Watch {
    v1::WatchRequest request;
    v1::WatchResponse* response = nullptr;
    uint64_t id = 0;  // the key of watches_, and of the transport's cancellation
  };
  struct Report {
    v1::ReportRequest request;
    v1::ReportResponse* response = nullptr;
  };
  struct Leave {
    v1::LeaveRequest request;
  };
  struct Status {
    v1::StatusRequest request;
    v1::JobStatus* response = nullptr;
  };
  using Request = std::variant<Join, Watch, Report, Leave, Status>;

  grpc::ServerUnaryReactor* reactor = nullptr;
  std::string peer;
  Request request;

  const v1::RequestHeader& header() const {
    return std::visit([](const auto& r) -> const v1::RequestHeader& { return r.request.header(); },
                      request);
  }
  // Only for a Watch (a pending one, or one being answered).
  Watch& watch() { return std::get<Watch>(request); }
};

struct RendezvousServer::PendingWatch {
  std::shared_ptr<Call> call;
  std::multimap<TimePoint, uint64_t>::iterator deadline;
  std::string peer_host;  // the peer's address, for the per-peer cap
};

// "ipv4:10.0.0.1:5000" -> "ipv4:10.0.0.1" (rendezvous_server_requests.cc).
std::string PeerHost(const std::string& peer);

}  // namespace ftrun::rendezvous
