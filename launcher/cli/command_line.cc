// The one translation unit that includes CLI11: every command line's entry points, each
// through its parser (<command>_parser.h) and the shared skeleton (cli11_support.h).
#include "launcher/cli/dlrover_options.h"
#include "launcher/cli/msrun_parser.h"
#include "launcher/cli/subcommand_parsers.h"
#include "launcher/cli/torchrun_parser.h"

namespace ftrun::launcher {
namespace {

// Parse and Help of a command whose parser is built over the arguments struct it fills.
template <class Parser, class Args, class... Extra>
auto ParseWith(const std::vector<std::string>& argv, const Extra&... extra) {
  Args args;
  Parser parser(args, extra...);
  return parser.Parse(argv, args);
}

template <class Parser, class Args, class... Extra>
std::string HelpOf(const Extra&... extra) {
  Args args;
  return Parser(args, extra...).Help();
}

}  // namespace

ParsedStatus ParseStatusArgs(const std::vector<std::string>& argv) {
  return ParseWith<cli11::StatusParser, StatusArgs>(argv);
}

std::string StatusHelp() { return HelpOf<cli11::StatusParser, StatusArgs>(); }

ParsedReport ParseReportArgs(const std::vector<std::string>& argv) {
  return ParseWith<cli11::ReportParser, ReportArgs>(argv);
}

std::string ReportHelp() { return HelpOf<cli11::ReportParser, ReportArgs>(); }

ParsedMaster ParseMasterArgs(const std::vector<std::string>& argv) {
  return ParseWith<cli11::MasterParser, MasterArgs>(argv);
}

std::string MasterHelp() { return HelpOf<cli11::MasterParser, MasterArgs>(); }

ParsedMsrun ParseMsrunArgs(const std::vector<std::string>& argv) {
  return ParseWith<cli11::MsrunParser, MsrunArgs>(argv);
}

std::string MsrunHelp() { return HelpOf<cli11::MsrunParser, MsrunArgs>(); }

ParsedCommandLine ParseTorchrunArgs(const std::vector<std::string>& argv) {
  return ParseWith<cli11::TorchrunParser, TorchrunArgs>(argv, cli11::TorchrunDefaultFlavor());
}

std::string TorchrunHelp() {
  return HelpOf<cli11::TorchrunParser, TorchrunArgs>(cli11::TorchrunDefaultFlavor());
}

ParsedDlroverRun ParseDlroverRunArgs(const std::vector<std::string>& argv) {
  DlroverArgs args;
  cli11::TorchrunParser parser(args, cli11::DlroverFlavor(args));
  return parser.Parse(argv, args);
}

std::string DlroverRunHelp() {
  DlroverArgs args;
  return cli11::TorchrunParser(args, cli11::DlroverFlavor(args)).Help();
}

ParsedDistributedLaunch ParseDistributedLaunchArgs(const std::vector<std::string>& argv) {
  DistributedLaunchArgs args;
  cli11::TorchrunParser parser(args, cli11::DistributedLaunchFlavor(args));
  return parser.Parse(argv, args);
}

std::string DistributedLaunchHelp() {
  DistributedLaunchArgs args;
  return cli11::TorchrunParser(args, cli11::DistributedLaunchFlavor(args)).Help();
}

}  // namespace ftrun::launcher
