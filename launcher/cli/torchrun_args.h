// The torchrun command line as ftrun accepts it, parsed but not yet interpreted.
//
// ParseTorchrunArgs is the only place that knows CLI11 (it is slow to compile, so it lives in
// one translation unit). It accepts both --a-b and --a_b spellings, PET_<NAME> environment
// fallbacks, unambiguous prefixes (argparse's allow_abbrev) and stops at the training script:
// everything after it is passed through verbatim. Meaning and validation of the values are in
// launch_config.h.
#pragma once

#include <string>
#include <vector>

#include "launcher/cli/parsed.h"
#include "launcher/config/torchrun_options.h"

namespace ftrun::launcher {

// What the command line asked for.
using ParsedCommandLine = Parsed<TorchrunArgs>;

// Parses argv (without argv[0]). Help and version text go to stdout. Reads PET_* variables
// from the process environment. Never throws.
ParsedCommandLine ParseTorchrunArgs(const std::vector<std::string>& argv);

// The --help text (tests compare it with the man page).
std::string TorchrunHelp();

}  // namespace ftrun::launcher
