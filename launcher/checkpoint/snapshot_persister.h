// SnapshotPersister: writes memory snapshots to storage off the agent's loop. Each request is
// a WriteCheckpoint (checkpoint_writer.h: ftrun's checkpoint format, tmp + fsync + rename +
// manifest with CRC-32s, optional tracker), or a StageShards for a `shared` request (some shards
// of a multi-node step; staged_checkpoint.h), run on the persister's own thread, one request at a
// time in the order given; its outcome (the final directory, or an error naming the path,
// e.g. a full disk) is posted to the loop, where the caller reports it (the persister logs
// only at debug).
//
// The request's SnapshotViews pin their buffers (SnapshotStore will not hand them to a save)
// until the request is written; they are dropped on the persister's thread before `done` is
// posted, so when `done` runs the buffers are free again.
//
// Thread: Persist on the loop; `done` runs on the loop, exactly once per request. Ownership:
// the caller owns the persister; the loop outlives it. The destructor waits for the request
// being written (a final-failure persist should finish before the agent exits) and completes
// the requests not started with an error saying so; their `done` still runs if the loop does.
#pragma once

#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "common/result.h"
#include "launcher/checkpoint/checkpoint_writer.h"

namespace ftrun::launcher {

class SnapshotPersister {
 public:
  using Done = std::function<void(Result<std::string> final_dir)>;

  explicit SnapshotPersister(boost::asio::io_context& loop);
  ~SnapshotPersister();
  SnapshotPersister(const SnapshotPersister&) = delete;
  SnapshotPersister& operator=(const SnapshotPersister&) = delete;

  void Persist(CheckpointRequest request, Done done);

 private:
  void Run();
  void Complete(Done done, Result<std::string> outcome);

  boost::asio::io_context& loop_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<CheckpointRequest, Done>> queue_;  // guarded by mutex_
  bool stopping_ = false;                                 // guarded by mutex_
  std::thread thread_;                                    // last: starts after the rest
};

}  // namespace ftrun::launcher
