// The torchrun command line's CLI11 parser (see torchrun_args.h), shared by the personalities
// built on it: a TorchrunFlavor says what one of them (dlrover-run) changes. Included only by
// command_line.cc, the one CLI11 translation unit.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "launcher/cli/cli11_support.h"
#include "launcher/cli/shared_options.h"
#include "launcher/cli/torchrun_args.h"

namespace ftrun::launcher::cli11 {

inline constexpr const char* kTorchrunFooter =
    R"(Every --a-b option is also accepted as --a_b, and an unambiguous prefix of
it (--nproc for --nproc-per-node). Options not given on the command line are
read from PET_<NAME> (PET_NPROC_PER_NODE, PET_MASTER_PORT, ...). Options go
before the training script; everything after it is passed to it unchanged,
with ${local_rank} replaced by the worker's local rank.

`ftrun master --help`: the rendezvous server alone (e.g. a Kubernetes Service).
`ftrun torch.distributed.launch --help`: lines of `python -m torch.distributed.launch`.
Exit status: 0 all workers succeeded, 1 workers failed (restarts exhausted) or
ftrun was stopped by a signal, 2 usage error. See ftrun(1).)";

class TorchrunParser;

// torchrun's own options (the newest torchrun's, as --a-b): in a prefix they share with
// ftrun's extensions they win, so that an extension never breaks an abbreviation torchrun
// accepts (--event is --event-log-handler, not ambiguous with --event-log).
inline const std::vector<std::string> kTorchrunOptions = {"nnodes",
                                                          "nproc-per-node",
                                                          "rdzv-backend",
                                                          "rdzv-endpoint",
                                                          "rdzv-id",
                                                          "rdzv-conf",
                                                          "standalone",
                                                          "max-restarts",
                                                          "monitor-interval",
                                                          "start-method",
                                                          "role",
                                                          "module",
                                                          "no-python",
                                                          "run-path",
                                                          "log-dir",
                                                          "redirects",
                                                          "tee",
                                                          "local-ranks-filter",
                                                          "node-rank",
                                                          "master-addr",
                                                          "master-port",
                                                          "local-addr",
                                                          "logs-specs",
                                                          "event-log-handler",
                                                          "numa-binding",
                                                          "signals-to-handle",
                                                          "shutdown-timeout",
                                                          "virtual-local-rank",
                                                          "duplicate-stdout-filters",
                                                          "duplicate-stderr-filters"};

// What a personality built on torchrun's command line changes in it.
struct TorchrunFlavor {
  std::string description;
  std::string usage;
  std::string role;     // --role's default
  std::string program;  // the name its messages give ("see <program> --help")
  // Its own options besides torchrun's (kTorchrunOptions), as --a-b.
  std::vector<std::string> own_options;
  // Adds the personality's own options (after the pre-flight ones) to its own arguments
  // struct; empty: none.
  std::function<void(TorchrunParser& parser)> add_options;
};

class TorchrunParser {
 public:
  TorchrunParser(TorchrunArgs& a, const TorchrunFlavor& flavor)
      : app_("ftrun", "ftrun"), program_(flavor.program) {
    for (const auto* list : {&kTorchrunOptions, &flavor.own_options}) {
      for (const auto& dashed : *list) {
        for (const auto& n : CLI::detail::split(Names(dashed), ',')) own_.insert(n);
      }
    }
    a.role = flavor.role;
    Describe(app_, flavor.description, flavor.usage, kTorchrunFooter);
    app_.prefix_command();
    app_.add_flag("--version", version_, "Print the version and exit");

    std::string g = "Worker group";
    Opt("nnodes", a.nnodes, "N or MIN:MAX: number of nodes", g, "MIN:MAX");
    Opt("nproc-per-node", a.nproc_per_node,
        "Workers per node: a number, cpu, gpu (NVIDIA GPUs), xpu (Intel GPUs), npu (Ascend "
        "NPUs) or auto",
        g, "N|cpu|gpu|xpu|npu|auto");
    Opt(shared::kMaxRestarts, a.max_restarts, g);
    Opt(shared::kMonitorInterval, a.monitor_interval, g);
    Opt("role", a.role, "Role of the workers (ROLE_NAME, log prefix)", g, "NAME");
    Opt(shared::kShutdownTimeout, a.shutdown_timeout, g,
        " [default: TORCH_ELASTIC_SHUTDOWN_TIMEOUT or 30]");
    Opt("signals-to-handle", a.signals_to_handle,
        "Comma-separated signals forwarded to the workers before ftrun stops", g, "SIGNALS");
    Flag("virtual-local-rank", a.virtual_local_rank,
         "Give every worker LOCAL_RANK=0 and one GPU in CUDA_VISIBLE_DEVICES", g);

    g = "Fault tolerance (ftrun)";
    Opt(shared::kFaultSave, a.fault_save, g)->check(CLI::IsMember({"on", "off"}));
    Opt(shared::kSaveTimeout, a.save_timeout, g, " [default: TTP_OT or 180]");
    Opt(shared::kHangTimeout, a.hang_timeout, g);
    Opt(shared::kRestartBackoff, a.restart_backoff, g);
    Opt(shared::kExcludeAfter, a.exclude_after, g);
    Opt(shared::kFlashMemoryBudget, a.flash_memory_budget, g);
    Opt(shared::kFlashReplicas, a.flash_replicas, g);
    Flag("warm-restart", a.warm_restart,
         "Keep a standby interpreter per local rank, modules preloaded, that becomes the next "
         "attempt's worker (env FTRUN_WARM_RESTART=1)",
         g);
    Opt("preload", a.preload,
        "With --warm-restart: comma-separated modules the standbys import in advance; they "
        "must not read per-rank variables at import",
        g, "MODULES");

    g = "Operations (ftrun)";
    Opt(shared::kEventLog, a.event_log, g);
    Opt(shared::kMetricsPort, a.metrics_port, g);
    Flag(shared::kDryRun, a.dry_run, g);

    g = "Rendezvous";
    Flag("standalone", a.standalone,
         "Single-node job: local rendezvous, a fresh run id; ignores the --rdzv-* options", g);
    Opt("rdzv-backend", a.rdzv_backend,
        "static, c10d (also spelled ftrun), etcd (etcd-v2, etcd-v3: etcd's v3 API)", g, "NAME");
    Opt("rdzv-endpoint", a.rdzv_endpoint,
        "host[:port] of the rendezvous server (c10d); etcd: its members, comma-separated", g,
        "HOST:PORT");
    Opt("rdzv-id", a.rdzv_id, "Job id shared by all nodes (TORCHELASTIC_RUN_ID)", g, "ID");
    Opt(shared::kRdzvConf, a.rdzv_conf, g);
    Opt("node-rank", a.node_rank, "Rank of this node (static rendezvous)", g, "N");
    Opt("master-addr", a.master_addr, "Address of node 0 (static rendezvous)", g, "ADDR");
    Opt("master-port", a.master_port, "Port of node 0's ftrun (static rendezvous)", g, "PORT");
    Opt(shared::kLocalAddr, a.local_addr, g);
    Opt(shared::kTopologyFile, a.topology_file, g);

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
    Opt("tee", a.tee,
        "Like --redirects, and also copy to the console with a [role<rank>]: prefix (a console "
        "that is not read loses lines, counted: ftrun never waits for it; lines over 64 KiB "
        "are cut on the console)",
        g, "STD", "t");
    Opt("local-ranks-filter", a.local_ranks_filter,
        "Comma-separated local ranks whose output reaches the console", g, "RANKS");
    Opt(shared::kLogLevel, a.log_level, g);

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

    if (flavor.add_options) flavor.add_options(*this);

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

  // `a`: the struct given to the constructor (TorchrunArgs, or a personality's derived one).
  template <class Args>
  Parsed<Args> Parse(std::vector<std::string> argv, const Args& a) {
    CommandShape shape = LauncherShape(
        program_, &version_, "",
        "the training script is missing (usage: " + program_ + " [options] script [args ...])");
    shape.preferred = own_;
    return ParseCommand<Args>(app_, std::move(argv), a, shape, &Args::script, &Args::script_args);
  }

  std::string Help() { return app_.help(); }

  // torchrun's option conventions: --a-b and --a_b, PET_<A_B> when absent.
  template <class T>
  CLI::Option* Opt(const std::string& dashed, T& var, const std::string& desc,
                   const std::string& group, const std::string& type,
                   const std::string& short_name = "") {
    return AddOption(app_, Names(dashed, short_name), var, desc, group, type, PetName(dashed));
  }

  // torchrun reads PET_<FLAG> for flags as bool(int(value)); CLI11 accepts 0/1 and true/false.
  void Flag(const std::string& dashed, bool& var, const std::string& desc, const std::string& group,
            const std::string& short_name = "") {
    app_.add_flag(Names(dashed, short_name), var, desc)->envname(PetName(dashed))->group(group);
  }

  // A shared option (shared_options.h) in torchrun's conventions; `help_suffix` is appended to
  // its help (torchrun's default where it differs).
  template <class T>
  CLI::Option* Opt(const shared::Option& o, T& var, const std::string& group,
                   const std::string& help_suffix = "") {
    return Opt(o.dashed, var, o.help + help_suffix, group, o.value);
  }
  void Flag(const shared::Option& o, bool& var, const std::string& group) {
    Flag(o.dashed, var, o.help, group);
  }

 private:
  CLI::App app_;
  bool version_ = false;
  std::string program_;
  std::set<std::string> own_;
};

inline TorchrunFlavor TorchrunDefaultFlavor() {
  return {
      "ftrun: a fault-tolerant drop-in for torchrun. Starts --nproc-per-node workers per "
      "node,\nrestarts the group on failure (--max-restarts) and forwards signals.",
      "ftrun [options] training_script [training_script_args ...]",
      "default",
      "ftrun",
      {},
      {}};
}

// `python -m torch.distributed.launch`: torchrun's command line plus --use-env (`a`: the struct
// the parser fills).
inline TorchrunFlavor DistributedLaunchFlavor(DistributedLaunchArgs& a) {
  return {
      "ftrun torch.distributed.launch: the command line of `python -m "
      "torch.distributed.launch`\n(torchrun's plus --use-env), run by ftrun. Without "
      "--use-env every worker\ngets --local_rank=<local rank> before the script's own "
      "arguments.",
      "ftrun torch.distributed.launch [options] training_script [training_script_args ...]",
      "default",
      "ftrun torch.distributed.launch",
      {"use-env"},
      [&a](TorchrunParser& p) {
        p.Flag("use-env", a.use_env,
               "Pass the local rank only in LOCAL_RANK, not as --local_rank=N to the script",
               "torch.distributed.launch");
      }};
}

}  // namespace ftrun::launcher::cli11
