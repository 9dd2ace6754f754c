// Control directories left behind by agents that are gone (an agent killed with SIGKILL
// cannot remove its ftrun-control-XXXXXX directory): at start, an agent removes every one
// under its temporary root that is provably dead — owned by this user, holding nothing but
// its agent.sock, and that socket refusing connections (no process listens on it any more).
// A directory of a live agent, one still being set up (no socket yet), or one with anything
// else in it is left alone. Errors are logged and ignored: this is housekeeping.
// Thread: any (the agent calls it once at start, before its loop runs); no blocking beyond a
// local connect(2), which a Unix socket answers at once.
#pragma once

#include <string>

namespace ftrun::launcher {

// Returns how many directories it removed.
int RemoveStaleControlDirs(const std::string& tmp_root);

}  // namespace ftrun::launcher
