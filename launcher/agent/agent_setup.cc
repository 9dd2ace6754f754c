// Agent, set-up: its collaborators, the channels it serves and the signals it forwards. The
// transitions are in agent.cc.
#include "common/log.h"
#include "ftrun/v1/control.pb.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/flash_inventory.h"
#include "launcher/agent/outcome.h"
#include "launcher/standby/warm_spawner.h"

namespace ftrun::launcher {

Agent::Agent(boost::asio::io_context& io, AgentOptions options,
             std::unique_ptr<Coordinator> coordinator)
    : io_(io),
      opts_(std::move(options)),
      config_(*opts_.config),
      own_spawner_(opts_.spawner ? nullptr : MakeSpawner(io, config_)),
      own_clock_(opts_.clock ? nullptr : MakeSteadyClock(io)),
      spawner_(opts_.spawner ? *opts_.spawner : *own_spawner_),
      clock_(opts_.clock ? *opts_.clock : *own_clock_),
      coordinator_(std::move(coordinator)),
      signals_(io),
      events_(opts_.events),
      metrics_(
          io, config_, clock_, [this] { return group_ ? group_->live_count() : 0; },
          [this] { return coordinator_->ServerMetrics(); }),
      channels_(io, config_, run_started_, ChannelEvents(), [this] { return group_.get(); }),
      flash_(io, config_.nproc_per_node, FlashMemoryBudget(config_), run_started_,
             [this](int lr, const std::string& json, int fd) {
               return channels_.control() != nullptr && channels_.control()->Send(lr, json, fd);
             }),
      relay_(config_, channels_, *coordinator_, events_, metrics_, clock_,
             [this] { return group_.get(); }),
      stacks_(io, clock_, channels_, *coordinator_,
              !opts_.stacks_dir.empty()
                  ? opts_.stacks_dir
                  : Lookup(opts_.agent_env, "TMPDIR").value_or("/tmp") + "/ftrun-stacks",
              opts_.host, [this] { return group_.get(); }),
      hangs_(
          clock_, config_, channels_, opts_.host,
          [this](uint64_t round, std::function<void(const HangStacks&)> done) {
            stacks_.ForHang(round, std::move(done));
          },
          [this](const WorkerFailure& f) {
            if (WorkersLive(state_)) OnLocalFailure(f);
          }),
      preflight_(io, config_, opts_.agent_env, *coordinator_, events_,
                 {[this] { coordinator_->Start(this); },
                  [this](const std::string& why) { ExitExcluded(why); },
                  [this](const std::string& message) {
                    result_ = JobResult{false, {}, message};
                    Finish(1);
                  }}),
      fault_timer_(clock_.NewTimer()) {
  if (opts_.replicas) flash_.SetReplicas(&opts_.replicas->store());
  // Replicas are of shards only, which are never lent.
  flash_.SetLending(config_.flash_loan);
  flash_.SetOnReclaimed(
      [this](int lr, uint64_t step) { events_.CheckpointTaken(lr, static_cast<int64_t>(step)); });
  coordinator_->SetRunStarted(
      std::chrono::duration_cast<std::chrono::milliseconds>(run_started_.time_since_epoch())
          .count());
  coordinator_->SetFlashInventory([this] {
    return FlashInventory(flash_.store(), opts_.replicas ? &opts_.replicas->store() : nullptr);
  });
}

Agent::~Agent() = default;

int Agent::Run() {
  if (Start()) io_.run();
  // A console that is slow to take the report may cost seconds: not while the loop still
  // persists snapshots or lingers for the other nodes.
  WriteFailureReport(failure_report_);
  return exit_code_;
}

bool Agent::Start() {
  for (int s : config_.signals) signals_.add(s);
  WaitForSignal();
  if (auto s = channels_.Start(opts_.agent_env, opts_.watchdog_fifo); !s) {
    return SetUpFailed(s.error());
  }
  if (config_.metrics_port) {
    if (auto s = metrics_.Start(*config_.metrics_port, opts_.host.get()); !s) {
      return SetUpFailed(s.error());
    }
  }
  events_.AgentStarted(config_, opts_.host.get());
  preflight_.Start();  // then joins the job
  return true;
}

bool Agent::SetUpFailed(const Error& error) {
  LauncherLog()->error("{}", error.message);
  exit_code_ = 1;
  Enter(AgentState::kFinished, "set-up failed");
  return false;
}

ControlServer::Events Agent::ChannelEvents() {
  ControlServer::Events ev;
  ev.on_saved = [this](int lr, uint64_t id, bool finalize, bool ok, const std::string& err) {
    relay_.OnRankSaved(lr, id, finalize, ok, err);
  };
  ev.on_snapshot_begin = [this](int lr, const auto& r) { flash_.Begin(lr, r); };
  ev.on_snapshot_commit = [this](int lr, const auto& r) {
    flash_.Commit(lr, r);
    if (auto v = flash_.store().Newest(lr); v && static_cast<int64_t>(v->step) == r.step()) {
      events_.CheckpointTaken(lr, r.step());
      if (opts_.replicas) opts_.replicas->Committed(*v);
    }
  };
  ev.on_snapshot_steps = [this](int lr, const auto& r) { flash_.Steps(lr, r); };
  ev.on_snapshot_mailbox = [this](int lr, const auto& r) { flash_.Mailbox(lr, r); };
  ev.on_snapshot_get = [this](int lr, const auto& r) {
    flash_.Get(lr, r);
    events_.CheckpointRestored(lr, r.step());
  };
  ev.on_progress = [this](int lr, int64_t step, bool updating) {
    events_.Progress(lr, step, updating);
  };
  ev.on_peer_failed = [](int lr, const std::string& err) {
    LauncherLog()->info("local_rank={} reports a failed collective ({}); it waits for orders", lr,
                        err);
  };
  return ev;
}

void Agent::LearnRunStarted(int64_t ms) {
  if (ms <= 0) return;  // an older server: each agent keeps its own
  const std::chrono::system_clock::time_point job{std::chrono::milliseconds(ms)};
  if (job < run_started_) {
    LauncherLog()->info(
        "flash checkpoint: this run of the job began {:.3f}s before this agent "
        "(an earlier agent's start)",
        std::chrono::duration<double>(run_started_ - job).count());
    run_started_ = job;
    coordinator_->SetRunStarted(ms);
    channels_.SetRunStarted(job);
  }
  flash_.SetJobRunStarted(run_started_);
}

void Agent::WaitForSignal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    OnSignal(sig);
    if (state_ != AgentState::kFinished) WaitForSignal();
  });
}

}  // namespace ftrun::launcher
