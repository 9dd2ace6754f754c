// dlrover-run's command line as ftrun accepts it: torchrun's (torchrun_args.h, parsed alike)
// plus DLRover's options (personality/dlrover/dlrover_options.h), parsed but not yet
// interpreted; dlrover_config.h gives them their meaning.
#pragma once

#include <string>
#include <vector>

#include "launcher/cli/parsed.h"
#include "launcher/personality/dlrover/dlrover_options.h"

namespace ftrun::launcher {

using ParsedDlroverRun = Parsed<DlroverArgs>;

// Parses argv (without argv[0]). Help and version text go to stdout. Reads PET_* variables
// from the process environment. Never throws.
ParsedDlroverRun ParseDlroverRunArgs(const std::vector<std::string>& argv);

// The --help text (tests compare it with the man page).
std::string DlroverRunHelp();

}  // namespace ftrun::launcher
