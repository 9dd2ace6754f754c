#include "launcher/config/launch_config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <regex>
#include <tuple>

#include "common/endpoint.h"
#include "common/log.h"
#include "rendezvous/etcd/etcd_conf.h"
#include "rendezvous/topology.h"

namespace ftrun::launcher {
namespace {

Status ParseEntryPoint(const TorchrunArgs& a, const EnvMap& env, LaunchConfig& c) {
  if (a.module && a.no_python && !a.run_path) {
    return Error{"--no-python cannot be combined with -m/--module"};
  }
  c.script = a.script;
  c.script_args = a.script_args;
  c.python = Lookup(env, "PYTHON_EXEC").value_or("python3");
  if (a.run_path) {
    c.entry = EntryKind::kRunPath;  // takes precedence over --no-python and -m, as in torchrun
  } else if (a.no_python) {
    c.entry = EntryKind::kNoPython;
  } else if (a.module) {
    c.entry = EntryKind::kModule;
  } else {
    c.entry = EntryKind::kPython;
  }
  // Not read at all for --no-python, as by torchrun.
  if (c.python.empty() && c.entry != EntryKind::kNoPython) {
    return Error{"PYTHON_EXEC is set but empty"};
  }
  return {};
}

// "--rdzv-id" -> "PET_RDZV_ID".
std::string PetVariable(std::string_view option) {
  std::string env = "PET_";
  for (char ch : option.substr(2)) env += ch == '-' ? '_' : static_cast<char>(std::toupper(ch));
  return env;
}

// torch's rule for an endpoint's host (a dot-separated name, an IPv4 or an IPv6 address),
// with the mistake it exists for named: a URL is not an endpoint.
Result<Endpoint> ParseRendezvousEndpoint(const std::string& text, int default_port) {
  const std::string option = "--rdzv-endpoint";
  if (size_t scheme = text.find("://"); scheme != std::string::npos) {
    return Error{option + ": '" + text + "' is a URL; give host:port (" + text.substr(scheme + 3) +
                 ")"};
  }
  auto ep = ParseEndpoint(text, default_port, option);
  if (!ep) return ep.error();
  static const std::regex kHost("^[\\w.:-]+$");
  if (!std::regex_match(ep->host, kHost)) {
    return Error{option + ": '" + text +
                 "': the host must be a name, an IPv4 address or an [IPv6] address"};
  }
  return ep;
}

Status ParseRendezvous(const TorchrunArgs& a, const EnvMap& env, LaunchConfig& c) {
  auto conf = rendezvous::ParseRendezvousConf(a.rdzv_conf);
  if (!conf) return conf.error();
  c.rdzv = *conf;
  for (auto& w : c.rdzv.warnings) c.warnings.push_back(w);
  c.node_rank = a.node_rank;
  c.master_addr = a.master_addr;
  c.master_port = a.master_port;
  c.local_addr = a.local_addr.empty() ? c.rdzv.local_addr : a.local_addr;
  c.run_id = a.rdzv_id;
  // --standalone replaces both with its own (so an empty one from an unset variable does no
  // harm there, as in torchrun).
  if (c.run_id.empty() && !a.standalone) return Error{"--rdzv-id: must not be empty"};
  if (c.master_port < 0 || c.master_port > 65535) {
    return Error{"--master-port: " + std::to_string(c.master_port) +
                 " is not a port number (0-65535)"};
  }
  if (c.node_rank < 0)
    return Error{"--node-rank: must be >= 0, got " + std::to_string(c.node_rank)};
  if (c.master_addr.empty() && !a.standalone) return Error{"--master-addr: must not be empty"};

  if (a.standalone) {
    if (c.max_nodes > 1) {
      return Error{"--standalone runs a single-node job, but --nnodes asks for up to " +
                   std::to_string(c.max_nodes) + " nodes"};
    }
    // Only what the command line said: values from PET_RDZV_* (a cluster's defaults, set
    // for every job) are ignored without a word, as torchrun does.
    std::string ignored;
    for (auto [name, value, fallback] : {std::tuple{"--rdzv-backend", &a.rdzv_backend, "static"},
                                         std::tuple{"--rdzv-endpoint", &a.rdzv_endpoint, ""},
                                         std::tuple{"--rdzv-id", &a.rdzv_id, "none"}}) {
      if (*value == fallback || Lookup(env, PetVariable(name)) == *value) continue;
      ignored += (ignored.empty() ? "" : ", ") + std::string(name) + " " + *value;
    }
    if (!ignored.empty()) c.warnings.push_back("--standalone: ignoring " + ignored);
    c.standalone = true;
    c.backend = RendezvousBackend::kDynamic;
    c.backend_name = "c10d";
    c.endpoint_host = "localhost";
    c.endpoint_port = 0;
    c.run_id = RandomUuid4();
    return {};
  }

  const std::string& b = a.rdzv_backend;
  c.backend_name = b;
  if (b == "static") {
    c.backend = RendezvousBackend::kStatic;
    if (a.rdzv_endpoint.empty()) {
      c.endpoint_host = c.master_addr;
      c.endpoint_port = c.master_port;
    } else {
      auto ep = ParseRendezvousEndpoint(a.rdzv_endpoint, -1);
      if (!ep) return ep.error();
      c.endpoint_host = ep->host;
      c.endpoint_port = ep->port;
      // As torch 1.13 (_get_addr_and_port): the endpoint is the static job's master, whatever
      // --master-addr says; its default (127.0.0.1) sent other nodes' workers to their own host.
      c.master_addr = ep->host;
      c.master_port = ep->port;
    }
    if (c.node_rank >= c.max_nodes) {
      return Error{"--node-rank: " + std::to_string(c.node_rank) + " is not below --nnodes " +
                   std::to_string(c.max_nodes)};
    }
    if (c.rdzv.rank && *c.rdzv.rank != c.node_rank) {
      c.warnings.push_back("--rdzv-conf: rank is set from --node-rank for the static backend");
    }
    c.rdzv.rank = c.node_rank;
    if (c.min_nodes != c.max_nodes) {
      c.warnings.push_back("--nnodes " + std::to_string(c.min_nodes) + ":" +
                           std::to_string(c.max_nodes) +
                           ": the static backend is not elastic; waiting for all " +
                           std::to_string(c.max_nodes) + " nodes");
      c.min_nodes = c.max_nodes;
    }
  } else if (b == "c10d" || b == "ftrun") {
    c.backend = RendezvousBackend::kDynamic;
    // Without an endpoint torch uses localhost:29400 (so does ftrun: one host's agents).
    auto ep = a.rdzv_endpoint.empty() ? Result<Endpoint>(Endpoint{"localhost", 29400})
                                      : ParseRendezvousEndpoint(a.rdzv_endpoint, 29400);
    if (!ep) return ep.error();
    c.endpoint_host = ep->host;
    c.endpoint_port = ep->port;
  } else if (b == "etcd" || b == "etcd-v2" || b == "etcd-v3") {
    // All three are served through etcd's v3 gRPC API (rendezvous/etcd/).
    c.backend = RendezvousBackend::kEtcd;
    if (a.rdzv_endpoint.empty()) {
      return Error{"--rdzv-endpoint: required with --rdzv-backend " + b +
                   " (host:port of etcd, or a comma-separated list of its members)"};
    }
    auto members = rendezvous::etcd::ParseEtcdEndpoints(a.rdzv_endpoint);
    if (!members) return members.error();
    c.etcd_endpoints = std::move(*members);
    // torch's etcd backend bounds each rendezvous by `timeout` (torchrun passes 900 s); its
    // etcd-v2, like c10d and ftrun's etcd-v3, by join_timeout.
    if (b == "etcd") {
      c.rdzv.join_timeout = c.rdzv.timeout;
      c.rdzv.join_timeout_key = "timeout";
    }
    // A bad etcd key or file is a usage error (the environment's credentials come later).
    if (auto etcd = rendezvous::etcd::ResolveEtcdConf(c.rdzv, c.etcd_endpoints, {}); !etcd) {
      return etcd.error();
    }
    c.endpoint_host = ParseEndpoint(c.etcd_endpoints.front(), 2379, "--rdzv-endpoint")->host;
    c.endpoint_port = ParseEndpoint(c.etcd_endpoints.front(), 2379, "--rdzv-endpoint")->port;
  } else {
    return Error{"--rdzv-backend: unknown backend '" + b +
                 "' (expected static, c10d, etcd, etcd-v2 or etcd-v3)"};
  }
  return {};
}

Status ParseLogs(const TorchrunArgs& a, const EnvMap& env, LaunchConfig& c) {
  c.log_dir = a.log_dir;
  // Validated here so that a bad spec is a usage error, resolved per rank once nproc is known.
  if (auto r = ParseStdSpec("--redirects", a.redirects, 1); !r) return r.error();
  if (auto t = ParseStdSpec("--tee", a.tee, 1); !t) return t.error();
  c.redirects_spec = a.redirects;
  c.tee_spec = a.tee;
  if (!a.local_ranks_filter.empty()) {
    std::set<int> ranks;
    for (const auto& item : SplitCommaList(a.local_ranks_filter)) {
      auto n = PythonInt(item);
      if (!n || *n < 0) {
        return Error{"--local-ranks-filter: '" + item +
                     "' is not a local rank (expected e.g. 0,1)"};
      }
      ranks.insert(*n);
    }
    c.local_ranks_filter = ranks;
  }
  // An empty filter list (or an empty item) duplicates nothing.
  for (auto [text, out] : {std::pair{&a.duplicate_stdout_filters, &c.duplicate_stdout_filters},
                           std::pair{&a.duplicate_stderr_filters, &c.duplicate_stderr_filters}}) {
    for (auto& f : SplitCommaList(*text)) {
      if (!f.empty()) out->push_back(f);
    }
  }
  c.line_prefix_template = Lookup(env, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE").value_or("");
  std::string level = a.log_level;
  std::string level_source = "--log-level";
  if (level.empty()) {
    level = Lookup(env, "LOGLEVEL").value_or("info");
    level_source = "LOGLEVEL";
  }
  auto lvl = ParseLogLevel(level);
  if (!lvl) return lvl.error().Wrap(level_source);
  c.log_level = *lvl;
  c.event_log = a.event_log.empty() ? Lookup(env, "FTRUN_EVENT_LOG").value_or("") : a.event_log;
  if (a.metrics_port && (*a.metrics_port < 0 || *a.metrics_port > 65535)) {
    return Error{"--metrics-port: " + std::to_string(*a.metrics_port) +
                 " is not a port number (0-65535)"};
  }
  c.metrics_port = a.metrics_port;
  c.dry_run = a.dry_run;
  if (!a.logs_specs.empty()) {
    c.warnings.push_back("--logs-specs '" + a.logs_specs +
                         "': Python LogsSpecs plugins cannot be loaded by ftrun; using the "
                         "default log layout");
  }
  if (!a.numa_binding.empty()) {
    c.warnings.push_back("--numa-binding " + a.numa_binding +
                         ": not applied by ftrun (workers inherit ftrun's CPU affinity)");
  }
  return {};
}

}  // namespace

Result<LaunchConfig> BuildLaunchConfig(const TorchrunArgs& a, const EnvMap& env) {
  LaunchConfig c;
  auto nodes = ParseNnodes(a.nnodes);
  if (!nodes) return nodes.error();
  std::tie(c.min_nodes, c.max_nodes) = *nodes;
  c.nproc_spec = a.nproc_per_node;
  if (auto n = PythonInt(a.nproc_per_node)) {
    if (*n <= 0) return Error{"--nproc-per-node: must be at least 1, got " + a.nproc_per_node};
    c.nproc_per_node = *n;
  } else if (!std::regex_match(a.nproc_per_node, std::regex("^[a-z][a-z0-9_]*$"))) {
    // A word is a device type (cpu, gpu, xpu, npu, auto, a privateuse1 backend's name),
    // counted or refused once the host is known (ResolveNprocPerNode).
    return Error{"--nproc-per-node: '" + a.nproc_per_node +
                 "' is not a number, cpu, gpu, xpu, npu, auto or a device type"};
  }
  if (a.max_restarts < 0) {
    return Error{"--max-restarts: must be >= 0, got " + std::to_string(a.max_restarts)};
  }
  c.max_restarts = a.max_restarts;
  if (!(a.monitor_interval > 0)) {
    return Error{"--monitor-interval: must be > 0 seconds, got " +
                 std::to_string(a.monitor_interval)};
  }
  if (auto e = rendezvous::CheckMaxSeconds("--monitor-interval", a.monitor_interval)) return *e;
  c.monitor_interval = std::chrono::duration<double>(a.monitor_interval);
  c.role = a.role;  // may be empty, as for torchrun: it only names the workers (ROLE_NAME)

  int shutdown_s = 30;
  if (a.shutdown_timeout) {
    shutdown_s = *a.shutdown_timeout;
    if (shutdown_s < 0) return Error{"--shutdown-timeout: must be >= 0 seconds"};
  } else if (auto e = Lookup(env, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
    auto n = PythonInt(*e);
    if (!n || *n < 0) {
      return Error{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT: '" + *e + "' is not a number of seconds"};
    }
    shutdown_s = *n;
  }
  c.shutdown_timeout = std::chrono::seconds(shutdown_s);
  auto sigs = ParseSignalList(a.signals_to_handle);
  if (!sigs) return sigs.error();
  c.signals = *sigs;
  c.virtual_local_rank = a.virtual_local_rank;
  c.fault_save = a.fault_save == "on";
  if (a.save_timeout) {
    if (!(*a.save_timeout > 0)) return Error{"--save-timeout: must be > 0 seconds"};
    if (auto e = rendezvous::CheckMaxSeconds("--save-timeout", *a.save_timeout)) return *e;
    c.save_timeout = std::chrono::duration<double>(*a.save_timeout);
  } else {
    auto ttp = TtpSaveTimeout(env);
    if (!ttp) return ttp.error();
    if (*ttp) c.save_timeout = **ttp;
  }
  if (!(a.hang_timeout >= 0)) return Error{"--hang-timeout: must be >= 0 seconds"};
  if (auto e = rendezvous::CheckMaxSeconds("--hang-timeout", a.hang_timeout)) return *e;
  c.hang_timeout = std::chrono::duration<double>(a.hang_timeout);
  if (!(a.restart_backoff >= 0)) return Error{"--restart-backoff: must be >= 0 seconds"};
  if (auto e = rendezvous::CheckMaxSeconds("--restart-backoff", a.restart_backoff)) return *e;
  c.restart_backoff = std::chrono::duration<double>(a.restart_backoff);
  if (a.exclude_after < 0) return Error{"--exclude-after: must be >= 0"};
  c.exclude_after = a.exclude_after;
  if (!a.flash_memory_budget.empty()) {
    auto bytes = ParseByteSize("--flash-memory-budget", a.flash_memory_budget);
    if (!bytes) return bytes.error();
    c.flash_memory_budget = *bytes;
  } else if (auto e = Lookup(env, "FTRUN_FLASH_MEMORY_BUDGET"); e && !e->empty()) {
    auto bytes = ParseByteSize("FTRUN_FLASH_MEMORY_BUDGET", *e);
    if (!bytes) return bytes.error();
    c.flash_memory_budget = *bytes;
  }
  auto loan = EnvSwitch(env, "FTRUN_FLASH_LOAN", true);
  if (!loan) return loan.error();
  c.flash_loan = *loan;
  c.flash_persist_at_breakpoint = a.save_at_breakpoint;
  {
    const auto env_replicas = Lookup(env, "FTRUN_FLASH_REPLICAS");
    const bool given = !a.flash_replicas.empty();
    const std::string text = given ? a.flash_replicas : env_replicas.value_or("");
    if (!text.empty()) {
      char* end = nullptr;
      const long n = std::strtol(text.c_str(), &end, 10);
      if (end == text.c_str() || *end != '\0' || n < 1 || n > 16) {
        return Error{std::string(given ? "--flash-replicas" : "FTRUN_FLASH_REPLICAS") +
                     ": must be 1 to 16, got '" + text + "'"};
      }
      c.flash_replicas = static_cast<int>(n);
    }
  }

  c.topology_file = a.topology_file;
  if (!c.topology_file.empty()) {
    auto map = rendezvous::ReadTopologyFile(c.topology_file);
    if (!map) return Error{"--topology-file: " + map.error().message};
    c.topology = std::move(*map);
  }
  if (auto e = Lookup(env, "FTRUN_SWITCH_PATH"); e && !e->empty()) {
    if (auto ok = rendezvous::CheckSwitchPath(*e); !ok) {
      return Error{"FTRUN_SWITCH_PATH: " + ok.error().message};
    }
    c.switch_path = *e;
  }

  if (PythonInt(a.nproc_per_node)) {
    if (auto s = CheckVirtualLocalRankDevices(c, env); !s) return s.error();
  }
  if (auto s = ParseRendezvous(a, env, c); !s) return s.error();
  if (auto s = ParseEntryPoint(a, env, c); !s) return s.error();
  if (auto s = ParseLogs(a, env, c); !s) return s.error();
  if (auto s = BuildPreflightConfig(a, env, c.python, c.preflight); !s) return s.error();
  const bool python_workers = c.entry == EntryKind::kPython || c.entry == EntryKind::kModule;
  if (auto s = BuildWarmRestartConfig(a.warm_restart, a.preload, env, python_workers,
                                      c.warm_restart, c.warnings);
      !s) {
    return s.error();
  }
  return c;
}

Result<std::optional<std::chrono::duration<double>>> TtpSaveTimeout(const EnvMap& env) {
  for (const char* name : {"TTP_OT", "TTP_NORMAL_ACTION_TIME_LIMIT"}) {
    auto v = Lookup(env, name);
    if (!v) continue;
    auto n = ToInt(*v);
    if (!n || *n <= 0) {
      return Error{std::string(name) + ": '" + *v + "' is not a number of seconds"};
    }
    return std::optional<std::chrono::duration<double>>(std::chrono::seconds(*n));
  }
  return std::optional<std::chrono::duration<double>>();
}

Result<bool> EnvSwitch(const EnvMap& env, const std::string& name, bool fallback) {
  const auto value = Lookup(env, name);
  if (!value) return fallback;
  if (*value != "0" && *value != "1") {
    return Error{name + " must be 0 or 1, not '" + rendezvous::Printable(*value, 40) + "'"};
  }
  return *value == "1";
}

uint64_t FlashMemoryBudget(const LaunchConfig& config) {
  if (config.flash_memory_budget > 0) return config.flash_memory_budget;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{1} << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 2;
}

}  // namespace ftrun::launcher
