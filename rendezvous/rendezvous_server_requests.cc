// RendezvousServer, continued: checking a request and applying it to the state machine.
#include <grpcpp/grpcpp.h>

#include "rendezvous/rendezvous_server.h"
#include "rendezvous/rendezvous_server_call.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {

void RendezvousServer::Process(const std::shared_ptr<Call>& call_ptr) {
  using grpc::StatusCode;
  Call& call = *call_ptr;
  auto reject = [&](StatusCode code, const std::string& message) {
    RendezvousLog()->warn("rejected {} from node={} peer={}: {}",
                          call.kind == Call::Kind::kJoin ? "join" : "request",
                          call.header().node_id(), call.peer, message);
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
    return reject(StatusCode::FAILED_PRECONDITION,
                  "run id '" + h.run_id() + "' differs from the server's '" + spec.run_id + "'");
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

}  // namespace ftrun::rendezvous
