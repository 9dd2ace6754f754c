// RendezvousServer::Call: one gRPC request, copied off gRPC's thread and answered on the loop
// (internal to rendezvous_server*.cc). The reactor and the response are gRPC's; the call ends
// when the loop calls reactor->Finish, once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>

#include "common/log.h"
#include "ftrun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/rendezvous_server.h"

namespace ftrun::rendezvous {

// The server's logger, shared by rendezvous_server*.cc.
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
      case Kind::kJoin:
        return join.header();
      case Kind::kWatch:
        return watch.header();
      case Kind::kReport:
        return report.header();
      case Kind::kLeave:
        return leave.header();
      case Kind::kStatus:
        return status.header();
    }
    return join.header();
  }
};

struct RendezvousServer::PendingWatch {
  std::shared_ptr<Call> call;
  std::multimap<TimePoint, uint64_t>::iterator deadline;
};

}  // namespace ftrun::rendezvous
