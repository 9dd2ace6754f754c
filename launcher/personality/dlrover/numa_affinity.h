// --numa-affinity (dlrover-run): local rank i runs on the CPUs of its GPU's NUMA node, with its
// memory bound to (--membind-policy bind) or preferred on (preferred) that node, as DLRover's
// dlrover_run_affinity.sh does. GPU i is the i-th entry of CUDA_VISIBLE_DEVICES, else the i-th
// NVIDIA GPU in PCI bus order (/proc/driver/nvidia/gpus/<bus id>). Reads files only; the roots
// are parameters so that tests use a fake tree.
#pragma once

#include <string>
#include <vector>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/config/launch_config.h"

namespace ftrun::launcher {

struct NumaPlacement {
  int node = -1;     // NUMA node of the GPU
  std::string cpus;  // its CPUs, e.g. "0-15,32-47"
};

// The placement of each of `nproc` local ranks. Errors: no NVIDIA GPU, fewer GPUs than ranks, a
// GPU whose NUMA node is unknown; each names the file or the GPU.
Result<std::vector<NumaPlacement>> GpuNumaPlacements(
    int nproc, const EnvMap& env, const std::string& nvidia_proc_dir = "/proc/driver/nvidia/gpus",
    const std::string& sys_root = "/sys");

// The command that runs a worker there: numactl when available (`numactl_path` not empty),
// else taskset (CPUs only).
std::vector<std::string> NumaCommandPrefix(const NumaPlacement& p, const std::string& policy,
                                           const std::string& numactl_path);

// Sets config.rank_command_prefix to each local rank's numactl (or taskset) prefix; without a
// GPU to place the ranks by, logs a warning and sets none. Runs after nproc_per_node is
// resolved.
void PlaceRanksOnNuma(LaunchConfig& config, const EnvMap& env);

}  // namespace ftrun::launcher
