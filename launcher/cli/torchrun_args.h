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

// What the command line asked for.
using ParsedCommandLine = Parsed<TorchrunArgs>;
using ParsedDlroverRun = Parsed<DlroverArgs>;

// Parse argv (without argv[0]). Help and version text go to stdout. Read PET_* variables from
// the process environment. Never throw.
ParsedCommandLine ParseTorchrunArgs(const std::vector<std::string>& argv);
ParsedDlroverRun ParseDlroverRunArgs(const std::vector<std::string>& argv);

// The --help texts (tests compare them with the man pages).
std::string TorchrunHelp();
std::string DlroverRunHelp();

}  // namespace ftrun::launcher
