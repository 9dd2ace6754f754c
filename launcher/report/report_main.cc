// `ftrun report` (launcher/cli/report_args.h).
#include <iostream>

#include "launcher/cli/report_args.h"
#include "launcher/report/report_writer.h"

namespace ftrun::launcher {

int RunReport(const std::vector<std::string>& argv) {
  ParsedReport cmd = ParseReportArgs(argv);
  if (auto code = ExitCodeIfNotRun(cmd, "ftrun report")) return *code;
  auto written = report::WriteReport(cmd.args.log_dir, cmd.args.output, cmd.args.event_log);
  if (!written) {
    std::cerr << "ftrun report: error: " << written.error().message << std::endl;
    return 1;
  }
  std::cout << *written << std::endl;
  return 0;
}

}  // namespace ftrun::launcher
