#include "launcher/agent/outcome.h"

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "common/log.h"
#include "common/nonblocking_output.h"
#include "launcher/workers/failure_report.h"

namespace ftrun::launcher {
namespace {
constexpr std::chrono::milliseconds kFailureReportWait{5000};
}  // namespace

std::string ReportOutcome(const JobResult& r, int exit_code, WorkerPlanner& planner,
                          const EnvMap& agent_env, AgentEvents& events) {
  const bool succeeded = r.succeeded && exit_code == 0;
  events.JobFinished(succeeded, exit_code, r.reason);
  if (succeeded) {
    LauncherLog()->info("job finished outcome=succeeded exit_code=0");
    return "";
  }
  LauncherLog()->error("job finished outcome=failed exit_code={} reason=\"{}\"", exit_code,
                       r.reason);
  if (r.failures.empty()) return "";
  std::ostringstream report;
  planner.ReportFailure(r.failures, report);
  if (auto path = Lookup(agent_env, "TORCHELASTIC_ERROR_FILE")) {
    const WorkerFailure& root = r.failures[RootCauseIndex(r.failures)];
    if (auto s = WriteAgentErrorFile(*path, root); !s) LauncherLog()->warn("{}", s.error().message);
  }
  return report.str();
}

void WriteFailureReport(const std::string& report) {
  if (report.empty()) return;
  std::cerr.flush();
  if (!WriteWithin(STDERR_FILENO, report, kFailureReportWait)) {
    LauncherLog()->warn("stderr did not take the failure report within {} s; see the fault record",
                        kFailureReportWait.count() / 1000);
  }
}

void WriteFaultRecord(const std::filesystem::path& path, const std::string& json) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << json << "\n";
    if (!out.flush()) {
      LauncherLog()->warn("cannot write the fault record {}", path.string());
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    LauncherLog()->warn("cannot write the fault record {}: {}", path.string(), ec.message());
    return;
  }
  LauncherLog()->info("fault record written path={}", path.string());
}

}  // namespace ftrun::launcher
