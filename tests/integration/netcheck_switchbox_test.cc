// The switchbox check (--switchbox-check) with fake probes from tests/support/netcheck/.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>

#include "tests/integration/netcheck_fixture.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

TEST_F(NetCheck, SwitchboxAllPairsPassAndTheJobRuns) {
  auto r =
      RunFtrun(Switchbox({"--box-pairs", "0:1", "2:4", "--min-bandwidth", "10000", "--min-channels",
                          "2", "--switchbox-probe", Probe("0:1=12345.6 2:4=15000")}),
               {}, 30s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("switchbox pair 0:1: 12345.6 MB/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("switchbox pair 2:4: 15000.0 MB/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("switchbox check passed"), std::string::npos) << r.err;
  EXPECT_EQ(Count("world=2"), 2);
  auto records = Events("switchbox_check");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_TRUE(records[0].fields().at("ok").bool_value());
  EXPECT_EQ(records[0].fields().at("passed").number_value(), 2);
}

TEST_F(NetCheck, SwitchboxTooFewPassingPairsLeaveBeforeJoining) {
  ChildRun master(FtrunBinary(), {"master", "--port", port_, "--nnodes", "2", "--rdzv-id", "job"});
  ASSERT_TRUE(WaitFor([&] { return master.Err().find("listening") != std::string::npos; }, 20s));
  auto argv = Cmd("2",
                  {"--switchbox-check", "--box-pairs", "0:1 2:4 3:5 6:7", "--min-channels", "2",
                   "--switchbox-probe", Probe("0:1=12000 2:4=500 3:5=crash 6:7=error")},
                  Record());
  auto r = RunFtrun(argv, {}, 30s);
  EXPECT_EQ(r.exit_code, 75) << r.err;
  EXPECT_EQ(CountLines(r.err, "this node leaves the job: the switchbox check failed"), 1) << r.err;
  EXPECT_EQ(CountLines(r.err, "[error]"), 1) << r.err;
  EXPECT_NE(r.err.find("switchbox pair 2:4: 500.0 MB/s (too slow)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("switchbox pair 3:5: probe ended with exit code 3"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("switchbox pair 6:7: cannot enable peer access"), std::string::npos)
      << r.err;
  // Nothing started: the node never joined and ran no worker.
  EXPECT_EQ(r.err.find("joined the job"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(dir_ / "records"));
  master.Signal(SIGTERM);
  auto rm = master.Wait(30s);
  EXPECT_EQ(rm.err.find("node_joined"), std::string::npos) << rm.err;
}

TEST_F(NetCheck, SwitchboxGarbageAndAHungProbeFailTheirPairsWithReasons) {
  const std::string pids = dir_ / "hung.pids";
  auto start = std::chrono::steady_clock::now();
  auto r = RunFtrun(
      Switchbox({"--box-pairs", "0:1 2:4 3:5", "--min-channels", "1", "--switchbox-timeout", "1",
                 "--switchbox-probe", Probe("0:1=12000 2:4=garbage 3:5=hang")}),
      {{"FAKE_PROBE_PIDS", pids}}, 30s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << "one passing pair is enough here:\n" << r.err;
  EXPECT_NE(r.err.find("switchbox pair 0:1: 12000.0 MB/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("switchbox pair 2:4: no result"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("p2pBandwidthLatencyTest v0.1"), std::string::npos)
      << "the garbage is quoted:\n"
      << r.err;
  EXPECT_NE(r.err.find("switchbox pair 3:5: timed out after 1 s"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 20) << "the hung probe did not hold the job";
  EXPECT_EQ(Count("world=2"), 2);
  // The hung probe (and its child) are gone.
  std::istringstream in(ReadFile(pids));
  pid_t probe = 0, child = 0;
  ASSERT_TRUE(in >> probe >> child) << ReadFile(pids);
  EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(probe) && !ProcessAlive(child); }, 10s))
      << probe << " " << child;
  auto records = Events("switchbox_check");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].fields().at("passed").number_value(), 1);
  int failed = 0;
  for (const auto& p : List(records[0], "pairs").values()) {
    failed += !p.struct_value().fields().at("ok").bool_value();
  }
  EXPECT_EQ(failed, 2);
}

TEST_F(NetCheck, SwitchboxDefaultProbeWithoutAGpuIsOneLine) {
  if (std::filesystem::exists("/proc/driver/nvidia/gpus") &&
      !std::filesystem::is_empty("/proc/driver/nvidia/gpus")) {
    GTEST_SKIP() << "this machine has an NVIDIA GPU";
  }
  ChildRun run(FtrunBinary(), Switchbox({}), {}, {"CUDA_VISIBLE_DEVICES"});
  auto r = run.Wait(30s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  ASSERT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("no GPU"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--switchbox-check"), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(dir_ / "records"));
}

TEST_F(NetCheck, MalformedBoxPairIsAUsageErrorNamingIt) {
  auto r =
      RunFtrun(Switchbox({"--box-pairs", "0:1", "2-4", "--switchbox-probe", Probe("")}), {}, 30s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--box-pairs: bad pair \"2-4\""), std::string::npos) << r.err;
  EXPECT_FALSE(FileExists(dir_ / "records"));
}

}  // namespace
}  // namespace ftrun::testing
