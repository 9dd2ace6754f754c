#include "common/fd_limit.h"

namespace ftrun {
namespace {

rlim_t starting_soft = static_cast<rlim_t>(-1);

}  // namespace

void RaiseFdSoftLimit() {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == rl.rlim_max) return;
  const rlim_t before = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &rl) == 0) starting_soft = before;
}

rlim_t StartingFdSoftLimit() { return starting_soft; }

}  // namespace ftrun
