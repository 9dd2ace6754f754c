// What a personality built on torchrun's command line (dlrover-run: dlrover_config.h) does
// around BuildLaunchConfig; torchrun itself has none. Called by the CLI (cli/torchrun_main.cc)
// in this order: rewrite, BuildLaunchConfig, apply. Every error is a usage error.
#pragma once

#include <string>
#include <vector>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/config/launch_config.h"
#include "launcher/config/torchrun_options.h"

namespace ftrun::launcher {

struct TorchrunHooks {
  std::string program = "ftrun";  // names the personality in usage errors
  // Rewrites its options as torchrun's, appending warnings for later; null: none.
  Result<TorchrunArgs> (*rewrite)(TorchrunArgs, const EnvMap&, const HostFacts&,
                                  std::vector<std::string>& warnings) = nullptr;
  // Applies the options BuildLaunchConfig does not know; null: none.
  Status (*apply)(const TorchrunArgs&, const EnvMap&, LaunchConfig&) = nullptr;
};

}  // namespace ftrun::launcher
