#include "launcher/checkpoint/snapshot_persister.h"

#include <boost/asio/post.hpp>

#include "common/log.h"
#include "launcher/checkpoint/staged_checkpoint.h"

namespace ftrun::launcher {

SnapshotPersister::SnapshotPersister(boost::asio::io_context& loop)
    : loop_(loop), thread_([this] { Run(); }) {}

SnapshotPersister::~SnapshotPersister() {
  std::deque<std::pair<CheckpointRequest, Done>> not_started;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    not_started.swap(queue_);
  }
  wake_.notify_all();
  thread_.join();
  for (auto& [request, done] : not_started) {
    std::string root = request.root;
    request.parts.clear();  // unpins the snapshots now
    Complete(std::move(done), Error{"checkpoint of step " + std::to_string(request.step) +
                                    " under " + root + ": not written (the agent is stopping)"});
  }
}

void SnapshotPersister::Persist(CheckpointRequest request, Done done) {
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(std::move(request), std::move(done));
  }
  wake_.notify_one();
}

void SnapshotPersister::Run() {
  for (;;) {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    auto [request, done] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    // The caller reports the outcome (one line per save, on the loop).
    auto outcome = request.shared ? StageShards(request) : WriteCheckpoint(request);
    LauncherLog()->debug("persister: step {} {}; letting go of its snapshots", request.step,
                         outcome ? "written" : "not written");
    request.parts.clear();  // unpins the snapshots before `done` runs
    Complete(std::move(done), std::move(outcome));
  }
}

void SnapshotPersister::Complete(Done done, Result<std::string> outcome) {
  boost::asio::post(loop_, [done = std::move(done), outcome = std::move(outcome)]() mutable {
    done(std::move(outcome));
  });
}

}  // namespace ftrun::launcher
