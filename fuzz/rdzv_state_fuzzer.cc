// Fuzz target: the rendezvous state machine (rendezvous_state.h) driven by a script of calls
// with a fake clock, as RendezvousServer drives it. The input starts with the job's shape
// (nodes, restarts, fault-time save, network check) and goes on with steps; each step moves
// the clock, lets due deadlines fire (the server's timer) and makes one call for one of five
// nodes: a join or report decoded from protobuf bytes exactly as the server does (header
// checks aside), or a well-formed join or report built from the node's current view (so the
// fuzzer reaches saves and network checks quickly), or a watch, disconnect, leave or abort.
//
// For any input: no crash, no sanitizer report, and the state stays consistent after every
// call (the invariants in CheckConsistent).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "ftrun/v1/rendezvous.pb.h"
#include "fuzz/fuzz_support.h"
#include "rendezvous/apply_report.h"
#include "rendezvous/rendezvous_state.h"
#include "rendezvous/wire.h"

namespace {

namespace rdzv = ftrun::rendezvous;
namespace v1 = ftrun::v1;
using rdzv::Duration;
using rdzv::TimePoint;
using std::chrono::milliseconds;

constexpr int kNodes = 5;

std::string NodeId(int i) { return "node-" + std::to_string(i); }

template <class T>
T Pick(FuzzedDataProvider& in, std::initializer_list<T> values) {
  return *(values.begin() + in.ConsumeIntegralInRange<size_t>(0, values.size() - 1));
}

rdzv::JobSpec ReadSpec(FuzzedDataProvider& in) {
  rdzv::JobSpec s;
  s.run_id = "fuzz";
  s.min_nodes = in.ConsumeIntegralInRange(1, 4);
  s.max_nodes = s.min_nodes + in.ConsumeIntegralInRange(0, 2);
  s.static_ranks = in.ConsumeBool();
  if (s.static_ranks) {
    s.min_nodes = s.max_nodes;
    s.master_addr = "10.0.0.100";
  }
  s.nproc_per_node = in.ConsumeIntegralInRange(0, 2);
  s.max_restarts = in.ConsumeIntegralInRange(0, 3);
  // dlrover-run's --node-unit, with ApplyDlroverSettings' preconditions.
  s.node_unit = in.ConsumeIntegralInRange(1, 2);
  if (s.max_nodes % s.node_unit != 0) s.node_unit = 1;
  s.min_nodes = std::max(s.min_nodes, s.node_unit);
  s.min_nodes += (s.node_unit - s.min_nodes % s.node_unit) % s.node_unit;
  s.fault_save = in.ConsumeBool();
  s.last_call_timeout = Duration(Pick(in, {0.0, 0.5, 2.0}));
  s.join_timeout = Duration(Pick(in, {5.0, 60.0, 600.0}));
  s.liveness_timeout = Duration(Pick(in, {2.0, 5.0, 15.0}));
  s.disconnect_grace = Duration(1);
  s.collect_timeout = Duration(Pick(in, {1.0, 5.0}));
  s.save_timeout = Duration(Pick(in, {2.0, 30.0, 180.0}));
  s.check.enabled = in.ConsumeBool() && s.max_nodes > 1;
  s.check.pair_timeout = Duration(Pick(in, {1.0, 10.0}));
  s.check.straggler_fraction = Pick(in, {0.0, 0.5, 0.9});
  s.check.min_bandwidth_mbps = Pick(in, {0.0, 100.0});
  s.check.exclude_stragglers = in.ConsumeBool();
  s.check.run_command = in.ConsumeBool();
  return s;
}

class Harness {
 public:
  explicit Harness(FuzzedDataProvider& in)
      : in_(in), now_(TimePoint(std::chrono::hours(1000))), state_(ReadSpec(in), now_) {
    last_version_ = state_.version();
    Check("start");
  }

  void Step() {
    const uint8_t op = in_.ConsumeIntegral<uint8_t>();
    const int node = (op >> 4) % kNodes;
    Advance(milliseconds(25 * in_.ConsumeIntegral<uint8_t>()));
    const std::string id = NodeId(node);
    if (trace_) {
      std::fprintf(stderr, "op %d on %s at %.3fs: phase %d round %llu\n", op & 15, id.c_str(),
                   Seconds(), static_cast<int>(state_.phase()),
                   static_cast<unsigned long long>(state_.round()));
    }
    switch (op & 15) {
      case 0:
        JoinFromWire(node);
        break;
      case 1:
        JoinWellFormed(node);
        break;
      case 2:
        ReportFromWire(id);
        break;
      case 3:
        ReportFailed(id);
        break;
      case 4:
        state_.ReportSucceeded(id, Round(), now_);
        break;
      case 5:
        state_.ReportStopped(id, Round(), 30000 + node, now_);
        break;
      case 6:
        ReportProgress(id);
        break;
      case 7:
        ReportSaved(id);
        break;
      case 8:
        ReportCheck(id);
        break;
      case 9:
      case 10:
        state_.Seen(id, now_);
        break;  // a watch
      case 11:
        state_.Disconnected(id, now_);
        break;
      case 12:
        state_.Leave(id, now_);
        break;
      case 13:
        if (in_.ConsumeIntegral<uint8_t>() == 0xab) state_.Abort("fuzz");
        break;
      default:
        Advance(milliseconds(1000 * in_.ConsumeIntegralInRange(0, 30)));
        break;
    }
    Check("after op " + std::to_string(op & 15) + " on " + id);
  }

 private:
  double Seconds() const {
    return std::chrono::duration<double>(now_ - TimePoint(std::chrono::hours(1000))).count();
  }

  uint64_t Round() {
    // Mostly the current round (what an agent reports), sometimes a stale or future one.
    switch (in_.ConsumeIntegralInRange(0, 7)) {
      case 0:
        return state_.round() > 0 ? state_.round() - 1 : 0;
      case 1:
        return state_.round() + 1;
      default:
        return state_.round();
    }
  }

  // The server's timer: every deadline up to `now_` fires, in order.
  void Advance(milliseconds d) {
    const TimePoint until = now_ + d;
    for (int i = 0; i < 10000; ++i) {
      auto next = state_.NextDeadline();
      if (!next || *next > until) break;
      const TimePoint at = std::max(*next, now_);
      state_.Tick(at);
      now_ = at;
      if (trace_) {
        std::fprintf(stderr, "tick at %.3fs: phase %d round %llu\n", Seconds(),
                     static_cast<int>(state_.phase()),
                     static_cast<unsigned long long>(state_.round()));
      }
      auto after = state_.NextDeadline();
      FTRUN_FUZZ_CHECK(!after || *after > at,
                       "Tick left a deadline that is already due: the "
                       "server's timer would spin");
      Check("after a tick");
    }
    now_ = until;
  }

  void JoinFromWire(int node) {
    v1::NodeInfo n;
    const std::string bytes = in_.ConsumeBytesAsString(in_.ConsumeIntegralInRange(0, 256));
    if (!n.ParseFromString(bytes)) return;
    // RendezvousServer::Process: the limits and the --nnodes check, then Join.
    if (!rdzv::CheckLimits(n)) return;
    const auto& spec = state_.spec();
    if (n.max_nodes() != 0 &&
        (n.min_nodes() != spec.min_nodes || n.max_nodes() != spec.max_nodes)) {
      return;
    }
    (void)state_.Join(rdzv::FromWire(n, NodeId(node)), now_);
  }

  void JoinWellFormed(int node) {
    rdzv::NodeInfo n;
    n.node_id = NodeId(node);
    n.addr = "10.0.0." + std::to_string(node + 1);
    n.host = "host" + std::to_string(node);
    n.node_rank = state_.spec().static_ranks ? in_.ConsumeIntegralInRange(0, kNodes - 1) : -1;
    n.nproc_per_node = state_.spec().nproc_per_node > 0 ? state_.spec().nproc_per_node
                                                        : in_.ConsumeIntegralInRange(1, 2);
    n.free_port = 29500 + node;
    n.probe_port = state_.spec().check.enabled ? 29400 + node : 0;
    if (in_.ConsumeBool()) {  // rejoining a restarted server: the round its workers run
      rdzv::NodeAssignment a;
      a.round = in_.ConsumeIntegralInRange<uint64_t>(0, 3);
      a.group_world_size = in_.ConsumeIntegralInRange(1, kNodes);
      a.group_rank = in_.ConsumeIntegralInRange(0, a.group_world_size - 1);
      a.base_rank = a.group_rank * n.nproc_per_node;
      a.world_size = a.group_world_size * n.nproc_per_node;
      a.master_addr = "10.0.0.1";
      a.master_port = 29500;
      a.restart_count = in_.ConsumeIntegralInRange(0, 5);
      n.next_round = a.round + 1;
      n.restart_count = a.restart_count;
      n.running = a;
    }
    (void)state_.Join(n, now_);
  }

  // What the server does with a report, after its header checks.
  void ReportFromWire(const std::string& id) {
    const uint8_t flags = in_.ConsumeIntegral<uint8_t>();
    v1::ReportRequest r;
    const std::string bytes = in_.ConsumeBytesAsString(in_.ConsumeIntegralInRange(0, 1024));
    if (!r.ParseFromString(bytes)) return;
    const rdzv::NodeView v = state_.View(id);
    if (flags & 1) r.set_round(state_.round());
    if ((flags & 2) && v.save) r.set_save_id(v.save->id);
    if ((flags & 4) && v.check) r.set_check_id(v.check->id);
    if ((flags & 8) && v.save && !v.save->savers.empty()) r.set_saver_rank(v.save->savers[0].rank);
    if (!state_.IsNode(id) && !state_.IsExcluded(id)) return;  // NOT_FOUND
    state_.Seen(id, now_);
    (void)rdzv::ApplyReport(state_, id, r, now_);  // an error: INVALID_ARGUMENT
  }

  // The node's own ranks, from its view (none when it is not in the round).
  std::vector<int> OwnRanks(const rdzv::NodeView& v) {
    std::vector<int> out;
    if (!v.member) return out;
    const int nproc = v.assignment.group_world_size > 0
                          ? v.assignment.world_size / v.assignment.group_world_size
                          : 1;
    for (int i = 0; i < std::max(1, nproc); ++i) out.push_back(v.assignment.base_rank + i);
    return out;
  }

  void ReportFailed(const std::string& id) {
    const rdzv::NodeView v = state_.View(id);
    rdzv::WorkerFailure f;
    const auto own = OwnRanks(v);
    f.rank = own.empty() ? in_.ConsumeIntegralInRange(0, 9)
                         : own[in_.ConsumeIntegralInRange<size_t>(0, own.size() - 1)];
    f.local_rank = own.empty() ? 0 : f.rank - own.front();
    f.pid = 1000 + f.rank;
    f.exitcode = Pick(in_, {1, -9, -15});
    f.host = id;
    state_.ReportFailed(id, Round(), {f}, now_);
  }

  void ReportProgress(const std::string& id) {
    const rdzv::NodeView v = state_.View(id);
    std::vector<rdzv::RankProgress> ranks;
    for (int r : OwnRanks(v)) {
      rdzv::RankProgress p;
      p.rank = r;
      p.group = Pick(in_, {std::string(), std::string("g0"), std::string("g1")});
      p.step = in_.ConsumeIntegralInRange(-1, 3);
      p.updating = in_.ConsumeBool();
      p.healthy = in_.ConsumeIntegralInRange(0, 7) != 0;
      p.has_handler = in_.ConsumeIntegralInRange(0, 7) != 0;
      ranks.push_back(p);
    }
    const uint64_t save_id = v.save ? v.save->id : in_.ConsumeIntegralInRange(0, 3);
    state_.ReportProgress(id, Round(), save_id, ranks, now_);
  }

  void ReportSaved(const std::string& id) {
    const rdzv::NodeView v = state_.View(id);
    int rank = in_.ConsumeIntegralInRange(0, 9);
    bool finalize = false;
    if (v.save && v.save->finalize) {
      rank = v.save->finalizer;
      finalize = true;
    } else if (v.save && !v.save->savers.empty()) {
      rank = v.save->savers[in_.ConsumeIntegralInRange<size_t>(0, v.save->savers.size() - 1)].rank;
    }
    if (in_.ConsumeIntegralInRange(0, 7) == 0) finalize = !finalize;
    const bool ok = in_.ConsumeIntegralInRange(0, 5) != 0;
    state_.ReportSaved(id, Round(), v.save ? v.save->id : 1, rank, finalize, ok,
                       ok ? "" : "disk full", now_);
  }

  void ReportCheck(const std::string& id) {
    const rdzv::NodeView v = state_.View(id);
    std::vector<rdzv::CheckTaskResult> results;
    if (v.check) {
      for (const auto& t : v.check->tasks) {
        if (in_.ConsumeIntegralInRange(0, 7) == 0) continue;  // a missing result
        rdzv::CheckTaskResult r;
        r.index = t.index;
        r.probed = t.client;
        r.probe_ok = in_.ConsumeIntegralInRange(0, 3) != 0;
        r.reason = r.probe_ok ? "" : "connection refused by " + t.peer_host;
        r.mbps_ab = Pick(in_, {0.0, 50.0, 1000.0, 1200.0});
        r.mbps_ba = Pick(in_, {0.0, 50.0, 1000.0, 1200.0});
        r.rtt_ms = 0.1;
        r.ran_command = v.check->run_command;
        r.command_ok = in_.ConsumeIntegralInRange(0, 3) != 0;
        r.command_seconds = 1.5;
        results.push_back(r);
      }
    }
    state_.ReportCheck(id, Round(), v.check ? v.check->id : 0, results, now_);
  }

  // The invariants every view and the job's status keep, whatever happened.
  void Check(const std::string& when) {
    const rdzv::JobSpec& spec = state_.spec();
    FTRUN_FUZZ_CHECK(state_.version() >= last_version_, "the version went back " + when);
    last_version_ = state_.version();
    FTRUN_FUZZ_CHECK(state_.finished() == !state_.NextDeadline().has_value(),
                     "a deadline exists exactly while the job is not finished " + when);
    (void)state_.TakeEvents();
    const rdzv::JobStatus status = state_.Status(now_);
    v1::JobStatus wire;
    rdzv::ToWire(status, &wire);
    std::set<int> group_ranks;
    int members = 0;
    for (int i = 0; i < kNodes; ++i) {
      const rdzv::NodeView v = state_.View(NodeId(i));
      // While rebuilding, a claimant sees its own round running.
      const bool claimant = state_.Rebuilding() && v.member && v.phase == rdzv::Phase::kRunning;
      FTRUN_FUZZ_CHECK((v.phase == state_.phase() || claimant) && v.round == state_.round(),
                       "view " + when);
      FTRUN_FUZZ_CHECK(v.nodes_waiting >= 0, "negative nodes_waiting " + when);
      FTRUN_FUZZ_CHECK(v.nodes_joined >= 0 && v.nodes_joined <= spec.max_nodes,
                       "nodes_joined " + std::to_string(v.nodes_joined) + " " + when);
      FTRUN_FUZZ_CHECK(v.restart_count >= 0 && v.restart_count <= spec.max_restarts,
                       "restart_count " + when);
      FTRUN_FUZZ_CHECK((v.phase == rdzv::Phase::kSaving) == v.save.has_value(),
                       "a save order outside saving " + when);
      FTRUN_FUZZ_CHECK(!v.check || v.phase == rdzv::Phase::kChecking,
                       "a check order outside checking " + when);
      if (!v.member) continue;
      ++members;
      const auto& a = v.assignment;
      FTRUN_FUZZ_CHECK(a.group_rank >= 0 && a.group_rank < a.group_world_size,
                       "group rank " + std::to_string(a.group_rank) + " of " +
                           std::to_string(a.group_world_size) + " " + when);
      FTRUN_FUZZ_CHECK(group_ranks.insert(a.group_rank).second,
                       "two nodes share group rank " + std::to_string(a.group_rank) + " " + when);
      FTRUN_FUZZ_CHECK(a.base_rank >= 0 && a.base_rank < a.world_size,
                       "base rank " + std::to_string(a.base_rank) + " of world " +
                           std::to_string(a.world_size) + " " + when);
      FTRUN_FUZZ_CHECK(a.group_world_size <= spec.max_nodes &&
                           a.group_world_size % std::max(1, spec.node_unit) == 0,
                       "round size " + std::to_string(a.group_world_size) + " " + when);
      if (spec.static_ranks) {
        FTRUN_FUZZ_CHECK(a.master_addr == spec.master_addr, "static master addr " + when);
      }
      v1::NodeView out;
      rdzv::ToWire(v, &out);
    }
    if (state_.Rebuilding()) {
      FTRUN_FUZZ_CHECK(state_.phase() == rdzv::Phase::kForming,
                       "rebuilding outside forming " + when);
    } else if (state_.phase() == rdzv::Phase::kRunning ||
               state_.phase() == rdzv::Phase::kChecking) {
      // A running round loses no member without stopping: every member is a live node.
      FTRUN_FUZZ_CHECK(members == state_.View("").nodes_joined,
                       std::to_string(members) + " member views, round of " +
                           std::to_string(state_.View("").nodes_joined) + " " + when);
    }
  }

  FuzzedDataProvider& in_;
  TimePoint now_;
  rdzv::RendezvousState state_;
  uint64_t last_version_ = 0;
  // FTRUN_FUZZ_TRACE=1: every call and tick on stderr (to replay a finding by hand).
  const bool trace_ = std::getenv("FTRUN_FUZZ_TRACE") != nullptr;
};

}  // namespace

FTRUN_FUZZ_INITIALIZE()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 8192) return -1;
  FuzzedDataProvider in(data, size);
  Harness h(in);
  for (int steps = 0; in.remaining_bytes() > 0 && steps < 400; ++steps) h.Step();
  return 0;
}
