// The --help text of ftrun's options that several command lines share (torchrun's and msrun's
// extensions), defined once. A default that differs between the command lines is appended by
// the parser.
#pragma once

namespace ftrun::launcher::cli11::help {

// Worker group.
inline constexpr const char* kMaxRestarts = "Restarts of the worker group before failing the job";
inline constexpr const char* kMonitorInterval =
    "Seconds between periodic checks (worker exits are seen at once)";
inline constexpr const char* kShutdownTimeout =
    "Seconds between SIGTERM and SIGKILL when stopping workers";

// Fault tolerance.
inline constexpr const char* kFaultSave =
    "on: before a stopping round restarts, surviving replicas save the newest consistent step "
    "(workers using the ftrun Python helper); off: stop at once";
inline constexpr const char* kSaveTimeout =
    "Seconds the fault-time save may take before the restart goes ahead";
inline constexpr const char* kHangTimeout =
    "Treat a rank that reported progress and then nothing for this long as failed (0: off)";

// Rendezvous.
inline constexpr const char* kRdzvConf = "Rendezvous settings key1=value1,key2=value2,...";
inline constexpr const char* kLocalAddr = "Address of this node used by the other nodes";

// Operations.
inline constexpr const char* kEventLog =
    "Append one JSON object per lifecycle event to this file [default: FTRUN_EVENT_LOG]";
inline constexpr const char* kMetricsPort =
    "Serve Prometheus metrics at http://<this host>:PORT/metrics (0: any free port)";
inline constexpr const char* kDryRun =
    "Check the command line, print what would run, and exit without starting anything";

// Logs.
inline constexpr const char* kLogLevel =
    "ftrun's own log level: debug, info, warning, error [default: LOGLEVEL or info]";

}  // namespace ftrun::launcher::cli11::help
