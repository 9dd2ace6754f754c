// What parsing one of ftrun's command lines gave, and the exit code of one that does not run.
// Shared by every command (torchrun, dlrover-run, msrun, master, status): the parsers fill a
// Parsed<Args> (launcher/cli/cli11_support.h has the one parse skeleton), the Run* functions
// stop at ExitCodeIfNotRun before doing anything.
#pragma once

#include <cctype>
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

  // `message`, an error about an option's value ("--a-b: 'v' ...", "--a-b: must be >= 0, got
  // v", "--a-b v: ..."), blaming the variable the value came from when it was not on the
  // command line. A message about the option that does not quote its value is about
  // something else (--auto-config: NODE_NUM ...) and is left alone; an empty value is never
  // quoted ("--master-addr: must not be empty").
  std::string Blame(const std::string& message) const {
    for (const auto& [option, source] : from_env) {
      const auto& [variable, value] = source;
      const std::string spaced = option + " " + value + ":";
      if (message.rfind(option + ":", 0) == 0 && (value.empty() || Quotes(message, value))) {
        return variable + " (read for " + option + ")" + message.substr(option.size());
      }
      if (message.rfind(spaced, 0) == 0) {
        return variable + "=" + value + " (read for " + option + ")" +
               message.substr(spaced.size() - 1);
      }
    }
    return message;
  }

 private:
  // Whether `text` has `word` with no letter or digit right before or after it.
  static bool Quotes(const std::string& text, const std::string& word) {
    auto alnum = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0; };
    for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
      const size_t end = at + word.size();
      if ((at == 0 || !alnum(text[at - 1])) && (end == text.size() || !alnum(text[end]))) {
        return true;
      }
    }
    return false;
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
