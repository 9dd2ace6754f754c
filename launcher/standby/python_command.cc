#include "launcher/standby/python_command.h"

#include <array>
#include <set>

namespace ftrun::launcher {
namespace {

// Interpreter options that take no value and do not change what sys.path[0] is.
const std::set<std::string>& PlainFlags() {
  static const std::set<std::string> flags = {"-u", "-B",  "-O", "-OO", "-s", "-E",
                                              "-b", "-bb", "-q", "-d",  "-v", "-R"};
  return flags;
}

void Append(std::string& key, const std::string& field) {
  key += field;
  key.push_back('\0');
}

}  // namespace

Result<PythonCommand> ParsePythonCommand(const ProcessSpec& spec, const std::string& python) {
  if (spec.program != python) return Error{"reason=not_python program=" + spec.program};
  PythonCommand cmd;
  size_t i = 0;
  const auto& a = spec.args;
  for (; i < a.size(); ++i) {
    if (PlainFlags().count(a[i]) != 0) {
      cmd.flags.push_back(a[i]);
    } else if ((a[i] == "-W" || a[i] == "-X") && i + 1 < a.size()) {
      cmd.flags.push_back(a[i]);
      cmd.flags.push_back(a[++i]);
    } else {
      break;
    }
  }
  if (i == a.size()) return Error{"reason=no_script"};
  if (a[i] == "-m") {
    if (i + 1 == a.size() || a[i + 1].empty()) return Error{"reason=no_module"};
    cmd.module = true;
    cmd.target = a[i + 1];
    i += 2;
  } else if (a[i].empty() || a[i] == "-" || a[i][0] == '-') {
    // -c (--run-path), -I, -P, stdin, ...: not a plain script run.
    return Error{"reason=unsupported_python_option option=" + a[i]};
  } else {
    cmd.target = a[i++];
  }
  cmd.args.assign(a.begin() + static_cast<std::ptrdiff_t>(i), a.end());
  return cmd;
}

bool IsPerAttemptVariable(const std::string& name) {
  static const std::set<std::string> names = {
      "RANK",        "LOCAL_RANK",       "GROUP_RANK",       "ROLE_RANK",
      "WORLD_SIZE",  "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT"};
  static const std::array<std::string, 2> prefixes = {"TORCHELASTIC_", "FTRUN_"};
  if (names.count(name) != 0) return true;
  for (const auto& p : prefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

EnvMap WithoutPerAttemptVariables(const EnvMap& env) {
  EnvMap out;
  for (const auto& [k, v] : env) {
    if (!IsPerAttemptVariable(k)) out.emplace(k, v);
  }
  return out;
}

std::string StandbyKey(const ProcessSpec& spec, const PythonCommand& command) {
  std::string key;
  Append(key, spec.program);
  for (const auto& f : command.flags) Append(key, f);
  Append(key, command.module ? "-m" : "");
  Append(key, command.target);
  for (const auto& a : command.args) Append(key, a);
  Append(key, "\x01env");
  for (const auto& [k, v] : spec.env) {
    if (!IsPerAttemptVariable(k)) Append(key, k + "=" + v);
  }
  return key;
}

}  // namespace ftrun::launcher
