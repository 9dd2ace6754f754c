#include "common/log.h"

#include <spdlog/cfg/env.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "common/stderr_log_sink.h"

namespace ftrun {

void throw_exception_from_error(const Error& e, const boost::source_location&) {
  throw std::logic_error("unchecked ftrun::Result: " + e.message);
}

namespace {

constexpr const char* kLoggerNames[] = {"launcher", "worker", "rendezvous"};

std::mutex g_mu;
spdlog::level::level_enum g_level = spdlog::level::info;

// Never blocks on a stderr nobody reads (see stderr_log_sink.h).
// Never destroyed, so that the exit-time flush and late log lines always find it.
const std::shared_ptr<StderrLogSink>& Sink() {
  static const auto* sink = [] {
    auto* s = new std::shared_ptr<StderrLogSink>(std::make_shared<StderrLogSink>());
    std::atexit([] { Sink()->FlushWithin(kLogExitFlush); });
    return s;
  }();
  return *sink;
}

std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name) {
  const auto& sink = Sink();
  auto logger = std::make_shared<spdlog::logger>(name, sink);
  // Timestamp, level, logger and our pid: several agents often share one terminal.
  // %P: the pid when the line is written (a detached msrun supervisor is a forked child).
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] [ftrun:%P] [%n] %v");
  logger->set_level(g_level);
  logger->flush_on(spdlog::level::trace);
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace

Result<spdlog::level::level_enum> ParseLogLevel(std::string_view text) {
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "trace") return spdlog::level::trace;
  if (t == "debug") return spdlog::level::debug;
  if (t == "info") return spdlog::level::info;
  if (t == "warning" || t == "warn") return spdlog::level::warn;
  if (t == "error") return spdlog::level::err;
  if (t == "critical" || t == "fatal") return spdlog::level::critical;
  if (t == "off") return spdlog::level::off;
  return Error{"unknown log level '" + std::string(text) +
               "' (expected trace, debug, info, warning, error, critical or off)"};
}

void InitLogging(spdlog::level::level_enum level) {
  std::lock_guard lock(g_mu);
  g_level = level;
  for (const char* name : kLoggerNames) {
    auto logger = spdlog::get(name);
    if (!logger) logger = MakeLogger(name);
    logger->set_level(level);
  }
  spdlog::cfg::load_env_levels();
}

std::shared_ptr<spdlog::logger> Logger(const std::string& name) {
  std::lock_guard lock(g_mu);
  auto logger = spdlog::get(name);
  return logger ? logger : MakeLogger(name);
}

namespace {

// Looked up once: the accessors are called on every log line.
template <size_t N>
const std::shared_ptr<spdlog::logger>& Cached(const char* name) {
  static const auto logger = Logger(name);
  return logger;
}

}  // namespace

const std::shared_ptr<spdlog::logger>& LauncherLog() { return Cached<0>("launcher"); }
const std::shared_ptr<spdlog::logger>& WorkerLog() { return Cached<1>("worker"); }
const std::shared_ptr<spdlog::logger>& RendezvousLog() { return Cached<2>("rendezvous"); }
const std::shared_ptr<spdlog::logger>& MsrunLog() { return Cached<3>("msrun"); }

}  // namespace ftrun
