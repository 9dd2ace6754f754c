#include "rendezvous/etcd/etcd_leader.h"

#include "common/log.h"
#include "rendezvous/apply_report.h"
#include "rendezvous/credentials.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous::etcd {
namespace {

// etcd's default limit of operations in one transaction is 128.
constexpr int kOpsPerTxn = 100;

Clock::duration ClockDuration(Duration d) { return std::chrono::duration_cast<Clock::duration>(d); }

}  // namespace

EtcdLeader::EtcdLeader(boost::asio::io_context& io, EtcdClient& client, EtcdLeaderOptions options,
                       std::function<void(const std::string&)> deposed)
    : io_(io),
      client_(client),
      opts_(std::move(options)),
      deposed_(std::move(deposed)),
      state_(opts_.job, Clock::now()),
      timer_(io),
      retry_timer_(io),
      linger_timer_(io),
      transitions_(opts_.event_log) {}

EtcdLeader::~EtcdLeader() { *alive_ = false; }

void EtcdLeader::Start() {
  if (stopped_) return;
  RendezvousLog()->info("leading the rendezvous in etcd epoch={} prefix={}", opts_.epoch,
                        opts_.keys.root);
  // Every node already there, then the reports they left, at one revision; then the changes.
  pb::RangeRequest nodes;
  nodes.set_key(opts_.keys.nodes());
  nodes.set_range_end(PrefixEnd(opts_.keys.nodes()));
  std::weak_ptr<bool> alive = alive_;
  client_.Range(nodes, [this, alive](const EtcdStatus& st, const pb::RangeResponse& resp) {
    if (alive.expired() || stopped_) return;
    if (!st.ok()) {
      RendezvousLog()->warn("etcd: reading the nodes failed ({}); retrying", st.ToString());
      retry_timer_.expires_after(std::chrono::milliseconds(200));
      retry_timer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) Start();
      });
      return;
    }
    const int64_t rev = resp.header().revision();
    std::vector<pb::Event> events;
    for (const auto& kv : resp.kvs()) {
      pb::Event e;
      *e.mutable_kv() = kv;
      events.push_back(std::move(e));
    }
    OnNodes(events);
    pb::RangeRequest reports;
    reports.set_key(opts_.keys.reports());
    reports.set_range_end(PrefixEnd(opts_.keys.reports()));
    reports.set_revision(rev);
    client_.Range(reports, [this, alive, rev](const EtcdStatus& st2, const pb::RangeResponse& r2) {
      if (alive.expired() || stopped_) return;
      if (st2.ok()) {
        std::vector<pb::Event> evs;
        for (const auto& kv : r2.kvs()) {
          pb::Event e;
          *e.mutable_kv() = kv;
          evs.push_back(std::move(e));
        }
        OnReports(evs);
      }
      started_ = true;
      for (int which : {0, 1}) {
        const std::string dir = which == 0 ? opts_.keys.nodes() : opts_.keys.reports();
        watches_[which] =
            std::make_unique<EtcdWatch>(io_, client_, dir, PrefixEnd(dir), rev + 1,
                                        [this, which](const std::vector<pb::Event>& events) {
                                          if (stopped_) return;
                                          which == 0 ? OnNodes(events) : OnReports(events);
                                          AfterEvent();
                                        });
      }
      AfterEvent();
    });
  });
}

void EtcdLeader::OnNodes(const std::vector<pb::Event>& events) {
  const auto now = Clock::now();
  for (const auto& e : events) {
    const std::string id = EtcdKeys::NodeOf(e.kv().key(), opts_.keys.nodes());
    if (id.empty()) continue;
    if (e.type() == pb::Event::DELETE) {
      live_.erase(id);
      pending_.erase(id);
      refused_.erase(id);
      published_.erase(id);
      // The lease already was the grace: the node is lost now (disconnect_grace is 0).
      state_.Disconnected(id, now);
      continue;
    }
    NodePut(id, e.kv().value());
  }
}

void EtcdLeader::NodePut(const std::string& id, const std::string& value) {
  const auto now = Clock::now();
  live_.insert(id);
  if (value.empty()) {  // the agent leaves
    live_.erase(id);
    state_.Leave(id, now);
    return;
  }
  if (state_.IsNode(id)) return;  // a refreshed claim: only a new leader reads it
  v1::NodeInfo wire;
  if (!wire.ParseFromString(value) || !CheckLimits(wire).has_value()) {
    refused_[id] = "the node's record in etcd is malformed";
    return;
  }
  const JobSpec& spec = state_.spec();
  if (wire.max_nodes() != 0 &&
      (wire.min_nodes() != spec.min_nodes || wire.max_nodes() != spec.max_nodes)) {
    refused_[id] = "--nnodes " + std::to_string(wire.min_nodes()) + ":" +
                   std::to_string(wire.max_nodes()) + " on " + Printable(wire.host(), 256) +
                   " differs from the job's " + std::to_string(spec.min_nodes) + ":" +
                   std::to_string(spec.max_nodes);
    return;
  }
  NodeInfo info = FromWire(wire, id);
  if (auto refusal = state_.Join(info, now)) {
    if (refusal->kind == JoinRefusal::Kind::kRetry) {
      pending_[id] = info;
    } else {
      refused_[id] = refusal->message;
    }
    return;
  }
  pending_.erase(id);
}

void EtcdLeader::OnReports(const std::vector<pb::Event>& events) {
  const auto now = Clock::now();
  for (const auto& e : events) {
    if (e.type() == pb::Event::DELETE) continue;
    const std::string id = EtcdKeys::NodeOf(e.kv().key(), opts_.keys.reports());
    applied_reports_.push_back(e.kv().key());
    if (id.empty() || !state_.IsNode(id)) continue;
    v1::ReportRequest report;
    if (!report.ParseFromString(e.kv().value())) continue;
    if (auto st = ApplyReport(state_, id, report, now); !st) {
      RendezvousLog()->warn("etcd: a report of node {} was refused: {}", Printable(id, 256),
                            st.error().message);
    }
  }
}

void EtcdLeader::AfterEvent() {
  if (stopped_ || !started_) return;
  const auto now = Clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto refusal = state_.Join(it->second, now);
    if (!refusal) {
      it = pending_.erase(it);
    } else if (refusal->kind == JoinRefusal::Kind::kMismatch) {
      refused_[it->first] = refusal->message;
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  state_.Tick(now);
  transitions_.Log(state_);
  Publish();
  ArmTimer();
  CheckLinger();
}

void EtcdLeader::Publish() {
  if (publishing_) {
    dirty_ = true;
    return;
  }
  dirty_ = false;
  const uint64_t version = state_.version();
  std::vector<pb::RequestOp> ops;
  std::vector<std::pair<std::string, uint64_t>> sent;
  auto put_view = [&](const std::string& id, NodeView view) {
    view.version = EpochVersion(opts_.epoch, version);
    v1::NodeView wire;
    ToWire(view, &wire);
    pb::RequestOp op;
    auto* put = op.mutable_request_put();
    put->set_key(opts_.keys.view(id));
    put->set_value(wire.SerializeAsString());
    put->set_lease(opts_.lease_id);
    ops.push_back(std::move(op));
    sent.emplace_back(id, version);
  };
  for (const auto& id : state_.NodeIds()) {
    auto it = published_.find(id);
    if (it != published_.end() && it->second == version) continue;
    put_view(id, state_.View(id));
  }
  for (const auto& [id, why] : refused_) {
    if (published_.count(id)) continue;
    NodeView v;
    v.phase = Phase::kFailed;
    v.reason = "the job refused this node: " + why;
    put_view(id, v);
  }
  for (const auto& key : applied_reports_) {
    pb::RequestOp op;
    op.mutable_request_delete_range()->set_key(key);
    ops.push_back(std::move(op));
  }
  applied_reports_.clear();
  if (ops.empty()) return;
  publishing_ = true;
  auto remaining = std::make_shared<size_t>((ops.size() + kOpsPerTxn - 1) / kOpsPerTxn);
  auto failed = std::make_shared<bool>(false);
  std::weak_ptr<bool> alive = alive_;
  for (size_t first = 0; first < ops.size(); first += kOpsPerTxn) {
    pb::TxnRequest txn;
    auto* cmp = txn.add_compare();
    cmp->set_key(opts_.keys.leader());
    cmp->set_target(pb::Compare::CREATE);
    cmp->set_result(pb::Compare::EQUAL);
    cmp->set_create_revision(opts_.epoch);
    for (size_t i = first; i < std::min(ops.size(), first + kOpsPerTxn); ++i) {
      *txn.add_success() = ops[i];
    }
    client_.Txn(txn, [this, alive, remaining, failed, sent](const EtcdStatus& st,
                                                            const pb::TxnResponse& resp) {
      if (alive.expired() || stopped_) return;
      if (st.ok() && !resp.succeeded()) {
        stopped_ = true;
        if (deposed_) deposed_("the leader key in etcd is no longer this agent's");
        return;
      }
      if (!st.ok()) *failed = true;
      if (--*remaining > 0) return;
      publishing_ = false;
      if (*failed) {
        // Sent again in full: a view written twice is harmless.
        RendezvousLog()->debug("etcd: writing the views failed; retrying");
        retry_timer_.expires_after(std::chrono::milliseconds(200));
        retry_timer_.async_wait([this](const boost::system::error_code& ec) {
          if (!ec) Publish();
        });
        return;
      }
      for (const auto& [id, v] : sent) published_[id] = v;
      if (dirty_) Publish();
      CheckLinger();
    });
  }
}

void EtcdLeader::ArmTimer() {
  auto next = state_.NextDeadline();
  timer_.cancel();
  if (!next || state_.finished()) return;
  timer_.expires_at(*next);
  std::weak_ptr<bool> alive = alive_;
  timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (!ec && !alive.expired()) AfterEvent();
  });
}

void EtcdLeader::FinishAndStop(const std::string& abort_reason, Duration linger,
                               std::function<void()> done) {
  if (stopped_ || !started_) {
    Stop();
    if (done) done();
    return;
  }
  if (!state_.finished()) {
    state_.Abort(abort_reason);
    AfterEvent();
  }
  on_lingered_ = std::move(done);
  linger_timer_.expires_after(ClockDuration(linger));
  std::weak_ptr<bool> alive = alive_;
  linger_timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (ec || alive.expired() || !on_lingered_) return;
    RendezvousLog()->info("not every node has seen the job's end after the linger; stopping");
    auto done = std::move(on_lingered_);
    on_lingered_ = nullptr;
    Stop();
    done();
  });
  CheckLinger();
}

void EtcdLeader::CheckLinger() {
  if (!on_lingered_ || publishing_ || dirty_) return;
  for (const auto& id : live_) {
    if (id != opts_.self) return;  // still there: it may not have read the end yet
  }
  auto done = std::move(on_lingered_);
  on_lingered_ = nullptr;
  Stop();
  done();
}

void EtcdLeader::Stop() {
  stopped_ = true;
  timer_.cancel();
  retry_timer_.cancel();
  linger_timer_.cancel();
  watches_[0].reset();
  watches_[1].reset();
}

}  // namespace ftrun::rendezvous::etcd
