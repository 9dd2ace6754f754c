// The open-file limit. An agent or a rendezvous server holds a socket per peer and a pipe or
// file per worker stream, so it runs with its soft RLIMIT_NOFILE raised to the hard limit
// (RaiseFdSoftLimit, once at start). Its children must not notice: the worker spawner puts
// the soft limit back to what ftrun was started with (StartingFdSoftLimit) before exec, so
// workers see the same limits as under torchrun.
// Thread: RaiseFdSoftLimit once, before any thread starts; StartingFdSoftLimit is a plain
// read, safe between fork and exec. Errors: a limit that cannot be raised is left as it is.
#pragma once

#include <sys/resource.h>

namespace ftrun {

// Raises the soft limit to the hard one and remembers the starting soft limit.
void RaiseFdSoftLimit();
// The soft limit ftrun was started with, or (rlim_t)-1 when RaiseFdSoftLimit changed nothing.
rlim_t StartingFdSoftLimit();

}  // namespace ftrun
