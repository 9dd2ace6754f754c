#include "rendezvous/wire.h"

#include <algorithm>
#include <utility>

namespace ftrun::rendezvous {
namespace {

std::string Clip(const std::string& s) { return s.size() <= kMaxText ? s : s.substr(0, kMaxText); }

constexpr std::pair<Phase, v1::Phase> kPhases[] = {
    {Phase::kForming, v1::PHASE_FORMING},   {Phase::kRunning, v1::PHASE_RUNNING},
    {Phase::kStopping, v1::PHASE_STOPPING}, {Phase::kSucceeded, v1::PHASE_SUCCEEDED},
    {Phase::kFailed, v1::PHASE_FAILED},     {Phase::kSaving, v1::PHASE_SAVING},
    {Phase::kChecking, v1::PHASE_CHECKING},
};

}  // namespace

v1::Phase ToWire(Phase p) {
  for (const auto& [domain, wire] : kPhases) {
    if (domain == p) return wire;
  }
  return v1::PHASE_UNSPECIFIED;
}

Phase FromWire(v1::Phase p) {
  for (const auto& [domain, wire] : kPhases) {
    if (wire == p) return domain;
  }
  return Phase::kForming;
}

void ToWire(const NodeInfo& in, v1::NodeInfo* out) {
  out->set_addr(in.addr);
  out->set_host(in.host);
  out->set_node_rank(in.node_rank);
  out->set_nproc_per_node(in.nproc_per_node);
  out->set_free_port(in.free_port);
  out->set_probe_port(in.probe_port);
  out->set_next_round(in.next_round);
  out->set_restart_count(in.restart_count);
  out->set_switch_path(in.switch_path);
  out->set_replica_port(in.replica_port);
  if (in.running) ToWire(*in.running, out->mutable_running());
  out->set_store_listens(in.store_listens);
  if (in.last_group_rank >= 0) out->set_last_group_rank(in.last_group_rank);
  FlashToWire(in, out);
}

NodeInfo FromWire(const v1::NodeInfo& in, const std::string& node_id) {
  NodeInfo n;
  n.node_id = node_id;
  n.addr = in.addr();
  n.host = in.host();
  n.node_rank = in.node_rank();
  n.nproc_per_node = in.nproc_per_node();
  n.free_port = in.free_port();
  n.probe_port = in.probe_port();
  n.next_round = in.next_round();
  n.restart_count = in.restart_count();
  n.switch_path = in.switch_path();
  n.replica_port = in.replica_port();
  if (in.has_running()) n.running = FromWire(in.running());
  n.store_listens = in.store_listens();
  n.last_group_rank = in.has_last_group_rank() ? in.last_group_rank() : -1;
  FlashFromWire(in, n);
  return n;
}

void ToWire(const WorkerFailure& in, v1::WorkerFailure* out) {
  out->set_local_rank(in.local_rank);
  out->set_rank(in.rank);
  out->set_pid(in.pid);
  out->set_exitcode(in.exitcode);
  out->set_error_file(Clip(in.error_file));
  out->set_error_json(Clip(in.error_json));
  out->set_message(Clip(in.message));
  out->set_timestamp(in.timestamp);
  out->set_host(Clip(in.host));
}

WorkerFailure FromWire(const v1::WorkerFailure& in) {
  WorkerFailure f;
  f.local_rank = in.local_rank();
  f.rank = in.rank();
  f.pid = in.pid();
  f.exitcode = in.exitcode();
  f.error_file = in.error_file();
  f.error_json = in.error_json();
  f.message = in.message();
  f.timestamp = in.timestamp();
  f.host = in.host();
  return f;
}

void ToWire(const NodeAssignment& in, v1::Assignment* a) {
  a->set_round(in.round);
  a->set_restart_count(in.restart_count);
  a->set_max_restarts(in.max_restarts);
  a->set_group_rank(in.group_rank);
  a->set_group_world_size(in.group_world_size);
  a->set_base_rank(in.base_rank);
  a->set_world_size(in.world_size);
  a->set_master_addr(Clip(in.master_addr));
  a->set_master_port(in.master_port);
  a->set_replica_key(in.replica_key);
  for (const auto& p : in.replica_peers) a->add_replica_peers(Clip(p));
  RestoreToWire(in, a);
}

NodeAssignment FromWire(const v1::Assignment& a) {
  NodeAssignment out;
  out.round = a.round();
  out.restart_count = a.restart_count();
  out.max_restarts = a.max_restarts();
  out.group_rank = a.group_rank();
  out.group_world_size = a.group_world_size();
  out.base_rank = a.base_rank();
  out.world_size = a.world_size();
  out.master_addr = a.master_addr();
  out.master_port = a.master_port();
  out.replica_key = a.replica_key();
  out.replica_peers.assign(a.replica_peers().begin(), a.replica_peers().end());
  RestoreFromWire(a, out);
  return out;
}

void ToWire(const NodeView& in, v1::NodeView* out) {
  out->set_version(in.version);
  out->set_phase(ToWire(in.phase));
  out->set_round(in.round);
  out->set_restart_count(in.restart_count);
  out->set_max_restarts(in.max_restarts);
  out->set_member(in.member);
  ToWire(in.assignment, out->mutable_assignment());
  out->set_nodes_joined(in.nodes_joined);
  out->set_nodes_waiting(in.nodes_waiting);
  out->set_reason(Clip(in.reason));
  for (size_t i = 0; i < in.failures.size() && i < kMaxFailures; ++i) {
    ToWire(in.failures[i], out->add_failures());
  }
  if (in.save) {
    auto* o = out->mutable_save();
    o->set_id(in.save->id);
    o->set_collecting(in.save->collecting);
    o->set_step(in.save->step);
    for (const auto& sv : in.save->savers) {
      auto* w = o->add_savers();
      w->set_rank(sv.rank);
      w->set_group(Clip(sv.group));
    }
    o->set_finalize(in.save->finalize);
    o->set_finalizer(in.save->finalizer);
  }
  CheckToWire(in, out);
  out->set_stacks_id(in.stacks_id);
  for (size_t i = 0; i < in.store_peers.size() && i < kMaxStorePeers; ++i) {
    auto* p = out->add_store_peers();
    p->set_group_rank(in.store_peers[i].group_rank);
    p->set_addr(in.store_peers[i].addr);
    p->set_port(in.store_peers[i].port);
  }
  out->set_nodes_spare(in.nodes_spare);
  out->set_spare(in.spare);
}

void ToWire(const RankProgress& in, v1::RankProgress* out) {
  out->set_rank(in.rank);
  out->set_group(Clip(in.group));
  out->set_step(in.step);
  out->set_updating(in.updating);
  out->set_healthy(in.healthy);
  out->set_has_handler(in.has_handler);
}

RankProgress FromWire(const v1::RankProgress& in) {
  return RankProgress{in.rank(),     in.group(),   in.step(),
                      in.updating(), in.healthy(), in.has_handler()};
}

NodeView FromWire(const v1::NodeView& in) {
  NodeView v;
  v.version = in.version();
  v.phase = FromWire(in.phase());
  v.round = in.round();
  v.restart_count = in.restart_count();
  v.max_restarts = in.max_restarts();
  v.member = in.member();
  v.assignment = FromWire(in.assignment());
  v.nodes_joined = in.nodes_joined();
  v.nodes_waiting = in.nodes_waiting();
  v.reason = in.reason();
  for (const auto& f : in.failures()) v.failures.push_back(FromWire(f));
  if (in.has_save()) {
    SaveOrder o;
    o.id = in.save().id();
    o.collecting = in.save().collecting();
    o.step = in.save().step();
    for (const auto& sv : in.save().savers()) o.savers.push_back({sv.rank(), sv.group()});
    o.finalize = in.save().finalize();
    o.finalizer = in.save().finalizer();
    v.save = o;
  }
  CheckFromWire(in, v);
  v.stacks_id = in.stacks_id();
  for (int i = 0; i < in.store_peers_size() && i < static_cast<int>(kMaxStorePeers); ++i) {
    const v1::StorePeer& p = in.store_peers(i);
    v.store_peers.push_back({p.group_rank(), p.addr(), p.port()});
  }
  v.nodes_spare = in.nodes_spare();
  v.spare = in.spare();
  return v;
}

void ToWire(const JobStatus& in, v1::JobStatus* out) {
  out->set_run_id(in.run_id);
  ToWire(in.view, out->mutable_view());
  out->set_min_nodes(in.min_nodes);
  out->set_max_nodes(in.max_nodes);
  out->set_world_size(in.world_size);
  for (const auto& n : in.nodes) {
    auto* o = out->add_nodes();
    o->set_node_id(n.node_id);
    o->set_host(n.host);
    o->set_addr(n.addr);
    o->set_node_rank(n.node_rank);
    o->set_nproc_per_node(n.nproc_per_node);
    o->set_group_rank(n.group_rank);
    o->set_base_rank(n.base_rank);
    o->set_silent_seconds(n.silent_seconds);
    o->set_disconnected(n.disconnected);
    o->set_switch_path(n.switch_path);
    o->set_spare(n.spare);
  }
  if (in.stacks) ToWire(*in.stacks, out->mutable_stacks());
}

JobStatus FromWire(const v1::JobStatus& in) {
  JobStatus s;
  s.run_id = in.run_id();
  s.view = FromWire(in.view());
  s.min_nodes = in.min_nodes();
  s.max_nodes = in.max_nodes();
  s.world_size = in.world_size();
  for (const auto& n : in.nodes()) {
    s.nodes.push_back(NodeStatus{n.node_id(), n.host(), n.addr(), n.node_rank(), n.nproc_per_node(),
                                 n.group_rank(), n.base_rank(), n.silent_seconds(),
                                 n.disconnected(), n.switch_path(), n.spare()});
  }
  if (in.has_stacks()) s.stacks = FromWire(in.stacks());
  return s;
}

namespace {

// In ReportKind's order.
constexpr v1::ReportRequest::Kind kWireKinds[] = {
    v1::ReportRequest::KIND_FAILED,      v1::ReportRequest::KIND_SUCCEEDED,
    v1::ReportRequest::KIND_STOPPED,     v1::ReportRequest::KIND_PROGRESS,
    v1::ReportRequest::KIND_SAVED,       v1::ReportRequest::KIND_CHECKED,
    v1::ReportRequest::KIND_UNREACHABLE, v1::ReportRequest::KIND_STACKS,
};

template <class Repeated>
auto AllFromWire(const Repeated& in) {
  std::vector<decltype(FromWire(*in.begin()))> out;
  for (const auto& item : in) out.push_back(FromWire(item));
  return out;
}

}  // namespace

void ToWire(const RoundReport& in, v1::ReportRequest* out) {
  const ReportDetails& d = in.details;
  out->set_round(in.round);
  out->set_kind(kWireKinds[static_cast<int>(in.kind)]);
  out->set_check_id(d.check_id);
  for (const auto& r : d.check_results) ToWire(r, out->add_check_results());
  out->set_save_id(d.save_id);
  for (const auto& p : d.progress) ToWire(p, out->add_progress());
  out->set_saver_rank(d.rank);
  out->set_finalize(d.finalize);
  out->set_ok(d.ok);
  out->set_error(d.error.substr(0, kMaxText));
  for (size_t i = 0; i < in.failures.size() && i < kMaxFailures; ++i) {
    ToWire(in.failures[i], out->add_failures());
  }
  out->set_free_port(in.free_port);
  out->set_stacks_id(d.stacks_id);
  for (const auto& st : d.stacks) ToWire(st, out->add_stacks());
  out->set_unreachable_rank(d.unreachable_rank);
  FlashToWire(in, out);
}

Result<RoundReport> FromWire(const v1::ReportRequest& in) {
  RoundReport r;
  const auto* kind = std::find(std::begin(kWireKinds), std::end(kWireKinds), in.kind());
  if (kind == std::end(kWireKinds))
    return Error{"unknown report kind " + std::to_string(in.kind())};
  r.kind = static_cast<ReportKind>(kind - std::begin(kWireKinds));
  r.round = in.round();
  r.failures = AllFromWire(in.failures());
  r.free_port = in.free_port();
  ReportDetails& d = r.details;
  d.save_id = in.save_id();
  d.progress = AllFromWire(in.progress());
  d.rank = in.saver_rank();
  d.finalize = in.finalize();
  d.ok = in.ok();
  d.error = in.error();
  d.check_id = in.check_id();
  d.check_results = AllFromWire(in.check_results());
  d.stacks_id = in.stacks_id();
  d.stacks = AllFromWire(in.stacks());
  d.unreachable_rank = in.unreachable_rank();
  FlashFromWire(in, r);
  return r;
}

}  // namespace ftrun::rendezvous
