// msrun on one node: environment, logs, --join False, SIGINT, the msrun symlink, usage errors.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/integration/msrun_fixture.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

// The variables msrun sets (and a user's shell rarely has): they must be exactly these.
std::map<std::string, std::string> MsrunVariables(const std::map<std::string, std::string>& env) {
  static const std::regex kMsrun("^(MS_.*|RANK_.*|DEVICE_ID|MSRUN_CPU_LIST)$");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : env) {
    if (std::regex_match(k, kMsrun)) out[k] = v;
  }
  return out;
}

int Mode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
}

bool NoneAlive(const std::vector<Record>& records) {
  for (const auto& r : records) {
    if (ProcessAlive(r.pid)) return false;
  }
  return true;
}

TEST_F(Msrun, SingleNodeEnvironmentLogsAndTail) {
  const std::string logs = dir_ / "new/msrun_log";  // neither directory exists yet
  auto r = Run(Cmd({"--worker_num", "2", "--local_worker_num", "2", "--join", "True"},
                   {"--steps", "2"}, "", logs));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto records = Records();
  auto workers = OfRole(records, "worker");
  auto scheds = OfRole(records, "scheduler");
  ASSERT_EQ(workers.size(), 2u);
  ASSERT_EQ(scheds.size(), 1u);
  const std::map<std::string, std::string> common = {{"RANK_SIZE", "2"},
                                                     {"MS_WORKER_NUM", "2"},
                                                     {"MS_SCHED_HOST", "127.0.0.1"},
                                                     {"MS_SCHED_PORT", port_},
                                                     {"MS_TOPO_TIMEOUT", "600"}};
  for (const auto& w : workers) {
    const std::string rank = w.env.at("RANK_ID");
    SCOPED_TRACE("rank " + rank);
    auto expected = common;
    expected.insert({{"MS_ROLE", "MS_WORKER"},
                     {"DEVICE_ID", rank},
                     {"MS_NODE_ID", rank},
                     {"RANK_ID", rank},
                     {"MS_NODE_RANK", "-1"}});
    EXPECT_EQ(MsrunVariables(w.env), expected);
  }
  EXPECT_NE(workers[0].env.at("RANK_ID"), workers[1].env.at("RANK_ID"));
  auto expected = common;
  expected.insert({{"MS_ROLE", "MS_SCHED"}, {"RANK_ID", "0"}});
  EXPECT_EQ(MsrunVariables(scheds[0].env), expected);

  EXPECT_EQ(Mode(dir_ / "new"), 0700);
  EXPECT_EQ(Mode(logs), 0700);
  EXPECT_NE(ReadFile(logs + "/scheduler.log").find("scheduler: cluster is ready"),
            std::string::npos);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = ReadFile(logs + "/worker_" + std::to_string(rank) + ".log");
    EXPECT_NE(log.find("rank " + std::to_string(rank) + " step 1\n"), std::string::npos) << log;
    EXPECT_NE(r.out.find("rank " + std::to_string(rank) + " step 1\n"), std::string::npos)
        << "--join True shows the worker logs on stdout:\n"
        << r.out;
  }
  EXPECT_EQ(r.out.find("scheduler:"), std::string::npos) << "the scheduler's log is not shown";
}

TEST_F(Msrun, TailWorkerLogShowsOnlyTheSelectedRank) {
  auto r = Run(Cmd(
      {"--worker_num", "2", "--local_worker_num", "2", "--join", "True", "--tail_worker_log", "1"},
      {"--steps", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int rank0 = 0, rank1 = 0;
  for (const auto& line : Lines(r.out)) {
    rank0 += line.rfind("rank 0", 0) == 0;
    rank1 += line.rfind("rank 1", 0) == 0;
  }
  EXPECT_EQ(rank0, 0) << r.out;
  EXPECT_GE(rank1, 2) << r.out;
  EXPECT_NE(ReadFile(logs_ + "/worker_0.log").find("rank 0 step 1"), std::string::npos)
      << "rank 0 still has its log";
}

TEST_F(Msrun, JoinFalseReturnsAtOnceWhileTheSupervisorCarriesOn) {
  const std::string go = dir_ / "go";
  auto r = Run(Cmd({"--worker_num", "2", "--local_worker_num", "2"}, {"--wait-file", go}), {}, 20s);
  // Whatever happens below, no background job may outlive the test.
  struct Cleanup {
    std::string go;
    pid_t supervisor = 0;
    ~Cleanup() {
      std::ofstream(go) << "";
      if (supervisor > 0 && ProcessAlive(supervisor) &&
          !WaitFor([&] { return !ProcessAlive(supervisor); }, 10s)) {
        ::kill(supervisor, SIGKILL);
      }
    }
  } cleanup{go};
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("supervised by ftrun \\(pid (\\d+)\\)")))
      << r.err;
  cleanup.supervisor = static_cast<pid_t>(std::stol(m[1]));
  EXPECT_TRUE(ProcessAlive(cleanup.supervisor));
  // The job is running, and waits for the go-file created only now.
  ASSERT_TRUE(WaitFor([&] { return Records().size() == 3; }, 10s));
  auto records = Records();
  for (const auto& rec : records) EXPECT_TRUE(ProcessAlive(rec.pid)) << rec.role;
  EXPECT_FALSE(FileExists(go));
  std::ofstream(go) << "";
  const std::string log = logs_ + "/ftrun.log";
  ASSERT_TRUE(WaitFor(
      [&] { return ReadFile(log).find("job finished outcome=succeeded") != std::string::npos; },
      20s))
      << ReadFile(log);
  EXPECT_TRUE(WaitFor([&] { return NoneAlive(records); }, 5s));
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(cleanup.supervisor); }, 5s));
  EXPECT_EQ(OfRole(records, "worker").size(), 2u);
}

TEST_F(Msrun, SigintStopsTheJobAndExitsZero) {
  ChildRun run(FtrunBinary(),
               Cmd({"--worker_num", "2", "--local_worker_num", "2", "--join", "True"},
                   {"--wait-file", dir_ / "never"}),
               {}, kUnset);
  ASSERT_TRUE(WaitFor([&] { return Records().size() == 3; }, 15s)) << run.Err();
  auto records = Records();
  run.Signal(SIGINT);
  auto r = run.Wait(20s);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(WaitFor([&] { return NoneAlive(records); }, 5s));
}

TEST_F(Msrun, InvokedThroughASymlinkNamedMsrun) {
  std::filesystem::create_directories(dir_ / "bin");
  const std::string msrun = dir_ / "bin/msrun";
  std::filesystem::create_symlink(FtrunBinary(), msrun);
  ChildRun help(msrun, {"--help"});
  auto h = help.Wait(10s);
  EXPECT_EQ(h.exit_code, 0) << h.err;
  EXPECT_NE(h.out.find("usage: msrun"), std::string::npos) << h.out;
  EXPECT_NE(h.out.find("--worker_num"), std::string::npos) << h.out;

  auto argv =
      Cmd({"--worker_num", "1", "--local_worker_num", "1", "--join", "True"}, {"--steps", "1"});
  argv.erase(argv.begin());  // no "msrun" word: the name says it
  ChildRun run(msrun, argv, {}, kUnset);
  auto r = run.Wait(30s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto records = Records();
  EXPECT_EQ(OfRole(records, "worker").size(), 1u);
  EXPECT_EQ(OfRole(records, "scheduler").size(), 1u);
}

TEST_F(Msrun, UsageErrorsExitTwoWithOneLineNamingTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--foo", "1"}, "--foo"},
      {{"--join", "maybe"}, "--join"},
      {{"--local_worker_num", "3", "--worker_num", "8"}, "--local_worker_num"},
      {{"--bind_core", R"({"cpu0":["0-1"]})"}, "--bind_core"},
      {{"--master_port", "70000"}, "--master_port"},
  };
  for (const auto& [options, name] : cases) {
    SCOPED_TRACE(name);
    std::vector<std::string> argv = {"msrun"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back(Standin());
    auto r = RunFtrun(argv, {}, 10s);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    auto lines = Lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_NE(lines[0].find(name), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
  EXPECT_FALSE(FileExists(logs_)) << "nothing ran";
}

TEST_F(Msrun, LogDirThatCannotBeCreatedExitsOne) {
  std::ofstream(dir_ / "file") << "a regular file";
  const std::string bad = dir_ / "file/logs";
  auto r = Run(Cmd({"--worker_num", "1", "--local_worker_num", "1", "--join", "True"}, {}, "", bad),
               {}, 10s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto lines = Lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("--log_dir"), std::string::npos) << r.err;
  EXPECT_NE(lines[0].find(bad), std::string::npos) << r.err;
  EXPECT_TRUE(Records().empty());
}

}  // namespace
}  // namespace ftrun::testing
