// The torchrun personality end to end: parse, validate, set up logging and logs, pick the
// coordinator for the job's shape, run the agent. Returns the process exit code:
// 0 success, 1 job failure / forwarded signal / start-up failure, 2 usage error.
#pragma once

#include <string>
#include <vector>

namespace ftrun::launcher {

int RunTorchrun(const std::vector<std::string>& argv);

// dlrover-run's command line (torchrun_args.h): torchrun's run with DLRover's steps around the
// configuration (personality/dlrover/dlrover_config.h).
int RunDlroverRun(const std::vector<std::string>& argv);

// `python -m torch.distributed.launch`'s command line (torchrun_args.h): torchrun's run, the
// script given --local_rank=N unless --use-env.
int RunDistributedLaunch(const std::vector<std::string>& argv);

}  // namespace ftrun::launcher
