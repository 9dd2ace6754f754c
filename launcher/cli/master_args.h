// `ftrun master`: the rendezvous server alone (e.g. a Kubernetes Deployment + Service), for
// agents started with --rdzv-backend c10d --rdzv-endpoint <service>:<port>.
#pragma once

#include <string>
#include <vector>

#include "launcher/cli/parsed.h"

namespace ftrun::launcher {

struct MasterArgs {
  std::string host;  // listen address; "" : every address
  int port = 29400;
  std::string nnodes = "1:1";
  std::string rdzv_id = "none";
  std::string rdzv_conf;
  int max_restarts = 0;
  int nproc_per_node = 0;   // 0 : whatever the first agent says
  double save_timeout = 0;  // 0 : TTP_OT or 180
  std::string fault_save = "on";
  double restart_backoff = 1;  // seconds; 0: off (the agents' --restart-backoff)
  int exclude_after = 3;       // 0: never (the agents' --exclude-after)
  std::string log_level;       // "" : LOGLEVEL, else info
  std::string event_log;       // "" : FTRUN_EVENT_LOG, else none
  int metrics_port = -1;       // -1 : no metrics
  int node_unit = 1;           // a round's node count is a multiple of this
  // The pre-flight network check the agents run (their --network-check options).
  bool network_check = false;
  std::string network_check_bytes = "64MiB";
  double network_check_timeout = 60;
  double min_network_bandwidth = 0;  // 0: no minimum
  double straggler_fraction = 0.5;
  bool exclude_straggler = false;
  bool comm_perf_test = false;  // pairs also run the agents' check command
};

using ParsedMaster = Parsed<MasterArgs>;

// Parses `ftrun master` arguments (after the word "master"). Never throws.
ParsedMaster ParseMasterArgs(const std::vector<std::string>& argv);
std::string MasterHelp();

// Runs `ftrun master`; returns 0 when the job succeeded, 1 when it failed or on start-up
// errors, 2 on usage errors.
int RunMaster(const std::vector<std::string>& argv);

}  // namespace ftrun::launcher
