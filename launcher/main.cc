// ftrun: a fault-tolerant drop-in for torchrun, msrun and dlrover-run. The personality comes
// from the name it is run as (a symlink named torchrun, msrun or dlrover-run) or from the first
// word: `ftrun msrun ...`, `ftrun dlrover-run ...`, `ftrun torchrun ...`,
// `ftrun torch.distributed.launch ...`; `ftrun master ...` runs
// the rendezvous server alone, `ftrun status ...` asks one about its job, `ftrun report ...`
// writes the post-mortem page of a job from its logs; anything else is
// torchrun's command line.
#include <map>
#include <string>
#include <vector>

#include "common/fd_limit.h"
#include "launcher/cli/master_args.h"
#include "launcher/cli/msrun_main.h"
#include "launcher/cli/report_args.h"
#include "launcher/cli/status_args.h"
#include "launcher/cli/torchrun_main.h"

namespace {

using Run = int (*)(const std::vector<std::string>&);

// The personalities, by the name ftrun runs as or by its first word.
// `ftrun torch.distributed.run ...` and `ftrun torch.distributed.launch ...` take the lines of
// `python -m torch.distributed.run|launch ...` with `python -m` replaced by `ftrun`.
const std::map<std::string, Run> kPersonalities = {
    {"torchrun", ftrun::launcher::RunTorchrun},
    {"torch.distributed.run", ftrun::launcher::RunTorchrun},
    {"torch.distributed.launch", ftrun::launcher::RunDistributedLaunch},
    {"msrun", ftrun::launcher::RunMsrun},
    {"dlrover-run", ftrun::launcher::RunDlroverRun}};
// Subcommands: only as the first word.
const std::map<std::string, Run> kSubcommands = {{"master", ftrun::launcher::RunMaster},
                                                 {"status", ftrun::launcher::RunStatus},
                                                 {"report", ftrun::launcher::RunReport}};

}  // namespace

int main(int argc, char** argv) {
  ftrun::RaiseFdSoftLimit();  // one socket per peer, pipes per worker; workers get it back
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string name = argc > 0 ? argv[0] : "ftrun";
  name = name.substr(name.find_last_of('/') + 1);
  if (auto it = kPersonalities.find(name); it != kPersonalities.end()) return it->second(args);
  const std::string word = args.empty() ? "" : args.front();
  const std::vector<std::string> rest =
      args.empty() ? args : std::vector<std::string>(args.begin() + 1, args.end());
  if (auto it = kSubcommands.find(word); it != kSubcommands.end()) return it->second(rest);
  if (auto it = kPersonalities.find(word); it != kPersonalities.end()) return it->second(rest);
  return ftrun::launcher::RunTorchrun(args);
}
