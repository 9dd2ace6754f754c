// The msrun personality end to end (`ftrun msrun ...`, or ftrun invoked as `msrun`): parse,
// validate, create --log_dir, then either supervise in the foreground (--join True) or start
// a detached supervisor and return as soon as it runs (--join False, msrun's default).
// Returns the exit code: 0 success (or the supervisor started), 1 job failure or start-up
// failure, 2 usage error; after SIGINT 0, as msrun.
#pragma once

#include <string>
#include <vector>

namespace ftrun::launcher {

int RunMsrun(const std::vector<std::string>& argv);

}  // namespace ftrun::launcher
