// --warm-restart end to end with real torch (gloo, Debian's python3-torch): the next attempt
// runs on the standby interpreters and sees exactly what a cold start sees (checked from inside
// the workers, tests/e2e/workers/warm_worker.py), failures look as they do cold, and every
// standby fault falls back to a cold start with the job unharmed.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/e2e/torch_support.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace pb = google::protobuf;
using namespace std::chrono_literals;

// The pids in "<what> pid=N" lines of ftrun's log, in order.
std::vector<pid_t> Pids(const std::string& log, const std::string& what) {
  std::vector<pid_t> out;
  const std::regex re(what + " pid=([0-9]+)");
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it) {
    out.push_back(std::stoi((*it)[1]));
  }
  return out;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void Touch(const std::string& path) { std::ofstream(path) << "go\n"; }

class WarmRestartE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(DebianTorchAvailable());
    std::filesystem::create_directories(dir_ / "out");
  }
  std::string Worker() const { return SourceDir() + "/tests/e2e/workers/warm_worker.py"; }
  std::map<std::string, std::string> Env() const { return {{"PYTHON_EXEC", kPython}}; }
  // ftrun --warm-restart with `nproc` ranks, `options`, then the entry point and the worker's
  // arguments (its out dir first).
  std::unique_ptr<ChildRun> Start(int nproc, std::vector<std::string> options,
                                  std::vector<std::string> entry, std::vector<std::string> args,
                                  std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {
        "--nproc-per-node", std::to_string(nproc), "--max-restarts", "1",
        "--warm-restart",   "--log-dir",           dir_ / "logs"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), entry.begin(), entry.end());
    argv.push_back(dir_ / "out");
    argv.insert(argv.end(), args.begin(), args.end());
    for (const auto& [k, v] : Env()) env.emplace(k, v);
    return std::make_unique<ChildRun>(FtrunBinary(), argv, env);
  }
  // Waits until `n` standbys said ready.
  std::vector<pid_t> WaitReady(ChildRun& run, size_t n) {
    EXPECT_TRUE(WaitFor(
        [&] {
          return Pids(run.Err(), "standby").size() >= n && Count(run.Err(), " ready after ") >= n;
        },
        120s))
        << run.Err();
    std::vector<pid_t> ready;
    const std::string err = run.Err();
    const std::regex re("standby pid=([0-9]+) ready after");
    for (std::sregex_iterator it(err.begin(), err.end(), re), end; it != end; ++it) {
      ready.push_back(std::stoi((*it)[1]));
    }
    return ready;
  }
  // The cold attempt's contract against the warm one's, rank by rank: equal but for what
  // differs between any two attempts.
  void ExpectSameContract(int nproc, const std::vector<pid_t>& standbys) {
    for (int rank = 0; rank < nproc; ++rank) {
      const std::string r = std::to_string(rank);
      pb::Struct cold = ReadJson(dir_ / ("out/contract.0." + r + ".json"));
      pb::Struct warm = ReadJson(dir_ / ("out/contract.1." + r + ".json"));
      EXPECT_FALSE(cold.fields().at("preloaded").bool_value());
      EXPECT_TRUE(warm.fields().at("preloaded").bool_value()) << "rank " << rank << " ran cold";
      const pid_t pid = static_cast<pid_t>(warm.fields().at("pid").number_value());
      EXPECT_NE(std::find(standbys.begin(), standbys.end(), pid), standbys.end()) << pid;
      auto& we = *warm.mutable_fields()->at("env").mutable_struct_value()->mutable_fields();
      auto& ce = *cold.mutable_fields()->at("env").mutable_struct_value()->mutable_fields();
      EXPECT_EQ(we.at("TORCHELASTIC_RESTART_COUNT").string_value(), "1");
      EXPECT_EQ(we.at("RANK").string_value(), r);
      for (const char* k :
           {"MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE"}) {
        EXPECT_EQ(we.count(k), 1u) << k;
        we.erase(k);
        ce.erase(k);
      }
      for (const char* k : {"preloaded", "pid"}) {
        warm.mutable_fields()->erase(k);
        cold.mutable_fields()->erase(k);
      }
      for (const auto& [k, v] : cold.fields()) {
        ASSERT_EQ(warm.fields().count(k), 1u) << k;
        EXPECT_TRUE(pb::util::MessageDifferencer::Equals(v, warm.fields().at(k)))
            << "rank " << rank << " " << k << "\ncold: " << v.DebugString()
            << "\nwarm: " << warm.fields().at(k).DebugString();
      }
    }
  }
  TempDir dir_;
};

TEST_F(WarmRestartE2E, RankKilledTheNextAttemptRunsOnTheStandbysWithTheColdStartsContract) {
  auto run = Start(4, {}, {Worker()}, {"--crash-rank", "2", "--go", dir_ / "go"});
  const auto standbys = WaitReady(*run, 4);
  Touch(dir_ / "go");
  auto r = run->Wait(180s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 2: crashing"), std::string::npos) << r.out;
  EXPECT_EQ(Count(r.err, "starts on standby pid="), 4u) << r.err;
  EXPECT_EQ(Count(r.err, "starts cold"), 0u) << r.err;
  ExpectSameContract(4, standbys);
  const pb::Struct warm = ReadJson(dir_ / "out/contract.1.0.json");
  EXPECT_EQ(warm.fields().at("name").string_value(), "__main__");
  EXPECT_EQ(warm.fields().at("file").string_value(), Worker());
  EXPECT_EQ(warm.fields().at("path0").string_value(), SourceDir() + "/tests/e2e/workers");
  EXPECT_TRUE(warm.fields().at("main_is_this").bool_value());
  // Every standby, used or refilled, is gone with the agent.
  for (pid_t pid : Pids(r.err, "standby")) {
    EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(pid); }, 10s)) << pid;
  }
}

TEST_F(WarmRestartE2E, ModuleEntryPointTooWithTheColdStartsSysPathAndArgv) {
  auto run = Start(2, {}, {"-m", "warm_worker"}, {"--crash-rank", "1", "--go", dir_ / "go"},
                   {{"PYTHONPATH", SourceDir() + "/tests/e2e/workers"}});
  const auto standbys = WaitReady(*run, 2);
  Touch(dir_ / "go");
  auto r = run->Wait(180s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Count(r.err, "starts on standby pid="), 2u) << r.err;
  ExpectSameContract(2, standbys);
  const pb::Struct warm = ReadJson(dir_ / "out/contract.1.1.json");
  EXPECT_EQ(warm.fields().at("argv").list_value().values(0).string_value(), Worker());
  EXPECT_EQ(warm.fields().at("path0").string_value(), std::filesystem::current_path().string());
}

TEST_F(WarmRestartE2E, AnUncaughtExceptionOnAStandbyIsReportedAsACold) {
  auto run = Start(2, {"--redirects", "3"}, {Worker()},
                   {"--crash-rank", "0", "--go", dir_ / "go", "--fail-rank", "1"});
  WaitReady(*run, 2);
  Touch(dir_ / "go");
  auto r = run->Wait(180s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(Count(r.err, "starts on standby pid="), 2u) << r.err;
  // torch's @record wrote the error file; the summary shows it.
  EXPECT_NE(r.err.find("ValueError: boom from rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exitcode  : 1"), std::string::npos) << r.err;
  std::string log;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "logs")) {
    if (e.path().string().find("attempt_1/1/stderr.log") != std::string::npos) {
      log = ReadFile(e.path());
    }
  }
  EXPECT_NE(log.find("Traceback (most recent call last):"), std::string::npos) << log;
  EXPECT_NE(log.find("ValueError: boom from rank 1"), std::string::npos) << log;
  EXPECT_EQ(log.find("standby.py"), std::string::npos) << "frames of the bootstrap:\n" << log;
}

TEST_F(WarmRestartE2E, SysExitCodeOnAStandbyIsTheWorkersExitCode) {
  auto run =
      Start(2, {}, {Worker()},
            {"--crash-rank", "0", "--go", dir_ / "go", "--fail-rank", "1", "--exit-code", "3"});
  WaitReady(*run, 2);
  Touch(dir_ / "go");
  auto r = run->Wait(180s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(Count(r.err, "starts on standby pid="), 2u) << r.err;
  EXPECT_NE(r.err.find("failed (exitcode: 3) local_rank: 1"), std::string::npos) << r.err;
}

TEST_F(WarmRestartE2E, KilledAndStoppedStandbysFallBackToColdStarts) {
  auto run = Start(4, {}, {Worker()}, {"--crash-rank", "3", "--go", dir_ / "go"});
  const auto standbys = WaitReady(*run, 4);
  ASSERT_EQ(standbys.size(), 4u);
  ::kill(standbys[0], SIGKILL);  // as the OOM killer would
  ::kill(standbys[1], SIGSTOP);  // hung: it cannot take the hand-over
  const std::string died =
      "standby pid=" + std::to_string(standbys[0]) + " died how=\"signal 9 (SIGKILL)\" state=ready";
  ASSERT_TRUE(WaitFor([&] { return run->Err().find(died) != std::string::npos; }, 30s))
      << run->Err();
  Touch(dir_ / "go");
  auto r = run->Wait(180s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Count(r.err, "starts on standby pid="), 2u) << r.err;
  EXPECT_EQ(Count(r.err, "starts cold reason="), 2u) << r.err;
  EXPECT_NE(
      r.err.find("starts cold reason=standby_not_runnable pid=" + std::to_string(standbys[1])),
      std::string::npos)
      << r.err;
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(standbys[1]); }, 10s));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(FileExists(dir_ / ("out/contract.1." + std::to_string(rank) + ".json")));
  }
}

TEST_F(WarmRestartE2E, APreloadModuleThatFailsToImportTurnsWarmRestartOffAndTheJobRunsCold) {
  auto run = Start(2, {"--preload", "torch,ftrun_no_such_module"}, {Worker()},
                   {"--crash-rank", "1", "--go", dir_ / "go"});
  const std::string off =
      "warm restart: off for the rest of the job cause=preload_failed "
      "module=ftrun_no_such_module error=ModuleNotFoundError: No module named "
      "'ftrun_no_such_module'";
  ASSERT_TRUE(WaitFor([&] { return run->Err().find(off) != std::string::npos; }, 120s))
      << run->Err();
  Touch(dir_ / "go");
  auto r = run->Wait(180s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Count(r.err, "starts cold reason=warm_restart_off cause=preload_failed"), 2u) << r.err;
  EXPECT_EQ(Count(r.err, off), 1u) << "said once";
}

TEST_F(WarmRestartE2E, AScriptThatIsNotAFileStartsCold) {
  // A directory with __main__.py: Python runs it, a standby does not.
  const std::string app = dir_ / "app";
  std::filesystem::create_directories(app);
  std::ofstream(app + "/__main__.py")
      << "import runpy\nrunpy.run_path('" << Worker() << "', run_name='__main__')\n";
  auto run = Start(2, {}, {app}, {"--crash-rank", "1", "--go", dir_ / "go"});
  WaitReady(*run, 2);
  Touch(dir_ / "go");
  auto r = run->Wait(180s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Count(r.err, "starts cold reason=script_not_a_file path=" + app), 2u) << r.err;
}

TEST(WarmRestartUsage, BadPreloadAndBadVariableAreUsageErrors) {
  auto a = RunFtrun({"--warm-restart", "--preload", "torch,not a module", "x.py"});
  EXPECT_EQ(a.exit_code, 2) << a.err;
  EXPECT_NE(a.err.find("--preload: 'not a module' is not a Python module name"), std::string::npos)
      << a.err;
  auto b = RunFtrun({"x.py"}, {{"FTRUN_WARM_RESTART", "maybe"}});
  EXPECT_EQ(b.exit_code, 2) << b.err;
  EXPECT_NE(b.err.find("FTRUN_WARM_RESTART: 'maybe' is not 1 or 0"), std::string::npos) << b.err;
  auto c = RunFtrun({"--warm-restart", "--no-python", "--log-level", "warning", "/bin/true"});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("--warm-restart applies to workers run by the Python interpreter"),
            std::string::npos)
      << c.err;
}

}  // namespace
}  // namespace ftrun::testing
