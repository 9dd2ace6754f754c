// The CLI11 parsers of ftrun's own subcommands beside the launchers: `ftrun master` (see
// master_args.h) and `ftrun status` (status_args.h), commands of options only. Included only by
// command_line.cc, the one CLI11 translation unit.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "launcher/cli/cli11_support.h"
#include "launcher/cli/master_args.h"
#include "launcher/cli/report_args.h"
#include "launcher/cli/status_args.h"

namespace ftrun::launcher::cli11 {

// A command of options only: CLI11's exact option names, no --version, no script.
template <class Args>
class OptionsParser {
 public:
  OptionsParser(const std::string& name, const std::string& description, const std::string& usage)
      : app_(name, name) {
    Describe(app_, description, usage);
  }
  Parsed<Args> Parse(std::vector<std::string> argv, const Args& a) {
    return ParseCommand(app_, std::move(argv), a);
  }
  std::string Help() { return app_.help(); }

 protected:
  CLI::App app_;
};

class MasterParser : public OptionsParser<MasterArgs> {
 public:
  explicit MasterParser(MasterArgs& a)
      : OptionsParser(
            "ftrun master",
            "ftrun master: the rendezvous server of one job, alone (e.g. behind a Kubernetes\n"
            "Service). Agents join it with --rdzv-backend c10d --rdzv-endpoint HOST:PORT.\n"
            "Exits 0 when the job succeeded, 1 when it failed.",
            "ftrun master [options]") {
    auto add = [&](const std::string& dashed, auto& var, const std::string& desc,
                   const std::string& type) {
      AddOption(app_, Names(dashed), var, desc, "Options", type);
    };
    add("host", a.host, "Address to listen on (default: every address)", "ADDR");
    add("port", a.port, "Port to listen on", "PORT");
    add("nnodes", a.nnodes, "N or MIN:MAX: number of nodes of the job", "MIN:MAX");
    add("rdzv-id", a.rdzv_id, "Job id the agents must use (--rdzv-id)", "ID");
    add("rdzv-conf", a.rdzv_conf,
        "join_timeout, last_call_timeout, keep_alive_interval, keep_alive_max_attempt, token, "
        "token_file, tls_cert, tls_key, tls_ca, tls_client_auth",
        "K=V,...");
    add("max-restarts", a.max_restarts, "Job-wide restarts before the job fails", "N");
    add("nproc-per-node", a.nproc_per_node,
        "Workers every agent must run (0: what the first agent says)", "N");
    add("event-log", a.event_log, "Append one JSON object per event to this file", "FILE");
    add("metrics-port", a.metrics_port, "Serve Prometheus metrics on this port (-1: off)", "PORT");
    add("save-timeout", a.save_timeout, "Seconds the fault-time save may take (0: TTP_OT or 180)",
        "SECONDS");
    add("fault-save", a.fault_save, "on: save before a stopping round restarts; off", "on|off");
    add("restart-backoff", a.restart_backoff,
        "Seconds the next round waits when a node caused a restart before within 10 minutes, "
        "doubled for each repeat up to 30 s (0: off)",
        "SECONDS");
    add("exclude-after", a.exclude_after,
        "Leave a node out once it caused this many restarts within 10 minutes, while a spare or "
        "--nnodes MIN allows (0: never)",
        "N");
    add("log-level", a.log_level, "debug, info, warning, error [default: LOGLEVEL or info]",
        "LEVEL");
    add("node-unit", a.node_unit, "A round's node count is a multiple of this", "N");
    app_.add_flag(Names("network-check"), a.network_check,
                  "Test the agents' network pairwise before a round with new nodes runs "
                  "(start the agents with --network-check)");
    add("network-check-bytes", a.network_check_bytes, "Bytes each pair moves each way", "BYTES");
    add("network-check-timeout", a.network_check_timeout, "Seconds a pair's test may take",
        "SECONDS");
    add("min-network-bandwidth", a.min_network_bandwidth,
        "A pair below this many MB/s fails (0: no minimum)", "MBPS");
    add("straggler-fraction", a.straggler_fraction,
        "A node below this fraction of the median bandwidth is a straggler", "FRACTION");
    app_.add_flag(Names("exclude-straggler"), a.exclude_straggler,
                  "Keep stragglers out of the round like faulty nodes");
    app_.add_flag(Names("comm-perf-test"), a.comm_perf_test,
                  "Each pair also runs the agents' check command (their --comm-perf-test or "
                  "--network-check-cmd)");
  }
};

class StatusParser : public OptionsParser<StatusArgs> {
 public:
  explicit StatusParser(StatusArgs& a)
      : OptionsParser(
            "ftrun status",
            "ftrun status: the state of a job, from its rendezvous server (the agent that hosts\n"
            "it, or `ftrun master`), as a table.",
            "ftrun status [options] HOST:PORT") {
    app_.add_option("endpoint", a.endpoint, "The rendezvous endpoint: HOST:PORT")
        ->required()
        ->type_name("HOST:PORT");
    app_.add_option(Names("rdzv-id"), a.rdzv_id, "Only if the server serves this job id")
        ->type_name("ID");
    app_.add_option(Names("token"), a.token, "The job token [default: FTRUN_RDZV_TOKEN]")
        ->type_name("TOKEN");
    auto file = [this](const char* name, std::string& into, const char* help) {
      app_.add_option(Names(name), into, help)->type_name("FILE");
    };
    file("token-file", a.token_file,
         "A file holding the job token [default: FTRUN_RDZV_TOKEN_FILE]");
    file("tls-ca", a.tls_ca,
         "TLS: the CA that signed the server's certificate [default: FTRUN_RDZV_TLS_CA]");
    file("tls-cert", a.tls_cert,
         "Mutual TLS: this client's certificate [default: FTRUN_RDZV_TLS_CERT]");
    file("tls-key", a.tls_key, "Mutual TLS: this client's key [default: FTRUN_RDZV_TLS_KEY]");
    app_.add_flag(Names("json"), a.json, "Print the state as one JSON object");
    app_.add_flag(Names("stacks"), a.stacks,
                  "Have every rank of the job dump its stacks (Python, and native with "
                  "eu-stack) and print them merged: identical stacks once, ranks folded (0-3,8), "
                  "the ranks that differ from the majority marked");
    app_.add_option(Names("stacks-dir"), a.stacks_dir,
                    "With --stacks: also write the merged report there "
                    "(status-<round>-<time>.txt and .svg)")
        ->type_name("DIR");
    app_.add_option(Names("timeout"), a.timeout,
                    "Seconds to wait for an answer (with --stacks: for every node's stacks)")
        ->type_name("SECONDS")
        ->capture_default_str();
  }
};

class ReportParser : public OptionsParser<ReportArgs> {
 public:
  explicit ReportParser(ReportArgs& a)
      : OptionsParser(
            "ftrun report",
            "ftrun report: the post-mortem page of a job, one self-contained HTML file: a\n"
            "timeline of its attempts, faults, recoveries (detect / save / stop / rendezvous /\n"
            "spawn / first step), checkpoints and nodes, the merged stacks of hung ranks and\n"
            "the fault record. It reads only the files the job writes in its log directory\n"
            "(events.jsonl, fault_record.json, stacks/), so a running job works too.\n"
            "Exits 0 when the page was written (its path is printed), 1 when LOG_DIR holds\n"
            "nothing of a job or the page cannot be written, 2 on usage errors.",
            "ftrun report [options] LOG_DIR") {
    app_.add_option("log_dir", a.log_dir,
                    "The run's log directory (or a --log-dir of runs: the newest; or an event "
                    "log file)")
        ->required()
        ->type_name("LOG_DIR");
    app_.add_option(Names("output", "o"), a.output,
                    "Write the page here [default: LOG_DIR's run directory/report.html]")
        ->type_name("FILE");
    app_.add_option(Names("event-log"), a.event_log,
                    "The job's event log, when it ran with --event-log FILE [default: "
                    "events.jsonl in the run directory]")
        ->type_name("FILE");
  }
};

}  // namespace ftrun::launcher::cli11
