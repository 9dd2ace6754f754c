// Logging set-up: named spdlog loggers ("launcher", "worker", "rendezvous") writing to one
// stderr sink (stdout belongs to the workers). Thread-safe; call InitLogging once in main.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace ftrun {

// Parses a level as torchrun's LOGLEVEL does (DEBUG, INFO, WARNING, ERROR, CRITICAL; any
// case) plus spdlog's names (trace, warn, off).
Result<spdlog::level::level_enum> ParseLogLevel(std::string_view text);

// Creates the named loggers with `level`; SPDLOG_LEVEL may still override per logger.
void InitLogging(spdlog::level::level_enum level);

// The named logger; creates it on first use (so unit tests need no InitLogging).
std::shared_ptr<spdlog::logger> Logger(const std::string& name);

// The loggers each part of ftrun writes through, looked up once per process.
const std::shared_ptr<spdlog::logger>& LauncherLog();    // the agent and its helpers
const std::shared_ptr<spdlog::logger>& WorkerLog();      // worker processes and their channel
const std::shared_ptr<spdlog::logger>& RendezvousLog();  // the rendezvous server and master
const std::shared_ptr<spdlog::logger>& MsrunLog();       // the msrun personality

}  // namespace ftrun
