// The msrun personality end to end: the real ftrun binary runs a stand-in MindSpore script
// (tests/support/ms_standin/train.py) as msrun would, with its scheduler and workers forming
// a cluster over TCP: environment, logs, restarts, the TTP grace, --join False, two nodes on
// loopback, SIGINT, the msrun symlink and usage errors.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "launcher/host.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace pb = google::protobuf;
using namespace std::chrono_literals;

std::string Standin() { return SourceDir() + "/tests/support/ms_standin/train.py"; }

// True if nothing listens on (or holds) the TCP port.
bool PortFree(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// A free port P with P+1 free too: msrun's scheduler takes P, ftrun's rendezvous P+1.
int FreePortPair() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int p = launcher::PickFreePort().value();
    if (p < 65535 && PortFree(p + 1)) return p;
  }
  ADD_FAILURE() << "no two consecutive free ports";
  return 0;
}

// One process's --record file.
struct Record {
  std::string role;  // "scheduler" or "worker"
  pid_t pid = 0;
  std::map<std::string, std::string> env;
};

std::vector<Record> ReadRecords(const std::string& dir) {
  std::vector<Record> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".json") continue;
    pb::Struct s;
    const std::string text = ReadFile(entry.path().string());
    EXPECT_TRUE(pb::util::JsonStringToMessage(text, &s).ok()) << entry.path() << ": " << text;
    Record r;
    r.role = s.fields().at("role").string_value();
    r.pid = static_cast<pid_t>(s.fields().at("pid").number_value());
    for (const auto& [k, v] : s.fields().at("env").struct_value().fields()) {
      r.env[k] = v.string_value();
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Record> OfRole(const std::vector<Record>& records, const std::string& role) {
  std::vector<Record> out;
  for (const auto& r : records) {
    if (r.role == role) out.push_back(r);
  }
  return out;
}

// The variables msrun sets (and a user's shell rarely has): they must be exactly these.
std::map<std::string, std::string> MsrunVariables(const std::map<std::string, std::string>& env) {
  static const std::regex kMsrun("^(MS_.*|RANK_.*|DEVICE_ID|MSRUN_CPU_LIST)$");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : env) {
    if (std::regex_match(k, kMsrun)) out[k] = v;
  }
  return out;
}

std::string LastLine(const std::string& text) {
  auto lines = Lines(text);
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines.empty() ? "" : lines.back();
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

// Variables of the test's own environment that would blur what ftrun sets.
const std::vector<std::string> kUnset = {
    "MS_ENABLE_TFT",       "TTP_OT",        "TTP_NORMAL_ACTION_TIME_LIMIT",
    "MS_SIMULATION_LEVEL", "RANK_ID",       "RANK_SIZE",
    "DEVICE_ID",           "MS_NODE_ID",    "MS_ROLE",
    "RANK_TABLE_FILE",     "MSRUN_CPU_LIST"};

class Msrun : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = std::to_string(FreePortPair());
    std::filesystem::create_directories(rec_);
  }

  // msrun <options> --master_port P --log_dir <logs> train.py --record <rec> <script args>
  std::vector<std::string> Cmd(std::vector<std::string> options,
                               const std::vector<std::string>& script_args = {},
                               const std::string& rec = "", const std::string& logs = "") {
    std::vector<std::string> argv = {"msrun", "--master_port", port_, "--log_dir",
                                     logs.empty() ? logs_ : logs};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back(Standin());
    argv.push_back("--record");
    argv.push_back(rec.empty() ? rec_ : rec);
    argv.insert(argv.end(), script_args.begin(), script_args.end());
    return argv;
  }
  RunResult Run(const std::vector<std::string>& argv,
                const std::map<std::string, std::string>& env = {},
                std::chrono::milliseconds timeout = 30s) {
    ChildRun run(FtrunBinary(), argv, env, kUnset);
    return run.Wait(timeout);
  }
  std::vector<Record> Records() const { return ReadRecords(rec_); }

  TempDir dir_;
  std::string port_;
  const std::string rec_ = dir_ / "rec";
  const std::string logs_ = dir_ / "logs";
};

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

TEST_F(Msrun, CrashRestartsTheJobWithItsScheduler) {
  auto r = Run(
      Cmd({"--worker_num", "2", "--local_worker_num", "2", "--join", "True", "--max_restarts", "1"},
          {"--steps", "3", "--crash-rank", "1", "--crash-at", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto records = Records();
  EXPECT_EQ(OfRole(records, "worker").size(), 4u) << "two attempts of two workers";
  EXPECT_EQ(OfRole(records, "scheduler").size(), 2u) << "the scheduler restarts too";
  // Both attempts in one log each, the second after ftrun's marker.
  const std::string w1 = ReadFile(logs_ + "/worker_1.log");
  const size_t crash = w1.find("rank 1: crashing at step 1");
  const size_t marker = w1.find("[ftrun] restart_count=1");
  const size_t done = w1.find("rank 1: finalized");
  ASSERT_NE(crash, std::string::npos) << w1;
  ASSERT_NE(marker, std::string::npos) << w1;
  ASSERT_NE(done, std::string::npos) << w1;
  EXPECT_LT(crash, marker);
  EXPECT_LT(marker, done);
  const std::string sched = ReadFile(logs_ + "/scheduler.log");
  const size_t first = sched.find("cluster is ready");
  const size_t sched_marker = sched.find("[ftrun] restart_count=1");
  ASSERT_NE(sched_marker, std::string::npos) << sched;
  EXPECT_LT(first, sched_marker);
  EXPECT_NE(sched.find("cluster is ready", sched_marker), std::string::npos) << sched;
  EXPECT_NE(sched.find("every worker finalized", sched_marker), std::string::npos) << sched;
}

TEST_F(Msrun, CrashWithoutRestartsFailsAsMsrun) {
  auto r = Run(Cmd({"--worker_num", "2", "--local_worker_num", "2", "--join", "True"},
                   {"--steps", "3", "--crash-rank", "1", "--crash-at", "1", "--save-time", "5"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  pid_t crashed = 0;
  for (const auto& w : OfRole(Records(), "worker")) {
    if (w.env.at("RANK_ID") == "1") crashed = w.pid;
  }
  ASSERT_GT(crashed, 0);
  EXPECT_NE(r.err.find("Worker process " + std::to_string(crashed) +
                       " exit with exception. Error code: 3."),
            std::string::npos)
      << r.err;
  EXPECT_EQ(LastLine(r.err),
            "RuntimeError: Distributed job exited with exception. Please check logs in "
            "directory: " +
                logs_ + ".")
      << r.err;
}

// Three workers; rank 1 crashes at step 1. On the scheduler's abort the survivors take
// --save-time to finish (with TTP on: to save, then they exit 1 by themselves).
const std::vector<std::string> kCrashOnce = {"--steps",    "6", "--crash-rank", "1",
                                             "--crash-at", "1", "--step-time",  "0.1"};

TEST_F(Msrun, TtpGraceLetsTheSurvivorsSaveThenRestarts) {
  auto args = kCrashOnce;
  args.insert(args.end(), {"--save-time", "0.5"});
  // TTP_OT is 30 s: the job must go on as soon as the survivors are done, well before.
  auto r = Run(
      Cmd({"--worker_num", "3", "--local_worker_num", "3", "--join", "True", "--max_restarts", "1"},
          args),
      {{"MS_ENABLE_TFT", "{TTP:1}"}, {"TTP_OT", "30"}}, 25s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("waiting up to 30s for the surviving workers"), std::string::npos) << r.err;
  auto records = Records();
  for (int rank : {0, 2}) {
    SCOPED_TRACE(rank);
    const std::string saved = rec_ + "/ttp_saved_rank_" + std::to_string(rank);
    ASSERT_TRUE(FileExists(saved));
    const pid_t saver = ReadPid(saved);
    // The first attempt's process saved, and exited by itself (not by ftrun's signal).
    EXPECT_NE(r.err.find("worker stopped local_rank=" + std::to_string(rank) +
                         " rank=" + std::to_string(rank) + " pid=" + std::to_string(saver) +
                         " attempt=0 status=exit code 1"),
              std::string::npos)
        << r.err;
  }
  EXPECT_FALSE(FileExists(rec_ + "/ttp_saved_rank_1")) << "the crashed rank saves nothing";
  EXPECT_EQ(OfRole(records, "worker").size(), 6u);
}

TEST_F(Msrun, WithoutTftTheSurvivorsAreStoppedAtOnce) {
  auto args = kCrashOnce;
  args.insert(args.end(), {"--save-time", "20"});  // only a stop ends the survivors early
  auto r = Run(
      Cmd({"--worker_num", "3", "--local_worker_num", "3", "--join", "True", "--max_restarts", "1"},
          args),
      {{"TTP_OT", "30"}}, 25s);
  ASSERT_FALSE(r.timed_out) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("waiting up to"), std::string::npos) << r.err;
  for (int rank : {0, 2}) {
    SCOPED_TRACE(rank);
    EXPECT_FALSE(FileExists(rec_ + "/ttp_saved_rank_" + std::to_string(rank)));
    EXPECT_TRUE(
        std::regex_search(r.err, std::regex("worker stopped local_rank=" + std::to_string(rank) +
                                            " rank=\\d+ pid=\\d+ attempt=0 status=signal "
                                            "15 \\(SIGTERM\\)")))
        << r.err;
  }
  EXPECT_EQ(OfRole(Records(), "worker").size(), 6u);
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

class MsrunTwoNodes : public Msrun {
 protected:
  // Runs two agents (node 1 first, so that it waits for the master), each recording into
  // its own directory; returns {node 0's records, node 1's records}.
  std::pair<std::vector<Record>, std::vector<Record>> RunBoth(const std::string& rank0,
                                                              const std::string& rank1) {
    std::vector<std::string> opts = {"--worker_num", "4",    "--local_worker_num", "2",
                                     "--join",       "True", "--node_rank"};
    const std::string rec0 = dir_ / "rec0", rec1 = dir_ / "rec1";
    std::filesystem::create_directories(rec0);
    std::filesystem::create_directories(rec1);
    auto o1 = opts, o0 = opts;
    o1.push_back(rank1);
    o0.push_back(rank0);
    ChildRun n1(FtrunBinary(), Cmd(o1, {"--steps", "2"}, rec1, dir_ / "logs1"), {}, kUnset);
    ChildRun n0(FtrunBinary(), Cmd(o0, {"--steps", "2"}, rec0, dir_ / "logs0"), {}, kUnset);
    auto r0 = n0.Wait(30s), r1 = n1.Wait(30s);
    EXPECT_EQ(r0.exit_code, 0) << r0.err;
    EXPECT_EQ(r1.exit_code, 0) << r1.err;
    return {ReadRecords(rec0), ReadRecords(rec1)};
  }

  // The global ranks of the workers in `records`, checking MS_NODE_ID == RANK_ID.
  std::set<int> Ranks(const std::vector<Record>& records, const std::string& node_rank) {
    std::set<int> out;
    for (const auto& w : OfRole(records, "worker")) {
      EXPECT_EQ(w.env.at("MS_NODE_ID"), w.env.at("RANK_ID"));
      EXPECT_EQ(w.env.at("MS_NODE_RANK"), node_rank);
      EXPECT_EQ(w.env.at("MS_WORKER_NUM"), "4");
      EXPECT_EQ(w.env.at("RANK_SIZE"), "4");
      EXPECT_EQ(w.env.at("MS_SCHED_PORT"), port_);
      EXPECT_TRUE(out.insert(std::stoi(w.env.at("RANK_ID"))).second) << "a rank ran twice";
    }
    return out;
  }
};

TEST_F(MsrunTwoNodes, FixedNodeRanks) {
  auto [node0, node1] = RunBoth("0", "1");
  // On loopback both agents are on master_addr: the one that hosts the rendezvous (the first
  // to bind) runs the scheduler, whatever its node rank.
  EXPECT_EQ(OfRole(node0, "scheduler").size() + OfRole(node1, "scheduler").size(), 1u);
  EXPECT_EQ(Ranks(node0, "0"), (std::set<int>{0, 1}));
  EXPECT_EQ(Ranks(node1, "1"), (std::set<int>{2, 3}));
}

TEST_F(MsrunTwoNodes, AssignedNodeRanks) {
  auto [a, b] = RunBoth("-1", "-1");
  EXPECT_EQ(OfRole(a, "scheduler").size() + OfRole(b, "scheduler").size(), 1u);
  std::set<int> ra = Ranks(a, "-1"), rb = Ranks(b, "-1");
  ASSERT_EQ(ra.size(), 2u);
  ASSERT_EQ(rb.size(), 2u);
  std::set<int> all = ra;
  all.insert(rb.begin(), rb.end());
  EXPECT_EQ(all, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(*ra.rbegin() - *ra.begin(), 1) << "a node's ranks are contiguous";
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
