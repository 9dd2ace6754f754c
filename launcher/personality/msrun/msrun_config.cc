#include "launcher/personality/msrun/msrun_config.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <regex>

#include "common/endpoint.h"

namespace ftrun::launcher {
namespace {

namespace pb = google::protobuf;

// --join takes a Python literal that must equal True or False (so 1 and 0 too).
Result<bool> ParseJoin(const std::string& text) {
  if (text == "True" || text == "1") return true;
  if (text == "False" || text == "0") return false;
  return Error{"--join: invalid choice: '" + text + "' (choose from True, False)"};
}

// --bind_core: true/false in any case, or {"device0": ["0-10", ...], ..., "scheduler": [...]}.
Result<CpuBinding> ParseBindCore(const std::string& text, int local_workers,
                                 const std::vector<int>& cpus) {
  CpuBinding b;
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower == "false") return b;
  if (lower == "true") {
    b.mode = CpuBinding::Mode::kAuto;
    const size_t per = local_workers > 0 ? cpus.size() / local_workers : 0;
    for (int i = 0; per > 0 && i < local_workers; ++i) {
      b.auto_cpus.emplace_back(cpus.begin() + i * per, cpus.begin() + (i + 1) * per);
    }
    return b;
  }
  pb::Struct obj;
  if (!pb::util::JsonStringToMessage(text, &obj).ok()) {
    return Error{"--bind_core: '" + text + "' is not True, False or a JSON object"};
  }
  static const std::regex kDevice("^device(\\d+)$");
  static const std::regex kRange("^\\d+-\\d+$");
  std::vector<std::pair<size_t, std::pair<int, std::string>>> ordered;  // position in text
  for (const auto& [key, value] : obj.fields()) {
    std::smatch m;
    const bool is_device = std::regex_match(key, m, kDevice);
    if (!is_device && key != "scheduler") {
      return Error{"--bind_core: key '" + key + "' must be in format 'deviceX' (X >= 0)"};
    }
    if (!value.has_list_value()) {
      return Error{"--bind_core: the value of '" + key + "' must be a list of CPU ranges"};
    }
    std::string ranges;
    for (const auto& r : value.list_value().values()) {
      if (!r.has_string_value() || !std::regex_match(r.string_value(), kRange)) {
        return Error{"--bind_core: CPU range in '" + key +
                     "' must be a string such as \"0-10\" (cpuidX-cpuidY)"};
      }
      ranges += (ranges.empty() ? "" : ",") + r.string_value();
    }
    if (!is_device) {
      b.scheduler = ranges;
      continue;
    }
    // msrun uses the object's order: keep the order the keys appear in the text.
    ordered.push_back({text.find("\"" + key + "\""), {std::stoi(m[1].str()), ranges}});
  }
  std::sort(ordered.begin(), ordered.end());
  for (auto& [pos, device] : ordered) b.devices.push_back(device);
  b.mode = CpuBinding::Mode::kManual;
  return b;
}

// ftrun's rendezvous settings for msrun: the cluster forms within --cluster_time_out (the
// dynamic join window, and the static backend's wait for the master node) unless --rdzv_conf
// says otherwise. ftrun's windows are positive: 0 becomes 1 s (MS_TOPO_TIMEOUT stays 0).
std::string RendezvousConf(const MsrunArgs& a) {
  std::string conf = a.rdzv_conf;
  const int seconds = a.cluster_time_out < 0    ? 365 * 24 * 3600
                      : a.cluster_time_out == 0 ? 1
                                                : a.cluster_time_out;
  auto given = rendezvous::SplitRendezvousConf(conf);  // a malformed one is reported later
  for (const char* key : {"join_timeout", "timeout"}) {
    if (given && given->count(key) != 0) continue;
    conf += (conf.empty() ? "" : ",") + std::string(key) + "=" + std::to_string(seconds);
  }
  return conf;
}

}  // namespace

std::string CpuRanges(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string PythonIntList(const std::vector<int>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(values[i]);
  }
  return out + "]";
}

Result<MsrunConfig> BuildMsrunConfig(const MsrunArgs& a, const EnvMap& env,
                                     const std::vector<int>& cpus) {
  MsrunConfig m;
  if (a.worker_num <= 0) {
    return Error{"--worker_num: must be greater than 0, got " + std::to_string(a.worker_num)};
  }
  if (a.local_worker_num <= 0) {
    return Error{"--local_worker_num: must be greater than 0, got " +
                 std::to_string(a.local_worker_num)};
  }
  if (a.local_worker_num > a.worker_num) {
    return Error{"--local_worker_num: " + std::to_string(a.local_worker_num) +
                 " exceeds --worker_num " + std::to_string(a.worker_num)};
  }
  if (a.master_port < 1 || a.master_port > 65535) {
    return Error{"--master_port: " + std::to_string(a.master_port) +
                 " is not a port number (1-65535)"};
  }
  if (a.master_addr.empty()) return Error{"--master_addr: must not be empty"};
  m.worker_num = a.worker_num;
  m.local_worker_num = a.local_worker_num;
  m.node_rank = a.node_rank;
  m.master_addr = a.master_addr;
  m.master_port = a.master_port;
  m.log_dir = a.log_dir;
  auto join = ParseJoin(a.join);
  if (!join) return join.error();
  m.join = *join;
  m.cluster_time_out = a.cluster_time_out;
  m.rank_table_file = a.rank_table_file;
  m.worker_log_name = a.worker_log_name;
  m.rank_size = std::to_string(a.worker_num);

  // Simulation (dry-run of MindSpore itself): one node, no scheduler.
  m.sim_level = a.sim_level;
  m.sim_rank_id = a.sim_rank_id;
  m.simulation = a.sim_level != -1 || Lookup(env, "MS_SIMULATION_LEVEL").has_value();
  if (m.simulation) {
    if (m.sim_rank_id == -1)
      m.sim_rank_id = ToInt(Lookup(env, "RANK_ID").value_or("")).value_or(-1);
    if (a.sim_level == -1) {
      if (auto rs = Lookup(env, "RANK_SIZE"); rs && !rs->empty()) m.rank_size = *rs;
    }
    if (m.sim_rank_id != -1) m.local_worker_num = 1;
    if (m.local_worker_num > 128) {
      m.local_worker_num = 1;
      m.sim_rank_id = 0;
      m.warnings.push_back(
          "In dryrun case, local worker num is set to larger than 128. To avoid a system "
          "clash, local worker num is set to 1.");
    }
  }

  const bool single_node = m.simulation || m.local_worker_num == m.worker_num;
  if (!single_node && m.worker_num % m.local_worker_num != 0) {
    return Error{"--local_worker_num: " + std::to_string(m.local_worker_num) +
                 " does not divide --worker_num " + std::to_string(m.worker_num) +
                 " (ftrun runs the same number of workers on every node)"};
  }
  const int nodes = single_node ? 1 : m.worker_num / m.local_worker_num;
  if (single_node && m.node_rank != 0 && m.node_rank != -1 && !m.simulation) {
    m.warnings.push_back("All workers will be spawned on this node, so 'node_rank': [" +
                         std::to_string(m.node_rank) + "] will be ignored.");
  }
  if (!single_node && m.node_rank >= nodes) {
    return Error{"--node_rank: " + std::to_string(m.node_rank) + " is not below the " +
                 std::to_string(nodes) + " nodes of --worker_num/--local_worker_num"};
  }

  if (!a.tail_worker_log.empty() && a.tail_worker_log != "-1") {
    std::set<int> ranks;
    for (const auto& item : SplitCommaList(a.tail_worker_log)) {
      auto n = ToInt(item);
      if (!n) return Error{"--tail_worker_log: '" + item + "' is not a rank (expected e.g. 0,1)"};
      ranks.insert(*n);
    }
    m.tail_ranks = ranks;
  }
  auto bind = ParseBindCore(a.bind_core, m.local_worker_num, cpus);
  if (!bind) return bind.error();
  m.bind_core = *bind;
  if (m.bind_core.mode == CpuBinding::Mode::kAuto && m.bind_core.auto_cpus.empty()) {
    m.warnings.push_back("--bind_core True: " + std::to_string(cpus.size()) +
                         " CPU(s) cannot be split among " + std::to_string(m.local_worker_num) +
                         " workers; starting them without taskset");
  }

  static const std::set<std::string> kInterpreters = {"python", "python3", "pytest"};
  if (kInterpreters.count(a.task_script) == 0) m.command.push_back("python");
  m.command.push_back(a.task_script);
  m.command.insert(m.command.end(), a.task_script_args.begin(), a.task_script_args.end());

  // The agent's configuration, through the torchrun path so that it is validated alike.
  TorchrunArgs t;
  static_cast<SupervisionOptions&>(t) = a;  // ftrun's options, as given
  t.nnodes = std::to_string(nodes);
  t.nproc_per_node = std::to_string(m.local_worker_num);
  t.rdzv_id = "msrun";
  t.rdzv_conf = RendezvousConf(a);
  const int rdzv_port = a.rdzv_port.value_or(a.master_port + 1);
  if (rdzv_port < 1 || rdzv_port > 65535) {
    return Error{"--rdzv_port: " + std::to_string(rdzv_port) + " is not a port number"};
  }
  if (nodes > 1 && m.node_rank < 0) {
    t.rdzv_backend = "c10d";
    t.rdzv_endpoint = Endpoint{a.master_addr, rdzv_port}.ToString();
  } else {
    t.rdzv_backend = "static";
    t.node_rank = nodes > 1 ? m.node_rank : 0;
    t.master_addr = a.master_addr;
    t.master_port = rdzv_port;
  }
  t.no_python = true;
  t.script = m.command.front();
  t.script_args.assign(m.command.begin() + 1, m.command.end());
  auto launch = BuildLaunchConfig(t, env);
  if (!launch) return launch.error();
  m.launch = std::move(*launch);
  m.launch.nproc_per_node = m.local_worker_num;
  m.launch.host_by_address = true;
  m.launch.log_dir = m.log_dir;

  // MindIO TTP saves on its own after a failure (UCE and ARF fall back to it): wait for it.
  const std::string tft = Lookup(env, "MS_ENABLE_TFT").value_or("");
  for (const char* feature : {"TTP:1", "UCE:1", "ARF:1"}) {
    if (tft.find(feature) != std::string::npos) m.launch.survivor_grace = m.launch.save_timeout;
  }
  for (auto& w : m.launch.warnings) m.warnings.push_back(w);
  m.launch.warnings.clear();
  return m;
}

}  // namespace ftrun::launcher
