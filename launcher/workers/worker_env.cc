#include "launcher/workers/worker_env.h"

#include <cctype>
#include <vector>

namespace ftrun::launcher {

const char* const kOmpBanner =
    "\n*****************************************\n"
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
    "avoid your system being overloaded, please further tune the variable for optimal "
    "performance in your application as needed. \n"
    "*****************************************";

bool ApplyOmpNumThreadsRule(EnvMap& agent_env, int nproc_per_node) {
  if (agent_env.count("OMP_NUM_THREADS") != 0 || nproc_per_node <= 1) return false;
  agent_env["OMP_NUM_THREADS"] = "1";
  return true;
}

bool AgentStoreEnabled(const EnvMap& agent_env) {
  auto v = Lookup(agent_env, "FTRUN_AGENT_STORE");
  if (!v) return true;
  std::string lower;
  for (char ch : *v)
    lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
  return !(lower == "0" || lower == "false" || lower == "off" || lower == "no");
}

EnvMap BuildWorkerEnv(const WorkerEnvInputs& in) {
  const LaunchConfig& c = in.config;
  const rendezvous::NodeAssignment& a = in.assignment;
  EnvMap env = in.agent_env;
  const int rank = a.base_rank + in.local_rank;
  auto set = [&](const char* k, const std::string& v) { env[k] = v; };
  set("LOCAL_RANK", std::to_string(c.virtual_local_rank ? 0 : in.local_rank));
  set("RANK", std::to_string(rank));
  set("GROUP_RANK", std::to_string(a.group_rank));
  set("ROLE_RANK", std::to_string(rank));  // one role: role rank == global rank
  set("ROLE_NAME", c.role);
  set("LOCAL_WORLD_SIZE", std::to_string(c.nproc_per_node));
  set("WORLD_SIZE", std::to_string(a.world_size));
  set("GROUP_WORLD_SIZE", std::to_string(a.group_world_size));
  set("ROLE_WORLD_SIZE", std::to_string(a.world_size));
  set("MASTER_ADDR", a.master_addr);
  set("MASTER_PORT", std::to_string(a.master_port));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(a.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(a.max_restarts));
  set("TORCHELASTIC_RUN_ID", c.run_id);
  // Every rank is a client of the group-rank-0 agent's store at MASTER_ADDR:MASTER_PORT,
  // under /worker/attempt_<TORCHELASTIC_RESTART_COUNT> (torch's env:// and tcp://); with
  // FTRUN_AGENT_STORE=0, worker rank 0 hosts torch's TCPStore there instead.
  set("TORCHELASTIC_USE_AGENT_STORE", AgentStoreEnabled(in.agent_env) ? "True" : "False");
  // torch <= 2.1 reads the first name, later versions the second; the agent's value wins.
  for (const char* k : {"NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"}) {
    env[k] = in.agent_env.count(k) ? in.agent_env.at(k) : "1";
  }
  set("TORCHELASTIC_ERROR_FILE", in.error_file);
  std::string signals;
  for (int s : c.signals) signals += (signals.empty() ? "" : ",") + SignalName(s);
  set("TORCHELASTIC_SIGNALS_TO_HANDLE", signals);
  if (c.virtual_local_rank) {
    // The worker sees only its own GPU, as device 0.
    std::string device = std::to_string(in.local_rank);
    if (auto cvd = Lookup(in.agent_env, "CUDA_VISIBLE_DEVICES")) {
      std::vector<std::string> ids = SplitCommaList(*cvd);
      if (in.local_rank < static_cast<int>(ids.size())) device = ids[in.local_rank];
    }
    set("CUDA_VISIBLE_DEVICES", device);
  }
  return env;
}

}  // namespace ftrun::launcher
