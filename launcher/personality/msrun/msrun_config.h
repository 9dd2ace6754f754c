// MsrunConfig: what the msrun personality runs, derived from the msrun command line and the
// environment as msrun's _ProcessManager does, plus the LaunchConfig the agent uses (nodes,
// workers per node, restarts, ftrun's rendezvous). Pure: the environment and the CPUs this
// process may use are passed in. Every error is a usage error whose message names the option.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/config/launch_config.h"
#include "launcher/personality/msrun/msrun_options.h"

namespace ftrun::launcher {

// --bind_core.
struct CpuBinding {
  enum class Mode { kOff, kAuto, kManual };
  Mode mode = Mode::kOff;
  // kAuto: the CPUs of each local worker (an even split of the CPUs this process may use).
  std::vector<std::vector<int>> auto_cpus;
  // kManual: the JSON object's "deviceN" entries in the order given, as (N, "0-10,20-30").
  std::vector<std::pair<int, std::string>> devices;
  std::string scheduler;  // kManual: the "scheduler" entry's CPUs, "" when absent
};

struct MsrunConfig {
  // Nodes, workers per node (local_worker_num), restarts, rendezvous; survivor_grace is set
  // when MS_ENABLE_TFT turns on TTP (or UCE/ARF, which imply it).
  LaunchConfig launch;
  int worker_num = 8;
  int local_worker_num = 8;
  int node_rank = -1;
  std::string master_addr;  // as given; resolved to an IPv4 address by the caller
  int master_port = 8118;
  std::string log_dir;  // "" : the current directory
  bool join = false;
  int cluster_time_out = 600;
  CpuBinding bind_core;
  bool simulation = false;  // --sim_level or MS_SIMULATION_LEVEL: no scheduler, one node
  int sim_level = -1;
  int sim_rank_id = -1;
  std::string rank_size;  // RANK_SIZE: worker_num, or the environment's in simulation
  std::string rank_table_file;
  std::string worker_log_name;              // {ip}/{hostname} not yet replaced; "" : worker
  std::optional<std::set<int>> tail_ranks;  // nullopt : every worker's log
  std::vector<std::string> command;         // the task: python prefix applied
  std::vector<std::string> warnings;        // msrun's warnings, once logging is up
};

// Builds and validates. `cpus`: the CPUs this process may run on (for --bind_core True).
Result<MsrunConfig> BuildMsrunConfig(const MsrunArgs& args, const EnvMap& env,
                                     const std::vector<int>& cpus);

// "0-3,8,10-11": a sorted CPU list as taskset ranges.
std::string CpuRanges(const std::vector<int>& cpus);

// "[0, 1, 2]": MSRUN_CPU_LIST as msrun prints a Python list.
std::string PythonIntList(const std::vector<int>& values);

}  // namespace ftrun::launcher
