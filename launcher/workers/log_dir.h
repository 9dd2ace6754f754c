// The workers' log directories, laid out as torchrun does:
//   <log_dir or $TMPDIR/torchelastic_XXXXXXXX>/<run_id>_XXXXXXXX/attempt_<n>/<local_rank>/
// holding stdout.log / stderr.log (when redirected or tee'd) and error.json (when the worker
// writes one). "--log-dir /dev/null" disables all files.
//
// Thread: loop only. Errors name the path.
#pragma once

#include <string>

#include "common/environment.h"
#include "common/result.h"

namespace ftrun::launcher {

class RunLogDir {
 public:
  // Creates the base directory (if missing) and a fresh run directory in it.
  static Result<RunLogDir> Create(const std::string& log_dir, const std::string& run_id,
                                  const EnvMap& env);

  bool disabled() const { return disabled_; }
  const std::string& run_dir() const { return run_dir_; }

  // Creates attempt_<restart_count>/<local_rank>/ for every local rank and returns the attempt
  // directory. torchrun deletes an attempt directory it reuses (a membership change keeps
  // the restart count); ftrun keeps the old one as attempt_<n>.<k> so no log is lost.
  Result<std::string> PrepareAttempt(int restart_count, int nproc);

  // <attempt dir>/<local_rank>/<file>, or "" when disabled.
  static std::string RankFile(const std::string& attempt_dir, int local_rank,
                              const std::string& file);

 private:
  bool disabled_ = false;
  std::string run_dir_;
};

}  // namespace ftrun::launcher
