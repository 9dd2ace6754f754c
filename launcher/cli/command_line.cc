// The one translation unit that includes CLI11.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>

#include "common/version.h"
#include "launcher/cli/cli11_support.h"
#include "launcher/cli/master_args.h"
#include "launcher/cli/msrun_parser.h"
#include "launcher/cli/status_args.h"
#include "launcher/cli/torchrun_args.h"

namespace ftrun::launcher {
namespace {

using cli11::ExpandPrefixes;
using cli11::HelpFormatter;
using cli11::Names;
using cli11::PetName;

constexpr const char* kFooter =
    R"(Every --a-b option is also accepted as --a_b, and an unambiguous prefix of
it (--nproc for --nproc-per-node). Options not given on the command line are
read from PET_<NAME> (PET_NPROC_PER_NODE, PET_MASTER_PORT, ...). Options go
before the training script; everything after it is passed to it unchanged,
with ${local_rank} replaced by the worker's local rank.

`ftrun master --help`: the rendezvous server alone (e.g. a Kubernetes Service).
Exit status: 0 all workers succeeded, 1 workers failed (restarts exhausted) or
ftrun was stopped by a signal, 2 usage error. See ftrun(1).)";

class Parser {
 public:
  Parser(TorchrunArgs& a, Personality personality) : app_("ftrun", "ftrun") {
    const bool dlrover = personality == Personality::kDlrover;
    app_.description(
        dlrover
            ? "ftrun dlrover-run: DLRover's dlrover-run command line (torchrun's plus DLRover's\n"
              "options), run by ftrun without a DLRover job master. Starts --nproc-per-node\n"
              "workers per node and restarts the group on failure (--max-restarts)."
            : "ftrun: a fault-tolerant drop-in for torchrun. Starts --nproc-per-node workers per "
              "node,\nrestarts the group on failure (--max-restarts) and forwards signals.");
    app_.formatter(std::make_shared<HelpFormatter>(
        dlrover ? "dlrover-run [options] training_script [training_script_args ...]"
                : "ftrun [options] training_script [training_script_args ...]"));
    app_.get_formatter()->column_width(34);
    app_.footer(kFooter);
    app_.prefix_command();
    app_.set_help_flag("-h,--help", "Show this help and exit");
    app_.add_flag("--version", version_, "Print the version and exit");

    std::string g = "Worker group";
    Opt("nnodes", a.nnodes, "N or MIN:MAX: number of nodes", g, "MIN:MAX");
    Opt("nproc-per-node", a.nproc_per_node,
        "Workers per node: a number, cpu, gpu (NVIDIA GPUs) or auto", g, "N|cpu|gpu|auto");
    Opt("max-restarts", a.max_restarts, "Restarts of the worker group before failing the job", g,
        "N");
    Opt("monitor-interval", a.monitor_interval,
        "Seconds between periodic checks (worker exits are seen at once)", g, "SECONDS");
    Opt("role", a.role, "Role of the workers (ROLE_NAME, log prefix)", g, "NAME");
    Opt("shutdown-timeout", a.shutdown_timeout,
        "Seconds between SIGTERM and SIGKILL when stopping workers [default: "
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT or 30]",
        g, "SECONDS");
    Opt("signals-to-handle", a.signals_to_handle,
        "Comma-separated signals forwarded to the workers before ftrun stops", g, "SIGNALS");
    Flag("virtual-local-rank", a.virtual_local_rank,
         "Give every worker LOCAL_RANK=0 and one GPU in CUDA_VISIBLE_DEVICES", g);

    g = "Fault tolerance (ftrun)";
    Opt("fault-save", a.fault_save,
        "on: before a stopping round restarts, surviving replicas save the newest consistent "
        "step (workers using the ftrun Python helper); off: stop at once",
        g, "on|off")
        ->check(CLI::IsMember({"on", "off"}));
    Opt("save-timeout", a.save_timeout,
        "Seconds the fault-time save may take before the restart goes ahead [default: TTP_OT "
        "or 180]",
        g, "SECONDS");
    Opt("hang-timeout", a.hang_timeout,
        "Treat a rank that reported progress and then nothing for this long as failed "
        "(0: off)",
        g, "SECONDS");

    g = "Operations (ftrun)";
    Opt("event-log", a.event_log,
        "Append one JSON object per lifecycle event to this file [default: FTRUN_EVENT_LOG]", g,
        "FILE");
    Opt("metrics-port", a.metrics_port,
        "Serve Prometheus metrics at http://<this host>:PORT/metrics (0: any free port)", g,
        "PORT");
    Flag("dry-run", a.dry_run,
         "Check the command line, print what would run, and exit without starting anything", g);

    g = "Rendezvous";
    Flag("standalone", a.standalone,
         "Single-node job: local rendezvous, a fresh run id; ignores the --rdzv-* options", g);
    Opt("rdzv-backend", a.rdzv_backend, "static, c10d (also spelled ftrun)", g, "NAME");
    Opt("rdzv-endpoint", a.rdzv_endpoint, "host[:port] of the rendezvous server (c10d)", g,
        "HOST:PORT");
    Opt("rdzv-id", a.rdzv_id, "Job id shared by all nodes (TORCHELASTIC_RUN_ID)", g, "ID");
    Opt("rdzv-conf", a.rdzv_conf, "Rendezvous settings key1=value1,key2=value2,...", g, "K=V,...");
    Opt("node-rank", a.node_rank, "Rank of this node (static rendezvous)", g, "N");
    Opt("master-addr", a.master_addr, "Address of node 0 (static rendezvous)", g, "ADDR");
    Opt("master-port", a.master_port, "Port of node 0's ftrun (static rendezvous)", g, "PORT");
    Opt("local-addr", a.local_addr, "Address of this node used by the other nodes", g, "ADDR");

    g = "Entry point";
    Flag("module", a.module, "Run the script as a Python module (python -m)", g, "m");
    Flag("no-python", a.no_python, "Execute the script directly, not through Python", g);
    Flag("run-path", a.run_path, "Run the script with runpy.run_path in the worker", g);
    Opt("start-method", a.start_method, "Accepted for compatibility: spawn, fork, forkserver", g,
        "METHOD")
        ->check(CLI::IsMember({"spawn", "fork", "forkserver"}));

    g = "Logs";
    Opt("log-dir", a.log_dir, "Base directory of the workers' log files", g, "DIR");
    Opt("redirects", a.redirects,
        "Send worker streams to files: 0 none, 1 stdout, 2 stderr, 3 both, or per rank 0:3,1:1", g,
        "STD", "r");
    Opt("tee", a.tee, "Like --redirects, and also copy to the console with a [role<rank>]: prefix",
        g, "STD", "t");
    Opt("local-ranks-filter", a.local_ranks_filter,
        "Comma-separated local ranks whose output reaches the console", g, "RANKS");
    Opt("log-level", a.log_level,
        "ftrun's own log level: debug, info, warning, error [default: LOGLEVEL or info]", g,
        "LEVEL");

    g = "Pre-flight checks (ftrun)";
    Flag("network-check", a.network_check,
         "Before a round with new nodes starts, test every node's network pairwise and keep "
         "faulty nodes out",
         g);
    Opt("network-check-bytes", a.network_check_bytes,
        "Bytes each pair moves each way (suffixes K, M, G, KiB, MiB, GiB)", g, "BYTES");
    Opt("network-check-timeout", a.network_check_timeout,
        "Seconds a pair's test may take before it fails", g, "SECONDS");
    Opt("min-network-bandwidth", a.min_network_bandwidth,
        "A pair below this many MB/s fails [default: no minimum]", g, "MBPS");
    Opt("straggler-fraction", a.straggler_fraction,
        "A node below this fraction of the median bandwidth is a straggler", g, "FRACTION");
    Flag("exclude-straggler", a.exclude_straggler,
         "Keep stragglers out of the round like faulty nodes (else only report them)", g);
    Opt("network-check-cmd", a.network_check_cmd,
        "Also run this command as a 2-node job on each pair (judged by exit code and time)", g,
        "CMD");
    Flag("comm-perf-test", a.comm_perf_test,
         "Also run scripts/checks/comm_check.py on each pair (a timed matmul and all-reduce)", g);
    Opt("network-check-port", a.network_check_port,
        "Port of this agent's network-check probe (0: any free port)", g, "PORT");
    Flag("switchbox-check", a.switchbox_check,
         "Before the first round, measure the GPU pairs of --box-pairs across the switchbox", g);
    app_.add_option(Names("box-pairs"), a.box_pairs,
                    "GPU pairs A:B, one per switch box [default: 0:1 2:4 3:5 6:7]")
        ->expected(1, CLI::detail::expected_max_vector_size)
        ->envname(PetName("box-pairs"))
        ->group(g)
        ->type_name("PAIR ...");
    Opt("min-bandwidth", a.min_bandwidth, "A switchbox pair passes at this many MB/s", g, "MBPS");
    Opt("min-channels", a.min_channels, "The node passes with this many passing pairs", g, "N");
    Opt("switchbox-probe", a.switchbox_probe,
        "The probe command (prints one JSON line per pair) [default: switchbox_probe.py]", g,
        "CMD");
    Opt("switchbox-timeout", a.switchbox_timeout, "Seconds all the probes may take together", g,
        "SECONDS");

    if (dlrover) {
      g = "DLRover";
      Opt("precheck", a.precheck,
          "0 none, 1 the network check, 2 the network check and the comm perf test", g, "{0,1,2}")
          ->check(CLI::IsMember({0, 1, 2}));
      Opt("node-unit", a.node_unit, "A round's node count is a multiple of this", g, "N");
      Flag("auto-config", a.auto_config,
           "nnodes from NODE_NUM, nproc-per-node from the GPUs; the network check from 4 nodes", g);
      Flag("auto-tunning", a.auto_tunning,
           "DLRover master's parallelism tuning (not available without it; warns)", g);
      Flag("save-at-breakpoint", a.save_at_breakpoint,
           "Save the last checkpoint on a failure (ftrun's fault-time save does; see "
           "ftrun(1))",
           g);
      Opt("accelerator", a.accelerator,
          "nvidia.com/gpu, ascend-npu, mthreads.com/gpu or metax-tech.com/gpu", g, "TYPE")
          ->check(CLI::IsMember(
              {"nvidia.com/gpu", "ascend-npu", "mthreads.com/gpu", "metax-tech.com/gpu"}));
      Opt("training-port", a.training_port,
          "Ascend: first HCCL port (HCCL_IF_BASE_PORT unless set)", g, "PORT");
      Flag("numa-affinity", a.numa_affinity,
           "Pin each local rank to the CPUs (and memory) of its GPU's NUMA node", g);
      Opt("membind-policy", a.membind_policy, "With --numa-affinity: bind or preferred", g,
          "POLICY")
          ->check(CLI::IsMember({"bind", "preferred"}));
      Opt("ucp-device-type", a.ucp_device_type,
          "DeepSpeed universal-checkpoint conversion device (accepted; warns)", g, "DEVICE");
    }

    g = "Compatibility";
    Opt("logs-specs", a.logs_specs, "torchrun LogsSpecs plugin name (not supported; warns)", g,
        "NAME");
    Opt("event-log-handler", a.event_log_handler, "torchrun event handler name (accepted)", g,
        "NAME");
    Opt("numa-binding", a.numa_binding,
        "torchrun NUMA binding (accepted, not applied; warns): node, socket, exclusive, "
        "core-complex",
        g, "MODE")
        ->check(CLI::IsMember({"node", "socket", "exclusive", "core-complex"}));
    Opt("duplicate-stdout-filters", a.duplicate_stdout_filters,
        "Also copy tee'd stdout lines containing one of these comma-separated strings to "
        "<attempt dir>/filtered_stdout.log",
        g, "TEXT,...");
    Opt("duplicate-stderr-filters", a.duplicate_stderr_filters,
        "Also copy tee'd stderr lines containing one of these comma-separated strings to "
        "<attempt dir>/filtered_stderr.log",
        g, "TEXT,...");
  }

  ParsedCommandLine Parse(std::vector<std::string> argv, TorchrunArgs& a) {
    ParsedCommandLine out;
    try {
      ExpandPrefixes(app_, argv, {"-r", "-t"});
      std::reverse(argv.begin(), argv.end());  // CLI11 consumes from the back
      app_.parse(argv);
    } catch (const CLI::CallForHelp&) {
      std::cout << app_.help();
      out.action = ParsedCommandLine::Action::kPrintedHelp;
      return out;
    } catch (const CLI::ParseError& e) {
      out.action = ParsedCommandLine::Action::kUsageError;
      out.error = e.what();
      return out;
    } catch (const std::exception& e) {
      out.action = ParsedCommandLine::Action::kUsageError;
      out.error = e.what();
      return out;
    }
    if (version_) {
      std::cout << "ftrun " << kVersion << "\n";
      out.action = ParsedCommandLine::Action::kPrintedVersion;
      return out;
    }
    std::vector<std::string> rest = app_.remaining();
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    if (rest.empty()) {
      out.action = ParsedCommandLine::Action::kUsageError;
      out.error = "the training script is missing (usage: ftrun [options] script [args ...])";
      return out;
    }
    if (rest.front().size() > 1 && rest.front()[0] == '-') {
      out.action = ParsedCommandLine::Action::kUsageError;
      out.error = "unrecognized option '" + rest.front() + "' (see ftrun --help)";
      return out;
    }
    a.script = rest.front();
    a.script_args.assign(rest.begin() + 1, rest.end());
    out.args = a;
    return out;
  }

  std::string Help() { return app_.help(); }

 private:
  template <class T>
  CLI::Option* Opt(const std::string& dashed, T& var, const std::string& desc,
                   const std::string& group, const std::string& type,
                   const std::string& short_name = "") {
    CLI::Option* opt = app_.add_option(Names(dashed, short_name), var, desc);
    // argparse lets an option repeat, the last value winning; scripts rely on it.
    opt->envname(PetName(dashed))
        ->group(group)
        ->type_name(type)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    if constexpr (!std::is_same_v<T, std::optional<int>> &&
                  !std::is_same_v<T, std::optional<double>>) {
      opt->capture_default_str();
    }
    return opt;
  }

  // torchrun reads PET_<FLAG> for flags as bool(int(value)); CLI11 accepts 0/1 and true/false.
  void Flag(const std::string& dashed, bool& var, const std::string& desc, const std::string& group,
            const std::string& short_name = "") {
    app_.add_flag(Names(dashed, short_name), var, desc)->envname(PetName(dashed))->group(group);
  }

  CLI::App app_;
  bool version_ = false;
};

// `ftrun master`.
class MasterParser {
 public:
  explicit MasterParser(MasterArgs& a) : app_("ftrun master", "ftrun master") {
    app_.description(
        "ftrun master: the rendezvous server of one job, alone (e.g. behind a Kubernetes\n"
        "Service). Agents join it with --rdzv-backend c10d --rdzv-endpoint HOST:PORT.\n"
        "Exits 0 when the job succeeded, 1 when it failed.");
    app_.formatter(std::make_shared<HelpFormatter>("ftrun master [options]"));
    app_.get_formatter()->column_width(34);
    app_.set_help_flag("-h,--help", "Show this help and exit");
    auto add = [&](const std::string& dashed, auto& var, const std::string& desc,
                   const std::string& type) {
      app_.add_option(Names(dashed), var, desc)
          ->type_name(type)
          ->capture_default_str()
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    };
    add("host", a.host, "Address to listen on (default: every address)", "ADDR");
    add("port", a.port, "Port to listen on", "PORT");
    add("nnodes", a.nnodes, "N or MIN:MAX: number of nodes of the job", "MIN:MAX");
    add("rdzv-id", a.rdzv_id, "Job id the agents must use (--rdzv-id)", "ID");
    add("rdzv-conf", a.rdzv_conf,
        "join_timeout, last_call_timeout, keep_alive_interval, keep_alive_max_attempt, token",
        "K=V,...");
    add("max-restarts", a.max_restarts, "Job-wide restarts before the job fails", "N");
    add("nproc-per-node", a.nproc_per_node,
        "Workers every agent must run (0: what the first agent says)", "N");
    add("event-log", a.event_log, "Append one JSON object per event to this file", "FILE");
    add("metrics-port", a.metrics_port, "Serve Prometheus metrics on this port (-1: off)", "PORT");
    add("save-timeout", a.save_timeout, "Seconds the fault-time save may take (0: TTP_OT or 180)",
        "SECONDS");
    add("fault-save", a.fault_save, "on: save before a stopping round restarts; off", "on|off");
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

  ParsedMaster Parse(std::vector<std::string> argv, MasterArgs& a) {
    ParsedMaster out;
    try {
      std::reverse(argv.begin(), argv.end());
      app_.parse(argv);
    } catch (const CLI::CallForHelp&) {
      std::cout << app_.help();
      out.action = ParsedMaster::Action::kPrintedHelp;
      return out;
    } catch (const CLI::ParseError& e) {
      out.action = ParsedMaster::Action::kUsageError;
      out.error = e.what();
      return out;
    }
    out.args = a;
    return out;
  }
  std::string Help() { return app_.help(); }

 private:
  CLI::App app_;
};

// `ftrun status`.
class StatusParser {
 public:
  explicit StatusParser(StatusArgs& a) : app_("ftrun status", "ftrun status") {
    app_.description(
        "ftrun status: the state of a job, from its rendezvous server (the agent that hosts\n"
        "it, or `ftrun master`), as a table.");
    app_.formatter(std::make_shared<HelpFormatter>("ftrun status [options] HOST:PORT"));
    app_.get_formatter()->column_width(34);
    app_.set_help_flag("-h,--help", "Show this help and exit");
    app_.add_option("endpoint", a.endpoint, "The rendezvous endpoint: HOST:PORT")
        ->required()
        ->type_name("HOST:PORT");
    app_.add_option(Names("rdzv-id"), a.rdzv_id, "Only if the server serves this job id")
        ->type_name("ID");
    app_.add_option(Names("token"), a.token, "The job token [default: FTRUN_RDZV_TOKEN]")
        ->type_name("TOKEN");
    app_.add_flag(Names("json"), a.json, "Print the state as one JSON object");
    app_.add_option(Names("timeout"), a.timeout, "Seconds to wait for an answer")
        ->type_name("SECONDS")
        ->capture_default_str();
  }
  ParsedStatus Parse(std::vector<std::string> argv, StatusArgs& a) {
    ParsedStatus out;
    try {
      std::reverse(argv.begin(), argv.end());
      app_.parse(argv);
    } catch (const CLI::CallForHelp&) {
      std::cout << app_.help();
      out.action = ParsedStatus::Action::kPrintedHelp;
      return out;
    } catch (const CLI::ParseError& e) {
      out.action = ParsedStatus::Action::kUsageError;
      out.error = e.what();
      return out;
    }
    out.args = a;
    return out;
  }
  std::string Help() { return app_.help(); }

 private:
  CLI::App app_;
};

}  // namespace

ParsedStatus ParseStatusArgs(const std::vector<std::string>& argv) {
  StatusArgs args;
  StatusParser parser(args);
  return parser.Parse(argv, args);
}

std::string StatusHelp() {
  StatusArgs args;
  return StatusParser(args).Help();
}

ParsedMaster ParseMasterArgs(const std::vector<std::string>& argv) {
  MasterArgs args;
  MasterParser parser(args);
  return parser.Parse(argv, args);
}

std::string MasterHelp() {
  MasterArgs args;
  return MasterParser(args).Help();
}

ParsedMsrun ParseMsrunArgs(const std::vector<std::string>& argv) {
  MsrunArgs args;
  cli11::MsrunParser parser(args);
  return parser.Parse(argv, args);
}

std::string MsrunHelp() {
  MsrunArgs args;
  return cli11::MsrunParser(args).Help();
}

ParsedCommandLine ParseTorchrunArgs(const std::vector<std::string>& argv, Personality personality) {
  TorchrunArgs args;
  if (personality == Personality::kDlrover) args.role = "dlrover-trainer";
  Parser parser(args, personality);
  ParsedCommandLine out = parser.Parse(argv, args);
  out.personality = personality;
  return out;
}

std::string TorchrunHelp(Personality personality) {
  TorchrunArgs args;
  if (personality == Personality::kDlrover) args.role = "dlrover-trainer";
  return Parser(args, personality).Help();
}

}  // namespace ftrun::launcher
