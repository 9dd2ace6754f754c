// The msrun personality's CLI11 parser (see msrun_args.h), through the shared skeleton
// (cli11_support.h). Included only by command_line.cc,
// the one CLI11 translation unit.
#pragma once

#include <CLI/CLI.hpp>
#include <set>
#include <string>
#include <vector>

#include "launcher/cli/cli11_support.h"
#include "launcher/cli/msrun_args.h"
#include "launcher/cli/shared_options.h"

namespace ftrun::launcher::cli11 {

inline constexpr const char* kMsrunFooter =
    R"(msrun's own options are spelled --snake_case only, as in msrun; ftrun's extensions
also as --a-b. An unambiguous prefix of an option is accepted. Options go before
the task script; everything after it is passed to it unchanged. A task script
other than python, python3 or pytest is run as `python <script>`.

ftrun supervises the job itself: with --join False it returns at once and a
background ftrun keeps watching, restarting (--max_restarts) and saving; its
log is <log_dir>/ftrun.log. ftrun's own rendezvous listens on --master_port + 1
on the master node (--rdzv_port).
Exit status: 0 success (or, with --join False, the supervisor started), 1 the
job failed or could not start, 2 usage error. See ftrun-msrun(1).)";

class MsrunParser {
 public:
  explicit MsrunParser(MsrunArgs& a) : app_("msrun", "msrun") {
    Describe(app_,
             "ftrun msrun: MindSpore's msrun launcher, with ftrun's supervision. Starts the\n"
             "scheduler (on the master node) and --local_worker_num workers, restarts them on\n"
             "failure (--max_restarts) and gives TTP saves their time (TTP_OT).",
             "msrun [options] task_script [task_script_args ...]", kMsrunFooter);
    app_.prefix_command();
    app_.add_flag("--version", version_, "Print the version and exit");

    Own("worker_num", a.worker_num, "Total number of workers in the job", "N");
    Own("local_worker_num", a.local_worker_num, "Workers on this node", "N");
    Own("master_addr", a.master_addr, "Address (IPv4 or host name) of the scheduler", "ADDR");
    Own("master_port", a.master_port, "Port of the scheduler", "PORT");
    Own("node_rank", a.node_rank,
        "Rank of this node; worker i gets rank node_rank*local_worker_num+i (-1: assigned)", "N");
    Own("log_dir", a.log_dir,
        "Directory of scheduler.log and worker_<rank>.log (created 0700; \"\": the current "
        "directory)",
        "DIR");
    Own("join", a.join, "True: wait for the job and print the worker logs; False: return at once",
        "True|False");
    Own("cluster_time_out", a.cluster_time_out,
        "Seconds to wait for the cluster to form (MS_TOPO_TIMEOUT; negative: forever)", "SECONDS");
    Own("bind_core", a.bind_core,
        "Pin workers to CPUs with taskset: True (even split), False, or "
        "{\"device0\":[\"0-10\"],...}",
        "BOOL|JSON");
    Own("sim_level", a.sim_level, "Simulation (dry-run) level 0-3: no scheduler", "LEVEL")
        ->check(CLI::IsMember({0, 1, 2, 3}));
    Own("sim_rank_id", a.sim_rank_id, "In simulation, run a single process with this rank", "RANK");
    Own("rank_table_file", a.rank_table_file, "Exported as RANK_TABLE_FILE", "FILE");
    Own("worker_log_name", a.worker_log_name,
        "Worker log base name ({ip} and {hostname} are replaced) [default: worker]", "NAME");
    Own("tail_worker_log", a.tail_worker_log,
        "With --join True, the ranks whose logs reach the console (-1: all)", "RANKS");

    Ext(shared::kMaxRestarts, a.max_restarts);
    Ext(shared::kMonitorInterval, a.monitor_interval);
    Ext(shared::kShutdownTimeout, a.shutdown_timeout, " [default: 30]");
    Ext(shared::kFaultSave, a.fault_save)->check(CLI::IsMember({"on", "off"}));
    Ext(shared::kSaveTimeout, a.save_timeout,
        " (also MindIO TTP's) [default: TTP_OT, TTP_NORMAL_ACTION_TIME_LIMIT or 180]");
    Ext(shared::kHangTimeout, a.hang_timeout);
    Ext(shared::kFlashMemoryBudget, a.flash_memory_budget);
    Ext(shared::kFlashReplicas, a.flash_replicas);
    Ext("rdzv-port", a.rdzv_port, "Port of ftrun's rendezvous [default: --master_port + 1]",
        "PORT");
    Ext(shared::kRdzvConf, a.rdzv_conf, " (see ftrun(1))");
    Ext(shared::kLocalAddr, a.local_addr);
    Ext(shared::kEventLog, a.event_log);
    Ext(shared::kMetricsPort, a.metrics_port);
    Ext(shared::kLogLevel, a.log_level);
    app_.add_flag(ExtNames(shared::kDryRun.dashed), a.dry_run, shared::kDryRun.help)
        ->group(kExtensionGroup);
  }

  ParsedMsrun Parse(std::vector<std::string> argv, const MsrunArgs& a) {
    CommandShape shape =
        LauncherShape("msrun", &version_, " (msrun)",
                      "the task script is missing (usage: msrun [options] task_script [args ...])");
    shape.preferred = own_;
    return ParseCommand(app_, std::move(argv), a, shape, &MsrunArgs::task_script,
                        &MsrunArgs::task_script_args);
  }

  std::string Help() { return app_.help(); }

 private:
  static constexpr const char* kOwnGroup = "msrun";
  static constexpr const char* kExtensionGroup = "ftrun extensions";

  // msrun's own option: --snake_case only.
  template <class T>
  CLI::Option* Own(const std::string& name, T& var, const std::string& desc,
                   const std::string& type) {
    own_.insert("--" + name);
    return AddOption(app_, "--" + name, var, desc, kOwnGroup, type);
  }
  // An ftrun extension: --a_b (shown) and --a-b.
  template <class T>
  CLI::Option* Ext(const std::string& dashed, T& var, const std::string& desc,
                   const std::string& type) {
    return AddOption(app_, ExtNames(dashed), var, desc, kExtensionGroup, type);
  }
  // A shared extension (shared_options.h); `help_suffix` is appended to its help (msrun's
  // default where it differs).
  template <class T>
  CLI::Option* Ext(const shared::Option& o, T& var, const std::string& help_suffix = "") {
    return Ext(o.dashed, var, o.help + help_suffix, o.value);
  }
  static std::string ExtNames(const std::string& dashed) {
    std::string snake = dashed;
    std::replace(snake.begin(), snake.end(), '-', '_');
    return "--" + snake + ",--" + dashed;
  }

  CLI::App app_;
  bool version_ = false;
  std::set<std::string> own_;
};

}  // namespace ftrun::launcher::cli11
