#include "launcher/personality/msrun/msrun_plan.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>

#include "common/log.h"

namespace ftrun::launcher {
namespace {

// A line that marks where a restarted process's output begins in an appended log.
void AppendRestartMarker(const std::string& path, const rendezvous::NodeAssignment& a) {
  int fd = OpenLogFile(path, true);
  if (fd < 0) return;  // the process's own open reports the error
  const std::string line = "[ftrun] restart_count=" + std::to_string(a.restart_count) +
                           " round=" + std::to_string(a.round) + ": starting again\n";
  WriteAll(fd, line.data(), line.size());
  ::close(fd);
}

}  // namespace

MsrunPlanner::MsrunPlanner(const MsrunConfig& config, EnvMap agent_env, std::string sched_host,
                           bool runs_scheduler, std::string log_base)
    : config_(config),
      agent_env_(std::move(agent_env)),
      sched_host_(std::move(sched_host)),
      runs_scheduler_(runs_scheduler),
      log_base_(std::move(log_base)) {}

std::string MsrunPlanner::LogPath(const std::string& name) const {
  if (config_.log_dir.empty()) return name;
  return (std::filesystem::path(config_.log_dir) / name).string();
}

int MsrunPlanner::NodeId(const rendezvous::NodeAssignment& a, int i) const {
  if (!config_.simulation) return a.base_rank + i;  // ftrun always knows the rank
  if (config_.local_worker_num == config_.worker_num) return i;
  if (config_.node_rank >= 0) return config_.node_rank * config_.local_worker_num + i;
  return -1;
}

std::string MsrunPlanner::WorkerLog(const rendezvous::NodeAssignment& a, int i) const {
  const int id = NodeId(a, i);
  return LogPath(log_base_ + "_" + std::to_string(id >= 0 ? id : i) + ".log");
}

std::string MsrunPlanner::EntrypointName() const {
  return config_.command.size() > 1 && config_.command.front() == "python"
             ? config_.command[1]
             : config_.command.front();
}

void MsrunPlanner::OnProcessFailed(pid_t pid, int local_rank, int exitcode) {
  if (local_rank < 0) {
    MsrunLog()->error("Scheduler process {} exit with exception.", pid);
  } else {
    MsrunLog()->error("Worker process {} exit with exception. Error code: {}.", pid, exitcode);
  }
}

void MsrunPlanner::ReportFailure(const std::vector<WorkerFailure>& failures, std::ostream& err) {
  // msrun greps scheduler.log for ERROR|CRITICAL|Traceback|Error with 5 lines of context.
  std::ifstream in(LogPath("scheduler.log"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  static const std::regex kError("ERROR|CRITICAL|Traceback|Error");
  size_t shown_until = 0;  // lines before this one are printed already
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!std::regex_search(lines[i], kError)) continue;
    const size_t from = std::max(shown_until, i >= 5 ? i - 5 : 0);
    if (from > shown_until && shown_until > 0) err << "--\n";
    const size_t to = std::min(lines.size(), i + 6);
    for (size_t j = from; j < to; ++j) err << lines[j] << "\n";
    shown_until = std::max(shown_until, to);
  }
  if (!failures.empty()) {
    err << FormatFailureSummary(EntrypointName(), failures) << "\n";
  }
  err << "RuntimeError: Distributed job exited with exception. Please check logs in "
         "directory: "
      << config_.log_dir << "." << std::endl;
}

Result<std::string> MsrunPlanner::PrepareLogs(const rendezvous::NodeAssignment&) {
  return Ok(config_.log_dir.empty() ? std::filesystem::current_path().string() : config_.log_dir);
}

EnvMap MsrunPlanner::CommonEnv() const {
  EnvMap env = agent_env_;
  env["RANK_SIZE"] = config_.rank_size;
  if (!config_.rank_table_file.empty()) env["RANK_TABLE_FILE"] = config_.rank_table_file;
  if (config_.sim_level != -1) env["MS_SIMULATION_LEVEL"] = std::to_string(config_.sim_level);
  env["MS_WORKER_NUM"] = std::to_string(config_.worker_num);
  if (!config_.simulation) {
    env["MS_SCHED_HOST"] = sched_host_;
    env["MS_SCHED_PORT"] = std::to_string(config_.master_port);
    env["MS_TOPO_TIMEOUT"] = std::to_string(config_.cluster_time_out);
  }
  return env;
}

// The task, behind `taskset -c <cpus>` when --bind_core pins this worker (-1: the scheduler).
std::vector<std::string> MsrunPlanner::Command(int local_index) const {
  const CpuBinding& b = config_.bind_core;
  std::string cpus;
  if (b.mode == CpuBinding::Mode::kAuto && local_index >= 0 &&
      local_index < static_cast<int>(b.auto_cpus.size())) {
    cpus = CpuRanges(b.auto_cpus[local_index]);
  } else if (b.mode == CpuBinding::Mode::kManual) {
    if (local_index < 0) {
      cpus = b.scheduler;
    } else if (local_index >= static_cast<int>(b.devices.size())) {
      if (!warned_) {
        MsrunLog()->warn(
            "Cannot find process[{}] in args '--bind_core'. Will not launch process "
            "with taskset.",
            local_index);
      }
    } else if (b.devices[local_index].first != local_index) {
      if (!warned_) {
        MsrunLog()->warn(
            "Cannot find physical_device_id[{}] for process[{}] in args '--bind_core'. "
            "Will not launch process with taskset.",
            local_index, local_index);
      }
    } else {
      cpus = b.devices[local_index].second;
    }
  }
  std::vector<std::string> cmd;
  if (!cpus.empty()) cmd = {"taskset", "-c", cpus};
  cmd.insert(cmd.end(), config_.command.begin(), config_.command.end());
  return cmd;
}

StreamPlan MsrunPlanner::Output(const std::string& file, bool console) const {
  StreamPlan s;
  if (console) {
    s.kind = StreamPlan::Kind::kTee;
    s.file = file;
    s.tee.log_file = file;
    s.tee.append_log = started_once_;
    s.tee.console_fd = STDOUT_FILENO;  // as `tail -f` prints it: no prefix
  } else {
    s.kind = StreamPlan::Kind::kFile;
    s.file = file;
    s.append = started_once_;
  }
  return s;
}

std::vector<ProcessPlan> MsrunPlanner::Plan(const rendezvous::NodeAssignment& a,
                                            const EnvMap& extra_env) {
  const MsrunConfig& c = config_;
  std::vector<ProcessPlan> plans;
  for (int i = 0; i < c.local_worker_num; ++i) {
    ProcessPlan p;
    p.local_rank = i;
    p.rank = a.base_rank + i;
    p.name = "worker " + std::to_string(i);
    p.env = CommonEnv();
    p.env["DEVICE_ID"] = std::to_string(i);
    const int id = NodeId(a, i);
    if (id >= 0) {
      p.env["MS_NODE_ID"] = std::to_string(id);
      p.env["RANK_ID"] = std::to_string(id);
    }
    if (c.simulation && c.sim_rank_id != -1) p.env["RANK_ID"] = std::to_string(c.sim_rank_id);
    p.env["MS_NODE_RANK"] = std::to_string(c.node_rank);
    if (!c.simulation) p.env["MS_ROLE"] = "MS_WORKER";
    if (c.bind_core.mode == CpuBinding::Mode::kAuto &&
        i < static_cast<int>(c.bind_core.auto_cpus.size())) {
      p.env["MSRUN_CPU_LIST"] = PythonIntList(c.bind_core.auto_cpus[i]);
    }
    for (const auto& [k, v] : extra_env) p.env[k] = v;
    std::vector<std::string> cmd = Command(i);
    p.program = cmd.front();
    p.args.assign(cmd.begin() + 1, cmd.end());
    const std::string log = WorkerLog(a, i);
    const int shown_id = id >= 0 ? id : i;
    const bool tailed = !c.tail_ranks || c.tail_ranks->count(shown_id) != 0;
    if (c.join && !tailed && !warned_) {
      MsrunLog()->warn(
          "The '--tail_worker_log' is:{}, which doesn't contain this worker {}. So this "
          "worker {}'s log will not be output to console. Reset '--tail_worker_log', if "
          "you want to output this worker's log to console.",
          fmt::join(*c.tail_ranks, ","), shown_id, shown_id);
    }
    p.out = Output(log, c.join && tailed);
    p.err_to_out = true;
    if (started_once_) AppendRestartMarker(log, a);
    std::cout << "Start worker process with rank id:" << shown_id << ", log file:" << log
              << ". Environment variable [RANK_ID=" << Lookup(p.env, "RANK_ID").value_or("")
              << "] is exported." << std::endl;
    plans.push_back(std::move(p));
  }
  warned_ = true;
  if (runs_scheduler_ && !c.simulation) {
    ProcessPlan s;
    s.name = "scheduler";
    s.env = CommonEnv();
    s.env["RANK_ID"] = "0";  // msrun's rule: the scheduler is always rank 0
    s.env["MS_ROLE"] = "MS_SCHED";
    std::vector<std::string> cmd = Command(-1);
    s.program = cmd.front();
    s.args.assign(cmd.begin() + 1, cmd.end());
    const std::string log = LogPath("scheduler.log");
    s.out = Output(log, false);
    s.err_to_out = true;
    if (started_once_) AppendRestartMarker(log, a);
    plans.push_back(std::move(s));
  }
  started_once_ = true;
  return plans;
}

}  // namespace ftrun::launcher
