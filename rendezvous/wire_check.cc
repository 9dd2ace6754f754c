// Wire conversions of the network check (wire.h).
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {
namespace {

constexpr size_t kMaxTasks = 64;
constexpr size_t kMaxReason = 4096;
constexpr size_t kMaxTableLines = 4096;
constexpr size_t kMaxJson = 1 << 20;

std::string ClipTo(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n); }

}  // namespace

void CheckToWire(const NodeView& in, v1::NodeView* out) {
  if (in.check) {
    auto* o = out->mutable_check();
    o->set_id(in.check->id);
    o->set_round(in.check->round);
    o->set_wave(in.check->wave);
    o->set_bytes(in.check->bytes);
    o->set_timeout_s(in.check->timeout.count());
    o->set_run_command(in.check->run_command);
    o->set_probe_key(in.check->probe_key);
    for (size_t i = 0; i < in.check->tasks.size() && i < kMaxTasks; ++i) {
      const CheckTask& t = in.check->tasks[i];
      auto* w = o->add_tasks();
      w->set_index(t.index);
      w->set_peer(t.peer);
      w->set_peer_host(t.peer_host);
      w->set_client(t.client);
      w->set_peer_addr(t.peer_addr);
      w->set_peer_port(t.peer_port);
      w->set_master_addr(t.master_addr);
      w->set_master_port(t.master_port);
    }
  }
  out->set_excluded(ClipTo(in.excluded, kMaxReason));
  out->set_check_id(in.check_id);
  for (size_t i = 0; i < in.check_table.size() && i < kMaxTableLines; ++i) {
    out->add_check_table(ClipTo(in.check_table[i], kMaxReason));
  }
  out->set_check_json(in.check_json.size() <= kMaxJson ? in.check_json : "");
}

void CheckFromWire(const v1::NodeView& in, NodeView& v) {
  if (in.has_check()) {
    CheckOrder o;
    o.id = in.check().id();
    o.round = in.check().round();
    o.wave = in.check().wave();
    o.bytes = in.check().bytes();
    o.timeout = Duration(in.check().timeout_s());
    o.run_command = in.check().run_command();
    o.probe_key = in.check().probe_key();
    for (const auto& t : in.check().tasks()) {
      o.tasks.push_back(CheckTask{t.index(), t.peer(), t.peer_host(), t.client(), t.peer_addr(),
                                  t.peer_port(), t.master_addr(), t.master_port()});
    }
    v.check = o;
  }
  v.excluded = in.excluded();
  v.check_id = in.check_id();
  v.check_table.assign(in.check_table().begin(), in.check_table().end());
  v.check_json = in.check_json();
}

void ToWire(const CheckTaskResult& in, v1::CheckTaskResult* out) {
  out->set_index(in.index);
  out->set_probed(in.probed);
  out->set_probe_ok(in.probe_ok);
  out->set_reason(ClipTo(in.reason, kMaxReason));
  out->set_mbps_ab(in.mbps_ab);
  out->set_mbps_ba(in.mbps_ba);
  out->set_rtt_ms(in.rtt_ms);
  out->set_ran_command(in.ran_command);
  out->set_command_ok(in.command_ok);
  out->set_command_reason(ClipTo(in.command_reason, kMaxReason));
  out->set_command_seconds(in.command_seconds);
}

CheckTaskResult FromWire(const v1::CheckTaskResult& in) {
  CheckTaskResult r;
  r.index = in.index();
  r.probed = in.probed();
  r.probe_ok = in.probe_ok();
  r.reason = in.reason();
  r.mbps_ab = in.mbps_ab();
  r.mbps_ba = in.mbps_ba();
  r.rtt_ms = in.rtt_ms();
  r.ran_command = in.ran_command();
  r.command_ok = in.command_ok();
  r.command_reason = in.command_reason();
  r.command_seconds = in.command_seconds();
  return r;
}

Status CheckResultLimits(const v1::ReportRequest& req) {
  if (static_cast<size_t>(req.check_results_size()) > kMaxTasks) {
    return Error{"report carries " + std::to_string(req.check_results_size()) +
                 " network-check results (limit " + std::to_string(kMaxTasks) + ")"};
  }
  for (const auto& r : req.check_results()) {
    if (r.reason().size() > kMaxReason || r.command_reason().size() > kMaxReason) {
      return Error{"network-check result carries a reason over 4 KiB"};
    }
  }
  return {};
}

}  // namespace ftrun::rendezvous
