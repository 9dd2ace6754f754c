// dlrover-run's options as values: torchrun's (TorchrunArgs) plus DLRover's, the input of
// DlroverToTorchrun and ApplyDlroverSettings (dlrover_config.h). The CLI
// (cli/torchrun_args.h) fills it; the defaults are dlrover-run's.
#pragma once

#include <string>

#include "launcher/config/torchrun_options.h"

namespace ftrun::launcher {

struct DlroverArgs : TorchrunArgs {
  int precheck = 0;
  int node_unit = 1;
  bool auto_config = false;
  bool auto_tunning = false;
  std::string accelerator = "nvidia.com/gpu";
  int training_port = 60000;
  bool numa_affinity = false;
  std::string membind_policy = "preferred";
  std::string ucp_device_type = "cpu";
};

}  // namespace ftrun::launcher
