// torchrun's options as values, the input of BuildLaunchConfig (launch_config.h): what the
// command line said, not yet interpreted. The CLI (cli/torchrun_args.h) fills it from
// argv and PET_* variables; the other personalities fill it to reuse torchrun's validation.
// The defaults are torchrun's.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ftrun::launcher {

// ftrun's options that every launcher's command line has (torchrun's as --a-b, msrun's
// extensions as --a_b), with the same defaults.
struct SupervisionOptions {
  int max_restarts = 0;
  double monitor_interval = 0.1;
  std::optional<int> shutdown_timeout;  // seconds; else TORCH_ELASTIC_SHUTDOWN_TIMEOUT or 30
  // Fault tolerance.
  std::string fault_save = "on";
  std::optional<double> save_timeout;  // seconds; else TTP_OT, TTP_NORMAL_ACTION_TIME_LIMIT, 180
  double hang_timeout = 0;             // seconds; 0: off
  double restart_backoff = 1;          // seconds; 0: off (rendezvous::JobSpec)
  int exclude_after = 3;               // restarts caused by one node; 0: never
  // Flash checkpoint: bytes, or with K/M/G/T (binary); empty: FTRUN_FLASH_MEMORY_BUDGET, else
  // half of the host's memory.
  std::string flash_memory_budget;
  // Copies of each shard snapshot, its own included (1: none); empty: FTRUN_FLASH_REPLICAS,
  // else 2.
  std::string flash_replicas;
  // dlrover-run's --save-at-breakpoint: whenever this node's workers stop for a restart, the
  // newest memory snapshots are written to storage too, not only when the job fails.
  bool save_at_breakpoint = false;
  // Rendezvous: key1=value1,... and this node's address for the others.
  std::string rdzv_conf;
  std::string local_addr;
  std::string topology_file;  // --topology-file; FTRUN_SWITCH_PATH wins for this node
  // Operations.
  std::string event_log;  // empty: FTRUN_EVENT_LOG, else none
  std::optional<int> metrics_port;
  std::string log_level;  // empty: LOGLEVEL, else info
  bool dry_run = false;
};

struct TorchrunArgs : SupervisionOptions {
  // Worker group.
  std::string nnodes = "1:1";
  std::string nproc_per_node = "1";
  std::string role = "default";
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2";
  bool virtual_local_rank = false;
  // Rendezvous.
  bool standalone = false;
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Entry point.
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string start_method = "spawn";
  // Logs.
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;
  // Warm restart (ftrun): standby interpreters, and the modules they import in advance.
  bool warm_restart = false;
  std::string preload = "torch";
  // Pre-flight checks (ftrun; also dlrover-run's).
  bool network_check = false;
  std::string network_check_bytes = "64MiB";
  double network_check_timeout = 60;
  std::optional<double> min_network_bandwidth;  // MB/s
  double straggler_fraction = 0.5;
  bool exclude_straggler = false;
  std::string network_check_cmd;
  bool comm_perf_test = false;
  int network_check_port = 0;  // 0: any free port
  bool switchbox_check = false;
  std::vector<std::string> box_pairs;  // empty: "0:1 2:4 3:5 6:7"
  double min_bandwidth = 10000;        // MB/s, per switchbox pair
  int min_channels = 2;
  std::string switchbox_probe;  // empty: the installed switchbox_probe.py
  double switchbox_timeout = 60;
  // Accepted for compatibility; see the man page for what ftrun does with them.
  std::string logs_specs;
  std::string event_log_handler = "null";
  std::string numa_binding;
  std::string duplicate_stdout_filters;  // comma-separated, ",," escapes a comma
  std::string duplicate_stderr_filters;
  // The training script (or module, or binary with --no-python) and its arguments.
  std::string script;
  std::vector<std::string> script_args;
};

}  // namespace ftrun::launcher
