// What the snapshot tests share: a stand-in for the worker's side of a save (map the leased
// memfd, copy the bytes in, commit with their crc32), a stray write into a snapshot, a writer
// killed mid-persist, and checkpoint.py run on what the agent wrote.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <span>
#include <string>

#include "launcher/checkpoint/snapshot_store.h"
#include "launcher/checkpoint/temp_step_dir.h"
#include "tests/support/test_support.h"

namespace ftrun::launcher::testing {

// A child process that makes step `step`'s temporary directory under `root`, writes into it
// and is SIGKILLed while it holds it, as an agent killed mid-persist. Returns the directory.
inline std::string KilledTempStepDir(const std::string& root, uint64_t step) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    auto temp = TempStepDir::Make(root, step);
    if (!temp) _exit(3);
    if (FILE* f = std::fopen((temp->path() + "/part.bin").c_str(), "w")) {
      std::fputs("half of a gigabyte", f);
      std::fclose(f);
    }
    const std::string path = temp->path() + "\n";
    if (write(fds[1], path.data(), path.size()) < 0) _exit(4);
    raise(SIGKILL);
  }
  close(fds[1]);
  std::string path;
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') path += c;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  return path;
}

inline std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// Copies `content` into the first bytes of `fd` through a shared mapping, as a worker does.
inline void WriteThrough(int fd, size_t offset, const std::string& content) {
  size_t length = offset + content.size();
  void* map = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  std::memcpy(static_cast<char*>(map) + offset, content.data(), content.size());
  munmap(map, length);
}

// A whole save of `content` by `rank` at `step`; returns the leased descriptor.
inline int Save(SnapshotStore& store, int rank, uint64_t step, const std::string& content,
                const std::string& layout = "{}") {
  auto lease = store.Begin(rank, step, content.size());
  EXPECT_TRUE(lease) << (lease ? "" : lease.error().message);
  if (!lease) return -1;
  WriteThrough(lease->fd, 0, content);
  SnapshotMeta meta;
  meta.layout = layout;
  meta.checksum = CommitChecksum::Known(SnapshotChecksum(AsBytes(content)));
  auto committed = store.Commit(rank, step, std::move(meta));
  EXPECT_TRUE(committed) << (committed ? "" : committed.error().message);
  return lease->fd;
}

inline std::string Contents(const SnapshotView& view) {
  auto data = view.data();
  return std::string(reinterpret_cast<const char*>(data.data()), data.size());
}

// A big, non-repeating content of `bytes` bytes.
inline std::string Pattern(size_t bytes, char seed) {
  std::string s(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) s[i] = static_cast<char>(seed + i * 7 + i / 251);
  return s;
}

// The names in `dir`, sorted, each followed by a space.
inline std::string NamesIn(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.insert(entry.path().filename().string());
  }
  std::string list;
  for (const auto& name : names) list += name + " ";
  return list;
}

// Runs Python code with ftrun's helper package (checkpoint.py) importable; returns its stdout
// and, after "exit=", its exit status.
inline std::string Python(const std::string& code) {
  std::string command = "PYTHONPATH=" + ftrun::testing::SourceDir() +
                        "/scripts/python /usr/bin/python3 -c '" + code + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  return out + "exit=" + std::to_string(WEXITSTATUS(pclose(pipe)));
}

// What checkpoint.latest() finds under root, verified with checksums.
inline std::string PythonLatest(const std::string& root) {
  return Python("from ftrun import checkpoint as c\nk = c.latest(\"" + root +
                "\")\nprint(k and (k.step, sorted(c.verify(k.path)[\"groups\"])))");
}

}  // namespace ftrun::launcher::testing
