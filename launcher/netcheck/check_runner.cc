#include "launcher/netcheck/check_runner.h"

#include <fmt/format.h>
#include <signal.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <map>

#include "common/log.h"
#include "launcher/workers/worker_env.h"

namespace ftrun::launcher {

using rendezvous::CheckOrder;
using rendezvous::CheckTaskResult;

struct CheckRunner::Task {
  explicit Task(boost::asio::io_context& io) : timer(io) {}
  CheckTaskResult result;
  bool client = false;
  std::string peer_host;
  bool probe_pending = false;
  bool command_pending = false;
  std::unique_ptr<ProbeClient> probe;
  std::unique_ptr<WorkerProcess> command;
  boost::asio::steady_timer timer;  // the command's time limit
  std::chrono::steady_clock::time_point started;
};

CheckRunner::CheckRunner(boost::asio::io_context& io, std::vector<std::string> command, EnvMap env)
    : io_(io), command_(std::move(command)), env_(std::move(env)) {}

CheckRunner::~CheckRunner() {
  *alive_ = false;
  Cancel();
}

void CheckRunner::Cancel() {
  for (auto& t : tasks_) {
    t->probe.reset();
    t->timer.cancel();
    if (t->command && !t->command->exited()) {
      t->command->SignalGroup(SIGKILL);
      reaping_.push_back(std::move(t->command));  // kept until its exit is seen
    }
  }
  tasks_.clear();
  done_ = nullptr;
}

void CheckRunner::Run(const CheckOrder& order, Done done) {
  Cancel();
  order_id_ = order.id;
  timeout_ = order.timeout;
  done_ = std::move(done);
  const bool with_command = order.run_command;
  for (const auto& spec : order.tasks) {
    auto t = std::make_shared<Task>(io_);
    t->result.index = spec.index;
    t->client = spec.client;
    t->peer_host = spec.peer_host;
    tasks_.push_back(t);
    // In any order: the probe's lookup does not use the loop that forks the command.
    if (spec.client) StartProbe(t, spec, order);
    if (with_command) StartCommand(t, spec);
  }
  if (!with_command) {
    bool client = false;
    for (const auto& t : tasks_) client = client || t->client;
    if (!client) {  // a listener only answers; the client reports for the pair
      done_ = nullptr;
      return;
    }
  }
  // A command that could not even start already has its result.
  std::weak_ptr<bool> alive = alive_;
  boost::asio::post(io_, [this, alive] {
    if (auto a = alive.lock(); a && *a) Finished();
  });
}

void CheckRunner::StartProbe(const std::shared_ptr<Task>& t, const rendezvous::CheckTask& task,
                             const CheckOrder& order) {
  t->probe_pending = true;
  ProbeOptions po;
  po.key = order.probe_key;
  po.bytes = order.bytes;
  po.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(order.timeout);
  std::weak_ptr<Task> weak = t;
  t->probe = ProbeClient::Start(io_, task.peer_addr, static_cast<uint16_t>(task.peer_port), po,
                                [this, weak](Result<ProbeResult> r) {
                                  auto task = weak.lock();
                                  if (!task) return;
                                  task->probe_pending = false;
                                  task->result.probed = true;
                                  task->result.probe_ok = r.has_value();
                                  if (r) {
                                    task->result.mbps_ab = r->download_mbps;  // listener -> client
                                    task->result.mbps_ba = r->upload_mbps;
                                    task->result.rtt_ms = r->rtt_ms;
                                  } else {
                                    task->result.reason = r.error().message;
                                  }
                                  Finished();
                                });
}

void CheckRunner::StartCommand(const std::shared_ptr<Task>& t, const rendezvous::CheckTask& task) {
  const rendezvous::CheckTask* spec = &task;
  if (command_.empty()) {
    t->result.ran_command = true;
    t->result.command_reason =
        "this agent has no check command (start it with --network-check-cmd or "
        "--comm-perf-test)";
    return;
  }
  ProcessSpec ps;
  ps.program = command_.front();
  ps.args.assign(command_.begin() + 1, command_.end());
  ps.env = env_;
  const int rank = spec->client ? 1 : 0;
  for (const auto& [k, v] :
       std::map<std::string, std::string>{{"RANK", std::to_string(rank)},
                                          {"LOCAL_RANK", "0"},
                                          {"GROUP_RANK", std::to_string(rank)},
                                          {"WORLD_SIZE", "2"},
                                          {"LOCAL_WORLD_SIZE", "1"},
                                          {"MASTER_ADDR", spec->master_addr},
                                          {"MASTER_PORT", std::to_string(spec->master_port)},
                                          {"FTRUN_NETWORK_CHECK_PEER", spec->peer_host}}) {
    ps.env[k] = v;
  }
  if (AgentStoreEnabled(env_)) {
    // MASTER_PORT is then the listener agent's store (launcher/agent/agent_store.h), which
    // holds the port: both ranks are its clients, under a prefix no attempt of the workers
    // uses (torch's env:// puts them under /worker/attempt_<TORCHELASTIC_RESTART_COUNT>).
    ps.env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    ps.env["TORCHELASTIC_RESTART_COUNT"] =
        "netcheck_" + std::to_string(order_id_) + "_" + std::to_string(spec->index);
  }
  t->started = std::chrono::steady_clock::now();
  t->command_pending = true;
  std::weak_ptr<Task> weak = t;
  auto proc = WorkerProcess::Spawn(io_, ps, [this, weak](const ExitStatus& st) {
    auto task = weak.lock();
    if (!task) return;
    task->timer.cancel();
    task->command_pending = false;
    task->result.ran_command = true;
    task->result.command_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - task->started).count();
    task->result.command_ok = st.Succeeded();
    if (!st.Succeeded() && task->result.command_reason.empty()) {
      task->result.command_reason =
          fmt::format("{} after {:.1f}s", st.Describe(), task->result.command_seconds);
    }
    Finished();
  });
  if (!proc) {
    t->command_pending = false;
    t->result.ran_command = true;
    t->result.command_reason = proc.error().message;
    return;
  }
  t->command = std::move(*proc);
  t->timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_));
  t->timer.async_wait([weak, timeout = timeout_](const boost::system::error_code& ec) {
    auto task = weak.lock();
    if (ec || !task || !task->command || task->command->exited()) return;
    task->result.command_reason = fmt::format("timed out after {:g}s", timeout.count());
    task->command->SignalGroup(SIGKILL);  // its exit completes the task
  });
}

void CheckRunner::Finished() {
  for (const auto& t : tasks_) {
    if (t->probe_pending || t->command_pending) return;
  }
  // Reap what earlier orders left behind.
  reaping_.remove_if([](const std::unique_ptr<WorkerProcess>& p) { return p->exited(); });
  if (!done_) return;
  std::vector<CheckTaskResult> results;
  for (const auto& t : tasks_) results.push_back(t->result);
  auto done = std::move(done_);
  done_ = nullptr;
  done(order_id_, std::move(results));
}

}  // namespace ftrun::launcher
