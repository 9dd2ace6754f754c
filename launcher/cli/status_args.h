// `ftrun status HOST:PORT`: asks a job's rendezvous server (the hosting agent, or
// `ftrun master`) for the job's state and prints it as a table; with --stacks, has every
// rank dump its stacks and prints them merged (launcher/diagnostics/).
#pragma once

#include <string>
#include <vector>

#include "launcher/cli/parsed.h"

namespace ftrun::launcher {

struct StatusArgs {
  std::string endpoint;    // host:port of the rendezvous server
  std::string rdzv_id;     // "" : whichever job it serves
  std::string token;       // "" : FTRUN_RDZV_TOKEN
  std::string token_file;  // "" : FTRUN_RDZV_TOKEN_FILE
  std::string tls_ca;      // TLS: "" : FTRUN_RDZV_TLS_CA (credentials.h)
  std::string tls_cert;    // mutual TLS: this client's certificate and key
  std::string tls_key;
  bool json = false;
  bool stacks = false;     // --stacks: a job-wide stack dump, merged
  std::string stacks_dir;  // --stacks-dir: where the report is written too ("" : nowhere)
  double timeout = 5;
};

using ParsedStatus = Parsed<StatusArgs>;

ParsedStatus ParseStatusArgs(const std::vector<std::string>& argv);
std::string StatusHelp();

// Returns 0 when the server answered, 1 when it could not be reached or refused, 2 on usage
// errors.
int RunStatus(const std::vector<std::string>& argv);

}  // namespace ftrun::launcher
