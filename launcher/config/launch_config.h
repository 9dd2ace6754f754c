// LaunchConfig: what the agent runs, derived from the torchrun command line and the
// environment exactly as torchrun's config_from_args does. Pure: the environment and the host
// facts are passed in. Every error is a usage error whose message names the option.
#pragma once

#include <spdlog/common.h>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/environment.h"
#include "common/result.h"
#include "common/signals.h"
#include "launcher/config/option_values.h"
#include "launcher/config/preflight_config.h"
#include "launcher/config/torchrun_options.h"
#include "launcher/config/warm_restart_config.h"
#include "rendezvous/rendezvous_conf.h"
#include "rendezvous/topology.h"

namespace ftrun::launcher {

enum class EntryKind { kPython, kModule, kNoPython, kRunPath };

enum class RendezvousBackend { kStatic, kDynamic, kEtcd };

struct LaunchConfig {
  // Nodes and workers.
  int min_nodes = 1;
  int max_nodes = 1;
  std::string nproc_spec = "1";  // as given; resolved by ResolveNprocPerNode
  int nproc_per_node = 1;
  int max_restarts = 0;
  std::chrono::duration<double> monitor_interval{0.1};
  std::string role = "default";
  std::chrono::milliseconds shutdown_timeout{30000};
  std::vector<int> signals;  // forwarded to the workers, then ftrun stops
  bool virtual_local_rank = false;

  // Fault tolerance.
  bool fault_save = true;
  std::chrono::duration<double> save_timeout{180};
  std::chrono::duration<double> hang_timeout{0};  // 0: off
  // Restart policy (rendezvous::JobSpec): back-off for a repeatedly failing node, and when to
  // leave it out.
  std::chrono::duration<double> restart_backoff{1};
  int exclude_after = 3;
  // Flash checkpoint: memory for the ranks' snapshots on this node (--flash-memory-budget,
  // FTRUN_FLASH_MEMORY_BUDGET); 0: half of the host's physical memory.
  uint64_t flash_memory_budget = 0;
  // Copies of each shard snapshot, its own included (--flash-replicas, FTRUN_FLASH_REPLICAS;
  // 1: no replicas). The replicas a node keeps count against a budget of its own, of
  // flash_memory_budget's size.
  int flash_replicas = 2;
  // FTRUN_FLASH_LOAN (0/1): whether every-step saves may take a loan of both buffers
  // (FlashService). 0 keeps a message per save (comparing the two; bench.py).
  bool flash_loan = true;
  // Whenever this node's workers stop for a restart (a failure, a membership change), write
  // the newest memory snapshots to storage, as when the job fails (dlrover-run's
  // --save-at-breakpoint).
  bool flash_persist_at_breakpoint = false;
  // After a failure the surviving workers run on this long, to save (MindIO TTP) and exit by
  // themselves, before they are stopped; 0: stop them at once. Set by the msrun personality.
  std::chrono::duration<double> survivor_grace{0};
  WarmRestartConfig warm_restart;  // --warm-restart, --preload

  // Rendezvous.
  RendezvousBackend backend = RendezvousBackend::kStatic;
  std::string backend_name = "static";  // --rdzv-backend as given (etcd-v2 and etcd are kEtcd)
  bool standalone = false;
  std::string endpoint_host;                // static: --master-addr; dynamic: --rdzv-endpoint
  std::vector<std::string> etcd_endpoints;  // etcd: --rdzv-endpoint's members, as given
  int endpoint_port = 29500;
  // Host the rendezvous where endpoint_host names this host (the first agent there), whatever
  // the backend, rather than on static node rank 0 (msrun: the master node hosts it).
  bool host_by_address = false;
  std::string run_id = "none";
  rendezvous::RendezvousConf rdzv;
  int node_rank = 0;
  // Dynamic rendezvous: the rank this node declares for the order of group ranks (dlrover-run:
  // NODE_RANK, by which DLRover's master sorts the nodes), -1 for none (joining order).
  int declared_node_rank = -1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string local_addr;
  // Topology-aware rank order (rendezvous/topology.h): this node's switch path from
  // FTRUN_SWITCH_PATH, else looked up in --topology-file when the job starts.
  std::string switch_path;
  std::string topology_file;
  rendezvous::TopologyMap topology;  // its contents, read and checked when parsing

  // What each worker runs: program + args (before ${local_rank} substitution).
  EntryKind entry = EntryKind::kPython;
  std::string python;  // PYTHON_EXEC or python3
  std::string script;
  std::vector<std::string> script_args;

  // Logs.
  std::string log_dir;  // empty: a fresh torchelastic_* directory under TMPDIR
  std::string redirects_spec = "0";
  std::string tee_spec = "0";
  std::optional<std::set<int>> local_ranks_filter;
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  std::string line_prefix_template;  // TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
  spdlog::level::level_enum log_level = spdlog::level::info;

  // Operations.
  std::string event_log;            // "" : none
  std::optional<int> metrics_port;  // none : no metrics endpoint
  bool dry_run = false;

  // Pre-flight checks (preflight_config.h).
  PreflightConfig preflight;

  // dlrover-run (dlrover_config.h).
  int node_unit = 1;           // a round's node count is a multiple of this
  bool numa_affinity = false;  // pin each local rank to its GPU's NUMA node
  std::string membind_policy = "preferred";
  EnvMap extra_env;  // added to the workers' environment
  // Per local rank, what runs the worker command (e.g. numactl ...); empty: nothing.
  std::vector<std::vector<std::string>> rank_command_prefix;

  // Things worth one warning line once logging is up.
  std::vector<std::string> warnings;
};

// Builds and validates the configuration. Does not resolve --nproc-per-node gpu/cpu/auto.
Result<LaunchConfig> BuildLaunchConfig(const TorchrunArgs& args, const EnvMap& env);

// MindIO's wait for the dying-gasp save: TTP_OT (older name) or TTP_NORMAL_ACTION_TIME_LIMIT
// (current), in whole seconds; nullopt when neither is set. Errors name the variable.
Result<std::optional<std::chrono::duration<double>>> TtpSaveTimeout(const EnvMap& env);

// What the host has, for --nproc-per-node cpu|gpu|xpu|npu|auto.
struct HostFacts {
  int cpu_count = 1;
  int gpu_count = 0;
  std::string gpu_source;  // where GPUs were looked for, for the error message
  int xpu_count = 0;       // Intel GPUs (torch.xpu)
  int npu_count = 0;       // Ascend NPUs (torch_npu's privateuse1 backend "npu")
  std::string xpu_source = "/sys/class/drm";
  std::string npu_source = "/dev/davinci*";
};

// Where DetectHostFacts looks (tests give a fake tree).
struct DevicePaths {
  std::string nvidia_proc_dir = "/proc/driver/nvidia/gpus";
  std::string drm_dir = "/sys/class/drm";  // Intel GPUs: card<N>/device/{vendor,driver}
  std::string dev_dir = "/dev";            // Ascend NPUs: davinci<N>
};

// Counts CPUs and accelerators without linking their runtimes, each as its runtime's device
// count would, honouring its visibility variable: NVIDIA GPUs (a directory per GPU in
// /proc/driver/nvidia/gpus; CUDA_VISIBLE_DEVICES as torch.cuda.device_count() reads it),
// Intel GPUs (DRM cards of vendor 0x8086 bound to i915 or xe; ZE_AFFINITY_MASK: its entries),
// Ascend NPUs (/dev/davinci<N>; ASCEND_RT_VISIBLE_DEVICES: its entries).
HostFacts DetectHostFacts(const EnvMap& env, const DevicePaths& paths);
HostFacts DetectHostFacts(const EnvMap& env,
                          const std::string& nvidia_proc_dir = "/proc/driver/nvidia/gpus");

// torch's rule for CUDA_VISIBLE_DEVICES: entries up to the first invalid one.
int CountVisibleGpus(int physical, const std::optional<std::string>& cuda_visible_devices);

// Sets config.nproc_per_node from nproc_spec; "gpu", "xpu" or "npu" with no such device is
// an error, and so is another device name (a privateuse1 backend ftrun cannot count).
Status ResolveNprocPerNode(LaunchConfig& config, const HostFacts& host);

// --virtual-local-rank gives local rank i the i-th entry of CUDA_VISIBLE_DEVICES (when set):
// an error naming both when there are fewer entries than workers.
Status CheckVirtualLocalRankDevices(const LaunchConfig& config, const EnvMap& env);

// The flash checkpoint memory budget in bytes: the configured one, or half of the host's
// physical memory.
uint64_t FlashMemoryBudget(const LaunchConfig& config);

// A 0/1 switch in the environment: `fallback` when unset; any other value is an error naming
// the variable.
Result<bool> EnvSwitch(const EnvMap& env, const std::string& name, bool fallback);

}  // namespace ftrun::launcher
