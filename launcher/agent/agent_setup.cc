// Agent, set-up: its collaborators, the channels it serves, the signals it forwards, and the
// Listener calls that belong to a collaborator. The transitions are in agent.cc.
#include <unistd.h>

#include "common/log.h"
#include "common/version.h"
#include "launcher/agent/agent.h"

namespace ftrun::launcher {

Agent::Agent(boost::asio::io_context& io, AgentOptions options,
             std::unique_ptr<Coordinator> coordinator)
    : io_(io),
      opts_(std::move(options)),
      config_(*opts_.config),
      own_spawner_(opts_.spawner ? nullptr : MakeProcessSpawner(io)),
      own_clock_(opts_.clock ? nullptr : MakeSteadyClock(io)),
      spawner_(opts_.spawner ? *opts_.spawner : *own_spawner_),
      clock_(opts_.clock ? *opts_.clock : *own_clock_),
      coordinator_(std::move(coordinator)),
      signals_(io),
      report_(
          io, config_, clock_, opts_.events, [this] { return group_ ? group_->live_count() : 0; },
          [this] { return coordinator_->ServerMetrics(); }),
      relay_(io, config_, *coordinator_, report_, clock_, [this] { return group_.get(); }),
      hangs_(clock_, config_, relay_, opts_.host,
             [this](const WorkerFailure& f) {
               if (WorkersLive(state_)) OnLocalFailure(f);
             }),
      preflight_(io, config_, opts_.agent_env, *coordinator_, report_,
                 {[this] { coordinator_->Start(this); },
                  [this](const std::string& why) { ExitExcluded(why); },
                  [this](const std::string& message) {
                    result_ = JobResult{false, {}, message};
                    Finish(1);
                  }}),
      fault_timer_(clock_.NewTimer()) {}

Agent::~Agent() = default;

int Agent::Run() {
  if (Start()) io_.run();
  return exit_code_;
}

bool Agent::Start() {
  for (int s : config_.signals) signals_.add(s);
  WaitForSignal();
  relay_.Start(opts_.agent_env);
  if (config_.metrics_port) {
    auto s = report_.StartMetrics(*config_.metrics_port, opts_.host.get());
    if (!s) {
      LauncherLog()->error("{}", s.error().message);
      return false;
    }
  }
  report_.Emit(EventLog::Event("agent_started")
                   .Set("version", std::string(kVersion))
                   .Set("host", opts_.host.get())
                   .Set("nnodes", fmt::format("{}:{}", config_.min_nodes, config_.max_nodes))
                   .Set("nproc_per_node", config_.nproc_per_node)
                   .Set("max_restarts", config_.max_restarts)
                   .Set("entrypoint", config_.script));
  if (!opts_.watchdog_fifo.empty()) {
    watchdog_ = std::make_unique<FileTimerServer>(io_, opts_.watchdog_fifo,
                                                  [this](pid_t p) { return IsWorkerProcess(p); });
    if (auto s = watchdog_->Start(); !s) {
      LauncherLog()->error("TORCHELASTIC_ENABLE_FILE_TIMER=1: {}", s.error().message);
      return false;
    }
  }
  preflight_.Start();  // then joins the job
  return true;
}

bool Agent::IsWorkerProcess(pid_t pid) const {
  if (!group_) return false;
  const pid_t pgid = ::getpgid(pid);
  for (const auto& w : group_->workers()) {
    if (w.process && !w.process->exited() && pgid == w.process->pid()) return true;
  }
  return false;
}

void Agent::WaitForSignal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    OnSignal(sig);
    if (state_ != AgentState::kFinished) WaitForSignal();
  });
}

void Agent::OnSaveOrder(uint64_t round, const rendezvous::SaveOrder& order) {
  relay_.OnSaveOrder(round, order);
}

void Agent::OnCheckOrder(uint64_t round, const rendezvous::CheckOrder& order) {
  preflight_.OnCheckOrder(round, order);
}

void Agent::OnCheckFinished(uint64_t check_id, const std::vector<std::string>& table,
                            const std::string& json) {
  preflight_.OnCheckFinished(check_id, table, json);
}

void Agent::OnExcluded(const std::string& reason) { ExitExcluded(reason); }

}  // namespace ftrun::launcher
