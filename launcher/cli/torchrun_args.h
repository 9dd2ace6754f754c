// The torchrun command line as ftrun accepts it, and dlrover-run's (torchrun's plus DLRover's
// options, personality/dlrover/dlrover_options.h), parsed but not yet interpreted.
//
// ParseTorchrunArgs is the only place that knows CLI11 (it is slow to compile, so it lives in
// one translation unit). It accepts both --a-b and --a_b spellings, PET_<NAME> environment
// fallbacks, unambiguous prefixes (argparse's allow_abbrev) and stops at the training script:
// everything after it is passed through verbatim. Meaning and validation of the values are in
// launch_config.h (and dlrover_config.h).
#pragma once

#include <string>
#include <vector>

#include "launcher/cli/parsed.h"
#include "launcher/config/torchrun_options.h"
#include "launcher/personality/dlrover/dlrover_options.h"

namespace ftrun::launcher {

// `python -m torch.distributed.launch`'s command line: torchrun's plus --use-env. Without it
// the script gets --local_rank=<local rank> before its own arguments, as torch 1.13's launch
// passes it (2.x passes --local-rank=, which scripts written for launch often do not accept).
struct DistributedLaunchArgs : TorchrunArgs {
  bool use_env = false;
};

// What the command line asked for.
using ParsedCommandLine = Parsed<TorchrunArgs>;
using ParsedDlroverRun = Parsed<DlroverArgs>;
using ParsedDistributedLaunch = Parsed<DistributedLaunchArgs>;

// Parse argv (without argv[0]). Help and version text go to stdout. Read PET_* variables from
// the process environment. Never throw.
ParsedCommandLine ParseTorchrunArgs(const std::vector<std::string>& argv);
ParsedDlroverRun ParseDlroverRunArgs(const std::vector<std::string>& argv);
ParsedDistributedLaunch ParseDistributedLaunchArgs(const std::vector<std::string>& argv);

// The --help texts (tests compare them with the man pages).
std::string TorchrunHelp();
std::string DlroverRunHelp();
std::string DistributedLaunchHelp();

}  // namespace ftrun::launcher
