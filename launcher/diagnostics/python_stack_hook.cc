#include "launcher/diagnostics/python_stack_hook.h"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace ftrun::launcher {
namespace {

// Everything happens inside one function so that the script's sitecustomize module (ours,
// until the hidden one replaces it) defines no names.
constexpr const char* kSiteCustomize =
    R"PY(# Written by the ftrun agent (man ftrun: --hang-timeout, status --stacks).
def _ftrun_stack_hook():
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import faulthandler
        sig = int(os.environ.get("FTRUN_STACK_SIGNAL", "0"))
        where = os.environ.get("FTRUN_STACK_DIR", "")
        if sig > 0 and where and os.path.isdir(where):
            # faulthandler keeps the file object alive; append mode lets the agent truncate.
            dump = open(os.path.join(where, "stack-%d.txt" % os.getpid()), "a")
            faulthandler.register(sig, file=dump, all_threads=True)
    except Exception:
        pass  # no dump is better than a script that does not start
    # The script sees its own PYTHONPATH and sys.path, as without ftrun.
    original = os.environ.pop("FTRUN_ORIGINAL_PYTHONPATH", None)
    if original is not None:
        if original:
            os.environ["PYTHONPATH"] = original
        else:
            os.environ.pop("PYTHONPATH", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    # Run the sitecustomize this one hides, as Python would have.
    import importlib.machinery
    import importlib.util
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_ftrun_stack_hook()
del _ftrun_stack_hook
)PY";

}  // namespace

std::string PythonStackFile(const std::string& dump_dir, int pid) {
  return dump_dir + "/stack-" + std::to_string(pid) + ".txt";
}

Status WritePythonStackHook(const std::string& hook_dir) {
  const std::string path = hook_dir + "/sitecustomize.py";
  std::ofstream out(path, std::ios::trunc);
  out << kSiteCustomize;
  out.close();
  if (!out) return Error{"cannot write " + path + ": " + std::strerror(errno)};
  return {};
}

EnvMap PythonStackHookEnv(const std::string& hook_dir, const std::string& dump_dir,
                          const EnvMap& agent_env) {
  const std::string original = Lookup(agent_env, "PYTHONPATH").value_or("");
  return {
      {"FTRUN_STACK_DIR", dump_dir},
      {"FTRUN_ORIGINAL_PYTHONPATH", original},
      {"PYTHONPATH", original.empty() ? hook_dir : hook_dir + ":" + original},
  };
}

}  // namespace ftrun::launcher
