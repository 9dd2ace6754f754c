// msrun's options as values, the input of BuildMsrunConfig (msrun_config.h): what the
// command line said, not yet interpreted. The CLI (cli/msrun_args.h) fills it; the
// defaults are msrun's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/config/torchrun_options.h"

namespace ftrun::launcher {

struct MsrunArgs : SupervisionOptions {
  // msrun.
  int worker_num = 8;
  int local_worker_num = 8;
  std::string master_addr = "127.0.0.1";
  int master_port = 8118;
  int node_rank = -1;
  std::string log_dir;              // "": the current directory
  std::string join = "False";       // a Python literal: True, False, 1, 0
  int cluster_time_out = 600;       // seconds; negative: wait forever
  std::string bind_core = "False";  // True, False, or a JSON object {"device0": ["0-10"], ...}
  int sim_level = -1;
  int sim_rank_id = -1;
  std::string rank_table_file;
  std::string worker_log_name;
  std::string tail_worker_log = "-1";
  // ftrun's extensions (SupervisionOptions) and its rendezvous port.
  std::optional<int> rdzv_port;  // ftrun's rendezvous port; else master_port + 1
  // The task script and its arguments.
  std::string task_script;
  std::vector<std::string> task_script_args;
};

}  // namespace ftrun::launcher
