// Helpers for tests that run real processes: a temporary directory, polling with a deadline
// (never a fixed sleep before an assertion), process inspection through /proc, and running
// the ftrun binary with captured output and a hard timeout.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ftrun::testing {

// Whether a process's RSS means anything in this build: not under a sanitizer (ASan holds freed
// memory in quarantine and shadows every byte; TSan keeps a history that grows with the run).
#if defined(__SANITIZE_ADDRESS__) || defined(FTRUN_TSAN)
inline constexpr bool kMemoryIsMeasurable = false;
#else
inline constexpr bool kMemoryIsMeasurable = true;
#endif

// Paths of the binaries under test (set by CMake).
std::string FtrunBinary();
std::string FakeWorkerBinary();
std::string SourceDir();

// ftrun's arguments for a job of fake workers: `head`, then `options`, then
// --no-python <fake_worker> `actions`.
std::vector<std::string> FakeWorkerJob(std::vector<std::string> head,
                                       const std::vector<std::string>& options,
                                       const std::vector<std::string>& actions);

// A "<key>: <n> kB" field of /proc/<pid>/status (e.g. "VmRSS", "VmHWM"); 0 when absent.
long ProcStatusKb(pid_t pid, const std::string& key);

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Polls `cond` every few milliseconds until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout);

std::string ReadFile(const std::string& path);
// Writes into `dir` a test CA (ca.pem, ca.key) and server and client certificates signed by
// it for localhost/127.0.0.1 ({server,client}.{pem,key}); with `other_ca`, also a CA the job
// does not trust (other.pem, other.key). False when the openssl CLI failed.
bool MakeTestCertificates(const std::string& dir, bool other_ca = false);

bool FileExists(const std::string& path);
// A TCP port for a server a test starts itself (ftrun master, an agent's rendezvous, etcd):
// free on 127.0.0.1 and ::1, and taken below the kernel's ephemeral range, so that no socket
// the kernel numbers on its own (every outgoing connection of the tests running beside this
// one) can take it between the pick and the bind. Throws when no port is free.
int TestPort();
std::vector<std::string> Lines(const std::string& text);
// KEY=VALUE lines into a map.
std::map<std::string, std::string> ParseEnvFile(const std::string& path);

// True while pid exists and is not a zombie.
bool ProcessAlive(pid_t pid);
// The process state letter from /proc/<pid>/stat ('Z' for a zombie), or 0 if gone.
char ProcessState(pid_t pid);
// The pids of the children of `pid`, from /proc.
std::vector<pid_t> ChildrenOf(pid_t pid);
// Reads a pid written by fake_worker's pidfile/grandchild actions.
pid_t ReadPid(const std::string& path);

struct RunResult {
  int exit_code = -1;  // shell style: 128 + signal for a signal death
  int signal = 0;
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs ftrun (or any program) in the background with stdout/stderr captured to files.
class ChildRun {
 public:
  ChildRun(const std::string& program, const std::vector<std::string>& args,
           const std::map<std::string, std::string>& extra_env = {},
           const std::vector<std::string>& unset_env = {});
  ~ChildRun();
  pid_t pid() const;
  void Signal(int sig);
  // Waits for the exit; after `timeout` kills the process group and reports timed_out.
  RunResult Wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // The output so far.
  std::string Err() const;
  std::string Out() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs ftrun with `args` to completion.
RunResult RunFtrun(const std::vector<std::string>& args,
                   const std::map<std::string, std::string>& extra_env = {},
                   std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace ftrun::testing
