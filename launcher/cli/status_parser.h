// `ftrun status`'s CLI11 parser (see status_args.h). Included only by command_line.cc, the one
// CLI11 translation unit.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "launcher/cli/cli11_support.h"
#include "launcher/cli/status_args.h"

namespace ftrun::launcher::cli11 {

class StatusParser {
 public:
  explicit StatusParser(StatusArgs& a) : app_("ftrun status", "ftrun status") {
    Describe(app_,
             "ftrun status: the state of a job, from its rendezvous server (the agent that hosts\n"
             "it, or `ftrun master`), as a table.",
             "ftrun status [options] HOST:PORT");
    app_.add_option("endpoint", a.endpoint, "The rendezvous endpoint: HOST:PORT")
        ->required()
        ->type_name("HOST:PORT");
    app_.add_option(Names("rdzv-id"), a.rdzv_id, "Only if the server serves this job id")
        ->type_name("ID");
    app_.add_option(Names("token"), a.token, "The job token [default: FTRUN_RDZV_TOKEN]")
        ->type_name("TOKEN");
    app_.add_flag(Names("json"), a.json, "Print the state as one JSON object");
    app_.add_option(Names("timeout"), a.timeout, "Seconds to wait for an answer")
        ->type_name("SECONDS")
        ->capture_default_str();
  }

  ParsedStatus Parse(std::vector<std::string> argv, const StatusArgs& a) {
    return ParseCommand(app_, std::move(argv), a);
  }
  std::string Help() { return app_.help(); }

 private:
  CLI::App app_;
};

}  // namespace ftrun::launcher::cli11
