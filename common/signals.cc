#include "common/signals.h"

#include <csignal>

namespace ftrun {
namespace {

struct SignalEntry {
  const char* name;
  int number;
};
constexpr SignalEntry kSignals[] = {
    {"SIGHUP", SIGHUP},       {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT},   {"SIGILL", SIGILL},
    {"SIGTRAP", SIGTRAP},     {"SIGABRT", SIGABRT}, {"SIGBUS", SIGBUS},     {"SIGFPE", SIGFPE},
    {"SIGKILL", SIGKILL},     {"SIGUSR1", SIGUSR1}, {"SIGSEGV", SIGSEGV},   {"SIGUSR2", SIGUSR2},
    {"SIGPIPE", SIGPIPE},     {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM},   {"SIGCHLD", SIGCHLD},
    {"SIGCONT", SIGCONT},     {"SIGSTOP", SIGSTOP}, {"SIGTSTP", SIGTSTP},   {"SIGTTIN", SIGTTIN},
    {"SIGTTOU", SIGTTOU},     {"SIGURG", SIGURG},   {"SIGXCPU", SIGXCPU},   {"SIGXFSZ", SIGXFSZ},
    {"SIGVTALRM", SIGVTALRM}, {"SIGPROF", SIGPROF}, {"SIGWINCH", SIGWINCH}, {"SIGIO", SIGIO},
    {"SIGPWR", SIGPWR},       {"SIGSYS", SIGSYS},
};

}  // namespace

std::string SignalName(int sig) {
  for (const auto& s : kSignals) {
    if (s.number == sig) return s.name;
  }
  return "SIG" + std::to_string(sig);
}

std::optional<int> SignalNumber(const std::string& name) {
  for (const auto& s : kSignals) {
    if (name == s.name) return s.number;
  }
  return std::nullopt;
}

}  // namespace ftrun
