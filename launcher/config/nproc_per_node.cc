// --nproc-per-node cpu|gpu|auto: counting the host's CPUs and the GPUs a job may use.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "common/environment.h"
#include "launcher/config/launch_config.h"

namespace ftrun::launcher {

int CountVisibleGpus(int physical, const std::optional<std::string>& cuda_visible_devices) {
  if (!cuda_visible_devices) return physical;
  int count = 0;
  std::set<int> seen;
  for (std::string item : SplitCommaList(*cuda_visible_devices)) {
    item.erase(std::remove_if(item.begin(), item.end(), ::isspace), item.end());
    if (item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0) {
      ++count;
      continue;
    }
    auto n = ToInt(item);
    if (!n || *n < 0 || *n >= physical || !seen.insert(*n).second) break;
    ++count;
  }
  return std::min(count, physical);
}

HostFacts DetectHostFacts(const EnvMap& env, const std::string& nvidia_proc_dir) {
  HostFacts h;
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  h.cpu_count = cpus > 0 ? static_cast<int>(cpus) : 1;
  h.gpu_source = nvidia_proc_dir;
  int physical = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(nvidia_proc_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_directory(ec)) ++physical;
  }
  h.gpu_count = CountVisibleGpus(physical, Lookup(env, "CUDA_VISIBLE_DEVICES"));
  return h;
}

Status ResolveNprocPerNode(LaunchConfig& c, const HostFacts& host) {
  if (c.nproc_spec == "cpu") {
    c.nproc_per_node = host.cpu_count;
  } else if (c.nproc_spec == "gpu") {
    if (host.gpu_count == 0) {
      return Error{"--nproc-per-node gpu: no NVIDIA GPU found (nothing in " + host.gpu_source +
                   ", or CUDA_VISIBLE_DEVICES hides them all); give a number or cpu"};
    }
    c.nproc_per_node = host.gpu_count;
  } else if (c.nproc_spec == "auto") {
    c.nproc_per_node = host.gpu_count > 0 ? host.gpu_count : host.cpu_count;
  }
  return {};
}

}  // namespace ftrun::launcher
