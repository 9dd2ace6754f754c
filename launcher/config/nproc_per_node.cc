// --nproc-per-node cpu|gpu|auto: counting the host's CPUs and the GPUs a job may use.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
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

namespace {

std::string ReadFirstLine(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

bool AllDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c); });
}

// A visibility variable's entries ("0,1", "0.0,0.1"): how many devices the runtime shows,
// never more than the host has.
int Visible(int physical, const std::optional<std::string>& mask) {
  if (!mask) return physical;
  int entries = 0;
  for (const auto& item : SplitCommaList(*mask)) entries += item.empty() ? 0 : 1;
  return std::min(entries, physical);
}

}  // namespace

HostFacts DetectHostFacts(const EnvMap& env, const DevicePaths& paths) {
  HostFacts h;
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  h.cpu_count = cpus > 0 ? static_cast<int>(cpus) : 1;
  h.gpu_source = paths.nvidia_proc_dir;
  int nvidia = 0, intel = 0, ascend = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(paths.nvidia_proc_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_directory(ec)) ++nvidia;
  }
  h.gpu_count = CountVisibleGpus(nvidia, Lookup(env, "CUDA_VISIBLE_DEVICES"));
  // card0, card1 (not card0-DP-1, a connector): an Intel display device bound to a driver
  // Level Zero (torch.xpu) drives.
  h.xpu_source = paths.drm_dir;
  for (std::filesystem::directory_iterator it(paths.drm_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("card", 0) != 0 || !AllDigits(name.substr(4))) continue;
    const auto device = it->path() / "device";
    if (ReadFirstLine(device / "vendor") != "0x8086") continue;
    const std::string driver =
        std::filesystem::read_symlink(device / "driver", ec).filename().string();
    if (driver == "i915" || driver == "xe") ++intel;
  }
  h.xpu_count = Visible(intel, Lookup(env, "ZE_AFFINITY_MASK"));
  h.npu_source = (std::filesystem::path(paths.dev_dir) / "davinci*").string();
  for (std::filesystem::directory_iterator it(paths.dev_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("davinci", 0) == 0 && AllDigits(name.substr(7))) ++ascend;
  }
  h.npu_count = Visible(ascend, Lookup(env, "ASCEND_RT_VISIBLE_DEVICES"));
  return h;
}

HostFacts DetectHostFacts(const EnvMap& env, const std::string& nvidia_proc_dir) {
  DevicePaths paths;
  paths.nvidia_proc_dir = nvidia_proc_dir;
  return DetectHostFacts(env, paths);
}

Status ResolveNprocPerNode(LaunchConfig& c, const HostFacts& host) {
  if (PythonInt(c.nproc_spec)) return {};
  if (c.nproc_spec == "cpu") {
    c.nproc_per_node = host.cpu_count;
  } else if (c.nproc_spec == "gpu") {
    if (host.gpu_count == 0) {
      return Error{"--nproc-per-node gpu: no NVIDIA GPU found (nothing in " + host.gpu_source +
                   ", or CUDA_VISIBLE_DEVICES hides them all); give a number or cpu"};
    }
    c.nproc_per_node = host.gpu_count;
  } else if (c.nproc_spec == "xpu") {
    if (host.xpu_count == 0) {
      return Error{
          "--nproc-per-node xpu: no Intel GPU found (no Intel card bound to i915 or xe "
          "in " +
          host.xpu_source +
          ", or ZE_AFFINITY_MASK hides them all); give a "
          "number or cpu"};
    }
    c.nproc_per_node = host.xpu_count;
  } else if (c.nproc_spec == "npu") {
    if (host.npu_count == 0) {
      return Error{"--nproc-per-node npu: no Ascend NPU found (no " + host.npu_source +
                   ", or ASCEND_RT_VISIBLE_DEVICES hides them all); give a number or cpu"};
    }
    c.nproc_per_node = host.npu_count;
  } else if (c.nproc_spec == "auto") {
    c.nproc_per_node = host.gpu_count > 0 ? host.gpu_count : host.cpu_count;
  } else {
    return Error{"--nproc-per-node " + c.nproc_spec + ": ftrun cannot count '" + c.nproc_spec +
                 "' devices (it counts cpu, gpu (NVIDIA), xpu (Intel) and npu (Ascend)); give "
                 "the number of workers"};
  }
  return {};
}

Status CheckVirtualLocalRankDevices(const LaunchConfig& c, const EnvMap& env) {
  if (!c.virtual_local_rank) return {};
  auto cvd = Lookup(env, "CUDA_VISIBLE_DEVICES");
  if (!cvd) return {};
  size_t devices = 0;
  for (const auto& item : SplitCommaList(*cvd)) devices += item.empty() ? 0 : 1;
  if (devices >= static_cast<size_t>(c.nproc_per_node)) return {};
  return Error{"--virtual-local-rank: " + std::to_string(c.nproc_per_node) +
               " workers but CUDA_VISIBLE_DEVICES='" + *cvd + "' lists " + std::to_string(devices) +
               " device" + (devices == 1 ? "" : "s") +
               " (each worker gets its own; lower --nproc-per-node or list more devices)"};
}

}  // namespace ftrun::launcher
