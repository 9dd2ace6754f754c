// What workers see and where their output goes: environment, inherited fds, ${local_rank},
// the log directory layout, redirects, tee prefixes, rank filters and duplicate filters.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class WorkerIo : public ::testing::Test {
 protected:
  std::vector<std::string> Cmd(std::vector<std::string> options,
                               const std::vector<std::string>& actions) {
    std::vector<std::string> argv = {"--log-dir", logs()};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--no-python");
    argv.push_back(FakeWorkerBinary());
    argv.insert(argv.end(), actions.begin(), actions.end());
    return argv;
  }
  std::string logs() const { return dir_ / "logs"; }
  // The single run directory ftrun created under the log dir.
  std::string RunDir() {
    for (const auto& e : fs::directory_iterator(logs())) return e.path().string();
    return "";
  }
  TempDir dir_;
};

TEST_F(WorkerIo, EnvironmentOfEveryRank) {
  auto r = RunFtrun(Cmd({"--nproc-per-node", "3", "--max-restarts", "2", "--rdzv-id", "job7",
                         "--role", "trainer"},
                        {"env", dir_ / "env"}),
                    {{"SOME_USER_VAR", "kept"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string master_port;
  for (int rank = 0; rank < 3; ++rank) {
    auto env = ParseEnvFile(dir_ / ("env." + std::to_string(rank)));
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(env["ROLE_RANK"], std::to_string(rank));
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(env["ROLE_NAME"], "trainer");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "2");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job7");
    EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "True");
    EXPECT_EQ(env["NCCL_ASYNC_ERROR_HANDLING"], "1");
    EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(env["SOME_USER_VAR"], "kept");
    EXPECT_TRUE(std::regex_match(env["TORCHELASTIC_ERROR_FILE"],
                                 std::regex(logs() + "/job7_[a-z0-9_]{8}/attempt_0/" +
                                            std::to_string(rank) + "/error.json")))
        << env["TORCHELASTIC_ERROR_FILE"];
    // The agent store's port: the same for all ranks, not --master-port.
    if (rank == 0) master_port = env["MASTER_PORT"];
    EXPECT_EQ(env["MASTER_PORT"], master_port);
  }
  EXPECT_NE(master_port, "29500");
  EXPECT_GT(std::stoi(master_port), 0);
  EXPECT_NE(r.err.find("agent store listening address=127.0.0.1 port=" + master_port + " "),
            std::string::npos)
      << r.err;
}

// FTRUN_AGENT_STORE_PORT: a port in use is one error naming it (exit 1); a value that is not a
// port is a usage error (exit 2); FTRUN_AGENT_STORE=0 gives torch 1.13's c10d contract back.
TEST_F(WorkerIo, AgentStorePortHeldMalformedOrOff) {
  int held = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(held, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(held, 1), 0);
  socklen_t len = sizeof(a);
  ::getsockname(held, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  auto r = RunFtrun(Cmd({"--nproc-per-node", "1"}, {"env", dir_ / "env"}),
                    {{"FTRUN_AGENT_STORE_PORT", port}});
  ::close(held);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("agent store: cannot listen on 127.0.0.1:" + port +
                       ": Address already in use (FTRUN_AGENT_STORE_PORT)"),
            std::string::npos)
      << r.err;
  auto bad = RunFtrun(Cmd({"--nproc-per-node", "1"}, {"env", dir_ / "env"}),
                      {{"FTRUN_AGENT_STORE_PORT", "70000"}});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("FTRUN_AGENT_STORE_PORT: expected a port from 1 to 65535, got '70000'"),
            std::string::npos)
      << bad.err;
  auto off =
      RunFtrun(Cmd({"--nproc-per-node", "1"}, {"env", dir_ / "off"}), {{"FTRUN_AGENT_STORE", "0"}});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(ParseEnvFile(dir_ / "off.0")["TORCHELASTIC_USE_AGENT_STORE"], "False");
  EXPECT_EQ(off.err.find("agent store listening"), std::string::npos);
}

// The agent's store listens on the address the agent reports (--local-addr), not on every
// address: the workers reach it there, nobody reaches it on 127.0.0.1. FTRUN_AGENT_STORE_HOST
// says otherwise (* : every address); a value that is not an address is a usage error.
TEST_F(WorkerIo, AgentStoreListensOnTheReportedAddressOnly) {
  auto args =
      Cmd({"--nnodes", "1", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
           "127.0.0.1:" + std::to_string(TestPort()), "--local-addr", "127.0.0.3"},
          {"env", dir_ / "env", "connect-master", "wait-file", dir_ / "go"});
  ChildRun run(FtrunBinary(), args);
  ASSERT_TRUE(WaitFor([&] { return FileExists(dir_ / "env.0"); }, 30s)) << run.Err();
  std::map<std::string, std::string> env;
  ASSERT_TRUE(WaitFor(
      [&] {
        env = ParseEnvFile(dir_ / "env.0");
        return !env["MASTER_PORT"].empty();
      },
      10s));
  EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.3");
  const int port = std::stoi(env["MASTER_PORT"]);
  auto reaches = [&](const char* addr) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, addr, &a.sin_addr);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    return ok;
  };
  EXPECT_TRUE(reaches("127.0.0.3"));
  EXPECT_FALSE(reaches("127.0.0.1")) << "the store listens on every address";
  std::ofstream(dir_ / "go") << "";
  auto r = run.Wait(60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("agent store listening address=127.0.0.3 port=" + env["MASTER_PORT"]),
            std::string::npos)
      << r.err;

  auto every = RunFtrun(Cmd({"--nproc-per-node", "1"}, {"env", dir_ / "every"}),
                        {{"FTRUN_AGENT_STORE_HOST", "*"}});
  ASSERT_EQ(every.exit_code, 0) << every.err;
  EXPECT_NE(every.err.find("agent store listening address=* "), std::string::npos) << every.err;
  auto bad = RunFtrun(Cmd({"--nproc-per-node", "1"}, {"env", dir_ / "bad"}),
                      {{"FTRUN_AGENT_STORE_HOST", "not-an-address"}});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("FTRUN_AGENT_STORE_HOST: expected an IP address of this host or *, got "
                         "'not-an-address'"),
            std::string::npos)
      << bad.err;
}

TEST_F(WorkerIo, OmpBannerOnlyWhenUnsetAndSeveralWorkers) {
  auto r = RunFtrun(Cmd({"--nproc-per-node", "2"}, {"env", dir_ / "env"}));
  EXPECT_NE(r.err.find("Setting OMP_NUM_THREADS environment variable"), std::string::npos);
  auto kept =
      RunFtrun(Cmd({"--nproc-per-node", "2"}, {"env", dir_ / "kept"}), {{"OMP_NUM_THREADS", "4"}});
  EXPECT_EQ(kept.err.find("Setting OMP_NUM_THREADS"), std::string::npos);
  EXPECT_EQ(ParseEnvFile(dir_ / "kept.0")["OMP_NUM_THREADS"], "4");
  auto one = RunFtrun(Cmd({}, {"env", dir_ / "one"}));
  EXPECT_EQ(one.err.find("Setting OMP_NUM_THREADS"), std::string::npos);
}

TEST_F(WorkerIo, OnlyStandardFdsAreInherited) {
  auto r = RunFtrun(Cmd({"--nproc-per-node", "2", "--tee", "3"}, {"fds", dir_ / "fds"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(dir_ / "fds.0"), "");
  EXPECT_EQ(ReadFile(dir_ / "fds.1"), "");
}

TEST_F(WorkerIo, LocalRankSubstitutionInArguments) {
  auto r = RunFtrun(Cmd({"--nproc-per-node", "2"}, {"print", "rank-${local_rank}-$$x"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank-0-$x\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank-1-$x\n"), std::string::npos) << r.out;
}

TEST_F(WorkerIo, LogDirectoryLayout) {
  auto r = RunFtrun(
      Cmd({"--nproc-per-node", "2", "--max-restarts", "1"}, {"if-attempt", "0", "exit", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run = RunDir();
  EXPECT_TRUE(std::regex_match(fs::path(run).filename().string(), std::regex("none_[a-z0-9_]{8}")))
      << run;
  for (const char* d : {"attempt_0/0", "attempt_0/1", "attempt_1/0", "attempt_1/1"}) {
    EXPECT_TRUE(fs::is_directory(run + "/" + d)) << d;
  }
  EXPECT_FALSE(FileExists(run + "/attempt_0/0/stdout.log"));  // nothing redirected
}

TEST_F(WorkerIo, DefaultLogDirIsATorchelasticTempDir) {
  std::vector<std::string> argv = {"--no-python", FakeWorkerBinary(), "exit", "0"};
  auto r = RunFtrun(argv, {{"TMPDIR", dir_.path()}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int found = 0;
  for (const auto& e : fs::directory_iterator(dir_.path())) {
    std::string name = e.path().filename().string();
    found += std::regex_match(name, std::regex("torchelastic_[a-z0-9_]{8}"));
  }
  EXPECT_EQ(found, 1);
}

TEST_F(WorkerIo, RedirectSendsStreamsToFilesOnly) {
  auto r = RunFtrun(Cmd({"--nproc-per-node", "2", "--redirects", "0:1,1:3"},
                        {"print", "out-${local_rank}", "eprint", "err-${local_rank}"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run = RunDir();
  EXPECT_EQ(ReadFile(run + "/attempt_0/0/stdout.log"), "out-0\n");
  EXPECT_FALSE(FileExists(run + "/attempt_0/0/stderr.log"));
  EXPECT_EQ(ReadFile(run + "/attempt_0/1/stdout.log"), "out-1\n");
  EXPECT_EQ(ReadFile(run + "/attempt_0/1/stderr.log"), "err-1\n");
  EXPECT_EQ(r.out.find("out-"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("err-0"), std::string::npos);  // rank 0's stderr was not redirected
  EXPECT_EQ(r.err.find("err-1"), std::string::npos);
}

TEST_F(WorkerIo, TeeWritesFilesAndPrefixedConsoleLines) {
  auto r = RunFtrun(Cmd({"--nproc-per-node", "2", "--tee", "3", "--role", "trainer"},
                        {"print", "hello ${local_rank}", "eprint", "oops ${local_rank}"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[trainer0]:hello 0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[trainer1]:hello 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("[trainer1]:oops 1\n"), std::string::npos) << r.err;
  std::string run = RunDir();
  EXPECT_EQ(ReadFile(run + "/attempt_0/1/stdout.log"), "hello 1\n");
  EXPECT_EQ(ReadFile(run + "/attempt_0/0/stderr.log"), "oops 0\n");
}

TEST_F(WorkerIo, TeeKeepsEverythingWhenTheWorkerDiesRightAway) {
  std::vector<std::string> actions;
  for (int i = 0; i < 2000; ++i)
    actions.insert(actions.end(), {"print", "line" + std::to_string(i)});
  actions.insert(actions.end(), {"kill-self", "9"});
  auto r = RunFtrun(Cmd({"--tee", "1"}, actions));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("[default0]:line1999\n"), std::string::npos);
  EXPECT_EQ(Lines(ReadFile(RunDir() + "/attempt_0/0/stdout.log")).size(), 2000u);
}

TEST_F(WorkerIo, LinePrefixTemplate) {
  auto r = RunFtrun(Cmd({"--nproc-per-node", "2", "--tee", "1"}, {"print", "x"}),
                    {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "<${role_name}:${rank}> "}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("<default:1> x\n"), std::string::npos) << r.out;
}

TEST_F(WorkerIo, LocalRanksFilter) {
  auto r = RunFtrun(Cmd({"--nproc-per-node", "3", "--tee", "1", "--local-ranks-filter", "1"},
                        {"print", "hi ${local_rank}"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[default1]:hi 1"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("hi 0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("hi 2"), std::string::npos) << r.out;
  EXPECT_EQ(ReadFile(RunDir() + "/attempt_0/2/stdout.log"), "hi 2\n");  // files are complete
  // Without tee, the filtered-out ranks' streams go to /dev/null.
  auto plain = RunFtrun(Cmd({"--nproc-per-node", "2", "--local-ranks-filter", "0"},
                            {"print", "plain ${local_rank}"}));
  EXPECT_NE(plain.out.find("plain 0"), std::string::npos);
  EXPECT_EQ(plain.out.find("plain 1"), std::string::npos);
}

TEST_F(WorkerIo, DuplicateStdoutFilters) {
  auto r = RunFtrun(
      Cmd({"--nproc-per-node", "2", "--tee", "1", "--duplicate-stdout-filters", "loss,acc"},
          {"print", "step 1", "print", "loss=0.5", "print", "acc=0.9"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = Lines(ReadFile(RunDir() + "/attempt_0/filtered_stdout.log"));
  EXPECT_EQ(lines.size(), 4u);
  for (const auto& l : lines) EXPECT_EQ(l.find("step"), std::string::npos) << l;
}

TEST_F(WorkerIo, DevNullLogDirDisablesFiles) {
  std::vector<std::string> argv = {
      "--log-dir",        "/dev/null", "--redirects", "1",     "--no-python",
      FakeWorkerBinary(), "env",       dir_ / "env",  "print", "gone"};
  auto r = RunFtrun(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseEnvFile(dir_ / "env.0")["TORCHELASTIC_ERROR_FILE"], "");
  EXPECT_EQ(r.out.find("gone"), std::string::npos);
}

TEST_F(WorkerIo, PythonExecIsTheInterpreter) {
  std::string script = dir_ / "w.sh";
  { std::ofstream(script) << "echo \"args=$* rank=$RANK\"\n"; }
  auto r =
      RunFtrun({"--log-dir", logs(), script, "a", "${local_rank}"}, {{"PYTHON_EXEC", "/bin/sh"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("args=a 0 rank=0"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ftrun::testing
