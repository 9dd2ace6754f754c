#include "launcher/workers/worker_stdio.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ftrun::launcher {

Result<std::unique_ptr<WorkerStdio>> WorkerStdio::Open(boost::asio::io_context& io,
                                                       const ProcessPlan& plan) {
  std::unique_ptr<WorkerStdio> s(new WorkerStdio());
  auto out = s->OpenStream(io, plan.out);
  if (!out) return out.error();
  s->out_ = *out;
  if (plan.err_to_out) {
    s->err_ = s->out_;
    return s;
  }
  auto err = s->OpenStream(io, plan.err);
  if (!err) return err.error();
  s->err_ = *err;
  return s;
}

WorkerStdio::~WorkerStdio() { CloseFiles(); }

Result<int> WorkerStdio::OpenStream(boost::asio::io_context& io, const StreamPlan& s) {
  switch (s.kind) {
    case StreamPlan::Kind::kInherit:
      return -1;
    case StreamPlan::Kind::kFile: {
      int fd = OpenLogFile(s.file, s.append);
      if (fd < 0) return Error{"cannot open " + s.file + ": " + std::strerror(errno)};
      files_.push_back(fd);
      return fd;
    }
    case StreamPlan::Kind::kTee: {
      auto tee = OutputTee::Create(io, s.tee);
      if (!tee) return tee.error();
      int fd = (*tee)->write_fd();
      tees_.push_back(std::move(*tee));
      return fd;
    }
  }
  return -1;
}

void WorkerStdio::CloseFiles() {
  for (int fd : files_) ::close(fd);
  files_.clear();
}

void WorkerStdio::Spawned() {
  CloseFiles();
  for (auto& t : tees_) {
    t->CloseWriteEnd();
    t->Start();
  }
}

void WorkerStdio::Drain() {
  for (auto& t : tees_) t->Drain();
}

}  // namespace ftrun::launcher
