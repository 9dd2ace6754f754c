// The DlroverRun fixture and helpers shared by dlrover_run_test.cc and dlrover_run_options_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/environment.h"
#include "launcher/config/host.h"
#include "launcher/config/launch_config.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {

inline int Occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

inline bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// This host has an NVIDIA GPU (then --numa-affinity and --auto-config behave differently).
inline bool HostHasGpu() { return launcher::DetectHostFacts(CurrentEnvironment()).gpu_count > 0; }

class DlroverRun : public ::testing::Test {
 protected:
  void SetUp() override { port_ = std::to_string(TestPort()); }

  // The variables dlrover-run reads, and every PET_*: the test's own environment must not
  // leak into the runs.
  static std::vector<std::string> Unset() {
    std::vector<std::string> out = {"DLROVER_MASTER_ADDR",
                                    "ELASTIC_JOB_NAME",
                                    "NODE_NUM",
                                    "NODE_RANK",
                                    "WORKER_RANK",
                                    "HCCL_IF_BASE_PORT",
                                    "DLROVER_TRAINING_ELASTIC_MODE",
                                    "LOGLEVEL",
                                    "CUDA_VISIBLE_DEVICES",
                                    "FTRUN_EVENT_LOG"};
    for (const auto& [k, v] : CurrentEnvironment()) {
      if (k.rfind("PET_", 0) == 0) out.push_back(k);
    }
    return out;
  }
  // ftrun dlrover-run --log-dir <tmp> <options> --no-python fake_worker <actions>
  std::vector<std::string> Cmd(const std::vector<std::string>& options,
                               const std::vector<std::string>& actions = {"exit", "0"}) {
    std::vector<std::string> argv = {"dlrover-run", "--log-dir", dir_ / "logs"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--no-python");
    argv.push_back(FakeWorkerBinary());
    argv.insert(argv.end(), actions.begin(), actions.end());
    return argv;
  }
  std::unique_ptr<ChildRun> Start(const std::vector<std::string>& argv,
                                  const std::map<std::string, std::string>& env = {},
                                  const std::string& program = FtrunBinary()) {
    return std::make_unique<ChildRun>(program, argv, env, Unset());
  }
  RunResult Run(const std::vector<std::string>& argv,
                const std::map<std::string, std::string>& env = {},
                std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    return Start(argv, env)->Wait(timeout);
  }
  // Two agents of one job: the second starts once the first has joined (so the first is
  // group 0). Empty, after a test failure naming the first agent's log, if it never joins.
  std::vector<RunResult> RunTwoAgents(const std::vector<std::string>& argv,
                                      const std::map<std::string, std::string>& env) {
    auto a = Start(argv, env);
    if (!WaitFor([&] { return a->Err().find("joined the job") != std::string::npos; },
                 std::chrono::seconds(20))) {
      ADD_FAILURE() << "the first agent did not join: " << a->Err();
      return {};
    }
    auto b = Start(argv, env);
    RunResult ra = a->Wait(std::chrono::seconds(30));
    RunResult rb = b->Wait(std::chrono::seconds(30));
    return {ra, rb};
  }
  // A dry run: the summary of what would run, on stdout.
  RunResult DryRun(std::vector<std::string> options,
                   const std::map<std::string, std::string>& env = {}) {
    options.insert(options.begin(), "--dry-run");
    return Run(Cmd(options), env);
  }
  // The environment worker `rank` wrote with fake_worker's `env` action.
  std::map<std::string, std::string> WorkerEnv(const std::string& tag, int rank = 0) {
    return ParseEnvFile(dir_ / (tag + "." + std::to_string(rank)));
  }
  // The option as --a-b VALUE, as --a_b VALUE, and as PET_A_B=VALUE: {options, env} each.
  struct Spelling {
    std::string name;
    std::vector<std::string> options;
    std::map<std::string, std::string> env;
  };
  static std::vector<Spelling> Spellings(const std::string& dashed, const std::string& value = "") {
    std::string underscored = dashed, pet = "PET_";
    for (char& c : underscored) c = c == '-' ? '_' : c;
    for (char c : dashed) pet += c == '-' ? '_' : static_cast<char>(std::toupper(c));
    auto opt = [&](const std::string& flag) {
      std::vector<std::string> o = {flag};
      if (!value.empty()) o.push_back(value);
      return o;
    };
    std::vector<Spelling> out = {{"--" + dashed, opt("--" + dashed), {}}};
    if (underscored != dashed) out.push_back({"--" + underscored, opt("--" + underscored), {}});
    out.push_back({pet, {}, {{pet, value.empty() ? "1" : value}}});
    return out;
  }
  std::vector<std::string> Records() { return Lines(ReadFile(dir_ / "records")); }
  int Count(const std::string& needle) {
    int n = 0;
    for (const auto& l : Records()) n += Has(l, needle);
    return n;
  }

  static constexpr const char* kFastConf =
      "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=4";
  TempDir dir_;
  std::string port_;
};

}  // namespace ftrun::testing
