// The torchrun personality end to end: parse, validate, set up logging and logs, pick the
// coordinator for the job's shape, run the agent. Returns the process exit code:
// 0 success, 1 job failure / forwarded signal / start-up failure, 2 usage error.
#pragma once

#include <string>
#include <vector>

#include "launcher/cli/torchrun_args.h"

namespace ftrun::launcher {

// `personality` kDlrover: dlrover-run's command line (dlrover_config.h).
int RunTorchrun(const std::vector<std::string>& argv,
                Personality personality = Personality::kTorchrun);

}  // namespace ftrun::launcher
