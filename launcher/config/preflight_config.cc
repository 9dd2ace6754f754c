#include "launcher/config/preflight_config.h"

#include <unistd.h>

#include <cctype>
#include <filesystem>

#include "launcher/config/launch_config.h"
#include "rendezvous/rendezvous_conf.h"

namespace ftrun::launcher {

Result<uint64_t> ParseProbeSize(const std::string& option, const std::string& text) {
  auto value = ParseByteSize(option, text);
  if (value && *value > (uint64_t{1} << 30)) {
    return Error{option + ": '" + text + "' must be between 1 byte and 1GiB"};
  }
  return value;
}

std::string ChecksDir(const EnvMap& env) {
  namespace fs = std::filesystem;
  if (auto dir = Lookup(env, "FTRUN_CHECKS_DIR"); dir && !dir->empty()) return *dir;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share/ftrun/checks";
    if (fs::exists(installed / "comm_check.py", ec)) return installed.string();
  }
  return std::string(FTRUN_SOURCE_DIR) + "/scripts/checks";
}

Status BuildPreflightConfig(const TorchrunArgs& a, const EnvMap& env, const std::string& python,
                            PreflightConfig& p) {
  p.network_check = a.network_check || a.comm_perf_test || !a.network_check_cmd.empty();
  auto bytes = ParseProbeSize("--network-check-bytes", a.network_check_bytes);
  if (!bytes) return bytes.error();
  p.bytes = *bytes;
  if (!(a.network_check_timeout > 0)) {
    return Error{"--network-check-timeout: must be > 0 seconds"};
  }
  if (auto e = rendezvous::CheckMaxSeconds("--network-check-timeout", a.network_check_timeout)) {
    return *e;
  }
  p.timeout = std::chrono::duration<double>(a.network_check_timeout);
  if (a.min_network_bandwidth && !(*a.min_network_bandwidth > 0)) {
    return Error{"--min-network-bandwidth: must be > 0 MB/s"};
  }
  p.min_bandwidth_mbps = a.min_network_bandwidth.value_or(0);
  if (!(a.straggler_fraction >= 0 && a.straggler_fraction < 1)) {
    return Error{"--straggler-fraction: must be in [0, 1), got " +
                 std::to_string(a.straggler_fraction)};
  }
  p.straggler_fraction = a.straggler_fraction;
  p.exclude_stragglers = a.exclude_straggler;
  if (!a.network_check_cmd.empty()) {
    p.command = {"/bin/sh", "-c", a.network_check_cmd};
  } else if (a.comm_perf_test) {
    p.command = {python, ChecksDir(env) + "/comm_check.py"};
  }
  if (a.network_check_port < 0 || a.network_check_port > 65535) {
    return Error{"--network-check-port: " + std::to_string(a.network_check_port) +
                 " is not a port number"};
  }
  p.probe_port = a.network_check_port;

  p.switchbox = a.switchbox_check;
  auto pairs = a.box_pairs.empty() ? ParseBoxPairs(std::string(kDefaultBoxPairs))
                                   : ParseBoxPairs(a.box_pairs);
  if (!pairs) return pairs.error();
  p.box_pairs = *pairs;
  if (auto s = CheckSwitchboxSettings(p.box_pairs, a.min_bandwidth, a.min_channels); !s) {
    return s.error();
  }
  p.switchbox_min_bandwidth_mbps = a.min_bandwidth;
  p.switchbox_min_channels = a.min_channels;
  if (!(a.switchbox_timeout > 0)) return Error{"--switchbox-timeout: must be > 0 seconds"};
  if (auto e = rendezvous::CheckMaxSeconds("--switchbox-timeout", a.switchbox_timeout)) return *e;
  p.switchbox_timeout = std::chrono::duration<double>(a.switchbox_timeout);
  p.default_probe = a.switchbox_probe.empty();
  p.switchbox_probe = p.default_probe
                          ? std::vector<std::string>{python, ChecksDir(env) + "/switchbox_probe.py"}
                          : std::vector<std::string>{"/bin/sh", "-c", a.switchbox_probe + " \"$@\"",
                                                     "switchbox-probe"};
  return {};
}

}  // namespace ftrun::launcher
