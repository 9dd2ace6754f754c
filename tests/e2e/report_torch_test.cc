// `ftrun report` end to end: a real 4-rank torch.distributed (gloo) job like the demo's
// (scripts/demo/train.py, ftrun's helper reporting its steps), rank 2 SIGKILLed in step 12.
// The page the agent writes at the end shows the fault and all six recovery phases, including
// the first step after the restart, and no step lost; and a hung rank, whose recovery starts
// with its silence. Both pages are checked in headless Chromium.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/e2e/torch_support.h"
#include "tests/integration/report_browser.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

TEST(ReportTorch, TheDemosFaultedJobShowsItsFaultAndEveryRecoveryPhase) {
  ASSERT_TRUE(DebianTorchAvailable());
  TempDir dir;
  auto r = RunFtrun({"--nproc-per-node", "4", "--max-restarts", "1", "--log-dir", dir / "logs",
                     SourceDir() + "/scripts/demo/train.py", "--steps", "20", "--out", dir / "out",
                     "--crash-rank", "2", "--crash-step", "12"},
                    {{"PYTHON_EXEC", kPython}}, 240s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run;
  for (const auto& e : fs::directory_iterator(dir / "logs")) run = e.path().string();
  const std::string page = run + "/report.html";
  ASSERT_TRUE(FileExists(page)) << r.err;
  const std::string events = ReadFile(run + "/events.jsonl");
  for (const char* e :
       {"fault_detected", "fault_save_done", "workers_stopping", "workers_stopped", "first_step"}) {
    EXPECT_NE(events.find(std::string("\"event\":\"") + e + "\""), std::string::npos) << e;
  }
  const std::string html = ReadFile(page);
  EXPECT_NE(html.find("SIGKILL"), std::string::npos);
  // The survivors saved step 11 and the job resumed at 12: nothing done twice.
  EXPECT_NE(html.find("0 (last completed step 11, resumed at 12)"), std::string::npos) << page;
  EXPECT_EQ(html.find("first step after a restart: unknown"), std::string::npos);
  ExpectPageDrawsTheFault(
      page, dir.path(),
      {"phase-save", "phase-stop", "phase-rendezvous", "phase-spawn", "phase-first-step"});
}

// A hung rank (--hang-timeout): the recovery starts with the detection of its silence, at
// least the timeout long, drawn as the first phase.
TEST(ReportTorch, AHangsDetectionIsItsSilence) {
  ASSERT_TRUE(DebianTorchAvailable());
  TempDir dir;
  auto r = RunFtrun(
      {"--nproc-per-node", "2", "--max-restarts", "1", "--hang-timeout", "3", "--monitor-interval",
       "0.5", "--log-dir", dir / "logs", SourceDir() + "/scripts/demo/train.py", "--steps", "12",
       "--out", dir / "out", "--hang-rank", "1", "--hang-step", "6"},
      {{"PYTHON_EXEC", kPython}}, 240s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run;
  for (const auto& e : fs::directory_iterator(dir / "logs")) run = e.path().string();
  std::string detected;
  for (const auto& line : Lines(ReadFile(run + "/events.jsonl"))) {
    if (line.find(R"("event":"fault_detected")") != std::string::npos) detected = line;
  }
  ASSERT_NE(detected.find(R"("kind":"hang")"), std::string::npos) << detected;
  const auto at = detected.find(R"("detect_ms":)");
  ASSERT_NE(at, std::string::npos) << detected;
  EXPECT_GE(std::stol(detected.substr(at + 12)), 3000) << detected;
  const std::string html = ReadFile(run + "/report.html");
  EXPECT_NE(html.find("hang (no progress)"), std::string::npos);
  ExpectPageDrawsTheFault(run + "/report.html", dir.path(),
                          {"phase-detect", "phase-stop", "phase-first-step"});
}

}  // namespace
}  // namespace ftrun::testing
