#include "launcher/personality/dlrover/numa_affinity.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/log.h"
#include "launcher/config/launch_config.h"
#include "launcher/workers/worker_process.h"

namespace ftrun::launcher {
namespace {

std::string FirstLine(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

Result<std::vector<NumaPlacement>> GpuNumaPlacements(int nproc, const EnvMap& env,
                                                     const std::string& nvidia_proc_dir,
                                                     const std::string& sys_root) {
  namespace fs = std::filesystem;
  std::vector<std::string> bus_ids;
  std::error_code ec;
  for (fs::directory_iterator it(nvidia_proc_dir, ec), end; !ec && it != end; it.increment(ec)) {
    bus_ids.push_back(it->path().filename().string());
  }
  std::sort(bus_ids.begin(), bus_ids.end());
  if (bus_ids.empty()) return Error{"--numa-affinity: no NVIDIA GPU in " + nvidia_proc_dir};
  // CUDA_VISIBLE_DEVICES picks and orders the physical GPUs the ranks see.
  std::vector<int> physical;
  if (auto cvd = Lookup(env, "CUDA_VISIBLE_DEVICES")) {
    for (const auto& item : SplitCommaList(*cvd)) {
      auto n = ToInt(item);
      if (!n || *n < 0 || *n >= static_cast<int>(bus_ids.size())) break;  // torch's rule
      physical.push_back(*n);
    }
  } else {
    for (size_t i = 0; i < bus_ids.size(); ++i) physical.push_back(static_cast<int>(i));
  }
  if (static_cast<int>(physical.size()) < nproc) {
    return Error{"--numa-affinity: " + std::to_string(nproc) + " local ranks but only " +
                 std::to_string(physical.size()) + " visible GPU(s)"};
  }
  std::vector<NumaPlacement> out;
  for (int i = 0; i < nproc; ++i) {
    const std::string& bus = bus_ids[physical[i]];
    const fs::path node_file = fs::path(sys_root) / "bus/pci/devices" / bus / "numa_node";
    auto node = ToInt(FirstLine(node_file));
    if (!node || *node < 0) {
      return Error{"--numa-affinity: the NUMA node of GPU " + bus + " is unknown (" +
                   node_file.string() + ")"};
    }
    NumaPlacement p;
    p.node = *node;
    p.cpus = FirstLine(fs::path(sys_root) / "devices/system/node" /
                       ("node" + std::to_string(*node)) / "cpulist");
    if (p.cpus.empty()) {
      return Error{"--numa-affinity: no CPU list for NUMA node " + std::to_string(*node)};
    }
    out.push_back(p);
  }
  return out;
}

std::vector<std::string> NumaCommandPrefix(const NumaPlacement& p, const std::string& policy,
                                           const std::string& numactl_path) {
  const std::string node = std::to_string(p.node);
  if (numactl_path.empty()) return {"taskset", "-c", p.cpus};
  if (policy == "bind") return {numactl_path, "--cpunodebind=" + node, "--membind=" + node};
  if (policy == "preferred") return {numactl_path, "--cpunodebind=" + node, "--preferred=" + node};
  return {numactl_path, "--cpunodebind=" + node};  // DLRover's script: no memory policy
}

void PlaceRanksOnNuma(LaunchConfig& c, const EnvMap& env) {
  auto log = LauncherLog();
  auto placements = GpuNumaPlacements(c.nproc_per_node, env);
  if (!placements) {
    log->warn("{}; not applied", placements.error().message);
    return;
  }
  const std::string numactl = FindProgram("numactl", env);
  if (numactl.empty()) {
    log->warn(
        "--numa-affinity: numactl is not installed; pinning CPUs with taskset, memory "
        "policy {} not applied",
        c.membind_policy);
  }
  for (const auto& p : *placements) {
    c.rank_command_prefix.push_back(NumaCommandPrefix(p, c.membind_policy, numactl));
  }
}

}  // namespace ftrun::launcher
