// dlrover-run's command line: torchrun's (torchrun_parser.h) plus DLRover's options, whose
// meaning is in personality/dlrover/dlrover_config.h. Included only by command_line.cc, the one
// CLI11 translation unit.
#pragma once

#include <string>

#include "launcher/cli/torchrun_parser.h"
#include "launcher/personality/dlrover/dlrover_options.h"

namespace ftrun::launcher::cli11 {

inline void AddDlroverOptions(TorchrunParser& p, DlroverArgs& a) {
  const std::string g = "DLRover";
  p.Opt("precheck", a.precheck,
        "0 none, 1 the network check, 2 the network check and the comm perf test", g, "{0,1,2}")
      ->check(CLI::IsMember({0, 1, 2}));
  p.Opt("node-unit", a.node_unit, "A round's node count is a multiple of this", g, "N");
  p.Flag("auto-config", a.auto_config,
         "nnodes from NODE_NUM, nproc-per-node from the GPUs; the network check from 4 nodes", g);
  p.Flag("auto-tunning", a.auto_tunning,
         "DLRover master's parallelism tuning (not available without it; warns)", g);
  p.Flag("save-at-breakpoint", a.save_at_breakpoint,
         "Save the last checkpoint on a failure (the fault-time save), and write the newest "
         "flash-checkpoint memory snapshots to storage at every restart",
         g);
  p.Opt("accelerator", a.accelerator,
        "nvidia.com/gpu, ascend-npu, mthreads.com/gpu or metax-tech.com/gpu", g, "TYPE")
      ->check(CLI::IsMember(
          {"nvidia.com/gpu", "ascend-npu", "mthreads.com/gpu", "metax-tech.com/gpu"}));
  p.Opt("training-port", a.training_port, "Ascend: first HCCL port (HCCL_IF_BASE_PORT unless set)",
        g, "PORT");
  p.Flag("numa-affinity", a.numa_affinity,
         "Pin each local rank to the CPUs (and memory) of its GPU's NUMA node", g);
  // Any value, as DLRover's: neither bind nor preferred binds the CPUs only.
  p.Opt("membind-policy", a.membind_policy,
        "With --numa-affinity: bind, preferred, or anything else for the CPUs only", g, "POLICY");
  p.Opt("ucp-device-type", a.ucp_device_type,
        "DeepSpeed universal-checkpoint conversion device (accepted; warns)", g, "DEVICE");
}

// `a`: the struct the parser fills.
inline TorchrunFlavor DlroverFlavor(DlroverArgs& a) {
  return {
      "ftrun dlrover-run: DLRover's dlrover-run command line (torchrun's plus DLRover's\n"
      "options), run by ftrun without a DLRover job master. Starts --nproc-per-node\n"
      "workers per node and restarts the group on failure (--max-restarts).",
      "dlrover-run [options] training_script [training_script_args ...]",
      "dlrover-trainer",
      "dlrover-run",
      {"network-check", "comm-perf-test", "exclude-straggler", "switchbox-check", "box-pairs",
       "min-bandwidth", "min-channels", "precheck", "node-unit", "auto-config", "auto-tunning",
       "save-at-breakpoint", "accelerator", "training-port", "numa-affinity", "membind-policy",
       "ucp-device-type"},
      [&a](TorchrunParser& p) { AddDlroverOptions(p, a); }};
}

}  // namespace ftrun::launcher::cli11
