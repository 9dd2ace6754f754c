#include "launcher/config/warm_restart_config.h"

#include <cctype>
#include <filesystem>

#include "launcher/config/launch_config.h"

namespace ftrun::launcher {
namespace {

// A dotted Python module name: identifiers separated by dots.
bool IsModuleName(const std::string& name) {
  if (name.empty() || name.front() == '.' || name.back() == '.') return false;
  bool start = true;
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '.') {
      if (start) return false;
      start = true;
    } else if (std::isalpha(u) || c == '_' || (!start && std::isdigit(u)) || u >= 0x80) {
      start = false;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

Status BuildWarmRestartConfig(bool flag, const std::string& preload, const EnvMap& env,
                              bool python_workers, WarmRestartConfig& out,
                              std::vector<std::string>& warnings) {
  out.enabled = flag;
  if (auto v = Lookup(env, "FTRUN_WARM_RESTART"); v && !flag) {
    std::string lower;
    for (char c : *v)
      lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") {
      out.enabled = true;
    } else if (!(lower.empty() || lower == "0" || lower == "false" || lower == "no" ||
                 lower == "off")) {
      return Error{"FTRUN_WARM_RESTART: '" + *v + "' is not 1 or 0"};
    }
  }
  out.preload.clear();
  for (const std::string& m : SplitCommaList(preload)) {
    if (m.empty()) continue;  // --preload '': only the interpreter starts ahead
    if (!IsModuleName(m)) {
      return Error{"--preload: '" + m + "' is not a Python module name (a,b.c,...)"};
    }
    out.preload.push_back(m);
  }
  if (!out.enabled) return {};
  if (!python_workers) {
    warnings.push_back(
        "--warm-restart applies to workers run by the Python interpreter (a script or -m); "
        "with --no-python or --run-path every worker starts cold");
    out.enabled = false;
    return {};
  }
  const std::string bootstrap = StandbyBootstrapPath(env);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(bootstrap, ec)) {
    warnings.push_back("--warm-restart: the standby bootstrap " + bootstrap +
                       " is missing; every worker starts cold");
    out.enabled = false;
    return {};
  }
  out.bootstrap = bootstrap;
  return {};
}

std::string StandbyBootstrapPath(const EnvMap& env) {
  namespace fs = std::filesystem;
  if (auto p = Lookup(env, "FTRUN_STANDBY_BOOTSTRAP"); p && !p->empty()) return *p;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed =
        exe.parent_path().parent_path() / "lib/python3/dist-packages/ftrun/standby.py";
    if (fs::exists(installed, ec)) return installed.string();
  }
  return std::string(FTRUN_SOURCE_DIR) + "/scripts/python/ftrun/standby.py";
}

}  // namespace ftrun::launcher
