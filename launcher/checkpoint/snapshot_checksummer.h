// SnapshotChecksummer: computes the CRC-32C of snapshots and replicas on a thread of its own,
// not on the agent's loop (0.11 s per GiB would stall every other request; only a commit's
// snapshot of at most 256 KiB is summed there, cheaper than the hand-off): the checksum
// a snapshot gets when it commits (its CommitChecksum), and the checksum of the bytes as they
// are now, which a restore compares with the recorded one before handing them over.
//
// It reads through its own mapping of a duplicate of the buffer's descriptor (MemfdMappings),
// so a snapshot is not pinned by its checksum (the worker's next save is never refused
// because of it). A snapshot's buffer handed out again (its generation raised) before or
// while it was read gives no value: the bytes read may be a newer save's.
//
// Jobs run one at a time in the order given: a restore's checksum queued after a commit's
// finds that commit's value settled.
//
// Thread: Commit/Current and the destructor on the loop; `done` runs on the loop (dropped once
// the checksummer is gone); CommitChecksum values settle on its thread. The thread does not
// log (it hands what happened to `done`). Ownership: the loop outlives it. Errors: nullopt.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "launcher/checkpoint/snapshot_store.h"
#include "launcher/replica/replica_store.h"

namespace ftrun::launcher {

inline constexpr size_t kInlineChecksumBytes = 256 * 1024;

class SnapshotChecksummer {
 public:
  // On the loop: the checksum, or nullopt with `why` (superseded, or a system call's error).
  using Done = std::function<void(std::optional<uint32_t> crc, const std::string& why)>;

  explicit SnapshotChecksummer(boost::asio::io_context& loop);
  ~SnapshotChecksummer();
  SnapshotChecksummer(const SnapshotChecksummer&) = delete;
  SnapshotChecksummer& operator=(const SnapshotChecksummer&) = delete;

  // The checksum of the committed `view`: settles view.meta.checksum, then `done`. A snapshot
  // of at most kInlineChecksumBytes is summed at once, on the calling thread (the loop), and
  // `done` runs before Commit returns (at 0.11 s/GiB that is under 30 us).
  void Commit(const SnapshotView& view, Done done);
  // The checksum of the bytes of `view` (or `replica`, pinned until `done`) as they are now.
  void Current(const SnapshotView& view, Done done);
  void Current(const ReplicaView& replica, Done done);

 private:
  struct Job {
    int fd = -1;  // our duplicate, closed after the job
    size_t bytes = 0;
    std::shared_ptr<const std::atomic<uint64_t>> generation;  // null: pinned by `keep`
    uint64_t expected = 0;
    std::shared_ptr<const void> keep;
    CommitChecksum settle;  // none: nothing to settle
    Done done;
  };
  void Queue(int fd, Job job);
  void Run();
  void Finish(Job& job, std::optional<uint32_t> crc, std::string why);

  boost::asio::io_context& loop_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // read on the loop only
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job> queue_;  // under mu_
  bool stop_ = false;      // under mu_
  std::thread thread_;     // last: started once the fields above exist
};

}  // namespace ftrun::launcher
