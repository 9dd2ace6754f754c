// What parsing one of ftrun's command lines gave, and the exit code of one that does not run.
// Shared by every command (torchrun, dlrover-run, msrun, master, status): the parsers fill a
// Parsed<Args> (launcher/cli/cli11_support.h has the one parse skeleton), the Run* functions
// stop at ExitCodeIfNotRun before doing anything.
#pragma once

#include <iostream>
#include <map>
#include <optional>
#include <string>

namespace ftrun::launcher {

// What a command line asked for; one type for every command, so that a test compares any of them.
enum class ParseAction { kRun, kPrintedHelp, kPrintedVersion, kUsageError };

template <class Args>
struct Parsed {
  using Action = ParseAction;
  Action action = Action::kRun;
  Args args;
  std::string error;  // for kUsageError: one sentence naming the option
  // Options whose value came from their environment variable, not the command line:
  // option name (--a-b) -> {variable (PET_A_B), its value}.
  std::map<std::string, std::pair<std::string, std::string>> from_env;

  // `message`, an error about an option's value ("--a-b: 'v' ..." or "--a-b v: ..."),
  // blaming the variable the value came from when it was not on the command line.
  std::string Blame(const std::string& message) const {
    for (const auto& [option, source] : from_env) {
      const auto& [variable, value] = source;
      const std::string quoted = option + ": '" + value + "'";
      const std::string spaced = option + " " + value + ":";
      if (message.rfind(quoted, 0) == 0) {
        return variable + " (read for " + option + ")" + message.substr(option.size());
      }
      if (message.rfind(spaced, 0) == 0) {
        return variable + "=" + value + " (read for " + option + ")" +
               message.substr(spaced.size() - 1);
      }
    }
    return message;
  }
};

// Prints "<program>: error: <message>" to stderr; returns 2, the exit code of a usage error.
inline int UsageError(const std::string& program, const std::string& message) {
  std::cerr << program << ": error: " << message << std::endl;
  return 2;
}

// nullopt when the command line asks to run; else its exit code: 0 after --help or
// --version, 2 after reporting a usage error (UsageError).
template <class Args>
std::optional<int> ExitCodeIfNotRun(const Parsed<Args>& parsed, const std::string& program) {
  using Action = typename Parsed<Args>::Action;
  switch (parsed.action) {
    case Action::kRun:
      return std::nullopt;
    case Action::kPrintedHelp:
    case Action::kPrintedVersion:
      return 0;
    case Action::kUsageError:
      break;
  }
  return UsageError(program, parsed.error);
}

}  // namespace ftrun::launcher
