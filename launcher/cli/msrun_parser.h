// The msrun personality's CLI11 parser (see msrun_args.h). Included only by command_line.cc,
// the one CLI11 translation unit.
#pragma once

#include <CLI/CLI.hpp>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "common/version.h"
#include "launcher/cli/cli11_support.h"
#include "launcher/cli/msrun_args.h"

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
    app_.description(
        "ftrun msrun: MindSpore's msrun launcher, with ftrun's supervision. Starts the\n"
        "scheduler (on the master node) and --local_worker_num workers, restarts them on\n"
        "failure (--max_restarts) and gives TTP saves their time (TTP_OT).");
    app_.formatter(
        std::make_shared<HelpFormatter>("msrun [options] task_script [task_script_args ...]"));
    app_.get_formatter()->column_width(34);
    app_.footer(kMsrunFooter);
    app_.prefix_command();
    app_.set_help_flag("-h,--help", "Show this help and exit");
    app_.add_flag("--version", version_, "Print the version and exit");

    std::string g = "msrun";
    Own("worker_num", a.worker_num, "Total number of workers in the job", g, "N");
    Own("local_worker_num", a.local_worker_num, "Workers on this node", g, "N");
    Own("master_addr", a.master_addr, "Address (IPv4 or host name) of the scheduler", g, "ADDR");
    Own("master_port", a.master_port, "Port of the scheduler", g, "PORT");
    Own("node_rank", a.node_rank,
        "Rank of this node; worker i gets rank node_rank*local_worker_num+i (-1: assigned)", g,
        "N");
    Own("log_dir", a.log_dir,
        "Directory of scheduler.log and worker_<rank>.log (created 0700; \"\": the current "
        "directory)",
        g, "DIR");
    Own("join", a.join, "True: wait for the job and print the worker logs; False: return at once",
        g, "True|False");
    Own("cluster_time_out", a.cluster_time_out,
        "Seconds to wait for the cluster to form (MS_TOPO_TIMEOUT; negative: forever)", g,
        "SECONDS");
    Own("bind_core", a.bind_core,
        "Pin workers to CPUs with taskset: True (even split), False, or "
        "{\"device0\":[\"0-10\"],...}",
        g, "BOOL|JSON");
    Own("sim_level", a.sim_level, "Simulation (dry-run) level 0-3: no scheduler", g, "LEVEL")
        ->check(CLI::IsMember({0, 1, 2, 3}));
    Own("sim_rank_id", a.sim_rank_id, "In simulation, run a single process with this rank", g,
        "RANK");
    Own("rank_table_file", a.rank_table_file, "Exported as RANK_TABLE_FILE", g, "FILE");
    Own("worker_log_name", a.worker_log_name,
        "Worker log base name ({ip} and {hostname} are replaced) [default: worker]", g, "NAME");
    Own("tail_worker_log", a.tail_worker_log,
        "With --join True, the ranks whose logs reach the console (-1: all)", g, "RANKS");

    g = "ftrun extensions";
    Ext("max-restarts", a.max_restarts, "Restarts of the job before it fails", g, "N");
    Ext("monitor-interval", a.monitor_interval,
        "Seconds between periodic checks (worker exits are seen at once)", g, "SECONDS");
    Ext("shutdown-timeout", a.shutdown_timeout,
        "Seconds between SIGTERM and SIGKILL when stopping workers [default: 30]", g, "SECONDS");
    Ext("fault-save", a.fault_save,
        "on: surviving workers using the ftrun helper save before a restart; off", g, "on|off")
        ->check(CLI::IsMember({"on", "off"}));
    Ext("save-timeout", a.save_timeout,
        "Seconds a fault-time save (and a TTP save) may take [default: TTP_OT, "
        "TTP_NORMAL_ACTION_TIME_LIMIT or 180]",
        g, "SECONDS");
    Ext("hang-timeout", a.hang_timeout,
        "Treat a rank that reported progress and then nothing for this long as failed (0: off)", g,
        "SECONDS");
    Ext("rdzv-port", a.rdzv_port, "Port of ftrun's rendezvous [default: --master_port + 1]", g,
        "PORT");
    Ext("rdzv-conf", a.rdzv_conf, "ftrun rendezvous settings key1=value1,... (see ftrun(1))", g,
        "K=V,...");
    Ext("local-addr", a.local_addr, "Address of this node used by the other nodes", g, "ADDR");
    Ext("event-log", a.event_log,
        "Append one JSON object per lifecycle event to this file [default: FTRUN_EVENT_LOG]", g,
        "FILE");
    Ext("metrics-port", a.metrics_port,
        "Serve Prometheus metrics at http://<this host>:PORT/metrics (0: any free port)", g,
        "PORT");
    Ext("log-level", a.log_level, "ftrun's own log level [default: LOGLEVEL or info]", g, "LEVEL");
    app_.add_flag("--dry_run,--dry-run", a.dry_run,
                  "Check the command line, print what would run, and exit")
        ->group(g);
  }

  ParsedMsrun Parse(std::vector<std::string> argv, MsrunArgs& a) {
    ParsedMsrun out;
    try {
      ExpandPrefixes(app_, argv, {}, own_);
      std::reverse(argv.begin(), argv.end());  // CLI11 consumes from the back
      app_.parse(argv);
    } catch (const CLI::CallForHelp&) {
      std::cout << app_.help();
      out.action = ParsedMsrun::Action::kPrintedHelp;
      return out;
    } catch (const std::exception& e) {
      out.action = ParsedMsrun::Action::kUsageError;
      out.error = e.what();
      return out;
    }
    if (version_) {
      std::cout << "ftrun " << kVersion << " (msrun)\n";
      out.action = ParsedMsrun::Action::kPrintedVersion;
      return out;
    }
    std::vector<std::string> rest = app_.remaining();
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    if (rest.empty()) {
      out.action = ParsedMsrun::Action::kUsageError;
      out.error = "the task script is missing (usage: msrun [options] task_script [args ...])";
      return out;
    }
    if (rest.front().size() > 1 && rest.front()[0] == '-') {
      out.action = ParsedMsrun::Action::kUsageError;
      out.error = "unrecognized option '" + rest.front() + "' (see msrun --help)";
      return out;
    }
    a.task_script = rest.front();
    a.task_script_args.assign(rest.begin() + 1, rest.end());
    out.args = a;
    return out;
  }

  std::string Help() { return app_.help(); }

 private:
  // msrun's own option: --snake_case only.
  template <class T>
  CLI::Option* Own(const std::string& name, T& var, const std::string& desc,
                   const std::string& group, const std::string& type) {
    own_.insert("--" + name);
    return app_.add_option("--" + name, var, desc)
        ->group(group)
        ->type_name(type)
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  // An ftrun extension: --a_b (shown) and --a-b.
  template <class T>
  CLI::Option* Ext(const std::string& dashed, T& var, const std::string& desc,
                   const std::string& group, const std::string& type) {
    std::string snake = dashed;
    std::replace(snake.begin(), snake.end(), '-', '_');
    CLI::Option* opt = app_.add_option("--" + snake + ",--" + dashed, var, desc)
                           ->group(group)
                           ->type_name(type)
                           ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    if constexpr (!std::is_same_v<T, std::optional<int>> &&
                  !std::is_same_v<T, std::optional<double>>) {
      opt->capture_default_str();
    }
    return opt;
  }

  CLI::App app_;
  bool version_ = false;
  std::set<std::string> own_;
};

}  // namespace ftrun::launcher::cli11
