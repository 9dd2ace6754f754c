// A scriptable stand-in for a training process, for integration tests and benchmarks. It
// runs its arguments as a list of actions, in order:
//   exit N                 exit with code N
//   sleep SECONDS          sleep (fractions allowed)
//   kill-self SIG          die of signal SIG (number)
//   ignore SIG             ignore signal SIG from now on
//   on-term-exit N         on SIGTERM, exit with code N
//   pidfile DIR            write our pid to DIR/<RANK>.pid
//   grandchild DIR         fork a child that sleeps forever; its pid goes to DIR/<RANK>.gpid
//   setsid-child DIR       fork a child that calls setsid and sleeps forever; its pid goes to
//                          DIR/<RANK>.<attempt>.spid (it escapes the process-group kill)
//   double-fork DIR        fork a child that forks a grandchild (in a process group of its
//                          own, sleeping forever) and exits; the grandchild's pid goes to
//                          DIR/<RANK>.<attempt>.dpid
//   flood BYTES            write BYTES to stdout in 100-byte lines (0: forever)
//   flood-line BYTES       write BYTES to stdout without a newline (0: forever)
//   env FILE               write our environment to FILE.<RANK> (KEY=VALUE lines)
//   fds FILE               write our open fd numbers (above 2) to FILE.<RANK>
//   print TEXT             TEXT and a newline to stdout
//   eprint TEXT            TEXT and a newline to stderr
//   stamp FILE             append "<RANK> <attempt> <CLOCK_REALTIME ns>" to FILE
//   record FILE            append "rank=R local=L group=G world=W attempt=A master=H:P role=X"
//   error-json TEXT        write a torch @record-style error file with message TEXT
//   if-rank R ACTION...    run the next action only on global rank R
//   if-attempt K ACTION..  run the next action only when TORCHELASTIC_RESTART_COUNT == K
//   if-missing PATH ACT..  run the next action only while PATH does not exist
//   touch PATH             create PATH
//   exit-once PATH         if PATH does not exist: create it and exit 1; else go on
//   wait-file PATH         sleep until PATH exists
//   connect-master         retry a TCP connection to MASTER_ADDR:MASTER_PORT (the store a
//                          real worker must reach) every 0.1 s until one succeeds
#include <dirent.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

std::string Env(const char* k, const char* def = "") {
  const char* v = std::getenv(k);
  return v ? v : def;
}

int g_term_exit = -1;
void OnTerm(int) { _exit(g_term_exit); }

// Readers poll for these files: write a temporary, then rename, so they never see half.
void WriteAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), path.c_str());
}

long long NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string rank = Env("RANK", "0");
  const std::string attempt = Env("TORCHELASTIC_RESTART_COUNT", "0");
  std::vector<std::string> a(argv + 1, argv + argc);
  bool skip_next = false;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string& op = a[i];
    auto arg = [&]() -> std::string {
      if (i + 1 >= a.size()) {
        std::cerr << "fake_worker: " << op << " needs an argument\n";
        std::exit(100);
      }
      return a[++i];
    };
    const bool condition = op == "if-rank" || op == "if-attempt" || op == "if-missing";
    if (skip_next) {  // every action takes one argument: skip both; conditions chain
      skip_next = condition;
      ++i;
      continue;
    }
    if (condition) {
      std::string want = arg();
      struct stat st {};
      skip_next = op == "if-missing" ? stat(want.c_str(), &st) == 0
                                     : want != (op == "if-rank" ? rank : attempt);
      continue;
    }
    if (op == "exit") return std::atoi(arg().c_str());
    if (op == "sleep") {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(arg().c_str())));
    } else if (op == "kill-self") {
      int sig = std::atoi(arg().c_str());
      signal(sig, SIG_DFL);
      raise(sig);
      pause();
    } else if (op == "ignore") {
      signal(std::atoi(arg().c_str()), SIG_IGN);
    } else if (op == "on-term-exit") {
      g_term_exit = std::atoi(arg().c_str());
      signal(SIGTERM, OnTerm);
    } else if (op == "pidfile") {
      WriteAtomically(arg() + "/" + rank + ".pid", std::to_string(getpid()) + "\n");
    } else if (op == "grandchild") {
      std::string dir = arg();
      pid_t p = fork();
      if (p == 0) {
        for (;;) pause();
      }
      WriteAtomically(dir + "/" + rank + ".gpid", std::to_string(p) + "\n");
    } else if (op == "setsid-child" || op == "double-fork") {
      const std::string path =
          arg() + "/" + rank + "." + attempt + (op == "setsid-child" ? ".spid" : ".dpid");
      const bool setsid_child = op == "setsid-child";
      if (fork() == 0) {
        if (setsid_child) {
          setsid();
        } else if (fork() != 0) {
          _exit(0);
        } else {
          setpgid(0, 0);
        }
        WriteAtomically(path, std::to_string(getpid()) + "\n");
        for (;;) pause();
      }
      struct stat st {};
      while (stat(path.c_str(), &st) != 0) usleep(1000);
    } else if (op == "flood" || op == "flood-line") {
      const long long total = std::atoll(arg().c_str());
      std::string chunk(op == "flood" ? 99 : 4096, 'x');
      if (op == "flood") chunk += '\n';
      for (long long sent = 0; total == 0 || sent < total;) {
        const size_t n = total == 0 ? chunk.size()
                                    : static_cast<size_t>(std::min<long long>(
                                          static_cast<long long>(chunk.size()), total - sent));
        const ssize_t w = write(STDOUT_FILENO, chunk.data(), n);
        if (w <= 0) return 102;
        sent += w;
      }
    } else if (op == "env") {
      std::ofstream out(arg() + "." + rank);
      for (char** e = environ; *e; ++e) out << *e << "\n";
    } else if (op == "fds") {
      std::vector<int> fds;
      DIR* d = opendir("/proc/self/fd");
      int self = dirfd(d);
      while (dirent* ent = readdir(d)) {
        int fd = std::atoi(ent->d_name);
        if (ent->d_name[0] != '.' && fd > 2 && fd != self) fds.push_back(fd);
      }
      closedir(d);
      std::ofstream out(arg() + "." + rank);
      for (int fd : fds) out << fd << "\n";
    } else if (op == "print") {
      std::cout << arg() << std::endl;
    } else if (op == "eprint") {
      std::cerr << arg() << std::endl;
    } else if (op == "stamp") {
      std::ofstream(arg(), std::ios::app) << rank << " " << attempt << " " << NowNs() << "\n";
    } else if (op == "record") {
      std::ofstream(arg(), std::ios::app)
          << "rank=" << rank << " local=" << Env("LOCAL_RANK") << " group=" << Env("GROUP_RANK")
          << " world=" << Env("WORLD_SIZE") << " attempt=" << attempt
          << " master=" << Env("MASTER_ADDR") << ":" << Env("MASTER_PORT")
          << " role=" << Env("ROLE_NAME") << "\n";
    } else if (op == "error-json") {
      std::string text = arg();
      std::ofstream(Env("TORCHELASTIC_ERROR_FILE"))
          << "{\"message\": {\"message\": \"RuntimeError: " << text
          << "\", \"extraInfo\": {\"py_callstack\": \"Traceback (most recent call last):\\n  "
             "File \\\"train.py\\\", line 1\\nRuntimeError: "
          << text << "\", \"timestamp\": \"" << time(nullptr) << "\"}}}";
    } else if (op == "exit-once") {
      std::string path = arg();
      struct stat st {};
      if (stat(path.c_str(), &st) != 0) {
        std::ofstream(path, std::ios::app);
        return 1;
      }
    } else if (op == "touch") {
      std::ofstream(arg(), std::ios::app);
    } else if (op == "connect-master") {
      const std::string host = Env("MASTER_ADDR"), port = Env("MASTER_PORT");
      for (bool connected = false; !connected; usleep(100000)) {
        addrinfo hints{};
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) continue;
        for (addrinfo* ai = res; ai && !connected; ai = ai->ai_next) {
          const int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
          if (fd < 0) continue;
          connected = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
          close(fd);
        }
        freeaddrinfo(res);
      }
    } else if (op == "wait-file") {
      std::string path = arg();
      struct stat st {};
      while (stat(path.c_str(), &st) != 0) usleep(2000);
    } else {
      std::cerr << "fake_worker: unknown action " << op << "\n";
      return 101;
    }
  }
  return 0;
}
