// `ftrun master` SIGKILLed while a 2-node job runs, and started again on the same port: within
// the outage window the agents rejoin with the round their workers run and the new master
// takes it over (no restart, the same worker processes); workers that finish during the
// outage count; an outage longer than the window ends the job with one clear line.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <memory>
#include <thread>

#include "launcher/config/host.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

class MasterOutage : public ::testing::Test {
 protected:
  void SetUp() override { port_ = std::to_string(TestPort()); }

  std::vector<std::string> MasterArgs(const std::string& conf) {
    return {"master",
            "--port",
            port_,
            "--nnodes",
            "2",
            "--rdzv-id",
            "job",
            "--max-restarts",
            "3",
            "--rdzv-conf",
            conf,
            "--event-log",
            dir_ / "master.events"};
  }
  std::unique_ptr<ChildRun> StartMaster(const std::string& conf) {
    auto m = std::make_unique<ChildRun>(FtrunBinary(), MasterArgs(conf));
    EXPECT_TRUE(WaitFor([&] { return m->Err().find("listening") != std::string::npos; }, 10s))
        << m->Err();
    return m;
  }
  std::unique_ptr<ChildRun> StartAgent(const std::string& conf,
                                       const std::vector<std::string>& actions) {
    return std::make_unique<ChildRun>(
        FtrunBinary(), FakeWorkerJob({"--log-dir", dir_ / "logs", "--nproc-per-node", "2"},
                                     {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                      "127.0.0.1:" + port_, "--rdzv-id", "job", "--rdzv-conf",
                                      conf + ",is_host=0"},
                                     actions));
  }
  // The four workers' pids (ranks 0-3), once each has written its pid file.
  std::vector<pid_t> WorkerPids() {
    std::vector<pid_t> pids;
    for (int r = 0; r < 4; ++r) pids.push_back(ReadPid(dir_ / (std::to_string(r) + ".pid")));
    return pids;
  }
  bool AllWorkersStarted() {
    for (pid_t p : WorkerPids()) {
      if (p <= 0) return false;
    }
    return true;
  }
  int Count(const std::string& needle) {
    int n = 0;
    for (const auto& l : Lines(ReadFile(dir_ / "records")))
      n += l.find(needle) != std::string::npos;
    return n;
  }
  // Kills the master and waits for it to be gone, then for every agent to notice.
  void KillMaster(std::unique_ptr<ChildRun>& master, ChildRun& a, ChildRun& b) {
    master->Signal(SIGKILL);
    master->Wait(10s);
    ASSERT_TRUE(WaitFor(
        [&] {
          return a.Err().find("does not answer") != std::string::npos &&
                 b.Err().find("does not answer") != std::string::npos;
        },
        20s))
        << a.Err() << b.Err();
  }

  // An 8 s window (keep_alive_interval x keep_alive_max_attempt), so that a 2 s outage is
  // well inside it even on a loaded machine.
  static constexpr const char* kConf =
      "last_call_timeout=0.5,keep_alive_interval=1,keep_alive_max_attempt=8";
  TempDir dir_;
  std::string port_;
};

TEST_F(MasterOutage, TwoSecondOutageCostsNoRestartAndTheWorkersNeverStop) {
  auto master = StartMaster(kConf);
  const std::vector<std::string> w = {"record",    dir_ / "records", "pidfile",
                                      dir_.path(), "wait-file",      dir_ / "go"};
  auto a = StartAgent(kConf, w), b = StartAgent(kConf, w);
  ASSERT_TRUE(WaitFor([&] { return AllWorkersStarted(); }, 30s)) << a->Err() << b->Err();
  const std::vector<pid_t> before = WorkerPids();
  KillMaster(master, *a, *b);
  // The outage itself: the master stays down for 2 s (the fault, not a wait for a result).
  std::this_thread::sleep_for(2s);
  master = StartMaster(kConf);
  ASSERT_TRUE(WaitFor(
      [&] {
        return master->Err().find("round rebuilt from the rejoining nodes") != std::string::npos;
      },
      20s))
      << master->Err() << a->Err();
  EXPECT_NE(master->Err().find("round rebuilt from the rejoining nodes round=0 nodes=2 "
                               "restart_count=0 world_size=4"),
            std::string::npos)
      << master->Err();
  // The very same worker processes are still running.
  EXPECT_EQ(WorkerPids(), before);
  for (pid_t p : before) EXPECT_TRUE(ProcessAlive(p)) << p;
  std::ofstream(dir_ / "go") << "";
  auto ra = a->Wait(30s), rb = b->Wait(30s), rm = master->Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_NE(ra.err.find("joining again with the round its workers run (round=0"), std::string::npos)
      << ra.err;
  EXPECT_NE(ra.err.find("answers again after"), std::string::npos) << ra.err;
  EXPECT_EQ(Lines(ReadFile(dir_ / "records")).size(), 4u) << "each worker started once";
  EXPECT_EQ(Count("attempt=1"), 0) << "the outage spent no restart";
  EXPECT_EQ(ra.err.find("Worker group FAILED"), std::string::npos) << ra.err;
  const std::string events = ReadFile(dir_ / "master.events");
  EXPECT_NE(events.find("\"rebuilt\":true"), std::string::npos) << events;
  EXPECT_NE(events.find("\"outcome\":\"succeeded\""), std::string::npos) << events;
}

TEST_F(MasterOutage, AnOutageOfThreeQuartersOfTheWindowIsSurvivedWhateverTheLongPoll) {
  // An 8 s window whose keep-alive (the watch's long poll) is 4 s: the window counts from the
  // first failed call, not from the last answer, which may be 4 s older (the agents once gave
  // up after 4-8 s).
  const std::string conf = "last_call_timeout=0.5,keep_alive_interval=4,keep_alive_max_attempt=2";
  auto master = StartMaster(conf);
  const std::vector<std::string> w = {"record",    dir_ / "records", "pidfile",
                                      dir_.path(), "wait-file",      dir_ / "go"};
  auto a = StartAgent(conf, w), b = StartAgent(conf, w);
  ASSERT_TRUE(WaitFor([&] { return AllWorkersStarted(); }, 30s)) << a->Err() << b->Err();
  KillMaster(master, *a, *b);
  // The outage: 5 s down, and the new master's start (over a second under sanitizers) on top.
  std::this_thread::sleep_for(5s);
  master = StartMaster(conf);
  ASSERT_TRUE(WaitFor(
      [&] {
        return master->Err().find("round rebuilt from the rejoining nodes") != std::string::npos;
      },
      20s))
      << master->Err() << a->Err() << b->Err();
  std::ofstream(dir_ / "go") << "";
  auto ra = a->Wait(30s), rb = b->Wait(30s), rm = master->Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(Lines(ReadFile(dir_ / "records")).size(), 4u) << "each worker started once";
}

TEST_F(MasterOutage, WorkersThatFinishWhileTheMasterIsDownMakeTheJobSucceed) {
  auto master = StartMaster(kConf);
  const std::vector<std::string> w = {"record",    dir_ / "records", "pidfile",
                                      dir_.path(), "wait-file",      dir_ / "go"};
  auto a = StartAgent(kConf, w), b = StartAgent(kConf, w);
  ASSERT_TRUE(WaitFor([&] { return AllWorkersStarted(); }, 30s)) << a->Err() << b->Err();
  const std::vector<pid_t> pids = WorkerPids();
  KillMaster(master, *a, *b);
  // Every worker finishes while no master runs.
  std::ofstream(dir_ / "go") << "";
  ASSERT_TRUE(WaitFor(
      [&] {
        for (pid_t p : pids) {
          if (ProcessAlive(p)) return false;
        }
        return true;
      },
      20s));
  master = StartMaster(kConf);
  auto ra = a->Wait(30s), rb = b->Wait(30s), rm = master->Wait(30s);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_NE(rm.err.find("job finished outcome=succeeded"), std::string::npos) << rm.err;
  EXPECT_NE(rm.err.find("round rebuilt from the rejoining nodes round=0"), std::string::npos)
      << rm.err;
  EXPECT_EQ(Lines(ReadFile(dir_ / "records")).size(), 4u) << "no worker started again";
}

TEST_F(MasterOutage, AnOutageLongerThanTheWindowEndsTheJobSayingSo) {
  // A 2 s window; the master never comes back.
  const std::string conf = "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=4";
  auto master = StartMaster(conf);
  const std::vector<std::string> w = {"pidfile", dir_.path(), "if-rank", "0", "exit",  "0",
                                      "if-rank", "1",         "exit",    "0", "sleep", "60"};
  auto a = StartAgent(conf, w), b = StartAgent(conf, w);
  ASSERT_TRUE(WaitFor([&] { return AllWorkersStarted(); }, 30s)) << a->Err() << b->Err();
  // Ranks 0 and 1 (one node) have succeeded; 2 and 3 run on.
  ASSERT_TRUE(WaitFor(
      [&] {
        return !ProcessAlive(ReadPid(dir_ / "0.pid")) && !ProcessAlive(ReadPid(dir_ / "1.pid"));
      },
      20s));
  master->Signal(SIGKILL);
  master->Wait(10s);
  auto ra = a->Wait(30s), rb = b->Wait(30s);
  RunResult& done = ra.err.find("this node's workers succeeded") != std::string::npos ? ra : rb;
  RunResult& running = &done == &ra ? rb : ra;
  // The node whose workers had all succeeded exits 0, as torchrun's agent does.
  EXPECT_EQ(done.exit_code, 0) << done.err;
  EXPECT_NE(
      done.err.find("lost contact with the rendezvous server at 127.0.0.1:" + port_ + " for 2s"),
      std::string::npos)
      << done.err;
  // The other fails, saying so, and its workers are gone.
  EXPECT_EQ(running.exit_code, 1) << running.err;
  EXPECT_NE(
      running.err.find("lost contact with the rendezvous server at 127.0.0.1:" + port_ + " for 2s"),
      std::string::npos)
      << running.err;
  EXPECT_FALSE(ProcessAlive(ReadPid(dir_ / "2.pid")));
  EXPECT_FALSE(ProcessAlive(ReadPid(dir_ / "3.pid")));
}

}  // namespace
}  // namespace ftrun::testing
