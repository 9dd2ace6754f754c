// The stack-dump hook that needs no cooperation from the script: a directory holding a
// sitecustomize.py, put first on the workers' PYTHONPATH. At interpreter start it registers
// faulthandler on FTRUN_STACK_SIGNAL, writing every thread's stack to
// $FTRUN_STACK_DIR/stack-<pid>.txt (opened for append, so the agent may truncate it between
// dumps); then it gives the script its own PYTHONPATH and sys.path back and runs the
// sitecustomize it hides (the user's or the distribution's), if any. The ftrun helper package
// (scripts/python/ftrun/control.py) registers the same file when the script connects.
//
// Thread: any. Errors: name the path that could not be written.
#pragma once

#include <string>

#include "common/environment.h"
#include "common/result.h"

namespace ftrun::launcher {

// The file a worker of pid `pid` dumps its stacks to.
std::string PythonStackFile(const std::string& dump_dir, int pid);

// Writes <hook_dir>/sitecustomize.py (hook_dir must exist).
Status WritePythonStackHook(const std::string& hook_dir);

// The workers' variables: FTRUN_STACK_DIR, PYTHONPATH with hook_dir first, and the
// original PYTHONPATH of `agent_env` (FTRUN_ORIGINAL_PYTHONPATH) for the hook to restore.
EnvMap PythonStackHookEnv(const std::string& hook_dir, const std::string& dump_dir,
                          const EnvMap& agent_env);

}  // namespace ftrun::launcher
