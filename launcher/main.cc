// ftrun: a fault-tolerant drop-in for torchrun, msrun and dlrover-run. The personality comes
// from the name it is run as (a symlink named torchrun, msrun or dlrover-run) or from the first
// word: `ftrun msrun ...`, `ftrun dlrover-run ...`, `ftrun torchrun ...`; `ftrun master ...` runs
// the rendezvous server alone, `ftrun status ...` asks one about its job; anything else is
// torchrun's command line.
#include <string>
#include <vector>

#include "launcher/cli/master_args.h"
#include "launcher/cli/msrun_main.h"
#include "launcher/cli/status_args.h"
#include "launcher/cli/torchrun_main.h"

int main(int argc, char** argv) {
  using namespace ftrun::launcher;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string name = argc > 0 ? argv[0] : "ftrun";
  name = name.substr(name.find_last_of('/') + 1);
  if (name == "msrun") return RunMsrun(args);
  if (name == "torchrun") return RunTorchrun(args);
  if (name == "dlrover-run") return RunTorchrun(args, Personality::kDlrover);
  const std::string word = args.empty() ? "" : args.front();
  const std::vector<std::string> rest =
      args.empty() ? args : std::vector<std::string>(args.begin() + 1, args.end());
  if (word == "master") return RunMaster(rest);
  if (word == "status") return RunStatus(rest);
  if (word == "msrun") return RunMsrun(rest);
  if (word == "torchrun") return RunTorchrun(rest);
  if (word == "dlrover-run") return RunTorchrun(rest, Personality::kDlrover);
  return RunTorchrun(args);
}
