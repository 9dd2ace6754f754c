#include "launcher/personality/dlrover/dlrover_config.h"

namespace ftrun::launcher {

Result<DlroverArgs> DlroverToTorchrun(DlroverArgs a, const EnvMap& env, const HostFacts& host,
                                      std::vector<std::string>& warnings) {
  if (a.precheck >= 1) a.network_check = true;
  if (a.precheck >= 2) a.comm_perf_test = true;
  // DLRover runs the comm perf test inside the network check only.
  if (a.comm_perf_test && !a.network_check) {
    warnings.push_back(
        "--comm-perf-test: runs with the network check only (--network-check or --precheck 2), "
        "as DLRover's; not run");
    a.comm_perf_test = false;
  }
  // DLRover's log setup: DLROVER_LOG_AGENT_DIR without --log-dir, and a log directory with
  // neither --redirects nor --tee given sends every stream to both its files and the console.
  if (auto dir = Lookup(env, "DLROVER_LOG_AGENT_DIR"); a.log_dir.empty() && dir) {
    a.log_dir = *dir;
  }
  if (!a.log_dir.empty() && a.redirects == "0" && a.tee == "0") {
    a.redirects = "3";
    a.tee = "3";
  }

  if (a.auto_config) {
    // As DLRover's: NODE_NUM when it is set, else --nnodes as given.
    if (auto num = Lookup(env, "NODE_NUM")) {
      auto n = PythonInt(*num);
      if (!n || *n <= 0) {
        return Error{"--auto-config: NODE_NUM must be the number of nodes, got '" + *num + "'"};
      }
      a.nnodes = std::to_string(*n);
    }
    if (host.gpu_count > 0) {
      a.nproc_per_node = std::to_string(host.gpu_count);
    } else {
      warnings.push_back("--auto-config: no GPU found (" + host.gpu_source +
                         "); keeping --nproc-per-node " + a.nproc_per_node);
    }
  }

  // DLRover's run() sets both after parsing, whatever the command line said.
  if (a.role != "dlrover-trainer") {
    warnings.push_back("--role " + a.role +
                       ": dlrover-run's workers are always dlrover-trainer, as DLRover's");
    a.role = "dlrover-trainer";
  }
  if (auto job = Lookup(env, "ELASTIC_JOB_NAME");
      job && !job->empty() && a.rdzv_id != "none" && a.rdzv_id != *job) {
    warnings.push_back("--rdzv-id " + a.rdzv_id + ": the run id is ELASTIC_JOB_NAME (" + *job +
                       "), as DLRover's");
  }

  auto nodes = ParseNnodes(a.nnodes);
  if (!nodes) return nodes.error();
  if (a.auto_config && nodes->first >= 4) a.network_check = true;
  if (nodes->second > 1 && !a.standalone && a.rdzv_endpoint.empty()) {
    if (auto master = Lookup(env, "DLROVER_MASTER_ADDR"); master && !master->empty()) {
      a.rdzv_backend = "c10d";
      a.rdzv_endpoint = *master;
    } else {
      warnings.push_back(
          "dlrover-run: DLROVER_MASTER_ADDR is not set; using torchrun's static rendezvous at "
          "--master-addr " +
          a.master_addr + ":" + std::to_string(a.master_port) + " with --node-rank " +
          std::to_string(a.node_rank));
    }
  }
  if (a.save_at_breakpoint) {
    // DLRover's breakpoint save writes the memory checkpoint to storage when workers fail:
    // ftrun's agent does that with the snapshots of ftrun.flash_checkpoint, which the
    // fault-time save fills first where a rank survives to save.
    a.fault_save = "on";
  }
  if (a.auto_tunning) {
    warnings.push_back(
        "--auto-tunning needs DLRover's job master (its strategy generator); ftrun ignores it");
  }
  if (Lookup(env, "DLROVER_TRAINING_ELASTIC_MODE") == "ucp") {
    warnings.push_back("--ucp-device-type " + a.ucp_device_type +
                       ": ftrun does not convert DeepSpeed universal checkpoints "
                       "(DLROVER_TRAINING_ELASTIC_MODE=ucp is ignored)");
  }
  if (a.accelerator != "nvidia.com/gpu" && a.nproc_per_node == "gpu") {
    warnings.push_back("--accelerator " + a.accelerator +
                       ": --nproc-per-node gpu counts NVIDIA GPUs only; give a number");
  }
  return a;
}

Status ApplyDlroverSettings(const DlroverArgs& a, const EnvMap& env, LaunchConfig& c) {
  if (a.node_unit < 1) {
    return Error{"--node-unit: must be at least 1, got " + std::to_string(a.node_unit)};
  }
  if (c.max_nodes % a.node_unit != 0) {
    return Error{"--node-unit " + std::to_string(a.node_unit) + ": --nnodes MAX " +
                 std::to_string(c.max_nodes) + " is not a multiple of it"};
  }
  // DLRover's run id is the job's name whenever it is set, over --rdzv-id and --standalone.
  if (auto job = Lookup(env, "ELASTIC_JOB_NAME"); job && !job->empty()) c.run_id = *job;
  c.node_unit = a.node_unit;
  // DLRover's agent reports NODE_RANK (WORKER_RANK before DLRover 0.3) and its master orders
  // the nodes by it.
  for (const char* name : {"NODE_RANK", "WORKER_RANK"}) {
    auto value = Lookup(env, name);
    if (!value || value->empty()) continue;  // empty: unset, as ELASTIC_JOB_NAME
    auto rank = PythonInt(*value);
    if (!rank || *rank < 0) {
      return Error{std::string(name) + ": must be this node's rank (a whole number from 0), got '" +
                   *value + "'"};
    }
    c.declared_node_rank = *rank;
    break;
  }
  // A round smaller than one unit can never form.
  c.min_nodes = std::max(c.min_nodes, c.node_unit);
  c.min_nodes += (c.node_unit - c.min_nodes % c.node_unit) % c.node_unit;
  c.numa_affinity = a.numa_affinity;
  c.membind_policy = a.membind_policy;
  if (a.accelerator == "ascend-npu" && !Lookup(env, "HCCL_IF_BASE_PORT")) {
    if (a.training_port < 1 || a.training_port > 65535) {
      return Error{"--training-port: " + std::to_string(a.training_port) + " is not a port number"};
    }
    c.extra_env["HCCL_IF_BASE_PORT"] = std::to_string(a.training_port);
  }
  return {};
}

}  // namespace ftrun::launcher
