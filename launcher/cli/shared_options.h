// The options that several command lines share (torchrun's and msrun's ftrun extensions),
// declared once: name, --help text and value name. Each parser adds them in its own spelling
// and group, and appends to the help a default that differs between the command lines.
#pragma once

namespace ftrun::launcher::cli11::shared {

struct Option {
  const char* dashed;      // the name as --a-b, without the dashes
  const char* help;        // its --help text
  const char* value = "";  // the name of its value in --help; "" for a flag
};

// Worker group.
inline constexpr Option kMaxRestarts{"max-restarts",
                                     "Restarts of the worker group before failing the job", "N"};
inline constexpr Option kMonitorInterval{
    "monitor-interval", "Seconds between periodic checks (worker exits are seen at once)",
    "SECONDS"};
inline constexpr Option kShutdownTimeout{
    "shutdown-timeout", "Seconds between SIGTERM and SIGKILL when stopping workers", "SECONDS"};

// Fault tolerance.
inline constexpr Option kFaultSave{
    "fault-save",
    "on: before a stopping round restarts, surviving replicas save the newest consistent step "
    "(workers using the ftrun Python helper); off: stop at once",
    "on|off"};
inline constexpr Option kSaveTimeout{
    "save-timeout", "Seconds the fault-time save may take before the restart goes ahead",
    "SECONDS"};
inline constexpr Option kHangTimeout{
    "hang-timeout",
    "Treat a rank that reported progress and then nothing for this long as failed (0: off); "
    "first every rank's stacks are merged into <run dir>/stacks/hang-*.txt and .svg, naming "
    "the ranks stuck where the others are not",
    "SECONDS"};
inline constexpr Option kRestartBackoff{
    "restart-backoff",
    "Seconds the next round waits when the node behind a restart caused one before within 10 "
    "minutes, doubled for each repeat up to 30 s (0: off)",
    "SECONDS"};
inline constexpr Option kExcludeAfter{
    "exclude-after",
    "Leave a node out once it caused this many restarts within 10 minutes, while a spare or "
    "--nnodes MIN allows (0: never)",
    "N"};
inline constexpr Option kFlashMemoryBudget{
    "flash-memory-budget",
    "Memory this node's agent keeps for flash-checkpoint snapshots, e.g. 8G (env "
    "FTRUN_FLASH_MEMORY_BUDGET) [default: half of the host's memory]",
    "BYTES"};
inline constexpr Option kFlashReplicas{
    "flash-replicas",
    "Copies of each rank's flash-checkpoint shard snapshot, its own included: with 2, each "
    "node's shards are also copied to the next node's agent, so a lost node's shards restore "
    "from memory; 1: no copies (env FTRUN_FLASH_REPLICAS) [default: 2]",
    "N"};

// Rendezvous.
inline constexpr Option kRdzvConf{"rdzv-conf", "Rendezvous settings key1=value1,key2=value2,...",
                                  "K=V,..."};
inline constexpr Option kTopologyFile{
    "topology-file",
    "Switches above each node, a line '<switch> ... <address>' per node, nearest first "
    "(DLRover's 'asw psw ip'): nodes under one switch get adjacent ranks (or set "
    "FTRUN_SWITCH_PATH=asw/psw on each node)",
    "FILE"};
inline constexpr Option kLocalAddr{"local-addr", "Address of this node used by the other nodes",
                                   "ADDR"};

// Operations.
inline constexpr Option kEventLog{
    "event-log",
    "Append one JSON object per lifecycle event to this file [default: FTRUN_EVENT_LOG]", "FILE"};
inline constexpr Option kMetricsPort{
    "metrics-port",
    "Serve Prometheus metrics at http://<this host>:PORT/metrics (0: any free port)", "PORT"};
inline constexpr Option kDryRun{
    "dry-run", "Check the command line, print what would run, and exit without starting anything"};

// Logs.
inline constexpr Option kLogLevel{
    "log-level", "ftrun's own log level: debug, info, warning, error [default: LOGLEVEL or info]",
    "LEVEL"};

}  // namespace ftrun::launcher::cli11::shared
