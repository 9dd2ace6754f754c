// dlrover-run's options in ftrun's terms. dlrover-run is torchrun's command line plus DLRover's
// options, run against DLRover's job master; ftrun has no such master, so each option is
// either done by ftrun with DLRover's meaning or accepted with one warning saying what ftrun
// does instead. Pure: the environment and the host facts are passed in.
#pragma once

#include <string>
#include <vector>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/config/launch_config.h"
#include "launcher/personality/dlrover/dlrover_options.h"

namespace ftrun::launcher {

// Rewrites the torchrun part of a dlrover-run command line as the torchrun one ftrun runs
// (DLRover's own options stay, for ApplyDlroverSettings):
//   --precheck 1|2        -> --network-check (2: and --comm-perf-test);
//   --auto-config         -> --nnodes NODE_NUM, --nproc-per-node = the GPUs (if any), and the
//                            network check from 4 nodes on;
//   several nodes         -> the c10d rendezvous at DLROVER_MASTER_ADDR (an `ftrun master`, or
//                            the node there hosts it), unless --rdzv-endpoint is given;
//   ELASTIC_JOB_NAME      -> the run id (TORCHELASTIC_RUN_ID), as dlrover-run;
//   --save-at-breakpoint  -> --fault-save on, and the agent writes the newest memory
//                            snapshots to storage whenever its workers stop for a restart
//                            (LaunchConfig::flash_persist_at_breakpoint).
// Warnings (options that need DLRover's master) are appended to `warnings`.
Result<DlroverArgs> DlroverToTorchrun(DlroverArgs args, const EnvMap& env, const HostFacts& host,
                                      std::vector<std::string>& warnings);

// The options that remain after BuildLaunchConfig: --node-unit (checked against --nnodes),
// --numa-affinity / --membind-policy, and --accelerator ascend-npu's HCCL_IF_BASE_PORT.
Status ApplyDlroverSettings(const DlroverArgs& args, const EnvMap& env, LaunchConfig& config);

}  // namespace ftrun::launcher
