// What a standby interpreter needs to know about a worker command: whether it is the Python
// interpreter running a script or a module (`python [flags] script.py args`, `python [flags]
// -m module args`), and what of its environment is the same in every attempt. Pure.
#pragma once

#include <string>
#include <vector>

#include "common/environment.h"
#include "common/result.h"
#include "launcher/workers/spawner.h"

namespace ftrun::launcher {

struct PythonCommand {
  std::vector<std::string> flags;  // interpreter options before the script, e.g. "-u"
  bool module = false;             // -m
  std::string target;              // the script's path or the module's name
  std::vector<std::string> args;   // the script's arguments
};

// `spec` as a Python invocation a standby can take over, when its program is `python` (the
// job's interpreter). The error is a short key=value reason (e.g. "reason=not_python").
Result<PythonCommand> ParsePythonCommand(const ProcessSpec& spec, const std::string& python);

// The variables that differ between attempts or ranks (RANK, MASTER_PORT, TORCHELASTIC_*,
// FTRUN_*, ...): a standby starts without them and receives them at the hand-over.
bool IsPerAttemptVariable(const std::string& name);
EnvMap WithoutPerAttemptVariables(const EnvMap& env);

// Everything a standby was started with that must equal the worker's for the hand-over to be
// exact: program, interpreter flags, script or module, arguments, the environment without the
// per-attempt variables. Equal keys: a standby made from one spec can take over the other.
std::string StandbyKey(const ProcessSpec& spec, const PythonCommand& command);

}  // namespace ftrun::launcher
