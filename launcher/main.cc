// ftrun: a fault-tolerant drop-in for torchrun. `ftrun master ...` runs the rendezvous
// server alone, `ftrun status ...` asks one about its job; anything else is torchrun's
// command line.
#include <string>
#include <vector>

#include "launcher/cli/master_args.h"
#include "launcher/cli/status_args.h"
#include "launcher/cli/torchrun_main.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args.front() == "master") {
    return ftrun::launcher::RunMaster({args.begin() + 1, args.end()});
  }
  if (!args.empty() && args.front() == "status") {
    return ftrun::launcher::RunStatus({args.begin() + 1, args.end()});
  }
  return ftrun::launcher::RunTorchrun(args);
}
