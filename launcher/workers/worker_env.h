// The environment of one worker: the agent's environment plus torchrun's variables
// (reference: torchrun's LocalElasticAgent._start_workers). Pure function of its inputs.
#pragma once

#include <string>

#include "common/environment.h"
#include "launcher/config/launch_config.h"
#include "rendezvous/assignment.h"

namespace ftrun::launcher {

struct WorkerEnvInputs {
  const EnvMap& agent_env;  // ftrun's own environment (OMP_NUM_THREADS already applied)
  const LaunchConfig& config;
  const rendezvous::NodeAssignment& assignment;
  int local_rank = 0;
  std::string error_file;  // "" when logs are disabled (--log-dir /dev/null)
};

EnvMap BuildWorkerEnv(const WorkerEnvInputs& in);

// Whether the agent hosts the workers' c10d store (launcher/agent/agent_store.h): on unless
// FTRUN_AGENT_STORE is 0, false, off or no.
bool AgentStoreEnabled(const EnvMap& agent_env);

// torchrun's rule: when OMP_NUM_THREADS is unset and more than one worker runs per node, set
// it to 1 for everyone. Returns true when it did (the caller prints torchrun's banner).
bool ApplyOmpNumThreadsRule(EnvMap& agent_env, int nproc_per_node);

// The banner torchrun logs when it applies the rule above.
extern const char* const kOmpBanner;

}  // namespace ftrun::launcher
