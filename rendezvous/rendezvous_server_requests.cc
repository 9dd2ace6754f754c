// RendezvousServer, continued: checking a request and applying it to the state machine.
#include <grpcpp/grpcpp.h>

#include <variant>

#include "rendezvous/apply_report.h"
#include "rendezvous/rendezvous_server.h"
#include "rendezvous/rendezvous_server_call.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {

void RendezvousServer::Process(const std::shared_ptr<Call>& call_ptr) {
  using grpc::StatusCode;
  Call& call = *call_ptr;
  auto reject = [&](StatusCode code, const std::string& message) {
    RendezvousLog()->warn("rejected {} from node={} peer={}: {}",
                          std::holds_alternative<Call::Join>(call.request) ? "join" : "request",
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
  if (auto* status = std::get_if<Call::Status>(&call.request);
      status && (h.run_id().empty() || h.run_id() == spec.run_id)) {
    ToWire(state_.Status(Clock::now()), status->response);
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
  if (auto* join = std::get_if<Call::Join>(&call.request)) {
    const v1::NodeInfo& n = join->request.node();
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

    ToWire(state_.View(node), join->response->mutable_view());
    MarkInformed(node);
    call.reactor->Finish(grpc::Status::OK);
    return AfterEvent();
  }
  if (std::holds_alternative<Call::Leave>(call.request)) {
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
  if (auto* watch = std::get_if<Call::Watch>(&call.request)) {
    if (state_.version() > watch->request.known_version() || state_.finished()) {
      Answer(call);
      return AfterEvent();
    }
    auto wait =
        std::min<Duration>(Duration(watch->request.wait_ms() / 1000.0), opts_.max_watch_wait);
    TimePoint deadline = now + std::chrono::duration_cast<Clock::duration>(wait);
    auto pending = std::make_unique<PendingWatch>();
    pending->call = call_ptr;
    pending->deadline = watch_deadlines_.emplace(deadline, watch->id);
    watches_[watch->id] = std::move(pending);
    return ArmTimer();
  }
  // Status was answered or rejected above: this is a Report.
  Call::Report& report = std::get<Call::Report>(call.request);
  if (auto s = ApplyReport(state_, node, report.request, now); !s) {
    return reject(StatusCode::INVALID_ARGUMENT, s.error().message);
  }
  ToWire(state_.View(node), report.response->mutable_view());
  MarkInformed(node);
  call.reactor->Finish(grpc::Status::OK);
  AfterEvent();
}

}  // namespace ftrun::rendezvous
