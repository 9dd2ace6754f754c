// --warm-restart and --preload (ftrun(1), "Warm restart"): whether the agent keeps standby
// interpreters for the next attempt, and what they import in advance. Pure.
#pragma once

#include <string>
#include <vector>

#include "common/environment.h"
#include "common/result.h"

namespace ftrun::launcher {

struct WarmRestartConfig {
  bool enabled = false;                       // --warm-restart or FTRUN_WARM_RESTART=1
  std::vector<std::string> preload{"torch"};  // --preload: modules, in import order
  std::string bootstrap;                      // ftrun/standby.py (set when enabled)
};

// From the options and FTRUN_WARM_RESTART (1/true/yes/on, 0/false/no/off). `python_workers`:
// the workers run through the Python interpreter (not --no-python, not --run-path).
// Errors name the option or variable; what only makes warm restart useless goes to
// `warnings`.
Status BuildWarmRestartConfig(bool flag, const std::string& preload, const EnvMap& env,
                              bool python_workers, WarmRestartConfig& out,
                              std::vector<std::string>& warnings);

// Where ftrun/standby.py is: FTRUN_STANDBY_BOOTSTRAP, next to the installed binary
// (<prefix>/lib/python3/dist-packages/ftrun), else the source tree's scripts/python/ftrun.
std::string StandbyBootstrapPath(const EnvMap& env);

}  // namespace ftrun::launcher
