#include "launcher/checkpoint/snapshot_checksummer.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

#include "launcher/checkpoint/memfd_mappings.h"

namespace ftrun::launcher {
namespace {

const char* kSuperseded = "the buffer was handed to a newer save before it was read";

// Whether the buffer still holds the save it held at `expected` (null: pinned, always).
bool Unchanged(const std::shared_ptr<const std::atomic<uint64_t>>& generation, uint64_t expected) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return !generation || generation->load() == expected;
}

}  // namespace

SnapshotChecksummer::SnapshotChecksummer(boost::asio::io_context& loop)
    : loop_(loop), thread_([this] { Run(); }) {}

SnapshotChecksummer::~SnapshotChecksummer() {
  *alive_ = false;
  std::deque<Job> left;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    left.swap(queue_);
  }
  wake_.notify_all();
  thread_.join();
  for (auto& job : left) {
    job.settle.Settle(std::nullopt);  // a pusher or persister waiting on it goes on
    close(job.fd);
  }
}

void SnapshotChecksummer::Commit(const SnapshotView& view, Done done) {
  if (view.bytes <= kInlineChecksumBytes) {
    // A hand-off to the thread and back costs two wake-ups, more than these bytes' CRC; and
    // no save can write into them before the loop hands the buffer out again.
    if (!Unchanged(view.generation_counter(), view.generation)) {
      view.meta.checksum.Settle(std::nullopt);
      if (done) done(std::nullopt, kSuperseded);
      return;
    }
    const uint32_t crc = SnapshotChecksum(view.data());
    view.meta.checksum.Settle(crc);
    if (done) done(crc, "");
    return;
  }
  Queue(view.fd(), Job{.bytes = view.bytes,
                       .generation = view.generation_counter(),
                       .expected = view.generation,
                       .keep = nullptr,
                       .settle = view.meta.checksum,
                       .done = std::move(done)});
}

void SnapshotChecksummer::Current(const SnapshotView& view, Done done) {
  Queue(view.fd(), Job{.bytes = view.bytes,
                       .generation = view.generation_counter(),
                       .expected = view.generation,
                       .keep = nullptr,
                       .settle = {},
                       .done = std::move(done)});
}

void SnapshotChecksummer::Current(const ReplicaView& replica, Done done) {
  Queue(replica.fd(), Job{.bytes = replica.bytes,
                          .generation = nullptr,
                          .expected = 0,
                          .keep = std::make_shared<ReplicaView>(replica),
                          .settle = {},
                          .done = std::move(done)});
}

void SnapshotChecksummer::Queue(int fd, Job job) {
  job.fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (job.fd < 0) {
    const std::string why = std::string("dup: ") + std::strerror(errno);
    job.settle.Settle(std::nullopt);
    boost::asio::post(loop_, [alive = alive_, done = std::move(job.done), why] {
      if (*alive) done(std::nullopt, why);
    });
    return;
  }
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void SnapshotChecksummer::Run() {
  MemfdMappings mappings;
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    auto unchanged = [&] { return Unchanged(job.generation, job.expected); };
    if (!unchanged()) {
      Finish(job, std::nullopt, kSuperseded);
      continue;
    }
    auto data = mappings.Map(job.fd, job.bytes);
    if (!data) {
      Finish(job, std::nullopt, data.error().message);
      continue;
    }
    const uint32_t crc = SnapshotChecksum(*data);
    if (!unchanged()) {
      Finish(job, std::nullopt, kSuperseded);
      continue;
    }
    Finish(job, crc, "");
  }
}

void SnapshotChecksummer::Finish(Job& job, std::optional<uint32_t> crc, std::string why) {
  close(job.fd);
  job.keep.reset();  // a pinned replica is free again before `done` runs
  job.settle.Settle(crc);
  boost::asio::post(loop_, [alive = alive_, done = std::move(job.done), crc, why = std::move(why)] {
    if (*alive && done) done(crc, why);
  });
}

}  // namespace ftrun::launcher
