// The one translation unit that includes CLI11: every command line's entry points, each
// through its parser (<command>_parser.h) and the shared skeleton (cli11_support.h).
#include "launcher/cli/dlrover_options.h"
#include "launcher/cli/msrun_parser.h"
#include "launcher/cli/subcommand_parsers.h"
#include "launcher/cli/torchrun_parser.h"

namespace ftrun::launcher {
namespace {

// The command line of each personality built on torchrun's.
cli11::TorchrunFlavor FlavorOf(Personality personality) {
  return personality == Personality::kDlrover ? cli11::DlroverFlavor()
                                              : cli11::TorchrunDefaultFlavor();
}

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

ParsedMaster ParseMasterArgs(const std::vector<std::string>& argv) {
  return ParseWith<cli11::MasterParser, MasterArgs>(argv);
}

std::string MasterHelp() { return HelpOf<cli11::MasterParser, MasterArgs>(); }

ParsedMsrun ParseMsrunArgs(const std::vector<std::string>& argv) {
  return ParseWith<cli11::MsrunParser, MsrunArgs>(argv);
}

std::string MsrunHelp() { return HelpOf<cli11::MsrunParser, MsrunArgs>(); }

ParsedCommandLine ParseTorchrunArgs(const std::vector<std::string>& argv, Personality personality) {
  return ParseWith<cli11::TorchrunParser, TorchrunArgs>(argv, FlavorOf(personality));
}

std::string TorchrunHelp(Personality personality) {
  return HelpOf<cli11::TorchrunParser, TorchrunArgs>(FlavorOf(personality));
}

}  // namespace ftrun::launcher
