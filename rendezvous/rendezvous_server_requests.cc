// RendezvousServer, continued: checking a request (who may make it, its limits) and applying
// it to the state machine.
#include <grpcpp/grpcpp.h>

#include <variant>

#include "rendezvous/apply_report.h"
#include "rendezvous/credentials.h"
#include "rendezvous/rendezvous_server.h"
#include "rendezvous/rendezvous_server_call.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {
namespace {

const char* CallName(const RendezvousServer::Call::Request& r) {
  constexpr const char* kNames[] = {"join", "watch", "report", "leave", "status"};
  return kNames[r.index()];
}

}  // namespace

// The peer's address without its port: what the per-peer caps count.
std::string PeerHost(const std::string& peer) {
  const auto colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

void RendezvousServer::Reject(Call& call, int grpc_code, const std::string& message,
                              bool authenticated) {
  ++rejected_total_;
  // A flood of bad calls must not become a flood of log lines: one a second, with a count.
  const TimePoint now = Clock::now();
  if (now - last_reject_log_ >= std::chrono::seconds(1)) {
    last_reject_log_ = now;
    const std::string more =
        rejects_unlogged_
            ? fmt::format(" ({} more rejected since the last line)", rejects_unlogged_)
            : "";
    rejects_unlogged_ = 0;
    // The node id only once the call is authenticated; the message (it may quote a joiner's
    // host, checked printable at most 1 KiB) escaped and bounded.
    RendezvousLog()->warn("rejected {} from {}peer={}: {}{}", CallName(call.request),
                          authenticated ? "node=" + call.header().node_id() + " " : "",
                          Printable(call.peer), Printable(message, 300), more);
  } else {
    ++rejects_unlogged_;
  }
  call.reactor->Finish(grpc::Status(static_cast<grpc::StatusCode>(grpc_code), message));
}

void RendezvousServer::Process(const std::shared_ptr<Call>& call_ptr) {
  using grpc::StatusCode;
  Call& call = *call_ptr;
  bool authenticated = false;
  auto reject = [&](StatusCode code, const std::string& message) {
    Reject(call, code, message, authenticated);
  };
  const v1::RequestHeader& h = call.header();
  const JobSpec& spec = state_.spec();
  if (shutting_down_) return call.reactor->Finish({StatusCode::UNAVAILABLE, "server stopping"});
  if (auto v = CheckProtocolVersion(h.protocol_version()); !v) {
    return reject(StatusCode::FAILED_PRECONDITION, v.error().message);
  }
  if (!opts_.token.empty() && !SecretsEqual(h.token(), opts_.token)) {
    return reject(StatusCode::PERMISSION_DENIED, "missing or wrong job token");
  }
  if (auto* status = std::get_if<Call::Status>(&call.request);
      status && (h.run_id().empty() || h.run_id() == spec.run_id)) {
    JobStatus job = state_.Status(Clock::now());
    const bool ordered = AddStacks(status->request, job);
    ToWire(job, status->response);
    call.reactor->Finish(grpc::Status::OK);
    if (ordered) AfterEvent();  // the order is in every view: wake the watchers
    return;
  }
  if (h.run_id() != spec.run_id) {
    return reject(
        StatusCode::FAILED_PRECONDITION,
        "run id '" + Printable(h.run_id()) + "' differs from the server's '" + spec.run_id + "'");
  }
  if (auto s = CheckHeader(h); !s) return reject(StatusCode::INVALID_ARGUMENT, s.error().message);
  const std::string& node = h.node_id();
  const TimePoint now = Clock::now();
  // Per-node credentials: a node the job knows speaks only with the secret it joined with.
  const bool known = state_.IsNode(node) || state_.IsExcluded(node);
  if (known) {
    auto secret = node_secrets_.find(node);
    if (secret == node_secrets_.end() || !SecretsEqual(h.node_secret(), secret->second)) {
      return reject(StatusCode::PERMISSION_DENIED,
                    "this call does not carry the credential of node " + Printable(node) +
                        " (a node id of the job speaks only for the agent that joined with it)");
    }
    authenticated = true;
  }
  if (auto* join = std::get_if<Call::Join>(&call.request)) {
    const v1::NodeInfo& n = join->request.node();
    if (auto s = CheckLimits(n); !s) {
      return reject(StatusCode::INVALID_ARGUMENT, s.error().message);
    }
    if (!known && state_.node_count() >= MaxNodes()) {
      return reject(StatusCode::RESOURCE_EXHAUSTED,
                    "the job has " + std::to_string(state_.node_count()) +
                        " nodes, the most this server takes (4 x --nnodes MAX + 64)");
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
    if (!known) {
      // The agent's own secret keeps its retries idempotent; without one, one is issued.
      node_secrets_[node] =
          h.node_secret().size() >= kMinSecretBytes ? h.node_secret() : NewSecret();
    }
    join->response->set_node_secret(node_secrets_[node]);
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
  if (!known) {
    return call.reactor->Finish({StatusCode::NOT_FOUND, "node " + Printable(node) +
                                                            " is not in the job (lost, or never "
                                                            "joined); join again"});
  }
  state_.Seen(node, now);
  if (auto* watch = std::get_if<Call::Watch>(&call.request)) {
    if (state_.version() > watch->request.known_version() || state_.finished()) {
      Answer(call);
      return AfterEvent();
    }
    if (auto refusal = AdmitWatch(call)) return reject(StatusCode::RESOURCE_EXHAUSTED, *refusal);
    auto wait =
        std::min<Duration>(Duration(watch->request.wait_ms() / 1000.0), opts_.max_watch_wait);
    TimePoint deadline = now + std::chrono::duration_cast<Clock::duration>(wait);
    auto pending = std::make_unique<PendingWatch>();
    pending->call = call_ptr;
    pending->deadline = watch_deadlines_.emplace(deadline, watch->id);
    pending->peer_host = PeerHost(call.peer);
    ++watches_per_peer_[pending->peer_host];
    watch_of_node_[node] = watch->id;
    watches_[watch->id] = std::move(pending);
    state_.Seen(node, now);  // AdmitWatch's answer to an older watch counted it answered
    return ArmTimer();
  }
  // Status was answered or rejected above: this is a Report.
  Call::Report& report = std::get<Call::Report>(call.request);
  if (report.request.kind() == v1::ReportRequest::KIND_STACKS) {
    if (auto s = CheckLimits(report.request); !s) {
      return reject(StatusCode::INVALID_ARGUMENT, s.error().message);
    }
    TakeStacks(node, report.request);
    ToWire(state_.View(node), report.response->mutable_view());
    NoteAnswered(node);
    return call.reactor->Finish(grpc::Status::OK);
  }
  if (state_.Rebuilding()) {
    // The round it reports on may be the one being rebuilt: the agent sends it again. A
    // version-2 agent ends its job on ABORTED but retries UNAVAILABLE (as an outage).
    return call.reactor->Finish(
        {h.protocol_version() < 3 ? StatusCode::UNAVAILABLE : StatusCode::ABORTED,
         "rebuilding round " + std::to_string(state_.round()) +
             " from the rejoining nodes; report again"});
  }
  if (auto s = ApplyReport(state_, node, report.request, now); !s) {
    return reject(StatusCode::INVALID_ARGUMENT, s.error().message);
  }
  ToWire(state_.View(node), report.response->mutable_view());
  NoteAnswered(node);
  MarkInformed(node);
  call.reactor->Finish(grpc::Status::OK);
  AfterEvent();
}

std::optional<std::string> RendezvousServer::AdmitWatch(Call& call) {
  // One pending watch per node: a newer one answers the older (its agent has moved on).
  if (auto it = watch_of_node_.find(call.header().node_id()); it != watch_of_node_.end()) {
    if (auto w = watches_.find(it->second); w != watches_.end()) {
      auto older = w->second->call;
      DropWatch(w);
      Answer(*older);
    }
  }
  const std::string host = PeerHost(call.peer);
  if (watches_.size() >= MaxNodes()) {
    return "the server holds " + std::to_string(watches_.size()) +
           " pending watch calls, its limit; try again later";
  }
  if (auto it = watches_per_peer_.find(host);
      it != watches_per_peer_.end() && it->second >= opts_.max_watches_per_peer) {
    return "this address holds " + std::to_string(it->second) +
           " pending watch calls, the limit per address; try again later";
  }
  return std::nullopt;
}

void RendezvousServer::DropWatch(std::map<uint64_t, std::unique_ptr<PendingWatch>>::iterator it) {
  PendingWatch& w = *it->second;
  if (auto p = watches_per_peer_.find(w.peer_host); p != watches_per_peer_.end()) {
    if (--p->second == 0) watches_per_peer_.erase(p);
  }
  if (auto n = watch_of_node_.find(w.call->header().node_id());
      n != watch_of_node_.end() && n->second == it->first) {
    watch_of_node_.erase(n);
  }
  if (w.deadline != watch_deadlines_.end()) watch_deadlines_.erase(w.deadline);
  watches_.erase(it);
}

size_t RendezvousServer::MaxNodes() const {
  return opts_.max_nodes_joined ? opts_.max_nodes_joined
                                : 4 * static_cast<size_t>(state_.spec().max_nodes) + 64;
}

void RendezvousServer::ForgetCredentials() {
  for (auto it = node_secrets_.begin(); it != node_secrets_.end();) {
    const bool known = state_.IsNode(it->first) || state_.IsExcluded(it->first);
    it = known ? std::next(it) : node_secrets_.erase(it);
  }
}

}  // namespace ftrun::rendezvous
