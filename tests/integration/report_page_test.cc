// `ftrun report`: its command line, its page for a real faulted job of fake workers (rendered
// in headless Chromium: what is drawn, where, in which colour), and damaged input.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/integration/report_browser.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace fs = std::filesystem;

class ReportPage : public ::testing::Test {
 protected:
  // The run directory ftrun made under dir_/logs.
  std::string RunDir() {
    for (const auto& e : fs::directory_iterator(dir_ / "logs")) {
      if (e.is_directory()) return e.path().string();
    }
    return "";
  }
  TempDir dir_;
};

TEST_F(ReportPage, CommandLineErrorsAreOneLineAndDocumentedCodes) {
  auto usage = RunFtrun({"report"});
  EXPECT_EQ(usage.exit_code, 2) << usage.err;
  auto help = RunFtrun({"report", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("LOG_DIR"), std::string::npos);
  auto missing = RunFtrun({"report", dir_ / "nowhere"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find(dir_ / "nowhere"), std::string::npos) << missing.err;
  EXPECT_EQ(Lines(missing.err).size(), 1u) << missing.err;
  fs::create_directories(dir_ / "empty");
  auto empty = RunFtrun({"report", dir_ / "empty"});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_NE(empty.err.find("events.jsonl"), std::string::npos) << empty.err;
  EXPECT_FALSE(FileExists(dir_ / "empty/report.html"));
}

TEST_F(ReportPage, AFaultedJobGetsItsPageAndChromiumDrawsTheFaultAndItsRecovery) {
  // Rank 1 dies of SIGKILL in the first attempt; the second attempt succeeds.
  auto r = RunFtrun(
      FakeWorkerJob({"--log-dir", dir_ / "logs"}, {"--nproc-per-node", "2", "--max-restarts", "1"},
                    {"if-attempt", "0", "if-rank", "1", "kill-self", "9", "sleep", "0.5"}),
      {}, std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string run = RunDir();
  // Without --event-log: events.jsonl in the run's log dir, and the page written at the end.
  ASSERT_TRUE(FileExists(run + "/events.jsonl"));
  const std::string events = ReadFile(run + "/events.jsonl");
  for (const char* e : {"fault_detected", "workers_stopping", "workers_stopped", "round_started",
                        "workers_spawned"}) {
    EXPECT_NE(events.find(std::string("\"event\":\"") + e + "\""), std::string::npos) << e;
  }
  EXPECT_TRUE(FileExists(run + "/report.html"));
  EXPECT_NE(r.err.find("post-mortem page path=" + run + "/report.html"), std::string::npos)
      << r.err;

  // `ftrun report` on the --log-dir finds the run, writes beside it and prints where.
  fs::remove(run + "/report.html");
  auto rep = RunFtrun({"report", dir_ / "logs"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_EQ(rep.out, run + "/report.html\n");
  const std::string html = ReadFile(run + "/report.html");
  EXPECT_NE(html.find("SIGKILL"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // self-contained, nothing runs
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((src|href)\s*=\s*['"]?(https?:|//)|url\()")))
      << "the page fetches something";
  // A plain program reports no steps: the page says unknown rather than a number.
  EXPECT_NE(html.find("first step after a restart: unknown"), std::string::npos);

  ExpectPageDrawsTheFault(run + "/report.html", dir_.path(),
                          {"phase-stop", "phase-rendezvous", "phase-spawn"});
}

TEST_F(ReportPage, ARunningJobGetsItsPageSoFar) {
  ChildRun job(FtrunBinary(), FakeWorkerJob({"--log-dir", dir_ / "logs"}, {"--nproc-per-node", "2"},
                                            {"sleep", "60"}));
  ASSERT_TRUE(WaitFor(
      [&] {
        std::error_code ec;
        if (!fs::is_directory(dir_ / "logs", ec)) return false;
        const std::string run = RunDir();
        return !run.empty() &&
               ReadFile(run + "/events.jsonl").find("workers_spawned") != std::string::npos;
      },
      std::chrono::seconds(60)));
  auto rep = RunFtrun({"report", dir_ / "logs", "-o", dir_ / "live.html"});
  EXPECT_EQ(rep.exit_code, 0) << rep.err;
  const std::string html = ReadFile(dir_ / "live.html");
  EXPECT_NE(html.find("not logged (still running?)"), std::string::npos);
  EXPECT_NE(html.find("(running)"), std::string::npos);  // the attempt has no end yet
  job.Signal(SIGTERM);
  EXPECT_FALSE(job.Wait(std::chrono::seconds(60)).timed_out);
}

TEST_F(ReportPage, ALiveOrDamagedLogGivesAPageThatSaysWhatIsMissing) {
  fs::create_directories(dir_ / "run");
  {
    std::ofstream f(dir_ / "run/events.jsonl");
    f << R"({"schema":1,"event":"agent_started","time":"2026-11-26T01:00:00.000Z","node":"n0",)"
      << R"("run_id":"j","version":"0.1.0"})"
      << "\n"
      << "garbage\n"
      << R"({"schema":2,"event":"round_started","time":"2026-11-26T01:00:01.000Z"})"
      << "\n"
      << std::string(2 << 20, 'x') << "\n"
      << R"({"schema":1,"event":"round_started","time":"2026-11-26T01:00:01.000Z","node":"n0",)"
      << R"("run_id":"j","restart_count":0})"
      << "\n"
      << R"({"schema":1,"event":"workers_sp)";  // being written
  }
  auto rep = RunFtrun({"report", dir_ / "run", "-o", dir_ / "page.html"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_EQ(rep.out, dir_ / "page.html" + "\n");
  const std::string html = ReadFile(dir_ / "page.html");
  for (const char* said : {"1 records of event-log schema 2 skipped",
                           "1 lines that are not records", "1 lines over 1 MiB skipped",
                           "the last line is incomplete", "the job&#39;s end is not in the log"}) {
    EXPECT_NE(html.find(said), std::string::npos) << said;
  }
  EXPECT_NE(html.find("No fault_record.json"), std::string::npos);

  // Merged stacks beside the logs are shown; an SVG only as an image (its scripts never run).
  fs::create_directories(dir_ / "run/stacks");
  std::ofstream(dir_ / "run/stacks/hang-1.txt") << "ranks 0-3: all_reduce <here>\n";
  std::ofstream(dir_ / "run/stacks/hang-1.svg")
      << "<svg xmlns='http://www.w3.org/2000/svg'><script>x()</script></svg>";
  rep = RunFtrun({"report", dir_ / "run"});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const std::string with_stacks = ReadFile(dir_ / "run/report.html");
  EXPECT_NE(with_stacks.find("ranks 0-3: all_reduce &lt;here&gt;"), std::string::npos);
  EXPECT_NE(with_stacks.find("data:image/svg+xml;base64,"), std::string::npos);
  EXPECT_EQ(with_stacks.find("<script"), std::string::npos);
}

}  // namespace
}  // namespace ftrun::testing
