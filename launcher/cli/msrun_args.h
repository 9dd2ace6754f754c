// The msrun command line (MindSpore's launcher) as ftrun accepts it, parsed but not yet
// interpreted: msrun's own --snake_case options with msrun's defaults, plus ftrun's
// extensions (each also spelled --a-b). Like argparse, an unambiguous prefix is accepted (a
// prefix that names one msrun option wins over the extensions), options end at the task
// script, and everything after it goes to the script unchanged. Meaning and validation are in
// msrun_config.h; the parser lives in the one CLI11 translation unit (command_line.cc).
#pragma once

#include <string>
#include <vector>

#include "launcher/cli/parsed.h"
#include "launcher/personality/msrun/msrun_options.h"

namespace ftrun::launcher {

using ParsedMsrun = Parsed<MsrunArgs>;

// Parses argv (without the program name). Help and version go to stdout. Never throws.
ParsedMsrun ParseMsrunArgs(const std::vector<std::string>& argv);

// The --help text (tests compare it with the man page).
std::string MsrunHelp();

}  // namespace ftrun::launcher
