// The pre-flight checks' settings (--network-check, --switchbox-check and their options), from
// the command line and the environment. Pure apart from locating the bundled check scripts.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/config/switchbox_settings.h"
#include "launcher/config/torchrun_options.h"

namespace ftrun::launcher {

struct PreflightConfig {
  // --network-check: agents test each other pairwise before a round with new nodes runs.
  bool network_check = false;
  uint64_t bytes = uint64_t{64} << 20;
  std::chrono::duration<double> timeout{60};
  double min_bandwidth_mbps = 0;  // 0: no minimum
  double straggler_fraction = 0.5;
  bool exclude_stragglers = false;
  std::vector<std::string> command;  // run on each pair as a 2-process job ("" : none)
  int probe_port = 0;                // where this agent's probe listens (0: any free port)
  // --switchbox-check: this node's GPU pairs, before it joins.
  bool switchbox = false;
  std::vector<BoxPair> box_pairs;
  double switchbox_min_bandwidth_mbps = 10000;
  int switchbox_min_channels = 2;
  std::vector<std::string> switchbox_probe;  // argv; ${gpu_a} ${gpu_b} ${pair} substituted
  bool default_probe = true;                 // the bundled switchbox_probe.py (NVIDIA only)
  std::chrono::duration<double> switchbox_timeout{60};
};

// A probe size: ParseByteSize (launch_config.h), at most 1GiB.
Result<uint64_t> ParseProbeSize(const std::string& option, const std::string& text);

// Validates and fills `out`. `python` runs the bundled scripts (PYTHON_EXEC or python3).
Status BuildPreflightConfig(const TorchrunArgs& args, const EnvMap& env, const std::string& python,
                            PreflightConfig& out);

// Where comm_check.py and switchbox_probe.py are: FTRUN_CHECKS_DIR, else
// <ftrun's dir>/../share/ftrun/checks (installed), else the source tree's scripts/checks.
std::string ChecksDir(const EnvMap& env);

}  // namespace ftrun::launcher
